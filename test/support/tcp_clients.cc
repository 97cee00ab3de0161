#include "tcp_clients.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#include <filesystem>
#include <string>

namespace fcc::testing {
namespace {

common::UniqueFd ConnectLoopback(int port, int flags) {
  common::UniqueFd fd(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | flags, 0));
  if (!fd) return fd;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 &&
      errno != EINPROGRESS) {
    fd.Reset();
  }
  return fd;
}

// True once the peer has closed (EOF, reset, or a reply then close).
bool PeerClosed(int fd, std::chrono::milliseconds wait) {
  pollfd p{fd, POLLIN, 0};
  if (poll(&p, 1, static_cast<int>(wait.count())) <= 0) return false;
  char buf[512];
  while (true) {
    const ssize_t n = recv(fd, buf, sizeof buf, MSG_DONTWAIT);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) return true;
    if (n < 0) return false;
  }
}

}  // namespace

std::vector<common::UniqueFd> HoldTcpConnections(int port, int count) {
  std::vector<common::UniqueFd> held;
  for (int i = 0; i < count; ++i) {
    auto fd = ConnectLoopback(port, SOCK_NONBLOCK);
    if (fd) held.push_back(std::move(fd));
  }
  return held;
}

bool ServerCutsATricklingRequest(int port, std::chrono::milliseconds interval,
                                 std::chrono::milliseconds give_up) {
  const auto fd = ConnectLoopback(port, 0);
  if (!fd) return false;
  const std::string start = "GET /healthz HTTP/1.1\r\nX-Slow: ";
  if (send(fd.get(), start.data(), start.size(), MSG_NOSIGNAL) < 0) {
    return true;
  }
  const auto deadline = std::chrono::steady_clock::now() + give_up;
  while (std::chrono::steady_clock::now() < deadline) {
    if (send(fd.get(), "x", 1, MSG_NOSIGNAL) < 0) return true;
    if (PeerClosed(fd.get(), interval)) return true;
  }
  return false;
}

int OpenFdCount(pid_t pid) {
  const std::filesystem::path dir = "/proc/" + std::to_string(pid) + "/fd";
  int count = 0;
  for ([[maybe_unused]] const auto& entry :
       std::filesystem::directory_iterator(dir)) {
    ++count;
  }
  return count;
}

}  // namespace fcc::testing
