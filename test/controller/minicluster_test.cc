#include "controller/minicluster.h"

#include <gtest/gtest.h>

#include "test_objects.h"

namespace fcc::controller {
namespace {

using nlohmann::json;
using testing::MiniClusterObject;

TEST(MiniClusterParse, ReadsSpecAndDefaults) {
  json object = MiniClusterObject();
  object["spec"].erase("command");
  object["metadata"]["labels"] = {{kQueueNameLabel, "user-queue"}};
  ParseResult r = ParseMiniCluster(object);
  ASSERT_TRUE(r.ok()) << r.ErrorText();
  const MiniCluster& mc = *r.minicluster;
  EXPECT_EQ(mc.name, "demo");
  EXPECT_EQ(mc.namespace_name, "science");
  EXPECT_EQ(mc.generation, 3);
  EXPECT_EQ(mc.spec.size, 4);
  EXPECT_EQ(mc.spec.broker_port, 8050);
  EXPECT_EQ(mc.spec.connect_timeout, "5s");
  EXPECT_FALSE(mc.spec.suspend);
  EXPECT_FALSE(mc.ephemeral());
  EXPECT_EQ(mc.spec.flux_user.OwnerAttribute(), "0");
  EXPECT_EQ(mc.QueueName(), "user-queue");
}

TEST(MiniClusterParse, CommandMakesItEphemeral) {
  ParseResult r = ParseMiniCluster(MiniClusterObject());
  ASSERT_TRUE(r.ok()) << r.ErrorText();
  EXPECT_TRUE(r.minicluster->ephemeral());
  EXPECT_EQ(r.minicluster->spec.command->at(2), "-N4");
}

TEST(MiniClusterParse, FluxUserOwnerIsUidOrUidGid) {
  json object = MiniClusterObject();
  object["spec"]["fluxUser"] = {{"uid", 1000}};
  EXPECT_EQ(
      ParseMiniCluster(object).minicluster->spec.flux_user.OwnerAttribute(),
      "1000");
  object["spec"]["fluxUser"]["gid"] = 100;
  EXPECT_EQ(
      ParseMiniCluster(object).minicluster->spec.flux_user.OwnerAttribute(),
      "1000:100");
}

struct BadSpec {
  const char* field;
  json value;
  const char* expected_in_error;
};

void PrintTo(const BadSpec& bad, std::ostream* os) {
  *os << bad.field << "=" << bad.value.dump();
}

class MiniClusterRejects : public ::testing::TestWithParam<BadSpec> {};

TEST_P(MiniClusterRejects, NamesTheField) {
  json object = MiniClusterObject();
  const BadSpec& bad = GetParam();
  if (bad.value.is_null()) {
    object["spec"].erase(bad.field);
  } else {
    object["spec"][bad.field] = bad.value;
  }
  ParseResult r = ParseMiniCluster(object);
  EXPECT_FALSE(r.ok());
  EXPECT_NE(r.ErrorText().find(bad.expected_in_error), std::string::npos)
      << r.ErrorText();
}

INSTANTIATE_TEST_SUITE_P(
    BadSpecs, MiniClusterRejects,
    ::testing::Values(
        BadSpec{"size", 0, "spec.size"}, BadSpec{"size", -3, "spec.size"},
        BadSpec{"size", "4", "spec.size: must be an integer"},
        BadSpec{"image", nullptr, "spec.image: required"},
        BadSpec{"image", "", "spec.image"},
        BadSpec{"brokerPort", 0, "spec.brokerPort"},
        BadSpec{"brokerPort", 70000, "spec.brokerPort"},
        BadSpec{"command", json::array(), "spec.command"},
        BadSpec{"command", json::array({"ok", 3}), "spec.command"},
        BadSpec{"fluxUser", {{"uid", -1}}, "spec.fluxUser.uid"},
        BadSpec{"suspend", "yes", "spec.suspend"},
        BadSpec{"connectTimeout", "5s; rm -rf /", "spec.connectTimeout"}));

TEST(MiniClusterParse, RejectsNamesThatCannotNameAServiceOrHostname) {
  json object = MiniClusterObject();
  object["metadata"]["name"] = "9lives";
  EXPECT_NE(ParseMiniCluster(object).ErrorText().find("metadata.name"),
            std::string::npos);
  object["metadata"]["name"] = std::string(61, 'a');
  object["spec"]["size"] = 10;  // hostname a...a-9 is 63 characters: fine
  EXPECT_TRUE(ParseMiniCluster(object).ok());
  object["spec"]["size"] = 11;  // a...a-10 is 64: too long
  ParseResult r = ParseMiniCluster(object);
  EXPECT_FALSE(r.ok());
  EXPECT_NE(r.ErrorText().find("at most 60 characters"), std::string::npos)
      << r.ErrorText();
}

TEST(MiniClusterParse, RejectsWrongKind) {
  json object = MiniClusterObject();
  object["kind"] = "Job";
  EXPECT_NE(ParseMiniCluster(object).ErrorText().find("apiVersion/kind"),
            std::string::npos);
}

}  // namespace
}  // namespace fcc::controller
