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

namespace fcc::driver {
namespace {

namespace fs = std::filesystem;

const std::string kMaster(64, 'm');
const std::string kSecond(48, 's');
const std::string kThird(32, 't');

// A directory laid out as kubelet's atomic writer lays out a Secret volume.
class SecretVolume {
 public:
  SecretVolume() {
    char tmpl[] = "/tmp/key-ring-test-XXXXXX";
    dir_ = mkdtemp(tmpl);
  }
  ~SecretVolume() { fs::remove_all(dir_); }
  const std::string& dir() const { return dir_; }

  // Writes a new snapshot of `files` (name → bytes, mode 0400) and swaps
  // ..data to it, then fixes the visible symlinks and drops the old one.
  void Update(const std::map<std::string, std::string>& files,
              mode_t mode = 0400) {
    const std::string snapshot = "..snap" + std::to_string(++version_);
    fs::create_directory(dir_ + "/" + snapshot);
    for (const auto& [name, bytes] : files) {
      const std::string path = dir_ + "/" + snapshot + "/" + name;
      std::ofstream(path) << bytes;
      chmod(path.c_str(), mode);
    }
    fs::create_symlink(snapshot, dir_ + "/..data_tmp");
    fs::rename(dir_ + "/..data_tmp", dir_ + "/..data");
    for (const auto& entry : fs::directory_iterator(dir_)) {
      const std::string name = entry.path().filename();
      if (name[0] != '.' && !files.contains(name)) fs::remove(entry.path());
    }
    for (const auto& [name, bytes] : files) {
      if (!fs::is_symlink(dir_ + "/" + name)) {
        fs::create_symlink("..data/" + name, dir_ + "/" + name);
      }
    }
    if (!previous_.empty()) fs::remove_all(dir_ + "/" + previous_);
    previous_ = snapshot;
  }

 private:
  std::string dir_;
  std::string previous_;
  int version_ = 0;
};

std::shared_ptr<KeyRing> OpenRing(const SecretVolume& volume) {
  auto ring =
      KeyRing::Open({.dir = volume.dir(), .file = "", .default_id = "master"});
  EXPECT_TRUE(ring) << ring.error();
  return ring ? *ring : nullptr;
}

TEST(KeyRing, LoadsEveryKeyAndFindsTheDefaultForNoId) {
  SecretVolume volume;
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
  SecretVolume volume;
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
  SecretVolume volume;
  volume.Update({{"master.key", kMaster},
                 {"short.key", "too short"},
                 {"Upper.key", kSecond},
                 {"notes.txt", "hello"}});
  // A FIFO where a key belongs must not hang the load.
  const std::string snapshot = fs::read_symlink(volume.dir() + "/..data");
  ASSERT_EQ(mkfifo((volume.dir() + "/" + snapshot + "/fifo.key").c_str(), 0400),
            0);
  std::ofstream(volume.dir() + "/" + snapshot + "/open.key") << kThird;
  chmod((volume.dir() + "/" + snapshot + "/open.key").c_str(), 0644);
  auto ring = OpenRing(volume);
  ASSERT_TRUE(ring);
  EXPECT_EQ(ring->Ids(), (std::vector<std::string>{"master"}));
  EXPECT_TRUE(ring->Find("master"));
  EXPECT_FALSE(ring->Find("short"));
  EXPECT_FALSE(ring->Find("open"));
  EXPECT_FALSE(ring->Find("fifo"));
}

TEST(KeyRing, RefusesToOpenWithoutAUsableDefaultKey) {
  SecretVolume volume;
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
  SecretVolume volume;
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
  SecretVolume volume;  // no ..data: a hostPath directory
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
  SecretVolume volume;
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
