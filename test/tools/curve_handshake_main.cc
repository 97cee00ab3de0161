// curve-handshake SERVER_CERT CLIENT_CERT: a real libzmq CURVE handshake
// between two brokers configured as Flux configures them (each side loads
// its cert; ZAP on the server admits only the server cert's public key).
// Exit 0 and "handshake OK" on success; exit 1 and the failure otherwise.
#include <CLI/CLI.hpp>
#include <iostream>

#include "curve/cert_file.h"
#include "curve_handshake.h"

int main(int argc, char** argv) {
  CLI::App app{
      "curve-handshake: a real ZeroMQ CURVE handshake between a broker "
      "holding SERVER_CERT and one holding CLIENT_CERT, configured as Flux "
      "brokers are (loopback TCP, ZAP)"};
  std::string server_cert;
  std::string client_cert;
  int timeout_ms = 5000;
  app.add_option("SERVER_CERT", server_cert, "The parent broker's curve.cert")
      ->required();
  app.add_option("CLIENT_CERT", client_cert, "The child broker's curve.cert")
      ->required();
  app.add_option("--timeout-ms", timeout_ms, "Give up after this long")
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  const auto result = fcc::testing::TryCurveHandshake(
      server_cert, client_cert, std::chrono::milliseconds(timeout_ms));
  auto describe = [](const char* side, const std::vector<std::string>& ev) {
    std::cout << "  " << side << " events:";
    for (const auto& e : ev) std::cout << " " << e;
    std::cout << "\n";
  };
  if (result.ok) {
    std::cout << "handshake OK: " << result.detail << "\n";
    describe("server", result.server_events);
    describe("client", result.client_events);
    return 0;
  }
  std::cout << "handshake FAILED: " << result.detail << " (ZAP answered "
            << result.zap_requests << " request(s), admitted "
            << result.zap_admitted << ")\n";
  describe("server", result.server_events);
  describe("client", result.client_events);
  return 1;
}
