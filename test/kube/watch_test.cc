#include <gtest/gtest.h>

#include <thread>

#include "kube/backoff.h"
#include "kube/informer.h"
#include "kube/line_buffer.h"
#include "kube/object_meta.h"
#include "kube/object_store.h"
#include "kube/watch_event.h"
#include "kube/work_queue.h"

namespace fcc::kube {
namespace {

using nlohmann::json;
using Type = WatchEvent::Type;

// A list's pages hold about kListPageBytes (512 KiB) of the objects seen:
// etcd's largest one by one, a tenant's 128 KiB MiniClusters 4 at a time,
// small objects kMaxListPage at a time.
TEST(NextListPageSize, PagesHoldAboutHalfAMiBOfObjectsOfTheSizeSeen) {
  EXPECT_EQ(NextListPageSize(5 * 1'500'000, 5, kFirstListPage), 1);
  EXPECT_EQ(NextListPageSize(5 * 131'072, 5, kFirstListPage), 4);
  EXPECT_EQ(NextListPageSize(5 * 20'000, 5, kFirstListPage), 26);
  EXPECT_EQ(NextListPageSize(5 * 2'000, 5, kFirstListPage), kMaxListPage);
  EXPECT_EQ(NextListPageSize(50u << 20, 1, 4), 1);  // never below one
  EXPECT_EQ(NextListPageSize(1'000, 0, 7), 7);      // an empty page: as was
}

TEST(ParseWatchEvent, AddedModifiedDeleted) {
  for (auto [word, type] : {std::pair{"ADDED", Type::kAdded},
                            {"MODIFIED", Type::kModified},
                            {"DELETED", Type::kDeleted}}) {
    auto e = ParseWatchEvent(
        std::string(R"({"type":")") + word +
        R"(","object":{"metadata":{"name":"a","resourceVersion":"7"}}})");
    ASSERT_TRUE(e) << e.error();
    EXPECT_EQ(e->type, type);
    EXPECT_EQ(e->object["metadata"]["name"], "a");
  }
}

TEST(ParseWatchEvent, Bookmark) {
  auto e = ParseWatchEvent(
      R"({"type":"BOOKMARK","object":{"kind":"Job","apiVersion":"batch/v1","metadata":{"resourceVersion":"12345","annotations":{"k8s.io/initial-events-end":"true"}}}})");
  ASSERT_TRUE(e) << e.error();
  EXPECT_EQ(e->type, Type::kBookmark);
  EXPECT_EQ(e->object["metadata"]["resourceVersion"], "12345");
}

TEST(ParseWatchEvent, GoneErrorEvent) {
  auto e = ParseWatchEvent(
      R"json({"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"too old resource version: 1 (2)","reason":"Expired","code":410}})json");
  ASSERT_TRUE(e) << e.error();
  EXPECT_EQ(e->type, Type::kError);
  EXPECT_EQ(e->error_code, 410);
  EXPECT_EQ(e->error_message, "too old resource version: 1 (2)");
}

TEST(ParseWatchEvent, RejectsGarbage) {
  EXPECT_FALSE(ParseWatchEvent("not json"));
  const auto shrug = ParseWatchEvent(R"({"type":"SHRUG","object":{}})");
  ASSERT_FALSE(shrug);
  EXPECT_NE(shrug.error().find("SHRUG"), std::string::npos);
  EXPECT_FALSE(ParseWatchEvent(R"({"type":"ADDED","object":{"metadata":{}}})"));
}

TEST(LineBuffer, ReassemblesLinesAcrossChunks) {
  LineBuffer b;
  b.Append("{\"a\":");
  EXPECT_FALSE(b.NextLine());
  b.Append("1}\n{\"b\"");
  auto line = b.NextLine();
  ASSERT_TRUE(line);
  EXPECT_EQ(*line, "{\"a\":1}");
  EXPECT_FALSE(b.NextLine());
  b.Append(":2}\r\n");
  line = b.NextLine();
  ASSERT_TRUE(line);
  EXPECT_EQ(*line, "{\"b\":2}");
}

TEST(Backoff, GrowsToTheCeilingAndResets) {
  Backoff b(std::chrono::milliseconds(100), std::chrono::milliseconds(1000));
  std::chrono::milliseconds last{};
  for (int i = 0; i < 10; ++i) last = b.Next();
  EXPECT_GE(last.count(), 500);
  EXPECT_LE(last.count(), 1000);
  b.Reset();
  EXPECT_LE(b.Next().count(), 100);
}

TEST(ObjectStore, IndexesByControllerOwnerAndReplaces) {
  ObjectStore store;
  auto obj = [](std::string name, std::string owner) {
    return json{{"metadata",
                 {{"namespace", "ns"},
                  {"name", name},
                  {"ownerReferences",
                   json::array({{{"uid", owner}, {"controller", true}}})}}}};
  };
  store.Upsert(obj("a", "u1"));
  store.Upsert(obj("b", "u2"));
  EXPECT_EQ(store.ByIndex("u1").size(), 1u);
  store.Upsert(obj("a", "u2"));  // owner changed
  EXPECT_TRUE(store.ByIndex("u1").empty());
  EXPECT_EQ(store.ByIndex("u2").size(), 2u);
  auto gone = store.Replace({obj("b", "u2")});
  EXPECT_EQ(gone, std::vector<std::string>{"ns/a"});
  EXPECT_FALSE(store.Get("ns/a"));
  EXPECT_EQ(store.ByIndex("u2").size(), 1u);
}

TEST(ControllerOwnerName, OnlyTheControllerOfThatKind) {
  json o = json::parse(R"({"metadata":{"ownerReferences":[
      {"kind":"MiniCluster","name":"x","controller":false},
      {"kind":"MiniCluster","name":"y","controller":true}]}})");
  EXPECT_EQ(ControllerOwnerName(o, "MiniCluster"), "y");
  EXPECT_EQ(ControllerOwnerName(o, "Job"), "");
}

TEST(WorkQueue, DeduplicatesWaitingKeys) {
  WorkQueue q;
  q.Add("a");
  q.Add("b");
  q.Add("a");
  EXPECT_EQ(q.Len(), 2u);
  EXPECT_EQ(*q.Get(), "a");
  EXPECT_EQ(*q.Get(), "b");
}

TEST(WorkQueue, KeyAddedWhileProcessingComesBackAfterDone) {
  WorkQueue q;
  q.Add("a");
  auto key = q.Get();
  q.Add("a");
  EXPECT_EQ(q.Len(), 0u);  // not handed to a second worker meanwhile
  q.Done(*key);
  EXPECT_EQ(q.Len(), 1u);
  EXPECT_EQ(*q.Get(), "a");
}

TEST(WorkQueue, RateLimitedDelaysGrowAndForgetResets) {
  WorkQueue q(std::chrono::milliseconds(10), std::chrono::milliseconds(1000));
  EXPECT_EQ(q.AddRateLimited("a").count(), 10);
  EXPECT_EQ(q.AddRateLimited("a").count(), 20);
  EXPECT_EQ(q.AddRateLimited("a").count(), 40);
  q.Forget("a");
  EXPECT_EQ(q.AddRateLimited("a").count(), 10);
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(*q.Get(), "a");
  EXPECT_GE(std::chrono::steady_clock::now() - start,
            std::chrono::milliseconds(5));
}

TEST(WorkQueue, ShutDownWakesWaitingWorkers) {
  WorkQueue q;
  std::thread worker([&] { EXPECT_FALSE(q.Get()); });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  q.ShutDown();
  worker.join();
}

}  // namespace
}  // namespace fcc::kube
