// RFC 5869 Appendix A, the SHA-256 test cases (A.1 - A.3).
#include "curve/hkdf.h"

#include <gtest/gtest.h>

#include <string>

namespace fcc::curve {
namespace {

std::string Range(int from, int to) {  // bytes from..to-1
  std::string s;
  for (int b = from; b < to; ++b) s.push_back(static_cast<char>(b));
  return s;
}

std::string Hex(std::string_view bytes) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  for (unsigned char c : bytes) {
    out.push_back(kDigits[c >> 4]);
    out.push_back(kDigits[c & 15]);
  }
  return out;
}

TEST(HkdfSha256, Rfc5869Case1) {
  const Secret okm = HkdfSha256(Range(0x00, 0x0d), std::string(22, '\x0b'),
                                Range(0xf0, 0xfa), 42);
  EXPECT_EQ(Hex(okm.reveal()),
            "3cb25f25faacd57a90434f64d0362f2a2d2d0a90cf1a5a4c5db02d56ecc4c5bf"
            "34007208d5b887185865");
}

TEST(HkdfSha256, Rfc5869Case2LongInputs) {
  const Secret okm =
      HkdfSha256(Range(0x60, 0xb0), Range(0x00, 0x50), Range(0xb0, 0x100), 82);
  EXPECT_EQ(Hex(okm.reveal()),
            "b11e398dc80327a1c8e7f78c596a49344f012eda2d4efad8a050cc4c19afa97c"
            "59045a99cac7827271cb41c65e590e09da3275600c2f09b8367793a9aca3db71"
            "cc30c58179ec3e87c14c01d5c1f3434f1d87");
}

TEST(HkdfSha256, Rfc5869Case3EmptySaltAndInfo) {
  const Secret okm = HkdfSha256("", std::string(22, '\x0b'), "", 42);
  EXPECT_EQ(Hex(okm.reveal()),
            "8da4e775a563c18f715f802a063c5a31b8a11f5c5ee1879ec3454e5f3c738d2d"
            "9d201395faa4b61a96c8");
}

}  // namespace
}  // namespace fcc::curve
