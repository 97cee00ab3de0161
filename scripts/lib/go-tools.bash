# Sourced by the scripts that build a Go tool from a pinned tools module
# (build-controlplane, build-kueue, build-coredns, build-helm,
# build-csi-sanity), and by align-tools-module for its Go: one scheme for all
# of them, so that a change to it reaches every tool.
#
# The sourcing script sets `me` (its name, for messages) and `tools` (its
# tools module's dir), and marks its build recipe with `# BEGIN RECIPE` and
# `# END RECIPE` lines: a change to the recipe is a new cache dir.
#
# Env: FCC_CACHE (default ~/.cache/flux-curve-csi), GO (default: what
# scripts/install-go prints, installing Go if none is new enough),
# FCC_CP_JOBS (go build -p, default 2).

# A Go new enough for the tools modules (scripts/install-go installs one if
# none is).
GO=${GO:-$("$(dirname "${BASH_SOURCE[0]}")/../install-go")}
[[ -x $GO ]] || { echo "$me: no Go toolchain (set GO=)" >&2; exit 1; }

# MODULE's version in the tools module's go.mod, on a `require` line of its
# own or in a require block.
tools_module_version() {
  local version
  version=$(awk -v m="$1" '$1 == "require" && $2 == m {print $3; exit}
                           $1 == m && $2 ~ /^v/ {print $2; exit}' "$tools/go.mod")
  [[ $version =~ ^v[0-9]+\.[0-9]+\.[0-9]+$ ]] ||
    { echo "$me: cannot read the $1 version from $tools/go.mod" >&2; return 1; }
  echo "$version"
}

# The cache dir KIND/VERSION-HASH. HASH covers the module's files, any
# FILE... the build reads, the sourcing script's recipe and the Go version.
tools_cache_dir() {
  local kind=$1 version=$2 hash
  shift 2
  hash=$({ cat "$tools/go.mod" "$tools/go.sum" "$@"
           sed -n '/^# BEGIN RECIPE/,/^# END RECIPE/p' "$0"; "$GO" version; } |
         sha256sum | cut -c1-12)
  echo "${FCC_CACHE:-$HOME/.cache/flux-curve-csi}/$kind/$version-$hash"
}

# Holds DIR's lock on fd 9 until the script exits: one build at a time per
# cache dir (parallel tests may all ask for it).
lock_cache_dir() {
  mkdir -p "$1"
  exec 9>"$1/.lock"
  flock -w 3600 9 || { echo "$me: timed out waiting for $1/.lock" >&2; exit 1; }
}

# `go mod download` in the tools module: run first, so a network problem is
# reported as such, not as a build error.
tools_module_download() {
  (cd "$tools" && nice -n 10 "$GO" mod download) >&2
}

# go build -o OUT PACKAGE... in the tools module, with the recipe's $ldflags:
# static (a cgo package in the graph changes the build of every package that
# imports net or os/user, so the shared packages would compile twice),
# path-free, at nice 10 (below interactive work). OUT is a file, or a dir
# ending in /. Its output goes to stderr: the scripts print their result on
# stdout.
tools_go_build() {
  local out=$1
  shift
  (cd "$tools" && CGO_ENABLED=0 nice -n 10 "$GO" build -p "${FCC_CP_JOBS:-2}" -trimpath \
    -ldflags "$ldflags" -o "$out" "$@") >&2
}

# Builds PACKAGE into the executable OUT by way of a temp name, so that a
# killed build never leaves a half-written binary behind.
tools_go_build_one() {
  local out=$1 tmp
  tmp="$(dirname "$1")/.$(basename "$1").tmp"
  tools_go_build "$tmp" "$2"
  mv -f "$tmp" "$out"
}
