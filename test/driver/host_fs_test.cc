// The tmpfs spec as the kernel gets it, and which HostFs each mount API makes
// (no root, no mounts).
#include "driver/host_fs.h"

#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

namespace fcc::driver {
namespace {

const TmpfsSpec kVolume{.size_bytes = 16384,
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

TEST(TmpfsSpecTest, NoswapIsAFlagAndAContextWithACommaIsQuoted) {
  TmpfsSpec spec = kVolume;
  spec.noswap = true;
  spec.selinux_context = "system_u:object_r:container_file_t:s0:c1,c2";
  EXPECT_EQ(TmpfsMountData(spec),
            "size=16384,nr_inodes=8,mode=0500,uid=1000,gid=2000,noswap,"
            "context=\"system_u:object_r:container_file_t:s0:c1,c2\"");
  const auto parameters = TmpfsParameters(spec);
  ASSERT_EQ(parameters.size(), 7u);
  EXPECT_EQ(parameters[5],
            std::make_pair(std::string("noswap"), std::string()));
  EXPECT_EQ(parameters[6].second, spec.selinux_context);  // fsconfig: bare
}

TEST(LinuxHostFsTest, EachMountApiHasItsOwnHostFs) {
  EXPECT_EQ(MakeLinuxHostFs(MountApi::kFsmount)->api(), MountApi::kFsmount);
  EXPECT_EQ(MakeLinuxHostFs(MountApi::kMount)->api(), MountApi::kMount);
}

}  // namespace
}  // namespace fcc::driver
