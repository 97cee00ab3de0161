// Text that tenants wrote, cut to a size before it reaches a status, an
// Event or a log line: the API server refuses a condition message over
// 32 KiB, and one oversized value must not cost the whole write.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace fcc::common {

// The longest prefix of `text` of at most `max_bytes` that splits no UTF-8
// sequence.
inline std::string_view Utf8Prefix(std::string_view text, size_t max_bytes) {
  if (text.size() <= max_bytes) return text;
  size_t end = max_bytes;
  while (end > 0 && (static_cast<unsigned char>(text[end]) & 0xC0) == 0x80) {
    --end;
  }
  return text.substr(0, end);
}

// `text`, or its first `max_bytes` (UTF-8 whole) and "... (N bytes)" when
// longer: the reader sees that it was cut and how long it was.
inline std::string Abridged(std::string_view text, size_t max_bytes) {
  if (text.size() <= max_bytes) return std::string(text);
  return std::string(Utf8Prefix(text, max_bytes)) + "... (" +
         std::to_string(text.size()) + " bytes)";
}

}  // namespace fcc::common
