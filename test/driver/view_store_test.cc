// The node's view store without a driver process or mounts: the digest is
// check-view's, the mount table is read as the kernel writes it, a verified
// copy is trusted, a copy another driver serves stays, and a view that
// cannot be installed costs only that view.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>

#include "common/unique_fd.h"
#include "driver/view/catalog.h"
#include "driver/view/store.h"
#include "driver_process.h"
#include "test_view.h"

namespace fcc::testing {
namespace {

namespace fs = std::filesystem;
using driver::InstallViews;
using driver::StoreEntriesMounted;
using driver::TreeDigest;
using driver::ViewCatalog;

constexpr char kView[] = "flux-core-0.88.0";
constexpr char kManifest[] = "share/flux-view/view.json";

class ViewStoreUnitTest : public ::testing::Test {
 protected:
  void SetUp() override {
    scratch_ = fs::temp_directory_path().string() + "/fcc-view-store-" +
               std::to_string(getpid());
    fs::remove_all(scratch_);
    views_ = scratch_ + "/views";
    store_ = scratch_ + "/store";
    digest_ = MakeTestView(views_, kView);
    ASSERT_TRUE(digest_.starts_with("sha256:")) << "check-view: " << digest_;
  }
  void TearDown() override { fs::remove_all(scratch_); }

  std::string Copy() const { return store_ + "/" + StoredName(kView, digest_); }

  std::string scratch_, views_, store_, digest_;
};

TEST_F(ViewStoreUnitTest, TheDigestIsCheckViewsOverEveryKindOfEntry) {
  const std::string view = views_ + "/" + kView;
  WriteText(view + "/lib/a b\\c", "spaces and a backslash\n");
  WriteText(view + "/lib/Z", "");
  chmod((view + "/lib/Z").c_str(), 0600);
  chmod((view + "/lib").c_str(), 0750);
  fs::create_symlink("../bin/flux", view + "/lib/flux-link");
  WriteText(view + "/share/flux-view/other.json", "{}");
  const std::string python = CheckViewDigest(view);
  ASSERT_TRUE(python.starts_with("sha256:")) << python;
  auto digest = TreeDigest(view, kManifest);
  ASSERT_TRUE(digest) << digest.error();
  EXPECT_EQ(*digest, python);
  // The manifest is outside its own digest, every other byte is inside.
  WriteText(view + "/" + kManifest, "anything");
  EXPECT_EQ(TreeDigest(view, kManifest).value_or(""), python);
  chmod((view + "/lib/Z").c_str(), 0640);
  EXPECT_NE(TreeDigest(view, kManifest).value_or(""), python);
}

TEST(StoreEntriesMountedTest, MountRootsUnderTheStoreOnItsFilesystem) {
  // The store on /var (8:2, mounted from the filesystem's /data); pods bind
  // a copy, a subdirectory of another, and a copy hidden under a later
  // bind; another filesystem's same path is no copy.
  const std::string mountinfo =
      "22 1 8:1 / / rw - ext4 /dev/sda1 rw\n"
      "30 22 8:2 /data /var rw shared:2 - ext4 /dev/sda2 rw\n"
      "40 30 8:2 /data/lib/views/flux-core-0.88.0@0123456789abcdef "
      "/var/lib/kubelet/pods/u1/volumes/kubernetes.io~csi/v/mount ro - ext4 "
      "/dev/sda2 rw\n"
      "41 30 8:2 /data/lib/views/flux-core-0.87.0@fedcba9876543210/bin "
      "/var/lib/kubelet/pods/u2/volume-subpaths/v/c/0 ro - ext4 /dev/sda2 rw\n"
      "42 30 8:2 /data/lib/views/.tmp-x@1-AbC123 /mnt/old ro - ext4 /dev/sda2 "
      "rw\n"
      "43 42 8:2 /data/lib/views/flux-core-0.88.0@0123456789abcdef /mnt/old ro "
      "- ext4 /dev/sda2 rw\n"
      "44 22 8:1 /data/lib/views/flux-core-0.86.0@0000000000000000 /mnt/b ro "
      "- ext4 /dev/sda1 rw\n"
      "45 30 8:2 /data/lib/views\\040two/a@1 /mnt/c ro - ext4 /dev/sda2 rw\n";
  EXPECT_EQ(StoreEntriesMounted(mountinfo, "/var/lib/views"),
            (std::set<std::string>{"flux-core-0.88.0@0123456789abcdef",
                                   "flux-core-0.87.0@fedcba9876543210",
                                   ".tmp-x@1-AbC123"}));
  // The store at a mount point of its own (a hostPath bind of /data/lib/views).
  const std::string bound =
      "30 22 8:2 /data/lib/views /csi/views rw - ext4 /dev/sda2 rw\n"
      "40 30 8:2 /data/lib/views/a@1 /pod ro - ext4 /dev/sda2 rw\n";
  EXPECT_EQ(StoreEntriesMounted(bound, "/csi/views"),
            (std::set<std::string>{"a@1"}));
  EXPECT_TRUE(StoreEntriesMounted("garbage\n", "/csi/views").empty());
}

TEST_F(ViewStoreUnitTest, AVerifiedCopyIsNotHashedAgain) {
  ViewCatalog first = InstallViews(views_, store_);
  ASSERT_NE(first.Find(kView), nullptr);
  EXPECT_EQ(ReadFileOrEmpty(Copy() + ".verified"), digest_ + "\n");
  // A change the marker hides: served as is, not re-copied (160 MB on a
  // real node's every restart otherwise).
  WriteText(Copy() + "/bin/flux", "#!edited\n");
  ViewCatalog second = InstallViews(views_, store_);
  ASSERT_NE(second.Find(kView), nullptr);
  EXPECT_EQ(ReadFileOrEmpty(Copy() + "/bin/flux"), "#!edited\n");
  // Without the marker it is replaced.
  fs::remove(Copy() + ".verified");
  ViewCatalog third = InstallViews(views_, store_);
  ASSERT_NE(third.Find(kView), nullptr);
  EXPECT_EQ(ReadFileOrEmpty(Copy() + "/bin/flux"), "#!flux\n");
}

// A copy without the marker matches its digest, but a pod that an older
// release bound it into writable can write into it after any check: it is
// never served in place, a fresh copy is.
TEST_F(ViewStoreUnitTest, AnUnmarkedCopyIsNeverAdoptedInPlace) {
  {
    ViewCatalog first = InstallViews(views_, store_);
    ASSERT_NE(first.Find(kView), nullptr);
  }
  fs::remove(Copy() + ".verified");
  struct stat old_copy{};
  ASSERT_EQ(stat(Copy().c_str(), &old_copy), 0);
  // The pod's writable bind of the old copy: its directory, still open.
  common::UniqueFd pods_view(open(Copy().c_str(), O_RDONLY | O_DIRECTORY));
  ASSERT_TRUE(pods_view);
  ViewCatalog second = InstallViews(views_, store_);
  const driver::View* served = second.Find(kView);
  ASSERT_NE(served, nullptr);
  EXPECT_NE(served->root.ino, old_copy.st_ino)
      << "the unmarked copy was served in place";
  EXPECT_EQ(ReadFileOrEmpty(Copy() + ".verified"), digest_ + "\n");
  // What the pod writes now reaches nothing the driver serves.
  const int written =
      openat(pods_view.get(), "bin/flux", O_WRONLY | O_TRUNC | O_CLOEXEC);
  if (written >= 0) {
    EXPECT_EQ(write(written, "#!evil\n", 7), 7);
    close(written);
  }
  EXPECT_EQ(ReadFileOrEmpty(served->path + "/bin/flux"), "#!flux\n");
}

TEST_F(ViewStoreUnitTest, ACopyAnotherDriverServesIsKept) {
  const std::string other = store_ + "/flux-core-0.87.0@0123456789abcdef";
  WriteText(other + "/bin/flux", "#!0.87\n");
  WriteText(other + ".verified", "sha256:0123456789abcdef\n");
  auto held = driver::ViewStore::Hold(other);
  ASSERT_TRUE(held) << held.error();
  {
    ViewCatalog catalog = InstallViews(views_, store_);
  }
  EXPECT_EQ(ReadFileOrEmpty(other + "/bin/flux"), "#!0.87\n");
  EXPECT_TRUE(fs::exists(other + ".verified"));
  held->Reset();
  {
    ViewCatalog catalog = InstallViews(views_, store_);
  }
  EXPECT_FALSE(fs::exists(other));
  EXPECT_FALSE(fs::exists(other + ".verified"));
  EXPECT_TRUE(fs::exists(Copy() + "/bin/flux"));
}

// While a catalog lives, its copies are held: another driver's install
// (here: the next catalog, serving nothing) leaves them.
TEST_F(ViewStoreUnitTest, ServedCopiesAreHeldForTheCatalogsLifetime) {
  auto catalog = std::make_unique<ViewCatalog>(InstallViews(views_, store_));
  ASSERT_NE(catalog->Find(kView), nullptr);
  {
    ViewCatalog none = InstallViews(scratch_ + "/no-views", store_);
  }
  EXPECT_TRUE(fs::exists(Copy() + "/bin/flux"));
  catalog.reset();
  {
    ViewCatalog none = InstallViews(scratch_ + "/no-views", store_);
  }
  EXPECT_FALSE(fs::exists(Copy()));
}

TEST_F(ViewStoreUnitTest, ABrokenViewCostsOnlyItself) {
  WriteText(views_ + "/flux-core-0.90.0/share/flux-view/view.json",
            R"({"name": "flux-core-0.90.0", "digest": "sha256:00"})");
  ViewCatalog catalog = InstallViews(views_, store_);
  EXPECT_NE(catalog.Find(kView), nullptr);
  EXPECT_EQ(catalog.Find("flux-core-0.90.0"), nullptr);
  const driver::ViewFailure* failure = catalog.FindFailure("flux-core-0.90.0");
  ASSERT_NE(failure, nullptr);
  EXPECT_NE(failure->cause.find("sha256:<64 hex>"), std::string::npos)
      << failure->cause;
  EXPECT_EQ(catalog.FindFailure(kView), nullptr);
}

TEST_F(ViewStoreUnitTest, NoTemporaryIsLeftAndTheCopyKeepsTheModes) {
  ViewCatalog catalog = InstallViews(views_, store_);
  ASSERT_NE(catalog.Find(kView), nullptr);
  for (const auto& entry : fs::directory_iterator(store_)) {
    EXPECT_FALSE(entry.path().filename().string().starts_with(".tmp-"))
        << entry.path();
  }
  auto copied = TreeDigest(Copy(), kManifest);
  ASSERT_TRUE(copied) << copied.error();
  EXPECT_EQ(*copied, digest_);
  EXPECT_EQ(fs::status(Copy()).permissions(),
            fs::status(views_ + "/" + kView).permissions());
}

}  // namespace
}  // namespace fcc::testing
