#include "kube/informer.h"

#include <malloc.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstddef>

#include "kube/api_path.h"
#include "kube/line_buffer.h"
#include "kube/object_meta.h"

namespace fcc::kube {
namespace {

using nlohmann::json;

// The last state of an object that vanished between two lists: only its
// key is known.
json GoneObject(const std::string& key) {
  json gone{{"metadata", json::object()}};
  const size_t slash = key.find('/');
  if (slash == std::string::npos) {
    gone["metadata"]["name"] = key;
  } else {
    gone["metadata"]["namespace"] = key.substr(0, slash);
    gone["metadata"]["name"] = key.substr(slash + 1);
  }
  return gone;
}

}  // namespace

int NextListPageSize(size_t page_bytes, size_t page_items, int limit) {
  if (page_items == 0) return limit;
  const size_t per_item = std::max<size_t>(page_bytes / page_items, 1);
  return static_cast<int>(
      std::clamp<size_t>(kListPageBytes / per_item, 1, kMaxListPage));
}

void TrimForCache(json& object) {
  auto metadata = object.find("metadata");
  if (metadata != object.end() && metadata->is_object())
    metadata->erase("managedFields");
}

Informer::Informer(const KubeClient& client, Options options,
                   ObjectStore& store)
    : client_(client), options_(std::move(options)), store_(store) {}

void Informer::AddEventHandler(Handler handler) {
  handlers_.push_back(std::move(handler));
}

void Informer::Notify(WatchEvent::Type type, const json& object) const {
  for (const auto& handler : handlers_) handler(type, object);
}

std::string Informer::Query(const std::string& extra) const {
  std::string query = "?" + extra;
  if (!options_.label_selector.empty()) {
    query += "&labelSelector=" + UrlEncode(options_.label_selector);
  }
  return query;
}

std::expected<Informer::Listed, Informer::ListFailed> Informer::FetchPages(
    common::StopSignal& stop) {
  Listed listed;
  std::string continue_token;
  int limit = kFirstListPage;
  do {
    std::string extra = "limit=" + std::to_string(limit);
    if (!continue_token.empty())
      extra += "&continue=" + UrlEncode(continue_token);
    HttpResponse response =
        client_.Request("GET", options_.collection_path + Query(extra));
    if (response.status == 410 && !continue_token.empty()) {
      // The continue token expired mid-list: start the list again.
      listed.items.clear();
      continue_token.clear();
      continue;
    }
    if (!response.ok()) {
      if (!(options_.optional && response.status == 404))
        spdlog::warn("list {}: {}", options_.name, response.Describe());
      return std::unexpected(ListFailed{response.status});
    }
    json list = json::parse(response.body, nullptr, false);
    if (list.is_discarded()) {
      spdlog::warn("list {}: response is not JSON", options_.name);
      return std::unexpected(ListFailed{response.status});
    }
    if (auto items = list.find("items");
        items != list.end() && items->is_array()) {
      limit = NextListPageSize(response.body.size(), items->size(), limit);
      for (auto& item : *items) {
        if (options_.trim) options_.trim(item);
        // A copy, not a move: the kept objects are then allocated apart
        // from the page's large strings, which free whole pages of heap.
        listed.items.push_back(item);
      }
    }
    const json& meta = FieldAt(list, "metadata");
    continue_token = StringAt(meta, "continue");
    listed.resource_version = StringAt(meta, "resourceVersion");
  } while (!continue_token.empty() && !stop.stopped());
  return listed;
}

void Informer::ReplaceStore(std::vector<json> items) {
  // The listed objects move into the store (a copy would double the
  // cache at its peak); the handlers get each back from the store.
  std::vector<std::string> listed_keys;
  listed_keys.reserve(items.size());
  for (const auto& item : items) listed_keys.push_back(ObjectKey(item));
  for (const auto& key : store_.Replace(std::move(items)))
    Notify(WatchEvent::Type::kDeleted, GoneObject(key));
  for (const auto& key : listed_keys) {
    if (auto object = store_.Get(key))
      Notify(WatchEvent::Type::kAdded, *object);
  }
}

std::expected<std::string, Informer::ListFailed> Informer::List(
    common::StopSignal& stop) {
  auto listed = FetchPages(stop);
  if (!listed) return std::unexpected(listed.error());
  const size_t count = listed->items.size();
  ReplaceStore(std::move(listed->items));
  // The pages' memory is free now but stays in glibc's per-thread arenas
  // (each informer lists on its own thread); hand it back to the kernel.
  malloc_trim(0);
  spdlog::debug("listed {} {} at resourceVersion {}", count, options_.name,
                listed->resource_version);
  return listed->resource_version;
}

std::optional<Informer::WatchEnd> Informer::HandleLine(
    const std::string& line, std::string& resource_version) {
  auto event = ParseWatchEvent(line);
  if (!event) {
    spdlog::warn("watch {}: {}", options_.name, event.error());
    return WatchEnd::kGone;  // resync from a fresh list
  }
  if (event->type == WatchEvent::Type::kError) {
    if (event->error_code != 410) {
      spdlog::warn("watch {}: server error {}: {}", options_.name,
                   event->error_code, event->error_message);
    }
    return WatchEnd::kGone;  // re-list: too old, or a stream we distrust
  }
  resource_version = ObjectMeta(event->object).resource_version();
  if (options_.trim) options_.trim(event->object);
  switch (event->type) {
    case WatchEvent::Type::kAdded:
    case WatchEvent::Type::kModified:
      store_.Upsert(event->object);
      Notify(event->type, event->object);
      break;
    case WatchEvent::Type::kDeleted:
      store_.Remove(ObjectKey(event->object));
      Notify(event->type, event->object);
      break;
    default:  // bookmark: only the resourceVersion moves
      break;
  }
  return std::nullopt;
}

Informer::WatchEnd Informer::Watch(common::StopSignal& stop,
                                   std::string& resource_version) {
  const std::string path =
      options_.collection_path +
      Query("watch=1&allowWatchBookmarks=true&resourceVersion=" +
            UrlEncode(resource_version) +
            "&timeoutSeconds=" + std::to_string(options_.watch_timeout_s));
  LineBuffer lines;
  std::optional<WatchEnd> ended;
  auto on_data = [&](std::string_view chunk) {
    lines.Append(chunk);
    while (auto line = lines.NextLine()) {
      if (line->empty()) continue;
      ended = HandleLine(*line, resource_version);
      if (ended) return false;
    }
    return true;
  };
  HttpResponse response =
      client_.Stream(path, on_data, stop.flag(), options_.watch_timeout_s + 60);
  if (stop.stopped()) return WatchEnd::kStopped;
  if (ended || response.status == 410) return WatchEnd::kGone;
  if (!response.error.empty() || !response.ok()) {
    spdlog::warn("watch {}: {}", options_.name, response.Describe());
    return WatchEnd::kError;
  }
  return WatchEnd::kClosed;
}

void Informer::WaitAfterFailedList(common::StopSignal& stop,
                                   const ListFailed& failed, Backoff& backoff) {
  if (!(options_.optional && failed.status == 404)) {
    stop.WaitFor(backoff.Next());
    return;
  }
  if (!logged_absent_) {
    spdlog::info(
        "{} are not served by this cluster (not installed); checking again "
        "later",
        options_.name);
    logged_absent_ = true;
  }
  synced_.store(true);
  stop.WaitFor(std::chrono::seconds(30));
}

void Informer::Run(common::StopSignal& stop) {
  Backoff backoff(std::chrono::milliseconds(500), std::chrono::seconds(30));
  std::optional<std::string> resource_version;
  while (!stop.stopped()) {
    if (!resource_version) {
      auto listed = List(stop);
      if (!listed) {
        WaitAfterFailedList(stop, listed.error(), backoff);
        continue;
      }
      resource_version = std::move(*listed);
      logged_absent_ = false;
      synced_.store(true);
      backoff.Reset();
    }
    switch (Watch(stop, *resource_version)) {
      case WatchEnd::kClosed:
        backoff.Reset();  // normal timeout: re-watch from where we are
        spdlog::debug("watch {}: ended by the server; resuming at {}",
                      options_.name, *resource_version);
        break;
      case WatchEnd::kGone:
        spdlog::info("watch {}: resourceVersion too old, re-listing",
                     options_.name);
        resource_version.reset();
        break;
      case WatchEnd::kError:
        stop.WaitFor(backoff.Next());
        break;
      case WatchEnd::kStopped:
        return;
    }
  }
}

}  // namespace fcc::kube
