#include "curve/hkdf.h"

#include <openssl/core_names.h>
#include <openssl/kdf.h>
#include <openssl/params.h>

#include <memory>
#include <stdexcept>
#include <string>

namespace fcc::curve {
namespace {

struct KdfDeleter {
  void operator()(EVP_KDF* kdf) const { EVP_KDF_free(kdf); }
  void operator()(EVP_KDF_CTX* ctx) const { EVP_KDF_CTX_free(ctx); }
};

// OpenSSL's param API takes non-const pointers even for inputs it only reads.
char* Mutable(std::string_view s) { return const_cast<char*>(s.data()); }

}  // namespace

Secret HkdfSha256(std::string_view salt, std::string_view ikm,
                  std::string_view info, size_t length) {
  // Fetch once: EVP_KDF_fetch walks the provider tables and is the costly part.
  static const std::unique_ptr<EVP_KDF, KdfDeleter> kdf(
      EVP_KDF_fetch(nullptr, OSSL_KDF_NAME_HKDF, nullptr));
  if (!kdf) throw std::runtime_error("OpenSSL: HKDF is not available");
  std::unique_ptr<EVP_KDF_CTX, KdfDeleter> ctx(EVP_KDF_CTX_new(kdf.get()));
  if (!ctx) throw std::runtime_error("OpenSSL: cannot create an HKDF context");

  char digest[] = "SHA256";
  OSSL_PARAM params[] = {
      OSSL_PARAM_construct_utf8_string(OSSL_KDF_PARAM_DIGEST, digest, 0),
      OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_SALT, Mutable(salt),
                                        salt.size()),
      OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_KEY, Mutable(ikm),
                                        ikm.size()),
      OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_INFO, Mutable(info),
                                        info.size()),
      OSSL_PARAM_construct_end(),
  };
  std::string out(length, '\0');
  if (EVP_KDF_derive(ctx.get(), reinterpret_cast<unsigned char*>(out.data()),
                     out.size(), params) != 1) {
    throw std::runtime_error("OpenSSL: HKDF-SHA256 derivation failed");
  }
  return Secret(std::move(out));
}

}  // namespace fcc::curve
