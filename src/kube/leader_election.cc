#include "kube/leader_election.h"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <cstdio>
#include <ctime>
#include <random>
#include <thread>

#include "kube/api_path.h"
#include "kube/time_format.h"

namespace fcc::kube {
namespace {

using nlohmann::json;

std::string LeasePath(const LeaderElectionOptions& o, bool collection) {
  return collection ? CollectionPath("coordination.k8s.io/v1", "leases",
                                     o.namespace_name)
                    : ObjectPath("coordination.k8s.io/v1", "leases",
                                 o.namespace_name, o.name);
}

}  // namespace

// Hostname (the pod's name) and a random suffix, as client-go does: unique
// per process, so a restarted pod never takes its predecessor's lease for
// its own.
std::string ReplicaIdentity() {
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  std::mt19937_64 rng{std::random_device{}()};
  char suffix[17];
  std::snprintf(suffix, sizeof suffix, "%016llx",
                static_cast<unsigned long long>(rng()));
  return std::string(host) + "_" + suffix;
}

json LeaseForHolder(const json* current, const LeaderElectionOptions& options,
                    const std::string& now_micro) {
  json lease = current != nullptr
                   ? *current
                   : json{{"apiVersion", "coordination.k8s.io/v1"},
                          {"kind", "Lease"},
                          {"metadata",
                           {{"name", options.name},
                            {"namespace", options.namespace_name}}},
                          {"spec", json::object()}};
  json& spec = lease["spec"];
  const std::string previous = spec.value("holderIdentity", "");
  if (previous != options.identity) {
    spec["acquireTime"] = now_micro;
    spec["leaseTransitions"] =
        current == nullptr ? 0 : spec.value("leaseTransitions", 0) + 1;
  }
  spec["holderIdentity"] = options.identity;
  spec["leaseDurationSeconds"] =
      static_cast<int>(options.lease_duration.count());
  spec["renewTime"] = now_micro;
  return lease;
}

LeaderElector::Attempt LeaderElector::TryAcquireOrRenew() {
  const std::string now = FormatMicroTime(std::chrono::system_clock::now());
  HttpResponse got = client_.Request("GET", LeasePath(options_, false));
  if (got.status == 404) {
    json lease = LeaseForHolder(nullptr, options_, now);
    HttpResponse created =
        client_.Request("POST", LeasePath(options_, true), lease.dump());
    if (created.ok()) return Attempt::kHeld;
    if (created.status == 409) return Attempt::kHeldByOther;  // lost the race
    spdlog::warn("leader election: create lease: {}", created.Describe());
    return Attempt::kError;
  }
  if (!got.ok()) {
    spdlog::warn("leader election: get lease: {}", got.Describe());
    return Attempt::kError;
  }
  json current = json::parse(got.body, nullptr, false);
  if (current.is_discarded()) return Attempt::kError;
  const json spec = current.value("spec", json::object());
  const std::string holder = spec.value("holderIdentity", "");
  if (!holder.empty() && holder != options_.identity) {
    // Someone else holds it: take over only after its record has stayed
    // the same for a full lease duration on our clock.
    const std::string record = holder + "|" + spec.value("renewTime", "");
    const auto now_steady = std::chrono::steady_clock::now();
    if (record != observed_record_) {
      observed_record_ = record;
      observed_at_ = now_steady;
      return Attempt::kHeldByOther;
    }
    const auto duration = std::chrono::seconds(
        spec.value("leaseDurationSeconds",
                   static_cast<int>(options_.lease_duration.count())));
    if (now_steady - observed_at_ < duration) return Attempt::kHeldByOther;
    spdlog::info("leader election: lease held by {} expired; taking over",
                 holder);
  }
  json lease = LeaseForHolder(&current, options_, now);
  // The body carries metadata.resourceVersion: a concurrent writer makes
  // this PUT fail with 409 instead of both of us winning.
  HttpResponse put =
      client_.Request("PUT", LeasePath(options_, false), lease.dump());
  if (put.ok()) return Attempt::kHeld;
  if (put.status == 409) return Attempt::kHeldByOther;
  spdlog::warn("leader election: update lease: {}", put.Describe());
  return Attempt::kError;
}

bool LeaderElector::Acquire(common::StopSignal& stop) {
  spdlog::info("leader election: waiting for lease {}/{} as {}",
               options_.namespace_name, options_.name, options_.identity);
  while (!stop.stopped()) {
    if (TryAcquireOrRenew() == Attempt::kHeld) {
      spdlog::info("leader election: acquired lease {}/{}",
                   options_.namespace_name, options_.name);
      return true;
    }
    stop.WaitFor(options_.retry_period);
  }
  return false;
}

bool LeaderElector::KeepRenewing(common::StopSignal& stop) {
  auto last_renew = std::chrono::steady_clock::now();
  while (!stop.WaitFor(options_.retry_period)) {
    const Attempt attempt = TryAcquireOrRenew();
    if (attempt == Attempt::kHeld) {
      last_renew = std::chrono::steady_clock::now();
      continue;
    }
    if (attempt == Attempt::kHeldByOther ||
        std::chrono::steady_clock::now() - last_renew >
            options_.renew_deadline) {
      spdlog::error("leader election: lost lease {}/{}",
                    options_.namespace_name, options_.name);
      return false;
    }
  }
  return true;
}

void LeaderElector::Release() {
  HttpResponse got = client_.Request("GET", LeasePath(options_, false));
  if (!got.ok()) return;
  json lease = json::parse(got.body, nullptr, false);
  if (lease.is_discarded() ||
      lease["spec"].value("holderIdentity", "") != options_.identity) {
    return;
  }
  lease["spec"]["holderIdentity"] = "";
  lease["spec"]["leaseDurationSeconds"] = 1;
  lease["spec"]["renewTime"] =
      FormatMicroTime(std::chrono::system_clock::now());
  HttpResponse put =
      client_.Request("PUT", LeasePath(options_, false), lease.dump());
  if (put.ok()) spdlog::info("leader election: released lease");
}

bool LeaderElector::RunWhileLeading(common::StopSignal& stop,
                                    const std::function<void()>& lead) {
  if (!Acquire(stop)) return true;  // stopped while waiting: nothing held
  bool lost = false;
  std::thread renewer([&] {
    if (!KeepRenewing(stop)) {
      lost = true;
      stop.Stop();
    }
  });
  lead();
  stop.Stop();  // `lead` returned on its own: end the renewals too
  renewer.join();
  if (!lost) Release();
  return !lost;
}

}  // namespace fcc::kube
