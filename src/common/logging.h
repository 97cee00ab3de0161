// spdlog set-up for both binaries: text, or one JSON object per line
// {"ts", "level", "msg"}, on stderr.
#pragma once

#include <expected>
#include <string>
#include <string_view>

namespace fcc::common {

// `format` is "text" or "json"; `level` one of trace, debug, info, warn,
// error, critical, off. On an unknown value nothing changes and the error
// names the flag and the choices.
std::expected<void, std::string> ConfigureLogging(std::string_view program,
                                                  std::string_view format,
                                                  std::string_view level);

}  // namespace fcc::common
