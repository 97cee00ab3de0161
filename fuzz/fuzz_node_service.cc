// libFuzzer: the request handling path — NodeService → validation →
// Publisher → HostFs — over an in-memory host (FakeHostFs) with faults
// injected by the input (FaultyHostFs), so no real mounts. The input is a
// program of kubelet calls, fault injections and target damage on four pods.
// After every call: a publish that returned OK left exactly one read-only
// driver tmpfs with the exact cert, 0400, owned as asked; an unpublish that
// returned OK left no path and no mount. At the end, with faults cleared,
// unpublishing every pod leaves no mount anywhere.
#include <fuzzer/FuzzedDataProvider.h>
#include <spdlog/spdlog.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <map>
#include <set>

#include "csi.pb.h"
#include "driver/key_cache.h"
#include "driver/node_service.h"
#include "driver/publisher.h"
#include "fake_host_fs.h"

namespace {

using fcc::testing::FakeHostFs;
using fcc::testing::FaultyHostFs;
using fcc::testing::Op;

void Check(bool ok) {
  if (!ok) __builtin_trap();
}

constexpr int kPods = 4;
const std::string kPodsDir = "/var/lib/kubelet/pods";

std::string Uid(int pod) {
  return "00000000-0000-4000-8000-00000000000" + std::to_string(pod);
}
std::string VolumeId(int pod) { return "csi-" + std::to_string(pod); }
std::string Target(int pod) {
  return kPodsDir + "/" + Uid(pod) + "/volumes/kubernetes.io~csi/curve/mount";
}
std::string Parent(int pod) {
  return kPodsDir + "/" + Uid(pod) + "/volumes/kubernetes.io~csi/curve";
}

fcc::curve::Secret MasterKey() {
  return fcc::curve::Secret(std::string(40, 'f'));
}

// Shared across inputs, with the usual MiniClusters pinned (a lease no
// input releases), so their certs are derived once, not once per input.
fcc::driver::KeyCache& Keys() {
  static auto* keys = [] {
    auto* k = new fcc::driver::KeyCache(MasterKey());
    for (const char* name : {"lammps", "sim.v2", "a"}) {
      for (const char* gen : {"", "g1"}) {
        k->Acquire(std::string("pin-") + name + gen, {"default", name, gen});
      }
    }
    return k;
  }();
  return *keys;
}

// The cert every node writes for `id`, memoised (deriving is the slow part).
const fcc::curve::Secret& ExpectedCert(const fcc::curve::MiniClusterId& id) {
  static auto* certs = new std::map<std::string, fcc::curve::Secret>;
  const std::string key = fcc::curve::DerivationInfo(id);
  auto it = certs->find(key);
  if (it == certs->end()) {
    if (certs->size() > 4096) certs->clear();
    it = certs
             ->emplace(key,
                       fcc::driver::MakeMiniClusterCert(MasterKey(), id).text)
             .first;
  }
  return it->second;
}

std::string PickName(FuzzedDataProvider& in) {
  static const char* const kNames[] = {"lammps", "sim.v2", "a"};
  const int pick = in.ConsumeIntegralInRange(0, 3);
  return pick < 3 ? kNames[pick] : in.ConsumeRandomLengthString(20);
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  spdlog::set_level(spdlog::level::off);
  Keys();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider in(data, size);
  FakeHostFs fake;
  FaultyHostFs faulty(fake);
  fcc::driver::Publisher publisher(faulty, Keys());
  fcc::driver::NodeService node("node-fuzz", publisher);
  for (int p = 0; p < kPods; ++p) fake.AddDir(Parent(p));

  fake.AddDir("/fuzz");
  std::set<std::string> published;  // every target a publish succeeded at
  int steps = 0;
  while (in.remaining_bytes() > 0 && steps++ < 32) {
    const int pod = in.ConsumeIntegralInRange(0, kPods - 1);
    switch (in.ConsumeIntegralInRange(0, 5)) {
      case 0:
      case 1: {  // kubelet publishes
        csi::v1::NodePublishVolumeRequest req;
        req.set_volume_id(VolumeId(pod));
        req.set_target_path(in.ConsumeProbability<float>() < 0.9f
                                ? Target(pod)
                                : "/fuzz/" + in.ConsumeRandomLengthString(64));
        req.set_readonly(true);
        req.mutable_volume_capability()->mutable_mount();
        req.mutable_volume_capability()->mutable_access_mode()->set_mode(
            csi::v1::VolumeCapability::AccessMode::SINGLE_NODE_WRITER);
        auto& ctx = *req.mutable_volume_context();
        ctx["minicluster"] = PickName(in);
        if (in.ConsumeBool())
          ctx["owner"] =
              in.ConsumeBool() ? "1000:1000" : in.ConsumeRandomLengthString(12);
        if (in.ConsumeBool()) {
          ctx["generation"] =
              in.ConsumeBool() ? "g1" : in.ConsumeRandomLengthString(12);
        }
        ctx["csi.storage.k8s.io/pod.namespace"] =
            in.ConsumeBool() ? "default" : in.ConsumeRandomLengthString(12);
        ctx["csi.storage.k8s.io/ephemeral"] = "true";
        csi::v1::NodePublishVolumeResponse resp;
        const grpc::Status status =
            node.NodePublishVolume(nullptr, &req, &resp);
        auto spec = fcc::driver::ValidatePublishRequest(req);
        Check(spec.has_value() || !status.ok());
        if (status.ok()) {
          const std::string& target = spec->target_path;
          published.insert(target);
          Check(fake.MountCount(target) == 1);
          auto fs = fake.StatFs(target);
          Check(fs && fs->is_tmpfs && fs->read_only);
          auto file = fake.ReadFile(target + "/curve.cert", 4096);
          Check(file && file->regular && file->mode == 0400 &&
                file->uid == spec->owner.uid && file->gid == spec->owner.gid);
          Check(file->content == ExpectedCert(spec->minicluster));
        }
        break;
      }
      case 2: {  // kubelet unpublishes
        csi::v1::NodeUnpublishVolumeRequest req;
        req.set_volume_id(VolumeId(pod));
        req.set_target_path(Target(pod));
        csi::v1::NodeUnpublishVolumeResponse resp;
        if (node.NodeUnpublishVolume(nullptr, &req, &resp).ok()) {
          Check(!fake.Exists(Target(pod)));
          Check(fake.MountCount(Target(pod)) == 0);
          Check(fake.Exists(Parent(pod)));
        }
        break;
      }
      case 3: {  // a fault in the mount layer
        static const int kErrs[] = {EBUSY,  EPERM, EINVAL, ENOSPC,
                                    ENOENT, EIO,   ENOMEM, EROFS};
        faulty.Fail(static_cast<Op>(in.ConsumeIntegralInRange(
                        0, static_cast<int>(Op::kCount) - 1)),
                    kErrs[in.ConsumeIntegralInRange(0, 7)],
                    in.ConsumeIntegralInRange(0, 3));
        break;
      }
      case 4:
        faulty.Clear();
        break;
      case 5: {  // the target damaged or replaced behind the driver's back
        const std::string t = Target(pod);
        const auto kind = fake.Inspect(t);
        const bool is_dir = kind == fcc::driver::PathKind::kDirectory ||
                            kind == fcc::driver::PathKind::kMountRoot;
        switch (in.ConsumeIntegralInRange(0, 4)) {
          case 0:
            if (!fake.Exists(t)) fake.AddDir(t, 0750);
            break;
          case 1:
            if (is_dir) fake.AddHalfMadeMount(t);
            break;
          case 2:
            if (is_dir) fake.AddForeignMount(t, in.ConsumeBool());
            break;
          case 3:
            if (!fake.Exists(t)) fake.AddFile(t, "x");
            break;
          case 4:
            if (!fake.Exists(t)) fake.AddSymlink(t);
            break;
        }
        break;
      }
    }
  }

  // Converge: no faults, every pod unpublished → nothing mounted anywhere.
  faulty.Clear();
  for (int p = 0; p < kPods; ++p) {
    csi::v1::NodeUnpublishVolumeRequest req;
    req.set_volume_id(VolumeId(p));
    req.set_target_path(Target(p));
    csi::v1::NodeUnpublishVolumeResponse resp;
    Check(node.NodeUnpublishVolume(nullptr, &req, &resp).ok());
    Check(!fake.Exists(Target(p)));
  }
  for (auto it = published.rbegin(); it != published.rend(); ++it) {
    csi::v1::NodeUnpublishVolumeRequest req;
    req.set_volume_id("csi-any");
    req.set_target_path(*it);
    csi::v1::NodeUnpublishVolumeResponse resp;
    node.NodeUnpublishVolume(nullptr, &req, &resp);
  }
  Check(fake.TotalMounts() == 0);
  return 0;
}
