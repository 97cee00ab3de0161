// A CSI client that talks to the driver over its unix socket the way kubelet
// does, and builds the requests kubelet sends for an inline ephemeral volume.
#pragma once

#include <grpcpp/grpcpp.h>

#include <map>
#include <memory>
#include <string>

#include "csi.grpc.pb.h"

namespace fcc::testing {

class CsiClient {
 public:
  // kShared: one connection for every call, as a long-lived client keeps.
  // kPerCall: a new connection for each Publish, Unpublish and Noop, closed
  // after it, as kubelet v1.35 makes (pkg/volume/csi/csi_client.go).
  enum class Connection { kShared, kPerCall };

  explicit CsiClient(const std::string& socket_path,
                     Connection connection = Connection::kShared);

  grpc::Status Publish(const csi::v1::NodePublishVolumeRequest& request);
  grpc::Status Unpublish(const std::string& volume_id,
                         const std::string& target_path);
  // NodeGetCapabilities: a round trip the driver answers with no work.
  grpc::Status Noop();
  // True once Probe answers ready within `timeout`.
  bool WaitReady(std::chrono::milliseconds timeout);

  csi::v1::Identity::Stub& identity() { return *identity_; }
  csi::v1::Node::Stub& node() { return *node_; }

 private:
  // A stub on a connection of its own, closed when the stub goes.
  std::unique_ptr<csi::v1::Node::Stub> PerCallNode() const;
  // Runs call(stub, context) with a 30 s deadline, on the shared stub or,
  // for kPerCall, on a PerCallNode().
  template <typename Call>
  grpc::Status OnNode(const Call& call);

  std::string target_;
  Connection connection_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<csi::v1::Identity::Stub> identity_;
  std::unique_ptr<csi::v1::Node::Stub> node_;
};

// A pod with an inline `volumes[].csi` of driver curve.minicluster.dev.
struct KubeletPod {
  std::string pods_dir;  // stands for /var/lib/kubelet/pods
  std::string namespace_name = "default";
  std::string name = "lammps-0";
  std::string uid = "6f1c2d3e-0000-4000-8000-000000000001";
  std::string volume_name = "curve";
  std::string service_account = "default";
  // Set to exercise the secrecy of serviceAccount.tokens in logs.
  std::string service_account_token;
};

// kubelet's volume handle for an ephemeral volume: csi-<sha256(uid+name)>.
std::string KubeletVolumeId(const KubeletPod& pod);
// <pods_dir>/<uid>/volumes/kubernetes.io~csi/<volume>/mount
std::string KubeletTargetPath(const KubeletPod& pod);
// Creates the target's parent directory, as kubelet does before publishing.
void KubeletPrepareParent(const KubeletPod& pod);
// The NodePublishVolumeRequest kubelet sends (podInfoOnMount: true,
// readOnly: true) with the pod's volumeAttributes.
csi::v1::NodePublishVolumeRequest KubeletPublishRequest(
    const KubeletPod& pod, const std::map<std::string, std::string>& attrs);

}  // namespace fcc::testing
