#include "kube/api_path.h"

#include <cctype>

namespace fcc::kube {

std::string ApiPrefix(std::string_view api_version) {
  if (api_version.find('/') == std::string_view::npos) {
    return "/api/" + std::string(api_version);
  }
  return "/apis/" + std::string(api_version);
}

std::string CollectionPath(std::string_view api_version,
                           std::string_view plural, std::string_view ns) {
  std::string path = ApiPrefix(api_version);
  if (!ns.empty()) path += "/namespaces/" + std::string(ns);
  return path + "/" + std::string(plural);
}

std::string ObjectPath(std::string_view api_version, std::string_view plural,
                       std::string_view ns, std::string_view name,
                       std::string_view subresource) {
  std::string path =
      CollectionPath(api_version, plural, ns) + "/" + std::string(name);
  if (!subresource.empty()) path += "/" + std::string(subresource);
  return path;
}

std::string UrlEncode(std::string_view value) {
  static const char kHex[] = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : value) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  return out;
}

}  // namespace fcc::kube
