#include "common/file.h"

#include <fcntl.h>
#include <sys/stat.h>

#include <cerrno>

#include "common/system_error.h"

namespace fcc::common {
std::expected<UniqueFd, std::error_code> OpenForReading(
    const std::string& path) {
  UniqueFd fd(open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK));
  if (!fd) return std::unexpected(LastError());
  return fd;
}

std::expected<size_t, std::error_code> ReadFull(int fd,
                                                std::span<char> buffer) {
  size_t got = 0;
  while (got < buffer.size()) {
    const ssize_t n = read(fd, buffer.data() + got, buffer.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return std::unexpected(LastError());
    if (n == 0) break;
    got += static_cast<size_t>(n);
  }
  return got;
}

std::expected<std::string, std::string> ReadTextFile(const std::string& path,
                                                     size_t max_bytes) {
  auto failed = [&](const std::error_code& error) {
    return std::unexpected("cannot read " + path + ": " + error.message());
  };
  auto fd = OpenForReading(path);
  if (!fd) return failed(fd.error());
  struct stat st{};
  if (fstat(fd->get(), &st) != 0) return failed(LastError());
  if (!S_ISREG(st.st_mode)) {
    return std::unexpected("cannot read " + path + ": not a regular file");
  }
  std::string text;
  char chunk[64 * 1024];
  while (true) {
    auto got = ReadFull(fd->get(), chunk);
    if (!got) return failed(got.error());
    text.append(chunk, *got);
    if (text.size() > max_bytes) {
      return std::unexpected("cannot read " + path + ": larger than " +
                             std::to_string(max_bytes) + " bytes");
    }
    if (*got < sizeof chunk) break;
  }
  return text;
}

}  // namespace fcc::common
