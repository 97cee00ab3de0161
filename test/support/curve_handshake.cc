#include "curve_handshake.h"

#include <fmt/format.h>
#include <openssl/crypto.h>
#include <zmq.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <optional>
#include <thread>

#include "curve/cert_file.h"

namespace fcc::testing {
namespace {

constexpr char kZapEndpoint[] = "inproc://zeromq.zap.01";
constexpr char kZapDomain[] = "flux";  // what flux-core's overlay sets
constexpr char kPing[] = "ping";
constexpr char kPong[] = "pong";

std::string ZmqError(std::string_view what) {
  return fmt::format("{}: {}", what, zmq_strerror(zmq_errno()));
}

// Receives all frames of one message (blocking; the caller has polled).
std::optional<std::vector<std::string>> RecvMultipart(void* socket,
                                                      int flags = 0) {
  std::vector<std::string> frames;
  while (true) {
    zmq_msg_t msg;
    zmq_msg_init(&msg);
    if (zmq_msg_recv(&msg, socket, flags) < 0) {
      zmq_msg_close(&msg);
      return std::nullopt;
    }
    frames.emplace_back(static_cast<const char*>(zmq_msg_data(&msg)),
                        zmq_msg_size(&msg));
    const bool more = zmq_msg_more(&msg);
    zmq_msg_close(&msg);
    if (!more) return frames;
  }
}

bool SendMultipart(void* socket, const std::vector<std::string>& frames) {
  for (size_t i = 0; i < frames.size(); ++i) {
    const int flags = i + 1 < frames.size() ? ZMQ_SNDMORE : 0;
    if (zmq_send(socket, frames[i].data(), frames[i].size(), flags) < 0) {
      return false;
    }
  }
  return true;
}

std::string EventName(uint16_t event, uint32_t value) {
  switch (event) {
    case ZMQ_EVENT_CONNECTED:
      return "CONNECTED";
    case ZMQ_EVENT_CONNECT_DELAYED:
      return "CONNECT_DELAYED";
    case ZMQ_EVENT_CONNECT_RETRIED:
      return "CONNECT_RETRIED";
    case ZMQ_EVENT_LISTENING:
      return "LISTENING";
    case ZMQ_EVENT_ACCEPTED:
      return "ACCEPTED";
    case ZMQ_EVENT_CLOSED:
      return "CLOSED";
    case ZMQ_EVENT_DISCONNECTED:
      return "DISCONNECTED";
    case ZMQ_EVENT_MONITOR_STOPPED:
      return "MONITOR_STOPPED";
    case ZMQ_EVENT_HANDSHAKE_SUCCEEDED:
      return "HANDSHAKE_SUCCEEDED";
    case ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL:
      return fmt::format("HANDSHAKE_FAILED_NO_DETAIL({})", value);
    case ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL:
      return value == ZMQ_PROTOCOL_ERROR_ZMTP_CRYPTOGRAPHIC
                 ? "HANDSHAKE_FAILED_PROTOCOL(cryptographic error: the "
                   "peers' keys do not match)"
                 : fmt::format("HANDSHAKE_FAILED_PROTOCOL(0x{:x})", value);
    case ZMQ_EVENT_HANDSHAKE_FAILED_AUTH:
      return fmt::format("HANDSHAKE_FAILED_AUTH({})", value);
    default:
      return fmt::format("EVENT(0x{:x},{})", event, value);
  }
}

bool IsHandshakeFailure(uint16_t event) {
  return event == ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL ||
         event == ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL ||
         event == ZMQ_EVENT_HANDSHAKE_FAILED_AUTH;
}

// The ZAP 1.0 handler (RFC 27): answers until the context is shut down.
struct ZapStats {
  int requests = 0;
  int admitted = 0;
};

class ZapHandler {
 public:
  // `stats` is written by the handler thread; read it after destruction.
  ZapHandler(void* socket, std::array<uint8_t, 32> admit, ZapStats* stats)
      : socket_(socket),
        admit_(admit),
        stats_(stats),
        thread_([this] { Run(); }) {}
  ~ZapHandler() { thread_.join(); }  // only after zmq_ctx_shutdown

 private:
  void Run() {
    while (true) {
      auto request = RecvMultipart(socket_);
      if (!request) break;  // ETERM: the context is shutting down
      // version, request id, domain, address, identity, mechanism, creds...
      if (request->size() < 6) continue;
      const std::string& version = (*request)[0];
      const std::string& request_id = (*request)[1];
      const std::string& domain = (*request)[2];
      const std::string& mechanism = (*request)[5];
      bool allow = false;
      std::string status_text = "unknown client public key";
      if (version != "1.0") {
        status_text = "unsupported ZAP version";
      } else if (domain != kZapDomain) {
        status_text = "wrong ZAP domain";
      } else if (mechanism != "CURVE" || request->size() != 7 ||
                 (*request)[6].size() != 32) {
        status_text = "not CURVE";
      } else if (std::memcmp((*request)[6].data(), admit_.data(), 32) == 0) {
        allow = true;
        status_text = "OK";
      }
      ++stats_->requests;
      if (allow) ++stats_->admitted;
      SendMultipart(socket_, {"1.0", request_id, allow ? "200" : "400",
                              status_text, allow ? "flux" : "", ""});
    }
    zmq_close(socket_);
  }

  void* socket_;
  std::array<uint8_t, 32> admit_;
  ZapStats* stats_;
  std::thread thread_;
};

bool SetKey(void* socket, int option, const std::string& z85) {
  if (z85.size() != 40) return false;
  return zmq_setsockopt(socket, option, z85.c_str(), 41) == 0;
}

// Owns the context and every socket; tears them down in the right order.
class Session {
 public:
  Session() : ctx_(zmq_ctx_new()) {}
  ~Session() {
    for (void* s : sockets_) {
      const int zero = 0;
      zmq_setsockopt(s, ZMQ_LINGER, &zero, sizeof zero);
      zmq_close(s);
    }
    zmq_ctx_shutdown(ctx_);  // wakes the ZAP handler with ETERM
    zap_.reset();
    zmq_ctx_term(ctx_);
  }
  void* ctx() { return ctx_; }
  void* Socket(int type) {
    void* s = zmq_socket(ctx_, type);
    if (s != nullptr) {
      const int zero = 0;
      zmq_setsockopt(s, ZMQ_LINGER, &zero, sizeof zero);
      sockets_.push_back(s);
    }
    return s;
  }
  std::unique_ptr<ZapHandler>& zap() { return zap_; }

 private:
  void* ctx_;
  std::vector<void*> sockets_;
  std::unique_ptr<ZapHandler> zap_;
};

}  // namespace

HandshakeResult TryCurveHandshake(const std::string& server_cert_path,
                                  const std::string& client_cert_path,
                                  std::chrono::milliseconds timeout) {
  HandshakeResult refused;
  auto server = curve::LoadCertFile(server_cert_path);
  if (!server) {
    refused.detail = "server cert: " + server.error();
    return refused;
  }
  auto client = curve::LoadCertFile(client_cert_path);
  if (!client) {
    refused.detail = "client cert: " + client.error();
    return refused;
  }
  // As a Flux broker: the same cert is both its identity and, as a child,
  // what it expects its parent to be; ZAP admits the keys in the config
  // (with one shared cert, that is the cert's own public key).
  HandshakeConfig config{
      .server = {server->keys.public_z85,
                 std::string(server->keys.secret_z85.reveal())},
      .client = {client->keys.public_z85,
                 std::string(client->keys.secret_z85.reveal())},
      .client_serverkey = client->keys.public_z85,
      .zap_admit = server->keys.public_z85,
      .timeout = timeout};
  HandshakeResult result = RunCurveHandshake(config);
  // Do not leave secret copies lying in freed memory.
  OPENSSL_cleanse(config.server.secret_z85.data(),
                  config.server.secret_z85.size());
  OPENSSL_cleanse(config.client.secret_z85.data(),
                  config.client.secret_z85.size());
  return result;
}

HandshakeResult RunCurveHandshake(const HandshakeConfig& config) {
  HandshakeResult result;
  const auto deadline = std::chrono::steady_clock::now() + config.timeout;
  std::array<uint8_t, 32> admit{};
  if (config.zap_admit.size() != 40 ||
      zmq_z85_decode(admit.data(), config.zap_admit.c_str()) == nullptr) {
    result.detail = "the ZAP allow-list key is not a 40-character Z85 key";
    return result;
  }

  ZapStats zap_stats;
  {
    Session session;
    // ZAP first: libzmq consults the handler only if it is bound.
    void* zap_socket = zmq_socket(session.ctx(), ZMQ_REP);
    if (zap_socket == nullptr || zmq_bind(zap_socket, kZapEndpoint) != 0) {
      result.detail = ZmqError("binding the ZAP handler");
      if (zap_socket != nullptr) zmq_close(zap_socket);
      return result;
    }
    session.zap() = std::make_unique<ZapHandler>(zap_socket, admit, &zap_stats);

    void* server = session.Socket(ZMQ_ROUTER);
    void* client = session.Socket(ZMQ_DEALER);
    const int one = 1;
    if (server == nullptr || client == nullptr ||
        zmq_setsockopt(server, ZMQ_ZAP_DOMAIN, kZapDomain,
                       strlen(kZapDomain)) != 0 ||
        zmq_setsockopt(server, ZMQ_CURVE_SERVER, &one, sizeof one) != 0 ||
        !SetKey(server, ZMQ_CURVE_SECRETKEY, config.server.secret_z85) ||
        !SetKey(server, ZMQ_CURVE_PUBLICKEY, config.server.public_z85) ||
        !SetKey(client, ZMQ_CURVE_SERVERKEY, config.client_serverkey) ||
        !SetKey(client, ZMQ_CURVE_PUBLICKEY, config.client.public_z85) ||
        !SetKey(client, ZMQ_CURVE_SECRETKEY, config.client.secret_z85)) {
      result.detail = ZmqError("configuring the CURVE sockets");
      return result;
    }

    const int events = ZMQ_EVENT_ALL;
    void* server_mon = session.Socket(ZMQ_PAIR);
    void* client_mon = session.Socket(ZMQ_PAIR);
    if (zmq_socket_monitor(server, "inproc://monitor.server", events) != 0 ||
        zmq_socket_monitor(client, "inproc://monitor.client", events) != 0 ||
        zmq_connect(server_mon, "inproc://monitor.server") != 0 ||
        zmq_connect(client_mon, "inproc://monitor.client") != 0) {
      result.detail = ZmqError("starting the socket monitors");
      return result;
    }

    // Loopback only, an ephemeral port.
    if (zmq_bind(server, "tcp://127.0.0.1:*") != 0) {
      result.detail = ZmqError("binding tcp://127.0.0.1:*");
      return result;
    }
    char endpoint[256] = {};
    size_t endpoint_len = sizeof endpoint;
    zmq_getsockopt(server, ZMQ_LAST_ENDPOINT, endpoint, &endpoint_len);
    if (zmq_connect(client, endpoint) != 0) {
      result.detail = ZmqError(std::string("connecting to ") + endpoint);
      return result;
    }
    // Queued on the client until the handshake completes.
    if (zmq_send(client, kPing, strlen(kPing), ZMQ_DONTWAIT) < 0) {
      result.detail = ZmqError("queueing the request");
      return result;
    }

    bool server_ok = false, client_ok = false, got_ping = false,
         got_pong = false;
    // The first failure decides; the server's diagnosis is the more
    // precise one, so it is awaited briefly (bounded) if the client's came
    // first.
    std::string server_failure, client_failure;
    auto end = deadline;
    while (server_failure.empty() && !(server_ok && client_ok && got_pong)) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          end - std::chrono::steady_clock::now());
      if (left.count() <= 0) break;
      zmq_pollitem_t items[] = {{server_mon, 0, ZMQ_POLLIN, 0},
                                {client_mon, 0, ZMQ_POLLIN, 0},
                                {server, 0, ZMQ_POLLIN, 0},
                                {client, 0, ZMQ_POLLIN, 0}};
      if (zmq_poll(items, 4, left.count()) < 0) {
        if (zmq_errno() == EINTR) continue;
        client_failure = ZmqError("zmq_poll");
        break;
      }
      for (int side = 0; side < 2; ++side) {
        if (!(items[side].revents & ZMQ_POLLIN)) continue;
        auto frames = RecvMultipart(items[side].socket);
        if (!frames || frames->empty() || (*frames)[0].size() < 6) continue;
        uint16_t event = 0;
        uint32_t value = 0;
        std::memcpy(&event, (*frames)[0].data(), sizeof event);
        std::memcpy(&value, (*frames)[0].data() + 2, sizeof value);
        const std::string name = EventName(event, value);
        (side == 0 ? result.server_events : result.client_events)
            .push_back(name);
        if (event == ZMQ_EVENT_HANDSHAKE_SUCCEEDED) {
          (side == 0 ? server_ok : client_ok) = true;
        } else if (IsHandshakeFailure(event)) {
          std::string& failure = side == 0 ? server_failure : client_failure;
          if (failure.empty()) {
            failure = fmt::format("{} reported {}",
                                  side == 0 ? "server" : "client", name);
          }
          end = std::min(end, std::chrono::steady_clock::now() +
                                  std::chrono::milliseconds(250));
        }
      }
      if (items[2].revents & ZMQ_POLLIN) {
        auto frames = RecvMultipart(server);
        if (frames && frames->size() == 2 && (*frames)[1] == kPing) {
          got_ping = true;
          SendMultipart(server, {(*frames)[0], kPong});
        }
      }
      if (items[3].revents & ZMQ_POLLIN) {
        auto frames = RecvMultipart(client);
        if (frames && frames->size() == 1 && (*frames)[0] == kPong) {
          got_pong = true;
        }
      }
    }
    zmq_socket_monitor(server, nullptr, 0);
    zmq_socket_monitor(client, nullptr, 0);
    result.ok = server_failure.empty() && client_failure.empty() && server_ok &&
                client_ok && got_ping && got_pong;
    if (!result.ok) {
      result.detail =
          !server_failure.empty() ? server_failure
          : !client_failure.empty()
              ? client_failure
              : fmt::format("timed out after {} ms", config.timeout.count());
    }
  }  // ~Session: sockets closed, context shut down, ZAP thread joined.
  result.zap_requests = zap_stats.requests;
  result.zap_admitted = zap_stats.admitted;
  if (result.ok && result.zap_admitted == 0) {
    result.ok = false;
    result.detail = "the handshake bypassed the ZAP handler";
  }
  if (result.ok) {
    result.detail =
        "handshake succeeded on both ends, ZAP admitted the client, and a "
        "request/reply made the round trip";
  }
  return result;
}

}  // namespace fcc::testing
