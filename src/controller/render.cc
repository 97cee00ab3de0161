#include "controller/render.h"

#include "kube/object_meta.h"
#include "kube/yaml_json.h"

namespace fcc::controller {

std::expected<std::string, std::string> RenderMiniCluster(
    const std::string& manifest, const DesiredOptions& options) {
  auto documents = kube::YamlToJson(manifest);
  if (!documents) return std::unexpected(documents.error());
  if (documents->size() != 1) {
    return std::unexpected("expected exactly one MiniCluster document, found " +
                           std::to_string(documents->size()));
  }
  nlohmann::json& object = documents->front();
  if (object.is_object()) {
    auto& meta = object["metadata"];
    if (!meta.is_object()) meta = nlohmann::json::object();
    // A manifest's, not the API server's: any JSON may stand here.
    for (const char* field : {"namespace", "uid"}) {
      const nlohmann::json& value = kube::FieldAt(meta, field);
      if (!value.is_null() && !value.is_string()) {
        return std::unexpected(
            std::string("metadata.") + field + ": must be a string, got " +
            value.dump() + "; or leave it out (render then uses " +
            (field == std::string("uid") ? "a placeholder uid)"
                                         : "namespace default)"));
      }
    }
    if (kube::StringAt(meta, "namespace").empty())
      meta["namespace"] = "default";
    if (kube::StringAt(meta, "uid").empty())
      meta["uid"] = kRenderUidPlaceholder;
  }
  ParseResult parsed = ParseMiniCluster(object);
  // What kubectl's strict field validation would refuse in a cluster.
  for (std::string& unknown : UnknownFields(object)) {
    parsed.errors.push_back(std::move(unknown));
  }
  if (!parsed.minicluster || !parsed.errors.empty()) {
    return std::unexpected(parsed.ErrorText());
  }
  const MiniCluster& mc = *parsed.minicluster;
  return "---\n" + kube::JsonToYaml(DesiredService(mc, options)) + "---\n" +
         kube::JsonToYaml(DesiredNetworkPolicy(mc)) + "---\n" +
         kube::JsonToYaml(DesiredJob(mc, options));
}

}  // namespace fcc::controller
