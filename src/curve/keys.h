// The MiniCluster CURVE keypair: a pure function of the master key and the
// MiniCluster's identity, so every node derives the same one on its own.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "curve/secret.h"

namespace fcc::curve {

// The HKDF salt. Part of the derivation's definition: changing it changes
// every key ever issued (a breaking change; the test vectors pin it).
inline constexpr std::string_view kDerivationSalt = "curve.minicluster.dev/v1";

// Z85 text of a 32-byte CURVE key is exactly 40 characters.
inline constexpr size_t kKeyBytes = 32;
inline constexpr size_t kZ85KeyChars = 40;

// Which MiniCluster a key belongs to. `generation` tells apart two
// MiniClusters that had the same name at different times (the controller
// passes metadata.uid); it may be empty.
struct MiniClusterId {
  std::string namespace_name;
  std::string name;
  std::string generation;

  // "<namespace>.<name>": the cert's metadata name and the log identity.
  std::string QualifiedName() const { return namespace_name + "." + name; }
  friend bool operator==(const MiniClusterId&, const MiniClusterId&) = default;
};

struct CurveKeypair {
  std::string public_z85;  // 40 Z85 chars; not secret
  Secret secret_z85;       // 40 Z85 chars
};

// HKDF info: for namespace, name, generation in that order, a 4-byte
// big-endian length and then the bytes. Length prefixes make the encoding
// injective, so ("a.b","c") and ("a","b.c") can never collide.
std::string DerivationInfo(const MiniClusterId& id);

// secret = HKDF-SHA256(salt=kDerivationSalt, ikm=master_key,
//                      info=DerivationInfo(id), L=32);
// public = zmq_curve_public(z85(secret)).
CurveKeypair DeriveKeypair(const Secret& master_key, const MiniClusterId& id);

// Z85 encoding of a 32-byte key via libzmq.
std::string Z85EncodeKey(std::string_view key32);

// The public key for a Z85 secret key via libzmq, or nullopt if `secret_z85`
// is not a valid 40-character Z85 key.
std::optional<std::string> PublicKeyFor(std::string_view secret_z85);

}  // namespace fcc::curve
