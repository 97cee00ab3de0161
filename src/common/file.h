// Reading files: one read loop for the whole tree.
#pragma once

#include <cstddef>
#include <expected>
#include <span>
#include <string>
#include <system_error>

#include "common/unique_fd.h"

namespace fcc::common {

// open(2) for reading, close-on-exec, never becoming a controlling terminal,
// and non-blocking: a FIFO or device put where a file belongs must not hang
// the caller in open(2) or read(2) (regular files ignore the flag).
std::expected<UniqueFd, std::error_code> OpenForReading(
    const std::string& path);

// Reads until `buffer` is full or EOF, retrying EINTR; returns the bytes
// read. The caller owns the buffer, so a caller holding a secret can wipe it
// whatever happens (nothing here copies or reallocates it).
std::expected<size_t, std::error_code> ReadFull(int fd, std::span<char> buffer);

// A whole small regular file (kubeconfig, token, manifest), at most
// `max_bytes`.
// The error names the path and the reason.
std::expected<std::string, std::string> ReadTextFile(const std::string& path,
                                                     size_t max_bytes = 16
                                                                        << 20);

}  // namespace fcc::common
