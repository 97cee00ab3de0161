// List-then-watch of one resource collection into an ObjectStore (an
// "informer"), following the API conventions: list, then watch from the
// list's resourceVersion with bookmarks; re-list on 410 Gone (as HTTP
// status or as an in-stream ERROR event); re-watch from the last seen
// resourceVersion when the server closes the stream; exponential back-off
// on errors.
#pragma once

#include <atomic>
#include <expected>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "common/stop_signal.h"
#include "kube/backoff.h"
#include "kube/kube_client.h"
#include "kube/object_store.h"
#include "kube/watch_event.h"

namespace fcc::kube {

// Drops metadata.managedFields, which the controller never reads and which
// is often the largest part of an object (a few KiB per manager).
void TrimForCache(nlohmann::json& object);

// The `limit` of a list's next page, from the page just read: about
// kListPageBytes of objects of the size seen, within [1, kMaxListPage].
// Each page is parsed whole before its items are trimmed, so a page of
// large objects (etcd allows 1.5 MiB each) must be short, while small ones
// come many to a page. The first page asks for kFirstListPage.
inline constexpr int kFirstListPage = 5;
inline constexpr int kMaxListPage = 100;
inline constexpr size_t kListPageBytes = size_t{512} << 10;
int NextListPageSize(size_t page_bytes, size_t page_items, int limit);

class Informer {
 public:
  // Called for each change with the object (for deletes, its last state).
  using Handler = std::function<void(WatchEvent::Type, const nlohmann::json&)>;

  struct Options {
    std::string name;             // for logs, e.g. "jobs"
    std::string collection_path;  // e.g. /apis/batch/v1/jobs
    std::string label_selector;   // optional
    int watch_timeout_s = 300;    // server closes the watch after this
    // When the collection does not exist (404: an optional CRD such as
    // Kueue's), keep checking at the back-off ceiling instead of failing.
    bool optional = false;
    // Applied to every listed or watched object before it is stored or
    // handed to the handlers: drops what the controller never reads, so
    // the cache holds less (see TrimForCache).
    std::function<void(nlohmann::json&)> trim = TrimForCache;
  };

  Informer(const KubeClient& client, Options options, ObjectStore& store);

  // Only before Run.
  void AddEventHandler(Handler handler);
  // Blocks until `stop`.
  void Run(common::StopSignal& stop);
  // True after the first complete list (or after an optional collection
  // was found absent), so /readyz can wait for caches.
  bool HasSynced() const { return synced_.load(); }
  const ObjectStore& store() const { return store_; }

 private:
  // A failed list: the HTTP status (0 without a response).
  struct ListFailed {
    long status = 0;
  };
  struct Listed {
    std::vector<nlohmann::json> items;
    std::string resource_version;
  };
  // Lists everything into the store; returns the list's resourceVersion.
  std::expected<std::string, ListFailed> List(common::StopSignal& stop);
  std::expected<Listed, ListFailed> FetchPages(common::StopSignal& stop);
  void ReplaceStore(std::vector<nlohmann::json> items);
  void WaitAfterFailedList(common::StopSignal& stop, const ListFailed& failed,
                           Backoff& backoff);

  enum class WatchEnd { kClosed, kGone, kError, kStopped };
  // `resource_version` moves with every event seen.
  WatchEnd Watch(common::StopSignal& stop, std::string& resource_version);
  // One line of the stream; nullopt to go on reading, or why to stop.
  std::optional<WatchEnd> HandleLine(const std::string& line,
                                     std::string& resource_version);
  void Notify(WatchEvent::Type type, const nlohmann::json& object) const;
  std::string Query(const std::string& extra) const;

  const KubeClient& client_;
  Options options_;
  ObjectStore& store_;
  std::vector<Handler> handlers_;
  std::atomic<bool> synced_{false};
  bool logged_absent_ = false;
};

}  // namespace fcc::kube
