// Leader election on a coordination.k8s.io/v1 Lease, client-go style: the
// holder renews every retry period; a candidate takes over only after it
// has watched the lease stay unchanged for a whole lease duration (measured
// on its own clock, so clock skew between nodes does not matter); updates
// use the Lease's resourceVersion, so two candidates can never both win.
#pragma once

#include <chrono>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "common/stop_signal.h"
#include "kube/kube_client.h"

namespace fcc::kube {

struct LeaderElectionOptions {
  std::string namespace_name;
  std::string name;      // the Lease's name
  std::string identity;  // unique per replica: pod name + random suffix
  std::chrono::seconds lease_duration{15};
  std::chrono::seconds renew_deadline{10};
  std::chrono::seconds retry_period{2};
};

// A holder identity unique per replica: hostname + random suffix.
std::string ReplicaIdentity();

// Pure: the Lease body that makes `identity` the holder. `current` is the
// Lease as read (nullptr to create one).
nlohmann::json LeaseForHolder(const nlohmann::json* current,
                              const LeaderElectionOptions& options,
                              const std::string& now_micro);

class LeaderElector {
 public:
  LeaderElector(const KubeClient& client, LeaderElectionOptions options)
      : client_(client), options_(std::move(options)) {}

  // Blocks until this replica holds the lease (true) or `stop` (false).
  bool Acquire(common::StopSignal& stop);
  // Renews until `stop` (returns true) or until a renewal could not
  // succeed within the renew deadline (false: leadership is lost and the
  // process must stop acting).
  bool KeepRenewing(common::StopSignal& stop);
  // Gives the lease up so a standby can take over at once.
  void Release();

  // client-go's RunOrDie: once the lease is held, runs `lead` (which must
  // return after `stop`) while renewing; a lost lease stops `stop` at once,
  // since another replica may act now. Releases the lease at the end
  // unless it was lost. False if leadership was lost.
  bool RunWhileLeading(common::StopSignal& stop,
                       const std::function<void()>& lead);

 private:
  enum class Attempt { kHeld, kHeldByOther, kError };
  Attempt TryAcquireOrRenew();

  const KubeClient& client_;
  LeaderElectionOptions options_;
  // What we last saw of another holder and when (our clock).
  std::string observed_record_;
  std::chrono::steady_clock::time_point observed_at_{};
};

}  // namespace fcc::kube
