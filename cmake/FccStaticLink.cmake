# Static linking for a smaller driver. The driver runs on every node, and the
# pages that shared objects map at start-up (relocations, symbol tables,
# init code) were most of its idle RSS: 21 MiB with everything shared, 17
# with gRPC, protobuf and abseil static, 16 with libzmq static as well
# (docs/internals/performance.md). Debian builds these archives position-independent,
# so binaries stay PIE. Off under sanitizers and fuzzing, which instrument
# and suppress by library.
option(FCC_STATIC_LINK
       "Link gRPC, protobuf, abseil (and libzmq into the driver) statically" ON)

# Points each imported shared library target named like gRPC::*, protobuf::*
# or absl::* at the .a next to its .so, where Debian ships one.
function(fcc_use_static_grpc)
  get_directory_property(imported IMPORTED_TARGETS)
  set(swapped 0)
  foreach(target IN LISTS imported)
    if(NOT target MATCHES "^(gRPC|protobuf|absl)::")
      continue()
    endif()
    foreach(prop IMPORTED_LOCATION IMPORTED_LOCATION_NONE
                 IMPORTED_LOCATION_RELEASE IMPORTED_LOCATION_RELWITHDEBINFO
                 IMPORTED_LOCATION_DEBUG)
      get_target_property(location ${target} ${prop})
      if(location MATCHES "^(.*/lib[^/]+)\\.so(\\.[0-9.]+)?$")
        set(archive "${CMAKE_MATCH_1}.a")
        if(EXISTS "${archive}")
          set_target_properties(${target} PROPERTIES ${prop} "${archive}")
          math(EXPR swapped "${swapped} + 1")
        endif()
      endif()
    endforeach()
  endforeach()
  if(swapped EQUAL 0)
    message(FATAL_ERROR "FCC_STATIC_LINK: no static gRPC/protobuf/abseil "
            "archive found; install the -dev packages or pass "
            "-DFCC_STATIC_LINK=OFF")
  endif()
  message(STATUS "FCC_STATIC_LINK: ${swapped} gRPC/protobuf/abseil libraries static")
endfunction()

# fcc_zmq: libzmq as fcc_curve needs it (Z85 and the CURVE public key).
# Binaries with the target property FCC_STATIC_ZMQ get libzmq's archive,
# whose members we use need only libsodium; the others (tests, which also
# load CZMQ and with it the shared libzmq) keep the shared library, so no
# process holds two libzmq.
add_library(fcc_zmq INTERFACE)
set(fcc_static_zmq OFF)
if(FCC_STATIC_LINK AND NOT FCC_SANITIZE AND NOT FCC_BUILD_FUZZ)
  fcc_use_static_grpc()
  find_library(FCC_ZMQ_ARCHIVE libzmq.a HINTS ${ZMQ_LIBRARY_DIRS})
  pkg_check_modules(SODIUM IMPORTED_TARGET libsodium)
  if(FCC_ZMQ_ARCHIVE AND SODIUM_FOUND)
    set(fcc_static_zmq ON)
  else()
    message(WARNING "FCC_STATIC_LINK: no libzmq.a or libsodium; the driver "
            "links the shared libzmq")
  endif()
endif()
if(fcc_static_zmq)
  set(static_here "$<BOOL:$<TARGET_PROPERTY:FCC_STATIC_ZMQ>>")
  target_link_libraries(fcc_zmq INTERFACE
    "$<${static_here}:${FCC_ZMQ_ARCHIVE}>"
    "$<${static_here}:PkgConfig::SODIUM>"
    "$<$<NOT:${static_here}>:PkgConfig::ZMQ>")
  target_include_directories(fcc_zmq INTERFACE ${ZMQ_INCLUDE_DIRS})
else()
  target_link_libraries(fcc_zmq INTERFACE PkgConfig::ZMQ)
endif()
