#include "common/path.h"

namespace fcc::common {
namespace {

// Calls `visit` with every '/'-separated part of `path`, empty ones included;
// stops early when `visit` returns false.
template <typename Visit>
void ForEachPart(std::string_view path, Visit visit) {
  size_t start = 0;
  while (start <= path.size()) {
    size_t end = path.find('/', start);
    if (end == std::string_view::npos) end = path.size();
    if (!visit(path.substr(start, end - start))) return;
    start = end + 1;
  }
}

}  // namespace

bool HasDotPart(std::string_view path) {
  bool dotted = false;
  ForEachPart(path, [&dotted](std::string_view part) {
    dotted = part == "." || part == "..";
    return !dotted;
  });
  return dotted;
}

std::string_view TrimTrailingSlashes(std::string_view path) {
  while (path.size() > 1 && path.back() == '/') path.remove_suffix(1);
  return path;
}

std::optional<std::string> NormalAbsolutePath(std::string_view path) {
  if (path.empty() || path.front() != '/' || HasDotPart(path)) {
    return std::nullopt;
  }
  std::string normal;
  ForEachPart(path, [&normal](std::string_view part) {
    if (!part.empty()) normal += "/" + std::string(part);
    return true;
  });
  return normal.empty() ? "/" : normal;
}

}  // namespace fcc::common
