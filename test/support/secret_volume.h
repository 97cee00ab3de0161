// A directory laid out as kubelet's atomic writer lays out a Secret volume:
// the files in a timestamped directory, ..data pointing at it (swapped by
// one rename), a symlink per file through ..data, and the old directory
// removed right after the swap.
#pragma once

#include <sys/types.h>

#include <map>
#include <string>

namespace fcc::testing {

class SecretVolume {
 public:
  explicit SecretVolume(std::string dir);
  const std::string& dir() const { return dir_; }
  // The volume holds exactly `files` (name → bytes, each with `mode`) from
  // now on, as after one kubelet update.
  void Write(const std::map<std::string, std::string>& files,
             mode_t mode = 0400);
  // The timestamped directory ..data points at.
  std::string snapshot() const { return dir_ + "/" + current_; }

 private:
  std::string dir_;
  std::string current_;
  int version_ = 0;
};

}  // namespace fcc::testing
