// At the most verbose log level, in text and JSON formats, no secret key, no
// master key and no service-account token appears in the driver's output or
// in the errors it returns; and the CSI socket is root's alone.
#include <gtest/gtest-spi.h>
#include <gtest/gtest.h>
#include <openssl/evp.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <zmq.h>

#include <nlohmann/json.hpp>
#include <sstream>

#include "csi_client.h"
#include "curve/keys.h"
#include "driver/key_cache.h"
#include "driver_process.h"
#include "driver_test_env.h"
#include "mount_env.h"

namespace fcc::testing {
namespace {

// Printable, so a leak through any string formatting shows verbatim.
const std::string kMasterKey =
    "fcc-secrecy-test-master-key:Vq3XbN8kLr2TzWp6Hd1YcM5sGf9JeA4uQo7Ki0";
// Shaped like a projected service-account JWT (header.payload.signature).
const std::string kToken =
    "eyJhbGciOiJSUzI1NiIsImtpZCI6ImZjYy10ZXN0In0."
    "eyJzdWIiOiJzeXN0ZW06c2VydmljZWFjY291bnQ6ZmNjLXNlY3JlY3ktdGVzdCJ9."
    "U0lHTkFUVVJFLWZjYy1zZWNyZWN5LXRlc3QtZG8tbm90LWxvZy1tZQ";

const curve::MiniClusterId kMiniClusters[] = {
    {"default", "lammps", ""},
    {"default", "gromacs", "uid-1"},
    {"science", "lammps", ""},
};

std::string Hex(std::string_view bytes) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (unsigned char c : bytes) {
    out.push_back(kHex[c >> 4]);
    out.push_back(kHex[c & 15]);
  }
  return out;
}

std::string Base64(std::string_view bytes) {
  std::string out(4 * ((bytes.size() + 2) / 3) + 1, '\0');
  const int n =
      EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                      reinterpret_cast<const unsigned char*>(bytes.data()),
                      static_cast<int>(bytes.size()));
  out.resize(n);
  return out;
}

// A secret as it could show up in a log: verbatim, in halves (truncated
// logging), JSON-escaped, decoded to raw bytes, hex, base64.
struct Needle {
  std::string what;
  std::string bytes;
};

void AddSecretForms(const std::string& what, const std::string& z85,
                    std::vector<Needle>& out) {
  ASSERT_EQ(z85.size(), 40u);
  out.push_back({what, z85});
  out.push_back({what + " (first half)", z85.substr(0, 20)});
  out.push_back({what + " (second half)", z85.substr(20)});
  std::string json = nlohmann::json(z85).dump();
  json = json.substr(1, json.size() - 2);
  out.push_back({what + " (JSON-escaped)", json});
  std::string slashed;
  for (char c : json) {
    if (c == '/')
      slashed += "\\/";
    else
      slashed.push_back(c);
  }
  out.push_back({what + " (JSON, escaped /)", slashed});
  uint8_t raw[32];
  ASSERT_NE(zmq_z85_decode(raw, z85.c_str()), nullptr);
  const std::string raw_bytes(reinterpret_cast<char*>(raw), sizeof(raw));
  out.push_back({what + " (raw)", raw_bytes});
  out.push_back({what + " (hex)", Hex(raw_bytes)});
  out.push_back({what + " (base64)", Base64(raw_bytes).substr(0, 40)});
}

// Every secret of this test, in every form it could leak in.
std::vector<Needle> Needles() {
  std::vector<Needle> needles;
  for (const auto& mc : kMiniClusters) {
    const auto keys = curve::DeriveKeypair(curve::Secret(kMasterKey), mc);
    AddSecretForms("secret key of " + mc.QualifiedName() + "/" + mc.generation,
                   std::string(keys.secret_z85.reveal()), needles);
  }
  needles.push_back({"master key", kMasterKey});
  for (size_t i = 0; i + 16 <= kMasterKey.size(); i += 16) {
    needles.push_back({"master key slice", kMasterKey.substr(i, 16)});
  }
  needles.push_back({"master key (hex)", Hex(kMasterKey).substr(0, 32)});
  needles.push_back({"master key (base64)", Base64(kMasterKey).substr(0, 32)});
  needles.push_back({"token", kToken});
  std::stringstream parts(kToken);
  for (std::string part; std::getline(parts, part, '.');) {
    needles.push_back({"token segment", part});
  }
  return needles;
}

// Every needle absent from `haystack` (named `where` in failures).
void ExpectNoNeedles(const std::string& where, const std::string& haystack) {
  for (const auto& needle : Needles()) {
    const size_t at = haystack.find(needle.bytes);
    EXPECT_EQ(at, std::string::npos)
        << needle.what << " found in " << where << " at byte " << at << ": ..."
        << haystack.substr(at < 80 ? 0 : at - 80, 160) << "...";
  }
}

class SecrecyTest : public DriverTest,
                    public ::testing::WithParamInterface<const char*> {
 protected:
  std::string MasterKeyBytes() const override { return kMasterKey; }
  DriverProcess::Options DriverOptions() const override {
    auto options = NodeOptions(*root_, "node-a", master_key_);
    options.log_level = "trace";
    options.log_path = root_->log_path(std::string("node-a-") + GetParam());
    options.extra_args = {std::string("--log-format=") + GetParam()};
    return options;
  }
  bool json() const { return std::string(GetParam()) == "json"; }

  KubeletPod PodFor(int i, const curve::MiniClusterId& mc) const {
    KubeletPod pod;
    pod.pods_dir = root_->pods_dir();
    pod.namespace_name = mc.namespace_name;
    pod.name = mc.name + "-" + std::to_string(i);
    pod.uid = "5ec5ec00-0000-4000-8000-00000000000" + std::to_string(i);
    pod.service_account_token = kToken;
    return pod;
  }
  static std::map<std::string, std::string> AttrsFor(
      const curve::MiniClusterId& mc) {
    std::map<std::string, std::string> attrs = {{"minicluster", mc.name}};
    if (!mc.generation.empty()) attrs["generation"] = mc.generation;
    return attrs;
  }
};

TEST_P(SecrecyTest, NoSecretInLogsOrErrors) {
  std::vector<std::string> errors;  // every message the client saw
  auto expect_ok = [&](const grpc::Status& status, const std::string& what) {
    EXPECT_TRUE(status.ok()) << what << ": " << status.error_message();
    errors.push_back(status.error_message() + status.error_details());
  };
  auto expect_code = [&](const grpc::Status& status, grpc::StatusCode code,
                         const std::string& what) {
    EXPECT_EQ(status.error_code(), code)
        << what << ": " << status.error_message();
    errors.push_back(status.error_message() + status.error_details());
  };

  // Publishes for several MiniClusters, each twice (the idempotent path).
  std::vector<KubeletPod> pods;
  for (size_t i = 0; i < std::size(kMiniClusters); ++i) {
    pods.push_back(PodFor(static_cast<int>(i), kMiniClusters[i]));
    KubeletPrepareParent(pods.back());
    const auto request =
        KubeletPublishRequest(pods.back(), AttrsFor(kMiniClusters[i]));
    ASSERT_TRUE(request.volume_context().contains(
        "csi.storage.k8s.io/serviceAccount.tokens"));
    expect_ok(client_->Publish(request), "publish");
    expect_ok(client_->Publish(request), "publish again");
    // Positive control: the secrets searched for below are the real ones.
    const std::string cert =
        ReadFileOrEmpty(KubeletTargetPath(pods.back()) + "/curve.cert");
    const auto keys =
        curve::DeriveKeypair(curve::Secret(kMasterKey), kMiniClusters[i]);
    ASSERT_NE(cert.find(keys.secret_z85.reveal()), std::string::npos)
        << "the test derives other keys than the driver";
  }
  // Another MiniCluster at a published target (ALREADY_EXISTS), and the
  // repair of a damaged target.
  expect_code(client_->Publish(
                  KubeletPublishRequest(pods[0], AttrsFor(kMiniClusters[1]))),
              grpc::StatusCode::ALREADY_EXISTS, "incompatible publish");
  KubeletPod damaged = PodFor(7, kMiniClusters[0]);
  KubeletPrepareParent(damaged);
  const std::string damaged_target = KubeletTargetPath(damaged);
  std::filesystem::create_directory(damaged_target);
  ASSERT_EQ(mount("curve.minicluster.dev", damaged_target.c_str(), "tmpfs", 0,
                  "size=64k,nr_inodes=8"),
            0);
  expect_ok(client_->Publish(
                KubeletPublishRequest(damaged, AttrsFor(kMiniClusters[0]))),
            "repairing publish");
  pods.push_back(damaged);

  // Invalid requests, each carrying the token and some carrying secrets.
  const std::string lammps_secret(
      curve::DeriveKeypair(curve::Secret(kMasterKey), kMiniClusters[0])
          .secret_z85.reveal());
  KubeletPod bad = PodFor(8, kMiniClusters[0]);
  KubeletPrepareParent(bad);
  const std::vector<std::pair<std::string, std::map<std::string, std::string>>>
      bad_attrs = {
          {"unknown key (typo)",
           {{"minicluster", "lammps"}, {"minicluser", kToken}}},
          {"unknown key holding the token",
           {{"minicluster", "lammps"}, {kToken, "x"}}},
          {"unknown key holding a secret",
           {{"minicluster", "lammps"}, {lammps_secret, "x"}}},
          {"bad owner",
           {{"minicluster", "lammps"}, {"owner", "1000:" + kToken}}},
          {"owner holding a secret",
           {{"minicluster", "lammps"}, {"owner", lammps_secret}}},
          {"bad minicluster", {{"minicluster", "../" + lammps_secret}}},
          {"bad generation",
           {{"minicluster", "lammps"}, {"generation", kToken + "\"'"}}},
          {"no minicluster", {{"generation", lammps_secret}}},
      };
  for (const auto& [what, attrs] : bad_attrs) {
    expect_code(client_->Publish(KubeletPublishRequest(bad, attrs)),
                grpc::StatusCode::INVALID_ARGUMENT, what);
  }
  // A user's typo is still named in the error: the message stays useful.
  EXPECT_NE(errors[errors.size() - bad_attrs.size()].find("minicluser"),
            std::string::npos);
  auto not_ephemeral = KubeletPublishRequest(bad, {{"minicluster", "lammps"}});
  not_ephemeral.mutable_volume_context()->erase("csi.storage.k8s.io/ephemeral");
  expect_code(client_->Publish(not_ephemeral),
              grpc::StatusCode::INVALID_ARGUMENT, "not ephemeral");
  auto secret_volume_id =
      KubeletPublishRequest(bad, {{"minicluster", "lammps"}});
  secret_volume_id.set_volume_id(lammps_secret);
  expect_code(client_->Publish(secret_volume_id),
              grpc::StatusCode::INVALID_ARGUMENT, "secret as volume_id");
  expect_code(client_->Unpublish(lammps_secret, KubeletTargetPath(bad)),
              grpc::StatusCode::INVALID_ARGUMENT, "unpublish secret volume_id");
  EXPECT_FALSE(PathExists(KubeletTargetPath(bad)));

  for (const auto& pod : pods) {
    expect_ok(client_->Unpublish(KubeletVolumeId(pod), KubeletTargetPath(pod)),
              "unpublish");
    expect_ok(client_->Unpublish(KubeletVolumeId(pod), KubeletTargetPath(pod)),
              "unpublish again");
  }
  EXPECT_TRUE(MountsUnder(root_->pods_dir()).empty());

  client_.reset();
  ASSERT_EQ(driver_->Terminate(std::chrono::seconds(10)), 0);
  const std::string log = ReadFileOrEmpty(driver_->options().log_path);

  // Positive controls: the log is the verbose one and holds real detail.
  EXPECT_NE(log.find("NodePublishVolume"), std::string::npos) << log;
  EXPECT_NE(log.find("repairing"), std::string::npos) << log;
  const std::string lammps_public =
      curve::DeriveKeypair(curve::Secret(kMasterKey), kMiniClusters[0])
          .public_z85;
  EXPECT_NE(log.find(lammps_public), std::string::npos) << log;

  ExpectNoNeedles("the driver's log", log);
  for (size_t i = 0; i < errors.size(); ++i) {
    ExpectNoNeedles("gRPC error #" + std::to_string(i), errors[i]);
  }

  if (json()) {
    std::stringstream lines(log);
    std::string messages;
    int count = 0;
    for (std::string line; std::getline(lines, line);) {
      ++count;
      SCOPED_TRACE("log line " + std::to_string(count) + ": " + line);
      nlohmann::json entry;
      ASSERT_NO_THROW(entry = nlohmann::json::parse(line));
      ASSERT_TRUE(entry.is_object());
      EXPECT_TRUE(entry.contains("ts"));
      EXPECT_TRUE(entry.contains("level"));
      ASSERT_TRUE(entry.contains("msg") && entry["msg"].is_string());
      messages += entry["msg"].get<std::string>() + "\n";
    }
    EXPECT_GT(count, 20);
    // Decoded, in case an escape hid a secret from the raw search.
    ExpectNoNeedles("the decoded JSON messages", messages);
  }
}

INSTANTIATE_TEST_SUITE_P(LogFormats, SecrecyTest,
                         ::testing::Values("text", "json"),
                         [](const auto& info) {
                           return std::string(info.param);
                         });

// The search itself must find what it looks for, or the test above proves
// nothing: plant each form of each secret in a log line.
TEST(SecrecySearchTest, FindsEveryPlantedSecret) {
  for (const auto& needle : Needles()) {
    ::testing::TestPartResultArray failures;
    {
      ::testing::ScopedFakeTestPartResultReporter reporter(
          ::testing::ScopedFakeTestPartResultReporter::
              INTERCEPT_ONLY_CURRENT_THREAD,
          &failures);
      ExpectNoNeedles("a planted log", "2026-01-01T00:00:00 I published " +
                                           needle.bytes + " to a pod\n");
    }
    EXPECT_GE(failures.size(), 1) << "not found: " << needle.what;
  }
}

using SecrecySocketTest = DriverTest;

TEST_F(SecrecySocketTest, SocketIsRootsAlone) {
  struct stat st{};
  ASSERT_EQ(lstat(socket_path().c_str(), &st), 0);
  EXPECT_TRUE(S_ISSOCK(st.st_mode));
  EXPECT_EQ(st.st_mode & 0777, 0600u) << std::oct << (st.st_mode & 0777);
  EXPECT_EQ(st.st_uid, 0u);
  EXPECT_EQ(st.st_gid, 0u);
}

}  // namespace
}  // namespace fcc::testing
