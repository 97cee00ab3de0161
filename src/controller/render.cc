#include "controller/render.h"

#include <stdexcept>

#include "controller/yaml_json.h"

namespace fcc::controller {

std::string RenderMiniCluster(const std::string& manifest,
                              const DesiredOptions& options) {
  auto documents = YamlToJson(manifest);
  if (documents.size() != 1) {
    throw std::runtime_error(
        "expected exactly one MiniCluster document, found " +
        std::to_string(documents.size()));
  }
  nlohmann::json& object = documents.front();
  if (object.is_object()) {
    auto& meta = object["metadata"];
    if (!meta.is_object()) meta = nlohmann::json::object();
    if (meta.value("namespace", "").empty()) meta["namespace"] = "default";
    if (meta.value("uid", "").empty()) meta["uid"] = kRenderUidPlaceholder;
  }
  ParseResult parsed = ParseMiniCluster(object);
  if (!parsed.minicluster || !parsed.errors.empty()) {
    throw std::runtime_error(parsed.ErrorText());
  }
  const MiniCluster& mc = *parsed.minicluster;
  return "---\n" + JsonToYaml(DesiredService(mc, options)) + "---\n" +
         JsonToYaml(DesiredJob(mc, options));
}

}  // namespace fcc::controller
