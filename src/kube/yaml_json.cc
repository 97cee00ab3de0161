#include "kube/yaml_json.h"

#include <yaml-cpp/yaml.h>

#include <regex>
#include <stdexcept>

namespace fcc::kube {
namespace {

using nlohmann::json;

// YAML 1.2 core schema patterns for plain scalars.
const std::regex& IntPattern() {
  static const std::regex re(R"(^[-+]?[0-9]+$)");
  return re;
}
const std::regex& FloatPattern() {
  static const std::regex re(
      R"(^[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?$)");
  return re;
}
bool IsNullWord(const std::string& s) {
  return s.empty() || s == "~" || s == "null" || s == "Null" || s == "NULL";
}
bool IsBoolWord(const std::string& s) {
  return s == "true" || s == "True" || s == "TRUE" || s == "false" ||
         s == "False" || s == "FALSE";
}

// Would a plain (unquoted) scalar with this text be read as a non-string?
bool NeedsQuotes(const std::string& s) {
  if (IsNullWord(s) || IsBoolWord(s)) return true;
  if (std::regex_match(s, IntPattern()) || std::regex_match(s, FloatPattern()))
    return true;
  // YAML 1.1 readers (yaml-cpp, PyYAML) also treat these as booleans.
  static const char* kYaml11Bools[] = {"y",  "Y",   "yes", "Yes", "YES", "n",
                                       "N",  "no",  "No",  "NO",  "on",  "On",
                                       "ON", "off", "Off", "OFF"};
  for (const char* word : kYaml11Bools) {
    if (s == word) return true;
  }
  // YAML 1.1 sexagesimal numbers ("1000:10") and times: quote anything
  // that starts with a digit and holds a colon, e.g. owner "1000:1000".
  if (!s.empty() && s[0] >= '0' && s[0] <= '9' &&
      s.find(':') != std::string::npos)
    return true;
  return false;
}

void Emit(YAML::Emitter& out, const json& value) {
  switch (value.type()) {
    case json::value_t::object:
      if (value.empty()) {
        out << YAML::Flow << YAML::BeginMap << YAML::EndMap;
        break;
      }
      out << YAML::BeginMap;
      for (const auto& [key, item] : value.items()) {
        out << YAML::Key << key << YAML::Value;
        Emit(out, item);
      }
      out << YAML::EndMap;
      break;
    case json::value_t::array:
      if (value.empty()) {
        out << YAML::Flow << YAML::BeginSeq << YAML::EndSeq;
        break;
      }
      out << YAML::BeginSeq;
      for (const auto& item : value) Emit(out, item);
      out << YAML::EndSeq;
      break;
    case json::value_t::string: {
      const auto& s = value.get_ref<const std::string&>();
      // A literal block as yaml-cpp writes it ("|", clip, no indentation
      // indicator) reads back with exactly one final newline and no leading
      // blank or space, so only such strings take that form.
      const bool multiline = s.find('\n') != std::string::npos;
      const bool literal_safe = s.size() > 1 && s.front() != ' ' &&
                                s.front() != '\n' && s.ends_with('\n') &&
                                !s.ends_with("\n\n");
      if (multiline && literal_safe) {
        out << YAML::Literal << s;
      } else if (multiline || NeedsQuotes(s)) {
        out << YAML::DoubleQuoted << s;
      } else {
        out << s;
      }
      break;
    }
    case json::value_t::boolean:
      out << (value.get<bool>() ? "true" : "false");
      break;
    case json::value_t::number_integer:
      out << value.get<int64_t>();
      break;
    case json::value_t::number_unsigned:
      out << value.get<uint64_t>();
      break;
    case json::value_t::number_float:
      out << value.get<double>();
      break;
    case json::value_t::null:
    default:
      out << YAML::Null;
      break;
  }
}

json Convert(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Map: {
      json object = json::object();
      for (const auto& item : node) {
        object[item.first.as<std::string>()] = Convert(item.second);
      }
      return object;
    }
    case YAML::NodeType::Sequence: {
      json array = json::array();
      for (const auto& item : node) array.push_back(Convert(item));
      return array;
    }
    case YAML::NodeType::Scalar: {
      const std::string& text = node.Scalar();
      // Quoted scalars carry the non-specific tag "!": always strings.
      if (node.Tag() != "?") return text;
      if (IsNullWord(text)) return nullptr;
      if (text == "true" || text == "True" || text == "TRUE") return true;
      if (text == "false" || text == "False" || text == "FALSE") return false;
      if (std::regex_match(text, IntPattern())) {
        try {
          return std::stoll(text);
        } catch (const std::out_of_range&) {
          return text;
        }
      }
      if (std::regex_match(text, FloatPattern())) return std::stod(text);
      return text;
    }
    case YAML::NodeType::Null:
    case YAML::NodeType::Undefined:
    default:
      return nullptr;
  }
}

}  // namespace

std::string JsonToYaml(const json& value) {
  YAML::Emitter out;
  out.SetIndent(2);
  out.SetSeqFormat(YAML::Block);
  out.SetMapFormat(YAML::Block);
  Emit(out, value);
  if (!out.good()) {
    throw std::logic_error("YAML emitter: " + out.GetLastError());
  }
  return std::string(out.c_str()) + "\n";
}

std::expected<std::vector<json>, std::string> YamlToJson(
    const std::string& text) {
  std::vector<json> documents;
  try {
    for (const auto& doc : YAML::LoadAll(text)) {
      if (doc.IsNull()) continue;  // empty document between "---" lines
      documents.push_back(Convert(doc));
    }
  } catch (const YAML::Exception& e) {
    // yaml-cpp reports by exception; this layer returns errors as values.
    return std::unexpected("YAML line " + std::to_string(e.mark.line + 1) +
                           ", column " + std::to_string(e.mark.column + 1) +
                           ": " + e.msg);
  }
  return documents;
}

}  // namespace fcc::kube
