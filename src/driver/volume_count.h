// How many of the driver's volumes each pod and the node hold, and the caps
// on them (--max-volumes-per-pod, --max-volumes-per-node). Every cert volume
// is a tmpfs charged to the driver's memory cgroup, and every view volume a
// bind that is a mount in several namespaces (the node's mount table,
// fs.mount-max, and kernel memory charged to the driver), so an unbounded
// count lets one pod OOM-kill the driver or stop every mount on the node
// (docs/admin/nodes.md, "Volume caps"). Certs and views share the node cap.
//
// The count is derived once from the node's mount table at start (volumes
// mounted by an earlier driver process still count) and then kept in memory
// by publish and unpublish: no call reads the mount table.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <expected>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace fcc::driver {

struct VolumeCaps {
  uint32_t per_pod = 1;      // --max-volumes-per-pod
  uint32_t per_node = 1024;  // --max-volumes-per-node (NodeGetInfo reports it)
};

// A pod mounts one Flux view, whatever its containers: a second view
// volume is refused (not a flag: nothing needs more).
inline constexpr uint32_t kMaxViewsPerPod = 1;

enum class VolumeKind { kCert, kView };

// One of the driver's volumes found mounted: its target and the pod's UID.
struct MountedVolume {
  std::string target;
  std::string pod_uid;
  VolumeKind kind = VolumeKind::kCert;
  friend bool operator==(const MountedVolume&, const MountedVolume&) = default;
};

// The driver's volumes in `mountinfo` (the text of /proc/self/mountinfo):
// tmpfs mounts of source curve.minicluster.dev with nr_inodes=8 (what
// Publisher makes) at a target in kubelet's layout under `kubelet_dir`
// (ValidationPolicy::kubelet_dir). Stacked mounts at one target are one
// volume. Mounts anywhere else are not this driver's to count.
std::vector<MountedVolume> DriverVolumesIn(std::string_view mountinfo,
                                           std::string_view kubelet_dir);
// The same from this process's /proc/self/mountinfo; the error says why it
// could not be read.
std::expected<std::vector<MountedVolume>, std::string> ScanDriverVolumes(
    std::string_view kubelet_dir);
// Mounts in `mountinfo` at a target in kubelet's layout whose device
// (major:minor) is one of `devices`, as view volumes: the candidates for
// binds of the view store's copies, which the caller confirms by identity
// (nothing on another device, a network filesystem say, is ever stat'ed).
std::vector<MountedVolume> MountsOfDevicesIn(std::string_view mountinfo,
                                             std::string_view kubelet_dir,
                                             const std::vector<dev_t>& devices);

class VolumeCount final {
 public:
  explicit VolumeCount(VolumeCaps caps) : caps_(caps) {}

  // Counts volumes that were mounted before this process started.
  void Adopt(const std::vector<MountedVolume>& volumes);

  // A volume counted for a publish: forgotten again on destruction unless
  // Keep() was called, so a publish that fails (or throws) leaves the
  // count as it was. A target that already counted stays counted.
  class Reservation {
   public:
    Reservation(Reservation&& other) noexcept;
    Reservation(const Reservation&) = delete;
    Reservation& operator=(const Reservation&) = delete;
    Reservation& operator=(Reservation&&) = delete;
    ~Reservation();
    void Keep() { count_ = nullptr; }

   private:
    friend class VolumeCount;
    Reservation(VolumeCount* count, std::string target)
        : count_(count), target_(std::move(target)) {}
    VolumeCount* count_;  // null: nothing to undo
    std::string target_;
  };

  // Counts `target` for `pod_uid`, or refuses with a message naming the cap
  // and its flag when that would exceed one; a target that already counts
  // is never refused (a repeated or repairing publish). A pod's certs are
  // capped by --max-volumes-per-pod, its views by kMaxViewsPerPod; the node
  // cap counts both.
  std::expected<Reservation, std::string> Reserve(
      const std::string& target, const std::string& pod_uid,
      VolumeKind kind = VolumeKind::kCert);
  // The volume at `target` is gone (unpublished).
  void Forget(const std::string& target);

  const VolumeCaps& caps() const { return caps_; }
  struct Stats {
    size_t volumes = 0;
    size_t pods = 0;
  };
  Stats GetStats() const;

 private:
  struct Holder {
    std::string pod_uid;
    VolumeKind kind;
  };
  struct PodVolumes {
    uint32_t certs = 0;
    uint32_t views = 0;
    uint32_t& Of(VolumeKind kind) {
      return kind == VolumeKind::kView ? views : certs;
    }
  };
  void CountLocked(const std::string& target, const std::string& pod_uid,
                   VolumeKind kind);
  void ForgetLocked(const std::string& target);

  const VolumeCaps caps_;
  mutable std::mutex mu_;
  std::unordered_map<std::string, Holder> pod_of_target_;
  std::unordered_map<std::string, PodVolumes> per_pod_;
};

}  // namespace fcc::driver
