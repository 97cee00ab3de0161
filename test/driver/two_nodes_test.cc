// Two driver processes ("node-a", "node-b") sharing one master key publish
// the volumes of one MiniCluster's pods: every node writes the same
// curve.cert, and brokers holding them complete a real CURVE handshake the
// way Flux configures it; another MiniCluster's cert does not.
#include <gtest/gtest.h>
#include <openssl/rand.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "csi_client.h"
#include "curve/cert_file.h"
#include "curve_handshake.h"
#include "driver_process.h"
#include "mount_env.h"

namespace fcc::testing {
namespace {

constexpr auto kHandshakeTimeout = std::chrono::seconds(5);

bool Contains(const std::vector<std::string>& events, std::string_view what) {
  return std::any_of(events.begin(), events.end(),
                     [&](const std::string& e) { return e.starts_with(what); });
}

std::string Describe(const HandshakeResult& r) {
  std::string out = r.detail + "\n  server events:";
  for (const auto& e : r.server_events) out += " " + e;
  out += "\n  client events:";
  for (const auto& e : r.client_events) out += " " + e;
  return out;
}

struct Node {
  std::string name;
  std::string pods_dir;
  std::unique_ptr<DriverProcess> driver;
  std::unique_ptr<CsiClient> client;
};

struct Published {
  Node* node;
  KubeletPod pod;
  std::string volume_id;
  std::string target;
  std::string cert_path() const { return target + "/curve.cert"; }
};

class TwoNodesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    FCC_REQUIRE_MOUNT_ENV();
    root_ = std::make_unique<ScratchRoot>();
    std::string key(64, '\0');
    ASSERT_EQ(RAND_bytes(reinterpret_cast<unsigned char*>(key.data()),
                         static_cast<int>(key.size())),
              1);
    const std::string key_file = root_->WriteMasterKey("master.key", key, 0400);
    for (const char* name : {"node-a", "node-b"}) {
      auto node = std::make_unique<Node>();
      node->name = name;
      // Each "node" has its own kubelet pods directory.
      const std::string kubelet_dir = root_->path() + "/" + name;
      node->pods_dir = kubelet_dir + "/pods";
      std::filesystem::create_directories(node->pods_dir);
      node->driver = std::make_unique<DriverProcess>(
          DriverProcess::Options{.socket_path = root_->socket_path(name),
                                 .node_id = name,
                                 .master_key_file = key_file,
                                 .log_path = root_->log_path(name),
                                 .kubelet_dir = kubelet_dir,
                                 .extra_args = {}});
      ASSERT_TRUE(node->driver->Start())
          << ReadFileOrEmpty(root_->log_path(name));
      node->client = std::make_unique<CsiClient>(root_->socket_path(name));
      nodes_[name] = std::move(node);
    }
  }

  void TearDown() override {
    if (!root_) return;
    // Whatever a failed test left published is unpublished (and counted).
    for (auto& p : published_) {
      auto status = p.node->client->Unpublish(p.volume_id, p.target);
      EXPECT_TRUE(status.ok()) << p.target << ": " << status.error_message();
    }
    EXPECT_TRUE(MountsUnder(nodes_["node-a"]->pods_dir).empty());
    EXPECT_TRUE(MountsUnder(nodes_["node-b"]->pods_dir).empty());
    for (auto& [name, node] : nodes_) {
      node->client.reset();  // an open channel slows the driver's shutdown
      EXPECT_EQ(node->driver->Terminate(), 0) << name;
    }
  }

  // Publishes an inline volume for pod `pod_name` (uid `pod_uid`) on `node`.
  Published Publish(const std::string& node_name, const std::string& ns,
                    const std::string& pod_name, const std::string& pod_uid,
                    const std::map<std::string, std::string>& attrs) {
    Node* node = nodes_.at(node_name).get();
    KubeletPod pod;
    pod.pods_dir = node->pods_dir;
    pod.namespace_name = ns;
    pod.name = pod_name;
    pod.uid = pod_uid;
    KubeletPrepareParent(pod);
    const auto request = KubeletPublishRequest(pod, attrs);
    Published p{node, pod, request.volume_id(), KubeletTargetPath(pod)};
    const auto status = node->client->Publish(request);
    EXPECT_TRUE(status.ok())
        << node_name << " " << pod_name << ": " << status.error_message();
    if (status.ok()) published_.push_back(p);
    EXPECT_EQ(MountCountAt(p.target), status.ok() ? 1 : 0);
    return p;
  }

  std::string PublicKey(const Published& p) {
    auto cert = curve::LoadCertFile(p.cert_path());
    EXPECT_TRUE(cert) << cert.error();
    return cert ? cert->keys.public_z85 : "";
  }

  void UnpublishAll() {
    for (auto& p : published_) {
      auto status = p.node->client->Unpublish(p.volume_id, p.target);
      EXPECT_TRUE(status.ok()) << p.target << ": " << status.error_message();
      EXPECT_FALSE(std::filesystem::exists(p.target)) << p.target;
    }
    published_.clear();
  }

  std::unique_ptr<ScratchRoot> root_;
  std::map<std::string, std::unique_ptr<Node>> nodes_;
  std::vector<Published> published_;
};

const std::map<std::string, std::string> kLammps = {
    {"minicluster", "lammps"},
    {"generation", "5f0e7a3c-1111-4000-8000-00000000000a"},
    {"owner", "1000:1000"}};

TEST_F(TwoNodesTest, SameMiniClusterSameCertAndHandshake) {
  const Published pod0 =
      Publish("node-a", "default", "lammps-0",
              "0a000000-0000-4000-8000-000000000000", kLammps);
  const Published pod1 =
      Publish("node-a", "default", "lammps-1",
              "0a000000-0000-4000-8000-000000000001", kLammps);
  const Published pod2 =
      Publish("node-b", "default", "lammps-2",
              "0b000000-0000-4000-8000-000000000002", kLammps);
  ASSERT_FALSE(HasFailure());
  ASSERT_EQ(MountsUnder(nodes_["node-a"]->pods_dir).size(), 2u);
  ASSERT_EQ(MountsUnder(nodes_["node-b"]->pods_dir).size(), 1u);

  // Byte-identical files on both nodes.
  const std::string bytes0 = ReadFileOrEmpty(pod0.cert_path());
  ASSERT_FALSE(bytes0.empty());
  EXPECT_TRUE(bytes0 == ReadFileOrEmpty(pod1.cert_path()))
      << "pods on the same node got different certs";
  EXPECT_TRUE(bytes0 == ReadFileOrEmpty(pod2.cert_path()))
      << "node-a and node-b wrote different certs";

  auto cert = curve::LoadCertFile(pod2.cert_path());
  ASSERT_TRUE(cert) << cert.error();
  EXPECT_EQ(cert->metadata.at("name"), "default.lammps");

  // Brokers on node-a and node-b complete a real CURVE handshake, either
  // one acting as the parent.
  for (const auto& [server, client] :
       {std::pair{&pod0, &pod2}, std::pair{&pod2, &pod1}}) {
    const HandshakeResult r = TryCurveHandshake(
        server->cert_path(), client->cert_path(), kHandshakeTimeout);
    EXPECT_TRUE(r.ok) << Describe(r);
    EXPECT_TRUE(Contains(r.server_events, "HANDSHAKE_SUCCEEDED"))
        << Describe(r);
    EXPECT_TRUE(Contains(r.client_events, "HANDSHAKE_SUCCEEDED"))
        << Describe(r);
    EXPECT_GE(r.zap_admitted, 1) << "ZAP was not consulted";
  }

  UnpublishAll();
  EXPECT_TRUE(MountsUnder(nodes_["node-a"]->pods_dir).empty());
  EXPECT_TRUE(MountsUnder(nodes_["node-b"]->pods_dir).empty());
}

TEST_F(TwoNodesTest, NamespaceNameOrGenerationChangesTheKey) {
  const Published base =
      Publish("node-a", "default", "lammps-0", "uid-base", kLammps);
  auto other_gen = kLammps;
  other_gen["generation"] = "5f0e7a3c-2222-4000-8000-00000000000b";
  auto other_name = kLammps;
  other_name["minicluster"] = "gromacs";
  auto no_gen = kLammps;
  no_gen.erase("generation");
  const std::vector<Published> variants = {
      Publish("node-b", "other", "lammps-0", "uid-other-ns", kLammps),
      Publish("node-b", "default", "gromacs-0", "uid-other-name", other_name),
      Publish("node-b", "default", "lammps-0", "uid-other-gen", other_gen),
      Publish("node-a", "default", "lammps-0", "uid-no-gen", no_gen),
  };
  ASSERT_FALSE(HasFailure());

  std::set<std::string> keys = {PublicKey(base)};
  for (const auto& v : variants) keys.insert(PublicKey(v));
  EXPECT_EQ(keys.size(), 1 + variants.size())
      << "two different MiniClusters share a public key";
  EXPECT_FALSE(keys.contains(""));
  // And the whole file differs, secret key included.
  for (const auto& v : variants) {
    EXPECT_NE(ReadFileOrEmpty(base.cert_path()), ReadFileOrEmpty(v.cert_path()))
        << v.pod.namespace_name << "/" << v.pod.name;
  }
  UnpublishAll();
}

TEST_F(TwoNodesTest, AnotherMiniClustersCertIsRefused) {
  const Published ours =
      Publish("node-a", "default", "lammps-0", "uid-ours", kLammps);
  auto other_attrs = kLammps;
  other_attrs["minicluster"] = "intruder";
  const Published theirs =
      Publish("node-b", "default", "intruder-0", "uid-theirs", other_attrs);
  ASSERT_FALSE(HasFailure());

  // As Flux would configure it: the intruder expects its own key on the
  // server, so the keys do not match and the handshake fails.
  HandshakeResult r = TryCurveHandshake(ours.cert_path(), theirs.cert_path(),
                                        kHandshakeTimeout);
  EXPECT_FALSE(r.ok) << Describe(r);
  EXPECT_FALSE(Contains(r.server_events, "HANDSHAKE_SUCCEEDED")) << Describe(r);
  EXPECT_EQ(r.zap_admitted, 0) << Describe(r);

  // Even knowing our public key (it is not secret), the intruder's own
  // keypair is refused by the ZAP handler.
  auto our_cert = curve::LoadCertFile(ours.cert_path());
  auto their_cert = curve::LoadCertFile(theirs.cert_path());
  ASSERT_TRUE(our_cert && their_cert);
  r = RunCurveHandshake(HandshakeConfig{
      .server = {our_cert->keys.public_z85,
                 std::string(our_cert->keys.secret_z85.reveal())},
      .client = {their_cert->keys.public_z85,
                 std::string(their_cert->keys.secret_z85.reveal())},
      .client_serverkey = our_cert->keys.public_z85,
      .zap_admit = our_cert->keys.public_z85,
      .timeout = kHandshakeTimeout});
  EXPECT_FALSE(r.ok) << Describe(r);
  EXPECT_GE(r.zap_requests, 1) << Describe(r);
  EXPECT_EQ(r.zap_admitted, 0) << Describe(r);
  EXPECT_TRUE(Contains(r.server_events, "HANDSHAKE_FAILED_AUTH") ||
              Contains(r.client_events, "HANDSHAKE_FAILED_AUTH"))
      << Describe(r);

  // The control: the same call with our own keypair on the client succeeds,
  // so the refusals above are about the key, not the harness.
  r = RunCurveHandshake(HandshakeConfig{
      .server = {our_cert->keys.public_z85,
                 std::string(our_cert->keys.secret_z85.reveal())},
      .client = {our_cert->keys.public_z85,
                 std::string(our_cert->keys.secret_z85.reveal())},
      .client_serverkey = our_cert->keys.public_z85,
      .zap_admit = our_cert->keys.public_z85,
      .timeout = kHandshakeTimeout});
  EXPECT_TRUE(r.ok) << Describe(r);

  UnpublishAll();
}

}  // namespace
}  // namespace fcc::testing
