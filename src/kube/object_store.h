// Thread-safe store of the objects an Informer has seen, keyed by
// ObjectKey, with one secondary index (client-go's Indexer, one index).
#pragma once

#include <functional>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace fcc::kube {

// The uid of `object`'s controller owner, if it has one.
std::vector<std::string> ControllerOwnerUids(const nlohmann::json& object);

class ObjectStore {
 public:
  // The values an object is found under with ByIndex.
  using IndexFunc =
      std::function<std::vector<std::string>(const nlohmann::json&)>;

  explicit ObjectStore(IndexFunc index = ControllerOwnerUids)
      : index_(std::move(index)) {}

  std::optional<nlohmann::json> Get(const std::string& key) const;
  std::vector<nlohmann::json> ByIndex(const std::string& value) const;
  std::vector<std::string> Keys() const;
  void Upsert(const nlohmann::json& object);
  void Remove(const std::string& key);
  // Replaces the contents; returns the keys that disappeared.
  std::vector<std::string> Replace(std::vector<nlohmann::json> objects);

 private:
  void IndexLocked(const std::string& key, const nlohmann::json& object);
  void UnindexLocked(const std::string& key);

  const IndexFunc index_;
  mutable std::mutex mu_;
  std::map<std::string, nlohmann::json> objects_;
  std::map<std::string, std::set<std::string>> by_index_;
};

}  // namespace fcc::kube
