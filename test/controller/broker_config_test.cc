#include "controller/broker_config.h"

#include <gtest/gtest.h>

#include "controller/desired.h"
#include "test_objects.h"

namespace fcc::controller {
namespace {

using nlohmann::json;
using testing::MiniClusterObject;

MiniCluster Parse(const json& object) { return testing::ParseValid(object); }

ParseResult WithScheduler(const json& scheduler) {
  json object = MiniClusterObject();
  object["spec"]["flux"] = {{"scheduler", scheduler}};
  return ParseMiniCluster(object);
}

TEST(FluxBrokerConfig, BootstrapsFromTheCsiCertAndServiceDns) {
  DesiredOptions opts;
  opts.cluster_domain = "example.org";
  const std::string toml = FluxBrokerConfig(Parse(MiniClusterObject()), opts);
  const std::string expected_tail =
      "[bootstrap]\n"
      "curve_cert = \"/etc/flux/curve/curve.cert\"\n"
      "default_port = 8050\n"
      "default_bind = \"tcp://0.0.0.0:%p\"\n"
      "default_connect = \"tcp://%h.demo.science.svc.example.org:%p\"\n"
      "hosts = [{ host = \"demo-[0-3]\" }]\n"
      "[resource]\n"
      "noverify = true\n"
      "path = \"/etc/flux/minicluster/R\"\n"
      "[sched-fluxion-qmanager]\n"
      "queue-policy = \"fcfs\"\n"
      "[sched-fluxion-resource]\n"
      "match-policy = \"first\"\n"
      "[tbon]\n"
      "topo = \"kary:32\"\n";
  ASSERT_GE(toml.size(), expected_tail.size());
  EXPECT_EQ(toml.substr(toml.size() - expected_tail.size()), expected_tail)
      << toml;
}

// kary:32 (flat up to 33 brokers) unless spec.tbonTopo names one.
TEST(FluxBrokerConfig, TreeIsKary32UnlessTheSpecNamesOne) {
  json object = MiniClusterObject();
  object["spec"]["size"] = 100;
  EXPECT_NE(FluxBrokerConfig(Parse(object), DesiredOptions{})
                .find("[tbon]\ntopo = \"kary:32\"\n"),
            std::string::npos);
  object["spec"]["tbonTopo"] = "binomial";
  EXPECT_NE(FluxBrokerConfig(Parse(object), DesiredOptions{})
                .find("[tbon]\ntopo = \"binomial\"\n"),
            std::string::npos);
}

TEST(SchedulerConfig, FluxionWithTheSpecsQueuePolicy) {
  for (const char* policy : {"fcfs", "easy", "conservative", "hybrid"}) {
    const ParseResult r = WithScheduler({{"queuePolicy", policy}});
    ASSERT_TRUE(r.ok()) << r.ErrorText();
    EXPECT_EQ(SchedulerConfig(r.minicluster->spec.flux.scheduler),
              std::string("[sched-fluxion-qmanager]\nqueue-policy = \"") +
                  policy +
                  "\"\n[sched-fluxion-resource]\nmatch-policy = \"first\"\n");
  }
}

// sched-simple through modprobe's alternatives, for both services Fluxion
// provides; no Fluxion tables.
TEST(SchedulerConfig, SimpleSelectsSchedSimpleForBothServices) {
  const ParseResult r = WithScheduler({{"simple", true}});
  ASSERT_TRUE(r.ok()) << r.ErrorText();
  const std::string toml = FluxBrokerConfig(*r.minicluster, DesiredOptions{});
  EXPECT_NE(toml.find("[modules.alternatives]\nsched = \"sched-simple\"\n"
                      "feasibility = \"sched-simple\"\n"),
            std::string::npos)
      << toml;
  EXPECT_EQ(toml.find("fluxion"), std::string::npos) << toml;
}

TEST(SchedulerConfig, RefusesAnUnknownPolicyAndAPolicyForSchedSimple) {
  const ParseResult unknown = WithScheduler({{"queuePolicy", "backfill"}});
  EXPECT_FALSE(unknown.ok());
  EXPECT_NE(unknown.ErrorText().find(
                "spec.flux.scheduler.queuePolicy: must be one of Fluxion's "
                "queue policies: fcfs, easy, conservative, hybrid"),
            std::string::npos)
      << unknown.ErrorText();
  const ParseResult both =
      WithScheduler({{"simple", true}, {"queuePolicy", "easy"}});
  EXPECT_FALSE(both.ok());
  EXPECT_NE(both.ErrorText().find("sched-simple has no queue policies"),
            std::string::npos)
      << both.ErrorText();
  const ParseResult not_bool = WithScheduler({{"simple", "yes"}});
  EXPECT_NE(not_bool.ErrorText().find(
                "spec.flux.scheduler.simple: must be true or false"),
            std::string::npos)
      << not_bool.ErrorText();
  json object = MiniClusterObject();
  object["spec"]["flux"] = {{"scheduler", {{"queuepolicy", "easy"}}}};
  const auto unknown_fields = UnknownFields(object);
  ASSERT_EQ(unknown_fields.size(), 1u);
  EXPECT_NE(unknown_fields[0].find("spec.flux.scheduler.queuepolicy: unknown "
                                   "field; spec.flux.scheduler has simple, "
                                   "queuePolicy"),
            std::string::npos)
      << unknown_fields[0];
}

// Both PMIs unless the job names one; a Flux without flux-pmix keeps PMI-1.
TEST(ShellRc, OffersPmiAndPmixAndTurnsCpuAffinityOffUnlessTheJobAsks) {
  const std::string rc = ShellRc();
  EXPECT_NE(rc.find("if shell.options[\"pmi\"] == nil then\n"
                    "  shell.options[\"pmi\"] = \"simple,pmix\"\n"
                    "  if not pcall(plugin.load, { file = \"pmix.so\", conf "
                    "= {} }) then\n"
                    "    shell.options[\"pmi\"] = \"simple\"\n"),
            std::string::npos)
      << rc;
  EXPECT_NE(rc.find("if shell.options[\"cpu-affinity\"] == nil then\n"
                    "  shell.options[\"cpu-affinity\"] = \"off\"\n"),
            std::string::npos)
      << rc;
}

}  // namespace
}  // namespace fcc::controller
