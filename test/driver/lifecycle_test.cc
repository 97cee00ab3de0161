// Kubelet-like lifecycle over the real unix socket with real mounts: every
// assertion is on what the kernel holds (mountinfo, stat, file bytes).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <functional>
#include <sstream>

#include "csi_client.h"
#include "curve/cert_file.h"
#include "curve/minicluster_cert.h"
#include "driver_process.h"
#include "driver_test_env.h"
#include "mount_env.h"

namespace fcc::testing {
namespace {

// What a test (not the driver) mounts, so it can be told apart.
constexpr char kForeignSource[] = "fcc-test-foreign";

// Mounts a tmpfs that is not a volume of the driver's at `target`
// (creating the directory).
void MountForeignTmpfs(const std::string& target) {
  std::filesystem::create_directories(target);
  ASSERT_EQ(
      mount(kForeignSource, target.c_str(), "tmpfs", 0, "size=64k,mode=0755"),
      0)
      << strerror(errno);
}
// Mounts a tmpfs of the driver's shape (its source, 8 inodes) at `target`:
// one of its own volumes, damaged or half-made.
constexpr char kDriverLikeOptions[] = "size=64k,nr_inodes=8,mode=0755";
void MountDriverLikeTmpfs(const std::string& target) {
  std::filesystem::create_directories(target);
  ASSERT_EQ(mount("curve.minicluster.dev", target.c_str(), "tmpfs", 0,
                  kDriverLikeOptions),
            0)
      << strerror(errno);
}
void RemountReadOnly(const std::string& target) {
  ASSERT_EQ(mount("curve.minicluster.dev", target.c_str(), "tmpfs",
                  MS_REMOUNT | MS_RDONLY, kDriverLikeOptions),
            0)
      << strerror(errno);
}
void WriteFile(const std::string& path, const std::string& bytes, mode_t mode) {
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL, 0600);
  ASSERT_GE(fd, 0) << path << ": " << strerror(errno);
  ASSERT_EQ(write(fd, bytes.data(), bytes.size()),
            static_cast<ssize_t>(bytes.size()));
  ASSERT_EQ(fchmod(fd, mode), 0);
  close(fd);
}

class LifecycleTest : public DriverTest {
 protected:
  // The bytes every node writes for `name` in the pod's namespace.
  std::string ExpectedCert(const std::string& name,
                           const std::string& generation = "") const {
    const auto cert =
        curve::MakeMiniClusterCert(curve::Secret(master_key_bytes_),
                                   {pod_.namespace_name, name, generation});
    return std::string(cert.text.reveal());
  }

  // Exactly one driver-made, read-only, size-limited tmpfs at `target`
  // holding `expected_cert` with mode 0400 owned by uid:gid.
  void ExpectHealthyVolume(const std::string& target,
                           const std::string& expected_cert, uid_t uid = 0,
                           gid_t gid = 0) {
    ASSERT_EQ(MountCountAt(target), 1) << "mounts stacked at " << target;
    const auto mounts = MountsUnder(target);
    ASSERT_EQ(mounts.size(), 1u);
    const MountEntry& m = mounts[0];
    EXPECT_EQ(m.fs_type, "tmpfs");
    EXPECT_EQ(m.source, "curve.minicluster.dev");
    for (const char* flag : {"ro", "nosuid", "nodev", "noexec"}) {
      EXPECT_TRUE(HasToken(m.options, flag)) << flag << " not in " << m.options;
    }
    EXPECT_TRUE(HasToken(m.super_options, "ro")) << m.super_options;
    EXPECT_TRUE(HasToken(m.super_options, "size=16k")) << m.super_options;
    // Keys stay out of swap wherever tmpfs can say so (Linux 6.4+).
    EXPECT_EQ(HasToken(m.super_options, "noswap"), KernelAtLeast(6, 4))
        << m.super_options;

    const std::string cert_path = target + "/curve.cert";
    struct stat st{};
    ASSERT_EQ(lstat(cert_path.c_str(), &st), 0) << cert_path;
    EXPECT_TRUE(S_ISREG(st.st_mode));
    EXPECT_EQ(st.st_mode & 07777, 0400u);
    EXPECT_EQ(st.st_uid, uid);
    EXPECT_EQ(st.st_gid, gid);
    EXPECT_EQ(ReadFileOrEmpty(cert_path), expected_cert);
    auto parsed = curve::LoadCertFile(cert_path);
    EXPECT_TRUE(parsed) << parsed.error();
  }

  grpc::Status Publish(const std::map<std::string, std::string>& attrs) {
    return client_->Publish(KubeletPublishRequest(pod_, attrs));
  }
  grpc::Status Unpublish() {
    return client_->Unpublish(KubeletVolumeId(pod_), KubeletTargetPath(pod_));
  }
};

TEST_F(LifecycleTest, PublishTwiceUnpublishTwice) {
  const auto request = KubeletPublishRequest(
      pod_, {{"minicluster", "lammps"}, {"owner", "1000:1000"}});
  const std::string target = KubeletTargetPath(pod_);

  auto status = client_->Publish(request);
  ASSERT_TRUE(status.ok()) << status.error_message();
  ASSERT_NO_FATAL_FAILURE(
      ExpectHealthyVolume(target, ExpectedCert("lammps"), 1000, 1000));
  auto cert = curve::LoadCertFile(target + "/curve.cert");
  ASSERT_TRUE(cert) << cert.error();
  EXPECT_EQ(cert->metadata.at("name"), "default.lammps");

  status = client_->Publish(request);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(MountCountAt(target), 1) << "a second publish stacked a mount";

  status = client_->Unpublish(request.volume_id(), target);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(MountCountAt(target), 0);
  EXPECT_FALSE(PathExists(target));

  status = client_->Unpublish(request.volume_id(), target);
  EXPECT_TRUE(status.ok()) << status.error_message();
  EXPECT_FALSE(PathExists(target));
}

// CTest runs this suite twice: as is (the driver picks fsmount on this
// kernel) and with MOUNT_API=mount in the environment the driver inherits,
// for kernels without fsopen. Each pass proves it exercised the path it
// claims to, so the mount(2) pass cannot silently test fsmount again.
// The process holds the master key, so it never writes a core file. (Its
// PR_SET_DUMPABLE=0 cannot be seen from outside a root process.)
TEST_F(LifecycleTest, DriverNeverDumpsCore) {
  const std::string limits =
      ReadFileOrEmpty("/proc/" + std::to_string(driver_->pid()) + "/limits");
  const size_t line = limits.find("Max core file size");
  ASSERT_NE(line, std::string::npos) << limits;
  std::istringstream fields(limits.substr(line + 18));
  std::string soft, hard;
  fields >> soft >> hard;
  EXPECT_EQ(soft, "0") << limits;
  EXPECT_EQ(hard, "0") << limits;
}

TEST_F(LifecycleTest, UsesTheMountApiItWasGiven) {
  const MountApiLog api = ExpectedMountApiLog();
  const std::string log_text = log();
  EXPECT_NE(log_text.find(api.expected), std::string::npos) << log_text;
  EXPECT_EQ(log_text.find(api.other), std::string::npos) << log_text;
  ASSERT_TRUE(
      Publish({{"minicluster", "lammps"}, {"owner", "1000:1000"}}).ok());
  ASSERT_NO_FATAL_FAILURE(ExpectHealthyVolume(
      KubeletTargetPath(pod_), ExpectedCert("lammps"), 1000, 1000));
  EXPECT_TRUE(Unpublish().ok());
}

TEST_F(LifecycleTest, UnpublishOfAPathThatNeverExistedIsOk) {
  KubeletPod ghost = pod_;
  ghost.uid = "00000000-dead-4000-8000-000000000000";  // no pod dir at all
  auto status =
      client_->Unpublish(KubeletVolumeId(ghost), KubeletTargetPath(ghost));
  EXPECT_TRUE(status.ok()) << status.error_message();

  // Parent present (kubelet made it), target itself never created.
  status = Unpublish();
  EXPECT_TRUE(status.ok()) << status.error_message();
  EXPECT_FALSE(PathExists(KubeletTargetPath(pod_)));
  EXPECT_TRUE(MountsUnder(root_->pods_dir()).empty());
}

TEST_F(LifecycleTest, UnpublishOfAPlainDirectoryRemovesIt) {
  const std::string target = KubeletTargetPath(pod_);
  ASSERT_TRUE(std::filesystem::create_directory(target));
  ASSERT_EQ(MountCountAt(target), 0);

  auto status = Unpublish();
  EXPECT_TRUE(status.ok()) << status.error_message();
  EXPECT_FALSE(PathExists(target));
  EXPECT_TRUE(PathExists(std::filesystem::path(target).parent_path()))
      << "the driver removed kubelet's parent directory";
}

TEST_F(LifecycleTest, PublishIntoAnExistingDirectory) {
  // csi-sanity (and some kubelets) create the target directory themselves.
  const std::string target = KubeletTargetPath(pod_);
  ASSERT_TRUE(std::filesystem::create_directory(target));

  auto status = Publish({{"minicluster", "lammps"}});
  ASSERT_TRUE(status.ok()) << status.error_message();
  ASSERT_NO_FATAL_FAILURE(ExpectHealthyVolume(target, ExpectedCert("lammps")));

  status = Unpublish();
  EXPECT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(MountCountAt(target), 0);
  EXPECT_FALSE(PathExists(target));
}

TEST_F(LifecycleTest, UnpublishRemovesEveryStackedMount) {
  const std::string target = KubeletTargetPath(pod_);
  auto status = Publish({{"minicluster", "lammps"}});
  ASSERT_TRUE(status.ok()) << status.error_message();
  ASSERT_NO_FATAL_FAILURE(MountDriverLikeTmpfs(target));
  ASSERT_NO_FATAL_FAILURE(MountDriverLikeTmpfs(target));
  ASSERT_EQ(MountCountAt(target), 3);

  status = Unpublish();
  EXPECT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(MountCountAt(target), 0);
  EXPECT_FALSE(PathExists(target));
  EXPECT_TRUE(MountsUnder(root_->pods_dir()).empty());
}

TEST_F(LifecycleTest, PublishRepairsAMountStackedOnAHealthyVolume) {
  const std::string target = KubeletTargetPath(pod_);
  auto status = Publish({{"minicluster", "lammps"}});
  ASSERT_TRUE(status.ok()) << status.error_message();
  ASSERT_NO_FATAL_FAILURE(MountDriverLikeTmpfs(target));
  ASSERT_EQ(MountCountAt(target), 2);

  status = Publish({{"minicluster", "lammps"}});
  ASSERT_TRUE(status.ok()) << status.error_message();
  ASSERT_NO_FATAL_FAILURE(ExpectHealthyVolume(target, ExpectedCert("lammps")));
}

// One of the driver's own volumes left damaged or half-made (a driver killed
// mid-publish with mount(2), or a volume tampered with by root): publish
// must end with exactly one healthy volume.
struct Damage {
  const char* name;
  std::function<void(const std::string& target, const std::string& cert)> make;
};

void PrintTo(const Damage& damage, std::ostream* os) { *os << damage.name; }

class DamagedTargetTest : public LifecycleTest,
                          public ::testing::WithParamInterface<Damage> {};

TEST_P(DamagedTargetTest, PublishRepairsIt) {
  const std::string target = KubeletTargetPath(pod_);
  const std::string cert = ExpectedCert("lammps");
  ASSERT_NO_FATAL_FAILURE(GetParam().make(target, cert));
  ASSERT_EQ(MountCountAt(target), 1) << "the damage was not set up";

  auto status = Publish({{"minicluster", "lammps"}});
  ASSERT_TRUE(status.ok()) << status.error_message();
  ASSERT_NO_FATAL_FAILURE(ExpectHealthyVolume(target, cert));

  status = Unpublish();
  EXPECT_TRUE(status.ok()) << status.error_message();
  EXPECT_TRUE(MountsUnder(root_->pods_dir()).empty());
  EXPECT_FALSE(PathExists(target));
}

INSTANTIATE_TEST_SUITE_P(
    Damages, DamagedTargetTest,
    ::testing::Values(
        Damage{"EmptyWritableTmpfs",
               [](const std::string& t, const std::string&) {
                 MountDriverLikeTmpfs(t);
               }},
        Damage{"EmptyReadOnlyTmpfs",
               [](const std::string& t, const std::string&) {
                 MountDriverLikeTmpfs(t);
                 RemountReadOnly(t);
               }},
        Damage{"HalfMadeDriverMount",  // killed between mount and write
               [](const std::string& t, const std::string&) {
                 std::filesystem::create_directories(t);
                 ASSERT_EQ(mount("curve.minicluster.dev", t.c_str(), "tmpfs",
                                 MS_NOSUID | MS_NODEV | MS_NOEXEC,
                                 "size=16k,nr_inodes=8,mode=0500"),
                           0);
               }},
        Damage{"WritableTmpfsWithTheRightCert",
               [](const std::string& t, const std::string& cert) {
                 MountDriverLikeTmpfs(t);
                 WriteFile(t + "/curve.cert", cert, 0400);
               }},
        Damage{"GroupReadableCert",
               [](const std::string& t, const std::string& cert) {
                 MountDriverLikeTmpfs(t);
                 WriteFile(t + "/curve.cert", cert, 0440);
                 RemountReadOnly(t);
               }},
        Damage{"TruncatedCert",
               [](const std::string& t, const std::string& cert) {
                 MountDriverLikeTmpfs(t);
                 WriteFile(t + "/curve.cert", cert.substr(0, cert.size() / 2),
                           0400);
                 RemountReadOnly(t);
               }},
        Damage{"GarbageCert",
               [](const std::string& t, const std::string&) {
                 MountDriverLikeTmpfs(t);
                 WriteFile(t + "/curve.cert", "garbage\n", 0400);
                 RemountReadOnly(t);
               }},
        Damage{"CertIsADirectory",
               [](const std::string& t, const std::string&) {
                 MountDriverLikeTmpfs(t);
                 ASSERT_EQ(mkdir((t + "/curve.cert").c_str(), 0700), 0);
                 RemountReadOnly(t);
               }}),
    [](const auto& info) { return std::string(info.param.name); });

// The driver unmounts only its own volumes: a mount it did not make, at the
// target or on top of its volume, is FAILED_PRECONDITION for publish and
// unpublish alike, and stays mounted.
TEST_F(LifecycleTest, AForeignMountIsLeftAlone) {
  const std::string target = KubeletTargetPath(pod_);
  ASSERT_NO_FATAL_FAILURE(MountForeignTmpfs(target));
  ASSERT_NO_FATAL_FAILURE(WriteFile(target + "/data", "theirs\n", 0644));
  auto status = Publish({{"minicluster", "lammps"}});
  EXPECT_EQ(status.error_code(), grpc::StatusCode::FAILED_PRECONDITION)
      << status.error_message();
  EXPECT_NE(status.error_message().find("not a curve.minicluster.dev volume"),
            std::string::npos)
      << status.error_message();
  status = Unpublish();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::FAILED_PRECONDITION)
      << status.error_message();
  EXPECT_EQ(MountCountAt(target), 1);
  EXPECT_EQ(ReadFileOrEmpty(target + "/data"), "theirs\n");
  ASSERT_EQ(umount(target.c_str()), 0) << strerror(errno);

  // On top of a published volume: neither is unmounted.
  ASSERT_TRUE(Publish({{"minicluster", "lammps"}}).ok());
  ASSERT_NO_FATAL_FAILURE(MountForeignTmpfs(target));
  status = Unpublish();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::FAILED_PRECONDITION)
      << status.error_message();
  EXPECT_EQ(MountCountAt(target), 2);
  ASSERT_EQ(umount(target.c_str()), 0) << strerror(errno);
  status = Unpublish();
  EXPECT_TRUE(status.ok()) << status.error_message();
  EXPECT_TRUE(MountsUnder(root_->pods_dir()).empty());
}

TEST_F(LifecycleTest, AnotherMiniClustersVolumeIsAlreadyExistsAndUntouched) {
  const std::string target = KubeletTargetPath(pod_);
  auto status = Publish({{"minicluster", "alpha"}});
  ASSERT_TRUE(status.ok()) << status.error_message();
  const std::string cert = ExpectedCert("alpha");
  ASSERT_NO_FATAL_FAILURE(ExpectHealthyVolume(target, cert));
  struct stat before{};
  ASSERT_EQ(stat(target.c_str(), &before), 0);

  const std::map<std::string, std::string> incompatible[] = {
      {{"minicluster", "beta"}},
      {{"minicluster", "alpha"}, {"generation", "uid-2"}},
      {{"minicluster", "alpha"}, {"owner", "1000"}},
  };
  for (const auto& attrs : incompatible) {
    SCOPED_TRACE(::testing::PrintToString(attrs));
    status = Publish(attrs);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::ALREADY_EXISTS)
        << status.error_message();
    EXPECT_NE(status.error_message().find(target), std::string::npos)
        << status.error_message();
    struct stat after{};
    ASSERT_EQ(stat(target.c_str(), &after), 0);
    EXPECT_EQ(after.st_dev, before.st_dev) << "the mount was replaced";
    ASSERT_NO_FATAL_FAILURE(ExpectHealthyVolume(target, cert));
  }

  status = Unpublish();
  EXPECT_TRUE(status.ok()) << status.error_message();
  EXPECT_TRUE(MountsUnder(root_->pods_dir()).empty());
}

TEST_F(LifecycleTest, VolumeIsReadOnlyEvenForRoot) {
  ASSERT_EQ(geteuid(), 0u);
  const std::string target = KubeletTargetPath(pod_);
  auto status = Publish({{"minicluster", "lammps"}});
  ASSERT_TRUE(status.ok()) << status.error_message();
  ASSERT_NO_FATAL_FAILURE(ExpectHealthyVolume(target, ExpectedCert("lammps")));
  ExpectUnwritableEvenForRoot(target);
  ASSERT_NO_FATAL_FAILURE(ExpectHealthyVolume(target, ExpectedCert("lammps")));
}

struct OwnerCase {
  const char* name;
  const char* owner;  // nullptr: attribute absent
  uid_t uid;
  gid_t gid;
};

void PrintTo(const OwnerCase& c, std::ostream* os) { *os << c.name; }

class OwnerTest : public LifecycleTest,
                  public ::testing::WithParamInterface<OwnerCase> {};

TEST_P(OwnerTest, CertIsOwnedAsTheAttributeSays) {
  std::map<std::string, std::string> attrs = {{"minicluster", "lammps"}};
  if (GetParam().owner != nullptr) attrs["owner"] = GetParam().owner;
  const std::string target = KubeletTargetPath(pod_);
  auto status = Publish(attrs);
  ASSERT_TRUE(status.ok()) << status.error_message();
  ASSERT_NO_FATAL_FAILURE(ExpectHealthyVolume(target, ExpectedCert("lammps"),
                                              GetParam().uid, GetParam().gid));
  // The volume root belongs to the owner too, and only they may list it.
  struct stat st{};
  ASSERT_EQ(stat(target.c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, GetParam().uid);
  EXPECT_EQ(st.st_gid, GetParam().gid);
  EXPECT_EQ(st.st_mode & 07777, 0500u);

  status = Unpublish();
  EXPECT_TRUE(status.ok()) << status.error_message();
}

INSTANTIATE_TEST_SUITE_P(
    Owners, OwnerTest,
    ::testing::Values(OwnerCase{"Default", nullptr, 0, 0},
                      OwnerCase{"Uid", "1000", 1000, 1000},
                      OwnerCase{"UidGid", "1000:2000", 1000, 2000},
                      OwnerCase{"Nobody", "65534:65534", 65534, 65534}),
    [](const auto& info) { return std::string(info.param.name); });

TEST_F(LifecycleTest, RestartAfterKill9KeepsServingMountedVolumes) {
  KubeletPod other = pod_;
  other.uid = "6f1c2d3e-0000-4000-8000-0000000000b2";
  other.name = "lammps-1";
  KubeletPrepareParent(other);
  const std::string target = KubeletTargetPath(pod_);
  const std::string other_target = KubeletTargetPath(other);
  const std::string cert = ExpectedCert("lammps");

  auto status = Publish({{"minicluster", "lammps"}});
  ASSERT_TRUE(status.ok()) << status.error_message();
  status = client_->Publish(
      KubeletPublishRequest(other, {{"minicluster", "lammps"}}));
  ASSERT_TRUE(status.ok()) << status.error_message();

  driver_->Kill9();
  ASSERT_TRUE(PathExists(socket_path())) << "kill -9 should leave the socket";
  // The volumes outlive the driver: pods keep their cert.
  ASSERT_NO_FATAL_FAILURE(ExpectHealthyVolume(target, cert));
  ASSERT_NO_FATAL_FAILURE(ExpectHealthyVolume(other_target, cert));

  ASSERT_NO_FATAL_FAILURE(StartDriver());  // same socket path, stale socket
  EXPECT_NE(log().find("removed stale socket"), std::string::npos);

  status = Publish({{"minicluster", "lammps"}});
  ASSERT_TRUE(status.ok()) << status.error_message();
  ASSERT_NO_FATAL_FAILURE(ExpectHealthyVolume(target, cert));

  status = Unpublish();
  EXPECT_TRUE(status.ok()) << status.error_message();
  // Mounted only by the driver that died: unpublished without a publish.
  status = client_->Unpublish(KubeletVolumeId(other), other_target);
  EXPECT_TRUE(status.ok()) << status.error_message();
  EXPECT_TRUE(MountsUnder(root_->pods_dir()).empty());
  EXPECT_FALSE(PathExists(target));
  EXPECT_FALSE(PathExists(other_target));
}

TEST_F(LifecycleTest, SecondDriverOnALiveSocketRefuses) {
  DriverProcess::Options options = DriverOptions();
  options.log_path = root_->log_path("node-a-second");
  DriverProcess second(options);
  const int rc = second.RunToExit(std::chrono::seconds(10));
  EXPECT_EQ(rc, kRefusedToStart) << "rc " << rc << " (-1: it did not exit)";
  EXPECT_NE(
      ReadFileOrEmpty(options.log_path).find("another process is serving"),
      std::string::npos)
      << ReadFileOrEmpty(options.log_path);

  // The first driver is unharmed and still owns its socket.
  EXPECT_TRUE(PathExists(socket_path()));
  EXPECT_TRUE(client_->WaitReady(std::chrono::seconds(5)));
  auto status = Publish({{"minicluster", "lammps"}});
  EXPECT_TRUE(status.ok()) << status.error_message();
  status = Unpublish();
  EXPECT_TRUE(status.ok()) << status.error_message();
}

TEST_F(LifecycleTest, SigtermExitsZeroRemovesTheSocketKeepsVolumes) {
  const std::string target = KubeletTargetPath(pod_);
  auto status = Publish({{"minicluster", "lammps"}});
  ASSERT_TRUE(status.ok()) << status.error_message();
  ASSERT_TRUE(PathExists(socket_path()));

  EXPECT_EQ(driver_->Terminate(std::chrono::seconds(10)), 0) << log();
  EXPECT_FALSE(PathExists(socket_path()));
  EXPECT_NE(log().find("stopped"), std::string::npos);
  // A driver upgrade must not pull certs out from under running pods.
  ASSERT_NO_FATAL_FAILURE(ExpectHealthyVolume(target, ExpectedCert("lammps")));

  ASSERT_NO_FATAL_FAILURE(StartDriver());
  status = Unpublish();
  EXPECT_TRUE(status.ok()) << status.error_message();
  EXPECT_TRUE(MountsUnder(root_->pods_dir()).empty());
}

}  // namespace
}  // namespace fcc::testing
