// Lines of /proc/self/mountinfo: the mount table as this mount namespace
// sees it, pods' mounts included (kubelet's directory propagates here).
#pragma once

#include <expected>
#include <optional>
#include <string>
#include <string_view>

namespace fcc::driver {

// "36 35 98:0 /sub /mnt rw,noatime master:1 - tmpfs source rw,size=16k",
// paths unescaped.
struct MountInfoLine {
  std::string device;       // "98:0": the filesystem's major:minor
  std::string root;         // "/sub": what is mounted, within the filesystem
  std::string mount_point;  // "/mnt"
  std::string fs_type;
  std::string source;
  std::string super_options;
};

std::optional<MountInfoLine> ParseMountInfoLine(const std::string& line);

// The text of this process's /proc/self/mountinfo; the error says why not.
std::expected<std::string, std::string> ReadMountInfo();

}  // namespace fcc::driver
