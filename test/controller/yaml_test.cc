#include <gtest/gtest.h>

#include "controller/render.h"
#include "controller/yaml_json.h"

namespace fcc::controller {
namespace {

using nlohmann::json;

constexpr char kManifest[] = R"(
apiVersion: minicluster.dev/v1alpha1
kind: MiniCluster
metadata:
  name: hello
  labels:
    kueue.x-k8s.io/queue-name: user-queue
spec:
  size: 2
  image: "fluxrm/flux-sched:bookworm"
  command: [flux, run, -N, "2", hostname]
  fluxUser: {uid: 1000, gid: 1000}
)";

TEST(Yaml, RoundTripKeepsTypes) {
  const json value = json::parse(R"({"s": "0", "t": "true", "n": 0, "b": true,
      "owner": "1000:1000", "multi": "line1\nline2\n", "empty": {}, "list": [],
      "nested": [{"x": null}], "f": 1.5, "y": "yes"})");
  const auto back = YamlToJson(JsonToYaml(value));
  ASSERT_EQ(back.size(), 1u);
  EXPECT_EQ(back[0], value) << JsonToYaml(value);
}

TEST(Yaml, ReportsSyntaxErrorsWithLine) {
  try {
    YamlToJson("a: [1, 2\nb: 3\n");
    FAIL() << "expected an error";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("line"), std::string::npos);
  }
}

TEST(Render, PrintsServiceThenJobFromTheDesiredCode) {
  const std::string out = RenderMiniCluster(kManifest, DesiredOptions{});
  const auto docs = YamlToJson(out);
  ASSERT_EQ(docs.size(), 2u);
  EXPECT_EQ(docs[0]["kind"], "Service");
  EXPECT_EQ(docs[1]["kind"], "Job");
  EXPECT_EQ(docs[1]["metadata"]["namespace"], "default");
  EXPECT_EQ(docs[1]["metadata"]["labels"]["kueue.x-k8s.io/queue-name"],
            "user-queue");
  // Exactly what the reconciler would create (modulo the placeholder uid).
  json mc = YamlToJson(kManifest)[0];
  mc["metadata"]["namespace"] = "default";
  mc["metadata"]["uid"] = kRenderUidPlaceholder;
  EXPECT_EQ(docs[1],
            DesiredJob(*ParseMiniCluster(mc).minicluster, DesiredOptions{}));
  EXPECT_EQ(docs[1]["spec"]["successPolicy"]["rules"][0]["succeededIndexes"],
            "0");
  EXPECT_EQ(docs[1]["spec"]["template"]["spec"]["containers"][0]["args"][3],
            "2");
}

TEST(Render, ShowsThePodTemplateFields) {
  const std::string manifest = std::string(kManifest) + R"(
  podLabels: {team: physics}
  podAnnotations: {example.com/cost-center: hpc-42}
  nodeSelector: {disk: ssd}
  tolerations: [{key: dedicated, operator: Equal, value: hpc, effect: NoSchedule}]
  affinity: {nodeAffinity: {}}
  serviceAccountName: lammps-runner
  volumes: [{name: data, persistentVolumeClaim: {claimName: lammps-data}}]
  volumeMounts: [{name: data, mountPath: /data, readOnly: true}]
)";
  const json job = YamlToJson(RenderMiniCluster(manifest, DesiredOptions{}))[1];
  const json& pod = job["spec"]["template"];
  EXPECT_EQ(pod["metadata"]["labels"]["team"], "physics");
  EXPECT_EQ(pod["metadata"]["annotations"]["example.com/cost-center"],
            "hpc-42");
  EXPECT_EQ(pod["spec"]["nodeSelector"]["disk"], "ssd");
  EXPECT_EQ(pod["spec"]["tolerations"][0]["value"], "hpc");
  EXPECT_EQ(pod["spec"]["affinity"], (json{{"nodeAffinity", json::object()}}));
  EXPECT_EQ(pod["spec"]["serviceAccountName"], "lammps-runner");
  EXPECT_EQ(pod["spec"]["volumes"][3]["persistentVolumeClaim"]["claimName"],
            "lammps-data");
  EXPECT_EQ(pod["spec"]["containers"][0]["volumeMounts"][3]["mountPath"],
            "/data");
}

TEST(Render, RefusesAnInvalidManifestNamingTheField) {
  std::string bad = kManifest;
  bad.replace(bad.find("size: 2"), 7, "size: 0");
  try {
    RenderMiniCluster(bad, DesiredOptions{});
    FAIL() << "expected an error";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("spec.size"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace fcc::controller
