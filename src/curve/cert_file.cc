#include "curve/cert_file.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace fcc::curve {

std::expected<ParsedCert, std::string> LoadCertFile(const std::string& path) {
  constexpr size_t kMaxBytes = 64 * 1024;
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY);
  if (fd < 0) {
    return std::unexpected(fmt::format("{}: {}", path, std::strerror(errno)));
  }
  struct stat st {};
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    return std::unexpected(fmt::format("{}: not a regular file", path));
  }
  if (st.st_mode & (S_IRGRP | S_IROTH)) {
    close(fd);
    return std::unexpected(fmt::format(
        "{}: mode {:04o} is readable by group or other and Flux refuses it; "
        "the mount must keep 0400 (CSIDriver fsGroupPolicy: None)",
        path, st.st_mode & 07777));
  }
  std::string text(kMaxBytes, '\0');
  size_t got = 0;
  ssize_t n = 0;
  while (got < kMaxBytes &&
         (n = read(fd, text.data() + got, kMaxBytes - got)) != 0) {
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) break;
    got += static_cast<size_t>(n);
  }
  const int read_errno = n < 0 ? errno : 0;
  close(fd);
  text.resize(got);
  const Secret content(std::move(text));
  if (read_errno != 0) {
    return std::unexpected(
        fmt::format("{}: {}", path, std::strerror(read_errno)));
  }
  auto parsed = ParseCert(content.reveal());
  if (!parsed) {
    return std::unexpected(fmt::format("{}: {}", path, parsed.error()));
  }
  return parsed;
}

}  // namespace fcc::curve
