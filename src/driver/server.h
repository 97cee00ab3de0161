// The CSI gRPC server on a unix socket.
#pragma once

#include <chrono>
#include <expected>
#include <optional>
#include <string>

#include "driver/host_fs.h"
#include "driver/publisher.h"
#include "driver/view/catalog.h"

namespace fcc::driver {

struct ServeOptions {
  std::string endpoint;  // unix:///path/csi.sock
  std::string node_id;
  // The master keys: a directory of <id>.key files (the Secret volume,
  // reloaded when kubelet updates it), or one file holding the default key.
  std::string master_key_dir;
  std::string master_key_file;
  std::string default_key_id = "master";
  std::string metrics_address;  // host:port for /metrics, /healthz; "" = off
  // kubelet's plugins_registry as mounted here; "" = no self-registration
  // (a node-driver-registrar sidecar registers the driver instead).
  std::string registration_dir;
  // The CSI socket's path on the host, as kubelet dials it.
  std::string kubelet_registration_path;
  // Flux views: the image's views (one directory each) and the node's copy
  // of them that pods bind (view/catalog.h). An empty or missing views_dir
  // serves none.
  std::string views_dir;
  std::string view_store_dir;
  // Where view binds are staged, sealed, on kernels without mount_setattr
  // (and with --mount-api=mount): a directory of the driver's own.
  std::string view_staging_dir;
  // How long to wait for another driver installing into the store before
  // serving certs without views.
  std::chrono::seconds view_store_lock_wait = kDefaultViewStoreLockWait;
  PublisherOptions publisher;
  ValidationPolicy validation;
  std::optional<MountApi> mount_api;  // unset: DetectMountApi()
};

// "unix:///abs/path" or "unix:/abs/path" → "/abs/path"; other schemes are
// refused (CSI is served over unix sockets only).
std::expected<std::string, std::string> SocketPathFromEndpoint(
    const std::string& endpoint);

// Loads the master key, serves CSI (and, with a registration dir, kubelet's
// Registration service) until SIGTERM or SIGINT, then drains in-flight
// calls. Returns the process exit code.
int Serve(const ServeOptions& options);

}  // namespace fcc::driver
