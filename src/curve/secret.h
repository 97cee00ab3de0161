// Secret byte strings that are wiped when they die.
#pragma once

#include <openssl/crypto.h>

#include <string>
#include <string_view>
#include <utility>

namespace fcc::curve {

// Holds key material (a master key, a secret key, a rendered cert). The bytes
// are cleansed on destruction and on move-from, so a secret never lingers in
// freed heap memory. Deliberately has no operator<< and no implicit
// conversion: printing one must be a visible decision (`.reveal()`).
class Secret {
 public:
  Secret() = default;
  explicit Secret(std::string bytes) : bytes_(std::move(bytes)) {}
  Secret(const Secret& other) : bytes_(other.bytes_) {}
  Secret(Secret&& other) noexcept : bytes_(std::move(other.bytes_)) {
    Wipe(other.bytes_);
  }
  Secret& operator=(Secret other) noexcept {
    Wipe(bytes_);
    bytes_.swap(other.bytes_);
    return *this;
  }
  ~Secret() { Wipe(bytes_); }

  std::string_view reveal() const { return bytes_; }
  size_t size() const { return bytes_.size(); }
  bool empty() const { return bytes_.empty(); }
  friend bool operator==(const Secret& a, const Secret& b) {
    return a.bytes_.size() == b.bytes_.size() &&
           CRYPTO_memcmp(a.bytes_.data(), b.bytes_.data(), a.bytes_.size()) ==
               0;
  }

 private:
  static void Wipe(std::string& s) {
    // Cleanse the whole capacity: short-string buffers and old contents too.
    s.resize(s.capacity());
    OPENSSL_cleanse(s.data(), s.size());
    s.clear();
  }
  std::string bytes_;
};

}  // namespace fcc::curve
