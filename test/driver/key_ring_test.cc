// The master key ring as kubelet's Secret volume presents it: <id>.key
// files behind the ..data symlink, swapped by a rename; bad keys left out;
// the default key's certs unchanged; a missing id refused with the fix.
#include "driver/key_ring.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>

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

TEST(KeyRing, RefusesToOpenWithoutAUsableDefaultKey) {
  TempSecretVolume volume;
  volume.Update({{"k2.key", kSecond}});
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
