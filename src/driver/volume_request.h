// Validation of NodePublishVolume / NodeUnpublishVolume requests: pure
// functions from the CSI request to what the driver will do, or an error
// with the CSI spec's code and a message naming the field and the fix.
#pragma once

#include <grpcpp/support/status.h>

#include <cstdint>
#include <expected>
#include <optional>
#include <string>
#include <string_view>

#include "common/volume_contract.h"
#include "csi.pb.h"
#include "curve/keys.h"

namespace fcc::driver {

// Keys kubelet adds with podInfoOnMount: true
// (common::kKubeletAttributePrefix). Only kubelet may set these; the namespace
// in particular is the trust boundary and comes only from here.
inline constexpr std::string_view kPodNamespace =
    "csi.storage.k8s.io/pod.namespace";
inline constexpr std::string_view kPodName = "csi.storage.k8s.io/pod.name";
inline constexpr std::string_view kPodUid = "csi.storage.k8s.io/pod.uid";
inline constexpr std::string_view kEphemeral = "csi.storage.k8s.io/ephemeral";

// Bounds on what a request may carry (the CSI spec caps IDs at 128 bytes).
inline constexpr size_t kMaxVolumeIdBytes = 128;
inline constexpr size_t kMaxTargetPathBytes = 4095;
inline constexpr size_t kMaxGenerationBytes = 128;

struct Owner {
  uint32_t uid = 0;
  uint32_t gid = 0;
  friend bool operator==(const Owner&, const Owner&) = default;
};

// Everything a publish needs, validated.
struct PublishSpec {
  std::string volume_id;
  std::string target_path;
  curve::MiniClusterId minicluster;
  Owner owner;
  // volumeAttributes.key-id; empty: the default key.
  std::string key_id;
  std::string pod_name;  // for logs only
  std::string pod_uid;   // kubelet's; the target path is this pod's
};

// A view volume's publish (volumeAttributes {view: <name>}).
struct ViewPublishSpec {
  std::string volume_id;
  std::string target_path;
  std::string view;      // volumeAttributes.view
  std::string pod_name;  // for logs only
  std::string pod_uid;
};

struct UnpublishSpec {
  std::string volume_id;
  std::string target_path;
};

// A refused request: grpc code + a message for the user (never secrets).
struct RequestError {
  grpc::StatusCode code;
  std::string message;
  grpc::Status ToStatus() const { return grpc::Status(code, message); }
};

// What an operator may tighten for the whole node (serve flags).
struct ValidationPolicy {
  // Refuse readonly=false (a pod spec without volumes[].csi.readOnly: true).
  // Off by default: the volume is a tmpfs whose superblock is read-only
  // whatever the request says, so refusing protects nothing and only breaks
  // pod builders that cannot set the field (flux-operator v1alpha2). On for
  // clusters whose policy is that every pod spec says what it gets.
  bool require_readonly = false;
  // kubelet's root directory (--kubelet-dir): publish and unpublish touch
  // only <kubelet_dir>/pods/<pod-uid>/volumes/kubernetes.io~csi/<name>/mount.
  // Absolute, without a trailing '/' (CheckKubeletDir).
  std::string kubelet_dir = "/var/lib/kubelet";
};

// Checks a --kubelet-dir value and drops trailing '/'s; the error names the
// flag.
std::expected<std::string, std::string> CheckKubeletDir(std::string_view dir);

std::expected<PublishSpec, RequestError> ValidatePublishRequest(
    const csi::v1::NodePublishVolumeRequest& request,
    const ValidationPolicy& policy = {});

// True if the request is for a view volume (common::IsViewVolume: `view`
// alone beside kubelet's keys). Such a request is validated by
// ValidateViewPublishRequest only, so a volume can never be both a cert and a
// view.
bool IsViewRequest(const csi::v1::NodePublishVolumeRequest& request);

std::expected<ViewPublishSpec, RequestError> ValidateViewPublishRequest(
    const csi::v1::NodePublishVolumeRequest& request,
    const ValidationPolicy& policy = {});

std::expected<UnpublishSpec, RequestError> ValidateUnpublishRequest(
    const csi::v1::NodeUnpublishVolumeRequest& request,
    const ValidationPolicy& policy = {});

// The pod UID in `path` if it is an inline CSI volume's target in kubelet's
// layout (<kubelet_dir>/pods/<uid>/volumes/kubernetes.io~csi/<name>/mount),
// the only paths the driver publishes at.
std::optional<std::string> PodUidOfKubeletTarget(std::string_view path,
                                                 std::string_view kubelet_dir);

// "uid" or "uid:gid", decimal, each below 2^32-1 (which means "no id").
// A lone uid also sets the gid to the same number.
std::expected<Owner, std::string> ParseOwner(std::string_view text);

}  // namespace fcc::driver
