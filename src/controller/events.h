// Kubernetes Events (events.k8s.io/v1) on a MiniCluster: which status
// change gives which event (pure), the Event object (pure), and the
// recorder the reconciler calls after a status write.
//
// Events come only from status changes the controller wrote, so a refusal
// that is retried with back-off (JobNameTaken, say) gives one event, not one
// per retry: its status does not change between retries.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "kube/kube_client.h"

namespace fcc::controller {

inline constexpr char kReportingController[] =
    "minicluster.dev/minicluster-controller";
// events.k8s.io/v1 refuses a longer note.
inline constexpr size_t kMaxEventNote = 1024;

struct EventSpec {
  std::string type;    // Normal | Warning
  std::string reason;  // CamelCase, what happened
  std::string action;  // CamelCase, what the controller did or tried
  std::string note;    // human-readable, at most kMaxEventNote bytes

  bool operator==(const EventSpec&) const = default;
};

// The events for a MiniCluster whose status goes from `before` to `after`
// (status objects as status.h computes them; `before` may be empty).
// `queued`: the MiniCluster is in a Kueue queue, so Kueue starts and stops
// its Job.
std::vector<EventSpec> StatusEvents(const nlohmann::json& before,
                                    const nlohmann::json& after, bool queued);

// The part of `status` StatusEvents reads as `before`: the state and its
// condition's type, reason and message. What WrittenStatuses keeps, a
// fraction of the whole status (four conditions with their times).
nlohmann::json EventRelevantStatus(const nlohmann::json& status);

// The events.k8s.io/v1 Event about `regarding` (a MiniCluster as stored),
// named "<name>.<unique>" as client-go names them (`unique`: the time in
// hex nanoseconds). Not generateName: the API server checks "<name>." as a
// name, which a trailing dot is not.
nlohmann::json EventObject(const nlohmann::json& regarding,
                           const EventSpec& event,
                           const std::string& reporting_instance,
                           const std::string& event_time,
                           const std::string& unique);

// What the reconciler calls; must never throw nor fail a reconcile.
class EventRecorder {
 public:
  virtual ~EventRecorder() = default;
  virtual void Record(const nlohmann::json& regarding,
                      const EventSpec& event) = 0;
};

// Creates each Event with a POST; a failure is logged and dropped (an event
// is worth less than a reconcile).
class KubeEventRecorder : public EventRecorder {
 public:
  KubeEventRecorder(kube::KubeApi& api, std::string reporting_instance)
      : api_(api), instance_(std::move(reporting_instance)) {}
  void Record(const nlohmann::json& regarding, const EventSpec& event) override;
  // The Event of what happened at `when`.
  void Send(const nlohmann::json& regarding, const EventSpec& event,
            std::chrono::system_clock::time_point when);

 private:
  kube::KubeApi& api_;
  const std::string instance_;
};

// What an Event needs of the object it is about (EventObject's `regarding`):
// apiVersion, kind and metadata's name, namespace, uid, resourceVersion.
nlohmann::json EventReference(const nlohmann::json& object);

// Hands events to a KubeEventRecorder on a thread of its own, so a reconcile
// does not wait for an Event's POST (client-go's recorder is asynchronous
// too). At most `max_pending` wait; more are dropped and logged, as
// client-go drops events when its queue is full. On destruction, what is
// still pending is sent for up to `drain`, the rest dropped.
class AsyncEventRecorder : public EventRecorder {
 public:
  explicit AsyncEventRecorder(
      KubeEventRecorder& sink, size_t max_pending = 1000,
      std::chrono::milliseconds drain = std::chrono::seconds(5));
  ~AsyncEventRecorder() override;
  AsyncEventRecorder(const AsyncEventRecorder&) = delete;
  AsyncEventRecorder& operator=(const AsyncEventRecorder&) = delete;
  void Record(const nlohmann::json& regarding, const EventSpec& event) override;

 private:
  struct Pending {
    nlohmann::json regarding;
    EventSpec event;
    std::chrono::system_clock::time_point when;
  };
  void Run();

  KubeEventRecorder& sink_;
  const size_t max_pending_;
  const std::chrono::milliseconds drain_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Pending> pending_;
  bool stopping_ = false;
  std::thread thread_;  // last: starts after the members it uses
};

// Remembers the last status the controller wrote per MiniCluster (its
// EventRelevantStatus), so a status read from a cache that has not caught up
// with that write yet does not give its events twice.
class WrittenStatuses {
 public:
  // The status last written for the MiniCluster `key` of `uid`, else
  // `cached` (the status the cache shows).
  nlohmann::json Before(const std::string& key, const std::string& uid,
                        const nlohmann::json& cached) const;
  void Wrote(const std::string& key, const std::string& uid,
             const nlohmann::json& status);
  void Forget(const std::string& key);

 private:
  mutable std::mutex mu_;
  std::map<std::string, std::pair<std::string, nlohmann::json>> written_;
};

}  // namespace fcc::controller
