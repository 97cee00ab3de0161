// The CSI edge over an in-process gRPC channel, with FakeHostFs: what kubelet
// gets when something below a handler throws, and that the one wrapper
// every RPC goes through still logs and counts the call.
#include "driver/node_service.h"

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <stdexcept>
#include <string>

#include "csi.grpc.pb.h"
#include "csi_client.h"
#include "curve/minicluster_cert.h"
#include "driver/key_cache.h"
#include "driver/metrics.h"
#include "driver/publisher.h"
#include "driver/volume_request.h"
#include "fake_host_fs.h"

namespace fcc::testing {
namespace {

constexpr char kPods[] = "/var/lib/kubelet/pods";
const std::string kMasterKey(48, 'm');

// Fails the first `failures` derivations the way OpenSSL failing would.
driver::KeyCache::Derive FailingDerive(
    std::shared_ptr<std::atomic<int>> failures) {
  return [failures](const curve::Secret& master_key,
                    const curve::MiniClusterId& id) {
    if (failures->fetch_sub(1) > 0) {
      throw std::runtime_error("OpenSSL: HKDF-SHA256 derivation failed");
    }
    return curve::MakeMiniClusterCert(master_key, id);
  };
}

TEST(KeyCacheFailureTest, AFailedDerivationNamesTheMiniClusterAndIsNotKept) {
  auto failures = std::make_shared<std::atomic<int>>(1);
  driver::KeyCache keys(curve::Secret(kMasterKey), FailingDerive(failures));
  const curve::MiniClusterId id{"default", "lammps", ""};
  try {
    keys.Acquire("vol-1", id);
    FAIL() << "a failing derivation returned a cert";
  } catch (const driver::KeyDerivationError& e) {
    EXPECT_STREQ(e.what(),
                 "cannot derive the key of MiniCluster default.lammps: "
                 "OpenSSL: HKDF-SHA256 derivation failed");
  }
  EXPECT_EQ(keys.GetStats().miniclusters, 0u);
  EXPECT_EQ(keys.GetStats().volumes, 0u);
  // The next publish derives afresh.
  const auto lease = keys.Acquire("vol-1", id);
  ASSERT_TRUE(lease.cert);
  EXPECT_EQ(lease.cert->text,
            curve::MakeMiniClusterCert(curve::Secret(kMasterKey), id).text);
  EXPECT_EQ(keys.GetStats().misses, 2u);
}

// One volume ID published again for another MiniCluster (kubelet re-sends
// a volume with other attributes): no key stays cached that no volume uses,
// and the volume keeps counting for the cert its target really holds.
TEST(KeyCacheTest, ARepublishForAnotherMiniClusterKeepsNoUnusedKey) {
  FakeHostFs fake;
  driver::KeyCache keys{curve::Secret(kMasterKey)};
  driver::Publisher publisher{fake, keys};
  KubeletPod pod;
  pod.pods_dir = kPods;
  const std::string target = KubeletTargetPath(pod);
  fake.AddDir(target.substr(0, target.rfind('/')));
  auto spec = [&](const std::string& minicluster) {
    return driver::ValidatePublishRequest(
               KubeletPublishRequest(pod, {{"minicluster", minicluster}}))
        .value();
  };
  ASSERT_TRUE(publisher.Publish(spec("alpha")).ok());
  EXPECT_EQ(publisher.Publish(spec("beta")).error_code(),
            grpc::StatusCode::ALREADY_EXISTS);
  EXPECT_EQ(keys.GetStats().miniclusters, 1u) << "beta's key stayed cached";
  EXPECT_EQ(keys.GetStats().volumes, 1u);

  // A repaired target takes the new MiniCluster: the volume moves to it.
  ASSERT_EQ(fake.Unmount(target), std::error_code());
  fake.AddHalfMadeMount(target);
  ASSERT_TRUE(publisher.Publish(spec("beta")).ok());
  EXPECT_EQ(keys.GetStats().miniclusters, 1u) << "alpha's key stayed cached";
  EXPECT_EQ(keys.GetStats().volumes, 1u);

  ASSERT_TRUE(
      publisher
          .Unpublish({.volume_id = KubeletVolumeId(pod), .target_path = target})
          .ok());
  EXPECT_EQ(keys.GetStats().miniclusters, 0u);
  EXPECT_EQ(keys.GetStats().volumes, 0u);
}

class NodeServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    pod_.pods_dir = kPods;
    const std::string target = KubeletTargetPath(pod_);
    fake_.AddDir(target.substr(0, target.rfind('/')));
    grpc::ServerBuilder builder;
    builder.RegisterService(node_.service());
    server_ = driver::RpcServer::Start(
        builder, [this](driver::RpcServer& server) { node_.ServeOn(server); });
    ASSERT_TRUE(server_);
    stub_ = csi::v1::Node::NewStub(
        server_->server().InProcessChannel(grpc::ChannelArguments()));
  }

  grpc::Status Publish() {
    grpc::ClientContext context;
    csi::v1::NodePublishVolumeResponse response;
    return stub_->NodePublishVolume(
        &context, KubeletPublishRequest(pod_, {{"minicluster", "lammps"}}),
        &response);
  }

  std::shared_ptr<std::atomic<int>> failures_ =
      std::make_shared<std::atomic<int>>(1);
  FakeHostFs fake_;
  driver::KeyCache keys_{curve::Secret(kMasterKey), FailingDerive(failures_)};
  driver::Publisher publisher_{fake_, keys_};
  driver::Metrics metrics_{&keys_};
  driver::NodeService node_{"node-1", publisher_, &metrics_};
  std::unique_ptr<driver::RpcServer> server_;
  std::unique_ptr<csi::v1::Node::Stub> stub_;
  KubeletPod pod_;
};

// A derivation that throws is an answer, not a crash of the driver: INTERNAL,
// saying what failed, with no key material; nothing is left mounted, and the
// call is counted like any other.
TEST_F(NodeServiceTest, AThrowingDerivationIsInternal) {
  const grpc::Status status = Publish();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INTERNAL);
  EXPECT_EQ(status.error_message(),
            "internal error: cannot derive the key of MiniCluster "
            "default.lammps: OpenSSL: HKDF-SHA256 derivation failed");
  EXPECT_EQ(status.error_message().find(kMasterKey), std::string::npos);
  EXPECT_EQ(fake_.TotalMounts(), 0) << fake_.Dump();
  EXPECT_NE(
      metrics_.Render().find(
          R"(flux_curve_csi_node_publish_total{code="INTERNAL",result="error"} 1)"),
      std::string::npos)
      << metrics_.Render();

  // kubelet retries; the derivation now works.
  const grpc::Status retried = Publish();
  EXPECT_TRUE(retried.ok()) << retried.error_message();
  EXPECT_EQ(fake_.TotalMounts(), 1) << fake_.Dump();
}

}  // namespace
}  // namespace fcc::testing
