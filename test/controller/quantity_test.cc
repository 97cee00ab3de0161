#include "controller/quantity.h"

#include <gtest/gtest.h>

#include <limits>
#include <optional>
#include <string>

namespace fcc::controller {
namespace {

using nlohmann::json;

constexpr int64_t kLarge = 999'999'999'999'999'999;  // below 10^18

// The value times 10^scale, rounded up; nullopt if not a quantity, negative
// or above kLarge.
std::optional<int64_t> Scaled(const std::string& text, int scale) {
  const auto q = ParseQuantity(std::string_view(text));
  if (!q) return std::nullopt;
  return ScaledValueAtMost(*q, scale, kLarge);
}

// Values as Kubernetes' ParseQuantity and MilliValue give them
// (k8s.io/apimachinery/pkg/api/resource, quantity_test.go's forms).
TEST(Quantity, EveryFormTheApiServerTakes) {
  EXPECT_EQ(Scaled("2", 3), 2000);
  EXPECT_EQ(Scaled("1500m", 3), 1500);
  EXPECT_EQ(Scaled("1.5", 3), 1500);
  EXPECT_EQ(Scaled(".5", 3), 500);
  EXPECT_EQ(Scaled("5.", 3), 5000);
  EXPECT_EQ(Scaled("1.G", 0), 1'000'000'000);
  EXPECT_EQ(Scaled("+3", 0), 3);
  EXPECT_EQ(Scaled("007", 0), 7);
  EXPECT_EQ(Scaled("1e3", 0), 1000);
  EXPECT_EQ(Scaled("1E3", 0), 1000);
  EXPECT_EQ(Scaled("1e+3", 0), 1000);
  EXPECT_EQ(Scaled("25e-3", 3), 25);
  EXPECT_EQ(Scaled("2k", 0), 2000);
  EXPECT_EQ(Scaled("3M", 0), 3'000'000);
  EXPECT_EQ(Scaled("4T", 0), 4'000'000'000'000);
  EXPECT_EQ(Scaled("5P", 0), 5'000'000'000'000'000);
  EXPECT_EQ(Scaled("1E", 0), std::nullopt);  // 10^18: above kLarge
  EXPECT_EQ(Scaled("1Ki", 0), 1024);
  EXPECT_EQ(Scaled("1.5Ki", 0), 1536);
  EXPECT_EQ(Scaled("0.5Mi", 0), 524288);
  EXPECT_EQ(Scaled("1Pi", 0), int64_t{1} << 50);
  EXPECT_EQ(Scaled("1Ei", 0), std::nullopt);  // 2^60: above kLarge
  EXPECT_EQ(Scaled("250u", 6), 250);
  EXPECT_EQ(Scaled("100n", 9), 100);
  // Zero, whatever its sign or form.
  EXPECT_EQ(Scaled("0", 3), 0);
  EXPECT_EQ(Scaled("-0", 3), 0);
  EXPECT_EQ(Scaled("0.000m", 3), 0);
  EXPECT_EQ(Scaled("0Ki", 0), 0);
  // No digits at all is zero to the API server too (its scanner reads the
  // number as "0"): "-", "." and a bare suffix.
  EXPECT_EQ(Scaled("-", 0), 0);
  EXPECT_EQ(Scaled(".", 0), 0);
  EXPECT_EQ(Scaled("Ki", 0), 0);
}

// MilliValue rounds up: a CPU of 1.5m is 2m, 1n is 1m.
TEST(Quantity, RoundsUpLikeMilliValue) {
  EXPECT_EQ(Scaled("1.5m", 3), 2);
  EXPECT_EQ(Scaled("1n", 3), 1);
  EXPECT_EQ(Scaled("1000001u", 3), 1001);
  EXPECT_EQ(Scaled("0.0000000000000000000000000001", 3), 1);
  EXPECT_EQ(Scaled("1.0001", 0), 2);
  EXPECT_EQ(Scaled("1.000", 0), 1);
}

// Any number of digits, any exponent an int32 holds: no overflow, no throw.
TEST(Quantity, HugeValuesAreAboveTheLimitNotWrapped) {
  EXPECT_EQ(Scaled("99999999999999999999", 3), std::nullopt);
  EXPECT_EQ(Scaled("9223372036854775807", 3), std::nullopt);
  EXPECT_EQ(Scaled("9223372036854775807m", 3), std::nullopt);
  EXPECT_EQ(Scaled("1e300", 0), std::nullopt);
  EXPECT_EQ(Scaled("1e2147483647", 0), std::nullopt);
  EXPECT_EQ(Scaled("1e-2147483648", 0), 1);
  EXPECT_EQ(Scaled("8Ei", 0), std::nullopt);
  EXPECT_EQ(Scaled(std::string(100000, '9'), 0), std::nullopt);
  EXPECT_EQ(Scaled("0." + std::string(100000, '0') + "1", 0), 1);
  const auto q = ParseQuantity(std::string_view("999999999999999999"));
  ASSERT_TRUE(q);
  EXPECT_EQ(ScaledValueAtMost(*q, 0, kLarge), kLarge);
  EXPECT_EQ(ScaledValueAtMost(*q, 0, kLarge - 1), std::nullopt);
}

TEST(Quantity, NegativeIsNotScaled) {
  const auto q = ParseQuantity(std::string_view("-2"));
  ASSERT_TRUE(q);
  EXPECT_TRUE(q->negative);
  EXPECT_EQ(ScaledValueAtMost(*q, 0, kLarge), std::nullopt);
}

TEST(Quantity, RefusesWhatTheApiServerRefuses) {
  for (const char* bad :
       {"", "two", "1.5 Gi", " 1", "1 ", "1Kb", "1ki", "1K", "1e", "1e+",
        "1e3.5", "1Ee3", "1m5", "1..5", "--1", "0x10", "1_000", "1Gi1", "∞"}) {
    const auto q = ParseQuantity(std::string_view(bad));
    EXPECT_FALSE(q) << '"' << bad << '"';
    if (!q) {
      EXPECT_NE(q.error().find("is not a Kubernetes quantity"),
                std::string::npos);
    }
  }
}

// The API server casts an exponent to int32, so 1e4294967296 reads as 1
// there; here it is refused rather than read as something else.
TEST(Quantity, RefusesAnExponentBeyondInt32) {
  EXPECT_FALSE(ParseQuantity(std::string_view("1e4294967296")));
  EXPECT_FALSE(ParseQuantity(std::string_view("1e-2147483649")));
  EXPECT_TRUE(ParseQuantity(std::string_view("1e-2147483648")));
}

// A manifest's value: a string, or a number as YAML gives it.
TEST(Quantity, JsonValues) {
  auto scaled = [](const json& value) -> std::optional<int64_t> {
    const auto q = ParseJsonQuantity(value);
    if (!q) return std::nullopt;
    return ScaledValueAtMost(*q, 3, kLarge);
  };
  EXPECT_EQ(scaled(json(2)), 2000);
  EXPECT_EQ(scaled(json(2.5)), 2500);
  EXPECT_EQ(scaled(json(1e20)), std::nullopt);
  EXPECT_EQ(scaled(json(std::numeric_limits<uint64_t>::max())), std::nullopt);
  EXPECT_EQ(scaled(json("250m")), 250);
  EXPECT_FALSE(ParseJsonQuantity(json(true)));
  EXPECT_FALSE(ParseJsonQuantity(json::object()));
  EXPECT_FALSE(ParseJsonQuantity(json()));
}

}  // namespace
}  // namespace fcc::controller
