// Pins the derivation: changing any expected value here is a breaking change
// (running MiniClusters would get different keys on upgraded nodes). The
// vectors are also checked by an independent Python implementation
// (derivation_vectors.py --check, a separate CTest).
#include "curve/keys.h"

#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

namespace fcc::curve {
namespace {

std::string FromHex(const std::string& hex) {
  std::string out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) {
    out.push_back(static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16)));
  }
  return out;
}

nlohmann::json LoadVectors() {
  std::ifstream in(FCC_DERIVATION_VECTORS);
  EXPECT_TRUE(in) << "cannot open " << FCC_DERIVATION_VECTORS;
  return nlohmann::json::parse(in);
}

TEST(DeriveKeypair, MatchesPinnedVectors) {
  const nlohmann::json doc = LoadVectors();
  ASSERT_EQ(doc.at("salt").get<std::string>(), kDerivationSalt);
  ASSERT_GE(doc.at("vectors").size(), 8u);
  for (const auto& v : doc.at("vectors")) {
    const Secret master(FromHex(
        doc.at("master_keys_hex").at(v.at("master_key").get<std::string>())));
    const MiniClusterId id{v.at("namespace"), v.at("name"), v.at("generation")};
    const CurveKeypair pair = DeriveKeypair(master, id);
    EXPECT_EQ(pair.public_z85, v.at("public_z85").get<std::string>())
        << id.QualifiedName() << "/" << id.generation;
    EXPECT_EQ(pair.secret_z85.reveal(), v.at("secret_z85").get<std::string>())
        << id.QualifiedName() << "/" << id.generation;
  }
}

// One literal vector in the source too, so the pin survives an edit of the
// JSON file that also edits the Python generator.
TEST(DeriveKeypair, LiteralVector) {
  std::string master;
  for (int b = 0; b < 64; ++b) master.push_back(static_cast<char>(b));
  const CurveKeypair pair =
      DeriveKeypair(Secret(master), {"default", "lammps", ""});
  EXPECT_EQ(pair.public_z85, "[$Q14SZ!5R1L4Yej<-=-kb0HCq08#Zn9uPe{lKt.");
  EXPECT_EQ(pair.secret_z85.reveal(),
            "u4t!9zN!vaE$8OgD<P8Zl#2T9nSo76CGNhj)W>*S");
}

TEST(DeriveKeypair, EveryInputChangesTheKey) {
  const Secret master(std::string(32, 'k'));
  const Secret other_master(std::string(32, 'j'));
  std::set<std::string> publics;
  publics.insert(DeriveKeypair(master, {"ns", "mc", "g1"}).public_z85);
  publics.insert(DeriveKeypair(master, {"ns2", "mc", "g1"}).public_z85);
  publics.insert(DeriveKeypair(master, {"ns", "mc2", "g1"}).public_z85);
  publics.insert(DeriveKeypair(master, {"ns", "mc", "g2"}).public_z85);
  publics.insert(DeriveKeypair(master, {"ns", "mc", ""}).public_z85);
  publics.insert(DeriveKeypair(other_master, {"ns", "mc", "g1"}).public_z85);
  EXPECT_EQ(publics.size(), 6u);
}

TEST(DeriveKeypair, DeterministicAcrossCalls) {
  const Secret master(std::string(48, 'x'));
  const CurveKeypair a = DeriveKeypair(master, {"ns", "mc", "g"});
  const CurveKeypair b = DeriveKeypair(master, {"ns", "mc", "g"});
  EXPECT_EQ(a.public_z85, b.public_z85);
  EXPECT_TRUE(a.secret_z85 == b.secret_z85);
}

TEST(DerivationInfo, IsLengthPrefixedSoFieldsCannotShift) {
  EXPECT_EQ(DerivationInfo({"ab", "c", ""}), std::string("\0\0\0\x02"
                                                         "ab"
                                                         "\0\0\0\x01"
                                                         "c"
                                                         "\0\0\0\0",
                                                         15));
  EXPECT_NE(DerivationInfo({"a.b", "c", "g"}),
            DerivationInfo({"a", "b.c", "g"}));
}

TEST(PublicKeyFor, RejectsNonZ85) {
  EXPECT_FALSE(PublicKeyFor("short"));
  EXPECT_FALSE(PublicKeyFor(std::string(40, '"')));
  EXPECT_TRUE(PublicKeyFor("u4t!9zN!vaE$8OgD<P8Zl#2T9nSo76CGNhj)W>*S"));
}

}  // namespace
}  // namespace fcc::curve
