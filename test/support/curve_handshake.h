// A real libzmq CURVE handshake, configured the way Flux brokers configure
// their overlay (flux-core src/broker/overlay.c and zap.c):
//  - every broker loads the same curve.cert;
//  - the server (parent) is a ROUTER with ZMQ_CURVE_SERVER, the cert's secret
//    key, ZAP domain "flux", and a ZAP handler on inproc://zeromq.zap.01 that
//    admits only the public keys it knows (here: its own cert's);
//  - the client (child) is a DEALER using its cert's keypair as its own and
//    its cert's public key as ZMQ_CURVE_SERVERKEY.
// Both sockets are observed with zmq_socket_monitor, over loopback TCP on an
// ephemeral port, and one message makes the round trip. Never logs or
// returns key material other than public keys.
#pragma once

#include <chrono>
#include <string>
#include <vector>

namespace fcc::testing {

struct HandshakeResult {
  // True only if both ends reported ZMQ_EVENT_HANDSHAKE_SUCCEEDED, the ZAP
  // handler admitted the client, and a request/reply made the round trip.
  bool ok = false;
  // One line saying what happened (or what failed), for humans.
  std::string detail;
  // Monitor events in arrival order, e.g. "HANDSHAKE_FAILED_AUTH(400)".
  std::vector<std::string> server_events;
  std::vector<std::string> client_events;
  int zap_requests = 0;  // ZAP requests the handler answered
  int zap_admitted = 0;  // ... of which with 200
};

// The keys one end uses; Z85 text (40 chars each).
struct CurveEndConfig {
  std::string public_z85;
  std::string secret_z85;
};

struct HandshakeConfig {
  CurveEndConfig server;         // the ROUTER's long-term keypair
  CurveEndConfig client;         // the DEALER's long-term keypair
  std::string client_serverkey;  // what the client believes the server is
  std::string zap_admit;         // the only client public key ZAP admits
  std::chrono::milliseconds timeout{5000};
};

// Runs one handshake + round trip with explicit keys (every wait is bounded
// by config.timeout).
HandshakeResult RunCurveHandshake(const HandshakeConfig& config);

// Flux's configuration from two cert files: the server loads
// `server_cert_path`, the client loads `client_cert_path` (both read with
// fcc::curve::LoadCertFile, so a bad file or a group/other-readable mode is
// an error in `detail`).
HandshakeResult TryCurveHandshake(const std::string& server_cert_path,
                                  const std::string& client_cert_path,
                                  std::chrono::milliseconds timeout);

}  // namespace fcc::testing
