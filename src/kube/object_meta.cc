#include "kube/object_meta.h"

namespace fcc::kube {
namespace {

using nlohmann::json;

const std::string& EmptyString() {
  static const std::string empty;
  return empty;
}

}  // namespace

const json& FieldAt(const json& object, std::string_view field) {
  static const json null;
  if (!object.is_object()) return null;
  auto it = object.find(field);
  return it == object.end() ? null : *it;
}

const std::string& StringAt(const json& object, std::string_view field) {
  const json& value = FieldAt(object, field);
  return value.is_string() ? value.get_ref<const std::string&>()
                           : EmptyString();
}

ObjectMeta::ObjectMeta(const json& object)
    : meta_(FieldAt(object, "metadata")) {}

const std::string& ObjectMeta::String(std::string_view field) const {
  return StringAt(meta_, field);
}

const std::string& ObjectMeta::label(std::string_view key) const {
  return StringAt(FieldAt(meta_, "labels"), key);
}

bool ObjectMeta::has_label(std::string_view key) const {
  const json& labels = FieldAt(meta_, "labels");
  return labels.is_object() && labels.contains(key);
}

const json& ObjectMeta::owner_references() const {
  static const json empty = json::array();
  const json& refs = FieldAt(meta_, "ownerReferences");
  return refs.is_array() ? refs : empty;
}

std::optional<OwnerRef> ObjectMeta::controller_ref() const {
  for (const json& ref : owner_references()) {
    const json& controller = FieldAt(ref, "controller");
    if (controller.is_boolean() && controller.get<bool>()) {
      return OwnerRef{StringAt(ref, "kind"), StringAt(ref, "name"),
                      StringAt(ref, "uid")};
    }
  }
  return std::nullopt;
}

std::string ObjectMeta::key() const {
  const std::string& ns = namespace_name();
  return ns.empty() ? name() : ns + "/" + name();
}

std::string ObjectKey(const json& object) { return ObjectMeta(object).key(); }

std::string ControllerOwnerName(const json& object, std::string_view kind) {
  const auto ref = ObjectMeta(object).controller_ref();
  return ref && ref->kind == kind ? ref->name : std::string();
}

bool ControlledBy(const json& object, std::string_view uid) {
  const auto ref = ObjectMeta(object).controller_ref();
  return ref && ref->uid == uid;
}

const json* FindCondition(const json& object, std::string_view type) {
  const json& conditions = FieldAt(FieldAt(object, "status"), "conditions");
  if (!conditions.is_array()) return nullptr;
  for (const json& c : conditions) {
    if (StringAt(c, "type") == type) return &c;
  }
  return nullptr;
}

bool ConditionTrue(const json& object, std::string_view type) {
  const json* c = FindCondition(object, type);
  return c != nullptr && StringAt(*c, "status") == "True";
}

}  // namespace fcc::kube
