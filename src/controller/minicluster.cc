#include "controller/minicluster.h"

#include <regex>
#include <string_view>

#include "common/names.h"
#include "controller/object_meta.h"

namespace fcc::controller {
namespace {

using nlohmann::json;

constexpr int kMaxHostnameLength = 63;  // a DNS label; pods get <job>-<index>
constexpr int32_t kMaxSize = 100000;

bool IsLowerAlnum(char c) {
  return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
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
template <typename Int>
void ReadInt(const json& spec, const char* key, Int* out,
             std::vector<std::string>* errors) {
  auto it = spec.find(key);
  if (it == spec.end() || it->is_null()) return;
  if (!it->is_number_integer()) {
    errors->push_back(std::string("spec.") + key +
                      ": must be an integer, got " + it->dump());
    return;
  }
  *out = it->get<Int>();
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
  const ObjectMeta meta(object);
  mc.name = meta.name();
  mc.namespace_name = meta.namespace_name();
  mc.uid = meta.uid();
  const json& generation = FieldAt(FieldAt(object, "metadata"), "generation");
  if (generation.is_number_integer()) mc.generation = generation.get<int64_t>();
  const json& labels = FieldAt(FieldAt(object, "metadata"), "labels");
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
        "spec.image: required; set it to a container image that has "
        "flux-core installed");
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
                       arg.dump());
      break;
    }
    argv.push_back(arg.get<std::string>());
  }
  s.command = std::move(argv);
}

void ReadPassThrough(const json& spec, MiniClusterSpec& s, Errors& errors) {
  s.resources = spec.value("resources", json::object());
  if (!s.resources.is_object()) {
    errors.push_back(
        "spec.resources: must be a ResourceRequirements mapping "
        "(requests/limits)");
  }
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

void ReadBrokerSettings(const json& spec, MiniClusterSpec& s, Errors& errors) {
  ReadInt(spec, "brokerPort", &s.broker_port, &errors);
  if (s.broker_port < 1 || s.broker_port > 65535) {
    errors.push_back("spec.brokerPort: must be between 1 and 65535, got " +
                     std::to_string(s.broker_port));
  }
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
        "\"1m\", got \"" +
        s.connect_timeout + "\"");
  }
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

std::string ParseResult::ErrorText() const {
  std::string text;
  for (const auto& e : errors) {
    if (!text.empty()) text += "; ";
    text += e;
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
  ReadBrokerSettings(fields, mc.spec, errors);
  CheckName(mc, errors);
  result.minicluster = std::move(mc);
  return result;
}

}  // namespace fcc::controller
