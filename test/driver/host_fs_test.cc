// The tmpfs spec as the kernel gets it, and which HostFs each mount API makes
// (no root, no mounts).
#include "driver/host_fs.h"

#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

namespace fcc::driver {
namespace {

constexpr TmpfsSpec kVolume{.size_bytes = 16384,
                            .nr_inodes = 8,
                            .mode = 0500,
                            .uid = 1000,
                            .gid = 2000};

TEST(TmpfsSpecTest, MountDataIsTheVolumesOptionString) {
  EXPECT_EQ(TmpfsMountData(kVolume),
            "size=16384,nr_inodes=8,mode=0500,uid=1000,gid=2000");
}

TEST(TmpfsSpecTest, ParametersAreTheSameKeysInTheSameOrder) {
  const std::vector<std::pair<std::string, std::string>> expected = {
      {"size", "16384"},
      {"nr_inodes", "8"},
      {"mode", "0500"},
      {"uid", "1000"},
      {"gid", "2000"}};
  EXPECT_EQ(TmpfsParameters(kVolume), expected);
}

TEST(TmpfsSpecTest, ModeIsOctal) {
  TmpfsSpec spec = kVolume;
  spec.mode = 0750;
  EXPECT_EQ(TmpfsParameters(spec)[2].second, "0750");
}

TEST(LinuxHostFsTest, EachMountApiHasItsOwnHostFs) {
  EXPECT_EQ(MakeLinuxHostFs(MountApi::kFsmount)->api(), MountApi::kFsmount);
  EXPECT_EQ(MakeLinuxHostFs(MountApi::kMount)->api(), MountApi::kMount);
}

}  // namespace
}  // namespace fcc::driver
