#include "kube/kube_client.h"

#include <gtest/gtest.h>
#include <httplib.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "kube/api_path.h"
#include "kube/time_format.h"

namespace fcc::kube {
namespace {

class KubeconfigTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("kubeconfig-test-" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
    Write("client.key", "KEY-PEM");
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string Write(const std::string& name, const std::string& text) {
    std::ofstream(dir_ / name) << text;
    return (dir_ / name).string();
  }
  std::filesystem::path dir_;
};

TEST_F(KubeconfigTest, ReadsCurrentContextWithDataAndRelativeFiles) {
  // "Q0EtUEVN" = base64("CA-PEM"), "Q0VSVC1QRU0=" = base64("CERT-PEM").
  const std::string path = Write("config", R"(
apiVersion: v1
kind: Config
current-context: dev
contexts:
- name: other
  context: {cluster: nowhere, user: nobody}
- name: dev
  context: {cluster: local, user: admin, namespace: team-a}
clusters:
- name: local
  cluster:
    server: https://127.0.0.1:6443/
    certificate-authority-data: Q0EtUEVN
users:
- name: admin
  user:
    client-certificate-data: Q0VSVC1QRU0=
    client-key: client.key
)");
  const auto config = LoadKubeconfig(path);
  ASSERT_TRUE(config) << config.error();
  EXPECT_EQ(config->server, "https://127.0.0.1:6443");
  EXPECT_EQ(config->ca_pem, "CA-PEM");
  EXPECT_EQ(config->client_cert_pem, "CERT-PEM");
  EXPECT_EQ(config->client_key_pem, "KEY-PEM");
  EXPECT_EQ(config->namespace_name, "team-a");
  EXPECT_TRUE(config->token.empty());
}

TEST_F(KubeconfigTest, TokenUserAndExplicitContext) {
  const std::string path = Write("config", R"(
current-context: none
contexts:
- name: t
  context: {cluster: c, user: u}
clusters:
- name: c
  cluster: {server: "https://k:443", insecure-skip-tls-verify: true}
users:
- name: u
  user: {token: abc}
)");
  const auto config = LoadKubeconfig(path, "t");
  ASSERT_TRUE(config) << config.error();
  EXPECT_EQ(config->token, "abc");
  EXPECT_TRUE(config->insecure_skip_tls_verify);
  const auto missing = LoadKubeconfig(path);  // "none" is missing
  ASSERT_FALSE(missing);
  EXPECT_NE(missing.error().find("context \"none\" not found"),
            std::string::npos)
      << missing.error();
}

TEST_F(KubeconfigTest, ExecPluginsAreRefusedWithAReason) {
  const std::string path = Write("config", R"(
current-context: t
contexts: [{name: t, context: {cluster: c, user: u}}]
clusters: [{name: c, cluster: {server: "https://k"}}]
users: [{name: u, user: {exec: {command: aws}}}]
)");
  const auto config = LoadKubeconfig(path);
  ASSERT_FALSE(config);
  EXPECT_NE(config.error().find("exec"), std::string::npos) << config.error();
}

TEST(Paths, CoreAndGroupedResources) {
  EXPECT_EQ(CollectionPath("v1", "services", "ns"),
            "/api/v1/namespaces/ns/services");
  EXPECT_EQ(CollectionPath("batch/v1", "jobs", ""), "/apis/batch/v1/jobs");
  EXPECT_EQ(
      ObjectPath("minicluster.dev/v1alpha1", "miniclusters", "ns", "a",
                 "status"),
      "/apis/minicluster.dev/v1alpha1/namespaces/ns/miniclusters/a/status");
  EXPECT_EQ(UrlEncode("minicluster.dev/name"), "minicluster.dev%2Fname");
}

TEST(HttpResponse, DescribesApiStatusMessages) {
  HttpResponse r{
      409, R"({"kind":"Status","message":"jobs.batch \"a\" already exists"})",
      ""};
  EXPECT_EQ(r.Describe(), "HTTP 409: jobs.batch \"a\" already exists");
  HttpResponse down{0, "", "connection refused"};
  EXPECT_EQ(down.Describe(), "connection refused");
}

// A loopback HTTP server that notes the client port of every request: one
// port means one connection.
class PortRecordingServer {
 public:
  PortRecordingServer() {
    server_.Post("/echo",
                 [this](const httplib::Request& req, httplib::Response& res) {
                   {
                     std::lock_guard lock(mu_);
                     ports_.insert(req.remote_port);
                   }
                   res.set_content(req.body, "application/json");
                 });
    // httplib closes a connection after 5 requests by default.
    server_.set_keep_alive_max_count(1000);
    port_ = server_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { server_.listen_after_bind(); });
    while (!server_.is_running())
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ~PortRecordingServer() {
    server_.stop();
    thread_.join();
  }
  std::string url() const {
    return "http://127.0.0.1:" + std::to_string(port_);
  }
  size_t connections() {
    std::lock_guard lock(mu_);
    return ports_.size();
  }

 private:
  httplib::Server server_;
  int port_ = 0;
  std::thread thread_;
  std::mutex mu_;
  std::set<int> ports_;
};

TEST(KubeClient, ReusesConnectionsAcrossRequests) {
  PortRecordingServer server;
  KubeConfig config;
  config.server = server.url();
  KubeClient client(config);
  for (int i = 0; i < 5; ++i) {
    HttpResponse r = client.Request("POST", "/echo", "{\"i\":1}");
    ASSERT_EQ(r.status, 200) << r.Describe();
    EXPECT_EQ(r.body, "{\"i\":1}");  // no body left over from another request
  }
  EXPECT_EQ(server.connections(), 1u);

  // Concurrent requests each get a handle of their own, and with it a
  // connection; afterwards the handles (and connections) are reused.
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 10; ++i)
        EXPECT_TRUE(client.Request("POST", "/echo", "{}").ok());
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_LE(server.connections(), 5u);
}

}  // namespace
}  // namespace fcc::kube

namespace fcc::kube {
namespace {

TEST(ParseTime, ReadsWhatFormatTimeWritesAndNothingElse) {
  const auto t = std::chrono::system_clock::from_time_t(1767323045);
  ASSERT_EQ(FormatTime(t), "2026-01-02T03:04:05Z");
  EXPECT_EQ(ParseTime("2026-01-02T03:04:05Z"), t);
  EXPECT_EQ(ParseTime(""), std::nullopt);
  EXPECT_EQ(ParseTime("2026-01-02T03:04:05"), std::nullopt);
  EXPECT_EQ(ParseTime("2026-01-02T03:04:05Z trailing"), std::nullopt);
  EXPECT_EQ(ParseTime("yesterday"), std::nullopt);
}

}  // namespace
}  // namespace fcc::kube
