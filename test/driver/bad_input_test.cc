// Malformed requests over the real unix socket to the real driver: each is
// refused with the CSI spec's code and a message that names the field and
// says the fix, and nothing is left at the target path.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "csi_client.h"
#include "driver_process.h"
#include "mount_env.h"

namespace fcc::testing {
namespace {

using csi::v1::NodePublishVolumeRequest;
using csi::v1::NodeUnpublishVolumeRequest;
using csi::v1::VolumeCapability;

// One driver for the whole suite: every case is refused before any mount,
// so the cases cannot disturb each other (each also uses its own pod).
struct SuiteEnv {
  std::unique_ptr<ScratchRoot> root;
  std::unique_ptr<DriverProcess> driver;
  std::unique_ptr<CsiClient> client;
};

SuiteEnv* env = nullptr;

class DriverApiTest : public ::testing::Test {
 protected:
  static void TearDownTestSuite() {
    if (env != nullptr) {
      env->client.reset();
      if (env->driver->running()) env->driver->Terminate();
      delete env;
      env = nullptr;
    }
  }

  void SetUp() override {
    FCC_REQUIRE_MOUNT_ENV();
    if (env == nullptr) {
      auto e = std::make_unique<SuiteEnv>();
      e->root = std::make_unique<ScratchRoot>();
      const std::string key =
          e->root->WriteMasterKey("master.key", std::string(64, 'k'), 0400);
      e->driver = std::make_unique<DriverProcess>(
          DriverProcess::Options{.socket_path = e->root->socket_path("node-a"),
                                 .node_id = "node-a",
                                 .master_key_file = key,
                                 .log_path = e->root->log_path("node-a"),
                                 .kubelet_dir = e->root->path(),
                                 .extra_args = {}});
      ASSERT_TRUE(e->driver->Start())
          << ReadFileOrEmpty(e->root->log_path("node-a"));
      e->client = std::make_unique<CsiClient>(e->root->socket_path("node-a"));
      env = e.release();
    }
    ASSERT_TRUE(env->driver->running()) << "the driver died in an earlier case";
  }

  static KubeletPod PodFor(const std::string& case_name) {
    KubeletPod pod;
    pod.pods_dir = env->root->pods_dir();
    pod.name = "bad-" + case_name;
    // Pod UIDs are lowercase (UUIDs from the API server).
    pod.uid = "uid-" + case_name;
    std::ranges::transform(pod.uid, pod.uid.begin(), [](unsigned char c) {
      return static_cast<char>(std::tolower(c));
    });
    return pod;
  }

  // Every RPC has a deadline: a hung driver fails the test, never hangs it.
  static void Bound(grpc::ClientContext& context) {
    context.set_deadline(std::chrono::system_clock::now() +
                         std::chrono::seconds(10));
  }
};

// ---------------------------------------------------------------------------
// The table of malformed publish/unpublish requests.

struct BadCase {
  std::string name;
  // Publish cases edit the request kubelet would send for a valid pod.
  std::function<void(NodePublishVolumeRequest&)> publish;
  // Unpublish cases (publish unset) edit a valid unpublish request.
  std::function<void(NodeUnpublishVolumeRequest&)> unpublish;
  std::string field;  // the message must name this
  std::string fix;    // ... and say this
  grpc::StatusCode code = grpc::StatusCode::INVALID_ARGUMENT;
};

void SetAttr(NodePublishVolumeRequest& r, const std::string& key,
             const std::string& value) {
  (*r.mutable_volume_context())[key] = value;
}

BadCase Attr(std::string name, std::string key, std::string value,
             std::string field, std::string fix) {
  return BadCase{
      .name = std::move(name),
      .publish =
          [key, value](NodePublishVolumeRequest& r) { SetAttr(r, key, value); },
      .unpublish = nullptr,
      .field = std::move(field),
      .fix = std::move(fix)};
}

BadCase Owner(std::string name, std::string value) {
  return Attr(std::move(name), "owner", std::move(value),
              "volumeAttributes.owner", "numeric uid or uid:gid");
}

BadCase MiniCluster(std::string name, std::string value) {
  return Attr(std::move(name), "minicluster", std::move(value),
              "volumeAttributes.minicluster", "DNS-1123 subdomain");
}

std::vector<BadCase> BadCases() {
  using R = NodePublishVolumeRequest;
  using U = NodeUnpublishVolumeRequest;
  return {
      {"MissingVolumeId", [](R& r) { r.clear_volume_id(); }, nullptr,
       "volume_id is required", "csi-<sha256>"},
      {"OversizeVolumeId",
       [](R& r) { r.set_volume_id("csi-" + std::string(125, 'a')); }, nullptr,
       "volume_id", "at most 128 characters"},
      {"VolumeIdWithSlash", [](R& r) { r.set_volume_id("csi-abc/../x"); },
       nullptr, "volume_id", "A-Z a-z 0-9"},
      {"VolumeIdWithNewline", [](R& r) { r.set_volume_id("csi-abc\nx"); },
       nullptr, "volume_id", "A-Z a-z 0-9"},
      {"MissingTargetPath", [](R& r) { r.clear_target_path(); }, nullptr,
       "target_path is required", "/var/lib/kubelet/pods/<uid>"},
      {"RelativeTargetPath",
       [](R& r) { r.set_target_path(r.target_path().substr(1)); }, nullptr,
       "target_path", "absolute path"},
      {"TargetPathWithDotDot",
       [](R& r) {
         r.set_target_path(r.target_path() + "/../../../../escaped/mount");
       },
       nullptr, "target_path", "must not contain '.' or '..'"},
      {"TargetPathWithDot",
       [](R& r) { r.set_target_path(r.target_path() + "/./inner"); }, nullptr,
       "target_path", "must not contain '.' or '..'"},
      {"OversizeTargetPath",
       [](R& r) {
         r.set_target_path(r.target_path() + "/" + std::string(4096, 'p'));
       },
       nullptr, "target_path", "longer than 4095 bytes"},
      {"RootTargetPath", [](R& r) { r.set_target_path("/"); }, nullptr,
       "target_path", "below /"},
      {"MissingVolumeCapability", [](R& r) { r.clear_volume_capability(); },
       nullptr, "volume_capability", "is required"},
      {"BlockAccess",
       [](R& r) { r.mutable_volume_capability()->mutable_block(); }, nullptr,
       "volume_capability.block", "volumeMode: Filesystem"},
      {"NoAccessType",
       [](R& r) { r.mutable_volume_capability()->clear_mount(); }, nullptr,
       "volume_capability.mount", "is required"},
      {"MountFlags",
       [](R& r) {
         r.mutable_volume_capability()->mutable_mount()->add_mount_flags(
             "exec");
       },
       nullptr, "volume_capability.mount.mount_flags", "remove mountOptions"},
      {"FsTypeExt4",
       [](R& r) {
         r.mutable_volume_capability()->mutable_mount()->set_fs_type("ext4");
       },
       nullptr, "volume_capability.mount.fs_type", "leave fsType unset"},
      {"VolumeMountGroup",
       [](R& r) {
         r.mutable_volume_capability()->mutable_mount()->set_volume_mount_group(
             "2000");
       },
       nullptr, "volume_capability.mount.volume_mount_group",
       "'owner' volume attribute"},
      {"AccessModeUnknown",
       [](R& r) {
         r.mutable_volume_capability()->mutable_access_mode()->set_mode(
             VolumeCapability::AccessMode::UNKNOWN);
       },
       nullptr, "volume_capability.access_mode", "is required"},
      {"AccessModeMissing",
       [](R& r) { r.mutable_volume_capability()->clear_access_mode(); },
       nullptr, "volume_capability.access_mode", "is required"},
      {"StagingTargetPathSet",
       [](R& r) { r.set_staging_target_path(r.target_path() + "-staging"); },
       nullptr, "staging_target_path", "must be empty"},
      {"EphemeralMissing",
       [](R& r) {
         r.mutable_volume_context()->erase("csi.storage.k8s.io/ephemeral");
       },
       nullptr, "csi.storage.k8s.io/ephemeral",
       "volumeLifecycleModes: [Ephemeral]"},
      Attr("EphemeralFalse", "csi.storage.k8s.io/ephemeral", "false",
           "csi.storage.k8s.io/ephemeral", "volumes[].csi in a pod spec"),
      {"PodNamespaceMissing",
       [](R& r) {
         r.mutable_volume_context()->erase("csi.storage.k8s.io/pod.namespace");
       },
       nullptr, "csi.storage.k8s.io/pod.namespace", "podInfoOnMount: true"},
      Attr("PodNamespaceInvalid", "csi.storage.k8s.io/pod.namespace",
           "Kube_System", "csi.storage.k8s.io/pod.namespace", "DNS-1123 label"),
      Attr("PodNamespaceTraversal", "csi.storage.k8s.io/pod.namespace",
           "../kube-system", "csi.storage.k8s.io/pod.namespace",
           "DNS-1123 label"),
      Attr("UnknownAttributeTypo", "minicuster", "lammps",
           "volumeAttributes has unknown key \"minicuster\"",
           "check for a typo"),
      Attr("UserSuppliedNamespace", "namespace", "kube-system",
           "volumeAttributes has unknown key \"namespace\"",
           "allowed keys are minicluster, generation, owner"),
      {"MiniClusterMissing",
       [](R& r) { r.mutable_volume_context()->erase("minicluster"); }, nullptr,
       "volumeAttributes.minicluster is required", "name of the MiniCluster"},
      MiniCluster("MiniClusterEmpty", ""),
      MiniCluster("MiniClusterUnderscore", "lammps_1"),
      MiniCluster("MiniClusterDotDot", "../lammps"),
      MiniCluster("MiniClusterSlash", "lammps/x"),
      MiniCluster("MiniClusterUppercase", "LAMMPS"),
      MiniCluster("MiniCluster254Chars", std::string(254, 'a')),
      Attr("GenerationOversize", "generation", std::string(129, 'g'),
           "volumeAttributes.generation", "metadata.uid"),
      Attr("GenerationWithSpace", "generation", "gen 1",
           "volumeAttributes.generation", "at most 128 characters"),
      Owner("OwnerNonNumeric", "flux"),
      Owner("OwnerNegative", "-1"),
      Owner("OwnerNoUidValue", "4294967295"),
      Owner("OwnerOverflow", "99999999999"),
      Owner("OwnerGidOverflow", "1000:4294967296"),
      Owner("OwnerTrailingColon", "1000:"),
      Owner("OwnerLeadingColon", ":1000"),
      Owner("OwnerThreeParts", "1000:1000:1000"),
      Owner("OwnerEmpty", ""),
      {"UnpublishMissingVolumeId", nullptr, [](U& u) { u.clear_volume_id(); },
       "volume_id is required", "csi-<sha256>"},
      {"UnpublishMissingTargetPath", nullptr,
       [](U& u) { u.clear_target_path(); }, "target_path is required",
       "/var/lib/kubelet/pods/<uid>"},
      {"UnpublishRelativeTargetPath", nullptr,
       [](U& u) { u.set_target_path(u.target_path().substr(1)); },
       "target_path", "absolute path"},
      {"UnpublishTargetPathWithDotDot", nullptr,
       [](U& u) { u.set_target_path(u.target_path() + "/.."); }, "target_path",
       "must not contain '.' or '..'"},
      {"UnpublishRootTargetPath", nullptr,
       [](U& u) { u.set_target_path("//"); }, "target_path", "below /"},
      {"UnpublishOversizeVolumeId", nullptr,
       [](U& u) { u.set_volume_id(std::string(129, 'v')); }, "volume_id",
       "at most 128 characters"},
  };
}

class BadInputTest : public DriverApiTest,
                     public ::testing::WithParamInterface<BadCase> {};

TEST_P(BadInputTest, RefusedWithFieldAndFixAndNothingLeft) {
  const BadCase& c = GetParam();
  const KubeletPod pod = PodFor(c.name);
  KubeletPrepareParent(pod);
  const std::string target = KubeletTargetPath(pod);

  grpc::Status status;
  if (c.publish) {
    NodePublishVolumeRequest request = KubeletPublishRequest(
        pod, {{"minicluster", "lammps"}, {"owner", "1000"}});
    c.publish(request);
    status = env->client->Publish(request);
  } else {
    NodeUnpublishVolumeRequest request;
    request.set_volume_id(KubeletVolumeId(pod));
    request.set_target_path(target);
    c.unpublish(request);
    status = env->client->Unpublish(request.volume_id(), request.target_path());
  }
  EXPECT_EQ(status.error_code(), c.code) << status.error_message();
  EXPECT_NE(status.error_message().find(c.field), std::string::npos)
      << "message does not name the field: " << status.error_message();
  EXPECT_NE(status.error_message().find(c.fix), std::string::npos)
      << "message does not say the fix: " << status.error_message();
  // Nothing of the refused request is left behind.
  EXPECT_FALSE(std::filesystem::exists(target)) << target;
  EXPECT_TRUE(MountsUnder(env->root->pods_dir()).empty());
  EXPECT_FALSE(std::filesystem::exists(pod.pods_dir + "/" + pod.uid +
                                       "/volumes/escaped"));
}

INSTANTIATE_TEST_SUITE_P(Table, BadInputTest, ::testing::ValuesIn(BadCases()),
                         [](const ::testing::TestParamInfo<BadCase>& info) {
                           return info.param.name;
                         });

TEST_F(DriverApiTest, TableHasAtLeast25Cases) {
  EXPECT_GE(BadCases().size(), 25u);
}

// A refused request never touches a healthy volume, even when its path
// resolves to one.
TEST_F(DriverApiTest, RefusedUnpublishLeavesPublishedVolumeAlone) {
  KubeletPod pod = PodFor("healthy");
  KubeletPrepareParent(pod);
  const std::string target = KubeletTargetPath(pod);
  const auto request = KubeletPublishRequest(pod, {{"minicluster", "lammps"}});
  ASSERT_TRUE(env->client->Publish(request).ok());
  ASSERT_EQ(MountCountAt(target), 1);

  // Same target spelled through "..": refused, still mounted.
  const std::string dotted = pod.pods_dir + "/other/../" + pod.uid +
                             "/volumes/kubernetes.io~csi/" + pod.volume_name +
                             "/mount";
  auto status = env->client->Unpublish(request.volume_id(), dotted);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(MountCountAt(target), 1);

  // A refused publish for the same target does not disturb it either.
  auto bad = request;
  bad.mutable_volume_capability()->mutable_mount()->set_fs_type("ext4");
  EXPECT_EQ(env->client->Publish(bad).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(MountCountAt(target), 1);
  EXPECT_TRUE(std::filesystem::exists(target + "/curve.cert"));

  ASSERT_TRUE(env->client->Unpublish(request.volume_id(), target).ok());
  EXPECT_EQ(MountCountAt(target), 0);
  EXPECT_FALSE(std::filesystem::exists(target));
}

// ---------------------------------------------------------------------------
// Identity and the RPCs the driver does not offer.

TEST_F(DriverApiTest, UnimplementedNodeRpcs) {
  auto& node = env->client->node();
  std::vector<std::pair<std::string, grpc::Status>> results;
  {
    grpc::ClientContext ctx;
    Bound(ctx);
    csi::v1::NodeStageVolumeRequest req;
    req.set_volume_id("csi-x");
    req.set_staging_target_path(env->root->path() + "/staging");
    csi::v1::NodeStageVolumeResponse resp;
    results.emplace_back("NodeStageVolume",
                         node.NodeStageVolume(&ctx, req, &resp));
  }
  {
    grpc::ClientContext ctx;
    Bound(ctx);
    csi::v1::NodeUnstageVolumeRequest req;
    req.set_volume_id("csi-x");
    req.set_staging_target_path(env->root->path() + "/staging");
    csi::v1::NodeUnstageVolumeResponse resp;
    results.emplace_back("NodeUnstageVolume",
                         node.NodeUnstageVolume(&ctx, req, &resp));
  }
  {
    grpc::ClientContext ctx;
    Bound(ctx);
    csi::v1::NodeGetVolumeStatsRequest req;
    req.set_volume_id("csi-x");
    req.set_volume_path(env->root->pods_dir());
    csi::v1::NodeGetVolumeStatsResponse resp;
    results.emplace_back("NodeGetVolumeStats",
                         node.NodeGetVolumeStats(&ctx, req, &resp));
  }
  {
    grpc::ClientContext ctx;
    Bound(ctx);
    csi::v1::NodeExpandVolumeRequest req;
    req.set_volume_id("csi-x");
    req.set_volume_path(env->root->pods_dir());
    csi::v1::NodeExpandVolumeResponse resp;
    results.emplace_back("NodeExpandVolume",
                         node.NodeExpandVolume(&ctx, req, &resp));
  }
  for (const auto& [rpc, status] : results) {
    EXPECT_EQ(status.error_code(), grpc::StatusCode::UNIMPLEMENTED)
        << rpc << ": " << status.error_message();
  }
  EXPECT_FALSE(std::filesystem::exists(env->root->path() + "/staging"));
}

// A request far larger than any CSI request (gRPC's default would take
// 4 MiB) is refused by gRPC before any handler runs; the driver serves on.
TEST_F(DriverApiTest, OversizedRequestIsRefusedAndTheDriverServesOn) {
  KubeletPod pod = PodFor("oversized");
  KubeletPrepareParent(pod);
  auto request = KubeletPublishRequest(pod, {{"minicluster", "lammps"}});
  (*request.mutable_volume_context())
      ["csi.storage.k8s.io/serviceAccount."
       "tokens"] = std::string(128 * 1024, 't');
  grpc::ClientContext context;
  Bound(context);
  csi::v1::NodePublishVolumeResponse response;
  const grpc::Status status =
      env->client->node().NodePublishVolume(&context, request, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED)
      << status.error_message();
  EXPECT_FALSE(std::filesystem::exists(KubeletTargetPath(pod)));
  request.mutable_volume_context()->erase(
      "csi.storage.k8s.io/serviceAccount.tokens");
  const grpc::Status ok = env->client->Publish(request);
  EXPECT_TRUE(ok.ok()) << ok.error_message();
  EXPECT_TRUE(
      env->client->Unpublish(KubeletVolumeId(pod), KubeletTargetPath(pod))
          .ok());
}

TEST_F(DriverApiTest, NodeGetInfoReturnsNodeId) {
  grpc::ClientContext ctx;
  Bound(ctx);
  csi::v1::NodeGetInfoResponse resp;
  auto status = env->client->node().NodeGetInfo(
      &ctx, csi::v1::NodeGetInfoRequest(), &resp);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(resp.node_id(), "node-a");
}

TEST_F(DriverApiTest, NodeGetCapabilitiesIsEmpty) {
  grpc::ClientContext ctx;
  Bound(ctx);
  csi::v1::NodeGetCapabilitiesResponse resp;
  auto status = env->client->node().NodeGetCapabilities(
      &ctx, csi::v1::NodeGetCapabilitiesRequest(), &resp);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(resp.capabilities_size(), 0) << resp.DebugString();
}

TEST_F(DriverApiTest, GetPluginInfo) {
  grpc::ClientContext ctx;
  Bound(ctx);
  csi::v1::GetPluginInfoResponse resp;
  auto status = env->client->identity().GetPluginInfo(
      &ctx, csi::v1::GetPluginInfoRequest(), &resp);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(resp.name(), "curve.minicluster.dev");
  EXPECT_FALSE(resp.vendor_version().empty());
}

TEST_F(DriverApiTest, GetPluginCapabilitiesHasNoControllerService) {
  grpc::ClientContext ctx;
  Bound(ctx);
  csi::v1::GetPluginCapabilitiesResponse resp;
  auto status = env->client->identity().GetPluginCapabilities(
      &ctx, csi::v1::GetPluginCapabilitiesRequest(), &resp);
  ASSERT_TRUE(status.ok()) << status.error_message();
  for (const auto& cap : resp.capabilities()) {
    EXPECT_FALSE(cap.has_service() &&
                 cap.service().type() ==
                     csi::v1::PluginCapability::Service::CONTROLLER_SERVICE)
        << resp.DebugString();
  }
}

TEST_F(DriverApiTest, ProbeReady) {
  grpc::ClientContext ctx;
  Bound(ctx);
  csi::v1::ProbeResponse resp;
  auto status =
      env->client->identity().Probe(&ctx, csi::v1::ProbeRequest(), &resp);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_TRUE(resp.has_ready());
  EXPECT_TRUE(resp.ready().value());
}

}  // namespace
}  // namespace fcc::testing
