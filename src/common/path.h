// Lexical path checks shared by both binaries: nothing here touches the
// filesystem or follows a link.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace fcc::common {

// True if a '/'-separated part of `path` is "." or "..".
bool HasDotPart(std::string_view path);

// `path` without trailing '/'s; "/" stays "/".
std::string_view TrimTrailingSlashes(std::string_view path);

// "/a//b/" -> "/a/b"; nullopt if `path` is not absolute or has a "." or ".."
// part.
std::optional<std::string> NormalAbsolutePath(std::string_view path);

}  // namespace fcc::common
