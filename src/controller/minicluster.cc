#include "controller/minicluster.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <regex>
#include <set>
#include <string_view>

#include "common/names.h"
#include "common/path.h"
#include "common/text.h"
#include "common/volume_contract.h"
#include "controller/broker_grant.h"
#include "controller/quantity.h"
#include "kube/object_meta.h"

namespace fcc::controller {
namespace {

using nlohmann::json;

constexpr int kMaxHostnameLength = 63;  // a DNS label; pods get <job>-<index>
constexpr int32_t kMaxSize = 100000;
// An echoed value, and all errors together, stay far below the 32 KiB the
// API server allows a condition's message.
constexpr size_t kMaxEchoedBytes = 256;
constexpr size_t kMaxErrorTextBytes = 8192;

// A tenant's value as an error message shows it.
std::string Shown(const json& value) {
  return common::Abridged(value.dump(), kMaxEchoedBytes);
}
std::string Quoted(const std::string& s) {
  return "\"" + common::Abridged(s, kMaxEchoedBytes) + "\"";
}

int DecimalDigits(int64_t n) {
  int digits = 1;
  while (n >= 10) {
    n /= 10;
    ++digits;
  }
  return digits;
}

// Reads an optional integer field; records an error if it has another type.
// True when it stored a value.
template <typename Int>
bool ReadInt(const json& spec, const char* key, Int* out,
             std::vector<std::string>* errors) {
  auto it = spec.find(key);
  if (it == spec.end() || it->is_null()) return false;
  if (!it->is_number_integer()) {
    errors->push_back(std::string("spec.") + key +
                      ": must be an integer, got " + Shown(*it));
    return false;
  }
  *out = it->get<Int>();
  return true;
}

using Errors = std::vector<std::string>;

void CheckTypeMeta(const json& object, Errors& errors) {
  if (object.value("kind", "") != kKind ||
      object.value("apiVersion", "") != kApiVersion) {
    errors.push_back(std::string("apiVersion/kind: expected ") + kApiVersion +
                     " " + kKind + ", got " +
                     object.value("apiVersion", "<none>") + " " +
                     object.value("kind", "<none>"));
  }
}

void ReadMetadata(const json& object, MiniCluster& mc) {
  const kube::ObjectMeta meta(object);
  mc.name = meta.name();
  mc.namespace_name = meta.namespace_name();
  mc.uid = meta.uid();
  const json& generation =
      kube::FieldAt(kube::FieldAt(object, "metadata"), "generation");
  if (generation.is_number_integer()) mc.generation = generation.get<int64_t>();
  const json& labels =
      kube::FieldAt(kube::FieldAt(object, "metadata"), "labels");
  if (labels.is_object()) {
    for (const auto& [k, v] : labels.items()) {
      if (v.is_string()) mc.labels[k] = v.get<std::string>();
    }
  }
}

void ReadSizeAndImage(const json& spec, MiniClusterSpec& s, Errors& errors) {
  ReadInt(spec, "size", &s.size, &errors);
  if (s.size < 1 || s.size > kMaxSize) {
    errors.push_back("spec.size: must be between 1 and " +
                     std::to_string(kMaxSize) +
                     " (the number of brokers), got " + std::to_string(s.size));
  }
  s.image = spec.value("image", "");
  if (s.image.empty()) {
    errors.push_back(
        "spec.image: required; set it to the application's container image "
        "(it needs no Flux: the brokers run from the node driver's Flux "
        "view)");
  }
}

void ReadCommand(const json& spec, MiniClusterSpec& s, Errors& errors) {
  auto cmd = spec.find("command");
  if (cmd == spec.end() || cmd->is_null()) return;
  if (!cmd->is_array() || cmd->empty()) {
    errors.push_back(
        "spec.command: must be a non-empty list of strings (argv), or "
        "omitted for a persistent MiniCluster");
    return;
  }
  std::vector<std::string> argv;
  for (const auto& arg : *cmd) {
    if (!arg.is_string()) {
      errors.push_back("spec.command: every element must be a string, got " +
                       Shown(arg));
      break;
    }
    argv.push_back(arg.get<std::string>());
  }
  s.command = std::move(argv);
}

// One quantity of spec.resources: what the API server would refuse in the
// Job, and CPU or GPUs beyond what Flux can use, named here rather than
// left to the Job's create (or, before, to an exception that stopped the
// reconcile).
void CheckQuantity(const std::string& field, const std::string& name,
                   const json& value, Errors& errors) {
  const std::string where = "spec.resources." + field + "." + name;
  const auto quantity = ParseJsonQuantity(value);
  if (!quantity) {
    errors.push_back(where + ": " + Shown(value) + " " + quantity.error());
    return;
  }
  if (quantity->negative && !quantity->zero()) {
    errors.push_back(where + ": must not be negative, got " + Shown(value));
    return;
  }
  const bool cpu = name == "cpu";
  const bool gpu =
      std::ranges::find(kGpuResources, name) != kGpuResources.end();
  if (!cpu && !gpu) return;
  const std::string text = common::Abridged(
      value.is_string() ? value.get<std::string>() : value.dump(),
      kMaxEchoedBytes);
  const int64_t most = cpu ? kMaxBrokerCores : kMaxBrokerGpus;
  if (!ScaledValueAtMost(*quantity, 0, most)) {
    errors.push_back(fmt::format(
        "{}: {} is more than one node has (Flux gives a broker at most {} "
        "{}); ask for what one broker's pod may use",
        where, text, most, cpu ? "cores" : "GPUs"));
    return;
  }
  // As the API server checks an extended resource: its millis, rounded
  // up, a multiple of 1000.
  if (gpu &&
      *ScaledValueAtMost(*quantity, 3, int64_t{most} * 1000) % 1000 != 0) {
    errors.push_back(where + ": must be a whole number of GPUs, got " + text);
  }
}

void ReadResources(const json& spec, MiniClusterSpec& s, Errors& errors) {
  s.resources = spec.value("resources", json::object());
  if (!s.resources.is_object()) {
    errors.push_back(
        "spec.resources: must be a ResourceRequirements mapping "
        "(requests/limits)");
    return;
  }
  for (const char* field : {"limits", "requests"}) {
    const json& quantities = kube::FieldAt(s.resources, field);
    if (quantities.is_null()) continue;
    if (!quantities.is_object()) {
      errors.push_back(std::string("spec.resources.") + field +
                       ": must be a mapping of resource name to quantity, "
                       "e.g. {cpu: 2, memory: 4Gi}");
      continue;
    }
    for (const auto& [name, value] : quantities.items()) {
      CheckQuantity(field, name, value, errors);
    }
  }
}

void ReadPassThrough(const json& spec, MiniClusterSpec& s, Errors& errors) {
  ReadResources(spec, s, errors);
  s.env = spec.value("env", json::array());
  if (!s.env.is_array()) {
    errors.push_back("spec.env: must be a list of {name, value} entries");
  }
}

void ReadFluxUser(const json& spec, MiniClusterSpec& s, Errors& errors) {
  if (auto user = spec.find("fluxUser");
      user != spec.end() && !user->is_null()) {
    if (!user->is_object()) {
      errors.push_back("spec.fluxUser: must be a mapping {uid, gid}");
    } else {
      ReadInt(*user, "uid", &s.flux_user.uid, &errors);
      if (auto gid = user->find("gid"); gid != user->end() && !gid->is_null()) {
        int64_t g = -1;
        ReadInt(*user, "gid", &g, &errors);
        s.flux_user.gid = g;
      }
    }
  }
  if (s.flux_user.uid < 0 || s.flux_user.uid > 2147483647) {
    errors.push_back("spec.fluxUser.uid: must be between 0 and 2147483647");
  }
  if (s.flux_user.gid &&
      (*s.flux_user.gid < 0 || *s.flux_user.gid > 2147483647)) {
    errors.push_back("spec.fluxUser.gid: must be between 0 and 2147483647");
  }
}

void ReadScheduler(const json& flux, FluxScheduler& scheduler, Errors& errors) {
  auto it = flux.find("scheduler");
  if (it == flux.end() || it->is_null()) return;
  if (!it->is_object()) {
    errors.push_back(
        "spec.flux.scheduler: must be a mapping {simple, queuePolicy}");
    return;
  }
  if (auto simple = it->find("simple");
      simple != it->end() && !simple->is_null()) {
    if (!simple->is_boolean()) {
      errors.push_back("spec.flux.scheduler.simple: must be true or false");
    } else {
      scheduler.simple = simple->get<bool>();
    }
  }
  auto policy = it->find("queuePolicy");
  if (policy == it->end() || policy->is_null()) return;
  if (!policy->is_string() ||
      std::ranges::find(kQueuePolicies, policy->get<std::string>()) ==
          kQueuePolicies.end()) {
    errors.push_back(fmt::format(
        "spec.flux.scheduler.queuePolicy: must be one of Fluxion's queue "
        "policies: {}",
        fmt::join(kQueuePolicies, ", ")));
    return;
  }
  if (scheduler.simple) {
    errors.push_back(
        "spec.flux.scheduler.queuePolicy: sched-simple has no queue policies; "
        "remove queuePolicy, or simple: true to schedule with Fluxion");
    return;
  }
  scheduler.queue_policy = policy->get<std::string>();
}

// The size is checked against spec.size in CheckTopologySlice.
void ReadTopologySlice(const json& topology_spec, Topology& topology,
                       Errors& errors) {
  auto it = topology_spec.find("slice");
  if (it == topology_spec.end() || it->is_null()) return;
  const json& level = kube::FieldAt(*it, "required");
  const json& size = kube::FieldAt(*it, "size");
  if (!it->is_object() || !level.is_string() ||
      !common::IsQualifiedName(level.get<std::string>())) {
    errors.push_back(fmt::format(
        "spec.topology.slice.required: must be a node label key at or below "
        "spec.topology's level (e.g. kubernetes.io/hostname), got {}",
        Shown(level)));
    return;
  }
  if (!size.is_number_integer() || size.get<int64_t>() < 1) {
    errors.push_back(fmt::format(
        "spec.topology.slice.size: must be a whole number of brokers, at "
        "least 1, that divides spec.size, got {}",
        Shown(size)));
    return;
  }
  topology.slice_required = level.get<std::string>();
  topology.slice_size =
      static_cast<int32_t>(std::min<int64_t>(size.get<int64_t>(), INT32_MAX));
}

void ReadTopology(const json& spec, Topology& topology, Errors& errors) {
  auto it = spec.find("topology");
  if (it == spec.end() || it->is_null()) return;
  constexpr char kShape[] =
      "spec.topology: must be a mapping with one of required or preferred, "
      "naming a node label level of the Kueue Topology of the queue's "
      "flavor (e.g. {required: example.com/rack})";
  if (!it->is_object()) {
    errors.push_back(kShape);
    return;
  }
  for (auto [key, field] : {std::pair{"required", &topology.required},
                            std::pair{"preferred", &topology.preferred}}) {
    auto level = it->find(key);
    if (level == it->end() || level->is_null()) continue;
    if (!level->is_string() ||
        !common::IsQualifiedName(level->get<std::string>())) {
      errors.push_back(fmt::format(
          "spec.topology.{}: must be a node label key such as "
          "example.com/rack (a level of the Kueue Topology), got {}",
          key, Shown(*level)));
      continue;
    }
    *field = level->get<std::string>();
  }
  if (!topology.required.empty() && !topology.preferred.empty()) {
    errors.push_back(
        "spec.topology: set required or preferred, not both (Kueue takes one "
        "topology request a pod set)");
  } else if (topology.level().empty() && errors.empty()) {
    errors.push_back(kShape);
  }
  ReadTopologySlice(*it, topology, errors);
}

// Slices of equal size, and a count Kueue cannot shrink (no minSize); a
// slice with no request is refused by ReadTopology alone.
void CheckTopologySlice(const MiniClusterSpec& s, Errors& errors) {
  if (s.topology.slice_size == 0 || s.topology.level().empty()) return;
  if (s.size % s.topology.slice_size != 0) {
    errors.push_back(fmt::format(
        "spec.topology.slice.size: {} does not divide spec.size {} (Kueue "
        "places slices of equal size)",
        s.topology.slice_size, s.size));
  }
  if (s.min_size.has_value()) {
    errors.push_back(
        "spec.topology.slice: not with spec.minSize (Kueue may admit a count "
        "the slice size does not divide); remove one");
  }
}

// Kueue refuses a pod set with two topology requests: spec.topology's and
// one a user wrote as a pod annotation (as before spec.topology existed).
void CheckTopologyAnnotations(const MiniClusterSpec& s, Errors& errors) {
  if (s.topology.level().empty()) return;
  for (const auto& [key, value] : s.pod.annotations) {
    if (key.starts_with("kueue.x-k8s.io/podset-") &&
        (key.ends_with("-topology") || key.ends_with("-slice-size"))) {
      errors.push_back("spec.podAnnotations[" + Quoted(key) +
                       "]: spec.topology writes Kueue's topology request; "
                       "remove this annotation or spec.topology");
    }
  }
}

void ReadState(const json& flux, MiniClusterSpec& s, Errors& errors) {
  auto it = flux.find("state");
  if (it == flux.end() || it->is_null()) return;
  const json& claim = kube::FieldAt(*it, "claimName");
  if (!claim.is_string() || claim.get<std::string>().size() > 253 ||
      !common::IsDns1123Subdomain(claim.get<std::string>())) {
    errors.push_back(
        "spec.flux.state.claimName: must name a PersistentVolumeClaim in the "
        "MiniCluster's namespace (a DNS-1123 subdomain), got " +
        (it->is_object() ? Shown(claim) : Shown(*it)));
    return;
  }
  if (s.command) {
    errors.push_back(
        "spec.flux.state: only a persistent MiniCluster (no spec.command) "
        "keeps its queue when its lead pod is replaced; an ephemeral one's "
        "command cannot be resumed: remove state or command");
    return;
  }
  s.flux.state_claim = claim.get<std::string>();
}

void ReadFluxSource(const json& spec, MiniClusterSpec& s, Errors& errors) {
  auto flux = spec.find("flux");
  if (flux == spec.end() || flux->is_null()) return;
  if (!flux->is_object()) {
    errors.push_back(
        "spec.flux: must be a mapping {view, fromImage, scheduler, state}");
    return;
  }
  if (auto view = flux->find("view"); view != flux->end() && !view->is_null()) {
    if (!view->is_string() || view->get<std::string>().size() > 63 ||
        !common::IsDns1123Subdomain(view->get<std::string>())) {
      errors.push_back(
          "spec.flux.view: must name a Flux view the node driver serves, "
          "e.g. flux-core-0.88.0 (lowercase a-z 0-9 '-' '.', at most 63 "
          "characters)");
    } else {
      s.flux.view = view->get<std::string>();
    }
  }
  if (auto from = flux->find("fromImage");
      from != flux->end() && !from->is_null()) {
    if (!from->is_boolean()) {
      errors.push_back("spec.flux.fromImage: must be true or false");
    } else {
      s.flux.from_image = from->get<bool>();
    }
  }
  ReadScheduler(*flux, s.flux.scheduler, errors);
  ReadState(*flux, s, errors);
  if (s.flux.from_image && !s.flux.view.empty()) {
    errors.push_back(
        "spec.flux: set view or fromImage: true, not both (fromImage runs the "
        "image's own Flux and mounts no view)");
  }
}

void ReadMinSizeAndTopo(const json& spec, MiniClusterSpec& s, Errors& errors) {
  int32_t min_size = 0;
  if (auto it = spec.find("minSize"); it != spec.end() && !it->is_null()) {
    ReadInt(spec, "minSize", &min_size, &errors);
    if (min_size < 1 || min_size > s.size) {
      errors.push_back("spec.minSize: must be between 1 and spec.size (" +
                       std::to_string(s.size) + "), got " + Shown(*it) +
                       "; omit it to start only with every broker");
    } else {
      s.min_size = min_size;
    }
  }
  s.tbon_topo = spec.value("tbonTopo", "");
  // It lands in the broker config; Flux's own topologies but custom, which
  // needs per-host parents the controller does not write.
  static const std::regex kTopo(
      R"(^(kary:[0-9]{1,6}|binomial|mincrit(:[0-9]{1,6})?)$)");
  if (!s.tbon_topo.empty() && !std::regex_match(s.tbon_topo, kTopo)) {
    errors.push_back(
        "spec.tbonTopo: must be a Flux tree topology: kary:K (kary:0 is "
        "flat), binomial or mincrit[:K], got \"" +
        s.tbon_topo + "\"; omit it to have one chosen by size");
  }
}

void ReadTtl(const json& spec, MiniClusterSpec& s, Errors& errors) {
  int32_t ttl = 0;
  if (!ReadInt(spec, "ttlSecondsAfterFinished", &ttl, &errors)) return;
  if (ttl < 0) {
    errors.push_back(
        "spec.ttlSecondsAfterFinished: must be 0 or more seconds, got " +
        std::to_string(ttl) +
        "; omit it to keep the MiniCluster until deleted");
    return;
  }
  s.ttl_seconds_after_finished = ttl;
}

void ReadBrokerSettings(const json& spec, MiniClusterSpec& s, Errors& errors) {
  ReadInt(spec, "brokerPort", &s.broker_port, &errors);
  if (s.broker_port < 1 || s.broker_port > 65535) {
    errors.push_back("spec.brokerPort: must be between 1 and 65535, got " +
                     std::to_string(s.broker_port));
  }
  ReadInt(spec, "brokerRestarts", &s.broker_restarts, &errors);
  if (s.broker_restarts < 0 || s.broker_restarts > kMaxBrokerRestarts) {
    errors.push_back("spec.brokerRestarts: must be between 0 and " +
                     std::to_string(kMaxBrokerRestarts) + ", got " +
                     std::to_string(s.broker_restarts));
  }
  ReadMinSizeAndTopo(spec, s, errors);
  ReadTtl(spec, s, errors);
  if (auto suspend = spec.find("suspend");
      suspend != spec.end() && !suspend->is_null()) {
    if (!suspend->is_boolean()) {
      errors.push_back("spec.suspend: must be true or false");
    } else {
      s.suspend = suspend->get<bool>();
    }
  }
  s.connect_timeout = spec.value("connectTimeout", kDefaultConnectTimeout);
  // It lands in the broker's command line, so only an RFC 23 duration.
  static const std::regex kFsd(R"(^[0-9]+(\.[0-9]+)?(ms|s|m|h|d)?$)");
  if (!std::regex_match(s.connect_timeout, kFsd)) {
    errors.push_back(
        "spec.connectTimeout: must be a Flux duration such as \"5s\" or "
        "\"1m\", got " +
        Quoted(s.connect_timeout));
  }
}

// --- The pod template's own fields (PodFields, spec.volumeMounts).

// labels, annotations, nodeSelector: a mapping of strings with valid keys.
void ReadStringMap(const json& spec, const std::string& field,
                   std::map<std::string, std::string>& out, Errors& errors) {
  auto it = spec.find(field);
  if (it == spec.end() || it->is_null()) return;
  if (!it->is_object()) {
    errors.push_back("spec." + field + ": must be a mapping of strings");
    return;
  }
  for (const auto& [key, value] : it->items()) {
    const std::string where = "spec." + field + "[" + Quoted(key) + "]";
    if (!common::IsQualifiedName(key)) {
      errors.push_back(where +
                       ": not a valid key; use [prefix/]name, the name at "
                       "most 63 letters, digits, '-', '_' or '.'");
    } else if (!value.is_string()) {
      errors.push_back(where + ": must be a string, got " + Shown(value) +
                       " (quote it)");
    } else {
      out[key] = value.get<std::string>();
    }
  }
}

// Labels the Job controller sets on every pod, and its legacy ones.
bool IsJobControllerKey(std::string_view key) {
  return key.starts_with("batch.kubernetes.io/") || key == "job-name" ||
         key == "controller-uid";
}

// Why a pod label key is not the MiniCluster's to set; empty if it is.
std::string OwnedPodLabel(const std::string& key) {
  if (key.starts_with(kOwnPrefix) || key == kAppNameLabel ||
      key == kAppInstanceLabel || key == kManagedByLabel) {
    return "set by the controller on every broker pod (the Service selects "
           "them by it); choose another key";
  }
  if (IsJobControllerKey(key)) {
    return "set by the Job controller on every pod; choose another key";
  }
  if (std::ranges::find(kKueueLabels, key) != kKueueLabels.end()) {
    return "Kueue reads it from the Job, where the controller copies it from "
           "the MiniCluster: set it in metadata.labels instead";
  }
  return "";
}

void ReadPodMetadata(const json& spec, PodFields& pod, Errors& errors) {
  ReadStringMap(spec, "podLabels", pod.labels, errors);
  for (const auto& [key, value] : pod.labels) {
    const std::string where = "spec.podLabels[" + Quoted(key) + "]: ";
    if (std::string why = OwnedPodLabel(key); !why.empty()) {
      errors.push_back(where + why);
    } else if (!common::IsLabelValue(value)) {
      errors.push_back(where +
                       "the value must be empty or at most 63 letters, "
                       "digits, '-', '_' or '.', beginning and ending with a "
                       "letter or digit, got " +
                       Quoted(value));
    }
  }
  ReadStringMap(spec, "podAnnotations", pod.annotations, errors);
  for (const auto& [key, value] : pod.annotations) {
    if (key.starts_with(kOwnPrefix) || IsJobControllerKey(key)) {
      errors.push_back("spec.podAnnotations[" + Quoted(key) +
                       "]: the minicluster.dev/ and batch.kubernetes.io/ "
                       "prefixes belong to the controller and the Job "
                       "controller; choose another key");
    }
  }
}

void ReadNodeSelector(const json& spec, PodFields& pod, Errors& errors) {
  ReadStringMap(spec, "nodeSelector", pod.node_selector, errors);
  for (const auto& [key, value] : pod.node_selector) {
    if (!common::IsLabelValue(value)) {
      errors.push_back("spec.nodeSelector[" + Quoted(key) +
                       "]: must be a node label value (at most 63 letters, "
                       "digits, '-', '_' or '.'), got " +
                       Quoted(value));
    }
  }
}

// The checks the API server makes of a Toleration, so a bad one is reported
// on the MiniCluster instead of failing the Job's creation.
void CheckToleration(const json& t, const std::string& where, Errors& errors) {
  static const std::set<std::string> kOperators{"", "Exists", "Equal"};
  static const std::set<std::string> kEffects{"", "NoSchedule",
                                              "PreferNoSchedule", "NoExecute"};
  const std::string& op = kube::StringAt(t, "operator");
  const std::string& effect = kube::StringAt(t, "effect");
  if (!kOperators.contains(op)) {
    errors.push_back(where + ".operator: must be Exists or Equal, got " +
                     Quoted(op));
  }
  if (!kEffects.contains(effect)) {
    errors.push_back(where +
                     ".effect: must be NoSchedule, PreferNoSchedule or "
                     "NoExecute, got " +
                     Quoted(effect));
  }
  if (op == "Exists" && !kube::StringAt(t, "value").empty()) {
    errors.push_back(where + ".value: must be empty when operator is Exists");
  }
  if (kube::StringAt(t, "key").empty() && op != "Exists") {
    errors.push_back(where +
                     ".operator: must be Exists when key is empty (a "
                     "toleration of every taint)");
  }
}

void ReadScheduling(const json& spec, PodFields& pod, Errors& errors) {
  ReadNodeSelector(spec, pod, errors);
  pod.tolerations = spec.value("tolerations", json::array());
  if (!pod.tolerations.is_array()) {
    errors.push_back(
        "spec.tolerations: must be a list of core/v1 Tolerations ({key, "
        "operator, value, effect})");
  } else {
    for (size_t i = 0; i < pod.tolerations.size(); ++i) {
      const std::string where = "spec.tolerations[" + std::to_string(i) + "]";
      const json& t = pod.tolerations[i];
      if (!t.is_object()) {
        errors.push_back(where + ": must be a mapping {key, operator, ...}");
      } else {
        CheckToleration(t, where, errors);
      }
    }
  }
  pod.affinity = spec.value("affinity", json::object());
  if (!pod.affinity.is_object()) {
    errors.push_back(
        "spec.affinity: must be a core/v1 Affinity mapping (nodeAffinity, "
        "podAffinity, podAntiAffinity)");
  }
}

void ReadServiceAccount(const json& spec, PodFields& pod, Errors& errors) {
  auto it = spec.find("serviceAccountName");
  if (it == spec.end() || it->is_null()) return;
  if (!it->is_string() || !common::IsDns1123Subdomain(it->get<std::string>())) {
    errors.push_back(
        "spec.serviceAccountName: must be the name of a ServiceAccount in "
        "the MiniCluster's namespace (a DNS-1123 subdomain), got " +
        Shown(*it));
    return;
  }
  pod.service_account_name = it->get<std::string>();
}

bool IsOwnedVolume(const std::string& name) {
  return name == kCurveVolume || name == kConfigVolume || name == kRunVolume ||
         name == kViewVolume || name == kStateVolume ||
         name == kAdmittedVolume || name == kTopologyVolume;
}

void CheckVolume(const json& volume, const std::string& where,
                 std::set<std::string>& names, Errors& errors) {
  const std::string name = kube::StringAt(volume, "name");
  if (!common::IsDns1123Label(name)) {
    errors.push_back(where +
                     ".name: must be a DNS-1123 label (lowercase letters, "
                     "digits and '-'), got " +
                     Quoted(name));
  } else if (IsOwnedVolume(name)) {
    errors.push_back(where + ".name: " + Quoted(name) +
                     " is the controller's volume (curve, flux-config and "
                     "flux-run hold the cert, the broker config and the "
                     "broker's socket); choose another name");
  } else if (!names.insert(name).second) {
    errors.push_back(where + ".name: " + Quoted(name) +
                     " is used twice; volume names must be unique");
  }
  if (volume.contains("hostPath")) {
    errors.push_back(where +
                     ".hostPath: a MiniCluster may not mount the node's "
                     "filesystem (it would expose every pod's volumes on the "
                     "node, other MiniClusters' certs among them); use a "
                     "persistentVolumeClaim, nfs or another network volume");
  }
  if (kube::StringAt(kube::FieldAt(volume, "csi"), "driver") ==
      common::kDriverName) {
    errors.push_back(where +
                     ".csi.driver: the controller makes the one "
                     "curve.minicluster.dev volume itself (the cert is at " +
                     std::string(common::kCertMountPath) + "/" +
                     std::string(common::kCertFileName) +
                     " in every broker); remove this volume");
  }
}

void ReadVolumes(const json& spec, PodFields& pod, Errors& errors) {
  pod.volumes = spec.value("volumes", json::array());
  if (!pod.volumes.is_array()) {
    errors.push_back(
        "spec.volumes: must be a list of core/v1 Volumes ({name, <source>})");
    pod.volumes = json::array();
    return;
  }
  std::set<std::string> names;
  for (size_t i = 0; i < pod.volumes.size(); ++i) {
    const std::string where = "spec.volumes[" + std::to_string(i) + "]";
    if (!pod.volumes[i].is_object()) {
      errors.push_back(where + ": must be a mapping {name, <source>}");
    } else {
      CheckVolume(pod.volumes[i], where, names, errors);
    }
  }
}

// Why a mount path is not the MiniCluster's to use; empty if it is.
std::string OwnedMountPath(const std::string& path) {
  static const std::array<std::pair<std::string_view, const char*>, 5> kOwned{{
      {common::kCertMountPath, "the curve cert"},
      {kConfigMountPath, "the broker config"},
      {kRunMountPath, "the broker's socket"},
      {common::kViewMountPath, "the Flux view"},
      {kViewFluxPath, "the Flux view's flux command"},
  }};
  for (const auto& [root, what] : kOwned) {
    if (path == root || path.starts_with(std::string(root) + "/")) {
      return "is at or under " + std::string(root) +
             ", where the controller mounts " + what + "; mount elsewhere";
    }
  }
  return "";
}

void CheckVolumeMount(const json& mount, const std::string& where,
                      const std::set<std::string>& volumes,
                      std::set<std::string>& paths, Errors& errors) {
  const std::string name = kube::StringAt(mount, "name");
  if (IsOwnedVolume(name)) {
    errors.push_back(where + ".name: " + Quoted(name) +
                     " is the controller's volume, already mounted; mount "
                     "one of spec.volumes");
  } else if (!volumes.contains(name)) {
    errors.push_back(where + ".name: no volume " + Quoted(name) +
                     " in spec.volumes; add it there");
  }
  const std::string& path = kube::StringAt(mount, "mountPath");
  const auto normal = common::NormalAbsolutePath(path);
  if (!normal) {
    errors.push_back(where +
                     ".mountPath: must be an absolute path without . or .. "
                     "parts, got " +
                     Quoted(path));
  } else if (std::string why = OwnedMountPath(*normal); !why.empty()) {
    errors.push_back(where + ".mountPath: " + Quoted(path) + " " + why);
  } else if (!paths.insert(*normal).second) {
    errors.push_back(where + ".mountPath: " + Quoted(path) +
                     " is used twice; mount paths must be unique");
  }
}

// Fluxion on rank 0 keeps a vertex for every core and GPU of every rank,
// each about 9 KiB (docs/internals/performance.md); sched-simple keeps a
// bitmap.
constexpr int64_t kMaxFluxionVertices = int64_t{1} << 18;

void CheckGraphSize(const MiniClusterSpec& s, Errors& errors) {
  if (s.flux.scheduler.simple || s.size < 1) return;
  const BrokerResources grant = BrokerResourcesOf(s.resources);
  const int64_t per_broker = int64_t{grant.cores} + grant.gpus;
  if (per_broker * s.size <= kMaxFluxionVertices) return;
  errors.push_back(fmt::format(
      "spec.size × cores and GPUs a broker: {} × {} = {} is more than "
      "Fluxion on rank 0 models (at most {}, about 2 GiB of the lead "
      "broker's memory); ask for fewer cores a broker or fewer brokers, or "
      "set spec.flux.scheduler.simple: true",
      s.size, per_broker, per_broker * s.size, kMaxFluxionVertices));
}

// spec.flux.state's claim is mounted at kStateMountPath; without state the
// path is the user's.
void CheckStateMount(const MiniClusterSpec& s, Errors& errors) {
  if (s.flux.state_claim.empty()) return;
  const std::string root = kStateMountPath;
  for (const json& mount : s.volume_mounts) {
    const auto path =
        common::NormalAbsolutePath(kube::StringAt(mount, "mountPath"));
    if (path && (*path == root || path->starts_with(root + "/"))) {
      errors.push_back("spec.volumeMounts: " + Quoted(*path) +
                       " is at or under " + root +
                       ", where spec.flux.state's claim is mounted; mount "
                       "elsewhere");
    }
  }
}

void ReadVolumeMounts(const json& spec, MiniClusterSpec& s, Errors& errors) {
  s.volume_mounts = spec.value("volumeMounts", json::array());
  if (!s.volume_mounts.is_array()) {
    errors.push_back(
        "spec.volumeMounts: must be a list of core/v1 VolumeMounts ({name, "
        "mountPath})");
    s.volume_mounts = json::array();
    return;
  }
  std::set<std::string> volumes, paths;
  for (const auto& volume : s.pod.volumes) {
    volumes.insert(kube::StringAt(volume, "name"));
  }
  for (size_t i = 0; i < s.volume_mounts.size(); ++i) {
    const std::string where = "spec.volumeMounts[" + std::to_string(i) + "]";
    if (!s.volume_mounts[i].is_object()) {
      errors.push_back(where + ": must be a mapping {name, mountPath}");
    } else {
      CheckVolumeMount(s.volume_mounts[i], where, volumes, paths, errors);
    }
  }
}

void ReadPodFields(const json& spec, MiniClusterSpec& s, Errors& errors) {
  ReadPodMetadata(spec, s.pod, errors);
  ReadScheduling(spec, s.pod, errors);
  ReadServiceAccount(spec, s.pod, errors);
  ReadVolumes(spec, s.pod, errors);
  ReadVolumeMounts(spec, s, errors);
}

void CheckName(const MiniCluster& mc, Errors& errors) {
  const int32_t size = mc.spec.size;
  if (!common::IsDns1035Label(mc.name)) {
    errors.push_back(
        "metadata.name: must be a DNS-1035 label (lowercase letters, digits "
        "and '-', starting with a letter), because it names the Service, got "
        "\"" +
        mc.name + "\"");
  } else if (size >= 1 &&
             static_cast<int>(mc.name.size()) + 1 + DecimalDigits(size - 1) >
                 kMaxHostnameLength) {
    errors.push_back(
        "metadata.name: too long for spec.size; pod hostnames <name>-<index> "
        "must fit in 63 characters, so shorten the name to at most " +
        std::to_string(kMaxHostnameLength - 1 - DecimalDigits(size - 1)) +
        " characters");
  }
}

}  // namespace

std::string FluxUser::OwnerAttribute() const {
  std::string owner = std::to_string(uid);
  if (gid) owner += ":" + std::to_string(*gid);
  return owner;
}

std::string MiniCluster::QueueName() const {
  auto it = labels.find(kQueueNameLabel);
  return it == labels.end() ? std::string() : it->second;
}

int32_t MiniCluster::MinSize() const {
  return QueueName().empty() ? spec.size : spec.min_size.value_or(spec.size);
}

std::string ParseResult::ErrorText() const {
  std::string text;
  for (size_t i = 0; i < errors.size(); ++i) {
    const std::string next = (i > 0 ? "; " : "") + errors[i];
    if (i == 0) {
      text = common::Abridged(next, kMaxErrorTextBytes);
    } else if (text.size() + next.size() > kMaxErrorTextBytes) {
      return text + fmt::format("; and {} more errors", errors.size() - i);
    } else {
      text += next;
    }
  }
  return text;
}

ParseResult ParseMiniCluster(const json& object) {
  ParseResult result;
  auto& errors = result.errors;
  if (!object.is_object()) {
    errors.push_back("object: a MiniCluster must be a JSON/YAML mapping");
    return result;
  }
  CheckTypeMeta(object, errors);
  MiniCluster mc;
  ReadMetadata(object, mc);
  mc.status = object.value("status", json::object());
  static const json kNoSpec = json::object();
  auto spec_field = object.find("spec");
  const json& fields = spec_field == object.end() ? kNoSpec : *spec_field;
  if (!fields.is_object()) {
    errors.push_back("spec: must be a mapping with at least size and image");
    return result;
  }
  ReadSizeAndImage(fields, mc.spec, errors);
  ReadCommand(fields, mc.spec, errors);
  ReadPassThrough(fields, mc.spec, errors);
  ReadFluxUser(fields, mc.spec, errors);
  ReadFluxSource(fields, mc.spec, errors);
  ReadBrokerSettings(fields, mc.spec, errors);
  ReadPodFields(fields, mc.spec, errors);
  ReadTopology(fields, mc.spec.topology, errors);
  CheckTopologySlice(mc.spec, errors);
  CheckTopologyAnnotations(mc.spec, errors);
  CheckStateMount(mc.spec, errors);
  CheckGraphSize(mc.spec, errors);
  CheckName(mc, errors);
  result.minicluster = std::move(mc);
  return result;
}

namespace {

// What TrimMiniClusterForCache keeps of metadata and spec.
constexpr std::array<std::string_view, 8> kCachedMetadata = {
    "name",
    "namespace",
    "uid",
    "generation",
    "resourceVersion",
    "creationTimestamp",
    "deletionTimestamp",
    "labels"};
constexpr std::array<std::string_view, 7> kCachedSpec = {
    "size",
    "image",
    "fluxUser",
    "brokerPort",
    "suspend",
    "connectTimeout",
    "ttlSecondsAfterFinished"};

// Keeps only `keys` of the object at `field` (if it is one).
template <typename Keys>
void KeepOnly(json& object, const char* field, const Keys& keys) {
  auto it = object.find(field);
  if (it == object.end() || !it->is_object()) return;
  json kept = json::object();
  for (const auto& key : keys) {
    auto found = it->find(std::string(key));
    if (found != it->end()) kept[std::string(key)] = std::move(*found);
  }
  *it = std::move(kept);
}

}  // namespace

void TrimMiniClusterForCache(json& object) {
  if (!object.is_object()) return;
  KeepOnly(object, "metadata", kCachedMetadata);
  auto metadata = object.find("metadata");
  if (metadata != object.end() && metadata->is_object())
    KeepOnly(*metadata, "labels", kKueueLabels);
  KeepOnly(object, "spec", kCachedSpec);
}

const KnownFields& MiniClusterFields() {
  static const KnownFields kFields{
      .top = {"apiVersion", "kind", "metadata", "spec", "status"},
      .spec = {"size",
               "image",
               "command",
               "resources",
               "env",
               "fluxUser",
               "flux",
               "brokerPort",
               "brokerRestarts",
               "minSize",
               "tbonTopo",
               "ttlSecondsAfterFinished",
               "suspend",
               "connectTimeout",
               "podLabels",
               "podAnnotations",
               "nodeSelector",
               "tolerations",
               "affinity",
               "serviceAccountName",
               "volumes",
               "volumeMounts",
               "topology"},
      .flux_user = {"uid", "gid"},
      .flux = {"view", "fromImage", "scheduler", "state"},
      .flux_scheduler = {"simple", "queuePolicy"},
      .flux_state = {"claimName"},
      .resources = {"limits", "requests"},
      .toleration = {"key", "operator", "value", "effect", "tolerationSeconds"},
      .topology = {"required", "preferred", "slice"},
      .topology_slice = {"required", "size"}};
  return kFields;
}

namespace {

void AddUnknown(const json& object, const std::string& where,
                const std::vector<std::string_view>& known,
                std::vector<std::string>& errors) {
  if (!object.is_object()) return;  // ParseMiniCluster says what it must be
  for (const auto& [key, value] : object.items()) {
    if (std::ranges::find(known, key) != known.end()) continue;
    const std::string scope =
        where.empty() ? "a MiniCluster" : where.substr(0, where.size() - 1);
    errors.push_back(
        fmt::format("{}{}: unknown field; {} has {} (check for a typo)", where,
                    key, scope, fmt::join(known, ", ")));
  }
}

}  // namespace

std::vector<std::string> UnknownFields(const json& object) {
  const KnownFields& known = MiniClusterFields();
  std::vector<std::string> errors;
  AddUnknown(object, "", known.top, errors);
  const json& spec = kube::FieldAt(object, "spec");
  AddUnknown(spec, "spec.", known.spec, errors);
  AddUnknown(kube::FieldAt(spec, "fluxUser"), "spec.fluxUser.", known.flux_user,
             errors);
  AddUnknown(kube::FieldAt(spec, "flux"), "spec.flux.", known.flux, errors);
  AddUnknown(kube::FieldAt(kube::FieldAt(spec, "flux"), "scheduler"),
             "spec.flux.scheduler.", known.flux_scheduler, errors);
  AddUnknown(kube::FieldAt(kube::FieldAt(spec, "flux"), "state"),
             "spec.flux.state.", known.flux_state, errors);
  AddUnknown(kube::FieldAt(spec, "resources"), "spec.resources.",
             known.resources, errors);
  AddUnknown(kube::FieldAt(spec, "topology"), "spec.topology.", known.topology,
             errors);
  AddUnknown(kube::FieldAt(kube::FieldAt(spec, "topology"), "slice"),
             "spec.topology.slice.", known.topology_slice, errors);
  const json& tolerations = kube::FieldAt(spec, "tolerations");
  if (tolerations.is_array()) {
    for (size_t i = 0; i < tolerations.size(); ++i) {
      AddUnknown(tolerations[i], "spec.tolerations[" + std::to_string(i) + "].",
                 known.toleration, errors);
    }
  }
  return errors;
}

}  // namespace fcc::controller
