// libFuzzer: curve::ParseCert, the strict flux-core-rules cert reader the
// driver uses to tell a foreign cert from a damaged one. Checks, beyond "no
// crash/UB": an accepted cert has a matching key pair and survives a
// render → parse round trip byte-for-byte.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "curve/cert.h"
#include "curve/keys.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto parsed = fcc::curve::ParseCert(text);
  if (!parsed) {
    // Messages name the line and rule, never the input's key material.
    if (parsed.error().size() > 512) __builtin_trap();
    return 0;
  }
  const auto& keys = parsed->keys;
  auto derived = fcc::curve::PublicKeyFor(keys.secret_z85.reveal());
  if (!derived || *derived != keys.public_z85) __builtin_trap();
  auto name = parsed->metadata.find("name");
  if (name != parsed->metadata.end() &&
      fcc::curve::IsValidMetadataValue(name->second)) {
    const fcc::curve::Secret rendered =
        fcc::curve::RenderCert(name->second, keys);
    auto again = fcc::curve::ParseCert(rendered.reveal());
    if (!again || again->keys.public_z85 != keys.public_z85 ||
        again->metadata.at("name") != name->second) {
      __builtin_trap();
    }
  }
  return 0;
}
