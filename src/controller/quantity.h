// Kubernetes resource quantities ("2", "1500m", "1e3", "4Gi", ...) read as
// the API server reads them (k8s.io/apimachinery/pkg/api/resource,
// ParseQuantity), without its int64 overflows: a spec may hold any number of
// digits. Pure.
#pragma once

#include <cstdint>
#include <expected>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

namespace fcc::controller {

// value = (negative ? -1 : 1) * digits * 10^exponent10 * 2^exponent2, exactly.
struct Quantity {
  bool negative = false;
  // Significant decimal digits, no leading or trailing zeros; "" is zero.
  std::string digits;
  int64_t exponent10 = 0;
  int exponent2 = 0;  // 10 (Ki) .. 60 (Ei)

  bool zero() const { return digits.empty(); }
};

// <sign><digits>[.<digits>]<suffix>, the suffix one of n u m "" k M G T P E,
// Ki Mi Gi Ti Pi Ei, or e/E and a signed integer exponent. The error says
// what is wrong, not where (the caller names the field).
std::expected<Quantity, std::string> ParseQuantity(std::string_view text);
// The same for a manifest's value: a string, or a JSON number (as YAML
// gives `cpu: 2`).
std::expected<Quantity, std::string> ParseJsonQuantity(
    const nlohmann::json& value);

// The quantity times 10^scale, rounded up (Kubernetes' ScaledValue; scale 3
// is MilliValue), if it is not negative and at most `limit` (which must be
// below 10^18); nullopt otherwise.
std::optional<int64_t> ScaledValueAtMost(const Quantity& q, int scale,
                                         int64_t limit);

}  // namespace fcc::controller
