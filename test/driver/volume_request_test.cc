// Pure unit tests of the request validation (no root, no driver process).
#include "driver/volume_request.h"

#include <gtest/gtest.h>

#include <string>

namespace fcc::driver {
namespace {

using csi::v1::NodePublishVolumeRequest;
using csi::v1::NodeUnpublishVolumeRequest;
using csi::v1::VolumeCapability;

constexpr char kVolumeId[] =
    "csi-0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
constexpr char kTarget[] =
    "/var/lib/kubelet/pods/6f1c2d3e/volumes/kubernetes.io~csi/curve/mount";

// What kubelet sends for a correct inline ephemeral volume.
NodePublishVolumeRequest GoodRequest() {
  NodePublishVolumeRequest r;
  r.set_volume_id(kVolumeId);
  r.set_target_path(kTarget);
  r.set_readonly(true);
  r.mutable_volume_capability()->mutable_mount();
  r.mutable_volume_capability()->mutable_access_mode()->set_mode(
      VolumeCapability::AccessMode::SINGLE_NODE_WRITER);
  auto& ctx = *r.mutable_volume_context();
  ctx["minicluster"] = "lammps";
  ctx["csi.storage.k8s.io/pod.namespace"] = "default";
  ctx["csi.storage.k8s.io/pod.name"] = "lammps-0";
  ctx["csi.storage.k8s.io/pod.uid"] = "6f1c2d3e";
  ctx["csi.storage.k8s.io/serviceAccount.name"] = "default";
  ctx["csi.storage.k8s.io/ephemeral"] = "true";
  return r;
}

// Asserts INVALID_ARGUMENT with a message containing `field`.
void ExpectInvalid(const NodePublishVolumeRequest& r, const std::string& field,
                   const std::string& hint = "") {
  auto spec = ValidatePublishRequest(r);
  ASSERT_FALSE(spec.has_value()) << "accepted a request that names " << field;
  EXPECT_EQ(spec.error().code, grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(spec.error().message.find(field), std::string::npos)
      << spec.error().message;
  if (!hint.empty()) {
    EXPECT_NE(spec.error().message.find(hint), std::string::npos)
        << spec.error().message;
  }
}

TEST(ValidatePublishRequest, AcceptsKubeletRequest) {
  auto r = GoodRequest();
  (*r.mutable_volume_context())["generation"] = "uid-1234";
  (*r.mutable_volume_context())["owner"] = "1000:2000";
  auto spec = ValidatePublishRequest(r);
  ASSERT_TRUE(spec.has_value()) << spec.error().message;
  EXPECT_EQ(spec->volume_id, kVolumeId);
  EXPECT_EQ(spec->target_path, kTarget);
  EXPECT_EQ(spec->minicluster.namespace_name, "default");
  EXPECT_EQ(spec->minicluster.name, "lammps");
  EXPECT_EQ(spec->minicluster.generation, "uid-1234");
  EXPECT_EQ(spec->owner, (Owner{1000, 2000}));
  EXPECT_EQ(spec->pod_name, "lammps-0");
  EXPECT_EQ(spec->pod_uid, "6f1c2d3e");
}

TEST(ValidatePublishRequest, DefaultsOwnerToRootAndGenerationToEmpty) {
  auto spec = ValidatePublishRequest(GoodRequest());
  ASSERT_TRUE(spec.has_value()) << spec.error().message;
  EXPECT_EQ(spec->owner, (Owner{0, 0}));
  EXPECT_EQ(spec->minicluster.generation, "");
}

TEST(ValidatePublishRequest, StripsTrailingSlashesFromTarget) {
  auto r = GoodRequest();
  r.set_target_path(std::string(kTarget) + "//");
  auto spec = ValidatePublishRequest(r);
  ASSERT_TRUE(spec.has_value()) << spec.error().message;
  EXPECT_EQ(spec->target_path, kTarget);
}

TEST(ValidatePublishRequest, AcceptsTmpfsFsTypeAndMultiWriterMode) {
  auto r = GoodRequest();
  r.mutable_volume_capability()->mutable_mount()->set_fs_type("tmpfs");
  r.mutable_volume_capability()->mutable_access_mode()->set_mode(
      VolumeCapability::AccessMode::MULTI_NODE_READER_ONLY);
  EXPECT_TRUE(ValidatePublishRequest(r).has_value());
}

TEST(ValidatePublishRequest, IgnoresOtherKubeletKeys) {
  auto r = GoodRequest();
  (*r.mutable_volume_context())["csi.storage.k8s.io/serviceAccount.tokens"] =
      R"({"aud":{"token":"t0k3n"}})";
  EXPECT_TRUE(ValidatePublishRequest(r).has_value());
}

TEST(ValidatePublishRequest, RequiresVolumeId) {
  auto r = GoodRequest();
  r.clear_volume_id();
  ExpectInvalid(r, "volume_id", "required");
}

TEST(ValidatePublishRequest, BoundsVolumeId) {
  auto r = GoodRequest();
  r.set_volume_id(std::string(128, 'a'));
  EXPECT_TRUE(ValidatePublishRequest(r).has_value());
  r.set_volume_id(std::string(129, 'a'));
  ExpectInvalid(r, "volume_id", "at most 128");
  r.set_volume_id("csi-../../etc");
  ExpectInvalid(r, "volume_id");
  r.set_volume_id("csi abc");
  ExpectInvalid(r, "volume_id");
}

TEST(ValidatePublishRequest, ChecksTargetPath) {
  auto r = GoodRequest();
  r.clear_target_path();
  ExpectInvalid(r, "target_path", "required");
  r.set_target_path("var/lib/kubelet/pods/x/mount");
  ExpectInvalid(r, "target_path", "absolute");
  r.set_target_path("/var/lib/kubelet/pods/../../etc/mount");
  ExpectInvalid(r, "target_path", "'..'");
  r.set_target_path("/var/lib/kubelet/pods/./x/mount");
  ExpectInvalid(r, "target_path", "'.'");
  r.set_target_path("/var/lib/kubelet/pods/x/..");
  ExpectInvalid(r, "target_path");
  r.set_target_path(std::string("/var/lib/\0x", 11));
  ExpectInvalid(r, "target_path", "NUL");
  r.set_target_path("/" + std::string(4095, 'a'));
  ExpectInvalid(r, "target_path", "longer");
  for (const char* root : {"/", "//", "///"}) {
    r.set_target_path(root);
    ExpectInvalid(r, "target_path", "below /");
  }
  // ".." inside a name is just a name: refused for its shape, not as a
  // component.
  r.set_target_path(
      "/var/lib/kubelet/pods/6f1c2d3e/volumes/kubernetes.io~csi/a..b/mount");
  ExpectInvalid(r, "target_path", "kubelet's layout");
}

// Publish and unpublish touch only kubelet's inline-volume targets: every
// other path is refused before anything is done, naming the shape.
TEST(ValidatePublishRequest, ConfinesTargetsToKubeletsVolumes) {
  auto r = GoodRequest();
  for (const char* outside : {
           "/etc",
           "/var/lib/kubelet",
           "/var/lib/kubelet/plugins/curve.minicluster.dev/csi.sock",
           "/var/lib/kubelet/pods/6f1c2d3e",
           "/var/lib/kubelet/pods/6f1c2d3e/volumes/kubernetes.io~csi/curve",
           "/var/lib/kubelet/pods/6f1c2d3e/volumes/kubernetes.io~csi/curve/"
           "mount/deeper",
           "/var/lib/kubelet/pods/6f1c2d3e/volumes/kubernetes.io~empty-dir/"
           "curve/mount",
           "/var/lib/kubelet/pods/6f1c2d3e/volumes/kubernetes.io~csi/a/b/mount",
           "/var/lib/kubelet/pods//volumes/kubernetes.io~csi/curve/mount",
           "/var/lib/kubelet/pods/6F1C2D3E/volumes/kubernetes.io~csi/curve/"
           "mount",
           "/var/lib/kubeletx/pods/6f1c2d3e/volumes/kubernetes.io~csi/curve/"
           "mount",
           "/srv/kubelet/pods/6f1c2d3e/volumes/kubernetes.io~csi/curve/mount",
       }) {
    SCOPED_TRACE(outside);
    r.set_target_path(outside);
    ExpectInvalid(r, "target_path", "/var/lib/kubelet/pods/<pod-uid>/");
    NodeUnpublishVolumeRequest u;
    u.set_volume_id(kVolumeId);
    u.set_target_path(outside);
    auto spec = ValidateUnpublishRequest(u);
    ASSERT_FALSE(spec.has_value());
    EXPECT_EQ(spec.error().code, grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_NE(spec.error().message.find("--kubelet-dir"), std::string::npos);
  }
}

TEST(ValidatePublishRequest, TheTargetIsThePodKubeletNamed) {
  auto r = GoodRequest();
  (*r.mutable_volume_context())["csi.storage.k8s.io/pod.uid"] = "0ther";
  ExpectInvalid(r, "csi.storage.k8s.io/pod.uid", "<pod-uid> of target_path");
  r.mutable_volume_context()->erase("csi.storage.k8s.io/pod.uid");
  ExpectInvalid(r, "csi.storage.k8s.io/pod.uid", "podInfoOnMount: true");
}

TEST(ValidatePublishRequest, FollowsKubeletDir) {
  const ValidationPolicy policy{.kubelet_dir = "/srv/kubelet"};
  auto r = GoodRequest();
  EXPECT_FALSE(ValidatePublishRequest(r, policy).has_value());
  r.set_target_path(
      "/srv/kubelet/pods/6f1c2d3e/volumes/kubernetes.io~csi/curve/mount");
  auto spec = ValidatePublishRequest(r, policy);
  ASSERT_TRUE(spec.has_value()) << spec.error().message;
  EXPECT_EQ(spec->pod_uid, "6f1c2d3e");
  // kubelet's --root-dir=/ puts the pods at /pods.
  r.set_target_path("/pods/6f1c2d3e/volumes/kubernetes.io~csi/curve/mount");
  EXPECT_TRUE(ValidatePublishRequest(r, {.kubelet_dir = ""}).has_value());
}

TEST(CheckKubeletDir, WantsAPlainAbsolutePath) {
  EXPECT_EQ(CheckKubeletDir("/var/lib/kubelet/").value(), "/var/lib/kubelet");
  EXPECT_EQ(CheckKubeletDir("/").value(), "");
  for (const char* bad : {"", "var/lib/kubelet", "/var/../kubelet",
                          "/var/lib/kubelet/.", "/var//lib"}) {
    SCOPED_TRACE(bad);
    auto checked = CheckKubeletDir(bad);
    ASSERT_FALSE(checked.has_value());
    EXPECT_NE(checked.error().find("--kubelet-dir"), std::string::npos);
  }
}

TEST(ValidatePublishRequest, ChecksCapability) {
  auto r = GoodRequest();
  r.clear_volume_capability();
  ExpectInvalid(r, "volume_capability", "required");

  r = GoodRequest();
  r.mutable_volume_capability()->mutable_block();
  ExpectInvalid(r, "volume_capability.block", "Filesystem");

  r = GoodRequest();
  r.mutable_volume_capability()->mutable_mount()->set_fs_type("ext4");
  ExpectInvalid(r, "volume_capability.mount.fs_type", "leave fsType unset");

  r = GoodRequest();
  r.mutable_volume_capability()->mutable_mount()->add_mount_flags("rw");
  ExpectInvalid(r, "volume_capability.mount.mount_flags", "mountOptions");

  r = GoodRequest();
  r.mutable_volume_capability()->mutable_mount()->set_volume_mount_group(
      "1000");
  ExpectInvalid(r, "volume_capability.mount.volume_mount_group", "owner");

  r = GoodRequest();
  r.mutable_volume_capability()->clear_access_mode();
  ExpectInvalid(r, "volume_capability.access_mode");

  r = GoodRequest();
  r.mutable_volume_capability()->mutable_access_mode()->set_mode(
      VolumeCapability::AccessMode::UNKNOWN);
  ExpectInvalid(r, "volume_capability.access_mode");
}

TEST(ValidatePublishRequest, FsTypeMessageNeverEchoesArbitraryBytes) {
  auto r = GoodRequest();
  r.mutable_volume_capability()->mutable_mount()->set_fs_type("x\ny");
  auto spec = ValidatePublishRequest(r);
  ASSERT_FALSE(spec.has_value());
  EXPECT_EQ(spec.error().message.find('\n'), std::string::npos);
  EXPECT_NE(spec.error().message.find("<invalid>"), std::string::npos);
}

// What kubelet sends for the volume flux-operator v1alpha2 builds from
// csiDriver/csiDriverAttributes: a CSIVolumeSource with only driver and
// volumeAttributes, so readonly is false, and the attributes verbatim.
TEST(ValidatePublishRequest, AcceptsFluxOperatorRequestByDefault) {
  auto r = GoodRequest();
  r.set_readonly(false);
  (*r.mutable_volume_context())["generation"] = "1";
  (*r.mutable_volume_context())["owner"] = "0";
  auto spec = ValidatePublishRequest(r);
  ASSERT_TRUE(spec.has_value()) << spec.error().message;
  EXPECT_EQ(spec->minicluster.name, "lammps");
  EXPECT_EQ(spec->minicluster.generation, "1");
  EXPECT_EQ(spec->owner, (Owner{0, 0}));
}

TEST(ValidatePublishRequest, PolicyMayRequireReadonly) {
  auto r = GoodRequest();
  EXPECT_TRUE(
      ValidatePublishRequest(r, {.require_readonly = true}).has_value());
  r.set_readonly(false);
  auto spec = ValidatePublishRequest(r, {.require_readonly = true});
  ASSERT_FALSE(spec.has_value());
  EXPECT_EQ(spec.error().code, grpc::StatusCode::INVALID_ARGUMENT);
  // Names the field, the fix in the pod spec and the flag behind it.
  for (const char* part :
       {"readonly", "readOnly: true", "--require-readonly"}) {
    EXPECT_NE(spec.error().message.find(part), std::string::npos)
        << part << " not in: " << spec.error().message;
  }
}

TEST(ValidatePublishRequest, ReadonlyFalseRelaxesNothingElse) {
  auto r = GoodRequest();
  r.set_readonly(false);
  r.mutable_volume_context()->erase("csi.storage.k8s.io/ephemeral");
  ExpectInvalid(r, "csi.storage.k8s.io/ephemeral");
  r = GoodRequest();
  r.set_readonly(false);
  (*r.mutable_volume_context())["namespace"] = "kube-system";
  ExpectInvalid(r, "unknown key");
}

TEST(ValidatePublishRequest, RefusesStagingPath) {
  auto r = GoodRequest();
  r.set_staging_target_path("/var/lib/kubelet/plugins/staging");
  ExpectInvalid(r, "staging_target_path");
}

TEST(ValidatePublishRequest, RequiresEphemeral) {
  auto r = GoodRequest();
  r.mutable_volume_context()->erase("csi.storage.k8s.io/ephemeral");
  ExpectInvalid(r, "csi.storage.k8s.io/ephemeral", "volumeLifecycleModes");
  (*r.mutable_volume_context())["csi.storage.k8s.io/ephemeral"] = "false";
  ExpectInvalid(r, "csi.storage.k8s.io/ephemeral");
  (*r.mutable_volume_context())["csi.storage.k8s.io/ephemeral"] = "True";
  ExpectInvalid(r, "csi.storage.k8s.io/ephemeral");
}

TEST(ValidatePublishRequest, NamespaceComesOnlyFromKubelet) {
  auto r = GoodRequest();
  r.mutable_volume_context()->erase("csi.storage.k8s.io/pod.namespace");
  ExpectInvalid(r, "csi.storage.k8s.io/pod.namespace", "podInfoOnMount: true");
  // A user attribute cannot stand in for it.
  (*r.mutable_volume_context())["namespace"] = "kube-system";
  auto spec = ValidatePublishRequest(r);
  ASSERT_FALSE(spec.has_value());

  r = GoodRequest();
  (*r.mutable_volume_context())["namespace"] = "kube-system";
  ExpectInvalid(r, "unknown key");

  r = GoodRequest();
  (*r.mutable_volume_context())["csi.storage.k8s.io/pod.namespace"] = "Kube_X";
  ExpectInvalid(r, "csi.storage.k8s.io/pod.namespace", "DNS-1123");
}

TEST(ValidatePublishRequest, RejectsUnknownAttribute) {
  auto r = GoodRequest();
  (*r.mutable_volume_context())["minicuster"] = "lammps";
  ExpectInvalid(r, "\"minicuster\"", "typo");
  // An unprintable key is not echoed.
  r = GoodRequest();
  (*r.mutable_volume_context())["bad\nkey"] = "x";
  auto spec = ValidatePublishRequest(r);
  ASSERT_FALSE(spec.has_value());
  EXPECT_EQ(spec.error().message.find('\n'), std::string::npos);
}

TEST(ValidatePublishRequest, ChecksMiniClusterName) {
  auto r = GoodRequest();
  r.mutable_volume_context()->erase("minicluster");
  ExpectInvalid(r, "volumeAttributes.minicluster", "required");
  for (const std::string& bad : std::initializer_list<std::string>{
           "", "../x", "..", "Lammps", "lammps_1", "-lammps", "lammps-", "a..b",
           "lammps/x", std::string(254, 'a')}) {
    SCOPED_TRACE(bad);
    (*r.mutable_volume_context())["minicluster"] = bad;
    ExpectInvalid(r, "volumeAttributes.minicluster", "DNS-1123");
  }
  (*r.mutable_volume_context())["minicluster"] = std::string(253, 'a');
  // Kubernetes' subdomain rule bounds the whole name, not each label.
  EXPECT_TRUE(ValidatePublishRequest(r).has_value());
}

TEST(ValidatePublishRequest, ChecksGeneration) {
  auto r = GoodRequest();
  (*r.mutable_volume_context())["generation"] = std::string(128, 'g');
  EXPECT_TRUE(ValidatePublishRequest(r).has_value());
  (*r.mutable_volume_context())["generation"] = std::string(129, 'g');
  ExpectInvalid(r, "volumeAttributes.generation", "metadata.uid");
  (*r.mutable_volume_context())["generation"] = "a b";
  ExpectInvalid(r, "volumeAttributes.generation");
}

TEST(ValidatePublishRequest, ChecksOwner) {
  auto r = GoodRequest();
  for (const char* bad :
       {"flux", "-1", "4294967295", "99999999999", "1000:", ":1000", "",
        "1000:1000:1000", "+5", " 5", "0x10", "1000:-1"}) {
    SCOPED_TRACE(bad);
    (*r.mutable_volume_context())["owner"] = bad;
    ExpectInvalid(r, "volumeAttributes.owner", "uid:gid");
  }
}

TEST(ValidatePublishRequest, ChecksKeyId) {
  auto r = GoodRequest();
  auto spec = ValidatePublishRequest(r);
  ASSERT_TRUE(spec) << spec.error().message;
  EXPECT_EQ(spec->key_id, "") << "no attribute: the default key";
  const std::string longest(63, 'a');
  for (const char* good : {"master", "k2", "2026-12", longest.c_str()}) {
    (*r.mutable_volume_context())["key-id"] = good;
    spec = ValidatePublishRequest(r);
    ASSERT_TRUE(spec) << good << ": " << spec.error().message;
    EXPECT_EQ(spec->key_id, good);
  }
  const std::string too_long(64, 'a');
  for (const char* bad : {"", "K2", "-k2", "k2-", "k2.key", "../master", "a/b",
                          "k 2", too_long.c_str()}) {
    SCOPED_TRACE(bad);
    (*r.mutable_volume_context())["key-id"] = bad;
    ExpectInvalid(r, "volumeAttributes.key-id", "DNS-1123 label");
  }
}

// A view request: the one `view` attribute beside kubelet's keys.
NodePublishVolumeRequest ViewRequest(const std::string& view) {
  auto r = GoodRequest();
  r.mutable_volume_context()->erase("minicluster");
  (*r.mutable_volume_context())["view"] = view;
  return r;
}

TEST(ValidateViewPublishRequest, AcceptsKubeletsViewRequest) {
  const auto r = ViewRequest("flux-core-0.88.0");
  ASSERT_TRUE(IsViewRequest(r));
  EXPECT_FALSE(IsViewRequest(GoodRequest()));
  auto spec = ValidateViewPublishRequest(r);
  ASSERT_TRUE(spec.has_value()) << spec.error().message;
  EXPECT_EQ(spec->view, "flux-core-0.88.0");
  EXPECT_EQ(spec->volume_id, kVolumeId);
  EXPECT_EQ(spec->target_path, kTarget);
  EXPECT_EQ(spec->pod_uid, "6f1c2d3e");
}

// The same kubelet-side checks as a cert volume: ephemeral, the pod's own
// target, a mount capability.
TEST(ValidateViewPublishRequest, KeepsEveryKubeletCheck) {
  auto r = ViewRequest("flux-core-0.88.0");
  r.mutable_volume_context()->erase("csi.storage.k8s.io/ephemeral");
  EXPECT_FALSE(ValidateViewPublishRequest(r).has_value());
  r = ViewRequest("flux-core-0.88.0");
  (*r.mutable_volume_context())["csi.storage.k8s.io/pod.uid"] = "other";
  EXPECT_FALSE(ValidateViewPublishRequest(r).has_value());
  r = ViewRequest("flux-core-0.88.0");
  r.set_target_path("/etc/passwd");
  EXPECT_FALSE(ValidateViewPublishRequest(r).has_value());
  r = ViewRequest("flux-core-0.88.0");
  r.mutable_volume_capability()->mutable_block();
  EXPECT_FALSE(ValidateViewPublishRequest(r).has_value());
}

// Unlike a cert's, whatever --require-readonly says: kubelet would mount the
// node's one copy of Flux writable into the pod.
TEST(ValidateViewPublishRequest, RefusesReadonlyFalse) {
  auto r = ViewRequest("flux-core-0.88.0");
  r.set_readonly(false);
  auto spec = ValidateViewPublishRequest(r);
  ASSERT_FALSE(spec.has_value());
  EXPECT_EQ(spec.error().code, grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(spec.error().message.find("readOnly: true"), std::string::npos)
      << spec.error().message;
}

TEST(ValidateViewPublishRequest, RefusesAnyOtherAttributeAndBadNames) {
  for (const char* key :
       {"minicluster", "generation", "owner", "key-id", "x"}) {
    auto r = ViewRequest("flux-core-0.88.0");
    (*r.mutable_volume_context())[key] = "0";
    auto spec = ValidateViewPublishRequest(r);
    ASSERT_FALSE(spec.has_value()) << key;
    EXPECT_EQ(spec.error().code, grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_NE(spec.error().message.find(std::string("volumeAttributes.") + key),
              std::string::npos)
        << spec.error().message;
  }
  for (const char* bad : {"", "..", "../etc", "Flux", "a/b", "a b",
                          "flux-core-0.88.0-with-a-name-that-is-longer-than-"
                          "sixty-three-characters"}) {
    auto spec = ValidateViewPublishRequest(ViewRequest(bad));
    ASSERT_FALSE(spec.has_value()) << bad;
    EXPECT_NE(spec.error().message.find("volumeAttributes.view"),
              std::string::npos)
        << spec.error().message;
  }
}

TEST(ParseOwner, AcceptsUidAndUidGid) {
  EXPECT_EQ(ParseOwner("0"), (Owner{0, 0}));
  EXPECT_EQ(ParseOwner("1000"), (Owner{1000, 1000}));
  EXPECT_EQ(ParseOwner("1000:100"), (Owner{1000, 100}));
  EXPECT_EQ(ParseOwner("4294967294"), (Owner{4294967294u, 4294967294u}));
  EXPECT_EQ(ParseOwner("0000001000"), (Owner{1000, 1000}));
}

TEST(ParseOwner, RejectsEverythingElse) {
  for (const char* bad :
       {"", ":", "1000:", ":1000", "-1", "4294967295", "4294967295:0",
        "0:4294967295", "99999999999", "18446744073709551617", "abc", "1e3",
        "1000 ", "1000:1000:1", "١٢"}) {
    SCOPED_TRACE(bad);
    auto owner = ParseOwner(bad);
    ASSERT_FALSE(owner.has_value());
    EXPECT_NE(owner.error().find("uid:gid"), std::string::npos);
  }
}

TEST(ValidateUnpublishRequest, AcceptsAndChecks) {
  NodeUnpublishVolumeRequest r;
  r.set_volume_id(kVolumeId);
  r.set_target_path(std::string(kTarget) + "/");
  auto spec = ValidateUnpublishRequest(r);
  ASSERT_TRUE(spec.has_value()) << spec.error().message;
  EXPECT_EQ(spec->volume_id, kVolumeId);
  EXPECT_EQ(spec->target_path, kTarget);

  auto expect_invalid = [](const NodeUnpublishVolumeRequest& req,
                           const std::string& field) {
    auto s = ValidateUnpublishRequest(req);
    ASSERT_FALSE(s.has_value()) << field;
    EXPECT_EQ(s.error().code, grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_NE(s.error().message.find(field), std::string::npos)
        << s.error().message;
  };
  auto bad = r;
  bad.clear_volume_id();
  expect_invalid(bad, "volume_id");
  bad = r;
  bad.clear_target_path();
  expect_invalid(bad, "target_path");
  bad = r;
  bad.set_target_path("relative/mount");
  expect_invalid(bad, "target_path");
  bad = r;
  bad.set_target_path("/var/lib/kubelet/pods/../../../etc");
  expect_invalid(bad, "target_path");
  bad = r;
  bad.set_target_path("/");
  expect_invalid(bad, "target_path");
  bad = r;
  bad.set_volume_id(std::string(129, 'v'));
  expect_invalid(bad, "volume_id");
}

}  // namespace
}  // namespace fcc::driver
