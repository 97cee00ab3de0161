#include "watch.h"

#include <malloc.h>
#include <spdlog/spdlog.h>

#include <random>

namespace fcc::controller {
namespace {

using nlohmann::json;

// Each page is parsed whole (untrimmed) before its items are trimmed and
// kept, so the page size bounds the transient memory of a list: 100 Jobs
// are ~5 MiB parsed, 500 were the larger part of the controller's peak.
constexpr int kListPageSize = 100;

std::string ResourceVersionOf(const json& object) {
  return object.value("metadata", json::object()).value("resourceVersion", "");
}

std::string ControllerOwnerUid(const json& object) {
  for (const auto& ref : object.value("metadata", json::object())
                             .value("ownerReferences", json::array())) {
    if (ref.value("controller", false)) return ref.value("uid", "");
  }
  return "";
}

}  // namespace

std::optional<WatchEvent> ParseWatchEvent(std::string_view line,
                                          std::string* error) {
  auto parsed = json::parse(line, nullptr, false);
  if (parsed.is_discarded() || !parsed.is_object()) {
    *error = "watch line is not JSON";
    return std::nullopt;
  }
  const std::string type = parsed.value("type", "");
  WatchEvent event;
  event.object = parsed.value("object", json::object());
  if (type == "ADDED") {
    event.type = WatchEvent::Type::kAdded;
  } else if (type == "MODIFIED") {
    event.type = WatchEvent::Type::kModified;
  } else if (type == "DELETED") {
    event.type = WatchEvent::Type::kDeleted;
  } else if (type == "BOOKMARK") {
    event.type = WatchEvent::Type::kBookmark;
  } else if (type == "ERROR") {
    event.type = WatchEvent::Type::kError;
    event.error_code = event.object.value("code", 0);
    event.error_message = event.object.value("message", "");
  } else {
    *error = "unknown watch event type \"" + type + "\"";
    return std::nullopt;
  }
  if (event.type != WatchEvent::Type::kError &&
      ResourceVersionOf(event.object).empty()) {
    *error = "watch event without metadata.resourceVersion";
    return std::nullopt;
  }
  return event;
}

bool LineBuffer::NextLine(std::string* line) {
  const size_t newline = buffer_.find('\n');
  if (newline == std::string::npos) return false;
  line->assign(buffer_, 0, newline);
  buffer_.erase(0, newline + 1);
  if (!line->empty() && line->back() == '\r') line->pop_back();
  return true;
}

std::chrono::milliseconds Backoff::Next() {
  // Full jitter keeps many replicas/informers from retrying in lockstep.
  static thread_local std::mt19937 rng{std::random_device{}()};
  std::uniform_int_distribution<long> jitter(next_.count() / 2, next_.count());
  const std::chrono::milliseconds delay(jitter(rng));
  next_ = std::min(max_, next_ * 2);
  return delay;
}

std::string ObjectKey(const json& object) {
  const json meta = object.value("metadata", json::object());
  const std::string ns = meta.value("namespace", "");
  const std::string name = meta.value("name", "");
  return ns.empty() ? name : ns + "/" + name;
}

std::string ControllerOwnerName(const json& object, std::string_view kind) {
  for (const auto& ref : object.value("metadata", json::object())
                             .value("ownerReferences", json::array())) {
    if (ref.value("controller", false) && ref.value("kind", "") == kind) {
      return ref.value("name", "");
    }
  }
  return "";
}

std::optional<json> ObjectStore::Get(const std::string& key) const {
  std::lock_guard lock(mu_);
  auto it = objects_.find(key);
  if (it == objects_.end()) return std::nullopt;
  return it->second;
}

std::vector<json> ObjectStore::ByControllerUid(const std::string& uid) const {
  std::lock_guard lock(mu_);
  std::vector<json> out;
  auto it = by_owner_uid_.find(uid);
  if (it == by_owner_uid_.end()) return out;
  for (const auto& key : it->second) out.push_back(objects_.at(key));
  return out;
}

std::vector<std::string> ObjectStore::Keys() const {
  std::lock_guard lock(mu_);
  std::vector<std::string> keys;
  for (const auto& [key, _] : objects_) keys.push_back(key);
  return keys;
}

void ObjectStore::IndexLocked(const std::string& key, const json& object) {
  const std::string owner = ControllerOwnerUid(object);
  if (!owner.empty()) by_owner_uid_[owner].insert(key);
}

void ObjectStore::UnindexLocked(const std::string& key) {
  auto it = objects_.find(key);
  if (it == objects_.end()) return;
  const std::string owner = ControllerOwnerUid(it->second);
  if (auto idx = by_owner_uid_.find(owner); idx != by_owner_uid_.end()) {
    idx->second.erase(key);
    if (idx->second.empty()) by_owner_uid_.erase(idx);
  }
}

void TrimForCache(json& object) {
  auto metadata = object.find("metadata");
  if (metadata != object.end() && metadata->is_object())
    metadata->erase("managedFields");
}

void ObjectStore::Upsert(const json& object) {
  const std::string key = ObjectKey(object);
  std::lock_guard lock(mu_);
  UnindexLocked(key);
  objects_[key] = object;
  IndexLocked(key, object);
}

void ObjectStore::Remove(const std::string& key) {
  std::lock_guard lock(mu_);
  UnindexLocked(key);
  objects_.erase(key);
}

std::vector<std::string> ObjectStore::Replace(std::vector<json> objects) {
  std::lock_guard lock(mu_);
  std::map<std::string, json> fresh;
  for (auto& object : objects) {
    std::string key = ObjectKey(object);
    fresh[std::move(key)] = std::move(object);
  }
  std::vector<std::string> gone;
  for (const auto& [key, _] : objects_) {
    if (!fresh.count(key)) gone.push_back(key);
  }
  objects_ = std::move(fresh);
  by_owner_uid_.clear();
  for (const auto& [key, object] : objects_) IndexLocked(key, object);
  return gone;
}

Informer::Informer(const KubeClient& client, Options options,
                   ObjectStore& store, Handler handler)
    : client_(client),
      options_(std::move(options)),
      store_(store),
      handler_(std::move(handler)) {}

std::string Informer::Query(const std::string& extra) const {
  std::string query = "?" + extra;
  if (!options_.label_selector.empty()) {
    query += "&labelSelector=" + UrlEncode(options_.label_selector);
  }
  return query;
}

std::optional<std::string> Informer::List(StopSignal& stop, long* http_status) {
  std::vector<json> items;
  std::string continue_token;
  std::string resource_version;
  do {
    std::string extra = "limit=" + std::to_string(kListPageSize);
    if (!continue_token.empty())
      extra += "&continue=" + UrlEncode(continue_token);
    HttpResponse response =
        client_.Request("GET", options_.collection_path + Query(extra));
    *http_status = response.status;
    if (!response.ok()) {
      if (response.status == 410 && !continue_token.empty()) {
        // The continue token expired mid-list: start the list again.
        items.clear();
        continue_token.clear();
        continue;
      }
      if (!(options_.optional && response.status == 404)) {
        spdlog::warn("list {}: {}", options_.name, response.Describe());
      }
      return std::nullopt;
    }
    json list = json::parse(response.body, nullptr, false);
    if (list.is_discarded()) {
      spdlog::warn("list {}: response is not JSON", options_.name);
      return std::nullopt;
    }
    auto list_items = list.find("items");
    if (list_items != list.end() && list_items->is_array()) {
      for (auto& item : *list_items) {
        if (options_.trim) options_.trim(item);
        items.push_back(std::move(item));
      }
    }
    const json meta = list.value("metadata", json::object());
    continue_token = meta.value("continue", "");
    resource_version = meta.value("resourceVersion", "");
  } while (!continue_token.empty() && !stop.stopped());

  // The listed objects move into the store (a copy would double the
  // cache at its peak); the handler gets each back from the store.
  std::vector<std::string> listed_keys;
  listed_keys.reserve(items.size());
  for (const auto& item : items) listed_keys.push_back(ObjectKey(item));
  const size_t listed = items.size();
  for (const auto& key : store_.Replace(std::move(items))) {
    json gone{{"metadata", json::object()}};
    const size_t slash = key.find('/');
    if (slash == std::string::npos) {
      gone["metadata"]["name"] = key;
    } else {
      gone["metadata"]["namespace"] = key.substr(0, slash);
      gone["metadata"]["name"] = key.substr(slash + 1);
    }
    handler_(WatchEvent::Type::kDeleted, gone);
  }
  for (const auto& key : listed_keys) {
    if (auto object = store_.Get(key))
      handler_(WatchEvent::Type::kAdded, *object);
  }
  // The pages' memory is free now but stays in glibc's per-thread arenas
  // (each informer lists on its own thread); hand it back to the kernel.
  malloc_trim(0);
  spdlog::debug("listed {} {} at resourceVersion {}", listed, options_.name,
                resource_version);
  return resource_version;
}

Informer::WatchEnd Informer::Watch(StopSignal& stop,
                                   std::string* resource_version) {
  const std::string path =
      options_.collection_path +
      Query("watch=1&allowWatchBookmarks=true&resourceVersion=" +
            UrlEncode(*resource_version) +
            "&timeoutSeconds=" + std::to_string(options_.watch_timeout_s));
  LineBuffer lines;
  bool gone = false;
  bool bad_event = false;
  auto on_data = [&](std::string_view chunk) {
    lines.Append(chunk);
    std::string line;
    while (lines.NextLine(&line)) {
      if (line.empty()) continue;
      std::string error;
      auto event = ParseWatchEvent(line, &error);
      if (!event) {
        spdlog::warn("watch {}: {}", options_.name, error);
        bad_event = true;
        return false;
      }
      if (event->type == WatchEvent::Type::kError) {
        if (event->error_code == 410) {
          gone = true;
        } else {
          spdlog::warn("watch {}: server error {}: {}", options_.name,
                       event->error_code, event->error_message);
          bad_event = true;
        }
        return false;
      }
      *resource_version = ResourceVersionOf(event->object);
      if (options_.trim) options_.trim(event->object);
      switch (event->type) {
        case WatchEvent::Type::kAdded:
        case WatchEvent::Type::kModified:
          store_.Upsert(event->object);
          handler_(event->type, event->object);
          break;
        case WatchEvent::Type::kDeleted:
          store_.Remove(ObjectKey(event->object));
          handler_(event->type, event->object);
          break;
        default:  // bookmark: only the resourceVersion moves
          break;
      }
    }
    return true;
  };
  HttpResponse response =
      client_.Stream(path, on_data, stop.flag(), options_.watch_timeout_s + 60);
  if (stop.stopped()) return WatchEnd::kStopped;
  if (gone || response.status == 410) return WatchEnd::kGone;
  if (bad_event) return WatchEnd::kGone;  // resync from a fresh list
  if (!response.error.empty() || !response.ok()) {
    spdlog::warn("watch {}: {}", options_.name, response.Describe());
    return WatchEnd::kError;
  }
  return WatchEnd::kClosed;
}

void Informer::Run(StopSignal& stop) {
  Backoff backoff(std::chrono::milliseconds(500), std::chrono::seconds(30));
  std::optional<std::string> resource_version;
  bool logged_absent = false;
  while (!stop.stopped()) {
    if (!resource_version) {
      long status = 0;
      resource_version = List(stop, &status);
      if (!resource_version) {
        if (options_.optional && status == 404) {
          if (!logged_absent) {
            spdlog::info(
                "{} are not served by this cluster (not installed); "
                "checking again later",
                options_.name);
            logged_absent = true;
          }
          synced_.store(true);
          stop.WaitFor(std::chrono::seconds(30));
        } else {
          stop.WaitFor(backoff.Next());
        }
        continue;
      }
      logged_absent = false;
      synced_.store(true);
      backoff.Reset();
    }
    switch (Watch(stop, &*resource_version)) {
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

}  // namespace fcc::controller
