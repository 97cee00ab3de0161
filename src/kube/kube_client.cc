#include "kube/kube_client.h"

#include <curl/curl.h>
#include <openssl/evp.h>

#include <chrono>
#include <cstdlib>
#include <expected>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <optional>
#include <sstream>
#include <vector>

#include "common/file.h"
#include "kube/api_path.h"
#include "kube/yaml_json.h"

namespace fcc::kube {
namespace {

using nlohmann::json;

constexpr char kServiceAccountDir[] =
    "/var/run/secrets/kubernetes.io/serviceaccount";

struct CurlDeleter {
  void operator()(CURL* handle) const { curl_easy_cleanup(handle); }
};
struct SlistDeleter {
  void operator()(curl_slist* list) const { curl_slist_free_all(list); }
};
using CurlHandle = std::unique_ptr<CURL, CurlDeleter>;
using CurlHeaders = std::unique_ptr<curl_slist, SlistDeleter>;

void GlobalInitOnce() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

template <typename T>
using Expected = std::expected<T, std::string>;

std::string TrimTrailingNewlines(std::string s) {
  while (!s.empty() &&
         (s.back() == '\n' || s.back() == '\r' || s.back() == ' '))
    s.pop_back();
  return s;
}

Expected<std::string> Base64Decode(const std::string& field,
                                   const std::string& in) {
  std::string clean;
  for (char c : in) {
    if (c != '\n' && c != '\r' && c != ' ') clean += c;
  }
  auto invalid = [&field] {
    return std::unexpected("kubeconfig: " + field + " is not valid base64");
  };
  if (clean.size() % 4 != 0) return invalid();
  std::string out(clean.size() / 4 * 3, '\0');
  int n = EVP_DecodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                          reinterpret_cast<const unsigned char*>(clean.data()),
                          static_cast<int>(clean.size()));
  if (n < 0) return invalid();
  size_t padding = 0;
  if (!clean.empty() && clean.back() == '=') ++padding;
  if (clean.size() > 1 && clean[clean.size() - 2] == '=') ++padding;
  out.resize(static_cast<size_t>(n) - padding);
  return out;
}

size_t AppendToString(char* data, size_t size, size_t nmemb, void* user) {
  static_cast<std::string*>(user)->append(data, size * nmemb);
  return size * nmemb;
}

struct StreamState {
  const std::function<bool(std::string_view)>* on_data = nullptr;
  const std::atomic<bool>* stop = nullptr;
  long status = 0;
  CURL* handle = nullptr;
  std::string error_body;  // non-2xx bodies are collected, not streamed
};

size_t StreamWrite(char* data, size_t size, size_t nmemb, void* user) {
  auto* state = static_cast<StreamState*>(user);
  const size_t n = size * nmemb;
  if (state->status == 0) {
    curl_easy_getinfo(state->handle, CURLINFO_RESPONSE_CODE, &state->status);
  }
  if (state->status < 200 || state->status >= 300) {
    state->error_body.append(data, n);
    return n;
  }
  if (!(*state->on_data)(std::string_view(data, n))) return 0;  // abort
  return n;
}

int StreamProgress(void* user, curl_off_t, curl_off_t, curl_off_t, curl_off_t) {
  return static_cast<StreamState*>(user)->stop->load() ? 1 : 0;
}

// Applies the connection and TLS options of `config` to a fresh handle.
void SetConnectionOptions(CURL* curl, const KubeConfig& config) {
  curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(curl, CURLOPT_CONNECTTIMEOUT, 10L);
  if (config.insecure_skip_tls_verify) {
    curl_easy_setopt(curl, CURLOPT_SSL_VERIFYPEER, 0L);
    curl_easy_setopt(curl, CURLOPT_SSL_VERIFYHOST, 0L);
  }
  if (!config.ca_file.empty()) {
    curl_easy_setopt(curl, CURLOPT_CAINFO, config.ca_file.c_str());
  } else if (!config.ca_pem.empty()) {
    curl_blob blob{const_cast<char*>(config.ca_pem.data()),
                   config.ca_pem.size(), CURL_BLOB_COPY};
    curl_easy_setopt(curl, CURLOPT_CAINFO_BLOB, &blob);
  }
  if (!config.client_cert_pem.empty()) {
    curl_blob cert{const_cast<char*>(config.client_cert_pem.data()),
                   config.client_cert_pem.size(), CURL_BLOB_COPY};
    curl_blob key{const_cast<char*>(config.client_key_pem.data()),
                  config.client_key_pem.size(), CURL_BLOB_COPY};
    curl_easy_setopt(curl, CURLOPT_SSLCERTTYPE, "PEM");
    curl_easy_setopt(curl, CURLOPT_SSLCERT_BLOB, &cert);
    curl_easy_setopt(curl, CURLOPT_SSLKEYTYPE, "PEM");
    curl_easy_setopt(curl, CURLOPT_SSLKEY_BLOB, &key);
  }
}

// Applies `config` to a fresh handle. Returns the header list, which must
// outlive the transfer; fails only if the token file cannot be read.
Expected<CurlHeaders> Prepare(CURL* curl, const KubeConfig& config,
                              std::string_view content_type) {
  SetConnectionOptions(curl, config);
  std::string token = config.token;
  if (!config.token_file.empty()) {
    // Projected service-account tokens rotate; read the current one.
    auto text = common::ReadTextFile(config.token_file);
    if (!text) return std::unexpected(text.error());
    token = TrimTrailingNewlines(std::move(*text));
  }
  std::vector<std::string> lines = {
      "Accept: application/json", "Content-Type: " + std::string(content_type)};
  if (!token.empty()) lines.push_back("Authorization: Bearer " + token);
  if (!config.user_agent.empty()) {
    lines.push_back("User-Agent: " + config.user_agent);
  }
  curl_slist* headers = nullptr;
  for (const std::string& line : lines) {
    headers = curl_slist_append(headers, line.c_str());
  }
  curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers);
  return CurlHeaders(headers);
}

const json* FindNamed(const json& list, const std::string& name) {
  if (!list.is_array()) return nullptr;
  for (const auto& item : list) {
    if (item.value("name", "") == name) return &item;
  }
  return nullptr;
}

}  // namespace

std::string HttpResponse::Describe() const {
  if (status == 0) return error.empty() ? "no response" : error;
  auto parsed = json::parse(body, nullptr, false);
  if (parsed.is_object() && parsed.contains("message")) {
    return "HTTP " + std::to_string(status) + ": " +
           parsed["message"].get<std::string>();
  }
  return "HTTP " + std::to_string(status) + ": " + body.substr(0, 300);
}

Expected<KubeConfig> InClusterConfig() {
  const char* host = std::getenv("KUBERNETES_SERVICE_HOST");
  const char* port = std::getenv("KUBERNETES_SERVICE_PORT");
  if (host == nullptr || port == nullptr) {
    return std::unexpected(
        "not running in a cluster (KUBERNETES_SERVICE_HOST/PORT unset); pass "
        "--kubeconfig to run outside one");
  }
  std::string h = host;
  if (h.find(':') != std::string::npos) h = "[" + h + "]";  // IPv6
  KubeConfig config;
  config.server = "https://" + h + ":" + port;
  config.token_file = std::string(kServiceAccountDir) + "/token";
  config.ca_file = std::string(kServiceAccountDir) + "/ca.crt";
  if (!std::filesystem::exists(config.token_file)) {
    return std::unexpected("in-cluster config: " + config.token_file +
                           " missing; is automountServiceAccountToken off?");
  }
  // Optional: without it, namespaced calls name their namespace.
  if (auto ns = common::ReadTextFile(std::string(kServiceAccountDir) +
                                     "/namespace")) {
    config.namespace_name = TrimTrailingNewlines(std::move(*ns));
  }
  return config;
}

namespace {

// Resolves kubeconfig file references against the kubeconfig's directory.
class KubeconfigPaths {
 public:
  explicit KubeconfigPaths(const std::string& kubeconfig)
      : dir_(std::filesystem::path(kubeconfig).parent_path()) {}
  std::string Resolve(const std::string& p) const {
    std::filesystem::path fp(p);
    return fp.is_absolute() ? p : (dir_ / fp).string();
  }

 private:
  std::filesystem::path dir_;
};

// The `field` ("cluster", "user") of the entry named `name` in `kc[list]`.
std::optional<json> NamedEntry(const json& kc, const char* list,
                               const char* field, const std::string& name) {
  auto entries = kc.find(list);
  if (entries == kc.end()) return std::nullopt;
  const json* entry = FindNamed(*entries, name);
  if (entry == nullptr) return std::nullopt;
  return entry->value(field, json::object());
}

// PEM data given inline (`<field>-data`, base64) or as a file (`<field>`);
// "" when neither is there.
Expected<std::string> InlineOrFile(const json& entry, const std::string& field,
                                   const KubeconfigPaths& paths) {
  if (entry.contains(field + "-data")) {
    return Base64Decode(field + "-data", entry[field + "-data"]);
  }
  if (entry.contains(field)) {
    return common::ReadTextFile(paths.Resolve(entry[field]));
  }
  return std::string();
}

Expected<void> ReadCluster(const json& cluster, const KubeconfigPaths& paths,
                           KubeConfig& config) {
  config.server = cluster.value("server", "");
  while (!config.server.empty() && config.server.back() == '/')
    config.server.pop_back();
  config.insecure_skip_tls_verify =
      cluster.value("insecure-skip-tls-verify", false);
  if (cluster.contains("certificate-authority-data")) {
    auto pem = Base64Decode("certificate-authority-data",
                            cluster["certificate-authority-data"]);
    if (!pem) return std::unexpected(pem.error());
    config.ca_pem = std::move(*pem);
  } else if (cluster.contains("certificate-authority")) {
    config.ca_file = paths.Resolve(cluster["certificate-authority"]);
  }
  return {};
}

// Refuses a user that needs an exec/auth-provider plugin.
Expected<void> ReadUser(const json& user, const std::string& where,
                        const KubeconfigPaths& paths, KubeConfig& config) {
  if (user.contains("exec") || user.contains("auth-provider")) {
    return std::unexpected(
        where +
        " uses an exec/auth-provider plugin, which this client does not run; "
        "use a token or client certificate");
  }
  auto cert = InlineOrFile(user, "client-certificate", paths);
  if (!cert) return std::unexpected(cert.error());
  auto key = InlineOrFile(user, "client-key", paths);
  if (!key) return std::unexpected(key.error());
  config.client_cert_pem = std::move(*cert);
  config.client_key_pem = std::move(*key);
  config.token = user.value("token", "");
  if (user.contains("tokenFile"))
    config.token_file = paths.Resolve(user["tokenFile"]);
  return {};
}

// The kubeconfig's first document, which must be a mapping.
Expected<json> ReadKubeconfigDocument(const std::string& path) {
  auto text = common::ReadTextFile(path);
  if (!text) return std::unexpected(text.error());
  auto docs = YamlToJson(*text);
  if (!docs) return std::unexpected("kubeconfig " + path + ": " + docs.error());
  if (docs->empty() || !docs->front().is_object()) {
    return std::unexpected("kubeconfig " + path + " is empty");
  }
  return std::move(docs->front());
}

}  // namespace

Expected<KubeConfig> LoadKubeconfig(const std::string& path,
                                    const std::string& context) {
  const auto kc = ReadKubeconfigDocument(path);
  if (!kc) return std::unexpected(kc.error());
  const KubeconfigPaths paths(path);
  const std::string context_name =
      context.empty() ? kc->value("current-context", "") : context;
  const auto ctx = NamedEntry(*kc, "contexts", "context", context_name);
  if (!ctx) {
    return std::unexpected("kubeconfig " + path + ": context \"" +
                           context_name + "\" not found");
  }
  const std::string cluster_name = ctx->value("cluster", "");
  const auto cluster = NamedEntry(*kc, "clusters", "cluster", cluster_name);
  if (!cluster) {
    return std::unexpected("kubeconfig " + path + ": cluster \"" +
                           cluster_name + "\" not found");
  }
  KubeConfig config;
  if (auto read = ReadCluster(*cluster, paths, config); !read) {
    return std::unexpected(read.error());
  }
  config.namespace_name = ctx->value("namespace", "");
  const std::string user_name = ctx->value("user", "");
  if (const auto user = NamedEntry(*kc, "users", "user", user_name)) {
    const std::string where =
        "kubeconfig " + path + ": user \"" + user_name + "\"";
    if (auto read = ReadUser(*user, where, paths, config); !read) {
      return std::unexpected(read.error());
    }
  }
  if (config.server.empty()) {
    return std::unexpected("kubeconfig " + path + ": cluster has no server");
  }
  return config;
}

class KubeClient::HandlePool {
 public:
  CurlHandle Take() {
    {
      std::lock_guard lock(mu_);
      if (!idle_.empty()) {
        CurlHandle handle = std::move(idle_.back());
        idle_.pop_back();
        // Clears the options of the last request; keeps its connection.
        curl_easy_reset(handle.get());
        return handle;
      }
    }
    return CurlHandle(curl_easy_init());
  }
  void Give(CurlHandle handle) {
    std::lock_guard lock(mu_);
    idle_.push_back(std::move(handle));
  }

 private:
  std::mutex mu_;
  std::vector<CurlHandle> idle_;
};

KubeClient::KubeClient(KubeConfig config)
    : config_(std::move(config)), pool_(std::make_unique<HandlePool>()) {
  GlobalInitOnce();
}

KubeClient::~KubeClient() = default;

HttpResponse KubeClient::Request(std::string_view method,
                                 const std::string& path,
                                 const std::string& body,
                                 std::string_view content_type) const {
  const auto start = std::chrono::steady_clock::now();
  HttpResponse response = Perform(method, path, body, content_type);
  if (observer_ != nullptr) {
    const std::chrono::duration<double> took =
        std::chrono::steady_clock::now() - start;
    observer_->ObserveRequest(method, response.status, took.count());
  }
  return response;
}

HttpResponse KubeClient::Perform(std::string_view method,
                                 const std::string& path,
                                 const std::string& body,
                                 std::string_view content_type) const {
  HttpResponse response;
  CurlHandle curl = pool_->Take();
  if (!curl) {
    response.error = "curl_easy_init failed";
    return response;
  }
  // Back to the pool whatever happens; a failed transfer's connection is
  // closed by libcurl, and the next request opens a new one.
  struct GiveBack {
    HandlePool& pool;
    CurlHandle& handle;
    ~GiveBack() {
      if (handle) pool.Give(std::move(handle));
    }
  } give_back{*pool_, curl};
  auto headers = Prepare(curl.get(), config_, content_type);
  if (!headers) {
    response.error = headers.error();
    return response;
  }
  const std::string url = config_.server + path;
  const std::string method_str(method);
  curl_easy_setopt(curl.get(), CURLOPT_URL, url.c_str());
  curl_easy_setopt(curl.get(), CURLOPT_CUSTOMREQUEST, method_str.c_str());
  curl_easy_setopt(curl.get(), CURLOPT_TIMEOUT, 60L);
  if (!body.empty() || method != "GET") {
    curl_easy_setopt(curl.get(), CURLOPT_POSTFIELDS, body.c_str());
    curl_easy_setopt(curl.get(), CURLOPT_POSTFIELDSIZE,
                     static_cast<long>(body.size()));
  }
  curl_easy_setopt(curl.get(), CURLOPT_WRITEFUNCTION, AppendToString);
  curl_easy_setopt(curl.get(), CURLOPT_WRITEDATA, &response.body);
  CURLcode rc = curl_easy_perform(curl.get());
  if (rc != CURLE_OK) {
    response.error =
        std::string(method) + " " + path + ": " + curl_easy_strerror(rc);
    return response;
  }
  curl_easy_getinfo(curl.get(), CURLINFO_RESPONSE_CODE, &response.status);
  return response;
}

HttpResponse KubeClient::Stream(
    const std::string& path,
    const std::function<bool(std::string_view)>& on_data,
    const std::atomic<bool>& stop, long idle_timeout_s) const {
  HttpResponse response;
  CurlHandle curl(curl_easy_init());
  if (!curl) {
    response.error = "curl_easy_init failed";
    return response;
  }
  auto headers = Prepare(curl.get(), config_, "application/json");
  if (!headers) {
    response.error = headers.error();
    return response;
  }
  StreamState state;
  state.on_data = &on_data;
  state.stop = &stop;
  state.handle = curl.get();
  const std::string url = config_.server + path;
  curl_easy_setopt(curl.get(), CURLOPT_URL, url.c_str());
  curl_easy_setopt(curl.get(), CURLOPT_WRITEFUNCTION, StreamWrite);
  curl_easy_setopt(curl.get(), CURLOPT_WRITEDATA, &state);
  curl_easy_setopt(curl.get(), CURLOPT_NOPROGRESS, 0L);
  curl_easy_setopt(curl.get(), CURLOPT_XFERINFOFUNCTION, StreamProgress);
  curl_easy_setopt(curl.get(), CURLOPT_XFERINFODATA, &state);
  // A silent connection (half-open TCP) is given up after idle_timeout_s.
  curl_easy_setopt(curl.get(), CURLOPT_LOW_SPEED_LIMIT, 1L);
  curl_easy_setopt(curl.get(), CURLOPT_LOW_SPEED_TIME, idle_timeout_s);
  CURLcode rc = curl_easy_perform(curl.get());
  curl_easy_getinfo(curl.get(), CURLINFO_RESPONSE_CODE, &response.status);
  response.body = std::move(state.error_body);
  if (rc != CURLE_OK && !(rc == CURLE_ABORTED_BY_CALLBACK && stop.load())) {
    response.error =
        std::string("watch ") + path + ": " + curl_easy_strerror(rc);
  }
  if (observer_ != nullptr)
    observer_->ObserveRequest("GET", response.status, std::nullopt);
  return response;
}

HttpResponse KubeClientApi::Create(const std::string& collection_path,
                                   const json& object,
                                   const std::string& field_manager) {
  return client_.Request(
      "POST", collection_path + "?fieldManager=" + UrlEncode(field_manager),
      object.dump());
}

HttpResponse KubeClientApi::Apply(const std::string& object_path,
                                  const json& object,
                                  const std::string& field_manager,
                                  bool force) {
  std::string path = object_path + "?fieldManager=" + UrlEncode(field_manager);
  if (force) path += "&force=true";
  return client_.Request("PATCH", path, object.dump(),
                         "application/apply-patch+yaml");
}

HttpResponse KubeClientApi::Get(const std::string& object_path) {
  return client_.Request("GET", object_path);
}

HttpResponse KubeClientApi::Delete(const std::string& object_path,
                                   const json& options) {
  return client_.Request("DELETE", object_path, options.dump());
}

}  // namespace fcc::kube
