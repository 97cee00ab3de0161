#include "driver/mountinfo.h"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

namespace fcc::driver {
namespace {

bool IsOctal(std::string_view digits) {
  return std::ranges::all_of(digits,
                             [](char c) { return c >= '0' && c <= '7'; });
}

// mountinfo escapes space, tab, newline and backslash as \ooo.
std::string Unescape(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 3 < s.size() && IsOctal(s.substr(i + 1, 3))) {
      const int value =
          (s[i + 1] - '0') * 64 + (s[i + 2] - '0') * 8 + (s[i + 3] - '0');
      out.push_back(static_cast<char>(value));
      i += 3;
    } else {
      out.push_back(s[i]);
    }
  }
  return out;
}

}  // namespace

std::optional<MountInfoLine> ParseMountInfoLine(const std::string& line) {
  std::istringstream in(line);
  std::string id, parent, field;
  MountInfoLine parsed;
  if (!(in >> id >> parent >> parsed.device >> parsed.root >>
        parsed.mount_point)) {
    return std::nullopt;
  }
  while (in >> field && field != "-") {
  }
  if (!(in >> parsed.fs_type >> parsed.source >> parsed.super_options)) {
    return std::nullopt;
  }
  parsed.root = Unescape(parsed.root);
  parsed.mount_point = Unescape(parsed.mount_point);
  parsed.source = Unescape(parsed.source);
  return parsed;
}

std::expected<std::string, std::string> ReadMountInfo() {
  constexpr const char* kMountInfo = "/proc/self/mountinfo";
  std::ifstream in(kMountInfo);
  std::stringstream text;
  if (!in || !(text << in.rdbuf())) {
    return std::unexpected(
        fmt::format("cannot read {}: {}", kMountInfo, std::strerror(errno)));
  }
  return std::move(text).str();
}

}  // namespace fcc::driver
