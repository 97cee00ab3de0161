// libFuzzer: the request handling path — the Node handlers → validation →
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
#include "curve/minicluster_cert.h"
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
                       fcc::curve::MakeMiniClusterCert(MasterKey(), id).text)
             .first;
  }
  return it->second;
}

std::string PickName(FuzzedDataProvider& in) {
  static const char* const kNames[] = {"lammps", "sim.v2", "a"};
  const int pick = in.ConsumeIntegralInRange(0, 3);
  return pick < 3 ? kNames[pick] : in.ConsumeRandomLengthString(20);
}

// The node under test: an in-memory host with injectable faults.
struct Node {
  FakeHostFs fake;
  FaultyHostFs faulty{fake};
  fcc::driver::Publisher publisher{faulty, Keys()};
  std::set<std::string> published;  // every target a publish succeeded at
};

bool Unpublish(Node& node, const std::string& volume_id,
               const std::string& target) {
  csi::v1::NodeUnpublishVolumeRequest req;
  req.set_volume_id(volume_id);
  req.set_target_path(target);
  return fcc::driver::HandleNodeUnpublishVolume(req, node.publisher, {})
      .result.has_value();
}

// What kubelet sends for `pod`, with fuzzed attributes and target.
csi::v1::NodePublishVolumeRequest PublishRequest(FuzzedDataProvider& in,
                                                 int pod) {
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
  // Now and then another pod's UID: a target that is not this pod's.
  ctx["csi.storage.k8s.io/pod.uid"] =
      Uid(in.ConsumeProbability<float>() < 0.95f ? pod : (pod + 1) % 4);
  return req;
}

void PublishStep(Node& node, FuzzedDataProvider& in, int pod) {
  const csi::v1::NodePublishVolumeRequest req = PublishRequest(in, pod);
  const bool ok = fcc::driver::HandleNodePublishVolume(req, node.publisher, {})
                      .result.has_value();
  auto spec = fcc::driver::ValidatePublishRequest(req);
  Check(spec.has_value() || !ok);
  if (!ok) return;
  const std::string& target = spec->target_path;
  node.published.insert(target);
  Check(node.fake.MountCount(target) == 1);
  auto fs = node.fake.StatFs(target);
  Check(fs && fs->is_tmpfs && fs->read_only);
  auto file = node.fake.ReadFile(target + "/curve.cert", 4096);
  Check(file && file->regular && file->mode == 0400 &&
        file->uid == spec->owner.uid && file->gid == spec->owner.gid);
  Check(file->content == ExpectedCert(spec->minicluster));
}

void UnpublishStep(Node& node, int pod) {
  if (Unpublish(node, VolumeId(pod), Target(pod))) {
    Check(!node.fake.Exists(Target(pod)));
    Check(node.fake.MountCount(Target(pod)) == 0);
    Check(node.fake.Exists(Parent(pod)));
  }
}

void FaultStep(Node& node, FuzzedDataProvider& in) {
  static const int kErrs[] = {EBUSY,  EPERM, EINVAL, ENOSPC,
                              ENOENT, EIO,   ENOMEM, EROFS};
  node.faulty.Fail(static_cast<Op>(in.ConsumeIntegralInRange(
                       0, static_cast<int>(Op::kCount) - 1)),
                   kErrs[in.ConsumeIntegralInRange(0, 7)],
                   in.ConsumeIntegralInRange(0, 3));
}

// The target damaged or replaced behind the driver's back.
void DamageStep(FakeHostFs& fake, FuzzedDataProvider& in, int pod) {
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
}

// No faults, every pod unpublished → nothing mounted anywhere. Unpublish
// fails only where something not the driver's is at the target, and leaves
// it there; once an admin removes it, unpublish succeeds.
void Converge(Node& node) {
  node.faulty.Clear();
  for (int p = 0; p < kPods; ++p) {
    if (!Unpublish(node, VolumeId(p), Target(p))) {
      Check(node.fake.HoldsForeign(Target(p)));
      node.fake.ClearForeign(Target(p));
      Check(Unpublish(node, VolumeId(p), Target(p)));
    }
    Check(!node.fake.Exists(Target(p)));
  }
  for (auto it = node.published.rbegin(); it != node.published.rend(); ++it) {
    Unpublish(node, "csi-any", *it);
  }
  Check(node.fake.TotalMounts() == 0);
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  spdlog::set_level(spdlog::level::off);
  Keys();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider in(data, size);
  Node node;
  for (int p = 0; p < kPods; ++p) node.fake.AddDir(Parent(p));
  node.fake.AddDir("/fuzz");
  int steps = 0;
  while (in.remaining_bytes() > 0 && steps++ < 32) {
    const int pod = in.ConsumeIntegralInRange(0, kPods - 1);
    switch (in.ConsumeIntegralInRange(0, 5)) {
      case 0:
      case 1:
        PublishStep(node, in, pod);
        break;
      case 2:
        UnpublishStep(node, pod);
        break;
      case 3:
        FaultStep(node, in);
        break;
      case 4:
        node.faulty.Clear();
        break;
      case 5:
        DamageStep(node.fake, in, pod);
        break;
    }
  }
  Converge(node);
  return 0;
}
