// What the cert and view publishers share about a volume's target_path:
// the directory the driver makes there, and how a failure at it is told to
// kubelet.
#pragma once

#include <grpcpp/support/status.h>
#include <sys/types.h>

#include <string>
#include <string_view>
#include <system_error>

#include "driver/host_fs.h"

namespace fcc::driver {

inline constexpr mode_t kTargetDirMode = 0750;

// INTERNAL, except a full filesystem: RESOURCE_EXHAUSTED tells the operator
// (and kubelet's events) that freeing space, not a driver fix, is the cure.
grpc::Status TargetFailure(std::string_view step, const std::string& target,
                           std::error_code ec);

// Makes the target directory (kubelet creates only its parent); OK, or the
// status naming why not.
grpc::Status MakeTargetDir(HostFs& fs, const std::string& target);

}  // namespace fcc::driver
