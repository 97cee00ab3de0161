// Both sides of the one contract between the binaries: the controller's
// rendered CSI volume, sent the way kubelet sends it, is what the driver
// accepts, and it names what the driver writes where the broker reads it.
#include <gtest/gtest.h>
#include <openssl/evp.h>

#include <array>
#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include "common/file.h"
#include "common/volume_contract.h"
#include "controller/desired.h"
#include "controller/render.h"
#include "driver/volume_request.h"
#include "kube/yaml_json.h"

namespace fcc {
namespace {

using nlohmann::json;

constexpr char kPodUid[] = "6f1c2d3e-0000-4000-8000-00000000c0de";

// Every MiniCluster manifest under examples/.
std::vector<std::string> ExampleMiniClusters() {
  std::vector<std::string> files;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(
           FCC_SOURCE_DIR "/examples")) {
    if (entry.path().extension() != ".yaml") continue;
    const auto text = common::ReadTextFile(entry.path());
    if (text && text->find("\nkind: MiniCluster\n") != std::string::npos) {
      files.push_back(entry.path());
    }
  }
  return files;
}

// kubelet's volume handle for an inline volume: "csi-" + sha256(uid + name).
std::string KubeletVolumeId(const std::string& volume_name) {
  const std::string input = kPodUid + volume_name;
  std::array<unsigned char, EVP_MAX_MD_SIZE> digest{};
  unsigned int size = 0;
  EVP_Digest(input.data(), input.size(), digest.data(), &size, EVP_sha256(),
             nullptr);
  std::string id = "csi-";
  for (unsigned int i = 0; i < size; ++i) {
    id += "0123456789abcdef"[digest[i] >> 4];
    id += "0123456789abcdef"[digest[i] & 15];
  }
  return id;
}

// The Job the controller would create for `file`.
// Rendered with a key id, so that the volume carries every attribute key.
json RenderedJob(const std::string& file) {
  const auto text = common::ReadTextFile(file);
  EXPECT_TRUE(text) << text.error();
  if (!text) return {};
  const auto rendered =
      controller::RenderMiniCluster(*text, {.key_id = "key-2026-12"});
  EXPECT_TRUE(rendered) << file << ": " << rendered.error();
  if (!rendered) return {};
  const auto docs = kube::YamlToJson(*rendered);
  EXPECT_TRUE(docs) << file;
  if (!docs) return {};
  for (const json& doc : *docs) {
    if (doc.value("kind", "") == "Job") return doc;
  }
  ADD_FAILURE() << file << ": render printed no Job";
  return {};
}

// The pod template's volume of our driver; null if there is none.
json CurveVolume(const json& pod_spec) {
  for (const json& volume : pod_spec.value("volumes", json::array())) {
    if (volume.contains("csi") &&
        volume["csi"].value("driver", "") == common::kDriverName) {
      return volume;
    }
  }
  return nullptr;
}

// NodePublishVolume as kubelet sends it for `volume` (podInfoOnMount: its
// csi.storage.k8s.io/ keys are added to the pod author's attributes).
csi::v1::NodePublishVolumeRequest KubeletRequest(const json& volume,
                                                 const std::string& ns,
                                                 const std::string& pod) {
  csi::v1::NodePublishVolumeRequest r;
  const std::string name = volume["name"];
  r.set_volume_id(KubeletVolumeId(name));
  r.set_target_path(std::string("/var/lib/kubelet/pods/") + kPodUid +
                    "/volumes/kubernetes.io~csi/" + name + "/mount");
  r.set_readonly(volume["csi"].value("readOnly", false));
  r.mutable_volume_capability()->mutable_mount();
  r.mutable_volume_capability()->mutable_access_mode()->set_mode(
      csi::v1::VolumeCapability::AccessMode::SINGLE_NODE_WRITER);
  auto& ctx = *r.mutable_volume_context();
  for (const auto& [key, value] : volume["csi"]["volumeAttributes"].items()) {
    ctx[key] = value.get<std::string>();
  }
  ctx["csi.storage.k8s.io/pod.name"] = pod;
  ctx["csi.storage.k8s.io/pod.namespace"] = ns;
  ctx["csi.storage.k8s.io/pod.uid"] = kPodUid;
  ctx["csi.storage.k8s.io/serviceAccount.name"] = "default";
  ctx["csi.storage.k8s.io/ephemeral"] = "true";
  return r;
}

TEST(Contract, TheExamplesAreFound) {
  EXPECT_GE(ExampleMiniClusters().size(), 6u);
}

TEST(Contract, EveryRenderedVolumePassesTheDriversValidation) {
  for (const std::string& file : ExampleMiniClusters()) {
    SCOPED_TRACE(file);
    const json job = RenderedJob(file);
    const json& pod = job["spec"]["template"]["spec"];
    const json volume = CurveVolume(pod);
    ASSERT_FALSE(volume.is_null()) << "no " << common::kDriverName << " volume";
    const std::string ns = job["metadata"]["namespace"];
    const auto spec = driver::ValidatePublishRequest(KubeletRequest(
        volume, ns, job["metadata"]["name"].get<std::string>() + "-0"));
    ASSERT_TRUE(spec) << spec.error().message;
    const json& attrs = volume["csi"]["volumeAttributes"];
    EXPECT_EQ(spec->minicluster.namespace_name, ns);
    EXPECT_EQ(spec->minicluster.name, attrs[common::kAttrMiniCluster]);
    EXPECT_EQ(spec->minicluster.generation, attrs[common::kAttrGeneration]);
    EXPECT_EQ(spec->minicluster.generation, controller::kRenderUidPlaceholder);
    const auto owner =
        driver::ParseOwner(attrs[common::kAttrOwner].get<std::string>());
    ASSERT_TRUE(owner) << owner.error();
    EXPECT_EQ(spec->owner, *owner);
    EXPECT_EQ(spec->key_id, attrs[common::kAttrKeyId]);
  }
}

TEST(Contract, TheBrokerReadsTheCertWhereTheDriverWritesIt) {
  const std::string cert_path = std::string(common::kCertMountPath) + "/" +
                                std::string(common::kCertFileName);
  for (const std::string& file : ExampleMiniClusters()) {
    SCOPED_TRACE(file);
    const json pod = RenderedJob(file)["spec"]["template"]["spec"];
    const std::string volume = CurveVolume(pod).value("name", "");
    bool mounted = false;
    for (const json& mount : pod["containers"][0]["volumeMounts"]) {
      if (mount["name"] == volume) {
        EXPECT_EQ(mount["mountPath"], common::kCertMountPath);
        mounted = true;
      }
    }
    EXPECT_TRUE(mounted) << "the broker does not mount " << volume;
    EXPECT_NE(pod.dump().find("curve_cert = \\\"" + cert_path + "\\\""),
              std::string::npos)
        << "the broker config does not name " << cert_path;
  }
}

// The view volume the controller renders (unless spec.flux.fromImage) is
// one the driver accepts as a view, and everything the container runs of
// Flux (its shell, flux) lies in what it mounts of it.
TEST(Contract, EveryRenderedViewPassesTheDriversValidation) {
  int views = 0;
  for (const std::string& file : ExampleMiniClusters()) {
    SCOPED_TRACE(file);
    const json job = RenderedJob(file);
    const json& pod = job["spec"]["template"]["spec"];
    for (const json& volume : pod["volumes"]) {
      if (volume.value("name", "") != controller::kViewVolume) continue;
      ++views;
      const auto request = KubeletRequest(volume, "default", "x-0");
      ASSERT_TRUE(driver::IsViewRequest(request));
      const auto spec = driver::ValidateViewPublishRequest(request);
      ASSERT_TRUE(spec) << spec.error().message;
      EXPECT_EQ(spec->view, controller::kDefaultFluxView);
      const json& container = pod["containers"][0];
      const std::string shell = container["command"][0];
      EXPECT_TRUE(shell.starts_with(std::string(common::kViewMountPath) + "/"))
          << shell;
      std::set<std::string> paths;
      for (const json& mount : container["volumeMounts"]) {
        if (mount["name"] == controller::kViewVolume) {
          paths.insert(mount["mountPath"].get<std::string>());
          EXPECT_EQ(mount.value("readOnly", false), true) << mount;
        }
      }
      EXPECT_EQ(paths,
                (std::set<std::string>{std::string(common::kViewMountPath),
                                       controller::kViewFluxPath}));
    }
  }
  EXPECT_GE(views, 1) << "no example renders a view volume";
}

TEST(Contract, AVolumeWithOneKeyRenamedIsRefused) {
  const std::vector<std::string> files = ExampleMiniClusters();
  ASSERT_FALSE(files.empty());
  const json job = RenderedJob(files.front());
  const json volume = CurveVolume(job["spec"]["template"]["spec"]);
  ASSERT_FALSE(volume.is_null());
  for (std::string_view key : common::kVolumeAttributeKeys) {
    SCOPED_TRACE(std::string(key));
    json renamed = volume;
    json& attrs = renamed["csi"]["volumeAttributes"];
    const std::string typo = std::string(key) + "s";
    attrs[typo] = attrs[std::string(key)];
    attrs.erase(std::string(key));
    const auto spec =
        driver::ValidatePublishRequest(KubeletRequest(renamed, "default", "x"));
    ASSERT_FALSE(spec);
    EXPECT_EQ(spec.error().code, grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_NE(spec.error().message.find(typo), std::string::npos)
        << spec.error().message;
  }
}

// The rule that tells a view volume from a cert volume, as the driver
// applies it (and so the admission policies must).
TEST(Contract, AViewIsViewAloneBesideKubeletsKeys) {
  using Keys = std::vector<std::string>;
  EXPECT_TRUE(common::IsViewVolume(Keys{"view"}));
  EXPECT_TRUE(common::IsViewVolume(Keys{"view", "csi.storage.k8s.io/x"}));
  EXPECT_TRUE(common::IsViewVolume(Keys{"csi.storage.k8s.io/pod.uid", "view",
                                        "csi.storage.k8s.io/ephemeral"}));
  EXPECT_FALSE(common::IsViewVolume(Keys{}));
  EXPECT_FALSE(common::IsViewVolume(Keys{"csi.storage.k8s.io/x"}));
  EXPECT_FALSE(common::IsViewVolume(Keys{"view", "minicluster"}));
  EXPECT_FALSE(common::IsViewVolume(Keys{"view", "x"}));
  EXPECT_FALSE(common::IsViewVolume(Keys{"minicluster"}));
}

// Every policy that tells views from certs (deploy/ and the chart) says it
// with kViewVolumeCel and nothing else: a pod the policies count as one view
// and a cert is one the driver serves so.
TEST(Contract, EveryPolicyTellsViewsFromCertsAsTheDriverDoes) {
  auto normalized = [](const std::string& text) {
    std::string out;
    for (char c : text) {
      const bool space = c == ' ' || c == '\n' || c == '\t';
      if (space && (out.empty() || out.back() == ' ')) continue;
      out += space ? ' ' : c;
    }
    return out;
  };
  const std::string cel(common::kViewVolumeCel);
  EXPECT_NE(cel.find(std::string("'") + std::string(common::kAttrView) + "'"),
            std::string::npos);
  EXPECT_NE(cel.find(std::string(common::kKubeletAttributePrefix)),
            std::string::npos);
  int policies = 0;
  for (const char* dir : {"/deploy", "/charts"}) {
    for (const auto& entry : std::filesystem::recursive_directory_iterator(
             std::string(FCC_SOURCE_DIR) + dir)) {
      if (entry.path().extension() != ".yaml") continue;
      const auto text = common::ReadTextFile(entry.path());
      ASSERT_TRUE(text) << text.error();
      const std::string flat = normalized(*text);
      size_t mentions = 0, rules = 0;
      for (size_t at = flat.find("'view'"); at != std::string::npos;
           at = flat.find("'view'", at + 1)) {
        ++mentions;
      }
      for (size_t at = flat.find(cel); at != std::string::npos;
           at = flat.find(cel, at + 1)) {
        ++rules;
      }
      EXPECT_EQ(mentions, rules)
          << entry.path() << ": a view volume told apart otherwise than by "
          << cel;
      if (rules > 0) ++policies;
    }
  }
  EXPECT_GE(policies, 8) << "the policies that tell views apart moved";
}

}  // namespace
}  // namespace fcc
