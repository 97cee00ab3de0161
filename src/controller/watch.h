// List-then-watch of one resource collection into an in-memory store
// (an "informer"), following the API conventions: list, then watch from
// the list's resourceVersion with bookmarks; re-list on 410 Gone (as HTTP
// status or as an in-stream ERROR event); re-watch from the last seen
// resourceVersion when the server closes the stream; exponential back-off
// on errors.
#ifndef FCC_CONTROLLER_WATCH_H_
#define FCC_CONTROLLER_WATCH_H_

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "kube_client.h"
#include "stop_signal.h"

namespace fcc::controller {

struct WatchEvent {
  enum class Type { kAdded, kModified, kDeleted, kBookmark, kError };
  Type type = Type::kError;
  nlohmann::json object;  // the object; for kError the metav1.Status
  // kError only: Status.code (410 means the resourceVersion is too old).
  int error_code = 0;
  std::string error_message;
};

// Parses one line of a watch stream. nullopt (with `error` set) for a line
// that is not a watch event.
std::optional<WatchEvent> ParseWatchEvent(std::string_view line,
                                          std::string* error);

// Splits a byte stream into lines; chunks may cut lines anywhere.
class LineBuffer {
 public:
  void Append(std::string_view data) { buffer_.append(data); }
  // Moves the next complete line (without '\n') into `line`.
  bool NextLine(std::string* line);

 private:
  std::string buffer_;
};

// Exponential back-off with a ceiling; Reset() after a success.
class Backoff {
 public:
  Backoff(std::chrono::milliseconds initial, std::chrono::milliseconds max)
      : initial_(initial), max_(max), next_(initial) {}
  std::chrono::milliseconds Next();
  void Reset() { next_ = initial_; }

 private:
  std::chrono::milliseconds initial_, max_, next_;
};

// "<namespace>/<name>" (or "<name>" for cluster-scoped objects).
std::string ObjectKey(const nlohmann::json& object);
// The name of the controller ownerReference of `kind`, or "".
std::string ControllerOwnerName(const nlohmann::json& object,
                                std::string_view kind);

// Drops metadata.managedFields, which the controller never reads and which
// is often the largest part of an object (a few KiB per manager).
void TrimForCache(nlohmann::json& object);

// Thread-safe store of the objects an Informer has seen, keyed by
// ObjectKey, indexed by controller-owner uid.
class ObjectStore {
 public:
  std::optional<nlohmann::json> Get(const std::string& key) const;
  std::vector<nlohmann::json> ByControllerUid(const std::string& uid) const;
  std::vector<std::string> Keys() const;
  void Upsert(const nlohmann::json& object);
  void Remove(const std::string& key);
  // Replaces the contents; returns the keys that disappeared.
  std::vector<std::string> Replace(std::vector<nlohmann::json> objects);

 private:
  void IndexLocked(const std::string& key, const nlohmann::json& object);
  void UnindexLocked(const std::string& key);

  mutable std::mutex mu_;
  std::map<std::string, nlohmann::json> objects_;
  std::map<std::string, std::set<std::string>> by_owner_uid_;
};

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
    // handed to the handler: drops what the controller never reads, so
    // the cache holds less (see TrimForCache).
    std::function<void(nlohmann::json&)> trim = TrimForCache;
  };

  Informer(const KubeClient& client, Options options, ObjectStore& store,
           Handler handler);

  // Blocks until `stop`.
  void Run(StopSignal& stop);
  // True after the first complete list (or after an optional collection
  // was found absent), so /readyz can wait for caches.
  bool HasSynced() const { return synced_.load(); }

 private:
  // Lists everything; returns the list's resourceVersion or nullopt.
  std::optional<std::string> List(StopSignal& stop, long* http_status);
  enum class WatchEnd { kClosed, kGone, kError, kStopped };
  WatchEnd Watch(StopSignal& stop, std::string* resource_version);
  std::string Query(const std::string& extra) const;

  const KubeClient& client_;
  Options options_;
  ObjectStore& store_;
  Handler handler_;
  std::atomic<bool> synced_{false};
};

}  // namespace fcc::controller

#endif  // FCC_CONTROLLER_WATCH_H_
