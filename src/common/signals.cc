#include "common/signals.h"

#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/eventfd.h>
#include <sys/signalfd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>

namespace fcc::common {

std::expected<SignalWaiter, std::string> SignalWaiter::Create() {
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  if (const int error = pthread_sigmask(SIG_BLOCK, &signals, nullptr)) {
    return std::unexpected(std::string("pthread_sigmask: ") +
                           std::strerror(error));
  }
  UniqueFd signal_fd(signalfd(-1, &signals, SFD_CLOEXEC));
  if (!signal_fd) {
    return std::unexpected(std::string("signalfd: ") + std::strerror(errno));
  }
  UniqueFd cancel_fd(eventfd(0, EFD_CLOEXEC));
  if (!cancel_fd) {
    return std::unexpected(std::string("eventfd: ") + std::strerror(errno));
  }
  return SignalWaiter(std::move(signal_fd), std::move(cancel_fd));
}

int SignalWaiter::Wait() {
  pollfd fds[2] = {{signal_fd_.get(), POLLIN, 0},
                   {cancel_fd_.get(), POLLIN, 0}};
  while (poll(fds, 2, -1) < 0) {
    if (errno != EINTR) return 0;
  }
  if (!(fds[0].revents & POLLIN)) return 0;
  signalfd_siginfo info{};
  if (read(signal_fd_.get(), &info, sizeof info) != sizeof info) return 0;
  return static_cast<int>(info.ssi_signo);
}

void SignalWaiter::Cancel() {
  const uint64_t one = 1;
  (void)!write(cancel_fd_.get(), &one, sizeof one);
}

StopOnSignal::StopOnSignal(SignalWaiter waiter, StopSignal& stop)
    : waiter_(std::move(waiter)), stop_(stop) {
  thread_ = std::thread([this] {
    if (const int signal_number = waiter_.Wait()) {
      spdlog::info("received {}, shutting down", strsignal(signal_number));
    }
    stop_.Stop();
  });
}

StopOnSignal::~StopOnSignal() {
  waiter_.Cancel();
  thread_.join();
}

}  // namespace fcc::common
