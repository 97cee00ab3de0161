// View volumes over the real socket with real mounts: the driver copies the
// views of its "image" (a directory) into the node's store once and binds
// that copy read-only, nosuid, nodev into each pod; the binds outlive the
// driver. A small stand-in tree plays the view here; the real view runs
// real brokers in the node tests (test/node/view_node_test.py).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/file.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <filesystem>
#include <fstream>
#include <thread>

#include "common/unique_fd.h"
#include "csi_client.h"
#include "driver/view/catalog.h"
#include "driver_process.h"
#include "driver_test_env.h"
#include "mount_env.h"
#include "test_view.h"

namespace fcc::testing {
namespace {

constexpr char kView[] = "flux-core-0.88.0";

class ViewTest : public DriverTest {
 protected:
  void SetUp() override {
    FCC_REQUIRE_MOUNT_ENV();
    // The image's views, before the driver starts (the fixture starts it).
    image_views_ = ScratchPath("image-views");
    store_ = ScratchPath("store");
    staging_ = ScratchPath("staging");
    digest_ = MakeTestView(image_views_, kView);
    ASSERT_TRUE(digest_.starts_with("sha256:")) << "check-view: " << digest_;
    ASSERT_NO_FATAL_FAILURE(PrepareViews());
    DriverTest::SetUp();
    pod_.volume_name = "flux-view";
    KubeletPrepareParent(pod_);
  }

  std::string ScratchPath(const std::string& name) const {
    // The root exists only once DriverTest::SetUp made it: a sibling dir.
    return std::filesystem::temp_directory_path().string() + "/fcc-view-" +
           std::to_string(getpid()) + "-" + name;
  }
  // Changes the image's views or the store before the driver starts.
  virtual void PrepareViews() {}

  void TearDown() override {
    DriverTest::TearDown();
    // The staging binds outlive the driver in this (the test's) namespace.
    for (auto mounts = MountsUnder(staging_); !mounts.empty();
         mounts = MountsUnder(staging_)) {
      if (umount2(mounts.back().mount_point.c_str(), MNT_DETACH) != 0) break;
    }
    std::filesystem::remove_all(image_views_);
    std::filesystem::remove_all(store_);
    std::filesystem::remove_all(staging_);
  }

  DriverProcess::Options DriverOptions() const override {
    DriverProcess::Options options = DriverTest::DriverOptions();
    options.extra_args = {"--views-dir=" + image_views_,
                          "--view-store-dir=" + store_};
    options.env = {"VIEW_STAGING_DIR=" + staging_};
    options.extra_args.insert(options.extra_args.end(), extra_args_.begin(),
                              extra_args_.end());
    options.hidden_syscalls = hidden_syscalls_;
    return options;
  }

  std::string StoredCopy(const std::string& digest = "") const {
    return store_ + "/" + StoredName(kView, digest.empty() ? digest_ : digest);
  }

  grpc::Status PublishView(const std::string& view = kView) {
    return client_->Publish(KubeletPublishRequest(pod_, {{"view", view}}));
  }
  grpc::Status PublishViewOf(const KubeletPod& pod) {
    return client_->Publish(KubeletPublishRequest(pod, {{"view", kView}}));
  }
  grpc::Status Unpublish() {
    return client_->Unpublish(KubeletVolumeId(pod_), KubeletTargetPath(pod_));
  }

  // kubelet's side of the bind: the pods directory is shared (as on a real
  // node), and a second mount namespace, kubelet's, receives the bind the
  // driver makes. There, too, the view must be read-only, nosuid and nodev,
  // and root must not write through it: a pod that mounts the view without
  // readOnly gets kubelet's copy.
  void ExpectSealedInKubeletsNamespace() {
    ASSERT_EQ(
        mount(nullptr, root_->path().c_str(), nullptr, MS_SHARED, nullptr), 0)
        << strerror(errno);
    const PeerMountNamespace kubelet;
    ASSERT_GT(kubelet.pid(), 0) << "cannot make a second mount namespace";
    const std::string target = KubeletTargetPath(pod_);
    auto status = PublishView();
    ASSERT_TRUE(status.ok()) << status.error_message() << log();
    ASSERT_NO_FATAL_FAILURE(ExpectViewBound(target));
    // The bind this pass claims to test: mount(2) from a sealed staging
    // bind where tmpfs takes mount(2) or the kernel has no mount_setattr.
    const bool staged = MountApiIsMount2() || !hidden_syscalls_.empty();
    EXPECT_NE(log().find(staged ? "binding view volumes with mount(2)"
                                : "binding view volumes with open_tree"),
              std::string::npos)
        << log();
    ASSERT_NO_FATAL_FAILURE(ExpectSealedThere(kubelet, target));
    status = Unpublish();
    ASSERT_TRUE(status.ok()) << status.error_message();
    EXPECT_TRUE(kubelet.MountsUnder(target).empty())
        << "the unmount did not reach kubelet's namespace";
  }

  // Certs are served and views are not: a cert publishes, a view publish
  // is FAILED_PRECONDITION naming the view and `cause` and leaves nothing,
  // and the cert unpublishes.
  void ExpectCertsServedButNotViews(const std::string& cause) {
    KubeletPod cert_pod = pod_;
    cert_pod.volume_name = "curve";
    KubeletPrepareParent(cert_pod);
    auto status = client_->Publish(
        KubeletPublishRequest(cert_pod, {{"minicluster", "lammps"}}));
    ASSERT_TRUE(status.ok()) << status.error_message() << log();
    status = PublishView();
    EXPECT_EQ(status.error_code(), grpc::StatusCode::FAILED_PRECONDITION)
        << status.error_message();
    const std::string& message = status.error_message();
    EXPECT_NE(message.find(std::string("view ") + kView), std::string::npos)
        << message;
    EXPECT_NE(message.find(cause), std::string::npos) << message;
    EXPECT_FALSE(PathExists(KubeletTargetPath(pod_)));
    status = client_->Unpublish(KubeletVolumeId(cert_pod),
                                KubeletTargetPath(cert_pod));
    ASSERT_TRUE(status.ok()) << status.error_message();
    EXPECT_FALSE(PathExists(KubeletTargetPath(cert_pod)));
  }

  // One bind at `target` in `kubelet`'s namespace: ro, nosuid, nodev, and
  // root cannot create a file through it there.
  static void ExpectSealedThere(const PeerMountNamespace& kubelet,
                                const std::string& target) {
    const std::vector<MountEntry> there = kubelet.MountsUnder(target);
    ASSERT_EQ(there.size(), 1u)
        << "not one bind at the target in kubelet's namespace";
    for (const char* flag : {"ro", "nosuid", "nodev"}) {
      EXPECT_TRUE(HasToken(there[0].options, flag))
          << flag << " not in kubelet's " << there[0].options;
    }
    errno = 0;
    const int fd = open(kubelet.Path(target + "/intruder").c_str(),
                        O_WRONLY | O_CREAT, 0600);
    EXPECT_EQ(fd, -1) << "root wrote into the view in kubelet's namespace";
    EXPECT_EQ(errno, EROFS) << strerror(errno);
    if (fd >= 0) close(fd);
  }

  // One bind of the node's copy at `target`: ro, nosuid, nodev, the same
  // inode as the copy, and nothing can be written through it, root or not.
  void ExpectViewBound(const std::string& target) {
    ASSERT_EQ(MountCountAt(target), 1);
    const MountEntry m = MountsUnder(target).at(0);
    for (const char* flag : {"ro", "nosuid", "nodev"}) {
      EXPECT_TRUE(HasToken(m.options, flag)) << flag << " not in " << m.options;
    }
    struct stat bound{}, copy{};
    ASSERT_EQ(stat(target.c_str(), &bound), 0);
    ASSERT_EQ(stat(StoredCopy().c_str(), &copy), 0);
    EXPECT_EQ(bound.st_ino, copy.st_ino);
    EXPECT_EQ(bound.st_dev, copy.st_dev);
    EXPECT_EQ(ReadFileOrEmpty(target + "/bin/flux"), "#!flux\n");
    errno = 0;
    EXPECT_EQ(open((target + "/intruder").c_str(), O_WRONLY | O_CREAT, 0600),
              -1);
    EXPECT_EQ(errno, EROFS);
  }

  std::string image_views_;
  std::string store_;
  std::string staging_;
  std::vector<std::string> extra_args_;
  std::vector<int> hidden_syscalls_;
  std::string digest_;
};

// A kernel before 5.12: no mount_setattr, so no sealing of a detached
// clone; the driver binds with mount(2) and must still seal every copy.
class ViewOnOldKernelTest : public ViewTest {
 protected:
  void SetUp() override {
    hidden_syscalls_ = {SYS_mount_setattr};
    ViewTest::SetUp();
  }
};

TEST_F(ViewTest, PublishBindsTheNodesCopyReadOnlyAndUnpublishRemovesIt) {
  const std::string target = KubeletTargetPath(pod_);
  auto status = PublishView();
  ASSERT_TRUE(status.ok()) << status.error_message() << log();
  ASSERT_NO_FATAL_FAILURE(ExpectViewBound(target));
  // kubelet's retry of a healthy publish adds no mount.
  status = PublishView();
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(MountCountAt(target), 1);

  status = Unpublish();
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_FALSE(PathExists(target));
  EXPECT_TRUE(PathExists(StoredCopy() + "/bin/flux")) << "the copy stays";
  status = Unpublish();
  EXPECT_TRUE(status.ok()) << status.error_message();
}

TEST_F(ViewTest, UnservedViewIsNotFoundNamingWhatTheNodeServes) {
  const auto status = PublishView("flux-core-0.70.0");
  EXPECT_EQ(status.error_code(), grpc::StatusCode::NOT_FOUND);
  const std::string& message = status.error_message();
  EXPECT_NE(message.find("\"flux-core-0.70.0\" is not served"),
            std::string::npos)
      << message;
  EXPECT_NE(message.find(std::string("it serves: ") + kView), std::string::npos)
      << message;
  EXPECT_NE(message.find("spec.flux.view"), std::string::npos) << message;
  EXPECT_FALSE(PathExists(KubeletTargetPath(pod_)));
}

// Nothing may pose as a view: a view volume carries `view` alone, and a
// value that is no view name never reaches the filesystem.
TEST_F(ViewTest, AViewWithAnyOtherAttributeOrABadNameIsRefused) {
  for (const auto& attrs : std::vector<std::map<std::string, std::string>>{
           {{"view", kView}, {"minicluster", "lammps"}},
           {{"view", kView}, {"owner", "0"}},
           {{"view", "../../etc"}},
           {{"view", ""}}}) {
    const auto status = client_->Publish(KubeletPublishRequest(pod_, attrs));
    EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT)
        << status.error_message();
    EXPECT_NE(status.error_message().find("volumeAttributes."),
              std::string::npos)
        << status.error_message();
    EXPECT_FALSE(PathExists(KubeletTargetPath(pod_)));
  }
}

TEST_F(ViewTest, ABindOutlivesTheDriverAndTheNextDriverUnpublishesIt) {
  const std::string target = KubeletTargetPath(pod_);
  auto status = PublishView();
  ASSERT_TRUE(status.ok()) << status.error_message();
  driver_->Kill9();
  ASSERT_NO_FATAL_FAILURE(ExpectViewBound(target));
  ASSERT_NO_FATAL_FAILURE(StartDriver());
  // The copy was made once; the restarted driver reuses it.
  EXPECT_EQ(log().find("copied to"), log().rfind("copied to")) << log();
  status = PublishView();
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(MountCountAt(target), 1);
  status = Unpublish();
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_FALSE(PathExists(target));
}

// A pod's cert and view are two volumes; each unpublish takes only its own.
TEST_F(ViewTest, CertAndViewOfOnePodLiveSideBySide) {
  KubeletPod cert_pod = pod_;
  cert_pod.volume_name = "curve";
  KubeletPrepareParent(cert_pod);
  auto status = client_->Publish(
      KubeletPublishRequest(cert_pod, {{"minicluster", "lammps"}}));
  ASSERT_TRUE(status.ok()) << status.error_message();
  status = PublishView();
  ASSERT_TRUE(status.ok()) << status.error_message();
  ASSERT_NO_FATAL_FAILURE(ExpectViewBound(KubeletTargetPath(pod_)));
  status = Unpublish();
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(MountCountAt(KubeletTargetPath(cert_pod)), 1);
  status = client_->Unpublish(KubeletVolumeId(cert_pod),
                              KubeletTargetPath(cert_pod));
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_FALSE(PathExists(KubeletTargetPath(cert_pod)));
}

TEST_F(ViewTest, TheBindIsSealedInKubeletsNamespaceToo) {
  ExpectSealedInKubeletsNamespace();
}

TEST_F(ViewOnOldKernelTest, TheBindIsSealedInKubeletsNamespaceToo) {
  ExpectSealedInKubeletsNamespace();
  EXPECT_NE(log().find("view volumes with mount(2)"), std::string::npos)
      << log();
}

// A bind an older release left writable (its pre-5.12 fallback) is as
// writable in kubelet's namespace, where containers are bound from. A
// re-publish must seal it there too, not only where the driver runs.
TEST_F(ViewTest, AnUnsealedBindIsBoundAgainSealedInKubeletsNamespace) {
  ASSERT_EQ(mount(nullptr, root_->path().c_str(), nullptr, MS_SHARED, nullptr),
            0)
      << strerror(errno);
  const PeerMountNamespace kubelet;
  ASSERT_GT(kubelet.pid(), 0) << "cannot make a second mount namespace";
  const std::string target = KubeletTargetPath(pod_);
  ASSERT_EQ(mkdir(target.c_str(), 0750), 0) << strerror(errno);
  ASSERT_EQ(
      mount(StoredCopy().c_str(), target.c_str(), nullptr, MS_BIND, nullptr), 0)
      << strerror(errno);
  ASSERT_EQ(kubelet.MountsUnder(target).size(), 1u);
  ASSERT_TRUE(HasToken(kubelet.MountsUnder(target)[0].options, "rw"));

  const auto status = PublishView();
  ASSERT_TRUE(status.ok()) << status.error_message() << log();
  ASSERT_NO_FATAL_FAILURE(ExpectViewBound(target));
  ASSERT_NO_FATAL_FAILURE(ExpectSealedThere(kubelet, target));
  ASSERT_TRUE(Unpublish().ok());
  EXPECT_TRUE(kubelet.MountsUnder(target).empty());
}

// kubelet mounts a volume read-write into containers unless the pod says
// readOnly: a view, which every broker on the node runs, is refused so.
TEST_F(ViewTest, ReadOnlyFalseIsRefused) {
  auto request = KubeletPublishRequest(pod_, {{"view", kView}});
  request.set_readonly(false);
  const auto status = client_->Publish(request);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(status.error_message().find("readOnly: true"), std::string::npos)
      << status.error_message();
  EXPECT_FALSE(PathExists(KubeletTargetPath(pod_)));
}

// Each view volume is a mount in several namespaces: a pod gets one, and
// views count against the node's cap with the certs.
TEST_F(ViewTest, ASecondViewOfOnePodIsRefused) {
  ASSERT_TRUE(PublishView().ok());
  KubeletPod second = pod_;
  second.volume_name = "flux-view-2";
  KubeletPrepareParent(second);
  const auto status = PublishViewOf(second);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED)
      << status.error_message();
  EXPECT_NE(status.error_message().find("view volume"), std::string::npos)
      << status.error_message();
  EXPECT_FALSE(PathExists(KubeletTargetPath(second)));
  // A retry of the first is no second view.
  EXPECT_TRUE(PublishView().ok());
  EXPECT_TRUE(Unpublish().ok());
}

class ViewNodeCapTest : public ViewTest {
 protected:
  void SetUp() override {
    extra_args_ = {"--max-volumes-per-node=2"};
    ViewTest::SetUp();
  }
};

TEST_F(ViewNodeCapTest, ViewsCountAgainstTheNodeCapAcrossARestart) {
  KubeletPod cert = pod_;
  cert.volume_name = "curve";
  KubeletPrepareParent(cert);
  ASSERT_TRUE(
      client_->Publish(KubeletPublishRequest(cert, {{"minicluster", "lammps"}}))
          .ok());
  ASSERT_TRUE(PublishView().ok()) << log();
  KubeletPod other = pod_;
  other.name = "lammps-1";
  other.uid = "6f1c2d3e-0000-4000-8000-000000000002";
  KubeletPrepareParent(other);
  auto status = PublishViewOf(other);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED)
      << status.error_message();
  EXPECT_NE(status.error_message().find("--max-volumes-per-node=2"),
            std::string::npos)
      << status.error_message();
  // A restarted driver counts the binds it finds.
  driver_->Kill9();
  ASSERT_NO_FATAL_FAILURE(StartDriver());
  EXPECT_EQ(PublishViewOf(other).error_code(),
            grpc::StatusCode::RESOURCE_EXHAUSTED);
  ASSERT_TRUE(Unpublish().ok());
  status = PublishViewOf(other);
  EXPECT_TRUE(status.ok()) << status.error_message();
  EXPECT_TRUE(
      client_->Unpublish(KubeletVolumeId(other), KubeletTargetPath(other))
          .ok());
  EXPECT_TRUE(
      client_->Unpublish(KubeletVolumeId(cert), KubeletTargetPath(cert)).ok());
}

// An upgrade that changes the view's files makes a new copy; a running pod
// keeps the copy it has, and kubelet's re-publish of it is fine.
TEST_F(ViewTest, ARunningPodsOlderCopyIsRepublishedAfterAnUpgrade) {
  const std::string target = KubeletTargetPath(pod_);
  ASSERT_TRUE(PublishView().ok());
  driver_->Kill9();
  std::filesystem::remove_all(image_views_ + "/" + kView);
  const std::string upgraded =
      MakeTestView(image_views_, kView, "#!flux upgraded\n");
  ASSERT_NO_FATAL_FAILURE(StartDriver());
  ASSERT_TRUE(PathExists(StoredCopy(upgraded))) << log();
  const auto status = PublishView();
  EXPECT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(MountCountAt(target), 1);
  EXPECT_EQ(ReadFileOrEmpty(target + "/bin/flux"), "#!flux\n");
  ASSERT_TRUE(Unpublish().ok());
  EXPECT_FALSE(PathExists(target));
}

// A view bind at another pod's target is left alone, and a view is never
// bound over a mount that is not this view.
TEST_F(ViewTest, AForeignMountAtTheTargetIsNotReplaced) {
  const std::string target = KubeletTargetPath(pod_);
  std::filesystem::create_directories(target);
  ASSERT_EQ(mount("fcc-test-foreign", target.c_str(), "tmpfs", 0, "size=64k"),
            0);
  const auto status = PublishView();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::ALREADY_EXISTS)
      << status.error_message();
  EXPECT_EQ(MountCountAt(target), 1);
  EXPECT_EQ(MountsUnder(target).at(0).source, "fcc-test-foreign");
  EXPECT_EQ(Unpublish().error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  ASSERT_EQ(umount(target.c_str()), 0);
}

// A view that cannot be installed (here the store is a file: as good as a
// full /var or a read-only one) costs the views only. The driver serves
// certs, publish and unpublish, and a view publish names the cause.
class UninstallableViewTest : public ViewTest {
 protected:
  void PrepareViews() override { WriteText(store_, "not a directory\n"); }
};

TEST_F(UninstallableViewTest, CertsAreServedAndAViewPublishNamesTheCause) {
  ExpectCertsServedButNotViews("cannot create --view-store-dir " + store_);
  EXPECT_NE(log().find("Flux views unavailable"), std::string::npos) << log();
}

// Another driver holds the store's lock (stuck installing on a hung disk):
// this one waits --view-store-lock-seconds, then serves certs, and its view
// publishes name the holder.
class LockedViewStoreTest : public ViewTest {
 protected:
  void PrepareViews() override {
    std::filesystem::create_directories(store_);
    lock_ = common::UniqueFd(
        open((store_ + "/.lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600));
    ASSERT_TRUE(lock_) << strerror(errno);
    ASSERT_EQ(flock(lock_.get(), LOCK_EX), 0) << strerror(errno);
    extra_args_ = {"--view-store-lock-seconds=1"};
  }
  common::UniqueFd lock_;
};

TEST_F(LockedViewStoreTest, CertsAreServedAndViewsNameTheLocksHolder) {
  ExpectCertsServedButNotViews("pid " + std::to_string(getpid()));
}

// The image's view does not match its own manifest (a damaged layer, a file
// changed after the build): it is never copied or served.
class MismatchedViewTest : public ViewTest {
 protected:
  void PrepareViews() override {
    WriteText(image_views_ + "/" + kView + "/bin/flux", "#!changed\n");
  }
};

TEST_F(MismatchedViewTest, AViewWhoseFilesDoNotMatchItsDigestIsNotServed) {
  const auto status = PublishView();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::FAILED_PRECONDITION)
      << status.error_message();
  EXPECT_NE(status.error_message().find("do not match the manifest's digest " +
                                        digest_),
            std::string::npos)
      << status.error_message();
  EXPECT_FALSE(PathExists(KubeletTargetPath(pod_)));
  EXPECT_FALSE(PathExists(StoredCopy()));
}

// The store as earlier drivers left it: an older release's copy no pod
// mounts, one a pod still mounts, a killed copy's temporary, and a copy of
// the served view that is damaged (a crash before its data reached disk).
class ViewStoreTest : public ViewTest {
 protected:
  void PrepareViews() override {
    unmounted_ = store_ + "/flux-core-0.87.0@0123456789abcdef";
    mounted_ = store_ + "/flux-core-0.86.0@fedcba9876543210";
    temporary_ = store_ + "/.tmp-" + StoredName(kView, digest_);
    WriteText(unmounted_ + "/bin/flux", "#!0.87\n");
    WriteText(mounted_ + "/bin/flux", "#!0.86\n");
    WriteText(temporary_ + "/bin/flux", "#!half");
    WriteText(StoredCopy() + "/bin/flux", std::string(7, '\0'));
    // A pod's bind of the 0.86 copy, where kubelet would have it.
    pod_mount_ = ScratchPath("pod-mount");
    std::filesystem::create_directories(pod_mount_);
    ASSERT_EQ(
        mount(mounted_.c_str(), pod_mount_.c_str(), nullptr, MS_BIND, nullptr),
        0)
        << strerror(errno);
  }
  void TearDown() override {
    umount2(pod_mount_.c_str(), MNT_DETACH);
    ViewTest::TearDown();
    std::filesystem::remove_all(pod_mount_);
  }

  std::string unmounted_, mounted_, temporary_, pod_mount_;
};

TEST_F(ViewStoreTest, CopiesNeitherServedNorMountedAreRemoved) {
  EXPECT_FALSE(PathExists(unmounted_)) << log();
  EXPECT_FALSE(PathExists(temporary_)) << log();
  EXPECT_EQ(ReadFileOrEmpty(mounted_ + "/bin/flux"), "#!0.86\n");
  EXPECT_EQ(ReadFileOrEmpty(pod_mount_ + "/bin/flux"), "#!0.86\n");
  // Once no pod mounts it, the next driver removes it.
  ASSERT_EQ(umount(pod_mount_.c_str()), 0);
  driver_->Kill9();
  ASSERT_NO_FATAL_FAILURE(StartDriver());
  EXPECT_FALSE(PathExists(mounted_)) << log();
  EXPECT_TRUE(PathExists(StoredCopy() + "/bin/flux"));
}

TEST_F(ViewStoreTest, ADamagedCopyIsReplacedByAVerifiedOne) {
  EXPECT_EQ(ReadFileOrEmpty(StoredCopy() + "/bin/flux"), "#!flux\n") << log();
  EXPECT_EQ(ReadFileOrEmpty(StoredCopy() + ".verified"), digest_ + "\n");
  const auto status = PublishView();
  ASSERT_TRUE(status.ok()) << status.error_message();
  ASSERT_NO_FATAL_FAILURE(ExpectViewBound(KubeletTargetPath(pod_)));
  ASSERT_TRUE(Unpublish().ok());
}

// Two drivers sharing a store (a rolling update's overlap, a double
// install) take turns: an install waits for the store's lock, so neither
// can remove or rename what the other is writing.
TEST(ViewStoreLockTest, AnInstallWaitsForTheStoresLock) {
  const std::string scratch = std::filesystem::temp_directory_path().string() +
                              "/fcc-view-lock-" + std::to_string(getpid());
  const std::string views = scratch + "/views", store = scratch + "/store";
  const std::string digest = MakeTestView(views, kView);
  ASSERT_TRUE(digest.starts_with("sha256:")) << digest;
  std::filesystem::create_directories(store);
  const std::string lock_path = store + "/.lock";
  const int lock = open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  ASSERT_GE(lock, 0) << strerror(errno);
  ASSERT_EQ(flock(lock, LOCK_EX), 0);
  std::atomic<bool> done = false;
  std::thread install([&] {
    auto installed =
        driver::InstallViews(views, store, std::chrono::minutes(5));
    done = true;
  });
  // The other installer polls for the lock: it is still at it while the
  // lock is held, and has copied nothing.
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  EXPECT_FALSE(done) << "InstallViews did not wait for the store's lock";
  const bool copied_while_locked =
      PathExists(store + "/" + StoredName(kView, digest));
  flock(lock, LOCK_UN);
  install.join();
  close(lock);
  EXPECT_FALSE(copied_while_locked);
  EXPECT_EQ(
      ReadFileOrEmpty(store + "/" + StoredName(kView, digest) + "/bin/flux"),
      "#!flux\n");
  std::filesystem::remove_all(scratch);
}

}  // namespace
}  // namespace fcc::testing
