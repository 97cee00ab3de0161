# Compiles through ccache when it is installed (scripts/install-deps installs
# it for the tests). Every build dir of every clone shares one cache: the
# main, fuzz and sanitizer trees of scripts/test, and CI's clean clones,
# which otherwise compile everything again on each run. CCACHE_BASEDIR makes
# the clone's path irrelevant to a hit (__FILE__ and debug info then carry
# paths relative to the build dir); CCACHE_NOHASHDIR lets debug builds hit
# across build dirs. The cache sits with the project's other caches
# (FCC_CACHE, default ~/.cache/flux-curve-csi), unless CCACHE_DIR says where.
# A definition that carries a path of the clone (a test's data file, the
# driver binary) goes on the files that read it, not on their target, or
# every file of the target would miss in another clone.
option(FCC_CCACHE "Compile through ccache when it is installed" ON)
find_program(FCC_CCACHE_PROGRAM ccache)

if(FCC_CCACHE AND FCC_CCACHE_PROGRAM AND NOT CMAKE_CXX_COMPILER_LAUNCHER)
  if(DEFINED ENV{CCACHE_DIR})
    set(_fcc_ccache_dir "$ENV{CCACHE_DIR}")
  elseif(DEFINED ENV{FCC_CACHE})
    set(_fcc_ccache_dir "$ENV{FCC_CACHE}/ccache")
  else()
    set(_fcc_ccache_dir "$ENV{HOME}/.cache/flux-curve-csi/ccache")
  endif()
  set(_fcc_ccache ${CMAKE_COMMAND} -E env
      "CCACHE_DIR=${_fcc_ccache_dir}" "CCACHE_BASEDIR=${CMAKE_SOURCE_DIR}"
      CCACHE_NOHASHDIR=true ${FCC_CCACHE_PROGRAM})
  set(CMAKE_C_COMPILER_LAUNCHER ${_fcc_ccache})
  set(CMAKE_CXX_COMPILER_LAUNCHER ${_fcc_ccache})
  message(STATUS "Compiling through ccache, cache ${_fcc_ccache_dir}")
endif()
