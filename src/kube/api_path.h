// API server paths: pure string building, shared by the client, the
// informers and the planners that name the objects they write.
#pragma once

#include <string>
#include <string_view>

namespace fcc::kube {

// "/api/v1" for the core group, "/apis/<group>/<version>" otherwise.
std::string ApiPrefix(std::string_view api_version);
// Collection path; namespace may be empty for all namespaces.
std::string CollectionPath(std::string_view api_version,
                           std::string_view plural, std::string_view ns);
std::string ObjectPath(std::string_view api_version, std::string_view plural,
                       std::string_view ns, std::string_view name,
                       std::string_view subresource = "");
// Percent-encodes a query parameter value.
std::string UrlEncode(std::string_view value);

}  // namespace fcc::kube
