#include "controller/desired.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "controller/broker_config.h"
#include "controller/broker_programs.h"
#include "test_objects.h"

namespace fcc::controller {
namespace {

using nlohmann::json;
using testing::MiniClusterObject;
using testing::MiniClusterWithPodFields;

MiniCluster Parse(const json& object) { return testing::ParseValid(object); }

const json& PodSpec(const json& job) { return job["spec"]["template"]["spec"]; }
const json& Broker(const json& job) { return PodSpec(job)["containers"][0]; }
std::string Script(const json& job) { return Broker(job)["command"][2]; }

TEST(DesiredJob, IsSuspendedIndexedAndCompletesOnIndexZero) {
  const json job = DesiredJob(Parse(MiniClusterObject()), DesiredOptions{});
  EXPECT_EQ(job["apiVersion"], "batch/v1");
  EXPECT_EQ(job["metadata"]["name"], "demo");
  EXPECT_EQ(job["metadata"]["namespace"], "science");
  const json& spec = job["spec"];
  EXPECT_EQ(spec["suspend"], true);
  EXPECT_EQ(spec["completionMode"], "Indexed");
  EXPECT_EQ(spec["completions"], 4);
  EXPECT_EQ(spec["parallelism"], 4);
  EXPECT_EQ(spec["successPolicy"],
            json::parse(R"({"rules": [{"succeededIndexes": "0"}]})"));
  EXPECT_EQ(PodSpec(job)["restartPolicy"], "Never");
  EXPECT_EQ(PodSpec(job)["subdomain"], "demo");
  EXPECT_EQ(PodSpec(job)["terminationGracePeriodSeconds"], 2);
}

// A lost follower is replaced (up to spec.brokerRestarts counted losses;
// disruptions do not count); a lost lead or a failed program fails the Job.
TEST(DesiredJob, ReplacesLostFollowersAndFailsOnALostLead) {
  json object = MiniClusterObject();
  const json spec = DesiredJob(Parse(object), DesiredOptions{})["spec"];
  EXPECT_FALSE(spec.contains("backoffLimit"));
  EXPECT_EQ(spec["backoffLimitPerIndex"], kDefaultBrokerRestarts);
  EXPECT_EQ(spec["maxFailedIndexes"], 0);
  EXPECT_EQ(spec["podFailurePolicy"], json::parse(R"({"rules": [
    {"action": "FailIndex", "onExitCodes": {"containerName": "flux-broker",
     "operator": "In", "values": [76]}},
    {"action": "Ignore", "onPodConditions": [
     {"type": "DisruptionTarget", "status": "True"}]},
    {"action": "Count", "onExitCodes": {"containerName": "flux-broker",
     "operator": "In", "values": [75, 137]}},
    {"action": "FailIndex", "onExitCodes": {"containerName": "flux-broker",
     "operator": "NotIn", "values": [0, 75, 137]}}]})"));
  object["spec"]["brokerRestarts"] = 0;
  EXPECT_EQ(DesiredJob(Parse(object),
                       DesiredOptions{})["spec"]["backoffLimitPerIndex"],
            0);
}

TEST(DesiredJob, OwnedByTheMiniCluster) {
  const json job = DesiredJob(Parse(MiniClusterObject()), DesiredOptions{});
  ASSERT_EQ(job["metadata"]["ownerReferences"].size(), 1u);
  const json& ref = job["metadata"]["ownerReferences"][0];
  EXPECT_EQ(ref["apiVersion"], "minicluster.dev/v1alpha1");
  EXPECT_EQ(ref["kind"], "MiniCluster");
  EXPECT_EQ(ref["name"], "demo");
  EXPECT_EQ(ref["uid"], "1b4e28ba-2fa1-11d2-883f-0016d3cca427");
  EXPECT_EQ(ref["controller"], true);
  EXPECT_EQ(ref["blockOwnerDeletion"], true);
}

TEST(DesiredJob, MountsTheCurveCsiVolumeWithAttributes) {
  json object = MiniClusterObject();
  object["spec"]["fluxUser"] = {{"uid", 1000}, {"gid", 1000}};
  const json job = DesiredJob(Parse(object), DesiredOptions{});
  const json& volume = PodSpec(job)["volumes"][0];
  EXPECT_EQ(volume["name"], "curve");
  EXPECT_EQ(volume["csi"]["driver"], "curve.minicluster.dev");
  EXPECT_EQ(volume["csi"]["readOnly"], true);
  EXPECT_EQ(volume["csi"]["volumeAttributes"],
            (json{{"minicluster", "demo"},
                  {"generation", "1b4e28ba-2fa1-11d2-883f-0016d3cca427"},
                  {"owner", "1000:1000"}}));
  const json& mount = Broker(job)["volumeMounts"][0];
  EXPECT_EQ(mount["name"], "curve");
  EXPECT_EQ(mount["mountPath"], "/etc/flux/curve");
  EXPECT_EQ(mount["readOnly"], true);
}

// spec.flux.state: the claim in every pod, rank 0's statedir on it (one
// directory per MiniCluster name), and the lead fails at once, naming the
// field, when it cannot write there.
TEST(DesiredJob, PutsThePersistentLeadsStatedirOnTheStateClaim) {
  json object = MiniClusterObject();
  object["spec"].erase("command");
  object["spec"]["flux"] = {{"state", {{"claimName", "lab-state"}}}};
  const json job = DesiredJob(Parse(object), DesiredOptions{});
  const json& volumes = PodSpec(job)["volumes"];
  EXPECT_TRUE(std::ranges::any_of(volumes, [](const json& v) {
    return v == json{{"name", "flux-state"},
                     {"persistentVolumeClaim", {{"claimName", "lab-state"}}}};
  }));
  EXPECT_TRUE(
      std::ranges::any_of(Broker(job)["volumeMounts"], [](const json& m) {
        return m ==
               json{{"name", "flux-state"}, {"mountPath", "/var/lib/flux"}};
      }));
  EXPECT_EQ(StateClaimOfJob(job), "lab-state");
  const std::string script = Script(job);
  EXPECT_NE(script.find(" -Sstatedir=/var/lib/flux/demo "), std::string::npos);
  EXPECT_NE(script.find("spec.flux.state: claim lab-state (/var/lib/flux) is "
                        "not writable by uid 0"),
            std::string::npos);
  EXPECT_NE(script.find("exit " + std::to_string(kStateUnwritableExit)),
            std::string::npos);

  object["spec"]["flux"].erase("state");
  const json stateless = DesiredJob(Parse(object), DesiredOptions{});
  EXPECT_EQ(StateClaimOfJob(stateless), "");
  EXPECT_NE(Script(stateless).find(" -Sstatedir=/run/flux/state "),
            std::string::npos);
}

TEST(DesiredJob, StampsTheCurrentKeyIdWhenOneIsSet) {
  const MiniCluster mc = Parse(MiniClusterObject());
  const json plain = DesiredJob(mc, DesiredOptions{});
  EXPECT_FALSE(PodSpec(plain)["volumes"][0]["csi"]["volumeAttributes"].contains(
      "key-id"))
      << "no --key-id: no attribute, the driver's default key";
  EXPECT_EQ(KeyIdOfJob(plain), "");
  DesiredOptions opts;
  opts.key_id = "k2";
  const json pinned = DesiredJob(mc, opts);
  EXPECT_EQ(PodSpec(pinned)["volumes"][0]["csi"]["volumeAttributes"]["key-id"],
            "k2");
  EXPECT_EQ(KeyIdOfJob(pinned), "k2");
  // Only this driver's curve volume counts.
  json other = pinned;
  other["spec"]["template"]["spec"]["volumes"][0]["csi"]["driver"] =
      "other.example.com";
  EXPECT_EQ(KeyIdOfJob(other), "");
  EXPECT_EQ(KeyIdOfJob(json::object()), "");
}

TEST(DesiredOptions, KeyIdMustBeADnsLabel) {
  for (const std::string good : {"", "master", "k2", "2026-12"}) {
    DesiredOptions opts;
    opts.key_id = good;
    EXPECT_TRUE(CheckDesiredOptions(opts)) << good;
  }
  for (const std::string bad : {"K2", "k2.key", "../master", "-k2", "a b"}) {
    DesiredOptions opts;
    opts.key_id = bad;
    const auto checked = CheckDesiredOptions(opts);
    ASSERT_FALSE(checked) << bad;
    EXPECT_NE(checked.error().find("--key-id"), std::string::npos);
  }
}

TEST(DesiredJob, NonRootFluxUserRunsTheBroker) {
  json object = MiniClusterObject();
  object["spec"]["fluxUser"] = {{"uid", 1000}};
  const json job = DesiredJob(Parse(object), DesiredOptions{});
  EXPECT_EQ(PodSpec(job)["securityContext"],
            (json{{"runAsUser", 1000}, {"runAsNonRoot", true}}));
  EXPECT_EQ(PodSpec(job)["volumes"][0]["csi"]["volumeAttributes"]["owner"],
            "1000");
}

TEST(DesiredJob, RootByDefaultSoTheRootOwnedCertIsReadable) {
  const json job = DesiredJob(Parse(MiniClusterObject()), DesiredOptions{});
  EXPECT_EQ(PodSpec(job)["securityContext"], (json{{"runAsUser", 0}}));
  EXPECT_EQ(PodSpec(job)["volumes"][0]["csi"]["volumeAttributes"]["owner"],
            "0");
}

TEST(DesiredJob, EphemeralPassesCommandAsArgsToFluxStart) {
  const json job = DesiredJob(Parse(MiniClusterObject()), DesiredOptions{});
  EXPECT_EQ(Broker(job)["command"][0], "/opt/flux/libexec/flux-view/sh");
  EXPECT_EQ(Broker(job)["command"][1], "-c");
  EXPECT_EQ(Broker(job)["args"],
            json::array({"flux", "run", "-N4", "hostname"}));
  const std::string script = Script(job);
  EXPECT_NE(script.find("\n/usr/local/bin/flux start "
                        "--config-path=/etc/flux/minicluster/broker.toml "
                        "-Srundir=/run/flux -Sstatedir=/run/flux/state "
                        "-Stbon.connect_timeout=5s "
                        "-Slocal-uri=local:///run/flux/local -- \"$@\" &\n"),
            std::string::npos)
      << script;
  EXPECT_EQ(script.find("rc2_none"), std::string::npos);
  EXPECT_NE(script.find("\nexport SHELL=/opt/flux/libexec/flux-view/sh\n"),
            std::string::npos)
      << script;
}

// spec.flux.fromImage: the image's own /bin/sh and flux, and no view.
TEST(DesiredJob, FluxFromImageRunsTheImagesShellAndFlux) {
  json object = MiniClusterObject();
  object["spec"]["flux"] = {{"fromImage", true}};
  const json job = DesiredJob(Parse(object), DesiredOptions{});
  EXPECT_EQ(Broker(job)["command"][0], "/bin/sh");
  EXPECT_NE(
      Script(job).find("\nflux start "
                       "--config-path=/etc/flux/minicluster/broker.toml "),
      std::string::npos)
      << Script(job);
  EXPECT_EQ(Broker(job)["readinessProbe"]["exec"]["command"][0], "flux");
  EXPECT_EQ(Script(job).find("SHELL"), std::string::npos) << Script(job);
  for (const json& volume : PodSpec(job)["volumes"]) {
    EXPECT_NE(volume["name"], "flux-view") << volume;
  }
  for (const json& mount : Broker(job)["volumeMounts"]) {
    EXPECT_NE(mount["name"], "flux-view") << mount;
  }
}

// The default: the node driver's view at /opt/flux, its flux(1) alone at
// /usr/local/bin/flux (on the image's PATH), nothing else of it on PATH.
TEST(DesiredJob, BrokersRunFromTheDriversFluxView) {
  DesiredOptions opts;
  opts.flux_view = "flux-core-0.90.1";
  const json job = DesiredJob(Parse(MiniClusterObject()), opts);
  EXPECT_EQ(PodSpec(job)["volumes"][3],
            (json{{"name", "flux-view"},
                  {"csi",
                   {{"driver", "curve.minicluster.dev"},
                    {"readOnly", true},
                    {"volumeAttributes", {{"view", "flux-core-0.90.1"}}}}}}));
  EXPECT_EQ(Broker(job)["volumeMounts"][3], (json{{"name", "flux-view"},
                                                  {"mountPath", "/opt/flux"},
                                                  {"readOnly", true}}));
  EXPECT_EQ(Broker(job)["volumeMounts"][4],
            (json{{"name", "flux-view"},
                  {"mountPath", "/usr/local/bin/flux"},
                  {"subPath", "bin/flux"},
                  {"readOnly", true}}));
  EXPECT_EQ(Broker(job)["readinessProbe"]["exec"]["command"][0],
            "/usr/local/bin/flux");
  for (const json& env : Broker(job)["env"]) {
    EXPECT_NE(env["name"], "PATH") << "the image's own PATH is kept";
  }
  // A MiniCluster's own view wins over the controller's default.
  json object = MiniClusterObject();
  object["spec"]["flux"] = {{"view", "flux-core-0.88.0"}};
  EXPECT_EQ(PodSpec(DesiredJob(
                Parse(object),
                opts))["volumes"][3]["csi"]["volumeAttributes"]["view"],
            "flux-core-0.88.0");
}

TEST(DesiredOptions, FluxViewMustBeAViewName) {
  DesiredOptions opts;
  for (const char* bad : {"", "Flux", "a b", "x;rm", "-flux"}) {
    opts.flux_view = bad;
    const auto checked = CheckDesiredOptions(opts);
    ASSERT_FALSE(checked) << bad;
    EXPECT_NE(checked.error().find("--flux-view"), std::string::npos);
  }
}

TEST(DesiredJob, PersistentRunsNoInitialProgram) {
  json object = MiniClusterObject();
  object["spec"].erase("command");
  const json job = DesiredJob(Parse(object), DesiredOptions{});
  EXPECT_FALSE(Broker(job).contains("args"));
  const std::string script = Script(job);
  EXPECT_NE(script.find(" -Sbroker.rc2_none=1 "), std::string::npos) << script;
  // Its KVS is checkpointed, so that a restarted rank 0 finds its jobs.
  EXPECT_NE(script.find("checkpoint-period"), std::string::npos);
  EXPECT_EQ(script.find("\"$@\""), std::string::npos);
}

TEST(DesiredJob, QueuedCopiesKueueLabelsButStaysSuspended) {
  json object = MiniClusterObject();
  object["metadata"]["labels"] = {{kQueueNameLabel, "user-queue"},
                                  {kPriorityClassLabel, "high"},
                                  {"team", "physics"}};
  const json job = DesiredJob(Parse(object), DesiredOptions{});
  const json& labels = job["metadata"]["labels"];
  EXPECT_EQ(labels[kQueueNameLabel], "user-queue");
  EXPECT_EQ(labels[kPriorityClassLabel], "high");
  EXPECT_FALSE(labels.contains("team"));
  EXPECT_EQ(job["spec"]["suspend"], true);
  // The queue label belongs on the Job, not on its pods.
  EXPECT_FALSE(
      job["spec"]["template"]["metadata"]["labels"].contains(kQueueNameLabel));
}

TEST(DesiredJob, UnqueuedHasNoKueueLabels) {
  const json job = DesiredJob(Parse(MiniClusterObject()), DesiredOptions{});
  EXPECT_FALSE(job["metadata"]["labels"].contains(kQueueNameLabel));
  EXPECT_FALSE(job["metadata"]["labels"].contains(kPriorityClassLabel));
}

TEST(DesiredJob, PassesResourcesAndEnvThrough) {
  json object = MiniClusterObject();
  object["spec"]["resources"] = {{"requests", {{"cpu", "2"}}}};
  object["spec"]["env"] = json::array({{{"name", "A"}, {"value", "1"}}});
  object["spec"]["brokerPort"] = 9000;
  const json job = DesiredJob(Parse(object), DesiredOptions{});
  EXPECT_EQ(Broker(job)["resources"]["requests"]["cpu"], "2");
  EXPECT_EQ(Broker(job)["env"].back(), (json{{"name", "A"}, {"value", "1"}}));
  EXPECT_EQ(Broker(job)["ports"][0]["containerPort"], 9000);
}

// `kubectl exec POD -- flux ...` finds the broker with no environment (the
// system instance's default path) and through FLUX_URI, for both kinds.
TEST(DesiredJob, BrokerListensOnTheFixedLocalUriNamedByFluxUri) {
  json persistent = MiniClusterObject();
  persistent["spec"].erase("command");
  for (const json& object : {MiniClusterObject(), persistent}) {
    const json job = DesiredJob(Parse(object), DesiredOptions{});
    EXPECT_NE(Script(job).find(" -Slocal-uri=local:///run/flux/local"),
              std::string::npos)
        << Script(job);
    EXPECT_EQ(
        Broker(job)["env"][0],
        (json{{"name", "FLUX_URI"}, {"value", "local:///run/flux/local"}}));
    EXPECT_NE(Script(job).find(" -Srundir=/run/flux "), std::string::npos)
        << Script(job);
    EXPECT_EQ(Broker(job)["volumeMounts"][2],
              (json{{"name", "flux-run"}, {"mountPath", "/run"}}));
    EXPECT_EQ(PodSpec(job)["volumes"][2],
              (json{{"name", "flux-run"}, {"emptyDir", json::object()}}));
  }
}

// The job shell's rc (ShellRc) is written where FLUX_SHELL_RC_PATH points.
TEST(DesiredJob, JobShellsFindTheControllersRc) {
  const json job = DesiredJob(Parse(MiniClusterObject()), DesiredOptions{});
  EXPECT_EQ(Broker(job)["env"][1], (json{{"name", "FLUX_SHELL_RC_PATH"},
                                         {"value", "/etc/flux/minicluster"}}));
  EXPECT_NE(Script(job).find("> /etc/flux/minicluster/minicluster.lua\n"),
            std::string::npos);
}

TEST(DesiredJob, UsersFluxUriComesLastSoItWins) {
  json object = MiniClusterObject();
  object["spec"]["env"] =
      json::array({{{"name", "FLUX_URI"}, {"value", "local:///tmp/x"}}});
  const json env = Broker(DesiredJob(Parse(object), DesiredOptions{}))["env"];
  ASSERT_EQ(env.size(), 3u);
  EXPECT_EQ(env[2]["value"], "local:///tmp/x");
}

// The probe asks the local broker's state machine itself: no shell, no
// grep, and not `flux uptime`, which crashes for a uid without a passwd
// entry (minicluster_node: test_unknown_uid_becomes_ready runs it).
// Rank 0 answers every follower's probe: above 256 brokers a follower that
// rank 0 said usable asks again only after a while, so that rank 0 answers
// at most about 256 probes per period, up to 5 minutes between asks.
TEST(DesiredJob, LargeInstancesAskRankZeroLessOften) {
  EXPECT_EQ(ReadinessReuseSeconds(1), 0);
  EXPECT_EQ(ReadinessReuseSeconds(256), 0);
  EXPECT_EQ(ReadinessReuseSeconds(257), 5);
  EXPECT_EQ(ReadinessReuseSeconds(1024), 15);
  EXPECT_EQ(ReadinessReuseSeconds(100000), 295);
  json object = MiniClusterObject();
  object["spec"]["size"] = 1024;
  const json job = DesiredJob(Parse(object), DesiredOptions{});
  const json& command = Broker(job)["readinessProbe"]["exec"]["command"];
  EXPECT_EQ(command[5], "15");
  EXPECT_NE(command[3].get<std::string>().find(
                "if rank != 0 and said is not None and said < REUSE:"),
            std::string::npos);
}

TEST(DesiredJob, ReadyOnlyOnceTheLocalBrokerIsInStateRun) {
  const json job = DesiredJob(Parse(MiniClusterObject()), DesiredOptions{});
  const json& probe = Broker(job)["readinessProbe"];
  const json& command = probe["exec"]["command"];
  ASSERT_EQ(command.size(), 6u);
  EXPECT_EQ(command[0], "/usr/local/bin/flux");  // the view's
  EXPECT_EQ(command[1], "python");
  const std::string check = command[3];
  EXPECT_EQ(command[4], "/run/flux-broker-ready");
  EXPECT_EQ(command[5], "0") << "4 brokers: every probe asks rank 0";
  // Every call bounded inside kubelet's timeout.
  EXPECT_NE(check.find("signal.alarm(6)"), std::string::npos);
  EXPECT_LT(6, probe["timeoutSeconds"]);
  // Answered once the broker is in state run, an error after it.
  EXPECT_NE(check.find("answer(h.rpc('state-machine.wait'))"),
            std::string::npos);
  EXPECT_NE(check.find("except OSError"), std::string::npos);
  // Then whether the scheduler can use the rank, from rank 0's resource
  // module (minicluster_node: test_follower_lost_without_cpu_request
  // drains a rank).
  EXPECT_NE(check.find("answer(h.rpc('resource.status', nodeid=0))"),
            std::string::npos);
  // Rank 0 once its scheduler is loaded (the gate loads it after `run`).
  EXPECT_NE(check.find("answer(h.rpc('module.list'))"), std::string::npos);
  // It may wait for the instance: longer than a period, so that one probe
  // spans the wait and passes as the broker gets there.
  EXPECT_GT(probe["timeoutSeconds"], probe["periodSeconds"]);
}

TEST(DesiredJob, CopiesMaxExecTimeLabelForKueue) {
  json object = MiniClusterObject();
  object["metadata"]["labels"] = {{kMaxExecTimeLabel, "3600"}};
  const json job = DesiredJob(Parse(object), DesiredOptions{});
  EXPECT_EQ(job["metadata"]["labels"][kMaxExecTimeLabel], "3600");
}

TEST(DesiredJob, PodTemplateCarriesTheMiniClustersPodFields) {
  const json spec = MiniClusterWithPodFields()["spec"];
  const json job = DesiredJob(Parse(MiniClusterWithPodFields()), {});
  const json& meta = job["spec"]["template"]["metadata"];
  EXPECT_EQ(meta["labels"]["team"], "physics");
  EXPECT_EQ(meta["labels"]["example.com/tier"], "batch");
  EXPECT_EQ(meta["labels"]["minicluster.dev/name"], "demo");
  EXPECT_EQ(meta["annotations"], spec["podAnnotations"]);
  EXPECT_EQ(PodSpec(job)["nodeSelector"], spec["nodeSelector"]);
  EXPECT_EQ(PodSpec(job)["tolerations"], spec["tolerations"]);
  EXPECT_EQ(PodSpec(job)["affinity"], spec["affinity"]);
  EXPECT_EQ(PodSpec(job)["serviceAccountName"], "flux-runner");
  // The controller's volumes and mounts first, then the MiniCluster's.
  const json& volumes = PodSpec(job)["volumes"];
  ASSERT_EQ(volumes.size(), 6u);
  EXPECT_EQ(volumes[0]["name"], "curve");
  EXPECT_EQ(volumes[3]["name"], "flux-view");
  EXPECT_EQ(volumes[4], spec["volumes"][0]);
  EXPECT_EQ(volumes[5], spec["volumes"][1]);
  const json& mounts = Broker(job)["volumeMounts"];
  ASSERT_EQ(mounts.size(), 7u);
  EXPECT_EQ(mounts[0]["name"], "curve");
  EXPECT_EQ(mounts[4]["name"], "flux-view");
  EXPECT_EQ(mounts[5], spec["volumeMounts"][0]);
  EXPECT_EQ(mounts[6], spec["volumeMounts"][1]);
  // Pod labels are the pods', not the Job's.
  EXPECT_FALSE(job["metadata"]["labels"].contains("team"));
}

// Unset pod fields stay out of the template: Kueue merges a flavor's
// nodeSelector and tolerations into what is there, and a default
// ServiceAccount is the namespace's.
TEST(DesiredJob, UnsetPodFieldsAreLeftOut) {
  const json job = DesiredJob(Parse(MiniClusterObject()), {});
  for (const char* field :
       {"nodeSelector", "tolerations", "affinity", "serviceAccountName"}) {
    EXPECT_FALSE(PodSpec(job).contains(field)) << field;
  }
  EXPECT_FALSE(job["spec"]["template"]["metadata"].contains("annotations"));
  EXPECT_EQ(job["spec"]["template"]["metadata"]["labels"],
            CommonLabels(Parse(MiniClusterObject())));
  EXPECT_EQ(PodSpec(job)["volumes"].size(), 4u);      // cert, 2 emptyDirs, view
  EXPECT_EQ(Broker(job)["volumeMounts"].size(), 5u);  // the view's twice
}

TEST(DesiredService, IsHeadlessAndPublishesNotReadyAddresses) {
  const json svc = DesiredService(Parse(MiniClusterObject()), DesiredOptions{});
  EXPECT_EQ(svc["metadata"]["name"], "demo");
  EXPECT_EQ(svc["spec"]["clusterIP"], "None");
  EXPECT_EQ(svc["spec"]["publishNotReadyAddresses"], true);
  EXPECT_EQ(svc["spec"]["selector"], (json{{"minicluster.dev/name", "demo"}}));
  EXPECT_EQ(svc["spec"]["ports"][0]["port"], 8050);
  EXPECT_EQ(svc["metadata"]["ownerReferences"][0]["uid"],
            "1b4e28ba-2fa1-11d2-883f-0016d3cca427");
  // The selector must match the Job's pods.
  const json job = DesiredJob(Parse(MiniClusterObject()), DesiredOptions{});
  EXPECT_EQ(
      job["spec"]["template"]["metadata"]["labels"]["minicluster.dev/name"],
      "demo");
}

TEST(DesiredNetworkPolicy, BrokerPortOnlyFromItsOwnPodsEveryOtherPortOpen) {
  const MiniCluster mc = Parse(MiniClusterObject());
  const json np = DesiredNetworkPolicy(mc);
  EXPECT_EQ(np["apiVersion"], "networking.k8s.io/v1");
  EXPECT_EQ(np["metadata"]["name"], "demo");
  EXPECT_EQ(np["metadata"]["ownerReferences"][0]["uid"], mc.uid);
  const json brokers = {{"matchLabels", {{"minicluster.dev/name", "demo"}}}};
  EXPECT_EQ(np["spec"]["podSelector"], brokers);
  EXPECT_EQ(np["spec"]["policyTypes"], json::array({"Ingress"}));
  const json& ingress = np["spec"]["ingress"];
  ASSERT_EQ(ingress.size(), 2u);
  EXPECT_EQ(ingress[0]["from"], json::array({{{"podSelector", brokers}}}));
  EXPECT_EQ(ingress[0]["ports"],
            json::parse(R"([{"protocol": "TCP", "port": 8050}])"));
  EXPECT_FALSE(ingress[1].contains("from"));  // from anywhere
  EXPECT_EQ(ingress[1]["ports"], json::parse(R"([
      {"protocol": "TCP", "port": 1, "endPort": 8049},
      {"protocol": "TCP", "port": 8051, "endPort": 65535},
      {"protocol": "UDP", "port": 1, "endPort": 65535}])"));
}

TEST(DesiredNetworkPolicy, BrokerPortAtEitherEndLeavesNoEmptyRange) {
  MiniCluster mc = Parse(MiniClusterObject());
  mc.spec.broker_port = 1;
  EXPECT_EQ(DesiredNetworkPolicy(mc)["spec"]["ingress"][1]["ports"][0],
            json::parse(R"({"protocol": "TCP", "port": 2, "endPort": 65535})"));
  mc.spec.broker_port = 65535;
  const json ports = DesiredNetworkPolicy(mc)["spec"]["ingress"][1]["ports"];
  ASSERT_EQ(ports.size(), 2u);
  EXPECT_EQ(ports[0],
            json::parse(R"({"protocol": "TCP", "port": 1, "endPort": 65534})"));
}

TEST(DesiredOptions, ClusterDomainMustBeADnsSubdomain) {
  for (const std::string good : {"cluster.local", "example.org", "c1"}) {
    DesiredOptions opts;
    opts.cluster_domain = good;
    EXPECT_TRUE(CheckDesiredOptions(opts)) << good;
  }
  // Each would end up verbatim in every broker's start script and TOML.
  for (const std::string bad :
       {"cluster.local\ntouch /tmp/owned", "x\"; id; \"", "Cluster.Local",
        "a b", "", ".local", "local."}) {
    DesiredOptions opts;
    opts.cluster_domain = bad;
    const auto checked = CheckDesiredOptions(opts);
    ASSERT_FALSE(checked) << bad;
    EXPECT_NE(checked.error().find("--cluster-domain"), std::string::npos);
  }
}

// Cores from the CPU limit, else the request, rounded up to whole cores;
// GPUs from the extended resources that name them.
TEST(BrokerResourcesOf, WholeCoresFromTheLimitElseTheRequestAndGpus) {
  auto cores = [](const json& resources) {
    return BrokerResourcesOf(resources).cores;
  };
  EXPECT_EQ(cores(json::parse(R"({"requests": {"cpu": "2"}})")), 2);
  EXPECT_EQ(cores(json::parse(R"({"requests": {"cpu": 3}})")), 3);
  EXPECT_EQ(cores(json::parse(R"({"requests": {"cpu": "1500m"}})")), 2);
  EXPECT_EQ(cores(json::parse(R"({"requests": {"cpu": "0.1"}})")), 1);
  EXPECT_EQ(cores(json::parse(R"({"requests": {"cpu": "100m"}})")), 1);
  EXPECT_EQ(cores(json::parse(R"({"requests": {"cpu": "2"},
                                  "limits": {"cpu": "4"}})")),
            4);
  // A limit past what a node has (schedulable: the scheduler counts the
  // request) is clamped there; the spec check refuses it.
  EXPECT_EQ(cores(json::parse(R"({"requests": {"cpu": 1},
                                  "limits": {"cpu": 65536}})")),
            kMaxBrokerCores);
  EXPECT_EQ(cores(json::parse(R"({"limits": {"memory": "1Gi"}})")), 0);
  EXPECT_EQ(cores(json::parse(R"({"requests": {"cpu": "1.5m"}})")), 1);
  EXPECT_EQ(cores(json::object()), 0);
  EXPECT_EQ(cores(json()), 0);
  const BrokerResources gpus = BrokerResourcesOf(json::parse(
      R"({"limits": {"cpu": "8", "nvidia.com/gpu": 2, "amd.com/gpu": "1"}})"));
  EXPECT_EQ(gpus.cores, 8);
  EXPECT_EQ(gpus.gpus, 3);
}

// Every form of quantity the API server takes (it stores "1e3" as "1k"):
// CPU rounded up to millicores, then to whole cores; GPUs whole. A value
// past what Flux can use is clamped there, never thrown or wrapped (only a
// Job made before the spec check could hold one).
TEST(BrokerResourcesOf, ReadsEveryKubernetesQuantityForm) {
  auto cores = [](const json& cpu) {
    return BrokerResourcesOf({{"limits", {{"cpu", cpu}}}}).cores;
  };
  auto gpus = [](const json& count) {
    return BrokerResourcesOf({{"limits", {{"nvidia.com/gpu", count}}}}).gpus;
  };
  EXPECT_EQ(cores("1e3"), 1000);
  EXPECT_EQ(cores("1k"), 1000);
  EXPECT_EQ(cores("2k"), kMaxBrokerCores);
  EXPECT_EQ(cores("1Ki"), 1024);
  EXPECT_EQ(cores("+4"), 4);
  EXPECT_EQ(cores(".5"), 1);
  EXPECT_EQ(cores("1.5m"), 1);
  EXPECT_EQ(cores("1500000u"), 2);
  EXPECT_EQ(cores("2500000000n"), 3);
  EXPECT_EQ(cores("3E-3"), 1);
  EXPECT_EQ(cores("0.002k"), 2);
  EXPECT_EQ(cores(2.5), 3);
  EXPECT_EQ(cores("0"), 0);
  EXPECT_EQ(cores("-2"), 0);
  EXPECT_EQ(cores("two"), 0);
  EXPECT_EQ(cores("99999999999999999999"), kMaxBrokerCores);
  EXPECT_EQ(cores("9223372036854775807m"), kMaxBrokerCores);
  EXPECT_EQ(cores("1e300"), kMaxBrokerCores);
  EXPECT_EQ(gpus("0.016k"), 16);
  EXPECT_EQ(gpus("2k"), kMaxBrokerGpus);
  EXPECT_EQ(gpus("4000m"), 4);
  EXPECT_EQ(gpus("99999999999999999999"), kMaxBrokerGpus);
  EXPECT_EQ(gpus(json(9223372036854775807LL)), kMaxBrokerGpus);
}

TEST(FluxBrokerConfig, DeclaresEachRanksGrant) {
  json object = MiniClusterObject();
  object["spec"]["resources"] =
      json::parse(R"({"limits": {"cpu": "4", "nvidia.com/gpu": 1}})");
  const std::string toml = FluxBrokerConfig(Parse(object), DesiredOptions{});
  EXPECT_NE(
      toml.find("[resource]\nnoverify = true\n[[resource.config]]\n"
                "hosts = \"demo-[0-3]\"\ncores = \"0-3\"\ngpus = \"0\"\n"),
      std::string::npos)
      << toml;
  EXPECT_EQ(NodeResourceCommand(Parse(object), DesiredOptions{}, "flux"), "");
  // No CPU: R from rank 0's node, written before the broker starts.
  object["spec"].erase("resources");
  EXPECT_NE(FluxBrokerConfig(Parse(object), DesiredOptions{})
                .find("[resource]\nnoverify = true\n"
                      "path = \"/etc/flux/minicluster/R\"\n"),
            std::string::npos);
  EXPECT_EQ(NodeResourceCommand(Parse(object), DesiredOptions{}, "flux"),
            "flux R encode --hosts='demo-[0-3]' --local > "
            "/etc/flux/minicluster/R\n");
}

// Fractions round up; a request alone counts when there is no limit; no CPU
// at all gives no cores (R comes from the node: NodeResourceCommand).
TEST(FluxBrokerConfig, RoundsFractionsUpAndFallsBackToTheRequest) {
  auto resource_of = [](const char* resources) {
    json object = MiniClusterObject();
    object["spec"]["resources"] = json::parse(resources);
    const std::string toml = FluxBrokerConfig(Parse(object), DesiredOptions{});
    const size_t at = toml.find("cores = ");
    return at == std::string::npos ? std::string("none")
                                   : toml.substr(at, toml.find('\n', at) - at);
  };
  EXPECT_EQ(resource_of(R"({"requests": {"cpu": "1500m"}})"),
            "cores = \"0-1\"");
  EXPECT_EQ(resource_of(R"({"requests": {"cpu": "100m"}})"), "cores = \"0\"");
  EXPECT_EQ(
      resource_of(R"({"requests": {"cpu": "8"}, "limits": {"cpu": "2"}})"),
      "cores = \"0-1\"");
  EXPECT_EQ(resource_of(R"({"requests": {"memory": "1Gi"}})"), "none");
  EXPECT_EQ(resource_of(R"({"limits": {"amd.com/gpu": "2"}})"), "none");
}

// A queued MiniCluster with minSize asks Kueue for partial admission and
// starts its instance at minSize brokers; unqueued, it runs at size.
TEST(DesiredJob, MinSizeAsksKueueForPartialAdmissionAndSetsTheQuorum) {
  json object = MiniClusterObject();
  object["spec"]["minSize"] = 2;
  const json unqueued = DesiredJob(Parse(object), DesiredOptions{});
  EXPECT_FALSE(unqueued["metadata"].contains("annotations"));
  EXPECT_EQ(StartScript(Parse(object), DesiredOptions{}).find("broker.quorum"),
            std::string::npos);

  object["metadata"]["labels"] = {{kQueueNameLabel, "user-queue"}};
  const json job = DesiredJob(Parse(object), DesiredOptions{});
  EXPECT_EQ(job["metadata"]["annotations"],
            json({{kMinParallelismAnnotation, "2"},
                  {kCompletionsEqualParallelismAnnotation, "true"}}));
  // Kueue sets both to the admitted count; it refuses them unequal.
  EXPECT_EQ(job["spec"]["completions"], job["spec"]["parallelism"]);
  // The lead's quorum: the admitted count (FileTextWait, below).
  EXPECT_NE(StartScript(Parse(object), DesiredOptions{})
                .find(" -Sbroker.quorum=$quorum "),
            std::string::npos);

  // minSize == size: nothing to ask (Kueue refuses a minimum not below the
  // pod count).
  object["spec"]["minSize"] = 4;
  EXPECT_FALSE(DesiredJob(Parse(object), DesiredOptions{})["metadata"].contains(
      "annotations"));
}

TEST(FluxResourcesOfJob, SaysWhereEachBrokersResourcesComeFrom) {
  json object = MiniClusterObject();
  EXPECT_EQ(FluxResourcesOfJob(DesiredJob(Parse(object), DesiredOptions{})),
            json({{"source", "node"}}));
  object["spec"]["resources"] =
      json::parse(R"({"limits": {"cpu": "1500m", "nvidia.com/gpu": 2}})");
  EXPECT_EQ(FluxResourcesOfJob(DesiredJob(Parse(object), DesiredOptions{})),
            json({{"source", "pod"}, {"cores", 2}, {"gpus", 2}}));
  EXPECT_TRUE(FluxResourcesOfJob(json::object()).is_null());
}

TEST(FluxBrokerConfig, SingleBrokerHostlist) {
  json object = MiniClusterObject();
  object["spec"]["size"] = 1;
  EXPECT_EQ(BrokerHostlist(Parse(object)), "demo-0");
}

// Runs a start script with /bin/sh (dash, as in the view) the way the pod
// does, with a stand-in flux on PATH: it records its arguments, then runs
// `flux_body` (e.g. "exit 3"). `term`: SIGTERM the shell once flux runs;
// `flux_on_term`: what flux does on SIGTERM, trapped before it says it runs.
class StartScriptRun {
 public:
  // A directory of its own: ctest -j runs these tests side by side.
  StartScriptRun() {
    std::string pattern = ::testing::TempDir() + "start_script_test.XXXXXX";
    if (mkdtemp(pattern.data()) == nullptr) std::abort();
    dir_ = pattern;
    std::filesystem::create_directories(dir_ + "/bin");
  }
  ~StartScriptRun() { std::filesystem::remove_all(dir_); }
  StartScriptRun(const StartScriptRun&) = delete;
  StartScriptRun& operator=(const StartScriptRun&) = delete;

  const std::string& dir() const { return dir_; }

  // The shell's exit code.
  int Run(const std::string& script, int index, const std::string& flux_body,
          bool term = false, const std::string& flux_on_term = "") {
    for (const char* name :
         {"args", "r-args", "gate-args", "graph-args", "starts"}) {
      std::filesystem::remove(dir_ + "/" + name);
    }
    {
      std::ofstream flux(dir_ + "/bin/flux");
      // `flux R encode` (NodeResourceCommand) answers at once.
      // `flux python` (the lead's scheduler gate) says it ran and ends.
      flux << "#!/bin/sh\nif [ \"$1\" = R ]; then printf '%s\\n' \"$@\" > "
           << dir_ << "/r-args; echo '{\"version\": 1}'; exit 0; fi\n"
           << "if [ \"$1\" = python ]; then case $4 in */admitted/count|"
              "*/topology/resource.toml) [ $# -le 6 ] || { printf '%s\\n' "
              "\"$@\" > "
           << dir_
           << "/graph-args; exit 0; }; exec cat \"$4\";; esac; "
              "printf '%s\\n' \"$4\" \"$5\" > "
           << dir_ << "/gate-args; exit 0; fi\n"
           << (flux_on_term.empty() ? "" : "trap '" + flux_on_term + "' TERM\n")
           << "echo \"${FLUX_SCHED_MODULE-unset}\" >> " << dir_ << "/starts\n"
           << "printf '%s\\n' \"$@\" > " << dir_ << "/args.tmp\n"
           << "mv " << dir_ << "/args.tmp " << dir_ << "/args\n"
           << flux_body << "\n";
    }
    std::filesystem::permissions(dir_ + "/bin/flux",
                                 std::filesystem::perms::owner_all);
    const pid_t pid = fork();
    if (pid == 0) {
      setpgid(0, 0);  // its own group, so leftovers are killed below
      std::string path = "PATH=" + dir_ + "/bin:/usr/bin:/bin";
      std::string job_index = "JOB_COMPLETION_INDEX=" + std::to_string(index);
      char* env[] = {path.data(), job_index.data(), nullptr};
      execle("/bin/sh", "sh", "-c", script.c_str(), "flux-broker", "it's",
             "$HOME", nullptr, env);
      _exit(127);
    }
    if (term) {
      while (!std::filesystem::exists(dir_ + "/args")) usleep(1000);
      kill(pid, SIGTERM);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    kill(-pid, SIGKILL);  // a fake broker the shell did not wait for
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }

  std::string Read(const std::string& name) const {
    std::ifstream in(dir_ + "/" + name);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }

 private:
  std::string dir_;
};

// A MiniCluster of an image with its own Flux; persistent: no command.
MiniCluster FromImage(bool persistent) {
  json object = MiniClusterObject();
  object["spec"]["flux"] = {{"fromImage", true}};
  if (persistent) object["spec"].erase("command");
  return Parse(object);
}

MiniCluster EphemeralFromImage() { return FromImage(false); }
MiniCluster PersistentFromImage() { return FromImage(true); }

// It writes exactly FluxBrokerConfig with builtins only, then runs flux
// with the MiniCluster's command as "$@".
TEST(StartScript, WritesTheConfigWithBuiltinsAndRunsFlux) {
  StartScriptRun run;
  const MiniCluster mc = EphemeralFromImage();
  DesiredOptions opts;
  opts.config_mount_path = run.dir();
  const std::string script = StartScript(mc, opts);
  EXPECT_EQ(script.find("set -eu\n"), script.find('\n') + 1);
  EXPECT_EQ(run.Run(script, 0, "exit 0"), 0);
  EXPECT_EQ(run.Read("broker.toml"), FluxBrokerConfig(mc, opts));
  // No CPU grant: rank 0's node describes every rank, from config.
  EXPECT_EQ(run.Read("R"), "{\"version\": 1}\n");
  EXPECT_EQ(run.Read("r-args"), "R\nencode\n--hosts=demo-[0-3]\n--local\n");
  // The job shell's rc, found through FLUX_SHELL_RC_PATH.
  EXPECT_NE(run.Read("minicluster.lua")
                .find("shell.options[\"cpu-affinity\"] = \"off\""),
            std::string::npos);
  EXPECT_EQ(run.Read("args"),
            "start\n--config-path=" + run.dir() +
                "/broker.toml\n-Srundir=/run/flux\n-Sstatedir=/run/flux/state\n"
                "-Stbon.connect_timeout=5s\n"
                "-Slocal-uri=local:///run/flux/local\n--\nit's\n$HOME\n");
}

// The pod's exit code says what ended its broker (the Job's
// podFailurePolicy acts on it): a follower's 0 only when its instance
// ended, the lead's program's own code, and neither confusable.
TEST(StartScript, ExitCodesSayWhatEndedTheBroker) {
  StartScriptRun run;
  DesiredOptions opts;
  opts.config_mount_path = run.dir();
  const std::string script = StartScript(EphemeralFromImage(), opts);
  const std::string stops_on_term =
      "trap 'exit 0' TERM; while :; do sleep 0.05; done";
  EXPECT_EQ(run.Run(script, 2, "exit 0"), 0) << "instance ended";
  EXPECT_EQ(run.Run(script, 2, "exit 1"), kReplaceBrokerExit) << "lost parent";
  EXPECT_EQ(run.Run(script, 2, "kill -9 $$"), kReplaceBrokerExit) << "killed";
  EXPECT_EQ(run.Run(script, 2, stops_on_term, true), kReplaceBrokerExit)
      << "pod deleted: flux exits 0 on SIGTERM";
  EXPECT_EQ(run.Run(script, 0, "exit 0"), 0) << "program succeeded";
  EXPECT_EQ(run.Run(script, 0, "exit 3"), 3) << "program failed";
  EXPECT_EQ(run.Run(script, 0, "exit 75"), kLeadLostExit)
      << "a lead's 75 would read as a follower's";
  EXPECT_EQ(run.Run(script, 0, "kill -9 $$"), kLeadLostExit) << "killed";
  EXPECT_EQ(run.Run(script, 0, stops_on_term, true), kLeadLostExit)
      << "pod deleted";
}

// Rank 0 takes longer to stop than the pod's 2 s grace: a lead whose pod
// is deleted exits at once, not with the SIGKILL's 137 (which the Job's
// policy counts and replaces, starting a new, empty instance).
TEST(StartScript, ADeletedLeadExitsWithoutWaitingForItsBroker) {
  StartScriptRun run;
  DesiredOptions opts;
  opts.config_mount_path = run.dir();
  const std::string script = StartScript(EphemeralFromImage(), opts);
  const std::string stop_slowly =
      "sleep 5; touch " + run.dir() + "/stopped; exit 0";
  EXPECT_EQ(
      run.Run(script, 0, "while :; do sleep 0.05; done", true, stop_slowly),
      kLeadLostExit);
  EXPECT_FALSE(std::filesystem::exists(run.dir() + "/stopped"));
}

// How many times the script started a broker.
int Starts(const StartScriptRun& run) {
  const std::string starts = run.Read("starts");
  return static_cast<int>(std::count(starts.begin(), starts.end(), '\n'));
}

// A broker that crashes comes back in its pod, kBrokerRestartsInPod times
// in a row; the pod then ends as it did before restarts. `crash_twice`:
// the third broker ends as its instance does.
TEST(StartScript, ACrashedBrokerRestartsInItsPodWithinABudget) {
  StartScriptRun run;
  DesiredOptions opts;
  opts.config_mount_path = run.dir();
  const std::string crash_twice =
      "[ $(wc -l < " + run.dir() + "/starts) -ge 3 ] && exit 0; kill -9 $$";
  const std::string persistent = StartScript(PersistentFromImage(), opts);
  EXPECT_EQ(run.Run(persistent, 1, crash_twice), 0) << "follower";
  EXPECT_EQ(Starts(run), 3);
  EXPECT_EQ(run.Run(persistent, 1, "exit 1"), kReplaceBrokerExit)
      << "follower, parent lost for good";
  EXPECT_EQ(Starts(run), 1 + kBrokerRestartsInPod);
  EXPECT_EQ(run.Run(persistent, 0, crash_twice), 0) << "persistent lead";
  EXPECT_EQ(Starts(run), 3);
  EXPECT_EQ(run.Run(persistent, 0, "kill -9 $$"), kReplaceBrokerExit)
      << "persistent lead crashing for good: its pod is replaced";
  EXPECT_EQ(Starts(run), 1 + kBrokerRestartsInPod);
  // An ephemeral lead's program cannot be resumed: no restart.
  const std::string ephemeral = StartScript(EphemeralFromImage(), opts);
  EXPECT_EQ(run.Run(ephemeral, 0, "kill -9 $$"), kLeadLostExit);
  EXPECT_EQ(Starts(run), 1);
  EXPECT_EQ(run.Run(ephemeral, 2, crash_twice), 0) << "ephemeral follower";
  EXPECT_EQ(Starts(run), 3);
  // A SIGTERM (pod deleted) is never a crash to restart from.
  const std::string stops_on_term =
      "trap 'exit 1' TERM; while :; do sleep 0.05; done";
  EXPECT_EQ(run.Run(persistent, 1, stops_on_term, true), kReplaceBrokerExit);
  EXPECT_EQ(Starts(run), 1);
}

// A persistent lead's pod is replaced like a follower's (its queue comes
// back from spec.flux.state, or a new instance starts). On SIGTERM it kills
// its broker (a rank 0 that stops shuts down every follower, which would
// then end its index for good) and exits as a follower.
TEST(StartScript, ADeletedPersistentLeadKillsItsBrokerAndIsReplaced) {
  StartScriptRun run;
  DesiredOptions opts;
  opts.config_mount_path = run.dir();
  const std::string script = StartScript(PersistentFromImage(), opts);
  const std::string stop_slowly =
      "sleep 0.3; touch " + run.dir() + "/stopped; exit 0";
  EXPECT_EQ(
      run.Run(script, 0, "while :; do sleep 0.05; done", true, stop_slowly),
      kReplaceBrokerExit);
  EXPECT_FALSE(std::filesystem::exists(run.dir() + "/stopped"));
  EXPECT_EQ(Starts(run), 1);
  EXPECT_EQ(
      run.Run(script, 1, "while :; do sleep 0.05; done", true, stop_slowly),
      kReplaceBrokerExit);
  EXPECT_TRUE(std::filesystem::exists(run.dir() + "/stopped"))
      << "a follower stops its broker";
}

// A persistent lead loads no scheduler in rc1 and starts the gate before
// each broker; followers and ephemeral leads run rc1 as it is.
TEST(StartScript, APersistentLeadGatesItsScheduler) {
  StartScriptRun run;
  DesiredOptions opts;
  opts.config_mount_path = run.dir();
  const std::string persistent = StartScript(PersistentFromImage(), opts);
  // The lead's broker ends once the gate has run; the others after as
  // long as a gate (started first) would take to run.
  const std::string after_gate =
      "while [ ! -e " + run.dir() + "/gate-args ]; do sleep 0.01; done";
  EXPECT_EQ(run.Run(persistent, 0, after_gate), 0);
  EXPECT_EQ(run.Read("starts"), "none\n");
  EXPECT_EQ(run.Read("gate-args"), "4\nflux\n");
  EXPECT_EQ(run.Run(persistent, 1, "sleep 0.2"), 0);
  EXPECT_EQ(run.Read("starts"), "\n");
  EXPECT_EQ(run.Read("gate-args"), "");
  EXPECT_EQ(run.Run(StartScript(EphemeralFromImage(), opts), 0, "sleep 0.2"),
            0);
  EXPECT_EQ(run.Read("starts"), "unset\n");
  EXPECT_EQ(run.Read("gate-args"), "");
}

// Kueue may admit 2 to 4 brokers: the lead waits for the count the
// controller gives its pod (FileTextWait, here a file the stand-in
// prints), then waits for that many brokers, excludes the others from its
// resources and gates its scheduler on the admitted ones. Without a count
// it starts as before: quorum minSize, nothing excluded, no gate.
TEST(StartScript, TheLeadOfAPartlyAdmittedMiniClusterUsesTheAdmittedCount) {
  StartScriptRun run;
  DesiredOptions opts;
  opts.config_mount_path = run.dir();
  json object = MiniClusterObject();
  object["spec"]["flux"] = {{"fromImage", true}};
  object["spec"].erase("command");
  object["spec"]["minSize"] = 2;
  object["metadata"]["labels"] = {{kQueueNameLabel, "user-queue"}};
  const std::string script = StartScript(Parse(object), opts);
  std::filesystem::create_directories(run.dir() + "/admitted");
  std::ofstream(run.dir() + "/admitted/count") << "3";
  const std::string after_gate =
      "while [ ! -e " + run.dir() + "/gate-args ]; do sleep 0.01; done";
  EXPECT_EQ(run.Run(script, 0, after_gate), 0);
  const std::string args = run.Read("args");
  EXPECT_NE(args.find("-Sbroker.quorum=3\n"), std::string::npos) << args;
  EXPECT_NE(run.Read("broker.toml")
                .find("[resource]\nnoverify = true\nexclude = \"3\"\n"),
            std::string::npos)
      << run.Read("broker.toml");
  EXPECT_EQ(run.Read("starts"), "none\n");
  EXPECT_EQ(run.Read("gate-args"), "3\nflux\n");
  EXPECT_NE(run.Read("admitted.py").find("SIZE = 4\n"), std::string::npos);

  std::ofstream(run.dir() + "/admitted/count") << "2";
  EXPECT_EQ(run.Run(script, 0, after_gate), 0);
  EXPECT_NE(run.Read("broker.toml").find("exclude = \"2-3\"\n"),
            std::string::npos);

  std::ofstream(run.dir() + "/admitted/count") << "4";
  EXPECT_EQ(run.Run(script, 0, after_gate), 0);
  EXPECT_EQ(run.Read("broker.toml").find("exclude"), std::string::npos);
  EXPECT_NE(run.Read("args").find("-Sbroker.quorum=4\n"), std::string::npos);

  EXPECT_EQ(run.Run(script, 1, "exit 0"), 0) << "a follower does not wait";
  EXPECT_NE(run.Read("args").find("-Sbroker.quorum=2\n"), std::string::npos);
  EXPECT_EQ(run.Read("broker.toml").find("exclude"), std::string::npos);
  EXPECT_EQ(run.Read("starts"), "\n");

  // The stand-in's wait fails at once: as if no count came in time.
  std::filesystem::remove(run.dir() + "/admitted/count");
  EXPECT_EQ(run.Run(script, 0, "exit 0"), 0);
  EXPECT_NE(run.Read("args").find("-Sbroker.quorum=2\n"), std::string::npos);
  EXPECT_EQ(run.Read("broker.toml").find("exclude"), std::string::npos);
  EXPECT_EQ(run.Read("starts"), "\n") << "the scheduler loaded in rc1";
  EXPECT_EQ(run.Read("gate-args"), "");
}

// The job validator plugin, run by python3 against a stand-in for
// flux-core's ValidatorPlugin base class: a job asking for more nodes than
// were admitted is refused, naming the count; no count, no limit.
TEST(AdmittedValidator, RefusesMoreNodesThanWereAdmitted) {
  StartScriptRun run;
  const std::string dir = run.dir();
  std::filesystem::create_directories(dir + "/flux/job");
  for (const char* init : {"/flux/__init__.py", "/flux/job/__init__.py"}) {
    std::ofstream(dir + init) << "";
  }
  std::ofstream(dir + "/flux/job/validator.py") << "ValidatorPlugin = object\n";
  std::ofstream(dir + "/admitted.py") << AdmittedValidator(dir + "/count", 4);
  std::ofstream(dir + "/check.py")
      << "import importlib.util, sys\n"
         "spec = importlib.util.spec_from_file_location('a', sys.argv[1])\n"
         "m = importlib.util.module_from_spec(spec); "
         "spec.loader.exec_module(m)\n"
         "class Job: pass\n"
         "for nodes in (2, 3):\n"
         "    job = Job()\n"
         "    job.jobspec = {'resources': [{'type': 'node', 'count': nodes}]}\n"
         "    print(nodes, m.Validator().validate(job))\n"
         "job.jobspec = {'resources': [{'type': 'slot', 'count': 9}]}\n"
         "print('slots', m.Validator().validate(job))\n";
  auto check = [&] {
    const std::string command =
        "cd " + dir + " && python3 check.py " + dir + "/admitted.py > out 2>&1";
    EXPECT_EQ(std::system(command.c_str()), 0) << run.Read("out");
    return run.Read("out");
  };
  std::ofstream(dir + "/count") << "2\n";
  EXPECT_EQ(check(),
            "2 None\n3 (19, 'this MiniCluster has 2 brokers, not 4: Kueue "
            "admitted 2 (spec.minSize); ask for at most 2 nodes')\n"
            "slots None\n");
  std::filesystem::remove(dir + "/count");
  EXPECT_EQ(check(), "2 None\n3 None\nslots None\n");
}

// Kueue admitted 3 of 4: the graph has the admitted ranks alone (Fluxion
// would hold a job asking for an excluded one instead of refusing it), and
// the config both the exclusion and the graph.
TEST(StartScript, TheGraphOfAPartlyAdmittedMiniClusterHasTheAdmittedRanks) {
  StartScriptRun run;
  DesiredOptions opts;
  opts.config_mount_path = run.dir();
  json object = MiniClusterObject();
  object["spec"]["flux"] = {{"fromImage", true}};
  object["spec"]["minSize"] = 2;
  object["spec"]["topology"] = {{"required", "example.com/rack"}};
  object["spec"]["resources"] = {{"limits", {{"cpu", "2"}}}};
  object["metadata"]["labels"] = {{kQueueNameLabel, "user-queue"}};
  const MiniCluster mc = Parse(object);
  for (const char* dir : {"/admitted", "/topology"}) {
    std::filesystem::create_directories(run.dir() + dir);
  }
  std::ofstream(run.dir() + "/admitted/count") << "3";
  std::ofstream(run.dir() + "/topology/resource.toml")
      << TopologyResourceConfig(mc, {{"rack-a", {0, 1, 2}}});
  EXPECT_EQ(run.Run(StartScript(mc, opts), 0, "exit 0"), 0);
  EXPECT_TRUE(run.Read("graph-args").ends_with("/domains.json\n3\n"))
      << run.Read("graph-args");
  EXPECT_NE(run.Read("broker.toml")
                .find("[resource]\nnoverify = true\nexclude = \"3\"\n"
                      "scheduling = \"" +
                      run.dir() + "/domains.json\"\n"),
            std::string::npos)
      << run.Read("broker.toml");
}

// The graph's level is named by the label's name part, unless Flux has a
// type of that name.
TEST(FluxDomainType, IsTheLabelsNameUnlessFluxHasThatType) {
  EXPECT_EQ(FluxDomainType("example.com/rack"), "rack");
  EXPECT_EQ(FluxDomainType("cloud.example.com/topology-block"),
            "topology-block");
  EXPECT_EQ(FluxDomainType("zone"), "zone");
  EXPECT_EQ(FluxDomainType("example.com/node"), "domain");
  EXPECT_EQ(FluxDomainType("example.com/core"), "domain");
}

// The frobnicator, run by python3 against stand-ins for flux-core's
// plugin base class and `sched.resource-status` (here rack-a: ranks 0-2,
// rack-b: 3-4, 2 cores a rank; the ranks in FREE have both free).
TEST(DomainFrobnicator, WrapsAJobOfNodesInOneDomainWhenOneHasRoomNow) {
  StartScriptRun run;
  const std::string dir = run.dir();
  std::filesystem::create_directories(dir + "/flux/job/frobnicator");
  std::filesystem::create_directories(dir + "/flux/resource");
  for (const char* init :
       {"/flux/job/__init__.py", "/flux/resource/__init__.py"}) {
    std::ofstream(dir + init) << "";
  }
  std::ofstream(dir + "/flux/__init__.py") << "Flux = object\n";
  std::ofstream(dir + "/flux/job/frobnicator/__init__.py")
      << "FrobnicatorPlugin = object\n";
  std::ofstream(dir + "/flux/resource/list.py")
      << "import os\n"
         "class Ranks:\n"
         "    def __init__(self, free): self.free = free\n"
         "    def copy_ranks(self, rank):\n"
         "        r = Ranks(self.free); r.ncores = 2 if rank in self.free "
         "else 0; return r\n"
         "class Lists:\n"
         "    free = Ranks([int(r) for r in os.environ['FREE'].split()])\n"
         "    all = Ranks(range(5))\n"
         "class resource_list:\n"
         "    def __init__(self, h): pass\n"
         "    def get(self): return Lists()\n";
  auto vertex = [](int id, const char* type, const char* name, int rank) {
    return json{{"id", std::to_string(id)},
                {"metadata", {{"type", type}, {"name", name}, {"rank", rank}}}};
  };
  json graph = {{"nodes", json::array({vertex(0, "cluster", "c", -1),
                                       vertex(1, "rack", "rack-a", -1),
                                       vertex(2, "rack", "rack-b", -1)})},
                {"edges", json::array({{{"source", "0"}, {"target", "1"}},
                                       {{"source", "0"}, {"target", "2"}}})}};
  for (int rank = 0; rank < 5; ++rank) {
    graph["nodes"].push_back(vertex(3 + rank, "node", "n", rank));
    graph["edges"].push_back({{"source", rank < 3 ? "1" : "2"},
                              {"target", std::to_string(3 + rank)}});
  }
  std::ofstream(dir + "/domains.json") << json{{"graph", graph}}.dump();
  std::ofstream(dir + "/domains.py")
      << DomainFrobnicator(dir + "/domains.json", "rack");
  std::ofstream(dir + "/check.py")
      << "import importlib.util, json, sys\n"
         "spec = importlib.util.spec_from_file_location('d', sys.argv[1])\n"
         "m = importlib.util.module_from_spec(spec); "
         "spec.loader.exec_module(m)\n"
         "class Job: pass\n"
         "frob = m.Frobnicator(); frob.configure(None, {})\n"
         "job = Job(); job.jobspec = json.loads(sys.argv[2])\n"
         "frob.frob(job, 0, 16, 0)\n"
         "print(job.jobspec['resources'][0]['type'])\n";
  auto placed = [&](const std::string& free, const json& jobspec) {
    const std::string command = "cd " + dir + " && FREE='" + free +
                                "' python3 check.py domains.py '" +
                                jobspec.dump() + "' > out 2>&1";
    EXPECT_EQ(std::system(command.c_str()), 0) << run.Read("out");
    return run.Read("out");
  };
  auto nodes = [](int count, bool exclusive, int cores) {
    json node = {{"type", "node"},
                 {"count", count},
                 {"with",
                  {{{"type", "slot"},
                    {"count", 1},
                    {"with", {{{"type", "core"}, {"count", cores}}}}}}}};
    if (exclusive) node["exclusive"] = true;
    return json{{"resources", {node}}};
  };
  EXPECT_EQ(placed("0 1 2 3 4", nodes(2, true, 1)), "rack\n");
  EXPECT_EQ(placed("0 1 2 3 4", nodes(3, true, 1)), "rack\n");
  EXPECT_EQ(placed("0 1 2 3 4", nodes(4, true, 1)), "node\n")
      << "larger than any domain";
  EXPECT_EQ(placed("0 3 4", nodes(2, true, 1)), "rack\n") << "rack-b has room";
  EXPECT_EQ(placed("0 1 3", nodes(3, true, 1)), "node\n") << "none has room";
  EXPECT_EQ(placed("0 3", nodes(2, true, 1)), "node\n");
  EXPECT_EQ(placed("0 1 2 3 4", nodes(1, true, 1)), "node\n");
  EXPECT_EQ(placed("0 1", nodes(2, false, 3)), "node\n")
      << "3 cores a node fit on no rank";
  json any = nodes(2, true, 1);
  any["attributes"]["system"]["topology"] = "any";
  EXPECT_EQ(placed("0 1 2 3 4", any), "node\n");
  json slots = {{"resources", {{{"type", "slot"}, {"count", 4}}}}};
  EXPECT_EQ(placed("0 1 2 3 4", slots), "slot\n");
}

TEST(JobApplyBody, CarriesNoFieldKueueOwns) {
  json object = MiniClusterObject();
  object["metadata"]["labels"] = {{kQueueNameLabel, "user-queue"}};
  const json body = JobApplyBody(Parse(object));
  EXPECT_FALSE(body.contains("spec"));
  EXPECT_FALSE(body["metadata"]["labels"].contains(kQueueNameLabel));
  EXPECT_EQ(body["metadata"]["ownerReferences"][0]["controller"], true);
}

TEST(IsSubset, ComparesOnlyWhatIsWanted) {
  const json have =
      json::parse(R"({"a": 1, "b": {"c": [1, {"d": 2, "e": 3}]}})");
  EXPECT_TRUE(IsSubset(json::parse(R"({"b": {"c": [1, {"d": 2}]}})"), have));
  EXPECT_FALSE(IsSubset(json::parse(R"({"b": {"c": [1]}})"), have));
  EXPECT_FALSE(IsSubset(json::parse(R"({"a": 2})"), have));
  EXPECT_FALSE(IsSubset(json::parse(R"({"z": 1})"), have));
}

TEST(DesiredJob, TopologyBecomesKueuesPodSetAnnotation) {
  json object = MiniClusterObject();
  object["spec"]["podAnnotations"] = {{"example.com/owner", "physics"}};
  object["spec"]["topology"] = {{"required", "example.com/rack"}};
  json meta = DesiredJob(Parse(object), {})["spec"]["template"]["metadata"];
  EXPECT_EQ(meta["annotations"][kRequiredTopologyAnnotation],
            "example.com/rack");
  EXPECT_FALSE(meta["annotations"].contains(kPreferredTopologyAnnotation));
  // The MiniCluster's own pod annotations stay beside it.
  for (const auto& [key, value] : object["spec"]["podAnnotations"].items()) {
    EXPECT_EQ(meta["annotations"][key], value);
  }

  object["spec"]["topology"] = {{"preferred", "kubernetes.io/hostname"}};
  meta = DesiredJob(Parse(object), {})["spec"]["template"]["metadata"];
  EXPECT_EQ(meta["annotations"][kPreferredTopologyAnnotation],
            "kubernetes.io/hostname");
  EXPECT_FALSE(meta["annotations"].contains(kRequiredTopologyAnnotation));

  // Without topology, nothing of Kueue's TAS on the template.
  meta = DesiredJob(Parse(MiniClusterObject()),
                    {})["spec"]["template"]["metadata"];
  EXPECT_FALSE(meta.contains("annotations"));
}

TEST(StartScript, TheLeadAddsItsRanksDomainsToR) {
  StartScriptRun run;
  DesiredOptions opts;
  opts.config_mount_path = run.dir();
  json object = MiniClusterObject();
  object["spec"]["flux"] = {{"fromImage", true}};
  object["spec"]["topology"] = {{"required", "example.com/rack"}};
  object["spec"]["resources"] = {{"limits", {{"cpu", "2"}}}};
  const MiniCluster mc = Parse(object);
  const std::string script = StartScript(mc, opts);
  std::filesystem::create_directories(run.dir() + "/topology");
  const std::string domains =
      TopologyResourceConfig(mc, {{"rack-a", {0, 1}}, {"rack-b", {2, 3}}});
  std::ofstream(run.dir() + "/topology/resource.toml") << domains;
  EXPECT_EQ(run.Run(script, 0, "exit 0"), 0);
  const std::string toml = run.Read("broker.toml");
  EXPECT_NE(toml.find("cores = \"0-1\"\n"), std::string::npos) << toml;
  EXPECT_NE(domains.find("hosts = \"demo-[2-3]\"\nproperties = [\"rack-b\"]"),
            std::string::npos)
      << domains;
  // Under Fluxion, also as a level of its graph, and the frobnicator.
  EXPECT_NE(toml.find("[resource]\nnoverify = true\nscheduling = \"" +
                      run.dir() + "/domains.json\"\n"),
            std::string::npos)
      << toml;
  const std::string frobnicator =
      "[ingest.frobnicator]\nplugins = [\"" + run.dir() + "/domains.py\"]\n";
  EXPECT_TRUE(toml.ends_with(domains + frobnicator)) << toml;
  EXPECT_TRUE(run.Read("graph-args")
                  .ends_with("\n" + run.dir() +
                             "/topology/resource.toml\ndemo-[0-3]\n2\n0\n"
                             "rack\n" +
                             run.dir() + "/domains.json\n"))
      << run.Read("graph-args");
  EXPECT_NE(
      run.Read("domains.py")
          .find("GRAPH = '" + run.dir() + "/domains.json'\nLEVEL = 'rack'\n"),
      std::string::npos);
  // A follower neither waits nor adds them.
  EXPECT_EQ(run.Run(script, 1, "exit 0"), 0);
  EXPECT_EQ(run.Read("broker.toml").find("properties"), std::string::npos);
  EXPECT_EQ(run.Read("broker.toml").find("scheduling"), std::string::npos);
  EXPECT_EQ(run.Read("broker.toml").find("frobnicator"), std::string::npos);
  EXPECT_EQ(run.Read("graph-args"), "");
  // sched-simple reads no graph: properties alone.
  object["spec"]["flux"]["scheduler"] = {{"simple", true}};
  EXPECT_EQ(run.Run(StartScript(Parse(object), opts), 0, "exit 0"), 0);
  EXPECT_TRUE(run.Read("broker.toml").ends_with(domains));
  EXPECT_EQ(run.Read("broker.toml").find("scheduling"), std::string::npos);
  EXPECT_EQ(run.Read("graph-args"), "");
  // The pod mounts the annotation, as the admitted count's.
  const json job = DesiredJob(mc, opts);
  const json& volume = PodSpec(job)["volumes"].back();
  EXPECT_EQ(volume["name"], kTopologyVolume);
  EXPECT_EQ(volume["downwardAPI"]["items"][0]["fieldRef"]["fieldPath"],
            "metadata.annotations['minicluster.dev/topology']");
  // A domain that is no label value (so no property name) is left out.
  EXPECT_EQ(TopologyResourceConfig(mc, {{"a b", {0}}, {"", {1}}}), "");
}

}  // namespace
}  // namespace fcc::controller
