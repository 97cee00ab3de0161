// JSON <-> YAML for `render` output and for reading YAML inputs
// (a MiniCluster manifest, a kubeconfig). Built on yaml-cpp.
#pragma once

#include <expected>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace fcc::kube {

// Emits one YAML document (no leading "---"). Strings that YAML would read
// back as another type ("0", "true", "null", "1.5") are quoted, and
// multi-line strings use literal block style so scripts stay readable.
// yaml-cpp's emitter fails only on unbalanced Begin/End calls, which would
// be a bug here: that throws std::logic_error.
std::string JsonToYaml(const nlohmann::json& value);

// Parses every document of a YAML (or JSON) stream. Plain scalars become
// booleans, integers, floats or null the way YAML 1.2's core schema reads
// them; quoted scalars stay strings. A syntax error is returned with its
// line and column.
std::expected<std::vector<nlohmann::json>, std::string> YamlToJson(
    const std::string& text);

}  // namespace fcc::kube
