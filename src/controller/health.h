// /healthz (the process serves requests) and /readyz (caches synced) for
// the kubelet's probes, on cpp-httplib.
#ifndef FCC_CONTROLLER_HEALTH_H_
#define FCC_CONTROLLER_HEALTH_H_

#include <functional>
#include <memory>
#include <string>
#include <thread>

namespace httplib {
class Server;
}

namespace fcc::controller {

class HealthServer {
 public:
  // `ready` is asked on every /readyz request.
  HealthServer(std::string host, int port, std::function<bool()> ready);
  ~HealthServer();
  // Binds and serves on a thread; false (with a log line) if bind fails.
  bool Start();
  void Stop();

 private:
  std::string host_;
  int port_;
  std::function<bool()> ready_;
  std::unique_ptr<httplib::Server> server_;
  std::thread thread_;
};

// Splits ":8081" / "0.0.0.0:8081" / "[::]:8081" into host and port.
bool ParseListenAddress(const std::string& address, std::string* host,
                        int* port);

}  // namespace fcc::controller

#endif  // FCC_CONTROLLER_HEALTH_H_
