#include "controller/minicluster.h"

#include <gtest/gtest.h>

#include "test_objects.h"

namespace fcc::controller {
namespace {

using nlohmann::json;
using testing::MiniClusterObject;
using testing::MiniClusterWithPodFields;

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

TEST(MiniClusterParse, ReadsPodFields) {
  ParseResult r = ParseMiniCluster(MiniClusterWithPodFields());
  ASSERT_TRUE(r.ok()) << r.ErrorText();
  const MiniClusterSpec& spec = r.minicluster->spec;
  EXPECT_EQ(spec.pod.labels,
            (std::map<std::string, std::string>{
                {"team", "physics"}, {"example.com/tier", "batch"}}));
  EXPECT_EQ(spec.pod.annotations.at("kueue.x-k8s.io/podset-preferred-topology"),
            "rack");
  EXPECT_EQ(spec.pod.node_selector.at("disk"), "ssd");
  EXPECT_EQ(spec.pod.tolerations[0]["key"], "gpu");
  EXPECT_TRUE(spec.pod.affinity.contains("nodeAffinity"));
  EXPECT_EQ(spec.pod.service_account_name, "flux-runner");
  EXPECT_EQ(spec.pod.volumes.size(), 2u);
  EXPECT_EQ(spec.volume_mounts[1]["mountPath"], "/run2/scratch");
}

TEST(MiniClusterParse, PodFieldsDefaultToNothing) {
  ParseResult r = ParseMiniCluster(MiniClusterObject());
  ASSERT_TRUE(r.ok()) << r.ErrorText();
  const MiniClusterSpec& spec = r.minicluster->spec;
  EXPECT_TRUE(spec.pod.labels.empty());
  EXPECT_TRUE(spec.pod.annotations.empty());
  EXPECT_TRUE(spec.pod.node_selector.empty());
  EXPECT_TRUE(spec.pod.tolerations.empty());
  EXPECT_TRUE(spec.pod.affinity.empty());
  EXPECT_TRUE(spec.pod.volumes.empty());
  EXPECT_TRUE(spec.volume_mounts.empty());
  EXPECT_EQ(spec.pod.service_account_name, "");
}

// Mount paths next to the controller's, but not at or under them.
TEST(MiniClusterParse, MountPathsBesideTheControllersAreAllowed) {
  json object = MiniClusterWithPodFields();
  for (const char* path :
       {"/etc/flux", "/etc/flux/curve2", "/runner", "/var/run/x"}) {
    object["spec"]["volumeMounts"][0]["mountPath"] = path;
    ParseResult r = ParseMiniCluster(object);
    EXPECT_TRUE(r.ok()) << path << ": " << r.ErrorText();
  }
}

TEST(MiniClusterParse, RejectsTwoMountsAtOnePath) {
  json object = MiniClusterWithPodFields();
  object["spec"]["volumeMounts"][1]["mountPath"] = "//data/";
  ParseResult r = ParseMiniCluster(object);
  EXPECT_NE(r.ErrorText().find(
                "spec.volumeMounts[1].mountPath: \"//data/\" is used twice"),
            std::string::npos)
      << r.ErrorText();
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
        BadSpec{"brokerRestarts", -1, "spec.brokerRestarts"},
        BadSpec{"brokerRestarts", 101, "spec.brokerRestarts"},
        BadSpec{"brokerRestarts", "3",
                "spec.brokerRestarts: must be an integer"},
        BadSpec{"minSize", 0, "spec.minSize: must be between 1 and spec.size"},
        BadSpec{"minSize", 5, "spec.minSize: must be between 1 and spec.size"},
        BadSpec{"minSize", "2", "spec.minSize: must be an integer"},
        BadSpec{"tbonTopo", "custom", "spec.tbonTopo: must be a Flux tree"},
        BadSpec{"tbonTopo", "kary:2\"\nx = 1", "spec.tbonTopo"},
        BadSpec{"ttlSecondsAfterFinished", -1,
                "spec.ttlSecondsAfterFinished: must be 0 or more"},
        BadSpec{"ttlSecondsAfterFinished", "60",
                "spec.ttlSecondsAfterFinished: must be an integer"},
        BadSpec{"command", json::array(), "spec.command"},
        BadSpec{"command", json::array({"ok", 3}), "spec.command"},
        BadSpec{"fluxUser", {{"uid", -1}}, "spec.fluxUser.uid"},
        BadSpec{"suspend", "yes", "spec.suspend"},
        BadSpec{"connectTimeout", "5s; rm -rf /", "spec.connectTimeout"},
        BadSpec{"topology", "rack", "spec.topology: must be a mapping"},
        BadSpec{"topology", json::object(),
                "spec.topology: must be a mapping with one of required or "
                "preferred"},
        BadSpec{"topology",
                {{"required", "a b"}},
                "spec.topology.required: must be a node label key"},
        BadSpec{"topology",
                {{"preferred", 3}},
                "spec.topology.preferred: must be a node label key"},
        BadSpec{"topology",
                {{"required", "example.com/rack"},
                 {"preferred", "example.com/block"}},
                "spec.topology: set required or preferred, not both"}));

// Each refusal of a pod template field, and the words that say why.
INSTANTIATE_TEST_SUITE_P(
    BadPodFields, MiniClusterRejects,
    ::testing::Values(
        BadSpec{"podLabels", json::array(),
                "spec.podLabels: must be a mapping"},
        BadSpec{"podLabels", {{"team", 3}}, "[\"team\"]: must be a string"},
        BadSpec{"podLabels", {{"bad key", "x"}}, "not a valid key"},
        BadSpec{"podLabels", {{"team", "a b"}}, "the value must be empty or"},
        BadSpec{"podLabels",
                {{"minicluster.dev/name", "other"}},
                "spec.podLabels[\"minicluster.dev/name\"]: set by the "
                "controller"},
        BadSpec{"podLabels",
                {{"minicluster.dev/role", "x"}},
                "[\"minicluster.dev/role\"]: set by the controller"},
        BadSpec{"podLabels",
                {{"app.kubernetes.io/managed-by", "me"}},
                "set by the controller"},
        BadSpec{"podLabels",
                {{"batch.kubernetes.io/job-name", "x"}},
                "set by the Job controller"},
        BadSpec{"podLabels", {{"job-name", "x"}}, "set by the Job controller"},
        BadSpec{"podLabels",
                {{"kueue.x-k8s.io/queue-name", "q"}},
                "set it in metadata.labels instead"},
        BadSpec{"podAnnotations",
                {{"minicluster.dev/x", "y"}},
                "spec.podAnnotations[\"minicluster.dev/x\"]: the "
                "minicluster.dev/ and batch.kubernetes.io/ prefixes"},
        BadSpec{"podAnnotations",
                {{"batch.kubernetes.io/job-completion-index", "0"}},
                "spec.podAnnotations[\"batch.kubernetes.io/"},
        BadSpec{"nodeSelector",
                {{"disk", "fast ssd"}},
                "spec.nodeSelector[\"disk\"]: must be a node label value"},
        BadSpec{"tolerations",
                {{"key", "gpu"}},
                "spec.tolerations: must be a list"},
        BadSpec{"tolerations",
                json::array({{{"key", "gpu"}, {"operator", "Maybe"}}}),
                "spec.tolerations[0].operator: must be Exists or Equal"},
        BadSpec{"tolerations",
                json::array({{{"key", "gpu"}, {"effect", "Never"}}}),
                "spec.tolerations[0].effect: must be NoSchedule"},
        BadSpec{"tolerations",
                json::array(
                    {{{"key", "gpu"}, {"operator", "Exists"}, {"value", "1"}}}),
                "spec.tolerations[0].value: must be empty"},
        BadSpec{"tolerations", json::array({{{"value", "1"}}}),
                "spec.tolerations[0].operator: must be Exists when key is "
                "empty"},
        BadSpec{"affinity", json::array(), "spec.affinity: must be"},
        BadSpec{"serviceAccountName", "Flux_Runner", "spec.serviceAccountName"},
        BadSpec{"serviceAccountName", 7, "spec.serviceAccountName"},
        BadSpec{"volumes", {{"name", "x"}}, "spec.volumes: must be a list"},
        BadSpec{"volumes", json::array({{{"name", "Data"}}}),
                "spec.volumes[0].name: must be a DNS-1123 label"},
        BadSpec{
            "volumes",
            json::array({{{"name", "curve"}, {"emptyDir", json::object()}}}),
            "spec.volumes[0].name: \"curve\" is the controller's volume"},
        BadSpec{"volumes", json::array({{{"name", "flux-config"}}}),
                "\"flux-config\" is the controller's volume"},
        BadSpec{"volumes", json::array({{{"name", "flux-run"}}}),
                "\"flux-run\" is the controller's volume"},
        BadSpec{"volumes", json::array({{{"name", "a"}}, {{"name", "a"}}}),
                "spec.volumes[1].name: \"a\" is used twice"},
        BadSpec{"volumes",
                json::array({{{"name", "cert"},
                              {"csi", {{"driver", "curve.minicluster.dev"}}}}}),
                "spec.volumes[0].csi.driver: the controller makes the one "
                "curve.minicluster.dev volume itself"},
        BadSpec{"volumes",
                json::array({{{"name", "node"},
                              {"hostPath", {{"path", "/var/lib/kubelet"}}}}}),
                "spec.volumes[0].hostPath: a MiniCluster may not mount the "
                "node's filesystem"},
        BadSpec{"volumeMounts",
                {{"name", "x"}},
                "spec.volumeMounts: must be a list"},
        BadSpec{"volumeMounts",
                json::array({{{"name", "curve"}, {"mountPath", "/cert"}}}),
                "spec.volumeMounts[0].name: \"curve\" is the controller's "
                "volume"},
        BadSpec{"volumeMounts",
                json::array({{{"name", "data"}, {"mountPath", "/data"}}}),
                "spec.volumeMounts[0].name: no volume \"data\" in "
                "spec.volumes"},
        BadSpec{
            "volumeMounts",
            json::array({{{"name", "d"}, {"mountPath", "/etc/flux/curve"}}}),
            "spec.volumeMounts[0].mountPath: \"/etc/flux/curve\" is at or "
            "under /etc/flux/curve, where the controller mounts the curve "
            "cert"},
        BadSpec{
            "volumeMounts",
            json::array({{{"name", "d"}, {"mountPath", "//etc/flux/curve/"}}}),
            "is at or under /etc/flux/curve"},
        BadSpec{"volumeMounts",
                json::array({{{"name", "d"},
                              {"mountPath", "/etc/flux/minicluster/config"}}}),
                "is at or under /etc/flux/minicluster"},
        BadSpec{"volumeMounts",
                json::array({{{"name", "d"}, {"mountPath", "/run/flux"}}}),
                "is at or under /run, where the controller mounts the broker's "
                "socket"},
        BadSpec{"volumeMounts",
                json::array({{{"name", "d"}, {"mountPath", "data"}}}),
                "spec.volumeMounts[0].mountPath: must be an absolute path"},
        BadSpec{"volumeMounts",
                json::array({{{"name", "d"}, {"mountPath", "/data/../run"}}}),
                "without . or .. parts"},
        BadSpec{"volumeMounts",
                json::array({{{"name", "d"}, {"mountPath", "/opt/flux/lib"}}}),
                "is at or under /opt/flux, where the controller mounts the "
                "Flux view"},
        BadSpec{"volumeMounts",
                json::array({{{"name", "d"},
                              {"mountPath", "/usr/local/bin/flux"}}}),
                "the Flux view's flux command"},
        BadSpec{"volumes",
                json::array({{{"name", "flux-view"},
                              {"emptyDir", json::object()}}}),
                "flux-view"},
        BadSpec{"flux", "flux-core-0.88.0", "spec.flux: must be a mapping"},
        BadSpec{"flux", {{"view", "Flux Core"}}, "spec.flux.view: must name"},
        BadSpec{"flux", {{"view", 88}}, "spec.flux.view: must name"},
        BadSpec{"flux", {{"fromImage", "yes"}}, "spec.flux.fromImage: must be"},
        BadSpec{"flux",
                {{"view", "flux-core-0.88.0"}, {"fromImage", true}},
                "spec.flux: set view or fromImage: true, not both"},
        // Quantities: what the API server would refuse in the Job, and what
        // Flux cannot use, is refused here with the field named.
        BadSpec{"resources",
                {{"limits", {{"cpu", "99999999999999999999"}}}},
                "spec.resources.limits.cpu: 99999999999999999999 is more "
                "than one node has"},
        BadSpec{"resources",
                {{"limits", {{"cpu", "1025"}}}},
                "spec.resources.limits.cpu: 1025 is more than one node has "
                "(Flux gives a broker at most 1024 cores)"},
        BadSpec{"resources",
                {{"limits", {{"nvidia.com/gpu", 65}}}},
                "at most 64 GPUs"},
        BadSpec{"resources",
                {{"requests", {{"cpu", "1e300"}}}},
                "spec.resources.requests.cpu: 1e300 is more than"},
        BadSpec{"resources",
                {{"requests", {{"cpu", "two"}}}},
                "spec.resources.requests.cpu: \"two\" is not a Kubernetes "
                "quantity"},
        BadSpec{"resources",
                {{"limits", {{"memory", "1.5 Gi"}}}},
                "spec.resources.limits.memory: \"1.5 Gi\" is not a"},
        BadSpec{"resources",
                {{"requests", {{"cpu", "-1"}}}},
                "spec.resources.requests.cpu: must not be negative"},
        BadSpec{"resources",
                {{"limits", {{"nvidia.com/gpu", "1.5"}}}},
                "spec.resources.limits.nvidia.com/gpu: must be a whole "
                "number"},
        BadSpec{"resources",
                {{"limits", {{"amd.com/gpu", "2e20"}}}},
                "spec.resources.limits.amd.com/gpu: 2e20 is more than one"},
        BadSpec{"resources",
                {{"limits", {{"cpu", true}}}},
                "spec.resources.limits.cpu: true is not a Kubernetes"},
        BadSpec{"resources",
                {{"limits", "4"}},
                "spec.resources.limits: must "
                "be a mapping"}));

// Fluxion's graph on rank 0 (a vertex per core and GPU of every rank) is
// bounded; sched-simple's is not that graph.
TEST(MiniClusterParse, BoundsFluxionsGraph) {
  json object = MiniClusterObject();
  object["spec"]["size"] = 256;
  object["spec"]["resources"] = {{"requests", {{"cpu", 1024}}}};
  EXPECT_TRUE(ParseMiniCluster(object).ok());
  object["spec"]["resources"]["limits"] = {{"nvidia.com/gpu", 1}};
  ParseResult r = ParseMiniCluster(object);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.ErrorText().find("256 × 1025 = 262400 is more than Fluxion"),
            std::string::npos)
      << r.ErrorText();
  EXPECT_NE(r.ErrorText().find("spec.flux.scheduler.simple: true"),
            std::string::npos);
  object["spec"]["flux"]["scheduler"] = {{"simple", true}};
  EXPECT_TRUE(ParseMiniCluster(object).ok())
      << ParseMiniCluster(object).ErrorText();
  // Flux models the limit, whatever the request: the case the bound is for.
  object = MiniClusterObject();
  object["spec"]["size"] = 1024;
  object["spec"]["resources"] = {{"requests", {{"cpu", 1}}},
                                 {"limits", {{"cpu", 1024}}}};
  r = ParseMiniCluster(object);
  EXPECT_NE(r.ErrorText().find("1024 × 1024 = 1048576 is more than Fluxion"),
            std::string::npos)
      << r.ErrorText();
}

// Every quantity form the API server takes passes, however written.
TEST(MiniClusterParse, AcceptsEveryQuantityForm) {
  for (const json& cpu :
       {json("1e3"), json("0.5k"), json("1Ki"), json("+.5"), json("1.5m"),
        json("250000u"), json("7E-1"), json("0.001k"), json(3), json(2.5),
        json("0"), json("00.5"), json("1e+2")}) {
    json object = MiniClusterObject();
    object["spec"]["resources"] = {{"requests", {{"cpu", cpu}}},
                                   {"limits", {{"nvidia.com/gpu", "0.002k"}}}};
    const ParseResult r = ParseMiniCluster(object);
    EXPECT_TRUE(r.ok()) << cpu.dump() << ": " << r.ErrorText();
  }
  for (const json& memory :
       {json("100Mi"), json("8Ei"), json("1e30"), json("1.G"),
        json("99999999999999999999"), json(1 << 30)}) {
    json object = MiniClusterObject();
    object["spec"]["resources"] = {{"limits", {{"memory", memory}}}};
    const ParseResult r = ParseMiniCluster(object);
    EXPECT_TRUE(r.ok()) << memory.dump() << ": " << r.ErrorText();
  }
}

TEST(MiniClusterParse, FluxViewOrFromImage) {
  json object = MiniClusterObject();
  EXPECT_EQ(ParseMiniCluster(object).minicluster->spec.flux.view, "");
  EXPECT_FALSE(ParseMiniCluster(object).minicluster->spec.flux.from_image);
  object["spec"]["flux"] = {{"view", "flux-core-0.88.0"}};
  EXPECT_EQ(ParseMiniCluster(object).minicluster->spec.flux.view,
            "flux-core-0.88.0");
  object["spec"]["flux"] = {{"fromImage", true}};
  ParseResult r = ParseMiniCluster(object);
  ASSERT_TRUE(r.ok()) << r.ErrorText();
  EXPECT_TRUE(r.minicluster->spec.flux.from_image);
  object["spec"]["flux"]["typo"] = 1;
  EXPECT_EQ(UnknownFields(object),
            std::vector<std::string>{
                "spec.flux.typo: unknown field; spec.flux has view, fromImage, "
                "scheduler, state (check for a typo)"});
}

// spec.flux.state: a claim for a persistent lead's statedir, named right,
// and no mount of the user's over where it goes.
TEST(MiniClusterParse, FluxStateNamesAClaimOfAPersistentMiniCluster) {
  json object = MiniClusterObject();
  object["spec"].erase("command");
  object["spec"]["flux"]["state"] = {{"claimName", "lab-state"}};
  auto r = ParseMiniCluster(object);
  ASSERT_TRUE(r.ok()) << r.ErrorText();
  EXPECT_EQ(r.minicluster->spec.flux.state_claim, "lab-state");

  object["spec"]["flux"]["state"] = {{"claimName", "Lab_State"}};
  r = ParseMiniCluster(object);
  EXPECT_NE(r.ErrorText().find("spec.flux.state.claimName: must name a "
                               "PersistentVolumeClaim"),
            std::string::npos)
      << r.ErrorText();
  object["spec"]["flux"]["state"] = "lab-state";
  EXPECT_NE(ParseMiniCluster(object).ErrorText().find(
                "spec.flux.state.claimName: must name"),
            std::string::npos);

  object["spec"]["flux"]["state"] = {{"claimName", "lab-state"}};
  object["spec"]["volumes"] = {
      {{"name", "data"}, {"emptyDir", json::object()}}};
  object["spec"]["volumeMounts"] = {
      {{"name", "data"}, {"mountPath", "/var/lib/flux/x"}}};
  EXPECT_NE(ParseMiniCluster(object).ErrorText().find(
                "spec.volumeMounts: \"/var/lib/flux/x\" is at or under "
                "/var/lib/flux, where spec.flux.state's claim is mounted"),
            std::string::npos);
  object["spec"]["volumeMounts"][0]["mountPath"] = "/var/lib";
  EXPECT_TRUE(ParseMiniCluster(object).ok());
  object["spec"]["volumes"][0]["name"] = "flux-state";
  object["spec"]["volumeMounts"][0]["name"] = "flux-state";
  EXPECT_FALSE(ParseMiniCluster(object).ok()) << "the controller's volume";

  object = MiniClusterObject();
  object["spec"]["command"] = {"hostname"};
  object["spec"]["flux"]["state"] = {{"claimName", "lab-state"}};
  EXPECT_NE(ParseMiniCluster(object).ErrorText().find(
                "spec.flux.state: only a persistent MiniCluster"),
            std::string::npos);
}

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

// What the MiniCluster cache keeps: the fields a reconcile with the Job in
// place reads, valid as they were, and none of the free-form ones.
TEST(TrimMiniClusterForCache, KeepsWhatReconcileReadsAndDropsTheRest) {
  json whole = MiniClusterWithPodFields();
  whole["metadata"]["labels"] = {{kQueueNameLabel, "q"}, {"team", "physics"}};
  whole["metadata"]["annotations"] = {{"note", std::string(100000, 'a')}};
  whole["metadata"]["managedFields"] = json::array({{{"manager", "kubectl"}}});
  whole["metadata"]["resourceVersion"] = "42";
  whole["spec"]["env"] =
      json::array({{{"name", "BIG"}, {"value", std::string(100000, 'e')}}});
  whole["spec"]["fluxUser"] = {{"uid", 1000}, {"gid", 1000}};
  whole["spec"]["brokerPort"] = 9000;
  whole["spec"]["suspend"] = true;
  whole["status"] = {{"state", "Queued"}};
  json cached = whole;
  TrimMiniClusterForCache(cached);

  EXPECT_EQ(cached["metadata"], json({{"name", "demo"},
                                      {"namespace", "science"},
                                      {"uid", whole["metadata"]["uid"]},
                                      {"generation", 3},
                                      {"resourceVersion", "42"},
                                      {"labels", {{kQueueNameLabel, "q"}}}}));
  EXPECT_EQ(cached["spec"], json({{"size", 4},
                                  {"image", whole["spec"]["image"]},
                                  {"fluxUser", whole["spec"]["fluxUser"]},
                                  {"brokerPort", 9000},
                                  {"suspend", true}}));
  EXPECT_EQ(cached["status"], whole["status"]);
  EXPECT_LT(cached.dump().size(), 1000u);
  const ParseResult parsed = ParseMiniCluster(cached);
  ASSERT_TRUE(parsed.ok()) << parsed.ErrorText();
  EXPECT_EQ(parsed.minicluster->QueueName(), "q");
  EXPECT_EQ(parsed.minicluster->spec.broker_port, 9000);
}

TEST(MiniClusterParse, ReadsTopology) {
  json object = MiniClusterObject();
  object["spec"]["topology"] = {{"required", "example.com/rack"}};
  ParseResult r = ParseMiniCluster(object);
  ASSERT_TRUE(r.ok()) << r.ErrorText();
  EXPECT_EQ(r.minicluster->spec.topology.required, "example.com/rack");
  EXPECT_EQ(r.minicluster->spec.topology.level(), "example.com/rack");
  object["spec"]["topology"] = {{"preferred", "kubernetes.io/hostname"}};
  r = ParseMiniCluster(object);
  ASSERT_TRUE(r.ok()) << r.ErrorText();
  EXPECT_EQ(r.minicluster->spec.topology.preferred, "kubernetes.io/hostname");
  EXPECT_TRUE(r.minicluster->spec.topology.required.empty());
  // One topology request: spec.topology's or a pod annotation's.
  object["spec"]["podAnnotations"] = {
      {"kueue.x-k8s.io/podset-required-topology", "example.com/block"}};
  r = ParseMiniCluster(object);
  EXPECT_EQ(r.ErrorText(),
            "spec.podAnnotations[\"kueue.x-k8s.io/podset-required-topology\"]: "
            "spec.topology writes Kueue's topology request; remove this "
            "annotation or spec.topology");
  object["spec"].erase("podAnnotations");
  object["spec"]["topology"] = {{"required", "example.com/rack"},
                                {"slices", 2}};
  EXPECT_EQ(UnknownFields(object),
            std::vector<std::string>{
                "spec.topology.slices: unknown field; spec.topology has "
                "required, preferred, slice (check for a typo)"});
}

// Kueue's slices: each run of slice.size brokers in one domain of
// slice.required, written beside the request; a size that does not divide
// spec.size, or beside minSize, is refused.
TEST(MiniClusterParse, ReadsTopologySlices) {
  json object = MiniClusterObject();
  object["spec"]["size"] = 4;
  object["spec"]["topology"] = {
      {"preferred", "example.com/rack"},
      {"slice", {{"required", "kubernetes.io/hostname"}, {"size", 2}}}};
  ParseResult r = ParseMiniCluster(object);
  ASSERT_TRUE(r.ok()) << r.ErrorText();
  EXPECT_EQ(
      TopologyAnnotations(r.minicluster->spec.topology),
      (json{{"kueue.x-k8s.io/podset-preferred-topology", "example.com/rack"},
            {"kueue.x-k8s.io/podset-slice-required-topology",
             "kubernetes.io/hostname"},
            {"kueue.x-k8s.io/podset-slice-size", "2"}}));
  EXPECT_TRUE(UnknownFields(object).empty());
  object["spec"]["size"] = 5;
  EXPECT_EQ(ParseMiniCluster(object).ErrorText(),
            "spec.topology.slice.size: 2 does not divide spec.size 5 (Kueue "
            "places slices of equal size)");
  object["spec"]["size"] = 4;
  object["spec"]["minSize"] = 2;
  object["metadata"]["labels"] = {{kQueueNameLabel, "q"}};
  EXPECT_NE(ParseMiniCluster(object).ErrorText().find(
                "spec.topology.slice: not with spec.minSize"),
            std::string::npos);
  object["spec"].erase("minSize");
  object["spec"]["topology"]["slice"]["size"] = 0;
  EXPECT_NE(ParseMiniCluster(object).ErrorText().find(
                "spec.topology.slice.size: must be a whole number"),
            std::string::npos);
  object["spec"]["topology"]["slice"] = {{"required", "a b"}, {"size", 2}};
  EXPECT_NE(ParseMiniCluster(object).ErrorText().find(
                "spec.topology.slice.required: must be a node label key"),
            std::string::npos);
  object["spec"]["topology"]["slice"] = {{"required", "x/y"}, {"sise", 2}};
  EXPECT_EQ(UnknownFields(object),
            std::vector<std::string>{
                "spec.topology.slice.sise: unknown field; spec.topology.slice "
                "has required, size (check for a typo)"});
  object["spec"]["topology"].erase("slice");
  object["spec"]["podAnnotations"] = {
      {"kueue.x-k8s.io/podset-slice-size", "2"}};
  EXPECT_NE(ParseMiniCluster(object).ErrorText().find(
                "spec.podAnnotations[\"kueue.x-k8s.io/podset-slice-size\"]"),
            std::string::npos);
}

}  // namespace
}  // namespace fcc::controller
