// One event of a Kubernetes watch stream (one JSON line).
#pragma once

#include <expected>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace fcc::kube {

struct WatchEvent {
  enum class Type { kAdded, kModified, kDeleted, kBookmark, kError };
  Type type = Type::kError;
  nlohmann::json object;  // the object; for kError the metav1.Status
  // kError only: Status.code (410 means the resourceVersion is too old).
  int error_code = 0;
  std::string error_message;
};

// Parses one line of a watch stream; the error says why a line is not a
// watch event.
std::expected<WatchEvent, std::string> ParseWatchEvent(std::string_view line);

}  // namespace fcc::kube
