// Kubernetes name validators: one definition for both binaries.
#pragma once

#include <string_view>

namespace fcc::common {

// RFC 1123 label: namespaces, and a Service's name once it begins with a
// letter (IsDns1035Label).
bool IsDns1123Label(std::string_view name);
// RFC 1123 subdomain: the names of most objects (MiniClusters among them).
bool IsDns1123Subdomain(std::string_view name);
// RFC 1035 label: names that become a Service's name or a hostname.
bool IsDns1035Label(std::string_view name);
// A label or annotation key: "[<DNS-1123 subdomain>/]<name>", the name at
// most 63 alphanumerics, '-', '_' or '.', beginning and ending with an
// alphanumeric.
bool IsQualifiedName(std::string_view key);
// A label value: empty, or at most 63 characters shaped like a key's name.
bool IsLabelValue(std::string_view value);

// A-Z, a-z or 0-9, whatever the locale.
bool IsAsciiAlnum(char c);

}  // namespace fcc::common
