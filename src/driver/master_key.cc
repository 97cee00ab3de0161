#include "driver/master_key.h"

#include <fmt/format.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstring>

#include "common/file.h"

namespace fcc::driver {

std::expected<curve::Secret, std::string> LoadMasterKey(
    const std::string& path) {
  auto refuse = [&](std::string why) {
    return std::unexpected(fmt::format("master key file {}: {}; {}", path, why,
                                       kCreateMasterKeyHint));
  };
  if (path.empty()) return refuse("--master-key-file is empty");
  auto fd = common::OpenForReading(path);
  if (!fd) return refuse(fd.error().message());
  struct stat st{};
  if (fstat(fd->get(), &st) != 0) return refuse(std::strerror(errno));
  if (!S_ISREG(st.st_mode)) return refuse("not a regular file");
  if (st.st_mode & 077) {
    return refuse(fmt::format(
        "readable or writable by group/other (mode {:04o}); the key must be "
        "readable by its owner only",
        st.st_mode & 07777));
  }
  if (st.st_size < static_cast<off_t>(kMinMasterKeyBytes)) {
    return refuse(fmt::format("too short ({} bytes; at least {} required)",
                              st.st_size, kMinMasterKeyBytes));
  }
  if (st.st_size > static_cast<off_t>(kMaxMasterKeyBytes)) {
    return refuse(fmt::format("too long ({} bytes; at most {})", st.st_size,
                              kMaxMasterKeyBytes));
  }
  std::string bytes(static_cast<size_t>(st.st_size), '\0');
  auto got = common::ReadFull(fd->get(), bytes);
  if (!got || *got != bytes.size()) {
    curve::Secret wipe(std::move(bytes));
    return refuse(got ? "changed while reading" : got.error().message());
  }
  return curve::Secret(std::move(bytes));
}

}  // namespace fcc::driver
