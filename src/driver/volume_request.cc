#include "driver/volume_request.h"

#include <fmt/format.h>

#include <charconv>
#include <optional>
#include <utility>

#include "common/names.h"
#include "common/path.h"
#include "driver/key_ring.h"

namespace fcc::driver {
namespace {

using csi::v1::VolumeCapability;
using grpc::StatusCode;

std::unexpected<RequestError> Invalid(std::string message) {
  return std::unexpected(
      RequestError{StatusCode::INVALID_ARGUMENT, std::move(message)});
}

// Safe to put in a log line or error message verbatim.
bool IsPlainToken(std::string_view s) {
  for (char c : s) {
    if (!(common::IsAsciiAlnum(c) || c == '-' || c == '_' || c == '.' ||
          c == ':')) {
      return false;
    }
  }
  return true;
}

std::expected<std::string, RequestError> CheckVolumeId(std::string_view id) {
  if (id.empty()) {
    return Invalid("volume_id is required (kubelet sends csi-<sha256>)");
  }
  if (id.size() > kMaxVolumeIdBytes || !IsPlainToken(id)) {
    return Invalid(fmt::format(
        "volume_id must be at most {} characters of A-Z a-z 0-9 . _ - :",
        kMaxVolumeIdBytes));
  }
  return std::string(id);
}

std::expected<std::string, RequestError> CheckTargetPath(std::string_view p) {
  if (p.empty()) {
    return Invalid(
        "target_path is required (kubelet sends "
        "/var/lib/kubelet/pods/<uid>/volumes/kubernetes.io~csi/<vol>/mount)");
  }
  if (p.size() > kMaxTargetPathBytes) {
    return Invalid(fmt::format("target_path is longer than {} bytes",
                               kMaxTargetPathBytes));
  }
  if (p.front() != '/') {
    return Invalid("target_path must be an absolute path");
  }
  if (p.find('\0') != std::string_view::npos) {
    return Invalid("target_path must not contain a NUL byte");
  }
  // Refuse "." and ".." components: the driver never resolves its way out
  // of the directory kubelet named.
  if (common::HasDotPart(p)) {
    return Invalid("target_path must not contain '.' or '..' components");
  }
  std::string path(common::TrimTrailingSlashes(p));
  // "/" itself would make publish "repair" (and unpublish detach) the root
  // mount of the driver's namespace.
  if (path == "/") {
    return Invalid(
        "target_path must be a directory below /, not the root directory");
  }
  return path;
}

// The pod UID in `path`, when `path` is an inline CSI volume's target in
// kubelet's layout under `kubelet_dir`: the only paths the driver touches.
std::expected<std::string, RequestError> PodUidOfTarget(
    std::string_view path, std::string_view kubelet_dir) {
  auto refuse = [kubelet_dir] {
    return Invalid(fmt::format(
        "target_path must be {0}/pods/<pod-uid>/volumes/kubernetes.io~csi/"
        "<volume-name>/mount (kubelet's layout under --kubelet-dir={0}, with "
        "the pod's UID and the volume's name): the driver touches no other "
        "path; if kubelet runs with another --root-dir, pass it as "
        "--kubelet-dir",
        kubelet_dir.empty() ? "/" : kubelet_dir));
  };
  constexpr std::string_view kPods = "/pods/";
  constexpr std::string_view kCsiVolumes = "/volumes/kubernetes.io~csi/";
  constexpr std::string_view kMount = "/mount";
  std::string_view rest = path;
  if (!rest.starts_with(kubelet_dir)) return refuse();
  rest.remove_prefix(kubelet_dir.size());
  if (!rest.starts_with(kPods)) return refuse();
  rest.remove_prefix(kPods.size());
  const std::string_view uid = rest.substr(0, rest.find('/'));
  rest.remove_prefix(uid.size());
  if (!rest.starts_with(kCsiVolumes) || !rest.ends_with(kMount)) {
    return refuse();
  }
  rest.remove_prefix(kCsiVolumes.size());
  const std::string_view name = rest.substr(0, rest.size() - kMount.size());
  if (!common::IsDns1123Label(uid) || !common::IsDns1123Label(name)) {
    return refuse();
  }
  return std::string(uid);
}

// The two fields every publish and unpublish carries, checked in the same
// order so both RPCs report the same first error. Also returns the target's
// pod UID.
std::expected<std::pair<UnpublishSpec, std::string>, RequestError>
CheckVolumeAndTarget(std::string_view volume_id, std::string_view target_path,
                     const ValidationPolicy& policy) {
  auto id = CheckVolumeId(volume_id);
  if (!id) return std::unexpected(id.error());
  auto target = CheckTargetPath(target_path);
  if (!target) return std::unexpected(target.error());
  auto pod_uid = PodUidOfTarget(*target, policy.kubelet_dir);
  if (!pod_uid) return std::unexpected(pod_uid.error());
  return std::pair{UnpublishSpec{.volume_id = std::move(*id),
                                 .target_path = std::move(*target)},
                   std::move(*pod_uid)};
}

std::expected<void, RequestError> CheckCapability(
    const csi::v1::NodePublishVolumeRequest& request) {
  if (!request.has_volume_capability()) {
    return Invalid("volume_capability is required");
  }
  const VolumeCapability& cap = request.volume_capability();
  if (cap.has_block()) {
    return Invalid(
        "volume_capability.block is not supported: curve.minicluster.dev "
        "provides a file, use a filesystem volume (volumeMode: Filesystem)");
  }
  if (!cap.has_mount()) {
    return Invalid("volume_capability.mount is required (access type mount)");
  }
  const std::string& fs_type = cap.mount().fs_type();
  if (!fs_type.empty() && fs_type != "tmpfs") {
    return Invalid(fmt::format(
        "volume_capability.mount.fs_type {:?} is not supported: the volume is "
        "always tmpfs; leave fsType unset",
        IsPlainToken(fs_type) ? fs_type : std::string("<invalid>")));
  }
  if (cap.mount().mount_flags_size() > 0) {
    return Invalid(
        "volume_capability.mount.mount_flags are not supported: the driver "
        "chooses ro,nosuid,nodev,noexec; remove mountOptions");
  }
  if (cap.mount().volume_mount_group().size() > 0) {
    return Invalid(
        "volume_capability.mount.volume_mount_group is not supported: set "
        "the file owner with the 'owner' volume attribute");
  }
  if (!cap.has_access_mode() ||
      cap.access_mode().mode() == VolumeCapability::AccessMode::UNKNOWN) {
    return Invalid("volume_capability.access_mode is required");
  }
  return {};
}

// How the volume is to be mounted: the capability and the flags beside it.
std::expected<void, RequestError> CheckPublishMode(
    const csi::v1::NodePublishVolumeRequest& request,
    const ValidationPolicy& policy) {
  if (auto cap = CheckCapability(request); !cap) return cap;
  // readonly=false changes nothing below: every volume is mounted read-only.
  if (!request.readonly() && policy.require_readonly) {
    return Invalid(
        "readonly must be true: this driver runs with --require-readonly; "
        "set readOnly: true in the pod's volumes[].csi (where pods cannot "
        "say so, e.g. flux-operator v1alpha2, remove --require-readonly from "
        "the driver's args; the volume is read-only either way)");
  }
  // NodeStage is not offered, so a staging path means a confused caller.
  if (!request.staging_target_path().empty()) {
    return Invalid(
        "staging_target_path must be empty: this driver has no "
        "STAGE_UNSTAGE_VOLUME capability");
  }
  return {};
}

using VolumeContext = google::protobuf::Map<std::string, std::string>;

const std::string* Find(const VolumeContext& ctx, std::string_view key) {
  auto it = ctx.find(std::string(key));
  return it == ctx.end() ? nullptr : &it->second;
}

struct PodInfo {
  std::string namespace_name;
  std::string name;  // "" if kubelet sent none usable (logs only)
  std::string uid;
};

// Pod info and the ephemeral marker: both come from kubelet only.
std::expected<PodInfo, RequestError> CheckPodInfo(
    const VolumeContext& ctx, std::string_view target_pod_uid) {
  const std::string* ephemeral = Find(ctx, kEphemeral);
  if (ephemeral == nullptr || *ephemeral != "true") {
    return Invalid(
        "volume_context[csi.storage.k8s.io/ephemeral] must be \"true\": "
        "curve.minicluster.dev serves only inline ephemeral volumes "
        "(volumes[].csi in a pod spec, CSIDriver volumeLifecycleModes: "
        "[Ephemeral]), not PersistentVolumes");
  }
  const std::string* ns = Find(ctx, kPodNamespace);
  if (ns == nullptr) {
    return Invalid(
        "volume_context[csi.storage.k8s.io/pod.namespace] is missing: set "
        "podInfoOnMount: true in the curve.minicluster.dev CSIDriver object "
        "(kubectl apply -f deploy/csidriver.yaml)");
  }
  if (!common::IsDns1123Label(*ns)) {
    return Invalid(
        "volume_context[csi.storage.k8s.io/pod.namespace] is not a valid "
        "namespace name (DNS-1123 label)");
  }
  PodInfo pod{.namespace_name = *ns, .name = "", .uid = ""};
  if (const std::string* name = Find(ctx, kPodName);
      name != nullptr && name->size() <= 253 && IsPlainToken(*name)) {
    pod.name = *name;
  }
  const std::string* uid = Find(ctx, kPodUid);
  if (uid == nullptr) {
    return Invalid(
        "volume_context[csi.storage.k8s.io/pod.uid] is missing: set "
        "podInfoOnMount: true in the curve.minicluster.dev CSIDriver object "
        "(kubectl apply -f deploy/csidriver.yaml)");
  }
  // kubelet publishes a pod's volumes only below that pod's own directory.
  if (*uid != target_pod_uid) {
    return Invalid(
        "volume_context[csi.storage.k8s.io/pod.uid] is not the <pod-uid> of "
        "target_path: kubelet publishes a pod's volume only under "
        "pods/<that pod's uid>/");
  }
  pod.uid = *uid;
  return pod;
}

// A view volume's one attribute; any other key of the pod author's is
// refused, so nothing but a view name ever selects what is bound.
std::expected<std::string, RequestError> CheckViewAttributes(
    const VolumeContext& ctx) {
  std::string view;
  for (const auto& [key, value] : ctx) {
    if (key.starts_with(common::kKubeletAttributePrefix))
      continue;  // kubelet's own keys
    if (key != common::kAttrView) {
      return Invalid(fmt::format(
          "volumeAttributes.{} is not allowed with volumeAttributes.view: a "
          "view volume carries only view (the Flux view to mount); the cert "
          "(minicluster, generation, owner, key-id) is a volume of its own",
          key.size() <= 63 && IsPlainToken(key) ? key : "<invalid>"));
    }
    if (value.size() > 63 || !common::IsDns1123Subdomain(value)) {
      return Invalid(
          "volumeAttributes.view must name a Flux view the driver serves, "
          "e.g. flux-core-0.88.0 (lowercase a-z 0-9 '-' '.', at most 63 "
          "characters)");
    }
    view = value;
  }
  return view;
}

// The pod author's volumeAttributes: the keys kubelet does not own.
std::expected<PublishSpec, RequestError> WithVolumeAttributes(
    const VolumeContext& ctx, PublishSpec spec) {
  bool have_minicluster = false;
  for (const auto& [key, value] : ctx) {
    if (key.starts_with(common::kKubeletAttributePrefix))
      continue;  // kubelet's own keys
    if (key == common::kAttrMiniCluster) {
      if (!common::IsDns1123Subdomain(value)) {
        return Invalid(
            "volumeAttributes.minicluster must be the MiniCluster's name: a "
            "DNS-1123 subdomain (lowercase a-z 0-9 '-' '.', at most 253 "
            "characters, starting and ending with a letter or digit)");
      }
      spec.minicluster.name = value;
      have_minicluster = true;
    } else if (key == common::kAttrGeneration) {
      if (value.size() > kMaxGenerationBytes || !IsPlainToken(value)) {
        return Invalid(fmt::format(
            "volumeAttributes.generation must be at most {} characters of "
            "A-Z a-z 0-9 . _ - : (the controller sets it to the "
            "MiniCluster's metadata.uid)",
            kMaxGenerationBytes));
      }
      spec.minicluster.generation = value;
    } else if (key == common::kAttrOwner) {
      auto owner = ParseOwner(value);
      if (!owner) return Invalid("volumeAttributes.owner " + owner.error());
      spec.owner = *owner;
    } else if (key == common::kAttrKeyId) {
      if (auto ok = CheckKeyId(value, "volumeAttributes.key-id"); !ok) {
        return Invalid(ok.error());
      }
      spec.key_id = value;
    } else if (key == common::kAttrView) {
      return Invalid(
          "volumeAttributes.view is not allowed with a cert volume's keys: a "
          "view volume carries view alone, and the cert (minicluster, "
          "generation, owner, key-id) is a volume of its own");
    } else {
      return Invalid(fmt::format(
          "volumeAttributes has unknown key {:?}: allowed keys are {} (check "
          "for a typo)",
          key.size() <= 63 && IsPlainToken(key) ? key : "<invalid>",
          fmt::join(common::kVolumeAttributeKeys, ", ")));
    }
  }
  if (!have_minicluster) {
    return Invalid(
        "volumeAttributes.minicluster is required: the name of the "
        "MiniCluster whose brokers share this cert");
  }
  return spec;
}

}  // namespace

std::expected<Owner, std::string> ParseOwner(std::string_view text) {
  auto parse_id = [](std::string_view s) -> std::optional<uint32_t> {
    if (s.empty() || s.size() > 10) return std::nullopt;
    uint64_t value = 0;
    for (char c : s) {
      if (c < '0' || c > '9') return std::nullopt;
    }
    auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
    if (ec != std::errc() || end != s.data() + s.size() ||
        value >= 0xffffffffULL) {
      return std::nullopt;
    }
    return static_cast<uint32_t>(value);
  };
  const std::string_view kHint =
      "must be a numeric uid or uid:gid, each from 0 to 4294967294 "
      "(e.g. \"1000\" or \"1000:1000\")";
  const size_t colon = text.find(':');
  auto uid = parse_id(text.substr(0, colon));
  if (!uid) return std::unexpected(std::string(kHint));
  if (colon == std::string_view::npos) return Owner{*uid, *uid};
  auto gid = parse_id(text.substr(colon + 1));
  if (!gid) return std::unexpected(std::string(kHint));
  return Owner{*uid, *gid};
}

std::optional<std::string> PodUidOfKubeletTarget(std::string_view path,
                                                 std::string_view kubelet_dir) {
  auto uid = PodUidOfTarget(path, kubelet_dir);
  if (!uid) return std::nullopt;
  return std::move(*uid);
}

namespace {

// What every publish request carries, whatever its volume: the volume, its
// target, how it is mounted and kubelet's pod info, checked in one order so
// both kinds of volume report the same first error.
struct PublishBasics {
  UnpublishSpec volume;
  PodInfo pod;
};

std::expected<PublishBasics, RequestError> CheckPublishBasics(
    const csi::v1::NodePublishVolumeRequest& request,
    const ValidationPolicy& policy) {
  auto ids =
      CheckVolumeAndTarget(request.volume_id(), request.target_path(), policy);
  if (!ids) return std::unexpected(ids.error());
  if (auto mode = CheckPublishMode(request, policy); !mode) {
    return std::unexpected(mode.error());
  }
  auto pod = CheckPodInfo(request.volume_context(), ids->second);
  if (!pod) return std::unexpected(pod.error());
  return PublishBasics{std::move(ids->first), std::move(*pod)};
}

}  // namespace

std::expected<PublishSpec, RequestError> ValidatePublishRequest(
    const csi::v1::NodePublishVolumeRequest& request,
    const ValidationPolicy& policy) {
  auto basics = CheckPublishBasics(request, policy);
  if (!basics) return std::unexpected(basics.error());
  PublishSpec spec;
  spec.volume_id = std::move(basics->volume.volume_id);
  spec.target_path = std::move(basics->volume.target_path);
  spec.minicluster.namespace_name = std::move(basics->pod.namespace_name);
  spec.pod_name = std::move(basics->pod.name);
  spec.pod_uid = std::move(basics->pod.uid);
  return WithVolumeAttributes(request.volume_context(), std::move(spec));
}

bool IsViewRequest(const csi::v1::NodePublishVolumeRequest& request) {
  std::vector<std::string_view> keys;
  for (const auto& [key, value] : request.volume_context()) keys.push_back(key);
  return common::IsViewVolume(keys);
}

std::expected<ViewPublishSpec, RequestError> ValidateViewPublishRequest(
    const csi::v1::NodePublishVolumeRequest& request,
    const ValidationPolicy& policy) {
  auto basics = CheckPublishBasics(request, policy);
  if (!basics) return std::unexpected(basics.error());
  // kubelet mounts a volume read-write into the containers unless the pod
  // says readOnly, and the bind kubelet holds is the node's one copy that
  // every broker on the node runs: whatever --require-readonly says.
  if (!request.readonly()) {
    return Invalid(
        "readonly must be true for a view volume: set readOnly: true in the "
        "pod's volumes[].csi that names the view (the MiniCluster controller "
        "does); the view is the node's one copy of Flux, which no pod may "
        "mount writable");
  }
  auto view = CheckViewAttributes(request.volume_context());
  if (!view) return std::unexpected(view.error());
  return ViewPublishSpec{.volume_id = std::move(basics->volume.volume_id),
                         .target_path = std::move(basics->volume.target_path),
                         .view = std::move(*view),
                         .pod_name = std::move(basics->pod.name),
                         .pod_uid = std::move(basics->pod.uid)};
}

std::expected<UnpublishSpec, RequestError> ValidateUnpublishRequest(
    const csi::v1::NodeUnpublishVolumeRequest& request,
    const ValidationPolicy& policy) {
  auto ids =
      CheckVolumeAndTarget(request.volume_id(), request.target_path(), policy);
  if (!ids) return std::unexpected(ids.error());
  return std::move(ids->first);
}

std::expected<std::string, std::string> CheckKubeletDir(std::string_view dir) {
  std::string path(common::TrimTrailingSlashes(dir));
  if (path.empty() || path.front() != '/' || common::HasDotPart(path) ||
      path.find("//") != std::string::npos) {
    return std::unexpected(
        "--kubelet-dir must be kubelet's --root-dir as an absolute path "
        "without '.', '..' or '//' (default /var/lib/kubelet)");
  }
  if (path == "/") path.clear();  // the pods are then /pods/...
  return path;
}

}  // namespace fcc::driver
