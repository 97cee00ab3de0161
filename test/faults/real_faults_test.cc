// Real fault conditions through the real driver (real mounts, inside the
// private mount namespace scripts/test provides): a full filesystem, a
// missing parent, a target replaced by a file or a symlink, the socket
// deleted or pre-existing, the master key replaced or removed while
// serving, and SIGTERM during publishes.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <thread>
#include <vector>

#include "real_env.h"

namespace fcc::testing {
namespace {

namespace fs = std::filesystem;

std::map<std::string, std::string> Attrs(const std::string& mc = "lammps") {
  return {{"minicluster", mc}};
}

void WriteText(const std::string& path, const std::string& text) {
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL, 0644);
  ASSERT_GE(fd, 0) << path << ": " << strerror(errno);
  ASSERT_EQ(write(fd, text.data(), text.size()),
            static_cast<ssize_t>(text.size()));
  close(fd);
}

using RealFaultTest = RealDriverTest;

// kubelet's filesystem is full (no inodes left): the target directory cannot
// be made. RESOURCE_EXHAUSTED, nothing left, and it works once space is
// freed. (ENOSPC inside the driver's own tmpfs cannot happen for real — a
// cert is ~250 bytes and --volume-size-bytes is at least 4096 — so that path
// is covered through FaultyHostFs in publisher_fault_test.)
TEST_F(RealFaultTest, FullKubeletFilesystemIsResourceExhaustedAndRecovers) {
  KubeletPod pod = Pod(1);
  const std::string target = KubeletTargetPath(pod);
  const std::string parent = fs::path(target).parent_path();
  ASSERT_EQ(mount("fcc-test-full", parent.c_str(), "tmpfs", 0,
                  "size=64k,nr_inodes=16,mode=0755"),
            0)
      << strerror(errno);
  int fillers = 0;
  while (fillers < 64) {
    const std::string f = parent + "/filler-" + std::to_string(fillers);
    const int fd = open(f.c_str(), O_WRONLY | O_CREAT | O_EXCL, 0600);
    if (fd < 0) {
      ASSERT_EQ(errno, ENOSPC) << strerror(errno);
      break;
    }
    close(fd);
    ++fillers;
  }
  ASSERT_LT(fillers, 64) << "could not fill the filesystem";

  auto status = client_->Publish(KubeletPublishRequest(pod, Attrs()));
  EXPECT_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED)
      << status.error_message();
  EXPECT_FALSE(Exists(target));
  EXPECT_EQ(MountCountAt(target), 0);

  ASSERT_EQ(unlink((parent + "/filler-0").c_str()), 0);
  status = client_->Publish(KubeletPublishRequest(pod, Attrs()));
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(InspectVolume(target, Cert("default", "lammps"), 0, 0).state,
            VolumeState::kHealthy);
  status = client_->Unpublish(KubeletVolumeId(pod), target);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_FALSE(Exists(target));
  EXPECT_EQ(umount2(parent.c_str(), 0), 0) << "a mount leaked below";
}

TEST_F(RealFaultTest, MissingParentIsFailedPreconditionAndCreatesNothing) {
  KubeletPod pod = Pod(2, "default", /*prepare=*/false);
  auto status = client_->Publish(KubeletPublishRequest(pod, Attrs()));
  EXPECT_EQ(status.error_code(), grpc::StatusCode::FAILED_PRECONDITION)
      << status.error_message();
  EXPECT_NE(status.error_message().find("parent"), std::string::npos);
  EXPECT_FALSE(Exists(root_->pods_dir() + "/" + pod.uid))
      << "the driver made kubelet's directories";
  EXPECT_TRUE(MountsUnder(root_->pods_dir()).empty());
  // Unpublish of it is still OK (pods must not hang Terminating).
  status = client_->Unpublish(KubeletVolumeId(pod), KubeletTargetPath(pod));
  EXPECT_TRUE(status.ok()) << status.error_message();
}

TEST_F(RealFaultTest, TargetReplacedByAFileIsRefusedAndUntouched) {
  KubeletPod pod = Pod(3);
  const std::string target = KubeletTargetPath(pod);
  ASSERT_NO_FATAL_FAILURE(WriteText(target, "someone else's data\n"));
  auto status = client_->Publish(KubeletPublishRequest(pod, Attrs()));
  EXPECT_EQ(status.error_code(), grpc::StatusCode::FAILED_PRECONDITION)
      << status.error_message();
  EXPECT_EQ(ReadFileOrEmpty(target), "someone else's data\n");
  EXPECT_TRUE(MountsUnder(root_->pods_dir()).empty());
  // Unpublish never deletes what the driver did not make: rmdir only.
  status = client_->Unpublish(KubeletVolumeId(pod), target);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::FAILED_PRECONDITION)
      << status.error_message();
  EXPECT_EQ(ReadFileOrEmpty(target), "someone else's data\n");
}

// A symlink at the target pointing outside kubelet's directory (to a
// directory, to a missing path, and to another pod's published volume) is
// never followed: nothing is mounted or written or removed there.
TEST_F(RealFaultTest, TargetReplacedBySymlinkIsNeverFollowed) {
  const std::string outside = root_->path() + "/outside";
  ASSERT_TRUE(fs::create_directory(outside));
  ASSERT_NO_FATAL_FAILURE(WriteText(outside + "/canary", "canary\n"));
  KubeletPod victim = Pod(40);
  const std::string victim_target = KubeletTargetPath(victim);
  ASSERT_TRUE(
      client_->Publish(KubeletPublishRequest(victim, Attrs("other"))).ok());
  const std::string victim_cert = Cert("default", "other");
  ASSERT_EQ(InspectVolume(victim_target, victim_cert, 0, 0).state,
            VolumeState::kHealthy);

  const std::string pointees[] = {outside, outside + "/not-yet", victim_target};
  for (const std::string& pointee : pointees) {
    SCOPED_TRACE(pointee);
    KubeletPod pod = Pod(41);
    const std::string target = KubeletTargetPath(pod);
    fs::create_symlink(pointee, target);

    auto status = client_->Publish(KubeletPublishRequest(pod, Attrs()));
    EXPECT_EQ(status.error_code(), grpc::StatusCode::FAILED_PRECONDITION)
        << status.error_message();
    EXPECT_TRUE(fs::is_symlink(target));
    EXPECT_EQ(MountCountAt(outside), 0);
    EXPECT_TRUE(MountsUnder(outside).empty());
    EXPECT_FALSE(Exists(outside + "/not-yet"));
    EXPECT_FALSE(Exists(outside + "/curve.cert"));
    EXPECT_EQ(ReadFileOrEmpty(outside + "/canary"), "canary\n");
    EXPECT_EQ(InspectVolume(victim_target, victim_cert, 0, 0).state,
              VolumeState::kHealthy);

    // The link is not the driver's either: left in place.
    status = client_->Unpublish(KubeletVolumeId(pod), target);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::FAILED_PRECONDITION)
        << status.error_message();
    EXPECT_TRUE(fs::is_symlink(target));
    fs::remove(target);
    EXPECT_TRUE(fs::is_directory(outside));
    EXPECT_EQ(ReadFileOrEmpty(outside + "/canary"), "canary\n");
    EXPECT_EQ(InspectVolume(victim_target, victim_cert, 0, 0).state,
              VolumeState::kHealthy)
        << "unpublish through a symlink touched another pod's volume";
  }
  EXPECT_TRUE(client_->Unpublish(KubeletVolumeId(victim), victim_target).ok());
  EXPECT_TRUE(MountsUnder(root_->pods_dir()).empty());
}

// Behaviour (documented in docs/internals/security.md): deleting the socket
// file does not stop the driver, but nobody can connect any more; in the
// DaemonSet the livenessprobe sidecar then fails and the container restarts,
// recreating the socket. Mounted volumes are untouched throughout, and SIGTERM
// still exits 0.
TEST_F(RealFaultTest, SocketDeletedWhileServing) {
  KubeletPod pod = Pod(5);
  const std::string target = KubeletTargetPath(pod);
  ASSERT_TRUE(client_->Publish(KubeletPublishRequest(pod, Attrs())).ok());
  const std::string socket_path = driver_->options().socket_path;
  ASSERT_EQ(unlink(socket_path.c_str()), 0);

  // A new connection fails (gRPC channels in this process would reuse the
  // existing connection, so connect(2) directly, as kubelet would anew).
  const int fd = socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, socket_path.c_str(), sizeof(addr.sun_path) - 1);
  errno = 0;
  EXPECT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), -1);
  EXPECT_EQ(errno, ENOENT) << strerror(errno);
  close(fd);
  EXPECT_TRUE(driver_->running());
  EXPECT_EQ(InspectVolume(target, Cert("default", "lammps"), 0, 0).state,
            VolumeState::kHealthy);

  EXPECT_EQ(Stop(), 0) << log();
  ASSERT_NO_FATAL_FAILURE(StartDriver());  // recreates the socket
  EXPECT_EQ(InspectVolume(target, Cert("default", "lammps"), 0, 0).state,
            VolumeState::kHealthy);
  ASSERT_TRUE(client_->Publish(KubeletPublishRequest(pod, Attrs())).ok());
  ASSERT_TRUE(client_->Unpublish(KubeletVolumeId(pod), target).ok());
  EXPECT_TRUE(MountsUnder(root_->pods_dir()).empty());
}

// Something that is not a socket at --endpoint (a file, a directory, a
// symlink to a file) is refused at start and left exactly as it was.
TEST_F(RealFaultTest, NonSocketAtTheSocketPathIsRefusedAndKept) {
  ASSERT_EQ(Stop(), 0);
  const std::string socket = Options().socket_path;
  const std::string elsewhere = root_->path() + "/precious";
  ASSERT_NO_FATAL_FAILURE(WriteText(elsewhere, "precious\n"));
  struct Case {
    const char* name;
    std::function<void()> make;
    std::function<void()> check;
  } cases[] = {
      {"file", [&] { WriteText(socket, "not a socket\n"); },
       [&] { EXPECT_EQ(ReadFileOrEmpty(socket), "not a socket\n"); }},
      {"directory", [&] { fs::create_directory(socket); },
       [&] { EXPECT_TRUE(fs::is_directory(socket)); }},
      {"symlink", [&] { fs::create_symlink(elsewhere, socket); },
       [&] {
         EXPECT_TRUE(fs::is_symlink(socket));
         EXPECT_EQ(ReadFileOrEmpty(elsewhere), "precious\n");
       }},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    ASSERT_NO_FATAL_FAILURE(c.make());
    DriverProcess::Options o = Options();
    o.log_path = root_->log_path(std::string("refused-") + c.name);
    DriverProcess refused(o);
    EXPECT_EQ(refused.RunToExit(), 2);
    EXPECT_NE(ReadFileOrEmpty(o.log_path).find("is not a socket"),
              std::string::npos)
        << ReadFileOrEmpty(o.log_path);
    c.check();
    fs::remove(socket);
  }
  ASSERT_NO_FATAL_FAILURE(StartDriver());
}

// Behaviour (documented): the master key is read once at start. Replacing or
// removing the file while serving changes nothing until a restart; a restart
// with the file missing refuses to serve; a restart with another key derives
// other certs, and a volume still mounted with the old cert is then
// ALREADY_EXISTS for a publish (pods must be re-created after a rotation).
TEST_F(RealFaultTest, MasterKeyReplacedOrRemovedWhileServing) {
  const std::string old_cert = Cert("default", "lammps");
  KubeletPod a = Pod(60), b = Pod(61), c = Pod(62);
  ASSERT_TRUE(client_->Publish(KubeletPublishRequest(a, Attrs())).ok());

  // Replace (atomically, as a Secret update does via a symlink swap).
  const std::string new_key(64, 'n');
  const std::string tmp = root_->WriteMasterKey("master.key.new", new_key);
  ASSERT_EQ(rename(tmp.c_str(), master_key_.c_str()), 0);
  ASSERT_TRUE(client_->Publish(KubeletPublishRequest(b, Attrs())).ok());
  EXPECT_EQ(InspectVolume(KubeletTargetPath(b), old_cert, 0, 0).state,
            VolumeState::kHealthy)
      << "the driver re-read a replaced key while serving";

  ASSERT_EQ(unlink(master_key_.c_str()), 0);
  ASSERT_TRUE(client_->Publish(KubeletPublishRequest(c, Attrs("fresh"))).ok());
  EXPECT_EQ(
      InspectVolume(KubeletTargetPath(c), Cert("default", "fresh"), 0, 0).state,
      VolumeState::kHealthy);
  EXPECT_TRUE(client_->WaitReady(std::chrono::seconds(2)));

  // A restart without the file refuses to serve; volumes stay.
  ASSERT_EQ(Stop(), 0);
  DriverProcess refused(Options());
  EXPECT_EQ(refused.RunToExit(), 2);
  EXPECT_NE(log().find("refusing to serve"), std::string::npos);
  EXPECT_EQ(InspectVolume(KubeletTargetPath(a), old_cert, 0, 0).state,
            VolumeState::kHealthy);

  // A restart with the new key: new certs, old volumes ALREADY_EXISTS.
  root_->WriteMasterKey("master.key", new_key);
  ASSERT_NO_FATAL_FAILURE(StartDriver());
  auto status = client_->Publish(KubeletPublishRequest(a, Attrs()));
  EXPECT_EQ(status.error_code(), grpc::StatusCode::ALREADY_EXISTS)
      << status.error_message();
  EXPECT_EQ(InspectVolume(KubeletTargetPath(a), old_cert, 0, 0).state,
            VolumeState::kHealthy);
  ASSERT_TRUE(
      client_->Unpublish(KubeletVolumeId(a), KubeletTargetPath(a)).ok());
  ASSERT_TRUE(client_->Publish(KubeletPublishRequest(a, Attrs())).ok());
  EXPECT_EQ(InspectVolume(KubeletTargetPath(a),
                          Cert("default", "lammps", new_key), 0, 0)
                .state,
            VolumeState::kHealthy);
  for (const KubeletPod& p : {a, b, c}) {
    EXPECT_TRUE(
        client_->Unpublish(KubeletVolumeId(p), KubeletTargetPath(p)).ok());
  }
  EXPECT_TRUE(MountsUnder(root_->pods_dir()).empty());
}

// SIGTERM while 8 kubelet threads publish: in-flight calls finish, later
// ones are refused (UNAVAILABLE), the driver exits 0, and every target is
// healthy or not mounted — never half-made. Every OK was a real publish.
TEST_F(RealFaultTest, SigtermDuringPublishesFinishesInFlightAndExitsZero) {
  constexpr int kThreads = 8, kPerThread = 40;
  std::vector<KubeletPod> pods;
  for (int i = 0; i < kThreads * kPerThread; ++i) pods.push_back(Pod(100 + i));
  std::vector<int> ok(pods.size(), 0);
  std::atomic<int> done{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      CsiClient client(driver_->options().socket_path);
      for (int i = 0; i < kPerThread; ++i) {
        const size_t p = t * kPerThread + i;
        ok[p] = client
                    .Publish(KubeletPublishRequest(
                        pods[p], Attrs("mc-" + std::to_string(p % 3))))
                    .ok();
        ++done;
      }
    });
  }
  while (done < kThreads * kPerThread / 4) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  const int rc = driver_->Terminate(std::chrono::seconds(40));
  for (auto& th : threads) th.join();
  EXPECT_EQ(rc, 0) << log();
  EXPECT_NE(log().find("finishing in-flight calls"), std::string::npos);

  int published = 0;
  for (size_t p = 0; p < pods.size(); ++p) {
    const std::string cert = Cert("default", "mc-" + std::to_string(p % 3));
    const auto report = InspectVolume(KubeletTargetPath(pods[p]), cert, 0, 0);
    if (ok[p]) {
      EXPECT_EQ(report.state, VolumeState::kHealthy) << p << " " << report.why;
      ++published;
    } else {
      EXPECT_TRUE(report.state == VolumeState::kAbsent ||
                  report.state == VolumeState::kPlainDir ||
                  report.state == VolumeState::kHealthy)
          << p << ": " << StateName(report.state) << " " << report.why;
    }
  }
  EXPECT_GE(published, kThreads * kPerThread / 4);
  EXPECT_LT(published, kThreads * kPerThread) << "SIGTERM came too late";

  ASSERT_NO_FATAL_FAILURE(StartDriver());
  for (const KubeletPod& p : pods) {
    ASSERT_TRUE(
        client_->Unpublish(KubeletVolumeId(p), KubeletTargetPath(p)).ok());
  }
  EXPECT_TRUE(MountsUnder(root_->pods_dir()).empty());
}

}  // namespace
}  // namespace fcc::testing
