// HKDF-SHA256 (RFC 5869), via OpenSSL 3's EVP_KDF.
#pragma once

#include <string_view>

#include "curve/secret.h"

namespace fcc::curve {

// Extract-then-expand HKDF with SHA-256. Returns `length` bytes of output
// keying material. Throws std::runtime_error only if OpenSSL itself fails
// (no such input exists for valid lengths <= 255*32).
Secret HkdfSha256(std::string_view salt, std::string_view ikm,
                  std::string_view info, size_t length);

}  // namespace fcc::curve
