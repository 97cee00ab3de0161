#include "csi_client.h"

#include <openssl/sha.h>

#include <cstdlib>
#include <filesystem>

namespace fcc::testing {
namespace {

// kubelet's Go gRPC client reads its connection all the time, so it sees
// the driver's GOAWAY at SIGTERM at once. gRPC C++ reads an idle channel only
// when its backup poller runs, every 5 s by default, which held every
// graceful shutdown with a test client connected for 5 s. Poll like kubelet.
// Set before main, so before gRPC reads it and before any thread exists.
[[maybe_unused]] const bool kKubeletLikePolling = [] {
  setenv("GRPC_CLIENT_CHANNEL_BACKUP_POLL_INTERVAL_MS", "50",
         /*overwrite=*/0);
  return true;
}();

}  // namespace

CsiClient::CsiClient(const std::string& socket_path, Connection connection)
    : target_("unix://" + socket_path),
      connection_(connection),
      channel_(
          grpc::CreateChannel(target_, grpc::InsecureChannelCredentials())),
      identity_(csi::v1::Identity::NewStub(channel_)),
      node_(csi::v1::Node::NewStub(channel_)) {}

std::unique_ptr<csi::v1::Node::Stub> CsiClient::PerCallNode() const {
  grpc::ChannelArguments args;
  // gRPC C++ shares connections between channels of one process by default;
  // a local pool makes this channel dial its own, closed when it goes.
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  return csi::v1::Node::NewStub(grpc::CreateCustomChannel(
      target_, grpc::InsecureChannelCredentials(), args));
}

template <typename Call>
grpc::Status CsiClient::OnNode(const Call& call) {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() +
                       std::chrono::seconds(30));
  if (connection_ == Connection::kShared) return call(*node_, context);
  return call(*PerCallNode(), context);
}

grpc::Status CsiClient::Publish(
    const csi::v1::NodePublishVolumeRequest& request) {
  return OnNode([&](csi::v1::Node::Stub& node, grpc::ClientContext& context) {
    csi::v1::NodePublishVolumeResponse response;
    return node.NodePublishVolume(&context, request, &response);
  });
}

grpc::Status CsiClient::Unpublish(const std::string& volume_id,
                                  const std::string& target_path) {
  csi::v1::NodeUnpublishVolumeRequest request;
  request.set_volume_id(volume_id);
  request.set_target_path(target_path);
  return OnNode([&](csi::v1::Node::Stub& node, grpc::ClientContext& context) {
    csi::v1::NodeUnpublishVolumeResponse response;
    return node.NodeUnpublishVolume(&context, request, &response);
  });
}

grpc::Status CsiClient::Noop() {
  return OnNode([](csi::v1::Node::Stub& node, grpc::ClientContext& context) {
    csi::v1::NodeGetCapabilitiesRequest request;
    csi::v1::NodeGetCapabilitiesResponse response;
    return node.NodeGetCapabilities(&context, request, &response);
  });
}

bool CsiClient::WaitReady(std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::system_clock::now() + timeout;
  while (std::chrono::system_clock::now() < deadline) {
    grpc::ClientContext context;
    context.set_deadline(std::min(
        deadline, std::chrono::system_clock::now() + std::chrono::seconds(1)));
    context.set_wait_for_ready(true);
    csi::v1::ProbeRequest request;
    csi::v1::ProbeResponse response;
    if (identity_->Probe(&context, request, &response).ok() &&
        response.ready().value()) {
      return true;
    }
  }
  return false;
}

std::string KubeletVolumeId(const KubeletPod& pod) {
  const std::string input = pod.uid + pod.volume_name;
  unsigned char digest[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(input.data()), input.size(),
         digest);
  static constexpr char kHex[] = "0123456789abcdef";
  std::string id = "csi-";
  for (unsigned char c : digest) {
    id.push_back(kHex[c >> 4]);
    id.push_back(kHex[c & 15]);
  }
  return id;
}

std::string KubeletTargetPath(const KubeletPod& pod) {
  return pod.pods_dir + "/" + pod.uid + "/volumes/kubernetes.io~csi/" +
         pod.volume_name + "/mount";
}

void KubeletPrepareParent(const KubeletPod& pod) {
  std::filesystem::create_directories(
      std::filesystem::path(KubeletTargetPath(pod)).parent_path());
}

csi::v1::NodePublishVolumeRequest KubeletPublishRequest(
    const KubeletPod& pod, const std::map<std::string, std::string>& attrs) {
  csi::v1::NodePublishVolumeRequest request;
  request.set_volume_id(KubeletVolumeId(pod));
  request.set_target_path(KubeletTargetPath(pod));
  request.set_readonly(true);
  auto* cap = request.mutable_volume_capability();
  cap->mutable_mount();
  cap->mutable_access_mode()->set_mode(
      csi::v1::VolumeCapability::AccessMode::SINGLE_NODE_WRITER);
  auto& ctx = *request.mutable_volume_context();
  for (const auto& [k, v] : attrs) ctx[k] = v;
  ctx["csi.storage.k8s.io/pod.name"] = pod.name;
  ctx["csi.storage.k8s.io/pod.namespace"] = pod.namespace_name;
  ctx["csi.storage.k8s.io/pod.uid"] = pod.uid;
  ctx["csi.storage.k8s.io/serviceAccount.name"] = pod.service_account;
  ctx["csi.storage.k8s.io/ephemeral"] = "true";
  if (!pod.service_account_token.empty()) {
    ctx["csi.storage.k8s.io/serviceAccount.tokens"] =
        R"({"unused":{"token":")" + pod.service_account_token +
        R"(","expirationTimestamp":"2030-01-01T00:00:00Z"}})";
  }
  return request;
}

}  // namespace fcc::testing
