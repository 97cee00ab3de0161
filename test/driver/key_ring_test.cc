// The master key ring as kubelet's Secret volume presents it: <id>.key
// files behind the ..data symlink, swapped by a rename; bad keys left out;
// the default key's certs unchanged; a missing id refused with the fix.
#include "driver/key_ring.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "curve/minicluster_cert.h"
#include "driver/key_cache.h"
#include "secret_volume.h"

namespace fcc::driver {
namespace {

namespace fs = std::filesystem;

const std::string kMaster(64, 'm');
const std::string kSecond(48, 's');
const std::string kThird(32, 't');

// A Secret volume in a fresh temporary directory.
class TempSecretVolume : public testing::SecretVolume {
 public:
  TempSecretVolume() : SecretVolume(MakeTempDir()) {}
  ~TempSecretVolume() { fs::remove_all(dir()); }
  void Update(const std::map<std::string, std::string>& files,
              mode_t mode = 0400) {
    Write(files, mode);
  }

 private:
  static std::string MakeTempDir() {
    char tmpl[] = "/tmp/key-ring-test-XXXXXX";
    return mkdtemp(tmpl);
  }
};

// No file can be opened while one lives (open(2) fails with EMFILE), as
// when the driver runs out of descriptors.
class NoFreeDescriptors {
 public:
  NoFreeDescriptors() {
    getrlimit(RLIMIT_NOFILE, &saved_);
    rlimit none = saved_;
    none.rlim_cur = 0;
    setrlimit(RLIMIT_NOFILE, &none);
  }
  ~NoFreeDescriptors() { setrlimit(RLIMIT_NOFILE, &saved_); }
  NoFreeDescriptors(const NoFreeDescriptors&) = delete;
  NoFreeDescriptors& operator=(const NoFreeDescriptors&) = delete;

 private:
  rlimit saved_{};
};

// The default logger's lines, while one lives.
class CapturedLog {
 public:
  CapturedLog()
      : saved_(spdlog::default_logger()),
        sink_(std::make_shared<spdlog::sinks::ostream_sink_mt>(text_)) {
    spdlog::set_default_logger(std::make_shared<spdlog::logger>("test", sink_));
  }
  ~CapturedLog() { spdlog::set_default_logger(saved_); }
  CapturedLog(const CapturedLog&) = delete;
  CapturedLog& operator=(const CapturedLog&) = delete;
  std::string text() const { return text_.str(); }

 private:
  std::shared_ptr<spdlog::logger> saved_;
  std::ostringstream text_;
  std::shared_ptr<spdlog::sinks::ostream_sink_mt> sink_;
};

std::shared_ptr<KeyRing> OpenRing(const TempSecretVolume& volume) {
  auto ring =
      KeyRing::Open({.dir = volume.dir(), .file = "", .default_id = "master"});
  EXPECT_TRUE(ring) << ring.error();
  return ring ? *ring : nullptr;
}

TEST(KeyRing, LoadsEveryKeyAndFindsTheDefaultForNoId) {
  TempSecretVolume volume;
  volume.Update({{"master.key", kMaster}, {"k2.key", kSecond}});
  auto ring = OpenRing(volume);
  ASSERT_TRUE(ring);
  EXPECT_EQ(ring->Ids(), (std::vector<std::string>{"k2", "master"}));
  auto key = ring->Find("");
  ASSERT_TRUE(key) << key.error();
  EXPECT_EQ(key->id, "master");
  EXPECT_EQ(key->secret->reveal(), kMaster);
  key = ring->Find("k2");
  ASSERT_TRUE(key) << key.error();
  EXPECT_EQ(key->secret->reveal(), kSecond);
}

TEST(KeyRing, AMissingIdNamesTheIdWhatTheNodeHasAndTheFix) {
  TempSecretVolume volume;
  volume.Update({{"master.key", kMaster}, {"k2.key", kSecond}});
  auto ring = OpenRing(volume);
  ASSERT_TRUE(ring);
  auto key = ring->Find("k3");
  ASSERT_FALSE(key);
  EXPECT_NE(key.error().find("\"k3\""), std::string::npos) << key.error();
  EXPECT_NE(key.error().find("[k2, master]"), std::string::npos);
  EXPECT_NE(key.error().find("add k3.key to that Secret"), std::string::npos);
  EXPECT_EQ(key.error().find(kMaster.substr(0, 8)), std::string::npos);
}

TEST(KeyRing, BadKeysAreLeftOutAndTheOthersServe) {
  TempSecretVolume volume;
  volume.Update({{"master.key", kMaster},
                 {"short.key", "too short"},
                 {"Upper.key", kSecond},
                 {"notes.txt", "hello"}});
  // A FIFO where a key belongs must not hang the load.
  const std::string snapshot = volume.snapshot();
  ASSERT_EQ(mkfifo((snapshot + "/fifo.key").c_str(), 0400), 0);
  std::ofstream(snapshot + "/open.key") << kThird;
  chmod((snapshot + "/open.key").c_str(), 0644);
  auto ring = OpenRing(volume);
  ASSERT_TRUE(ring);
  EXPECT_EQ(ring->Ids(), (std::vector<std::string>{"master"}));
  EXPECT_TRUE(ring->Find("master"));
  EXPECT_FALSE(ring->Find("short"));
  EXPECT_FALSE(ring->Find("open"));
  EXPECT_FALSE(ring->Find("fifo"));
}

TEST(KeyRing, RefusesToOpenWithoutAnyUsableKey) {
  TempSecretVolume volume;
  volume.Update({{"notes.txt", kSecond}});
  auto ring =
      KeyRing::Open({.dir = volume.dir(), .file = "", .default_id = "master"});
  ASSERT_FALSE(ring);
  EXPECT_NE(ring.error().find("default master key \"master\""),
            std::string::npos)
      << ring.error();
  EXPECT_NE(ring.error().find("kubectl -n flux-curve-csi create secret"),
            std::string::npos);
  volume.Update({{"master.key", kMaster}}, 0440);
  EXPECT_FALSE(
      KeyRing::Open({.dir = volume.dir(), .file = "", .default_id = "master"}));
  EXPECT_FALSE(KeyRing::Open(
      {.dir = volume.dir() + "/absent", .file = "", .default_id = "master"}));
  EXPECT_FALSE(
      KeyRing::Open({.dir = volume.dir(), .file = "", .default_id = "Master"}));
}

// A driver restarted after master.key left the Secret must still serve, or
// no volume on its node (of any key) can be unpublished.
TEST(KeyRing, OpensWithoutTheDefaultKeyWhenAnotherKeyLoads) {
  TempSecretVolume volume;
  volume.Update({{"k2.key", kSecond}});
  CapturedLog log;
  auto ring = OpenRing(volume);
  ASSERT_TRUE(ring);
  EXPECT_TRUE(ring->Find("k2"));
  auto key = ring->Find("");
  ASSERT_FALSE(key);
  EXPECT_NE(key.error().find("the default master key \"master\""),
            std::string::npos)
      << key.error();
  EXPECT_NE(log.text().find("volumes without volumeAttributes.key-id cannot "
                            "be published on this node"),
            std::string::npos)
      << log.text();
}

// EMFILE (or ENOMEM, or a snapshot gone mid-read) is not a verdict on the
// keys: the ring keeps them, says so, and reads again at the next call.
TEST(KeyRing, AReloadThatCannotReadKeepsTheKeysAndIsRetried) {
  TempSecretVolume volume;
  volume.Update({{"master.key", kMaster}, {"k2.key", kSecond}});
  auto ring = OpenRing(volume);
  ASSERT_TRUE(ring);
  volume.Update(
      {{"master.key", kMaster}, {"k2.key", kSecond}, {"k3.key", kThird}});
  CapturedLog log;
  // UBSan's vptr check opens a pipe the first time it meets a type; the
  // log's formatter meets it here, not where no pipe can be opened.
  spdlog::info("before the descriptors run out");
  {
    NoFreeDescriptors no_fds;
    ring->Refresh();
    EXPECT_EQ(ring->Ids(), (std::vector<std::string>{"k2", "master"}));
  }
  EXPECT_NE(ring->ReloadError().find("Too many open files"), std::string::npos)
      << ring->ReloadError();
  EXPECT_NE(log.text().find("master keys not reloaded"), std::string::npos)
      << log.text();
  // Descriptors again: the next call reads the source it failed to read.
  auto key = ring->Find("k3");
  EXPECT_TRUE(key) << key.error();
  EXPECT_TRUE(ring->Find("k2"));
  EXPECT_EQ(ring->ReloadError(), "");
}

// kubelet swapping the volume during every read of one reload: the keys
// kept are those of the last snapshot read, under that snapshot's
// signature, so the next call still sees the newest one.
TEST(KeyRing, SwapsDuringEveryReadOfAReloadAreNotMissed) {
  TempSecretVolume volume;
  volume.Update({{"master.key", kMaster}});
  auto ring = OpenRing(volume);
  ASSERT_TRUE(ring);
  int swaps = 1;
  ring->SetAfterReadForTesting([&] {
    if (swaps > 3) return;
    volume.Update(
        {{"master.key", kMaster}, {fmt::format("k{}.key", ++swaps), kSecond}});
  });
  volume.Update({{"master.key", kMaster}, {"k1.key", kSecond}});
  ring->Refresh();  // reads k1, k2, k3 while they become k2, k3, k4
  EXPECT_EQ(swaps, 4);
  auto key = ring->Find("k4");
  EXPECT_TRUE(key) << key.error();
}

// An id is a name for bytes: new bytes under an old id (even one removed
// in between) are warned about, and new volumes get the new bytes' certs
// while the cert of a volume already mounted stays cached for it.
TEST(KeyCacheRing, AReusedKeyIdServesTheNewBytesAndIsWarnedAbout) {
  TempSecretVolume volume;
  volume.Update({{"master.key", kMaster}, {"k2.key", kSecond}});
  KeyCache cache(OpenRing(volume));
  const curve::MiniClusterId id{"default", "lammps", "uid-1"};
  auto cert = [&](const std::string& key) {
    return std::string(
        curve::MakeMiniClusterCert(curve::Secret(key), id).text.reveal());
  };
  EXPECT_EQ(cache.Acquire("v1", id, "k2").cert->text.reveal(), cert(kSecond));
  CapturedLog log;
  volume.Update({{"master.key", kMaster}});
  EXPECT_THROW(cache.Acquire("v2", id, "k2"), MissingKeyError);
  volume.Update({{"master.key", kMaster}, {"k2.key", kThird}});
  EXPECT_EQ(cache.Acquire("v3", id, "k2").cert->text.reveal(), cert(kThird));
  EXPECT_NE(log.text().find("master key \"k2\" changed its bytes"),
            std::string::npos)
      << log.text();
  // v1 keeps the cert it was published with, cached apart from v3's.
  EXPECT_EQ(cache.GetStats().miniclusters, 2u);
  EXPECT_EQ(cache.GetStats().volumes_by_key.at("k2"), 2u);
}

TEST(KeyRing, SeesKubeletsSwapWithoutBeingAsked) {
  TempSecretVolume volume;
  volume.Update({{"master.key", kMaster}});
  auto ring = OpenRing(volume);
  ASSERT_TRUE(ring);
  EXPECT_FALSE(ring->Find("k2"));
  volume.Update({{"master.key", kMaster}, {"k2.key", kSecond}});
  auto key = ring->Find("k2");
  ASSERT_TRUE(key) << key.error();
  EXPECT_EQ(key->secret->reveal(), kSecond);
  // Removed again: refused; the default stays.
  volume.Update({{"master.key", kMaster}});
  EXPECT_FALSE(ring->Find("k2"));
  EXPECT_TRUE(ring->Find(""));
}

TEST(KeyRing, APlainDirectoryReloadsWhenAFileIsAdded) {
  TempSecretVolume volume;  // no ..data: a hostPath directory
  const std::string master = volume.dir() + "/master.key";
  std::ofstream(master) << kMaster;
  chmod(master.c_str(), 0400);
  auto ring = OpenRing(volume);
  ASSERT_TRUE(ring);
  const std::string second = volume.dir() + "/k2.key";
  std::ofstream(second) << kSecond;
  chmod(second.c_str(), 0400);
  EXPECT_TRUE(ring->Find("k2"));
}

TEST(KeyCacheRing, TheDefaultKeysCertsAreThoseOfASingleMasterKey) {
  TempSecretVolume volume;
  volume.Update({{"master.key", kMaster}, {"k2.key", kSecond}});
  KeyCache cache(OpenRing(volume));
  const curve::MiniClusterId id{"default", "lammps", "uid-1"};
  const std::string before = std::string(
      curve::MakeMiniClusterCert(curve::Secret(kMaster), id).text.reveal());
  EXPECT_EQ(cache.Acquire("v1", id).cert->text.reveal(), before);
  EXPECT_EQ(cache.Acquire("v2", id, "master").cert->text.reveal(), before);
  const auto other = cache.Acquire("v3", id, "k2");
  EXPECT_EQ(
      other.cert->text.reveal(),
      curve::MakeMiniClusterCert(curve::Secret(kSecond), id).text.reveal());
  EXPECT_NE(other.cert->text.reveal(), before);
  const auto stats = cache.GetStats();
  EXPECT_EQ(stats.volumes_by_key.at("master"), 2u);
  EXPECT_EQ(stats.volumes_by_key.at("k2"), 1u);
  EXPECT_THROW(cache.Acquire("v4", id, "k3"), MissingKeyError);
  EXPECT_EQ(cache.GetStats().volumes, 3u);
}

}  // namespace
}  // namespace fcc::driver
