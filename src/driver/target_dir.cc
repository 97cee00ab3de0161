#include "driver/target_dir.h"

#include <fmt/format.h>

namespace fcc::driver {

using grpc::Status;
using grpc::StatusCode;

Status TargetFailure(std::string_view step, const std::string& target,
                     std::error_code ec) {
  const StatusCode code = ec == std::errc::no_space_on_device
                              ? StatusCode::RESOURCE_EXHAUSTED
                              : StatusCode::INTERNAL;
  return Status(code, fmt::format("{} at target_path {} failed: {}", step,
                                  target, ec.message()));
}

Status MakeTargetDir(HostFs& fs, const std::string& target) {
  const std::error_code ec = fs.MakeDir(target, kTargetDirMode);
  if (!ec) return Status::OK;
  if (ec == std::errc::no_such_file_or_directory) {
    return Status(StatusCode::FAILED_PRECONDITION,
                  fmt::format("the parent directory of target_path {} does "
                              "not exist (kubelet creates it)",
                              target));
  }
  return TargetFailure("creating the directory", target, ec);
}

}  // namespace fcc::driver
