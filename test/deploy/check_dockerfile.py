#!/usr/bin/env python3
"""No Docker engine runs here, so this keeps the Dockerfile from rotting:
its build stage must call scripts/install-deps --build-only and
scripts/build (the build scripts/test uses too), scripts/build must build
and install both programs (it is run here into a temp prefix), and the
runtime stage must install the Debian package of every shared library the
installed binaries link. The build stage is named `build` and the runtime
stage takes nothing else from the build context: scripts/image driver
--prebuilt replaces that stage with already built binaries (buildah's
--build-context build=DIR) and gives the runtime stage no other files.
The Flux views come the same way: an empty `FROM scratch AS view` stage
that scripts/image driver (both kinds) replaces with --build-context
view=DIR, copied whole into VIEWS_DIR by the runtime stage.

usage: check_dockerfile.py REPO_DIR BUILD_DIR
"""

import os
import re
import shlex
import subprocess
import sys
import tempfile

BINARIES = ("flux-curve-csi", "minicluster-controller")
# Where the driver image keeps the Flux views (one directory per view).
VIEWS_DIR = "/usr/share/flux-curve-csi/views/"
# In every debian:bookworm-slim image already (apt itself needs them).
BASE_PACKAGES = {"libc6", "libgcc-s1", "libstdc++6"}


def stages(dockerfile_text):
    """[(from_line, as_name, [(instruction, rest)])] with continuations
    joined and comments dropped."""
    text = re.sub(r"\\\n", " ", dockerfile_text)
    result = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        instr, _, rest = line.partition(" ")
        instr = instr.upper()
        if instr == "FROM":
            words = rest.split()
            name = words[2] if len(words) == 3 and words[1].upper() == "AS" \
                else None
            result.append((words[0], name, []))
        elif result:
            result[-1][2].append((instr, rest.strip()))
    return result


def apt_packages(run_lines):
    pkgs = set()
    for run in run_lines:
        for cmd in re.split(r"&&|;", run):
            words = shlex.split(cmd)
            if "apt-get" in words and "install" in words:
                pkgs |= {w for w in words[words.index("install") + 1:]
                         if not w.startswith("-")}
    return pkgs


def needed_packages(binary):
    """Debian packages of the shared libraries `binary` links directly."""
    out = subprocess.run(["readelf", "-d", binary], check=True,
                         capture_output=True, text=True).stdout
    sonames = re.findall(r"\(NEEDED\)\s+Shared library: \[(.+?)\]", out)
    ldd = subprocess.run(["ldd", binary], check=True, capture_output=True,
                         text=True).stdout
    paths = dict(re.findall(r"^\s*(\S+) => (\S+)", ldd, re.M))
    # The dynamic loader is listed by path alone (a binary names it as
    # NEEDED when a static archive in it uses __tls_get_addr).
    paths.update((os.path.basename(p), p)
                 for p in re.findall(r"^\s*(/\S+) \(0x", ldd, re.M))
    pkgs = {}
    for so in sonames:
        path = os.path.realpath(paths[so])
        owner = subprocess.run(["dpkg", "-S", path], capture_output=True,
                               text=True)
        if owner.returncode != 0:  # usrmerge: dpkg knows the /lib path
            owner = subprocess.run(["dpkg", "-S", path.replace("/usr/lib/",
                                                                "/lib/", 1)],
                                   check=True, capture_output=True, text=True)
        pkgs[so] = owner.stdout.split(":")[0]
    return pkgs


def main():
    repo, build_dir = sys.argv[1:3]
    errors = []

    def check(ok, msg):
        if not ok:
            errors.append(msg)

    with open(os.path.join(repo, "Dockerfile")) as fh:
        st = stages(fh.read())
    check(len(st) >= 2, "Dockerfile is not multi-stage")
    for image, name, _ in st:
        # The view stage is a placeholder for the named context `view`.
        if name == "view":
            check(image == "scratch", "the `view` stage must be FROM scratch "
                  "(empty: plain builds serve no views)")
            continue
        check(image.startswith("debian:bookworm"),
              f"base image {image} is not Debian 12 (bookworm)")
    check(any(name == "view" for _, name, _ in st),
          "no `FROM scratch AS view` stage (scripts/image driver passes "
          "--build-context view=DIR)")
    build = [s for s in st if any(
        i == "RUN" and "scripts/build" in r for i, r in s[2])]
    check(len(build) == 1, "no single stage RUNs scripts/build")
    prefix = None
    if build:
        runs = [r for i, r in build[0][2] if i == "RUN"]
        check(any("scripts/install-deps --build-only" in r for r in runs),
              "build stage does not RUN scripts/install-deps --build-only")
        m = re.search(r"scripts/build --prefix[ =](\S+)", " ".join(runs))
        check(m is not None, "build stage does not RUN scripts/build --prefix")
        prefix = m.group(1) if m else None
    check(build and build[0][1] == "build",
          "the stage that RUNs scripts/build must be named `build` "
          "(scripts/image driver --prebuilt passes --build-context build=DIR)")
    final = st[-1]
    copies = [r for i, r in final[2] if i == "COPY"]
    check(not any(i == "ADD" or (i == "COPY" and not re.match(
        r"--from=(build|view)\s", r)) for i, r in final[2]),
          "the runtime stage must COPY only --from the build and view stages "
          "(scripts/image driver --prebuilt builds it with no other context)")
    check(any(r.split() == ["--from=view", "/", VIEWS_DIR] for r in copies),
          f"the runtime stage does not COPY --from=view / {VIEWS_DIR}")
    with open(os.path.join(repo, "scripts", "image")) as fh:
        image_script = fh.read()
    check(image_script.count('--build-context "view=') >= 2,
          "scripts/image driver (full and --prebuilt) must pass "
          "--build-context view=DIR")
    for b in BINARIES:
        check(any(f"--from={build[0][1] if build else ''}" in r
                  and f"{prefix}/bin/{b}" in r for r in copies),
              f"final stage does not COPY {prefix}/bin/{b} from the build "
              "stage")
    users = [r for i, r in final[2] if i == "USER"]
    check(users and users[-1].split(":")[0] not in ("0", "root"),
          "final stage must run as a non-root USER")
    runtime_pkgs = apt_packages([r for i, r in final[2] if i == "RUN"])
    check(not any(p.endswith("-dev") for p in runtime_pkgs),
          f"runtime stage installs -dev packages: {sorted(runtime_pkgs)}")
    for p in sorted(runtime_pkgs):
        known = subprocess.run(["apt-cache", "show", p], capture_output=True)
        check(known.returncode == 0, f"runtime package {p} is not a Debian "
              "package apt knows")

    # scripts/test builds with scripts/build too: one build for everyone.
    with open(os.path.join(repo, "scripts", "test")) as fh:
        check("scripts/build" in fh.read(), "scripts/test does not call "
              "scripts/build")

    # Run the real scripts/build (on the configured test build dir, so it
    # is a no-op build plus install) into a temp prefix.
    with tempfile.TemporaryDirectory() as tmp:
        # Keep the build dir's own FCC_BUILD_TESTS so nothing is rebuilt.
        with open(os.path.join(build_dir, "CMakeCache.txt")) as fh:
            m = re.search(r"^FCC_BUILD_TESTS:BOOL=(\w+)", fh.read(), re.M)
        env = dict(os.environ, FCC_BUILD_DIR=build_dir,
                   FCC_BUILD_TESTS=m.group(1) if m else "ON")
        r = subprocess.run([os.path.join(repo, "scripts", "build"),
                            "--prefix", tmp], env=env, capture_output=True,
                           text=True)
        check(r.returncode == 0, f"scripts/build failed: {r.stderr[-3000:]}")
        for b in BINARIES:
            path = os.path.join(tmp, "bin", b)
            if not os.access(path, os.X_OK):
                check(False, f"scripts/build did not install bin/{b}")
                continue
            v = subprocess.run([path, "--help"], capture_output=True)
            check(v.returncode == 0, f"installed {b} --help failed")
            for so, pkg in needed_packages(path).items():
                check(pkg in runtime_pkgs | BASE_PACKAGES,
                      f"{b} links {so} from {pkg}, which the runtime stage "
                      "does not install")
        print("installed:", sorted(os.listdir(os.path.join(tmp, "bin")))
              if os.path.isdir(os.path.join(tmp, "bin")) else "nothing")

    for e in errors:
        print("FAIL:", e)
    print(f"dockerfile check: {len(errors)} problem(s)")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
