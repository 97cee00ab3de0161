// readonly=false: kubelet sends it for every pod spec without
// volumes[].csi.readOnly: true, which is every flux-operator v1alpha2 pod (it
// builds the CSI volume from driver and attributes only). The driver as the
// DaemonSet ships it publishes such a volume, exactly as read-only as any
// other; --require-readonly refuses it.
#include <sys/stat.h>
#include <unistd.h>

#include <CLI/Error.hpp>
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "curve/cert_file.h"
#include "driver_test_env.h"

namespace fcc::testing {
namespace {

// Leading spaces of `line`.
size_t Indent(const std::string& line) {
  const size_t first = line.find_first_not_of(' ');
  return first == std::string::npos ? line.size() : first;
}

// The `args:` list of the `driver` container in the DaemonSet as shipped
// (deploy/daemonset/daemonset.yaml): a block list of plain scalars, one a
// line. Empty if the file no longer has that shape (the test then fails).
std::vector<std::string> DaemonSetDriverArgs() {
  std::ifstream in(FCC_DEPLOY_DIR "/daemonset/daemonset.yaml");
  std::vector<std::string> args;
  std::string line;
  bool in_driver = false;
  size_t args_indent = std::string::npos;
  while (std::getline(in, line)) {
    const size_t indent = Indent(line);
    const std::string text = line.substr(indent);
    if (text.empty() || text.front() == '#') continue;
    if (args_indent == std::string::npos) {
      if (text == "- name: driver") in_driver = true;
      if (in_driver && text == "args:") args_indent = indent;
      continue;
    }
    if (indent < args_indent || !text.starts_with("- ")) break;
    std::string arg = text.substr(2);
    if (const size_t comment = arg.find(" #"); comment != std::string::npos) {
      arg.erase(comment);
    }
    args.push_back(arg);
  }
  return args;
}

// The DaemonSet's serve args with what points at the node's paths moved into
// the scratch root: --master-key-dir to a directory holding `key_file` as
// master.key. DriverProcess passes --endpoint, --node-id, --master-key-file
// and --kubelet-dir itself; every other arg (any policy flag above all) is
// kept as shipped.
std::vector<std::string> DaemonSetArgsForTest(const ScratchRoot& root,
                                              const std::string& key_file) {
  const std::string registration =
      std::filesystem::path(root.pods_dir()).parent_path() / "registration";
  std::filesystem::create_directories(registration);
  const std::string keys = root.path() + "/master-keys";
  std::filesystem::create_directories(keys);
  std::filesystem::copy_file(key_file, keys + "/master.key");
  std::vector<std::string> out;
  for (const std::string& arg : DaemonSetDriverArgs()) {
    if (arg == "serve" || arg.starts_with("--endpoint=") ||
        arg.starts_with("--node-id=") ||
        arg.starts_with("--master-key-file=") ||
        arg.starts_with("--kubelet-dir=")) {
      continue;
    }
    if (arg.starts_with("--master-key-dir=")) {
      out.push_back("--master-key-dir=" + keys);
    } else if (arg.starts_with("--metrics-address=")) {
      out.push_back("--metrics-address=127.0.0.1:0");
    } else if (arg.starts_with("--registration-dir=")) {
      out.push_back("--registration-dir=" + registration);
    } else {
      out.push_back(arg);
    }
  }
  return out;
}

// What kubelet sends for the volume of docs/reference/flux-operator.md's
// MiniCluster: flux-operator renders csi: {driver, volumeAttributes:
// csiDriverAttributes} and nothing else, so readonly is false.
csi::v1::NodePublishVolumeRequest FluxOperatorPublishRequest(
    const KubeletPod& pod) {
  auto request = KubeletPublishRequest(
      pod, {{"minicluster", "lammps"}, {"generation", "1"}, {"owner", "0"}});
  request.set_readonly(false);
  return request;
}

// Nothing, not even root, can change what is at `target`: the mount is
// read-only and so is the tmpfs superblock under it.
void ExpectReadOnlyForRoot(const std::string& target) {
  ASSERT_EQ(geteuid(), 0u);
  ASSERT_EQ(MountCountAt(target), 1) << "mounts stacked at " << target;
  const auto mounts = MountsUnder(target);
  ASSERT_EQ(mounts.size(), 1u);
  EXPECT_TRUE(HasToken(mounts[0].options, "ro")) << mounts[0].options;
  EXPECT_TRUE(HasToken(mounts[0].super_options, "ro"))
      << mounts[0].super_options;

  ExpectUnwritableEvenForRoot(target);
  const std::string cert = target + "/curve.cert";
  struct stat st{};
  ASSERT_EQ(stat(cert.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0400u);
  auto parsed = curve::LoadCertFile(cert);
  EXPECT_TRUE(parsed) << parsed.error();
}

// The driver started with the DaemonSet's own args.
class ReadonlyFalseTest : public DriverTest {
 protected:
  DriverProcess::Options DriverOptions() const override {
    auto options = NodeOptions(*root_, "node-a", master_key_);
    options.extra_args = DaemonSetArgsForTest(*root_, master_key_);
    return options;
  }
};

TEST_F(ReadonlyFalseTest, ReadsTheDaemonSetArgs) {
  const auto args = DaemonSetDriverArgs();
  ASSERT_FALSE(args.empty()) << "no args: list for the driver container in "
                             << FCC_DEPLOY_DIR "/daemonset/daemonset.yaml";
  EXPECT_EQ(args.front(), "serve");
  EXPECT_NE(std::find(args.begin(), args.end(),
                      "--master-key-dir=/etc/flux-curve-csi"),
            args.end());
}

TEST_F(ReadonlyFalseTest, PublishesFluxOperatorVolumeReadOnly) {
  const auto request = FluxOperatorPublishRequest(pod_);
  const std::string target = KubeletTargetPath(pod_);

  const auto status = client_->Publish(request);
  ASSERT_TRUE(status.ok()) << status.error_message() << "\n" << log();
  ASSERT_NO_FATAL_FAILURE(ExpectReadOnlyForRoot(target));
  auto cert = curve::LoadCertFile(target + "/curve.cert");
  ASSERT_TRUE(cert) << cert.error();
  EXPECT_EQ(cert->metadata.at("name"), "default.lammps");

  // Idempotent like any publish: a retry stacks nothing.
  ASSERT_TRUE(client_->Publish(request).ok());
  EXPECT_EQ(MountCountAt(target), 1);

  ASSERT_TRUE(client_->Unpublish(request.volume_id(), target).ok());
  EXPECT_EQ(MountCountAt(target), 0);
  EXPECT_FALSE(PathExists(target));
}

// readonly does not change what is mounted, so a publish that differs only
// in it is the same volume (OK), not an incompatible one.
TEST_F(ReadonlyFalseTest, ReadonlyTrueAndFalseGetTheSameVolume) {
  auto request = FluxOperatorPublishRequest(pod_);
  const std::string target = KubeletTargetPath(pod_);
  request.set_readonly(true);
  ASSERT_TRUE(client_->Publish(request).ok());
  const std::string bytes = ReadFileOrEmpty(target + "/curve.cert");
  request.set_readonly(false);
  const auto status = client_->Publish(request);
  EXPECT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(MountCountAt(target), 1);
  EXPECT_EQ(ReadFileOrEmpty(target + "/curve.cert"), bytes);
  ASSERT_TRUE(client_->Unpublish(request.volume_id(), target).ok());
}

// A driver started with one more flag than the defaults.
class DriverWithFlagTest : public DriverTest {
 protected:
  virtual const char* Flag() const = 0;
  DriverProcess::Options DriverOptions() const override {
    auto options = NodeOptions(*root_, "node-a", master_key_);
    options.extra_args.push_back(Flag());
    return options;
  }
};

class RequireReadonlyTest : public DriverWithFlagTest {
 protected:
  const char* Flag() const override { return "--require-readonly"; }
};

// The refusal names the field, the pod-spec fix and the flag, and leaves
// nothing behind (kubelet may never call unpublish for it).
TEST_F(RequireReadonlyTest, RefusesReadonlyFalseAndSaysWhy) {
  const auto status = client_->Publish(FluxOperatorPublishRequest(pod_));
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  for (const char* part :
       {"readonly", "readOnly: true", "--require-readonly"}) {
    EXPECT_NE(status.error_message().find(part), std::string::npos)
        << part << " not in: " << status.error_message();
  }
  EXPECT_FALSE(PathExists(KubeletTargetPath(pod_)));
}

TEST_F(RequireReadonlyTest, PublishesReadonlyTrue) {
  auto request = FluxOperatorPublishRequest(pod_);
  request.set_readonly(true);
  const std::string target = KubeletTargetPath(pod_);
  const auto status = client_->Publish(request);
  ASSERT_TRUE(status.ok()) << status.error_message();
  ASSERT_NO_FATAL_FAILURE(ExpectReadOnlyForRoot(target));
  ASSERT_TRUE(client_->Unpublish(request.volume_id(), target).ok());
}

// DaemonSets written for the old default pass --accept-readonly-false: the
// driver still starts (with a deprecation warning) and behaves as default.
class LegacyAcceptReadonlyFalseTest : public DriverWithFlagTest {
 protected:
  const char* Flag() const override { return "--accept-readonly-false"; }
};

TEST_F(LegacyAcceptReadonlyFalseTest, StillStartsAndWarns) {
  const auto request = FluxOperatorPublishRequest(pod_);
  const std::string target = KubeletTargetPath(pod_);
  ASSERT_TRUE(client_->Publish(request).ok());
  ASSERT_NO_FATAL_FAILURE(ExpectReadOnlyForRoot(target));
  ASSERT_TRUE(client_->Unpublish(request.volume_id(), target).ok());
  EXPECT_NE(log().find("--accept-readonly-false is deprecated"),
            std::string::npos)
      << log();
}

// The old flag and the new one contradict each other: refuse to start
// rather than guess.
TEST_F(DriverTest, RefusesBothReadonlyFlags) {
  auto options = NodeOptions(*root_, "node-b", master_key_);
  options.extra_args = {"--accept-readonly-false", "--require-readonly"};
  DriverProcess both(options);
  // CLI11 rejects the pair while parsing, with its own code for it.
  EXPECT_EQ(both.RunToExit(), static_cast<int>(CLI::ExitCodes::ExcludesError));
  EXPECT_NE(ReadFileOrEmpty(options.log_path).find("excludes"),
            std::string::npos)
      << ReadFileOrEmpty(options.log_path);
}

}  // namespace
}  // namespace fcc::testing
