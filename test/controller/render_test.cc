#include "controller/render.h"

#include <gtest/gtest.h>

#include <set>

#include "common/file.h"
#include "kube/yaml_json.h"

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

// The documents of a YAML stream the test itself wrote or rendered.
std::vector<json> Documents(const std::string& yaml) {
  auto docs = kube::YamlToJson(yaml);
  EXPECT_TRUE(docs) << docs.error();
  return docs ? std::move(*docs) : std::vector<json>{};
}

TEST(Render, PrintsWhatTheReconcilerCreatesFromTheDesiredCode) {
  const auto out = RenderMiniCluster(kManifest, DesiredOptions{});
  ASSERT_TRUE(out) << out.error();
  const std::vector<json> docs = Documents(*out);
  ASSERT_EQ(docs.size(), 3u);
  // Exactly what the reconciler would create (modulo the placeholder uid).
  json manifest = Documents(kManifest).at(0);
  manifest["metadata"]["namespace"] = "default";
  manifest["metadata"]["uid"] = kRenderUidPlaceholder;
  const MiniCluster mc = *ParseMiniCluster(manifest).minicluster;
  EXPECT_EQ(docs[0], DesiredService(mc, DesiredOptions{}));
  EXPECT_EQ(docs[1], DesiredNetworkPolicy(mc));
  EXPECT_EQ(docs[2], DesiredJob(mc, DesiredOptions{}));
  const json& job = docs[2];
  EXPECT_EQ(job["metadata"]["namespace"], "default");
  EXPECT_EQ(job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"],
            "user-queue");
  EXPECT_EQ(job["spec"]["successPolicy"]["rules"][0]["succeededIndexes"], "0");
  EXPECT_EQ(job["spec"]["template"]["spec"]["containers"][0]["args"][3], "2");
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
  const auto out = RenderMiniCluster(manifest, DesiredOptions{});
  ASSERT_TRUE(out) << out.error();
  const json job = Documents(*out).at(2);
  const json& pod = job["spec"]["template"];
  EXPECT_EQ(pod["metadata"]["labels"]["team"], "physics");
  EXPECT_EQ(pod["metadata"]["annotations"]["example.com/cost-center"],
            "hpc-42");
  EXPECT_EQ(pod["spec"]["nodeSelector"]["disk"], "ssd");
  EXPECT_EQ(pod["spec"]["tolerations"][0]["value"], "hpc");
  EXPECT_EQ(pod["spec"]["affinity"], (json{{"nodeAffinity", json::object()}}));
  EXPECT_EQ(pod["spec"]["serviceAccountName"], "lammps-runner");
  // After the controller's own: cert, two emptyDirs, the view (mounted twice).
  EXPECT_EQ(pod["spec"]["volumes"][4]["persistentVolumeClaim"]["claimName"],
            "lammps-data");
  EXPECT_EQ(pod["spec"]["containers"][0]["volumeMounts"][5]["mountPath"],
            "/data");
}

TEST(Render, RefusesAnInvalidManifestNamingTheField) {
  std::string bad = kManifest;
  bad.replace(bad.find("size: 2"), 7, "size: 0");
  const auto out = RenderMiniCluster(bad, DesiredOptions{});
  ASSERT_FALSE(out);
  EXPECT_NE(out.error().find("spec.size"), std::string::npos) << out.error();
}

// kubectl apply refuses unknown fields (strict field validation); render,
// which has no API server, must not be quieter.
TEST(Render, RefusesAnUnknownFieldNamingItAndTheKnownOnes) {
  const std::string typo = std::string(kManifest) + "  nodeSelectr: {a: b}\n";
  const auto out = RenderMiniCluster(typo, DesiredOptions{});
  ASSERT_FALSE(out);
  EXPECT_NE(out.error().find("spec.nodeSelectr: unknown field; spec has size, "
                             "image, command"),
            std::string::npos)
      << out.error();
  const std::string nested = std::string(kManifest) +
                             "  tolerations: [{key: a, operator: Exists, "
                             "effekt: NoSchedule}]\n";
  const auto nested_out = RenderMiniCluster(nested, DesiredOptions{});
  ASSERT_FALSE(nested_out);
  EXPECT_NE(nested_out.error().find("spec.tolerations[0].effekt: unknown"),
            std::string::npos)
      << nested_out.error();
}

// A manifest's metadata may hold any JSON: a uid or namespace that is not
// a string is named, not a crash (it was an uncaught type_error).
TEST(Render, RefusesMetadataThatIsNotAString) {
  for (const char* field : {"uid: 5", "namespace: [a]"}) {
    const std::string manifest =
        "apiVersion: minicluster.dev/v1alpha1\nkind: MiniCluster\n"
        "metadata: {name: demo, " +
        std::string(field) + "}\nspec: {size: 2, image: debian}\n";
    const auto out = RenderMiniCluster(manifest, DesiredOptions{});
    ASSERT_FALSE(out) << field;
    EXPECT_NE(out.error().find("must be a string, got"), std::string::npos)
        << out.error();
  }
}

// The controller's list of declared fields is the CRD's.
TEST(Render, KnownFieldsAreTheCrdsDeclaredOnes) {
  const auto text =
      common::ReadTextFile(FCC_SOURCE_DIR "/deploy/controller/crd.yaml");
  ASSERT_TRUE(text) << text.error();
  const auto docs = kube::YamlToJson(*text);
  ASSERT_TRUE(docs && docs->size() == 1);
  const json& schema =
      (*docs)[0]["spec"]["versions"][0]["schema"]["openAPIV3Schema"];
  auto keys = [](const json& properties) {
    std::set<std::string> out;
    for (const auto& [key, value] : properties.items()) out.insert(key);
    return out;
  };
  auto as_set = [](const std::vector<std::string_view>& fields) {
    return std::set<std::string>(fields.begin(), fields.end());
  };
  const json& spec = schema["properties"]["spec"]["properties"];
  const KnownFields& known = MiniClusterFields();
  EXPECT_EQ(as_set(known.top), keys(schema["properties"]));
  EXPECT_EQ(as_set(known.spec), keys(spec));
  EXPECT_EQ(as_set(known.flux_user), keys(spec["fluxUser"]["properties"]));
  EXPECT_EQ(as_set(known.flux), keys(spec["flux"]["properties"]));
  EXPECT_EQ(as_set(known.flux_scheduler),
            keys(spec["flux"]["properties"]["scheduler"]["properties"]));
  EXPECT_EQ(as_set(known.flux_state),
            keys(spec["flux"]["properties"]["state"]["properties"]));
  EXPECT_EQ(as_set(known.resources), keys(spec["resources"]["properties"]));
  EXPECT_EQ(as_set(known.toleration),
            keys(spec["tolerations"]["items"]["properties"]));
  EXPECT_EQ(as_set(known.topology), keys(spec["topology"]["properties"]));
  EXPECT_EQ(as_set(known.topology_slice),
            keys(spec["topology"]["properties"]["slice"]["properties"]));
}

}  // namespace
}  // namespace fcc::controller
