// Read-only typed access to the metadata of a Kubernetes object held as
// nlohmann::json. Every accessor reads through `const json&` and returns
// references into the object (or to a shared empty value), so nothing is
// copied; the object must outlive what they return.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

namespace fcc::kube {

// metadata.ownerReferences[] entry with controller: true.
struct OwnerRef {
  const std::string& kind;
  const std::string& name;
  const std::string& uid;
};

class ObjectMeta {
 public:
  explicit ObjectMeta(const nlohmann::json& object);

  const std::string& name() const { return String("name"); }
  const std::string& namespace_name() const { return String("namespace"); }
  const std::string& uid() const { return String("uid"); }
  const std::string& resource_version() const {
    return String("resourceVersion");
  }
  bool deleting() const { return meta_.contains("deletionTimestamp"); }
  // metadata.labels[key], "" when absent.
  const std::string& label(std::string_view key) const;
  bool has_label(std::string_view key) const;
  // The ownerReferences array ([] when absent).
  const nlohmann::json& owner_references() const;
  // The controller ownerReference (there is at most one), if any.
  std::optional<OwnerRef> controller_ref() const;
  // "<namespace>/<name>" (or "<name>" for cluster-scoped objects).
  std::string key() const;

 private:
  const std::string& String(std::string_view field) const;

  const nlohmann::json& meta_;
};

// "<namespace>/<name>" (or "<name>" for cluster-scoped objects).
std::string ObjectKey(const nlohmann::json& object);

// The name of the controller ownerReference of `kind`, or "".
std::string ControllerOwnerName(const nlohmann::json& object,
                                std::string_view kind);

// True if `object`'s controller ownerReference has `uid`.
bool ControlledBy(const nlohmann::json& object, std::string_view uid);

// `object[field]` if it is a string, else a shared "": reads through
// `const json&` without the copy json::value() makes of an object.
const std::string& StringAt(const nlohmann::json& object,
                            std::string_view field);
// `object[field]` if present, else a shared null (never inserted).
const nlohmann::json& FieldAt(const nlohmann::json& object,
                              std::string_view field);

// The condition of `type` in `object`'s status.conditions, or nullptr; and
// whether it is "True".
const nlohmann::json* FindCondition(const nlohmann::json& object,
                                    std::string_view type);
bool ConditionTrue(const nlohmann::json& object, std::string_view type);

}  // namespace fcc::kube
