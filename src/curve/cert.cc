#include "curve/cert.h"

#include <fmt/format.h>
#include <zmq.h>

#include <array>
#include <stdexcept>

namespace fcc::curve {
namespace {

constexpr size_t kMaxLineChars = 254;  // flux reads lines with fgets(buf, 256)

bool IsAsciiAlnum(char c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') ||
         (c >= 'A' && c <= 'Z');
}

bool AllOf(std::string_view s, std::string_view extra) {
  for (char c : s) {
    if (!IsAsciiAlnum(c) && extra.find(c) == std::string_view::npos) {
      return false;
    }
  }
  return true;
}

bool IsValidKeyName(std::string_view s) { return !s.empty() && AllOf(s, "-."); }

bool IsZ85Key(std::string_view s) {
  if (s.size() != kZ85KeyChars || !AllOf(s, ".-:+=^!/*?&<>()[]{}@%$#")) {
    return false;
  }
  std::array<char, kZ85KeyChars + 1> text{};
  s.copy(text.data(), kZ85KeyChars);
  std::array<uint8_t, kKeyBytes> bytes{};
  const bool ok = zmq_z85_decode(bytes.data(), text.data()) != nullptr;
  OPENSSL_cleanse(text.data(), text.size());
  OPENSSL_cleanse(bytes.data(), bytes.size());
  return ok;
}

bool IsSpace(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' ||
         c == '\r';
}

std::string_view Strip(std::string_view s) {
  while (!s.empty() && IsSpace(s.front())) s.remove_prefix(1);
  while (!s.empty() && IsSpace(s.back())) s.remove_suffix(1);
  return s;
}

struct KeyValue {
  std::string_view key;
  std::string_view value;
};

std::expected<KeyValue, std::string> ParseKeyValue(std::string_view entry) {
  const size_t eq = entry.find('=');
  if (eq == std::string_view::npos) {
    return std::unexpected("expected key = \"value\"");
  }
  KeyValue kv{Strip(entry.substr(0, eq)), Strip(entry.substr(eq + 1))};
  if (!IsValidKeyName(kv.key)) {
    return std::unexpected("key names may hold only A-Z a-z 0-9 . -");
  }
  if (kv.value.size() < 2 || kv.value.front() != '"' ||
      kv.value.back() != '"') {
    return std::unexpected("the value must be in double quotes");
  }
  kv.value = kv.value.substr(1, kv.value.size() - 2);
  if (!IsValidMetadataValue(kv.value)) {
    return std::unexpected(
        "the value holds a character Flux refuses (one of _ , ' \" \\ ~ | ; "
        "or a non-ASCII byte)");
  }
  return kv;
}

}  // namespace

bool IsValidMetadataValue(std::string_view value) {
  return AllOf(value, ".-:+=^!/*?&<>()[]{}@%$# \t");
}

Secret RenderCert(std::string_view metadata_name, const CurveKeypair& keys) {
  if (!IsValidMetadataValue(metadata_name)) {
    throw std::invalid_argument(
        "cert metadata name holds a character Flux refuses");
  }
  constexpr std::string_view kHead =
      "#  ZeroMQ CURVE **Secret** Certificate\n"
      "#  DO NOT DISTRIBUTE\n"
      "\n"
      "metadata\n"
      "    name = \"";
  constexpr std::string_view kPublic = "\"\ncurve\n    public-key = \"";
  constexpr std::string_view kSecret = "\"\n    secret-key = \"";
  constexpr std::string_view kTail = "\"\n";
  const std::string_view secret = keys.secret_z85.reveal();
  // Sized exactly before the secret goes in: a growing string would free
  // a buffer holding the secret key without wiping it.
  std::string text;
  text.reserve(kHead.size() + metadata_name.size() + kPublic.size() +
               keys.public_z85.size() + kSecret.size() + secret.size() +
               kTail.size());
  for (std::string_view part :
       {kHead, metadata_name, kPublic, std::string_view(keys.public_z85),
        kSecret, secret, kTail}) {
    text.append(part);
  }
  return Secret(std::move(text));
}

namespace {

// ParseCert's state: the section it is in and what it has read so far.
class CertReader {
 public:
  std::expected<void, std::string> AddLine(std::string_view line);
  std::expected<ParsedCert, std::string> Finish() &&;

 private:
  enum class Section { kNone, kMetadata, kCurve };
  std::expected<void, std::string> AddCurveKey(const KeyValue& kv);

  Section section_ = Section::kNone;
  ParsedCert cert_;
  bool have_public_ = false;
  bool have_secret_ = false;
};

std::expected<void, std::string> CertReader::AddLine(std::string_view line) {
  if (line.size() > kMaxLineChars) {
    return std::unexpected("line is longer than 254 characters");
  }
  const bool indented = !line.empty() && (line[0] == ' ' || line[0] == '\t');
  const std::string_view stripped = Strip(line);
  if (stripped.empty() || stripped[0] == '#') return {};
  if (stripped == "metadata" || stripped == "curve") {
    if (indented) {
      return std::unexpected(
          fmt::format("section header '{}' must not be indented", stripped));
    }
    section_ = stripped == "curve" ? Section::kCurve : Section::kMetadata;
    return {};
  }
  if (!indented) {
    return std::unexpected(
        "unindented line is not a section header (metadata or curve); "
        "entries must be indented");
  }
  if (section_ == Section::kNone) {
    return std::unexpected("entry before any section header");
  }
  auto kv = ParseKeyValue(stripped);
  if (!kv) return std::unexpected(kv.error());
  if (section_ == Section::kCurve) return AddCurveKey(*kv);
  if (!cert_.metadata.emplace(kv->key, kv->value).second) {
    return std::unexpected(fmt::format("duplicate metadata key '{}'", kv->key));
  }
  return {};
}

std::expected<void, std::string> CertReader::AddCurveKey(const KeyValue& kv) {
  if (kv.key != "public-key" && kv.key != "secret-key") {
    return std::unexpected(fmt::format(
        "the curve section holds only public-key and secret-key, not '{}'",
        kv.key));
  }
  const bool is_public = kv.key == "public-key";
  bool& seen = is_public ? have_public_ : have_secret_;
  if (seen) return std::unexpected(fmt::format("duplicate {}", kv.key));
  if (!IsZ85Key(kv.value)) {
    return std::unexpected(
        fmt::format("{} must be exactly 40 Z85 characters (got {} characters)",
                    kv.key, kv.value.size()));
  }
  seen = true;
  if (is_public) {
    cert_.keys.public_z85 = std::string(kv.value);
  } else {
    cert_.keys.secret_z85 = Secret(std::string(kv.value));
  }
  return {};
}

std::expected<ParsedCert, std::string> CertReader::Finish() && {
  if (!have_public_ || !have_secret_) {
    return std::unexpected(
        "the curve section must hold both public-key and secret-key");
  }
  const auto derived_public = PublicKeyFor(cert_.keys.secret_z85.reveal());
  if (!derived_public || *derived_public != cert_.keys.public_z85) {
    return std::unexpected(
        "public-key does not belong to secret-key (mismatched pair)");
  }
  return std::move(cert_);
}

}  // namespace

std::expected<ParsedCert, std::string> ParseCert(std::string_view text) {
  if (text.find('\0') != std::string_view::npos) {
    return std::unexpected("the file holds a NUL byte; it is not a cert");
  }
  CertReader reader;
  for (size_t line_no = 1; !text.empty(); ++line_no) {
    const size_t nl = text.find('\n');
    const std::string_view line = text.substr(0, nl);
    text.remove_prefix(nl == std::string_view::npos ? text.size() : nl + 1);
    if (auto added = reader.AddLine(line); !added) {
      return std::unexpected(
          fmt::format("line {}: {}", line_no, added.error()));
    }
  }
  return std::move(reader).Finish();
}

}  // namespace fcc::curve
