# One image with both programs, built on Debian 12 from Debian's packages.
#   docker build -t ghcr.io/flux-curve-csi/flux-curve-csi:v0.1.0 .
# The DaemonSet runs `flux-curve-csi serve` as root (it mounts); the
# controller Deployment runs `minicluster-controller` as the image's
# non-root user. test/deploy/check_dockerfile.py keeps this file honest.
#
# Binaries built already (CI: scripts/image driver --prebuilt BUILD_DIR) skip
# the build stage: a directory holding out/bin/<both programs> stands in for
# it as the named context `build`, and only the runtime stage runs:
#   buildah bud --build-context build=DIR .   (docker buildx build: the same)
# Without a registry, scripts/image makes the two Debian bases from Debian's
# archive (mmdebstrap) and builds this file with buildah.
#
# Flux views (self-contained Flux installs the driver bind-mounts at
# /opt/flux in pods whose images have no Flux; images/view/README.md) come
# from the named context `view`: a directory of extracted views,
# <name>/bin/flux ..., which scripts/image view builds and scripts/image
# driver passes (--build-context view=DIR). Without it the `view` stage
# below is empty and the image serves no views:
#   docker buildx build --build-context view=DIR .

FROM debian:bookworm AS build
WORKDIR /src
# Dependencies first, so editing the source does not re-download them.
COPY scripts/install-deps scripts/install-deps
RUN scripts/install-deps --build-only && rm -rf /var/lib/apt/lists/*
COPY . .
# The same build developers and scripts/test run, without the tests.
RUN FCC_BUILD_DIR=/build FCC_BUILD_TESTS=OFF FCC_BUILD_TYPE=Release \
    scripts/build --prefix /out

# Empty unless --build-context view=DIR replaces it (buildah and BuildKit
# both read the named context in place of the stage).
FROM scratch AS view

FROM debian:bookworm-slim AS runtime
# Only the shared libraries the two binaries link (no compilers, no -dev).
# gRPC, protobuf, abseil and (in the driver) libzmq are linked in statically
# (cmake/FccStaticLink.cmake); what they need stays shared: zlib, c-ares,
# re2, OpenSSL, libsodium.
RUN apt-get update -q \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
      libsodium23 libssl3 libcurl4 zlib1g libc-ares2 libre2-9 \
      libspdlog1.10 libfmt9 libyaml-cpp0.7 libcivetweb1 \
      libprometheus-cpp-core1.0 \
 && rm -rf /var/lib/apt/lists/*
COPY --from=build /out/bin/flux-curve-csi /out/bin/minicluster-controller /usr/local/bin/
# Read-only data for the driver: one directory per view, named as its
# share/flux-view/view.json says.
COPY --from=view / /usr/share/flux-curve-csi/views/
# Non-root by default (the controller); the DaemonSet sets runAsUser: 0 for
# the driver, which needs root to mount.
USER 65532:65532
CMD ["flux-curve-csi", "--help"]
