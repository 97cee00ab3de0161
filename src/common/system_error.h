// errno as std::error_code: the one conversion for every syscall wrapper.
#pragma once

#include <cerrno>
#include <system_error>

namespace fcc::common {

inline std::error_code ErrnoCode(int e) { return {e, std::system_category()}; }

// The errno the last failed call left; read it before anything else runs.
inline std::error_code LastError() { return ErrnoCode(errno); }

}  // namespace fcc::common
