#include "kube/time_format.h"

#include <cstdio>
#include <ctime>

namespace fcc::kube {

std::string FormatTime(std::chrono::system_clock::time_point t) {
  const std::time_t seconds = std::chrono::system_clock::to_time_t(t);
  std::tm tm{};
  gmtime_r(&seconds, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

std::string FormatMicroTime(std::chrono::system_clock::time_point t) {
  using namespace std::chrono;
  const auto micros =
      duration_cast<microseconds>(t.time_since_epoch()).count() % 1000000;
  const std::time_t seconds = system_clock::to_time_t(t);
  std::tm tm{};
  gmtime_r(&seconds, &tm);
  char buf[48];
  const size_t n = std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%S", &tm);
  std::snprintf(buf + n, sizeof buf - n, ".%06ldZ", static_cast<long>(micros));
  return buf;
}

}  // namespace fcc::kube
