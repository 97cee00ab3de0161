#include "secret_volume.h"

#include <sys/stat.h>

#include <filesystem>
#include <fstream>

namespace fcc::testing {

namespace fs = std::filesystem;

SecretVolume::SecretVolume(std::string dir) : dir_(std::move(dir)) {
  fs::create_directories(dir_);
}

void SecretVolume::Write(const std::map<std::string, std::string>& files,
                         mode_t mode) {
  const std::string snapshot = "..2026_12_02_" + std::to_string(++version_);
  fs::create_directory(dir_ + "/" + snapshot);
  for (const auto& [name, bytes] : files) {
    const std::string path = dir_ + "/" + snapshot + "/" + name;
    std::ofstream(path) << bytes;
    chmod(path.c_str(), mode);
  }
  fs::create_symlink(snapshot, dir_ + "/..data_tmp");
  fs::rename(dir_ + "/..data_tmp", dir_ + "/..data");
  for (const auto& [name, bytes] : files) {
    if (!fs::is_symlink(dir_ + "/" + name)) {
      fs::create_symlink("..data/" + name, dir_ + "/" + name);
    }
  }
  for (const auto& entry : fs::directory_iterator(dir_)) {
    const std::string name = entry.path().filename();
    if (name[0] != '.' && !files.contains(name)) fs::remove(entry.path());
  }
  if (!current_.empty()) fs::remove_all(dir_ + "/" + current_);
  current_ = snapshot;
}

}  // namespace fcc::testing
