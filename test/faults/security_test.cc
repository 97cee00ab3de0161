// Security properties of the node driver, through the real process and the
// real socket: the namespace is the trust boundary and comes
// only from kubelet; no attribute can traverse paths; files are 0400 and
// owned as asked; no key material outside the volumes' tmpfs; the socket is
// root-only; a readable master key is refused. docs/internals/security.md maps
// each claim to these tests. (Built from test/faults/CMakeLists.txt.)
#include <fcntl.h>
#include <grp.h>
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "curve/cert.h"
#include "real_env.h"

namespace fcc::testing {
namespace {

namespace fs = std::filesystem;
using grpc::StatusCode;

class SecurityTest : public RealDriverTest {
 protected:
  // The secret-key Z85 of `name` in `ns` under the test master key.
  std::string SecretZ85(const std::string& ns, const std::string& name) {
    auto parsed = curve::ParseCert(Cert(ns, name));
    EXPECT_TRUE(parsed);
    return parsed ? std::string(parsed->keys.secret_z85.reveal()) : "";
  }
};

// A user can name another namespace only through an attribute; every such
// attempt either is refused or has no effect: the cert is the pod's
// namespace's.
TEST_F(SecurityTest, NamespaceComesOnlyFromKubelet) {
  const std::string own = Cert("default", "lammps");
  // Unknown user keys that look like a namespace are refused outright.
  for (const char* key : {"namespace", "pod.namespace", "podNamespace"}) {
    SCOPED_TRACE(key);
    KubeletPod pod = Pod(1);
    auto status = client_->Publish(KubeletPublishRequest(
        pod, {{"minicluster", "lammps"}, {key, "victim"}}));
    EXPECT_EQ(status.error_code(), StatusCode::INVALID_ARGUMENT);
    EXPECT_FALSE(Exists(KubeletTargetPath(pod)));
  }
  // A user attribute with kubelet's own key: kubelet overwrites it (it
  // writes pod info after the user's attributes), so the driver sees the
  // pod's namespace. KubeletPublishRequest does exactly that.
  KubeletPod pod = Pod(2);
  auto request = KubeletPublishRequest(
      pod, {{"minicluster", "lammps"},
            {"csi.storage.k8s.io/pod.namespace", "victim"}});
  ASSERT_EQ(request.volume_context().at("csi.storage.k8s.io/pod.namespace"),
            "default");
  // Other keys under kubelet's prefix that a user might slip in are ignored.
  (*request.mutable_volume_context())["csi.storage.k8s.io/namespace"] =
      "victim";
  (*request.mutable_volume_context())["csi.storage.k8s.io/pod.namespace "] =
      "victim";
  auto status = client_->Publish(request);
  ASSERT_TRUE(status.ok()) << status.error_message();
  const std::string cert_path = KubeletTargetPath(pod) + "/curve.cert";
  EXPECT_EQ(ReadFileOrEmpty(cert_path), own);
  EXPECT_NE(ReadFileOrEmpty(cert_path), Cert("victim", "lammps"));
  auto parsed = curve::LoadCertFile(cert_path);
  ASSERT_TRUE(parsed) << parsed.error();
  EXPECT_EQ(parsed->metadata.at("name"), "default.lammps");

  // Without kubelet's pod info there is no namespace at all: refused.
  KubeletPod bare = Pod(3);
  auto no_ns = KubeletPublishRequest(bare, {{"minicluster", "lammps"}});
  no_ns.mutable_volume_context()->erase("csi.storage.k8s.io/pod.namespace");
  (*no_ns.mutable_volume_context())["namespace"] = "victim";
  status = client_->Publish(no_ns);
  EXPECT_EQ(status.error_code(), StatusCode::INVALID_ARGUMENT);
  EXPECT_FALSE(Exists(KubeletTargetPath(bare)));
  // The message never echoes a rejected namespace value.
  EXPECT_EQ(status.error_message().find("victim"), std::string::npos);
}

TEST_F(SecurityTest, PathTraversalInAnyFieldIsRefused) {
  const std::string outside = root_->path() + "/outside";
  fs::create_directory(outside);
  KubeletPod pod = Pod(4);
  const std::map<std::string, std::string> bad_attrs[] = {
      {{"minicluster", "../outside"}},
      {{"minicluster", "a/b"}},
      {{"minicluster", ".."}},
      {{"minicluster", "lammps"}, {"generation", "../../outside"}},
      {{"minicluster", "lammps"}, {"generation", "a/b"}},
      {{"minicluster", "lammps"}, {"owner", "../0"}},
      {{"minicluster", "lammps"}, {"owner", "0/0"}},
      {{"minicluster", "lammps"}, {"../minicluster", "x"}},
  };
  for (const auto& attrs : bad_attrs) {
    SCOPED_TRACE(::testing::PrintToString(attrs));
    auto status = client_->Publish(KubeletPublishRequest(pod, attrs));
    EXPECT_EQ(status.error_code(), StatusCode::INVALID_ARGUMENT)
        << status.error_message();
  }
  // Traversal in kubelet's own fields: pod namespace, target, volume id.
  auto ns = KubeletPublishRequest(pod, {{"minicluster", "lammps"}});
  (*ns.mutable_volume_context())["csi.storage.k8s.io/pod.namespace"] = "../x";
  EXPECT_EQ(client_->Publish(ns).error_code(), StatusCode::INVALID_ARGUMENT);
  for (const std::string& target :
       {KubeletTargetPath(pod) + "/../../../../../../outside",
        root_->pods_dir() + "/../outside", std::string("outside/relative"),
        root_->pods_dir() + "/./x"}) {
    SCOPED_TRACE(target);
    auto req = KubeletPublishRequest(pod, {{"minicluster", "lammps"}});
    req.set_target_path(target);
    EXPECT_EQ(client_->Publish(req).error_code(), StatusCode::INVALID_ARGUMENT);
    EXPECT_EQ(client_->Unpublish(KubeletVolumeId(pod), target).error_code(),
              StatusCode::INVALID_ARGUMENT);
  }
  auto vid = KubeletPublishRequest(pod, {{"minicluster", "lammps"}});
  vid.set_volume_id("../../outside");
  EXPECT_EQ(client_->Publish(vid).error_code(), StatusCode::INVALID_ARGUMENT);

  EXPECT_TRUE(fs::is_empty(outside));
  EXPECT_TRUE(MountsUnder(root_->path() + "/outside").empty());
  EXPECT_TRUE(MountsUnder(root_->pods_dir()).empty());
  EXPECT_FALSE(Exists(KubeletTargetPath(pod)));
}

TEST_F(SecurityTest, CertIs0400AndOwnedAsAsked) {
  KubeletPod pod = Pod(5);
  auto status = client_->Publish(KubeletPublishRequest(
      pod, {{"minicluster", "lammps"}, {"owner", "1234:5678"}}));
  ASSERT_TRUE(status.ok()) << status.error_message();
  const std::string target = KubeletTargetPath(pod);
  EXPECT_EQ(InspectVolume(target, Cert("default", "lammps"), 1234, 5678).state,
            VolumeState::kHealthy);
  struct stat st{};
  ASSERT_EQ(lstat((target + "/curve.cert").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0400u);
  EXPECT_EQ(st.st_uid, 1234u);
  EXPECT_EQ(st.st_gid, 5678u);
  ASSERT_EQ(lstat(target.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0500u) << "only the owner may list it";
  EXPECT_EQ(st.st_uid, 1234u);
}

// Walks `dir` (not descending into other mounts) and returns files whose
// bytes contain `needle`.
std::vector<std::string> FilesContaining(const std::string& dir,
                                         const std::string& needle) {
  std::vector<std::string> hits;
  struct stat top{};
  if (stat(dir.c_str(), &top) != 0) return hits;
  for (auto it = fs::recursive_directory_iterator(
           dir, fs::directory_options::skip_permission_denied);
       it != fs::recursive_directory_iterator(); ++it) {
    struct stat st{};
    if (lstat(it->path().c_str(), &st) != 0) continue;
    if (st.st_dev != top.st_dev) {  // a volume's tmpfs: keys belong there
      if (S_ISDIR(st.st_mode)) it.disable_recursion_pending();
      continue;
    }
    if (!S_ISREG(st.st_mode)) continue;
    if (ReadFileOrEmpty(it->path()).find(needle) != std::string::npos) {
      hits.push_back(it->path());
    }
  }
  return hits;
}

// After publishes, unpublishes, a failed publish, a kill -9 and a restart:
// no secret key (nor the master key) in the driver's log, its socket
// directory, or anywhere in the scratch root outside the volumes' tmpfs.
TEST_F(SecurityTest, NoKeyMaterialOutsideTheVolumes) {
  std::vector<KubeletPod> pods;
  for (int i = 0; i < 6; ++i) {
    pods.push_back(Pod(10 + i));
    ASSERT_TRUE(
        client_
            ->Publish(KubeletPublishRequest(
                pods.back(), {{"minicluster", "mc-" + std::to_string(i % 2)}}))
            .ok());
  }
  KubeletPod bad = Pod(20, "default", /*prepare=*/false);  // fails
  EXPECT_FALSE(
      client_->Publish(KubeletPublishRequest(bad, {{"minicluster", "mc-0"}}))
          .ok());
  ASSERT_TRUE(
      client_->Unpublish(KubeletVolumeId(pods[0]), KubeletTargetPath(pods[0]))
          .ok());
  client_.reset();
  driver_->Kill9();
  ASSERT_NO_FATAL_FAILURE(StartDriver());
  ASSERT_TRUE(
      client_
          ->Publish(KubeletPublishRequest(pods[1], {{"minicluster", "mc-1"}}))
          .ok());

  const std::string master_file = master_key_;
  for (const std::string& secret :
       {SecretZ85("default", "mc-0"), SecretZ85("default", "mc-1"),
        master_key_bytes_}) {
    ASSERT_FALSE(secret.empty());
    auto hits = FilesContaining(root_->path(), secret);
    std::erase(hits, master_file);  // the master key file itself
    EXPECT_TRUE(hits.empty()) << "key material in " << hits.front();
    EXPECT_EQ(log().find(secret), std::string::npos) << "in the log";
  }
  // The log's directory and the socket's directory hold nothing secret.
  EXPECT_FALSE(log().empty());
  for (const KubeletPod& p : pods) {
    client_->Unpublish(KubeletVolumeId(p), KubeletTargetPath(p));
  }
}

// The socket is 0600 root: an unprivileged uid that can reach the directory
// still cannot connect (EACCES), while root can.
TEST_F(SecurityTest, SocketIsNotAccessibleToNonRoot) {
  const std::string socket_path = driver_->options().socket_path;
  struct stat st{};
  ASSERT_EQ(lstat(socket_path.c_str(), &st), 0);
  EXPECT_TRUE(S_ISSOCK(st.st_mode));
  EXPECT_EQ(st.st_mode & 0077, 0u) << std::oct << st.st_mode;
  EXPECT_EQ(st.st_uid, 0u);
  // Let anyone traverse to the socket, so only its own mode decides.
  for (fs::path p = fs::path(socket_path).parent_path();
       p.string().size() >= root_->path().size(); p = p.parent_path()) {
    ASSERT_EQ(chmod(p.c_str(), 0755), 0);
  }
  auto connect_as = [&](uid_t uid) -> int {
    const pid_t pid = fork();
    if (pid == 0) {
      if (uid != 0 && (setgroups(0, nullptr) != 0 || setgid(uid) != 0 ||
                       setuid(uid) != 0)) {
        _exit(100);
      }
      const int fd = socket(AF_UNIX, SOCK_STREAM, 0);
      sockaddr_un addr{};
      addr.sun_family = AF_UNIX;
      std::strncpy(addr.sun_path, socket_path.c_str(),
                   sizeof(addr.sun_path) - 1);
      if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) {
        _exit(0);
      }
      _exit(errno);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  };
  EXPECT_EQ(connect_as(65534), EACCES);
  EXPECT_EQ(connect_as(1000), EACCES);
  EXPECT_EQ(connect_as(0), 0) << "root (kubelet) must still connect";
}

TEST_F(SecurityTest, ReadableMasterKeyIsRefused) {
  ASSERT_EQ(Stop(), 0);
  for (unsigned mode : {0644u, 0640u, 0604u, 0660u, 0666u}) {
    SCOPED_TRACE(mode);
    const std::string key =
        root_->WriteMasterKey("readable.key", std::string(64, 'r'), mode);
    DriverProcess::Options o = Options();
    o.master_key_file = key;
    o.log_path = root_->log_path("readable");
    DriverProcess refused(o);
    EXPECT_EQ(refused.RunToExit(), 2);
    EXPECT_NE(ReadFileOrEmpty(o.log_path).find("group/other"),
              std::string::npos);
    EXPECT_FALSE(Exists(o.socket_path)) << "it listened before refusing";
    fs::remove(key);
    fs::remove(o.log_path);
  }
  ASSERT_NO_FATAL_FAILURE(StartDriver());
}

}  // namespace
}  // namespace fcc::testing
