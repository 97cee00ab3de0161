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

}  // namespace fcc::common
