// The real driver with --metrics-address: real publishes over the CSI
// socket, then GET /metrics and /healthz over real HTTP.
#include <gtest/gtest.h>

#include <map>
#include <optional>
#include <sstream>
#include <thread>

#include "curve/minicluster_cert.h"
#include "http_driver_test.h"
#include "tcp_clients.h"

namespace fcc::testing {
namespace {

// The value of the sample `name` whose labels include all of `labels`.
std::optional<double> Sample(const std::string& body, const std::string& name,
                             const std::map<std::string, std::string>& labels) {
  std::istringstream in(body);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    const size_t end = line.find_first_of("{ ");
    if (line.substr(0, end) != name) continue;
    bool all = true;
    for (const auto& [k, v] : labels) {
      all = all && line.find(k + "=\"" + v + "\"") != std::string::npos;
    }
    if (all) return std::stod(line.substr(line.rfind(' ') + 1));
  }
  return std::nullopt;
}

class MetricsTest : public HttpDriverTest {
 protected:
  KubeletPod Pod(const std::string& name, const std::string& uid_suffix) {
    KubeletPod pod = pod_;
    pod.name = name;
    pod.uid = "6f1c2d3e-0000-4000-8000-0000000000" + uid_suffix;
    KubeletPrepareParent(pod);
    return pod;
  }

  int port_ = FreeLoopbackPort();
};

TEST_F(MetricsTest, HealthzIsOkWhileServing) {
  ASSERT_GT(port_, 0);
  int status = 0;
  EXPECT_EQ(Get("/healthz", &status), "ok\n");
  EXPECT_EQ(status, 200);
}

TEST_F(MetricsTest, CountersAndGaugesFollowRealPublishes) {
  ASSERT_GT(port_, 0);
  const KubeletPod a = Pod("lammps-0", "a0");
  const KubeletPod b = Pod("lammps-1", "a1");
  const KubeletPod c = Pod("other-0", "c0");
  for (const auto& [pod, mc] : {std::pair{a, "lammps"}, std::pair{b, "lammps"},
                                std::pair{c, "other"}}) {
    const auto status =
        client_->Publish(KubeletPublishRequest(pod, {{"minicluster", mc}}));
    ASSERT_TRUE(status.ok()) << status.error_message();
  }
  // A typo in an attribute: refused up front.
  const auto bad = client_->Publish(
      KubeletPublishRequest(Pod("bad-0", "b0"), {{"miniclster", "x"}}));
  ASSERT_EQ(bad.error_code(), grpc::INVALID_ARGUMENT);
  ASSERT_TRUE(
      client_->Unpublish(KubeletVolumeId(c), KubeletTargetPath(c)).ok());

  const std::string body = Get("/metrics");
  const std::string pub = "flux_curve_csi_node_publish_total";
  EXPECT_EQ(Sample(body, pub, {{"code", "OK"}, {"result", "success"}}), 3);
  EXPECT_EQ(
      Sample(body, pub, {{"code", "INVALID_ARGUMENT"}, {"result", "error"}}),
      1);
  EXPECT_EQ(Sample(body, "flux_curve_csi_node_unpublish_total",
                   {{"code", "OK"}, {"result", "success"}}),
            1);
  EXPECT_EQ(
      Sample(body, "flux_curve_csi_node_publish_duration_seconds_count", {}),
      4);
  EXPECT_EQ(Sample(body, "flux_curve_csi_node_publish_duration_seconds_bucket",
                   {{"le", "+Inf"}}),
            4);
  EXPECT_EQ(
      Sample(body, "flux_curve_csi_node_unpublish_duration_seconds_count", {}),
      1);
  // Two MiniClusters derived (misses), the second lammps pod was a hit; after
  // "other" was unpublished only lammps (two volumes) stays cached.
  EXPECT_EQ(Sample(body, "flux_curve_csi_key_cache_misses_total", {}), 2);
  EXPECT_EQ(Sample(body, "flux_curve_csi_key_cache_hits_total", {}), 1);
  EXPECT_EQ(Sample(body, "flux_curve_csi_miniclusters_cached", {}), 1);
  EXPECT_EQ(Sample(body, "flux_curve_csi_volumes_cached", {}), 2);
  // The volumes held against the node's cap (its default here), and the cap.
  EXPECT_EQ(Sample(body, "flux_curve_csi_volumes", {}), 2);
  EXPECT_EQ(Sample(body, "flux_curve_csi_max_volumes_per_node", {}), 1024);
  // One key (--master-key-file: the default), holding both volumes.
  EXPECT_EQ(Sample(body, "flux_curve_csi_master_key",
                   {{"key_id", "master"}, {"default", "true"}}),
            1);
  EXPECT_EQ(
      Sample(body, "flux_curve_csi_volumes_by_key", {{"key_id", "master"}}), 2);
  EXPECT_EQ(Sample(body, "flux_curve_csi_volumes_key_unknown", {}), 0);
  EXPECT_EQ(Sample(body, "flux_curve_csi_master_key_reload_failing", {}), 0);

  // Counters never go back: a second scrape after more publishes only adds.
  ASSERT_TRUE(
      client_->Publish(KubeletPublishRequest(c, {{"minicluster", "other"}}))
          .ok());
  const std::string again = Get("/metrics");
  EXPECT_EQ(Sample(again, pub, {{"code", "OK"}}), 4);
  EXPECT_EQ(Sample(again, "flux_curve_csi_key_cache_misses_total", {}), 3);
  EXPECT_EQ(Sample(again, "flux_curve_csi_miniclusters_cached", {}), 2);

  // Never a secret, and no names or paths either (labels are codes only).
  const auto cert = curve::MakeMiniClusterCert(
      curve::Secret(master_key_bytes_), {pod_.namespace_name, "lammps", ""});
  const std::string text(cert.text.reveal());
  const size_t at = text.find("secret-key = \"");
  ASSERT_NE(at, std::string::npos);
  const std::string secret = text.substr(at + 14, 40);
  for (const std::string& leak :
       {secret, master_key_bytes_, std::string("secret-key"),
        std::string("lammps"), std::string(pod_.namespace_name + "."),
        cert.public_z85, pod_.pods_dir}) {
    EXPECT_EQ(again.find(leak), std::string::npos) << "metrics show " << leak;
  }
}

// The review's experiment: with a low file-descriptor limit, connections
// held on the metrics port made accept(2) fail with EMFILE, after which
// gRPC 1.51 never accepted another CSI connection (grpc/grpc#16058).
class MetricsPortFloodTest : public HttpDriverTest {
 protected:
  static constexpr int kMaxOpenFiles = 64;
  DriverProcess::Options DriverOptions() const override {
    auto options = HttpDriverTest::DriverOptions();
    options.max_open_files = kMaxOpenFiles;
    return options;
  }
};

TEST_F(MetricsPortFloodTest, HeldConnectionsNeverStarveTheCsiSocket) {
  auto held = HoldTcpConnections(port_, 3 * kMaxOpenFiles);
  ASSERT_EQ(held.size(), 3U * kMaxOpenFiles);
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  EXPECT_LT(OpenFdCount(driver_->pid()), kMaxOpenFiles - 8)
      << "the metrics port takes every connection offered";
  CsiClient during(socket_path());  // a new connection, so a new accept
  EXPECT_TRUE(during.WaitReady(std::chrono::seconds(5)))
      << "no CSI connection accepted while the metrics port is flooded\n"
      << log();
  held.clear();
  CsiClient after(socket_path());
  EXPECT_TRUE(after.WaitReady(std::chrono::seconds(5))) << log();
  EXPECT_EQ(Get("/healthz"), "ok\n");
}

}  // namespace
}  // namespace fcc::testing
