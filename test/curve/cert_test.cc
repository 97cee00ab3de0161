#include "curve/cert.h"

#include <gtest/gtest.h>

#include <cctype>
#include <ostream>
#include <string>

namespace fcc::curve {
namespace {

const MiniClusterId kId{"default", "lammps", "uid-1"};

CurveKeypair TestKeys() {
  return DeriveKeypair(Secret(std::string(32, 'm')), kId);
}

std::string Rendered() {
  return std::string(RenderCert(kId.QualifiedName(), TestKeys()).reveal());
}

// Replaces the first occurrence of `from` in the rendered cert.
std::string Mutated(std::string_view from, std::string_view to) {
  std::string text = Rendered();
  const size_t at = text.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  return text.replace(at, from.size(), to);
}

TEST(RenderCert, HasExactlyTheFluxLayout) {
  const CurveKeypair keys = TestKeys();
  EXPECT_EQ(Rendered(),
            "#  ZeroMQ CURVE **Secret** Certificate\n"
            "#  DO NOT DISTRIBUTE\n"
            "\n"
            "metadata\n"
            "    name = \"default.lammps\"\n"
            "curve\n"
            "    public-key = \"" +
                keys.public_z85 +
                "\"\n"
                "    secret-key = \"" +
                std::string(keys.secret_z85.reveal()) + "\"\n");
}

TEST(RenderCert, RefusesNamesFluxWouldRefuse) {
  EXPECT_THROW(RenderCert("default.bad_name", TestKeys()),
               std::invalid_argument);
  EXPECT_THROW(RenderCert("a\"b", TestKeys()), std::invalid_argument);
}

TEST(ParseCert, RoundTripsTheRenderedCert) {
  auto parsed = ParseCert(Rendered());
  ASSERT_TRUE(parsed) << parsed.error();
  EXPECT_EQ(parsed->metadata.at("name"), "default.lammps");
  EXPECT_EQ(parsed->keys.public_z85, TestKeys().public_z85);
  EXPECT_TRUE(parsed->keys.secret_z85 == TestKeys().secret_z85);
}

TEST(ParseCert, AcceptsWhatFluxAccepts) {
  // Tabs for indentation, extra blank lines and comments, no metadata.
  std::string text = Mutated("    public-key", "\tpublic-key");
  EXPECT_TRUE(ParseCert(text)) << text;
  EXPECT_TRUE(ParseCert("# c\n\n" + Rendered() + "\n# trailing\n"));
  EXPECT_TRUE(
      ParseCert(Mutated("metadata\n    name = \"default.lammps\"\n", "")));
}

struct Malformed {
  std::string what;
  std::string text;
  std::string expected_error;  // a fragment of the message
};

class ParseCertRejects : public ::testing::TestWithParam<Malformed> {};

TEST_P(ParseCertRejects, WithAClearMessage) {
  const auto& c = GetParam();
  auto parsed = ParseCert(c.text);
  ASSERT_FALSE(parsed) << c.what;
  EXPECT_NE(parsed.error().find(c.expected_error), std::string::npos)
      << c.what << ": " << parsed.error();
  // Never echo key material.
  EXPECT_EQ(parsed.error().find(std::string(TestKeys().secret_z85.reveal())),
            std::string::npos);
}

std::vector<Malformed> MalformedCases() {
  const CurveKeypair keys = TestKeys();
  const CurveKeypair other = DeriveKeypair(Secret(std::string(32, 'o')), kId);
  const std::string secret(keys.secret_z85.reveal());
  return {
      {"underscore in metadata value",
       Mutated("default.lammps", "default_lammps"), "refuses"},
      {"comma in metadata value", Mutated("default.lammps", "a,b"), "refuses"},
      {"semicolon in metadata value", Mutated("default.lammps", "a;b"),
       "refuses"},
      {"39-char public key",
       Mutated(keys.public_z85, keys.public_z85.substr(1)), "40 Z85"},
      {"41-char secret key", Mutated(secret, secret + "a"), "40 Z85"},
      {"non-Z85 char in key",
       Mutated(keys.public_z85, "\"" + keys.public_z85.substr(1)), "refuses"},
      {"mismatched pair", Mutated(keys.public_z85, other.public_z85),
       "mismatched"},
      {"indented section header", Mutated("curve\n", "  curve\n"),
       "must not be indented"},
      {"indented metadata header", Mutated("metadata\n", " metadata\n"),
       "must not be indented"},
      {"entry before any section", "    name = \"x\"\n" + Rendered(),
       "before any section"},
      {"unindented entry", Mutated("    name", "name"), "section header"},
      {"missing quotes", Mutated("\"default.lammps\"", "default.lammps"),
       "double quotes"},
      {"single quotes", Mutated("\"default.lammps\"", "'default.lammps'"),
       "double quotes"},
      {"bad key name", Mutated("    name =", "    na_me ="), "key names"},
      {"no equals sign", Mutated("    name =", "    name"), "key = "},
      {"unknown curve key", Mutated("    secret-key", "    private-key"),
       "only public-key and secret-key"},
      {"missing secret key",
       Mutated("    secret-key = \"" + secret + "\"\n", ""), "both"},
      {"duplicate public key",
       Mutated("curve\n",
               "curve\n    public-key = \"" + keys.public_z85 + "\"\n"),
       "duplicate"},
      {"duplicate metadata key",
       Mutated("metadata\n", "metadata\n    name = \"x\"\n"), "duplicate"},
      {"overlong line",
       Mutated("    name = \"default.lammps\"",
               "    name = \"" + std::string(250, 'a') + "\""),
       "longer than 254"},
      {"NUL byte", Rendered() + std::string(1, '\0'), "NUL"},
      {"empty file", "", "both"},
      {"unknown section", Mutated("metadata\n", "meta\n"), "section header"},
  };
}

// Keeps gtest from printing the raw bytes of a case (and a key with them).
void PrintTo(const Malformed& c, std::ostream* os) { *os << c.what; }

INSTANTIATE_TEST_SUITE_P(FluxRules, ParseCertRejects,
                         ::testing::ValuesIn(MalformedCases()),
                         [](const ::testing::TestParamInfo<Malformed>& info) {
                           std::string name;
                           for (char c : info.param.what)
                             name.push_back(std::isalnum(c) ? c : '_');
                           return name;
                         });

}  // namespace
}  // namespace fcc::curve
