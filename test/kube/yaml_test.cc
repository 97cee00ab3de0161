#include <gtest/gtest.h>

#include "kube/yaml_json.h"

namespace fcc::kube {
namespace {

using nlohmann::json;

TEST(Yaml, RoundTripKeepsTypes) {
  const json value = json::parse(R"({"s": "0", "t": "true", "n": 0, "b": true,
      "owner": "1000:1000", "multi": "line1\nline2\n", "empty": {}, "list": [],
      "nested": [{"x": null}], "f": 1.5, "y": "yes"})");
  const auto back = YamlToJson(JsonToYaml(value));
  ASSERT_TRUE(back) << back.error();
  ASSERT_EQ(back->size(), 1u);
  EXPECT_EQ(back->front(), value) << JsonToYaml(value);
}

// A literal block ("|") keeps exactly one final newline, so strings with
// none or several must still round-trip (a probe's Python, a script).
TEST(Yaml, RoundTripKeepsFinalNewlines) {
  for (const char* s :
       {"a\nb", "a\nb\n", "a\nb\n\n", "\n", "a\n  b\n", " a\nb\n", "\na\n"}) {
    const json value = {{"s", s}};
    const auto back = YamlToJson(JsonToYaml(value));
    ASSERT_TRUE(back) << back.error();
    EXPECT_EQ(back->front(), value) << JsonToYaml(value);
  }
}

TEST(Yaml, ReportsSyntaxErrorsWithLine) {
  const auto parsed = YamlToJson("a: [1, 2\nb: 3\n");
  ASSERT_FALSE(parsed);
  EXPECT_NE(parsed.error().find("line"), std::string::npos) << parsed.error();
}

}  // namespace
}  // namespace fcc::kube
