#include <gtest/gtest.h>
#include <httplib.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "common/file.h"
#include "common/http_server.h"
#include "common/logging.h"
#include "common/names.h"
#include "common/path.h"
#include "common/signals.h"
#include "common/stop_signal.h"
#include "tcp_clients.h"

namespace fcc::common {
namespace {

TEST(Path, DotPartsAnywhereButNotInNames) {
  EXPECT_TRUE(common::HasDotPart("/a/./b"));
  EXPECT_TRUE(common::HasDotPart("/a/.."));
  EXPECT_TRUE(common::HasDotPart("../a"));
  EXPECT_FALSE(common::HasDotPart("/a/.hidden/b..c/"));
  EXPECT_FALSE(common::HasDotPart("/"));
}

TEST(Path, TrailingSlashesGoButTheRootStays) {
  EXPECT_EQ(common::TrimTrailingSlashes("/a/b//"), "/a/b");
  EXPECT_EQ(common::TrimTrailingSlashes("///"), "/");
  EXPECT_EQ(common::TrimTrailingSlashes("a"), "a");
}

TEST(Path, NormalAbsolutePathCollapsesSlashesAndRefusesDots) {
  EXPECT_EQ(common::NormalAbsolutePath("/a//b/"), "/a/b");
  EXPECT_EQ(common::NormalAbsolutePath("//"), "/");
  EXPECT_EQ(common::NormalAbsolutePath("a/b"), std::nullopt);
  EXPECT_EQ(common::NormalAbsolutePath("/a/../b"), std::nullopt);
  EXPECT_EQ(common::NormalAbsolutePath(""), std::nullopt);
}

TEST(Names, Dns1123Label) {
  EXPECT_TRUE(IsDns1123Label("default"));
  EXPECT_TRUE(IsDns1123Label("a"));
  EXPECT_TRUE(IsDns1123Label("kube-system"));
  EXPECT_TRUE(IsDns1123Label("0abc9"));
  EXPECT_TRUE(IsDns1123Label(std::string(63, 'a')));
  EXPECT_FALSE(IsDns1123Label(std::string(64, 'a')));
  EXPECT_FALSE(IsDns1123Label(""));
  EXPECT_FALSE(IsDns1123Label("Default"));
  EXPECT_FALSE(IsDns1123Label("-a"));
  EXPECT_FALSE(IsDns1123Label("a-"));
  EXPECT_FALSE(IsDns1123Label("a.b"));
  EXPECT_FALSE(IsDns1123Label("a_b"));
}

TEST(Names, Dns1123Subdomain) {
  EXPECT_TRUE(IsDns1123Subdomain("lammps"));
  EXPECT_TRUE(IsDns1123Subdomain("a.b-c.d"));
  EXPECT_TRUE(IsDns1123Subdomain(std::string(253, 'a')));
  EXPECT_FALSE(IsDns1123Subdomain(std::string(254, 'a')));
  EXPECT_FALSE(IsDns1123Subdomain(""));
  EXPECT_FALSE(IsDns1123Subdomain("."));
  EXPECT_FALSE(IsDns1123Subdomain("a."));
  EXPECT_FALSE(IsDns1123Subdomain(".a"));
  EXPECT_FALSE(IsDns1123Subdomain("a..b"));
  EXPECT_FALSE(IsDns1123Subdomain("../a"));
  EXPECT_FALSE(IsDns1123Subdomain("a.-b"));
  EXPECT_FALSE(IsDns1123Subdomain("A"));
  EXPECT_FALSE(IsDns1123Subdomain("a/b"));
}

TEST(Names, Dns1035Label) {
  EXPECT_TRUE(IsDns1035Label("a"));
  EXPECT_TRUE(IsDns1035Label("flux-1"));
  EXPECT_FALSE(IsDns1035Label(""));
  EXPECT_FALSE(IsDns1035Label("1flux"));
  EXPECT_FALSE(IsDns1035Label("flux-"));
  EXPECT_FALSE(IsDns1035Label("Flux"));
  EXPECT_FALSE(IsDns1035Label("flux.sample"));
  EXPECT_FALSE(IsDns1035Label(std::string(64, 'a')));
}

TEST(Names, QualifiedName) {
  EXPECT_TRUE(IsQualifiedName("team"));
  EXPECT_TRUE(IsQualifiedName("Team_A.b-1"));
  EXPECT_TRUE(IsQualifiedName("example.com/team"));
  EXPECT_TRUE(IsQualifiedName("kueue.x-k8s.io/podset-required-topology"));
  EXPECT_TRUE(IsQualifiedName(std::string(63, 'a')));
  EXPECT_FALSE(IsQualifiedName(std::string(64, 'a')));
  EXPECT_FALSE(IsQualifiedName(""));
  EXPECT_FALSE(IsQualifiedName("/team"));
  EXPECT_FALSE(IsQualifiedName("example.com/"));
  EXPECT_FALSE(IsQualifiedName("Example.com/team"));
  EXPECT_FALSE(IsQualifiedName("a/b/c"));
  EXPECT_FALSE(IsQualifiedName("-team"));
  EXPECT_FALSE(IsQualifiedName("team."));
  EXPECT_FALSE(IsQualifiedName("te am"));
}

TEST(Names, LabelValue) {
  EXPECT_TRUE(IsLabelValue(""));
  EXPECT_TRUE(IsLabelValue("physics"));
  EXPECT_TRUE(IsLabelValue("v1.2_rc-3"));
  EXPECT_FALSE(IsLabelValue(std::string(64, 'a')));
  EXPECT_FALSE(IsLabelValue("a/b"));
  EXPECT_FALSE(IsLabelValue("-a"));
  EXPECT_FALSE(IsLabelValue("a b"));
}

TEST(ParseHostPort, Forms) {
  auto any = ParseHostPort("--x", ":9810");
  ASSERT_TRUE(any) << any.error();
  EXPECT_EQ(any->host, "0.0.0.0");
  EXPECT_EQ(any->port, 9810);
  auto bracketed = ParseHostPort("--x", "[::]:8081");
  ASSERT_TRUE(bracketed) << bracketed.error();
  EXPECT_EQ(bracketed->host, "::");
  auto loopback = ParseHostPort("--x", "127.0.0.1:0");
  ASSERT_TRUE(loopback) << loopback.error();
  EXPECT_EQ(loopback->host, "127.0.0.1");
  EXPECT_EQ(loopback->port, 0);
}

TEST(ParseHostPort, ErrorsNameTheFlag) {
  for (const char* bad : {"9810", "host:", "host:65536", "host:-1", "h:9x"}) {
    auto parsed = ParseHostPort("--health-addr", bad);
    ASSERT_FALSE(parsed) << bad;
    EXPECT_NE(parsed.error().find("--health-addr"), std::string::npos)
        << parsed.error();
  }
}

TEST(HttpServer, ServesRoutesOnAFreePort) {
  int calls = 0;
  auto server =
      HttpServer::Start("--x", "127.0.0.1:0",
                        {{"/healthz", [&] { return HttpReply{200, "ok\n"}; }},
                         {"/readyz", [&] {
                            ++calls;
                            return HttpReply{503, "not yet\n"};
                          }}});
  ASSERT_TRUE(server) << server.error();
  httplib::Client client("127.0.0.1", (*server)->port());
  auto health = client.Get("/healthz");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
  EXPECT_EQ(health->body, "ok\n");
  auto ready = client.Get("/readyz");
  ASSERT_TRUE(ready);
  EXPECT_EQ(ready->status, 503);
  EXPECT_EQ(ready->body, "not yet\n");
  EXPECT_EQ(calls, 1);
  auto missing = client.Get("/metrics");
  ASSERT_TRUE(missing);
  EXPECT_EQ(missing->status, 404);
}

TEST(HttpServer, ASecondServerOnTheSamePortFails) {
  auto first = HttpServer::Start("--x", "127.0.0.1:0", {});
  ASSERT_TRUE(first) << first.error();
  const std::string address = "127.0.0.1:" + std::to_string((*first)->port());
  auto second = HttpServer::Start("--metrics-address", address, {});
  ASSERT_FALSE(second) << "both bound " << address;
  EXPECT_NE(second.error().find("--metrics-address " + address),
            std::string::npos)
      << second.error();
}

// HEAD as well as GET: probes and scripts use both (curl -I).
TEST(HttpServer, OnlyGetAndHeadAreAnswered) {
  auto server = HttpServer::Start(
      "--x", "127.0.0.1:0",
      {{"/readyz", [] { return HttpReply{503, "not yet\n"}; }}});
  ASSERT_TRUE(server) << server.error();
  httplib::Client client("127.0.0.1", (*server)->port());
  auto head = client.Head("/readyz");
  ASSERT_TRUE(head);
  EXPECT_EQ(head->status, 503);
  EXPECT_EQ(head->body, "");
  EXPECT_EQ(head->get_header_value("Content-Length"), "8");
  auto post = client.Post("/readyz", "x", "text/plain");
  ASSERT_TRUE(post);
  EXPECT_EQ(post->status, 405);
}

// Each byte arrives well within any per-read timeout; only a deadline on the
// whole request ends it (cpp-httplib, used before, served it for ever).
TEST(HttpServer, ATricklingRequestIsCutAtTheDeadline) {
  HttpLimits limits;
  limits.request_deadline_ms = 300;
  auto server = HttpServer::Start(
      "--x", "127.0.0.1:0", {{"/healthz", [] { return HttpReply{}; }}}, limits);
  ASSERT_TRUE(server) << server.error();
  EXPECT_TRUE(fcc::testing::ServerCutsATricklingRequest(
      (*server)->port(), std::chrono::milliseconds(50),
      std::chrono::seconds(10)))
      << "still reading one request after 10 s";
  httplib::Client client("127.0.0.1", (*server)->port());
  auto health = client.Get("/healthz");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
}

// Held connections cost the server at most its workers and queue in file
// descriptors; the rest wait in the kernel's backlog.
TEST(HttpServer, HeldConnectionsAreBounded) {
  HttpLimits limits;
  limits.request_deadline_ms = 5000;
  limits.workers = 2;
  limits.queued = 2;
  limits.backlog = 4;
  auto server = HttpServer::Start(
      "--x", "127.0.0.1:0", {{"/healthz", [] { return HttpReply{}; }}}, limits);
  ASSERT_TRUE(server) << server.error();
  const int before = fcc::testing::OpenFdCount(getpid());
  auto held = fcc::testing::HoldTcpConnections((*server)->port(), 50);
  ASSERT_EQ(held.size(), 50U);
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  const int accepted = fcc::testing::OpenFdCount(getpid()) - before -
                       static_cast<int>(held.size());
  // +1: the connection the accepting thread holds while the queue is full.
  EXPECT_LE(accepted, limits.workers + limits.queued + 1);
  held.clear();
  httplib::Client client("127.0.0.1", (*server)->port());
  client.set_read_timeout(10);
  auto health = client.Get("/healthz");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
}

TEST(HttpServer, Ipv6IsRefusedWithTheFix) {
  auto server = HttpServer::Start("--metrics-address", "[::]:9810", {});
  ASSERT_FALSE(server);
  EXPECT_NE(server.error().find("--metrics-address"), std::string::npos);
  EXPECT_NE(server.error().find("0.0.0.0:9810"), std::string::npos)
      << server.error();
}

TEST(HttpServer, BadAddressNamesTheFlag) {
  auto server = HttpServer::Start("--metrics-address", "nonsense", {});
  ASSERT_FALSE(server);
  EXPECT_NE(server.error().find("--metrics-address"), std::string::npos);
}

TEST(Logging, JsonLinesHaveOneSchema) {
  ASSERT_TRUE(ConfigureLogging("common-test", "json", "info"));
  ::testing::internal::CaptureStderr();
  spdlog::info("quote \" and newline \n");
  spdlog::debug("below the level");
  const std::string out = ::testing::internal::GetCapturedStderr();
  ASSERT_EQ(out.find("below"), std::string::npos);
  const auto entry = nlohmann::json::parse(out);
  EXPECT_EQ(entry.size(), 3u) << out;
  EXPECT_TRUE(entry.at("ts").get<std::string>().ends_with("Z"));
  EXPECT_EQ(entry.at("level"), "info");
  EXPECT_EQ(entry.at("msg"), "quote \" and newline \n");
}

TEST(Logging, UnknownValuesNameTheFlag) {
  auto level = ConfigureLogging("common-test", "text", "loud");
  ASSERT_FALSE(level);
  EXPECT_NE(level.error().find("--log-level"), std::string::npos);
  auto format = ConfigureLogging("common-test", "xml", "info");
  ASSERT_FALSE(format);
  EXPECT_NE(format.error().find("--log-format"), std::string::npos);
}

class FileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char dir[] = "/tmp/fcc-common-XXXXXX";
    ASSERT_NE(mkdtemp(dir), nullptr);
    dir_ = dir;
  }
  void TearDown() override { std::system(("rm -rf " + dir_).c_str()); }
  std::string Write(const std::string& name, const std::string& content) {
    const std::string path = dir_ + "/" + name;
    std::ofstream(path) << content;
    return path;
  }
  std::string dir_;
};

TEST_F(FileTest, ReadsTextWholeAcrossChunks) {
  const std::string big(200 * 1024 + 7, 'x');
  auto text = ReadTextFile(Write("big", big));
  ASSERT_TRUE(text) << text.error();
  EXPECT_EQ(*text, big);
}

TEST_F(FileTest, ErrorsNameThePath) {
  auto missing = ReadTextFile(dir_ + "/missing");
  ASSERT_FALSE(missing);
  EXPECT_NE(missing.error().find(dir_ + "/missing"), std::string::npos);
  auto large = ReadTextFile(Write("large", std::string(100, 'y')), 99);
  ASSERT_FALSE(large);
  EXPECT_NE(large.error().find("larger than 99 bytes"), std::string::npos);
  auto exact = ReadTextFile(Write("exact", std::string(99, 'y')), 99);
  EXPECT_TRUE(exact);
}

TEST_F(FileTest, ReadFullStopsAtTheBufferOrEof) {
  auto fd = OpenForReading(Write("ten", "0123456789"));
  ASSERT_TRUE(fd);
  char four[4];
  auto got = ReadFull(fd->get(), four);
  ASSERT_TRUE(got);
  EXPECT_EQ(*got, 4u);
  char rest[16];
  got = ReadFull(fd->get(), rest);
  ASSERT_TRUE(got);
  EXPECT_EQ(std::string(rest, *got), "456789");
}

TEST_F(FileTest, AFifoIsAnErrorNotAHang) {
  const std::string fifo = dir_ + "/fifo";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  auto text = ReadTextFile(fifo);
  ASSERT_FALSE(text);
  EXPECT_NE(text.error().find(fifo), std::string::npos);
}

TEST(SignalWaiter, ReturnsTheSignalOrZeroWhenCancelled) {
  auto waiter = SignalWaiter::Create();
  ASSERT_TRUE(waiter) << waiter.error();
  std::thread canceller([&] { waiter->Cancel(); });
  EXPECT_EQ(waiter->Wait(), 0);
  canceller.join();
  // Blocked in this (the only other thread is gone) thread, so the signal
  // waits in the signalfd instead of ending the test.
  ASSERT_EQ(kill(getpid(), SIGTERM), 0);
  auto second = SignalWaiter::Create();
  ASSERT_TRUE(second);
  EXPECT_EQ(second->Wait(), SIGTERM);
}

TEST(StopOnSignal, StopsOnASignalAndEndsWhenStoppedElsewhere) {
  auto waiter = SignalWaiter::Create();
  ASSERT_TRUE(waiter);
  StopSignal stop;
  {
    StopOnSignal stopper(std::move(*waiter), stop);
    ASSERT_EQ(kill(getpid(), SIGINT), 0);
    EXPECT_TRUE(stop.WaitFor(std::chrono::seconds(10)));
  }
  auto second = SignalWaiter::Create();
  ASSERT_TRUE(second);
  StopSignal untouched;
  // No signal: destruction alone must end the thread (this would hang).
  {
    StopOnSignal stopper(std::move(*second), untouched);
  }
  EXPECT_TRUE(untouched.stopped());
}

}  // namespace
}  // namespace fcc::common
