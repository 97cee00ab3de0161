#include "common/logging.h"

#include <spdlog/pattern_formatter.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include <memory>
#include <nlohmann/json.hpp>

namespace fcc::common {
namespace {

// %* in the JSON pattern: the message as a JSON string, escaped.
class JsonMessageFlag : public spdlog::custom_flag_formatter {
 public:
  void format(const spdlog::details::log_msg& msg, const std::tm&,
              spdlog::memory_buf_t& dest) override {
    const std::string text =
        nlohmann::json(std::string(msg.payload.data(), msg.payload.size()))
            .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    dest.append(text.data(), text.data() + text.size());
  }
  std::unique_ptr<custom_flag_formatter> clone() const override {
    return std::make_unique<JsonMessageFlag>();
  }
};

std::unique_ptr<spdlog::formatter> MakeFormatter(bool json) {
  auto formatter = std::make_unique<spdlog::pattern_formatter>(
      spdlog::pattern_time_type::utc, std::string("\n"));
  if (json) {
    formatter->add_flag<JsonMessageFlag>('*').set_pattern(
        R"({"ts":"%Y-%m-%dT%H:%M:%S.%fZ","level":"%l","msg":%*})");
  } else {
    formatter->set_pattern("%Y-%m-%dT%H:%M:%S.%fZ %l %v");
  }
  return formatter;
}

}  // namespace

std::expected<void, std::string> ConfigureLogging(std::string_view program,
                                                  std::string_view format,
                                                  std::string_view level) {
  const auto lvl = spdlog::level::from_str(std::string(level));
  if (lvl == spdlog::level::off && level != "off") {
    return std::unexpected(
        "--log-level must be one of trace, debug, info, warn, error, "
        "critical, off; got \"" +
        std::string(level) + "\"");
  }
  if (format != "text" && format != "json") {
    return std::unexpected("--log-format must be text or json; got \"" +
                           std::string(format) + "\"");
  }
  auto logger = std::make_shared<spdlog::logger>(
      std::string(program), std::make_shared<spdlog::sinks::stderr_sink_mt>());
  logger->set_formatter(MakeFormatter(format == "json"));
  logger->set_level(lvl);
  logger->flush_on(spdlog::level::trace);
  spdlog::set_default_logger(std::move(logger));
  return {};
}

}  // namespace fcc::common
