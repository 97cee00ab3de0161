// fcc-kubelet: acts as kubelet towards a curve.minicluster.dev driver for
// one pod's inline ephemeral volume (volumes[].csi), for demos and
// debugging.
//   fcc-kubelet probe     --endpoint unix:///x/csi.sock [--timeout-ms N]
//   fcc-kubelet publish   --endpoint … --pods-dir D --namespace NS --pod NAME
//                         --pod-uid UID --attr minicluster=X [--attr …]
//   fcc-kubelet unpublish --endpoint … --pods-dir D --pod-uid UID
#include <CLI/CLI.hpp>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include "csi_client.h"

namespace {

using fcc::testing::CsiClient;
using fcc::testing::KubeletPod;

constexpr std::string_view kUnixScheme = "unix://";

std::string SocketPath(const std::string& endpoint) {
  if (endpoint.starts_with(kUnixScheme)) {
    return endpoint.substr(kUnixScheme.size());
  }
  return endpoint;
}

int Fail(const std::string& rpc, const grpc::Status& status) {
  std::cerr << "fcc-kubelet: " << rpc << " failed: code "
            << static_cast<int>(status.error_code()) << ": "
            << status.error_message() << "\n";
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "fcc-kubelet: send the CSI calls kubelet sends for a pod's inline "
      "curve.minicluster.dev volume (demo and debugging tool)"};
  app.require_subcommand(1);

  std::string endpoint;
  KubeletPod pod;
  std::vector<std::string> attrs;
  int timeout_ms = 10000;

  auto add_endpoint = [&](CLI::App* cmd) {
    cmd->add_option("--endpoint", endpoint,
                    "The driver's CSI endpoint, unix:///path/csi.sock")
        ->required();
  };
  auto add_pod = [&](CLI::App* cmd) {
    cmd->add_option("--pods-dir", pod.pods_dir,
                    "Stands for /var/lib/kubelet/pods")
        ->required();
    cmd->add_option("--pod-uid", pod.uid, "The pod's metadata.uid")->required();
    cmd->add_option("--volume-name", pod.volume_name,
                    "The pod's volumes[].name")
        ->capture_default_str();
  };

  auto* probe = app.add_subcommand(
      "probe", "Wait until the driver answers Probe ready; print its name");
  add_endpoint(probe);
  probe->add_option("--timeout-ms", timeout_ms, "How long to wait")
      ->capture_default_str();

  auto* publish = app.add_subcommand(
      "publish",
      "NodePublishVolume for the pod's volume; prints the target path");
  add_endpoint(publish);
  add_pod(publish);
  publish->add_option("--namespace", pod.namespace_name, "The pod's namespace")
      ->capture_default_str();
  publish->add_option("--pod", pod.name, "The pod's name")->required();
  publish->add_option("--attr", attrs,
                      "A volumeAttributes entry key=value (repeatable)");

  auto* unpublish = app.add_subcommand(
      "unpublish", "NodeUnpublishVolume for the pod's volume");
  add_endpoint(unpublish);
  add_pod(unpublish);

  CLI11_PARSE(app, argc, argv);

  CsiClient client(SocketPath(endpoint));
  if (*probe) {
    if (!client.WaitReady(std::chrono::milliseconds(timeout_ms))) {
      std::cerr << "fcc-kubelet: " << endpoint << " not ready after "
                << timeout_ms << " ms\n";
      return 1;
    }
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() +
                     std::chrono::seconds(10));
    csi::v1::GetPluginInfoResponse info;
    auto status = client.identity().GetPluginInfo(
        &ctx, csi::v1::GetPluginInfoRequest(), &info);
    if (!status.ok()) return Fail("GetPluginInfo", status);
    grpc::ClientContext node_ctx;
    node_ctx.set_deadline(std::chrono::system_clock::now() +
                          std::chrono::seconds(10));
    csi::v1::NodeGetInfoResponse node;
    status = client.node().NodeGetInfo(&node_ctx, csi::v1::NodeGetInfoRequest(),
                                       &node);
    if (!status.ok()) return Fail("NodeGetInfo", status);
    std::cout << info.name() << " " << info.vendor_version()
              << " ready, node_id=" << node.node_id() << "\n";
    return 0;
  }

  const std::string target = fcc::testing::KubeletTargetPath(pod);
  const std::string volume_id = fcc::testing::KubeletVolumeId(pod);
  if (*publish) {
    std::map<std::string, std::string> attributes;
    for (const auto& a : attrs) {
      const size_t eq = a.find('=');
      if (eq == std::string::npos || eq == 0) {
        std::cerr << "fcc-kubelet: --attr " << a << ": expected key=value\n";
        return 2;
      }
      attributes[a.substr(0, eq)] = a.substr(eq + 1);
    }
    fcc::testing::KubeletPrepareParent(pod);
    auto status =
        client.Publish(fcc::testing::KubeletPublishRequest(pod, attributes));
    if (!status.ok()) return Fail("NodePublishVolume", status);
    std::cout << target << "\n";
    return 0;
  }
  if (*unpublish) {
    auto status = client.Unpublish(volume_id, target);
    if (!status.ok()) return Fail("NodeUnpublishVolume", status);
    std::cout << target << "\n";
    return 0;
  }
  return 2;
}
