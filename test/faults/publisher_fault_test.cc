// Publisher under injected faults, through the HostFs interface: every
// failing call must return the right CSI code and leave nothing it created
// (kubelet may never call unpublish for a failed publish), and a later
// publish/unpublish must converge. No root, no real mounts: FakeHostFs.
#include <gtest/gtest.h>

#include <cerrno>
#include <cstring>

#include "csi_client.h"
#include "curve/cert.h"
#include "driver/key_cache.h"
#include "driver/publisher.h"
#include "driver/volume_request.h"
#include "fake_host_fs.h"

namespace fcc::testing {
namespace {

using driver::PublishSpec;
using grpc::StatusCode;

constexpr char kPods[] = "/var/lib/kubelet/pods";

class PublisherFaultTest : public ::testing::Test {
 protected:
  void SetUp() override {
    pod_.pods_dir = kPods;
    // kubelet creates the target's parent; the target is the driver's.
    fake_.AddDir(Parent());
    auto spec = driver::ValidatePublishRequest(KubeletPublishRequest(
        pod_, {{"minicluster", "lammps"}, {"owner", "1000:2000"}}));
    ASSERT_TRUE(spec) << spec.error().message;
    spec_ = *spec;
    unspec_ = {spec_.volume_id, spec_.target_path};
  }

  std::string Target() const { return KubeletTargetPath(pod_); }
  std::string Parent() const {
    const std::string t = KubeletTargetPath(pod_);
    return t.substr(0, t.rfind('/'));
  }

  // Exactly one read-only driver tmpfs holding the right cert, 0400, owned
  // as asked.
  void ExpectHealthy() {
    ASSERT_EQ(fake_.MountCount(Target()), 1) << fake_.Dump();
    auto fs = fake_.StatFs(Target());
    ASSERT_TRUE(fs);
    EXPECT_TRUE(fs->is_tmpfs && fs->read_only);
    auto file = fake_.ReadFile(Target() + "/curve.cert", 4096);
    ASSERT_TRUE(file);
    EXPECT_EQ(file->mode, 0400u);
    EXPECT_EQ(file->uid, 1000u);
    EXPECT_EQ(file->gid, 2000u);
    EXPECT_EQ(file->content,
              curve::MakeMiniClusterCert(master_, spec_.minicluster).text);
  }

  // A later "kubelet" publish (twice) and unpublish (twice) converge.
  void ExpectConverges() {
    faulty_.Clear();
    auto status = publisher_.Publish(spec_);
    ASSERT_TRUE(status.ok()) << status.error_message() << "\n" << fake_.Dump();
    ASSERT_NO_FATAL_FAILURE(ExpectHealthy());
    status = publisher_.Publish(spec_);
    ASSERT_TRUE(status.ok()) << status.error_message();
    ASSERT_NO_FATAL_FAILURE(ExpectHealthy());
    for (int i = 0; i < 2; ++i) {
      status = publisher_.Unpublish(unspec_);
      ASSERT_TRUE(status.ok()) << status.error_message() << "\n"
                               << fake_.Dump();
      EXPECT_EQ(fake_.TotalMounts(), 0) << fake_.Dump();
      EXPECT_FALSE(fake_.Exists(Target()));
      EXPECT_TRUE(fake_.Exists(Parent())) << "kubelet's directory removed";
    }
    EXPECT_EQ(keys_.GetStats().volumes, 0u) << "a key lease leaked";
  }

  curve::Secret master_{std::string(48, 'm')};
  FakeHostFs fake_;
  FaultyHostFs faulty_{fake_};
  driver::KeyCache keys_{curve::Secret(std::string(48, 'm'))};
  driver::Publisher publisher_{faulty_, keys_};
  KubeletPod pod_;
  PublishSpec spec_;
  driver::UnpublishSpec unspec_;
};

// How the target looks when the failing publish starts.
enum class Start { kMissing, kPlainDir, kHalfMade };

struct Fault {
  Op op;
  int err;
  int nth;  // which call of `op` in the publish fails (1-based)
  StatusCode code;
};

std::string Name(Start start) {
  switch (start) {
    case Start::kMissing:
      return "Missing";
    case Start::kPlainDir:
      return "PlainDir";
    case Start::kHalfMade:
      return "HalfMade";
  }
  return "?";
}

class PublishFaultTest
    : public PublisherFaultTest,
      public ::testing::WithParamInterface<std::tuple<Start, Fault>> {};

TEST_P(PublishFaultTest, FailsWithTheRightCodeLeavesNothingAndConverges) {
  const auto [start, fault] = GetParam();
  switch (start) {
    case Start::kMissing:
      break;
    case Start::kPlainDir:
      fake_.AddDir(Target(), 0750);
      break;
    case Start::kHalfMade:  // a driver killed between mount and write
      fake_.AddDir(Target(), 0750);
      fake_.AddHalfMadeMount(Target());
      break;
  }
  const std::string before = fake_.Dump();
  faulty_.Fail(fault.op, fault.err, fault.nth);

  const grpc::Status status = publisher_.Publish(spec_);
  // A case whose path never makes the call would test a plain publish:
  // PublishFaultCases() leaves those out, and this keeps it so.
  ASSERT_EQ(faulty_.Injected(), 1)
      << "the publish from " << Name(start) << " made no " << OpName(fault.op)
      << " call #" << fault.nth << " to fail; status "
      << status.error_message();
  if (fault.op == Op::kInspect && status.ok()) {
    // A glitching first look at an existing directory is treated as damage:
    // the repair path looks again and publishes. Fine, if healthy.
    ASSERT_NE(start, Start::kMissing);
    ASSERT_NO_FATAL_FAILURE(ExpectHealthy());
  } else {
    EXPECT_EQ(status.error_code(), fault.code) << status.error_message();
    EXPECT_NE(status.error_message().find(Target()), std::string::npos)
        << "the message should name the target: " << status.error_message();
    if (start == Start::kHalfMade) {
      // The repair may have unmounted the damaged mount before failing:
      // either untouched, or a plain, unmounted directory.
      if (fake_.Dump() != before) {
        EXPECT_EQ(fake_.TotalMounts(), 0) << fake_.Dump();
        EXPECT_EQ(fake_.Inspect(Target()), driver::PathKind::kDirectory);
      }
    } else {
      EXPECT_EQ(fake_.Dump(), before) << "a failed publish left something";
    }
    EXPECT_EQ(keys_.GetStats().volumes, 0u) << "a failed publish kept a key";
  }
  ASSERT_NO_FATAL_FAILURE(ExpectConverges());
}

std::vector<Fault> PublishFaults() {
  std::vector<Fault> out;
  for (int err : {EBUSY, EPERM, EINVAL, ENOMEM}) {
    out.push_back({Op::kMount, err, 1, StatusCode::INTERNAL});
    out.push_back({Op::kAttach, err, 1, StatusCode::INTERNAL});
    out.push_back({Op::kRemount, err, 1, StatusCode::INTERNAL});
    out.push_back({Op::kUnmount, err, 1, StatusCode::INTERNAL});
  }
  out.push_back({Op::kWrite, ENOSPC, 1, StatusCode::RESOURCE_EXHAUSTED});
  out.push_back({Op::kAttach, ENOSPC, 1, StatusCode::RESOURCE_EXHAUSTED});
  out.push_back({Op::kWrite, EIO, 1, StatusCode::INTERNAL});
  out.push_back({Op::kWrite, EPERM, 1, StatusCode::INTERNAL});
  out.push_back({Op::kMakeDir, ENOENT, 1, StatusCode::FAILED_PRECONDITION});
  out.push_back({Op::kMakeDir, ENOSPC, 1, StatusCode::RESOURCE_EXHAUSTED});
  out.push_back({Op::kMakeDir, EACCES, 1, StatusCode::INTERNAL});
  out.push_back({Op::kMakeDir, EROFS, 1, StatusCode::INTERNAL});
  // A failing first look (e.g. a stat glitch) must not lead anywhere odd.
  out.push_back({Op::kInspect, EIO, 1, StatusCode::INTERNAL});
  return out;
}

// Whether a publish from `start` makes the call `op`: only a missing
// target is made with mkdir, and only a mount there (the half-made one) is
// unmounted; every path looks, mounts, writes, seals and attaches.
bool PublishMakesCall(Start start, Op op) {
  switch (op) {
    case Op::kMakeDir:
      return start == Start::kMissing;
    case Op::kUnmount:
      return start == Start::kHalfMade;
    default:
      return true;
  }
}

// Every start with every fault its publish can meet.
std::vector<std::tuple<Start, Fault>> PublishFaultCases() {
  std::vector<std::tuple<Start, Fault>> out;
  for (Start start : {Start::kMissing, Start::kPlainDir, Start::kHalfMade}) {
    for (const Fault& fault : PublishFaults()) {
      if (PublishMakesCall(start, fault.op)) out.emplace_back(start, fault);
    }
  }
  return out;
}

std::string PublishFaultName(
    const ::testing::TestParamInfo<std::tuple<Start, Fault>>& info) {
  const Start start = std::get<0>(info.param);
  const Fault& f = std::get<1>(info.param);
  return Name(start) + "_" + OpName(f.op) + "_" + strerrorname_np(f.err);
}

INSTANTIATE_TEST_SUITE_P(Faults, PublishFaultTest,
                         ::testing::ValuesIn(PublishFaultCases()),
                         PublishFaultName);

// The rollback itself fails: the failure is still reported with the first
// error's code, nothing is mounted (the volume was never attached), and the
// next publish or unpublish cleans up the directory.
TEST_F(PublisherFaultTest, RemountFailsAndRollbackRemoveFails) {
  faulty_.Fail(Op::kRemount, EPERM, 1);
  faulty_.Fail(Op::kRemove, EBUSY);
  const auto status = publisher_.Publish(spec_);
  EXPECT_EQ(status.error_code(), StatusCode::INTERNAL);
  EXPECT_EQ(fake_.TotalMounts(), 0) << "a half-made volume was attached";
  ASSERT_NO_FATAL_FAILURE(ExpectConverges());
}

TEST_F(PublisherFaultTest, AttachFailsAndRollbackRemoveFails) {
  faulty_.Fail(Op::kAttach, EBUSY, 1);
  faulty_.Fail(Op::kRemove, EPERM);
  const auto status = publisher_.Publish(spec_);
  EXPECT_EQ(status.error_code(), StatusCode::INTERNAL);
  EXPECT_EQ(fake_.TotalMounts(), 0);
  ASSERT_NO_FATAL_FAILURE(ExpectConverges());
}

TEST_F(PublisherFaultTest, HealthyVolumeSurvivesFailingReadsAsRepair) {
  ASSERT_TRUE(publisher_.Publish(spec_).ok());
  // A read error on a healthy volume is treated as damage and repaired:
  // the end state is still exactly one healthy mount.
  faulty_.Fail(Op::kRead, EIO, 1);
  const auto status = publisher_.Publish(spec_);
  EXPECT_TRUE(status.ok()) << status.error_message();
  ASSERT_NO_FATAL_FAILURE(ExpectHealthy());
  ASSERT_NO_FATAL_FAILURE(ExpectConverges());
}

struct UnpublishFault {
  Op op;
  int err;
};

class UnpublishFaultTest
    : public PublisherFaultTest,
      public ::testing::WithParamInterface<UnpublishFault> {};

TEST_P(UnpublishFaultTest, FailsInternalKeepsParentAndConverges) {
  ASSERT_TRUE(publisher_.Publish(spec_).ok());
  faulty_.Fail(GetParam().op, GetParam().err);
  const auto status = publisher_.Unpublish(unspec_);
  EXPECT_EQ(status.error_code(), StatusCode::INTERNAL)
      << status.error_message();
  EXPECT_TRUE(fake_.Exists(Parent()));
  EXPECT_LE(fake_.MountCount(Target()), 1) << fake_.Dump();
  ASSERT_NO_FATAL_FAILURE(ExpectConverges());
}

INSTANTIATE_TEST_SUITE_P(
    Faults, UnpublishFaultTest,
    ::testing::Values(UnpublishFault{Op::kUnmount, EBUSY},
                      UnpublishFault{Op::kUnmount, EPERM},
                      // EINVAL: "not a mount" — the driver then tries rmdir,
                      // which fails because the mount is still there.
                      UnpublishFault{Op::kUnmount, EINVAL},
                      UnpublishFault{Op::kRemove, EBUSY},
                      UnpublishFault{Op::kRemove, EPERM}),
    [](const auto& info) {
      return std::string(OpName(info.param.op)) + "_" +
             strerrorname_np(info.param.err);
    });

// Every call of every operation failing once, at every position, in one
// publish: a bounded exhaustive sweep of single faults.
TEST_F(PublisherFaultTest, EverySingleFaultPositionConverges) {
  int cases = 0;
  for (int op = 0; op < static_cast<int>(Op::kCount); ++op) {
    for (int nth = 1; nth <= 4; ++nth) {
      for (Start start : {Start::kMissing, Start::kPlainDir}) {
        SCOPED_TRACE(std::string(OpName(static_cast<Op>(op))) + " #" +
                     std::to_string(nth) + " " + Name(start));
        if (start == Start::kPlainDir) fake_.AddDir(Target(), 0750);
        const std::string before = fake_.Dump();
        faulty_.Fail(static_cast<Op>(op), EIO, nth);
        const auto status = publisher_.Publish(spec_);
        if (!status.ok()) {
          EXPECT_EQ(fake_.Dump(), before) << status.error_message();
        }
        ASSERT_NO_FATAL_FAILURE(ExpectConverges());
        ++cases;
      }
    }
  }
  EXPECT_EQ(cases, 2 * 4 * static_cast<int>(Op::kCount));
}

// The node's cap (issue 30): a publish past it touches no path and derives
// no key; a publish that fails gives its place back; an unpublish frees it.
class PublisherCapTest : public PublisherFaultTest {
 protected:
  PublishSpec SpecOf(const KubeletPod& pod) {
    const std::string target = KubeletTargetPath(pod);
    fake_.AddDir(target.substr(0, target.rfind('/')));
    auto spec = driver::ValidatePublishRequest(
        KubeletPublishRequest(pod, {{"minicluster", "other"}}));
    EXPECT_TRUE(spec) << spec.error().message;
    return *spec;
  }

  static driver::PublisherOptions OneVolumeNode() {
    driver::PublisherOptions options;
    options.caps = {.per_pod = 1, .per_node = 1};
    return options;
  }

  driver::Publisher capped_{faulty_, keys_, OneVolumeNode()};
};

TEST_F(PublisherCapTest, RefusedBeforeAnyHostCallAndFailuresGiveBack) {
  KubeletPod other = pod_;
  other.uid = "6f1c2d3e-0000-4000-8000-0000000000ff";
  const PublishSpec second = SpecOf(other);
  // A failing publish does not keep its place.
  faulty_.Fail(Op::kAttach, EIO, 1);
  EXPECT_EQ(capped_.Publish(spec_).error_code(), StatusCode::INTERNAL);
  faulty_.Clear();
  ASSERT_TRUE(capped_.Publish(spec_).ok()) << fake_.Dump();
  const std::string before = fake_.Dump();
  const int inspects = faulty_.Calls(Op::kInspect);
  const uint64_t derivations = keys_.GetStats().misses;
  const grpc::Status refused = capped_.Publish(second);
  EXPECT_EQ(refused.error_code(), StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_NE(refused.error_message().find("--max-volumes-per-node=1"),
            std::string::npos)
      << refused.error_message();
  EXPECT_EQ(faulty_.Calls(Op::kInspect), inspects)
      << "the target was looked at";
  EXPECT_EQ(fake_.Dump(), before);
  EXPECT_EQ(keys_.GetStats().misses, derivations)
      << "a refused publish derived";
  ASSERT_TRUE(capped_.Unpublish(unspec_).ok());
  EXPECT_TRUE(capped_.Publish(second).ok());
}

}  // namespace
}  // namespace fcc::testing
