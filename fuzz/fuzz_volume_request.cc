// libFuzzer: ValidatePublishRequest / ValidateUnpublishRequest, the only
// code between kubelet's (and so a pod author's) bytes and the mount calls.
// Input: first byte picks the shape; the rest is either a serialized
// NodePublishVolumeRequest (any protobuf), or a kubelet-shaped request with
// fuzzed volume attributes. Checks the validator's promises on every
// accepted request: the namespace is kubelet's and a DNS-1123 label, names
// are DNS-1123, the target is absolute without '.'/'..' components.
#include <fuzzer/FuzzedDataProvider.h>
#include <google/protobuf/stubs/logging.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <map>

#include "common/names.h"
#include "csi.pb.h"
#include "driver/volume_request.h"

namespace {

using fcc::common::IsDns1123Label;
using fcc::common::IsDns1123Subdomain;

void Check(bool ok) {
  if (!ok) __builtin_trap();
}

bool HasDotComponent(const std::string& path) {
  size_t start = 0;
  while (start <= path.size()) {
    size_t end = path.find('/', start);
    if (end == std::string::npos) end = path.size();
    const std::string part = path.substr(start, end - start);
    if (part == "." || part == "..") return true;
    start = end + 1;
  }
  return false;
}

void CheckAccepted(const csi::v1::NodePublishVolumeRequest& request,
                   const fcc::driver::PublishSpec& spec) {
  const auto& ctx = request.volume_context();
  auto ns = ctx.find("csi.storage.k8s.io/pod.namespace");
  Check(ns != ctx.end() && ns->second == spec.minicluster.namespace_name);
  Check(IsDns1123Label(spec.minicluster.namespace_name));
  Check(IsDns1123Subdomain(spec.minicluster.name));
  Check(ctx.at("csi.storage.k8s.io/ephemeral") == "true");
  Check(!spec.target_path.empty() && spec.target_path.front() == '/');
  Check(!HasDotComponent(spec.target_path));
  Check(spec.target_path.find('\0') == std::string::npos);
  // Confinement: a target of kubelet's layout, of the pod kubelet named.
  const std::string pod_dir = "/var/lib/kubelet/pods/" + spec.pod_uid + "/";
  Check(!spec.pod_uid.empty() && spec.target_path.starts_with(pod_dir));
  Check(ctx.at("csi.storage.k8s.io/pod.uid") == spec.pod_uid);
  Check(spec.target_path.ends_with("/mount"));
  Check(spec.volume_id.size() <= fcc::driver::kMaxVolumeIdBytes);
  Check(spec.volume_id.find('/') == std::string::npos);
  Check(spec.minicluster.generation.find('/') == std::string::npos);
  Check(spec.owner.uid != 0xffffffffu && spec.owner.gid != 0xffffffffu);
}

void CheckRefused(const fcc::driver::RequestError& error) {
  Check(error.code == grpc::StatusCode::INVALID_ARGUMENT);
  Check(!error.message.empty() && error.message.size() < 1024);
}

}  // namespace

// FCC_FUZZ_WRITE_SEEDS=<dir>: write the seed corpus (kubelet-shaped
// requests, serialized, in the protobuf shape) and exit. How
// fuzz/corpus/volume_request was made.
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  // Invalid UTF-8 in string fields is refused by the parser, loudly.
  google::protobuf::SetLogHandler(nullptr);
  const char* dir = getenv("FCC_FUZZ_WRITE_SEEDS");
  if (dir == nullptr) return 0;
  const std::map<std::string, std::string> attr_sets[] = {
      {{"minicluster", "lammps"}},
      {{"minicluster", "sim.v2"}, {"owner", "1000:1000"}},
      {{"minicluster", "lammps"},
       {"generation", "6f1c2d3e-0000-4000"},
       {"owner", "65534"}},
      {{"minicluster", "../x"}},
      {{"minicluster", "lammps"}, {"namespace", "victim"}},
  };
  int n = 0;
  for (const auto& attrs : attr_sets) {
    csi::v1::NodePublishVolumeRequest r;
    r.set_volume_id("csi-0123456789abcdef");
    r.set_target_path(
        "/var/lib/kubelet/pods/6f1c2d3e/volumes/kubernetes.io~csi/curve/"
        "mount");
    r.set_readonly(true);
    r.mutable_volume_capability()->mutable_mount();
    r.mutable_volume_capability()->mutable_access_mode()->set_mode(
        csi::v1::VolumeCapability::AccessMode::SINGLE_NODE_WRITER);
    auto& ctx = *r.mutable_volume_context();
    for (const auto& [k, v] : attrs) ctx[k] = v;
    ctx["csi.storage.k8s.io/pod.namespace"] = "default";
    ctx["csi.storage.k8s.io/pod.name"] = "lammps-0";
    ctx["csi.storage.k8s.io/pod.uid"] = "6f1c2d3e";
    ctx["csi.storage.k8s.io/ephemeral"] = "true";
    std::string bytes = r.SerializeAsString();
    bytes.push_back('\x01');  // FuzzedDataProvider reads this bool first
    std::ofstream(std::string(dir) + "/seed-" + std::to_string(n++),
                  std::ios::binary)
        << bytes;
  }
  exit(0);
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider in(data, size);
  csi::v1::NodePublishVolumeRequest request;
  if (in.ConsumeBool()) {
    const std::string bytes = in.ConsumeRemainingBytesAsString();
    if (!request.ParseFromString(bytes)) return 0;
  } else {
    request.set_volume_id(in.ConsumeRandomLengthString(140));
    request.set_target_path(in.ConsumeRandomLengthString(200));
    request.set_readonly(in.ConsumeBool());
    auto* cap = request.mutable_volume_capability();
    if (in.ConsumeBool())
      cap->mutable_mount()->set_fs_type(in.ConsumeRandomLengthString(8));
    cap->mutable_access_mode()->set_mode(
        static_cast<csi::v1::VolumeCapability::AccessMode::Mode>(
            in.ConsumeIntegralInRange(0, 7)));
    auto& ctx = *request.mutable_volume_context();
    const int n = in.ConsumeIntegralInRange(0, 8);
    static const char* const kKeys[] = {
        "minicluster",
        "generation",
        "owner",
        "csi.storage.k8s.io/pod.namespace",
        "csi.storage.k8s.io/pod.name",
        "csi.storage.k8s.io/pod.uid",
        "csi.storage.k8s.io/ephemeral",
        "csi.storage.k8s.io/serviceAccount.tokens",
    };
    for (int i = 0; i < n; ++i) {
      std::string key = in.ConsumeBool()
                            ? kKeys[in.ConsumeIntegralInRange(0, 7)]
                            : in.ConsumeRandomLengthString(40);
      ctx[key] = in.ConsumeRandomLengthString(80);
    }
  }
  auto spec = fcc::driver::ValidatePublishRequest(request);
  if (spec) {
    CheckAccepted(request, *spec);
  } else {
    CheckRefused(spec.error());
  }
  // --require-readonly refuses exactly the accepted requests with
  // readonly=false and changes nothing else.
  auto strict =
      fcc::driver::ValidatePublishRequest(request, {.require_readonly = true});
  Check(strict.has_value() == (spec.has_value() && request.readonly()));
  if (!strict) CheckRefused(strict.error());

  csi::v1::NodeUnpublishVolumeRequest unpublish;
  unpublish.set_volume_id(request.volume_id());
  unpublish.set_target_path(request.target_path());
  auto unspec = fcc::driver::ValidateUnpublishRequest(unpublish);
  if (unspec) {
    Check(!HasDotComponent(unspec->target_path));
    Check(unspec->target_path.starts_with("/var/lib/kubelet/pods/"));
  } else {
    CheckRefused(unspec.error());
  }
  return 0;
}
