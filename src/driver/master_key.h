// Loading the cluster-wide master key every node derives keys from.
#pragma once

#include <expected>
#include <string>

#include "curve/secret.h"

namespace fcc::driver {

inline constexpr size_t kMinMasterKeyBytes = 32;
inline constexpr size_t kMaxMasterKeyBytes = size_t{64} * 1024;

// How an operator makes the key; quoted in every refusal.
inline constexpr char kCreateMasterKeyHint[] =
    "create it once per cluster with: kubectl -n flux-curve-csi create secret "
    "generic flux-curve-csi-master-key --from-file=master.key=<(head -c 64 "
    "/dev/urandom) and mount it with defaultMode: 0400";

struct MasterKeyError {
  std::string message;
  // The file could not be read just now (EMFILE, ENOMEM, gone mid-swap,
  // changed while read): not a verdict on the key, so a key ring keeps the
  // keys it has and reads again later.
  bool transient = false;
};

// Reads the key file (following the Secret volume's symlinks): it must be a
// regular file of 32 bytes to 64 KiB that neither group nor other can read.
// The error says what is wrong and how to fix it; it never quotes the key.
std::expected<curve::Secret, MasterKeyError> ReadMasterKey(
    const std::string& path);
// The same, with the message alone.
std::expected<curve::Secret, std::string> LoadMasterKey(
    const std::string& path);

}  // namespace fcc::driver
