#include "kube/object_store.h"

#include "kube/object_meta.h"

namespace fcc::kube {

using nlohmann::json;

std::vector<std::string> ControllerOwnerUids(const json& object) {
  const auto ref = ObjectMeta(object).controller_ref();
  if (!ref || ref->uid.empty()) return {};
  return {ref->uid};
}

std::optional<json> ObjectStore::Get(const std::string& key) const {
  std::lock_guard lock(mu_);
  auto it = objects_.find(key);
  if (it == objects_.end()) return std::nullopt;
  return it->second;
}

std::vector<json> ObjectStore::ByIndex(const std::string& value) const {
  std::lock_guard lock(mu_);
  std::vector<json> out;
  auto it = by_index_.find(value);
  if (it == by_index_.end()) return out;
  for (const auto& key : it->second) out.push_back(objects_.at(key));
  return out;
}

std::vector<std::string> ObjectStore::Keys() const {
  std::lock_guard lock(mu_);
  std::vector<std::string> keys;
  keys.reserve(objects_.size());
  for (const auto& [key, _] : objects_) keys.push_back(key);
  return keys;
}

void ObjectStore::IndexLocked(const std::string& key, const json& object) {
  for (const auto& value : index_(object)) by_index_[value].insert(key);
}

void ObjectStore::UnindexLocked(const std::string& key) {
  auto it = objects_.find(key);
  if (it == objects_.end()) return;
  for (const auto& value : index_(it->second)) {
    if (auto idx = by_index_.find(value); idx != by_index_.end()) {
      idx->second.erase(key);
      if (idx->second.empty()) by_index_.erase(idx);
    }
  }
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
  by_index_.clear();
  for (const auto& [key, object] : objects_) IndexLocked(key, object);
  return gone;
}

}  // namespace fcc::kube
