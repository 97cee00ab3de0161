#include "curve/cert_file.h"

#include <fmt/format.h>
#include <sys/stat.h>

#include "common/file.h"

namespace fcc::curve {

std::expected<ParsedCert, std::string> LoadCertFile(const std::string& path) {
  constexpr size_t kMaxBytes = size_t{64} * 1024;
  auto failed = [&](std::string why) {
    return std::unexpected(fmt::format("{}: {}", path, why));
  };
  auto fd = common::OpenForReading(path);
  if (!fd) return failed(fd.error().message());
  struct stat st{};
  if (fstat(fd->get(), &st) != 0 || !S_ISREG(st.st_mode)) {
    return failed("not a regular file");
  }
  if (st.st_mode & (S_IRGRP | S_IROTH)) {
    return failed(fmt::format(
        "mode {:04o} is readable by group or other and Flux refuses it; the "
        "mount must keep 0400 (CSIDriver fsGroupPolicy: None)",
        st.st_mode & 07777));
  }
  // Sized once (shrinking never reallocates), then wiped by Secret whatever
  // the read did.
  std::string text(kMaxBytes, '\0');
  auto got = common::ReadFull(fd->get(), text);
  text.resize(got ? *got : 0);
  const Secret content(std::move(text));
  if (!got) return failed(got.error().message());
  auto parsed = ParseCert(content.reveal());
  if (!parsed) return failed(parsed.error());
  return parsed;
}

}  // namespace fcc::curve
