#include "driver/volume_count.h"

#include <fmt/format.h>
#include <sys/sysmacros.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <optional>
#include <sstream>
#include <unordered_set>
#include <utility>

#include "common/volume_contract.h"
#include "driver/mountinfo.h"
#include "driver/volume_request.h"

namespace fcc::driver {
namespace {

// Publisher gives every volume's tmpfs exactly this many inodes; tmpfs
// shows a non-default nr_inodes among the superblock options.
constexpr std::string_view kVolumeInodesOption = "nr_inodes=8";

bool HasToken(std::string_view comma_list, std::string_view token) {
  while (!comma_list.empty()) {
    const size_t comma = comma_list.find(',');
    if (comma_list.substr(0, comma) == token) return true;
    if (comma == std::string_view::npos) break;
    comma_list.remove_prefix(comma + 1);
  }
  return false;
}

}  // namespace

std::vector<MountedVolume> DriverVolumesIn(std::string_view mountinfo,
                                           std::string_view kubelet_dir) {
  std::vector<MountedVolume> volumes;
  std::unordered_set<std::string> seen;
  std::istringstream lines{std::string(mountinfo)};
  for (std::string line; std::getline(lines, line);) {
    const auto mount = ParseMountInfoLine(line);
    if (!mount || mount->fs_type != "tmpfs" ||
        mount->source != common::kDriverName ||
        !HasToken(mount->super_options, kVolumeInodesOption)) {
      continue;
    }
    auto pod_uid = PodUidOfKubeletTarget(mount->mount_point, kubelet_dir);
    if (!pod_uid || !seen.insert(mount->mount_point).second) continue;
    volumes.push_back({mount->mount_point, std::move(*pod_uid)});
  }
  return volumes;
}

std::vector<MountedVolume> MountsOfDevicesIn(
    std::string_view mountinfo, std::string_view kubelet_dir,
    const std::vector<dev_t>& devices) {
  std::vector<MountedVolume> volumes;
  std::unordered_set<std::string> seen;
  std::istringstream lines{std::string(mountinfo)};
  for (std::string line; std::getline(lines, line);) {
    const auto mount = ParseMountInfoLine(line);
    unsigned major_number = 0;
    unsigned minor_number = 0;
    if (!mount ||
        std::sscanf(mount->device.c_str(), "%u:%u", &major_number,
                    &minor_number) != 2 ||
        std::ranges::find(devices, makedev(major_number, minor_number)) ==
            devices.end()) {
      continue;
    }
    auto pod_uid = PodUidOfKubeletTarget(mount->mount_point, kubelet_dir);
    if (!pod_uid || !seen.insert(mount->mount_point).second) continue;
    volumes.push_back(
        {mount->mount_point, std::move(*pod_uid), VolumeKind::kView});
  }
  return volumes;
}

std::expected<std::vector<MountedVolume>, std::string> ScanDriverVolumes(
    std::string_view kubelet_dir) {
  auto mountinfo = ReadMountInfo();
  if (!mountinfo) return std::unexpected(mountinfo.error());
  return DriverVolumesIn(*mountinfo, kubelet_dir);
}

void VolumeCount::CountLocked(const std::string& target,
                              const std::string& pod_uid, VolumeKind kind) {
  if (pod_of_target_.try_emplace(target, Holder{pod_uid, kind}).second) {
    ++per_pod_[pod_uid].Of(kind);
  }
}

void VolumeCount::Adopt(const std::vector<MountedVolume>& volumes) {
  std::lock_guard lock(mu_);
  for (const MountedVolume& volume : volumes) {
    CountLocked(volume.target, volume.pod_uid, volume.kind);
  }
}

std::expected<VolumeCount::Reservation, std::string> VolumeCount::Reserve(
    const std::string& target, const std::string& pod_uid, VolumeKind kind) {
  std::lock_guard lock(mu_);
  if (pod_of_target_.contains(target)) return Reservation(nullptr, target);
  const auto pod = per_pod_.find(pod_uid);
  const uint32_t of_pod = pod == per_pod_.end() ? 0 : pod->second.Of(kind);
  if (kind == VolumeKind::kView && of_pod >= kMaxViewsPerPod) {
    return std::unexpected(fmt::format(
        "pod {} already has a {} view volume on this node, and a pod gets "
        "one (every container mounts the same view volume): remove the "
        "extra csi volumes with volumeAttributes.view from the pod spec",
        pod_uid, common::kDriverName));
  }
  if (kind == VolumeKind::kCert && of_pod >= caps_.per_pod) {
    return std::unexpected(fmt::format(
        "pod {} already has {} {} volume(s) on this node, the most "
        "--max-volumes-per-pod={} allows; a MiniCluster pod needs one: remove "
        "the extra csi volumes of driver {} from the pod spec (or raise "
        "--max-volumes-per-pod together with the DaemonSet's memory limit, "
        "docs/admin/nodes.md)",
        pod_uid, of_pod, common::kDriverName, caps_.per_pod,
        common::kDriverName));
  }
  if (pod_of_target_.size() >= caps_.per_node) {
    return std::unexpected(fmt::format(
        "this node already holds {} {} volumes, the most "
        "--max-volumes-per-node={} allows (each is memory charged to the "
        "driver); publishing succeeds once pods on this node end, or raise "
        "--max-volumes-per-node together with the DaemonSet's memory limit "
        "(docs/admin/nodes.md)",
        pod_of_target_.size(), common::kDriverName, caps_.per_node));
  }
  CountLocked(target, pod_uid, kind);
  return Reservation(this, target);
}

void VolumeCount::Forget(const std::string& target) {
  std::lock_guard lock(mu_);
  ForgetLocked(target);
}

void VolumeCount::ForgetLocked(const std::string& target) {
  const auto it = pod_of_target_.find(target);
  if (it == pod_of_target_.end()) return;
  const auto pod = per_pod_.find(it->second.pod_uid);
  if (pod != per_pod_.end()) {
    --pod->second.Of(it->second.kind);
    if (pod->second.certs == 0 && pod->second.views == 0) per_pod_.erase(pod);
  }
  pod_of_target_.erase(it);
}

VolumeCount::Stats VolumeCount::GetStats() const {
  std::lock_guard lock(mu_);
  return {pod_of_target_.size(), per_pod_.size()};
}

VolumeCount::Reservation::Reservation(Reservation&& other) noexcept
    : count_(std::exchange(other.count_, nullptr)),
      target_(std::move(other.target_)) {}

VolumeCount::Reservation::~Reservation() {
  if (count_ != nullptr) count_->Forget(target_);
}

}  // namespace fcc::driver
