// spdlog set-up shared by the binaries: text or JSON lines on stderr.
#pragma once

#include <string>

namespace fcc::driver {

// `format` is "text" or "json"; `level` one of trace, debug, info, warn,
// error. Returns false (and changes nothing) on an unknown value.
bool ConfigureLogging(const std::string& format, const std::string& level);

}  // namespace fcc::driver
