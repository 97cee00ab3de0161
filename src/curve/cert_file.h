// Reading a curve.cert file the way a Flux broker does, mode check included.
#pragma once

#include <expected>
#include <string>

#include "curve/cert.h"

namespace fcc::curve {

// Loads and checks `path` as flux-core's broker would: the file must not be
// readable by group or other (Flux refuses such a cert at start), and must
// pass ParseCert. The error names the problem and the usual fix; it never
// contains key material.
std::expected<ParsedCert, std::string> LoadCertFile(const std::string& path);

}  // namespace fcc::curve
