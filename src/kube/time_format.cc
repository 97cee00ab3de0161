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

std::optional<std::chrono::system_clock::time_point> ParseTime(
    std::string_view text) {
  const std::string s(text);
  std::tm tm{};
  const char* end = strptime(s.c_str(), "%Y-%m-%dT%H:%M:%SZ", &tm);
  if (end == nullptr || *end != '\0') return std::nullopt;
  return std::chrono::system_clock::from_time_t(timegm(&tm));
}

}  // namespace fcc::kube
