#include "controller/quantity.h"

#include <algorithm>
#include <array>
#include <charconv>
#include <limits>
#include <utility>

namespace fcc::controller {
namespace {

bool IsDigit(char c) { return c >= '0' && c <= '9'; }

// The suffix's power of ten and of two ("Ki": 2^10); nullopt if it is none
// of Kubernetes' (suffix.go: the decimal SI, the binary SI, or e/E and a
// signed integer, as strconv.ParseInt takes it).
struct Scale {
  int64_t exponent10 = 0;
  int exponent2 = 0;
};
std::optional<Scale> SuffixScale(std::string_view suffix) {
  static constexpr std::array<std::pair<std::string_view, int>, 10> kDecimal{
      {{"n", -9},
       {"u", -6},
       {"m", -3},
       {"", 0},
       {"k", 3},
       {"M", 6},
       {"G", 9},
       {"T", 12},
       {"P", 15},
       {"E", 18}}};
  static constexpr std::array<std::pair<std::string_view, int>, 6> kBinary{
      {{"Ki", 10}, {"Mi", 20}, {"Gi", 30}, {"Ti", 40}, {"Pi", 50}, {"Ei", 60}}};
  for (const auto& [name, power] : kDecimal) {
    if (suffix == name) return Scale{power, 0};
  }
  for (const auto& [name, power] : kBinary) {
    if (suffix == name) return Scale{0, power};
  }
  if (suffix.size() < 2 || (suffix[0] != 'e' && suffix[0] != 'E')) {
    return std::nullopt;
  }
  std::string_view exponent = suffix.substr(1);
  if (exponent[0] == '+') exponent.remove_prefix(1);
  // Go's int32(exponent) wraps a larger one around; refuse it instead.
  int32_t power = 0;
  const auto [end, ec] = std::from_chars(
      exponent.data(), exponent.data() + exponent.size(), power);
  if (ec != std::errc() || end != exponent.data() + exponent.size() ||
      exponent.empty() || exponent[0] == '+') {
    return std::nullopt;
  }
  return Scale{power, 0};
}

// digits * 2^power, digits a decimal string (power <= 60: a digit times
// 2^60 plus the carry fits in 64 bits).
std::string TimesPowerOfTwo(const std::string& digits, int power) {
  if (power == 0) return digits;
  std::string out;
  uint64_t carry = 0;
  for (auto it = digits.rbegin(); it != digits.rend(); ++it) {
    const uint64_t cur = (static_cast<uint64_t>(*it - '0') << power) + carry;
    out.push_back(static_cast<char>('0' + cur % 10));
    carry = cur / 10;
  }
  for (; carry > 0; carry /= 10) {
    out.push_back(static_cast<char>('0' + carry % 10));
  }
  std::reverse(out.begin(), out.end());
  return out;
}

}  // namespace

std::expected<Quantity, std::string> ParseQuantity(std::string_view text) {
  constexpr char kForm[] =
      "is not a Kubernetes quantity (a number with an optional suffix: "
      "2, 1500m, 0.5, 1e3, 2k, 4Gi)";
  if (text.empty()) return std::unexpected(kForm);
  Quantity q;
  size_t pos = 0;
  if (text[0] == '+' || text[0] == '-') {
    q.negative = text[0] == '-';
    ++pos;
  }
  const size_t num_start = pos;
  while (pos < text.size() && IsDigit(text[pos])) ++pos;
  std::string digits(text.substr(num_start, pos - num_start));
  size_t fraction = 0;
  if (pos < text.size() && text[pos] == '.') {
    const size_t start = ++pos;
    while (pos < text.size() && IsDigit(text[pos])) ++pos;
    fraction = pos - start;
    digits += text.substr(start, fraction);
  }
  // The suffix: letters of Kubernetes' suffixes, then an exponent's sign
  // and digits; anything after that is not a quantity.
  const size_t suffix_start = pos;
  while (pos < text.size() &&
         std::string_view("eEinumkKMGTP").find(text[pos]) !=
             std::string_view::npos) {
    ++pos;
  }
  if (pos < text.size() && (text[pos] == '+' || text[pos] == '-')) ++pos;
  while (pos < text.size() && IsDigit(text[pos])) ++pos;
  if (pos != text.size()) return std::unexpected(kForm);
  const auto scale = SuffixScale(text.substr(suffix_start));
  if (!scale) return std::unexpected(kForm);
  const size_t first = digits.find_first_not_of('0');
  if (first == std::string::npos) return Quantity{};  // zero, any sign
  digits.erase(0, first);
  const size_t last = digits.find_last_not_of('0');
  const auto trailing = static_cast<int64_t>(digits.size() - last - 1);
  digits.resize(last + 1);
  q.digits = std::move(digits);
  q.exponent10 = scale->exponent10 - static_cast<int64_t>(fraction) + trailing;
  q.exponent2 = scale->exponent2;
  return q;
}

std::expected<Quantity, std::string> ParseJsonQuantity(
    const nlohmann::json& value) {
  if (value.is_string()) {
    return ParseQuantity(std::string_view(value.get_ref<const std::string&>()));
  }
  if (value.is_number_integer())
    return ParseQuantity(std::string_view(value.dump()));
  // YAML's 2.5 or 1e3; nlohmann prints a double so that it reads back
  // ("2.5", "1e+20"), which is a quantity.
  if (value.is_number_float()) {
    return ParseQuantity(std::string_view(value.dump()));
  }
  return std::unexpected(
      "is not a Kubernetes quantity (a number, or a string such as 1500m or "
      "4Gi)");
}

std::optional<int64_t> ScaledValueAtMost(const Quantity& q, int scale,
                                         int64_t limit) {
  if (q.zero()) return 0;
  if (q.negative) return std::nullopt;
  constexpr int64_t kMaxDigits = 18;  // limit < 10^18
  const int64_t exponent = q.exponent10 + scale;
  // At least 10^(digits - 1 + exponent): too large before any arithmetic.
  if (static_cast<int64_t>(q.digits.size()) + exponent > kMaxDigits + 1) {
    return std::nullopt;
  }
  const std::string digits = TimesPowerOfTwo(q.digits, q.exponent2);
  const int64_t whole = static_cast<int64_t>(digits.size()) + exponent;
  if (whole > kMaxDigits) return std::nullopt;
  int64_t value = 0;
  for (int64_t i = 0; i < whole; ++i) {
    value = value * 10 +
            (i < static_cast<int64_t>(digits.size()) ? digits[i] - '0' : 0);
  }
  // Rounded up: any non-zero digit after the point adds one.
  const size_t kept = static_cast<size_t>(std::max<int64_t>(whole, 0));
  if (kept < digits.size() &&
      digits.find_first_not_of('0', kept) != std::string::npos) {
    ++value;
  }
  if (value > limit) return std::nullopt;
  return value;
}

}  // namespace fcc::controller
