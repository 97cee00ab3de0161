// VolumeCount and the mount-table scan it starts from: pure, no root.
#include "driver/volume_count.h"

#include <gtest/gtest.h>
#include <sys/sysmacros.h>

#include <string>
#include <vector>

namespace fcc::driver {
namespace {

constexpr char kPod1[] = "6f1c2d3e-0000-4000-8000-000000000001";
constexpr char kPod2[] = "6f1c2d3e-0000-4000-8000-000000000002";

std::string Target(const std::string& pod, const std::string& volume = "curve",
                   const std::string& kubelet_dir = "/var/lib/kubelet") {
  return kubelet_dir + "/pods/" + pod + "/volumes/kubernetes.io~csi/" + volume +
         "/mount";
}

std::string Line(int id, const std::string& mount_point,
                 const std::string& source = "curve.minicluster.dev",
                 const std::string& super = "ro,size=16k,nr_inodes=8,mode=500",
                 const std::string& fs_type = "tmpfs") {
  return std::to_string(id) + " 30 0:" + std::to_string(id) + " / " +
         mount_point + " ro,nosuid,nodev,noexec,relatime shared:7 - " +
         fs_type + " " + source + " " + super + "\n";
}

TEST(DriverVolumesInTest, FindsOnlyTheDriversVolumesInKubeletsLayout) {
  const std::string table =
      "22 1 0:21 / / rw,relatime - overlay overlay rw,lowerdir=/a\n" +
      Line(40, Target(kPod1)) +
      // Stacked at the same target: still one volume.
      Line(41, Target(kPod1)) + Line(42, Target(kPod1, "second")) +
      Line(43, Target(kPod2)) +
      // Another source, another inode count, another type: not ours.
      Line(44, Target(kPod2, "a"), "tmpfs") +
      Line(45, Target(kPod2, "b"), "curve.minicluster.dev",
           "rw,size=16k,nr_inodes=80,mode=500") +
      Line(46, Target(kPod2, "c"), "curve.minicluster.dev", "rw,nr_inodes=8",
           "ramfs") +
      // Ours by shape, but not under this driver's --kubelet-dir.
      Line(47, Target(kPod2, "curve", "/other/kubelet")) +
      Line(48, "/tmp/scratch/mount") +
      // A truncated line is skipped, not misread.
      "49 30 0:49 / /var/lib/kubelet/pods\n";
  const std::vector<MountedVolume> want = {{Target(kPod1), kPod1},
                                           {Target(kPod1, "second"), kPod1},
                                           {Target(kPod2), kPod2}};
  EXPECT_EQ(DriverVolumesIn(table, "/var/lib/kubelet"), want);
}

TEST(DriverVolumesInTest, UnescapesTheMountPoint) {
  // mountinfo writes a space in a path as \040.
  const std::string dir = "/srv/kube let";
  const std::string escaped = "/srv/kube\\040let";
  const std::vector<MountedVolume> want = {
      {Target(kPod1, "curve", dir), kPod1}};
  EXPECT_EQ(DriverVolumesIn(Line(40, Target(kPod1, "curve", escaped)), dir),
            want);
}

TEST(VolumeCountTest, PerPodCapNamesTheFlag) {
  VolumeCount count({.per_pod = 1, .per_node = 10});
  auto first = count.Reserve(Target(kPod1), kPod1);
  ASSERT_TRUE(first.has_value());
  first->Keep();
  auto second = count.Reserve(Target(kPod1, "second"), kPod1);
  ASSERT_FALSE(second.has_value());
  EXPECT_NE(second.error().find("--max-volumes-per-pod=1"), std::string::npos)
      << second.error();
  EXPECT_NE(second.error().find(kPod1), std::string::npos) << second.error();
  // The same target again is no new volume; another pod has its own cap.
  EXPECT_TRUE(count.Reserve(Target(kPod1), kPod1).has_value());
  EXPECT_TRUE(count.Reserve(Target(kPod2), kPod2).has_value());
  EXPECT_EQ(count.GetStats().volumes, 1u);
}

TEST(VolumeCountTest, NodeCapNamesTheFlagAndFreesOnForget) {
  VolumeCount count({.per_pod = 2, .per_node = 2});
  count.Adopt({{Target(kPod1), kPod1}, {Target(kPod1), kPod1}});
  EXPECT_EQ(count.GetStats().volumes, 1u);  // adopted once
  count.Reserve(Target(kPod2), kPod2)->Keep();
  auto third = count.Reserve(Target(kPod2, "second"), kPod2);
  ASSERT_FALSE(third.has_value());
  EXPECT_NE(third.error().find("--max-volumes-per-node=2"), std::string::npos)
      << third.error();
  count.Forget(Target(kPod1));
  count.Forget(Target(kPod1));  // unknown now: ignored
  EXPECT_TRUE(count.Reserve(Target(kPod2, "second"), kPod2).has_value());
}

TEST(VolumeCountTest, AReservationNotKeptIsGivenBack) {
  VolumeCount count({.per_pod = 1, .per_node = 1});
  {
    auto failed_publish = count.Reserve(Target(kPod1), kPod1);
  }
  EXPECT_EQ(count.GetStats().volumes, 0u);
  EXPECT_EQ(count.GetStats().pods, 0u);
  auto next = count.Reserve(Target(kPod2), kPod2);
  ASSERT_TRUE(next.has_value());
  next->Keep();
  EXPECT_EQ(count.GetStats().volumes, 1u);
}

// A pod's view does not use up its cert, nor a cert its view; both count
// against the node.
TEST(VolumeCountTest, OneViewPerPodBesideItsCertWithinTheNodeCap) {
  VolumeCount count({.per_pod = 1, .per_node = 3});
  count.Reserve(Target(kPod1), kPod1)->Keep();
  auto view = count.Reserve(Target(kPod1, "view"), kPod1, VolumeKind::kView);
  ASSERT_TRUE(view.has_value()) << view.error();
  view->Keep();
  auto second =
      count.Reserve(Target(kPod1, "view-2"), kPod1, VolumeKind::kView);
  ASSERT_FALSE(second.has_value());
  EXPECT_NE(second.error().find("view volume"), std::string::npos)
      << second.error();
  count.Reserve(Target(kPod2, "view"), kPod2, VolumeKind::kView)->Keep();
  auto past_node = count.Reserve(Target(kPod2), kPod2);
  ASSERT_FALSE(past_node.has_value());
  EXPECT_NE(past_node.error().find("--max-volumes-per-node=3"),
            std::string::npos)
      << past_node.error();
  count.Forget(Target(kPod1, "view"));
  EXPECT_EQ(count.GetStats().volumes, 2u);
  EXPECT_EQ(count.GetStats().pods, 2u);
  EXPECT_TRUE(count.Reserve(Target(kPod1, "view-2"), kPod1, VolumeKind::kView)
                  .has_value());
}

// Binds of the view store's device at kubelet's targets, whatever their
// source: the candidates for view volumes.
TEST(MountsOfDevicesInTest, FindsMountsOfTheStoresDeviceAtKubeletsTargets) {
  const std::string mountinfo =
      "50 30 8:1 /store/flux@0123 " + Target(kPod1, "view") +
      " ro,nosuid,nodev,relatime shared:9 - ext4 /dev/sda1 rw\n" +
      "51 30 8:1 /store/flux@0123 " + Target(kPod1, "view") +
      " ro,nosuid,nodev,relatime shared:9 - ext4 /dev/sda1 rw\n" +
      "52 30 8:2 /other " + Target(kPod2, "view") +
      " rw,relatime - ext4 /dev/sda2 rw\n" +
      "53 30 8:1 /store/flux@0123 /mnt/elsewhere ro - ext4 /dev/sda1 rw\n";
  const std::vector<MountedVolume> want = {
      {Target(kPod1, "view"), kPod1, VolumeKind::kView}};
  EXPECT_EQ(MountsOfDevicesIn(mountinfo, "/var/lib/kubelet", {makedev(8, 1)}),
            want);
}

}  // namespace
}  // namespace fcc::driver
