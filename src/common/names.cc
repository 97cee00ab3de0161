#include "common/names.h"

#include <algorithm>

namespace fcc::common {
namespace {

bool IsLowerAlnum(char c) {
  return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
}

// Letters, digits and '-', beginning and ending with a letter or digit; no
// length limit (a subdomain's labels have none of their own in Kubernetes).
bool IsLabelShaped(std::string_view name) {
  return !name.empty() && IsLowerAlnum(name.front()) &&
         IsLowerAlnum(name.back()) && std::ranges::all_of(name, [](char c) {
           return IsLowerAlnum(c) || c == '-';
         });
}

// The name part of a qualified name, and a non-empty label value.
bool IsQualifiedNamePart(std::string_view name) {
  return !name.empty() && name.size() <= 63 && IsAsciiAlnum(name.front()) &&
         IsAsciiAlnum(name.back()) && std::ranges::all_of(name, [](char c) {
           return IsAsciiAlnum(c) || c == '-' || c == '_' || c == '.';
         });
}

}  // namespace

bool IsDns1123Label(std::string_view name) {
  return name.size() <= 63 && IsLabelShaped(name);
}

bool IsDns1123Subdomain(std::string_view name) {
  if (name.empty() || name.size() > 253) return false;
  while (true) {
    const size_t dot = name.find('.');
    if (!IsLabelShaped(name.substr(0, dot))) return false;
    if (dot == std::string_view::npos) return true;
    name.remove_prefix(dot + 1);
  }
}

bool IsDns1035Label(std::string_view name) {
  return IsDns1123Label(name) && name.front() >= 'a' && name.front() <= 'z';
}

bool IsQualifiedName(std::string_view key) {
  const size_t slash = key.find('/');
  if (slash == std::string_view::npos) return IsQualifiedNamePart(key);
  return IsDns1123Subdomain(key.substr(0, slash)) &&
         IsQualifiedNamePart(key.substr(slash + 1));
}

bool IsLabelValue(std::string_view value) {
  return value.empty() || IsQualifiedNamePart(value);
}

bool IsAsciiAlnum(char c) { return IsLowerAlnum(c) || (c >= 'A' && c <= 'Z'); }

}  // namespace fcc::common
