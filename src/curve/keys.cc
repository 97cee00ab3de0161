#include "curve/keys.h"

#include <zmq.h>

#include <array>
#include <stdexcept>

#include "curve/hkdf.h"

namespace fcc::curve {
namespace {

void AppendLengthPrefixed(std::string& out, std::string_view field) {
  const auto n = static_cast<uint32_t>(field.size());
  out.push_back(static_cast<char>((n >> 24) & 0xff));
  out.push_back(static_cast<char>((n >> 16) & 0xff));
  out.push_back(static_cast<char>((n >> 8) & 0xff));
  out.push_back(static_cast<char>(n & 0xff));
  out.append(field);
}

}  // namespace

std::string DerivationInfo(const MiniClusterId& id) {
  std::string info;
  info.reserve(12 + id.namespace_name.size() + id.name.size() +
               id.generation.size());
  AppendLengthPrefixed(info, id.namespace_name);
  AppendLengthPrefixed(info, id.name);
  AppendLengthPrefixed(info, id.generation);
  return info;
}

std::string Z85EncodeKey(std::string_view key32) {
  if (key32.size() != kKeyBytes) {
    throw std::invalid_argument("Z85EncodeKey: a CURVE key is 32 bytes");
  }
  std::array<char, kZ85KeyChars + 1> text{};
  if (zmq_z85_encode(text.data(),
                     reinterpret_cast<const uint8_t*>(key32.data()),
                     key32.size()) == nullptr) {
    throw std::runtime_error("libzmq: Z85 encoding failed");
  }
  std::string out(text.data(), kZ85KeyChars);
  OPENSSL_cleanse(text.data(), text.size());
  return out;
}

std::optional<std::string> PublicKeyFor(std::string_view secret_z85) {
  if (secret_z85.size() != kZ85KeyChars) return std::nullopt;
  // zmq_curve_public wants NUL-terminated text.
  std::array<char, kZ85KeyChars + 1> secret_text{};
  secret_z85.copy(secret_text.data(), kZ85KeyChars);
  std::array<char, kZ85KeyChars + 1> public_text{};
  const int rc = zmq_curve_public(public_text.data(), secret_text.data());
  OPENSSL_cleanse(secret_text.data(), secret_text.size());
  if (rc != 0) return std::nullopt;
  return std::string(public_text.data(), kZ85KeyChars);
}

CurveKeypair DeriveKeypair(const Secret& master_key, const MiniClusterId& id) {
  const Secret secret_bytes = HkdfSha256(kDerivationSalt, master_key.reveal(),
                                         DerivationInfo(id), kKeyBytes);
  CurveKeypair pair;
  pair.secret_z85 = Secret(Z85EncodeKey(secret_bytes.reveal()));
  auto public_z85 = PublicKeyFor(pair.secret_z85.reveal());
  if (!public_z85) {
    throw std::runtime_error(
        "libzmq: zmq_curve_public failed (built without "
        "CURVE support?)");
  }
  pair.public_z85 = std::move(*public_z85);
  return pair;
}

}  // namespace fcc::curve
