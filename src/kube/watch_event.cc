#include "kube/watch_event.h"

#include <optional>

#include "kube/object_meta.h"

namespace fcc::kube {
namespace {

using nlohmann::json;

std::optional<WatchEvent::Type> EventType(std::string_view type) {
  if (type == "ADDED") return WatchEvent::Type::kAdded;
  if (type == "MODIFIED") return WatchEvent::Type::kModified;
  if (type == "DELETED") return WatchEvent::Type::kDeleted;
  if (type == "BOOKMARK") return WatchEvent::Type::kBookmark;
  if (type == "ERROR") return WatchEvent::Type::kError;
  return std::nullopt;
}

}  // namespace

std::expected<WatchEvent, std::string> ParseWatchEvent(std::string_view line) {
  auto parsed = json::parse(line, nullptr, false);
  if (parsed.is_discarded() || !parsed.is_object()) {
    return std::unexpected("watch line is not JSON");
  }
  const std::string& type = StringAt(parsed, "type");
  const auto event_type = EventType(type);
  if (!event_type) {
    return std::unexpected("unknown watch event type \"" + type + "\"");
  }
  WatchEvent event;
  event.type = *event_type;
  event.object = parsed.value("object", json::object());
  if (event.type == WatchEvent::Type::kError) {
    event.error_code = event.object.value("code", 0);
    event.error_message = event.object.value("message", "");
  } else if (ObjectMeta(event.object).resource_version().empty()) {
    return std::unexpected("watch event without metadata.resourceVersion");
  }
  return event;
}

}  // namespace fcc::kube
