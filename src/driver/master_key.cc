#include "driver/master_key.h"

#include <fmt/format.h>
#include <sys/stat.h>

#include <cerrno>
#include <system_error>

#include "common/file.h"

namespace fcc::driver {

namespace {

// Errors of open(2), fstat(2) and read(2) that say nothing about the key.
bool IsTransient(std::error_code ec) {
  static constexpr std::errc kTransient[] = {
      std::errc::no_such_file_or_directory,
      std::errc::too_many_files_open,
      std::errc::too_many_files_open_in_system,
      std::errc::not_enough_memory,
      std::errc::interrupted,
      std::errc::resource_unavailable_try_again,
      std::errc::io_error,
      std::errc::no_buffer_space};
  for (const auto errc : kTransient) {
    if (ec == errc) return true;
  }
  return ec.value() == ESTALE;
}

}  // namespace

std::expected<curve::Secret, MasterKeyError> ReadMasterKey(
    const std::string& path) {
  auto refuse = [&](std::string why, bool transient = false) {
    return std::unexpected(
        MasterKeyError{fmt::format("master key file {}: {}; {}", path, why,
                                   kCreateMasterKeyHint),
                       transient});
  };
  auto failed = [&](std::error_code ec) {
    return refuse(ec.message(), IsTransient(ec));
  };
  if (path.empty()) return refuse("--master-key-file is empty");
  auto fd = common::OpenForReading(path);
  if (!fd) return failed(fd.error());
  struct stat st{};
  if (fstat(fd->get(), &st) != 0) {
    return failed(std::error_code(errno, std::generic_category()));
  }
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
    return got ? refuse("changed while reading", /*transient=*/true)
               : failed(got.error());
  }
  return curve::Secret(std::move(bytes));
}

std::expected<curve::Secret, std::string> LoadMasterKey(
    const std::string& path) {
  auto key = ReadMasterKey(path);
  if (!key) return std::unexpected(std::move(key.error().message));
  return std::move(*key);
}

}  // namespace fcc::driver
