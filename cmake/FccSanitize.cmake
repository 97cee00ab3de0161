# Sanitizer and fuzzing builds (docs/internals/security.md). Used by scripts/test-sanitizers and
# scripts/test-fuzz, each in its own build directory:
#   -DFCC_SANITIZE=address,undefined   whole suite under ASan+UBSan
#   -DFCC_SANITIZE=thread              concurrency tests under TSan
#   -DFCC_BUILD_FUZZ=ON (clang)        libFuzzer targets in fuzz/
set(FCC_SANITIZE "" CACHE STRING
    "Sanitizers to build with: address,undefined or thread (empty: none)")
option(FCC_BUILD_FUZZ "Build the libFuzzer targets in fuzz/ (clang only)" OFF)

if(FCC_SANITIZE)
  # Any finding fails the run: no recovering past the first report.
  # -O1 -g1 (after the build type's -O2 -g, so they win), as the
  # sanitizers advise: a third less compile time, reports still name lines.
  add_compile_options(-fsanitize=${FCC_SANITIZE} -fno-omit-frame-pointer
                      -fno-sanitize-recover=all -O1 -g1)
  add_link_options(-fsanitize=${FCC_SANITIZE})
endif()

if(FCC_BUILD_FUZZ)
  if(NOT CMAKE_CXX_COMPILER_ID MATCHES "Clang")
    message(FATAL_ERROR
      "FCC_BUILD_FUZZ needs clang with libFuzzer: CC=clang-19 CXX=clang++-19 "
      "(Debian 12: apt-get install clang-19 libclang-rt-19-dev)")
  endif()
  add_compile_options(-fsanitize=fuzzer-no-link)
endif()
