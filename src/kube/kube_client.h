// A small Kubernetes REST client on libcurl: in-cluster config or a
// kubeconfig, plain requests, streaming (watch) requests, server-side
// apply. Tokens are read per request and never logged. Failures are values:
// config loaders return std::expected, requests an HttpResponse.
#pragma once

#include <atomic>
#include <expected>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

namespace fcc::kube {

struct KubeConfig {
  std::string server;   // https://host:port
  std::string ca_pem;   // PEM bundle, or
  std::string ca_file;  // a path read per request; both empty: system store
  bool insecure_skip_tls_verify = false;
  std::string token;       // static bearer token (kubeconfig)
  std::string token_file;  // re-read per request (projected SA tokens rotate)
  std::string client_cert_pem;
  std::string client_key_pem;
  std::string namespace_name;  // the config's default namespace, if any
  std::string user_agent;      // "<program>/<version>"; empty: none sent
};

// The pod's service account: KUBERNETES_SERVICE_HOST/PORT and the files
// under /var/run/secrets/kubernetes.io/serviceaccount. The error says what
// is missing.
std::expected<KubeConfig, std::string> InClusterConfig();

// Reads `path` (a kubeconfig), using `context` or its current-context.
// Supports certificate-authority(-data), client-certificate(-data),
// client-key(-data), token, tokenFile and insecure-skip-tls-verify;
// relative file paths are resolved against the kubeconfig's directory. The
// error names the file and the field.
std::expected<KubeConfig, std::string> LoadKubeconfig(
    const std::string& path, const std::string& context = "");

struct HttpResponse {
  long status = 0;  // 0 when the request never got an HTTP response
  std::string body;
  std::string error;  // transport error (DNS, TLS, connection reset, ...)

  bool ok() const { return status >= 200 && status < 300; }
  // The API server's Status message when it sent one, else the error.
  std::string Describe() const;
};

// Hears of every request a KubeClient made, for client-go's rest_client
// metrics.
class RequestObserver {
 public:
  virtual ~RequestObserver() = default;
  // `status` 0: no HTTP response. `seconds`: the whole request; a watch
  // stream reports its end only, with no duration.
  virtual void ObserveRequest(std::string_view method, long status,
                              std::optional<double> seconds) = 0;
};

class KubeClient {
 public:
  explicit KubeClient(KubeConfig config);
  ~KubeClient();
  KubeClient(const KubeClient&) = delete;
  KubeClient& operator=(const KubeClient&) = delete;

  HttpResponse Request(
      std::string_view method, const std::string& path,
      const std::string& body = "",
      std::string_view content_type = "application/json") const;

  // GETs `path` and hands every received chunk to `on_data` as it
  // arrives. Returns when the server ends the response, `on_data` returns
  // false, `stop` becomes true, or nothing arrived for `idle_timeout_s`.
  HttpResponse Stream(const std::string& path,
                      const std::function<bool(std::string_view)>& on_data,
                      const std::atomic<bool>& stop, long idle_timeout_s) const;

  const KubeConfig& config() const { return config_; }
  // Set before the client is used; may be null.
  void set_observer(RequestObserver* observer) { observer_ = observer; }

 private:
  HttpResponse Perform(std::string_view method, const std::string& path,
                       const std::string& body,
                       std::string_view content_type) const;

  // Request() borrows a curl handle from here and gives it back, so each
  // handle keeps its connection to the API server open for the next
  // request rather than a TCP connect and a TLS handshake per request. At
  // most as many handles as requests ever ran at once (the workers).
  class HandlePool;
  KubeConfig config_;
  std::unique_ptr<HandlePool> pool_;
  RequestObserver* observer_ = nullptr;
};

// The I/O the reconciler needs, as an interface so reconcile logic can be
// tested with an in-memory recorder.
class KubeApi {
 public:
  virtual ~KubeApi() = default;
  // POST to a collection. 409 means it already exists.
  virtual HttpResponse Create(const std::string& collection_path,
                              const nlohmann::json& object,
                              const std::string& field_manager) = 0;
  // Server-side apply (PATCH application/apply-patch+yaml; JSON is YAML).
  virtual HttpResponse Apply(const std::string& object_path,
                             const nlohmann::json& object,
                             const std::string& field_manager, bool force) = 0;
  // GET one object (e.g. a Job the label-filtered cache cannot see).
  virtual HttpResponse Get(const std::string& object_path) = 0;
  // DELETE one object with DeleteOptions (preconditions, propagation).
  virtual HttpResponse Delete(const std::string& object_path,
                              const nlohmann::json& options) = 0;
};

class KubeClientApi : public KubeApi {
 public:
  explicit KubeClientApi(const KubeClient& client) : client_(client) {}
  HttpResponse Create(const std::string& collection_path,
                      const nlohmann::json& object,
                      const std::string& field_manager) override;
  HttpResponse Apply(const std::string& object_path,
                     const nlohmann::json& object,
                     const std::string& field_manager, bool force) override;
  HttpResponse Get(const std::string& object_path) override;
  HttpResponse Delete(const std::string& object_path,
                      const nlohmann::json& options) override;

 private:
  const KubeClient& client_;
};

}  // namespace fcc::kube
