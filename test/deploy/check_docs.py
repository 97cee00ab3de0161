#!/usr/bin/env python3
"""README.md links every page of docs/ (subdirectories included). Every
relative link in README.md and docs/**/*.md names a file that exists, and
every #anchor in one names a heading of the page it points to (GitHub's
rules: lowercase, spaces to '-', punctuation but '-' and '_' dropped, a
repeated heading gets -1, -2, ...). Every ```yaml block in docs/**/*.md
must parse, and every use of this driver in one must carry what the driver
needs: the driver name, readOnly, only known attributes with valid values
and, for a flux-operator MiniCluster, a brokerConfig whose curve_cert is on
the CSI mount.

usage: check_docs.py DOCS_DIR
"""

import glob
import os
import re
import sys

import manifests as m

ATTRIBUTES = {"minicluster", "generation", "owner"}
DNS1123_SUBDOMAIN = re.compile(
    r"^(?=.{1,253}$)[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
OWNER = re.compile(r"^[0-9]{1,10}(:[0-9]{1,10})?$")
UID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")


def yaml_blocks(text):
    return re.findall(r"^```yaml\n(.*?)^```", text, re.M | re.S)


def check_attributes(attrs, where, c, name=None):
    attrs = attrs or {}
    unknown = set(attrs) - ATTRIBUTES
    c.check(not unknown, f"{where}: unknown attributes {sorted(unknown)}")
    mc = str(attrs.get("minicluster", ""))
    c.check(DNS1123_SUBDOMAIN.match(mc) or mc.startswith("<"),
            f"{where}: minicluster {mc!r} is not a DNS-1123 subdomain")
    if name is not None:
        c.equal(mc, name, f"{where}: minicluster vs metadata.name")
    if "owner" in attrs:
        owner = attrs["owner"]
        c.check(isinstance(owner, str), f"{where}: owner must be a YAML "
                "string (quote it), not {owner!r}")
        c.check(OWNER.match(str(owner)) or str(owner).startswith("<"),
                f"{where}: owner {owner!r} is not uid or uid:gid")


def check_flux_operator(obj, where, c):
    """flux-framework.org/v1alpha2 MiniCluster."""
    spec = obj.get("spec", {})
    name = obj["metadata"]["name"]
    mounts = []
    for ct in spec.get("containers", []):
        for vname, vol in (ct.get("volumes") or {}).items():
            if vol.get("csiDriver") != m.DRIVER_NAME:
                continue
            w = f"{where} volume {vname}"
            check_attributes(vol.get("csiDriverAttributes"), w, c, name)
            # deploy/admission-policy/jobs.yaml refuses a uid there.
            generation = str((vol.get("csiDriverAttributes") or {}).get("generation", ""))
            c.check(not UID.match(generation),
                    f"{w}: generation {generation!r} is a uid, which the admission policy refuses")
            c.check(vol.get("path", "").startswith("/"), f"{w}: no path")
            c.equal(vol.get("readOnly"), True, f"{w}: readOnly")
            mounts.append(vol.get("path", "").rstrip("/"))
    if not c.check(len(mounts) == 1, f"{where}: expected one "
                   f"{m.DRIVER_NAME} volume, found {len(mounts)}"):
        return
    config = spec.get("flux", {}).get("brokerConfig", "")
    cert = re.findall(r'^curve_cert\s*=\s*"([^"]*)"', config, re.M)
    c.equal(cert, [f"{mounts[0]}/curve.cert"],
            f"{where}: brokerConfig curve_cert")
    size = spec.get("size", 1)
    c.check(f'host="{name}-[0-{size - 1}]"' in config.replace(" ", ""),
            f"{where}: brokerConfig hosts is not {name}-[0-{size - 1}]")
    ns = obj["metadata"].get("namespace", "default")
    # flux-operator names the headless Service after the MiniCluster unless
    # network.headlessName says otherwise (its release 0.2.0 defaulted to
    # "flux-service"; main, which has csiDriver, does not).
    headless = spec.get("network", {}).get("headlessName") or name
    c.check(f"%h.{headless}.{ns}.svc" in config,
            f"{where}: default_connect is not via {headless}.{ns}")


def check_pod_volumes(obj, where, c):
    spec = m.pod_spec(obj)
    if not spec:
        return
    for v in spec.get("volumes", []):
        csi = v.get("csi")
        if not csi or csi.get("driver") != m.DRIVER_NAME:
            continue
        w = f"{where} volume {v['name']}"
        c.equal(csi.get("readOnly"), True, f"{w}: csi.readOnly")
        attrs = csi.get("volumeAttributes") or {}
        if "view" in attrs:  # a view volume: the one attribute, a view name
            c.equal(sorted(attrs), ["view"], f"{w}: a view volume's attributes")
            c.check(DNS1123_SUBDOMAIN.match(str(attrs["view"])) or str(attrs["view"]).startswith("<"),
                    f"{w}: view {attrs['view']!r} is not a view name")
            continue
        check_attributes(attrs, w, c)


def check_text(text, where):
    c = m.Checker()
    for i, block in enumerate(yaml_blocks(text)):
        w = f"{where} yaml block {i + 1}"
        try:
            objects = m.load_all(block)
        except Exception as e:  # a parse error is the finding
            c.check(False, f"{w}: does not parse: {e}")
            continue
        for obj in objects:
            if not isinstance(obj, dict):
                continue
            if obj.get("kind") == "MiniCluster" and str(
                    obj.get("apiVersion", "")).startswith("flux-framework.org/"):
                check_flux_operator(obj, w, c)
            elif obj.get("kind"):
                check_pod_volumes(obj, w, c)
            elif obj.get("csi", {}).get("driver") == m.DRIVER_NAME:
                check_pod_volumes({"kind": "Pod", "spec": {"volumes": [obj]}},
                                  w, c)
    return c.errors


def unlinked_pages(readme, pages):
    """The pages of docs/ (paths relative to it) that README.md does not link to."""
    linked = set(re.findall(r"\]\(docs/([^)#]+\.md)", readme))
    return sorted(set(pages) - linked)


FENCE = re.compile(r"^\s*(```|~~~)")


def outside_code(text):
    """The lines of a Markdown text outside fenced code blocks."""
    lines, fenced = [], False
    for line in text.split("\n"):
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            lines.append(line)
    return lines


def slug(heading):
    """GitHub's anchor for a heading."""
    s = heading.strip().lower()
    s = re.sub(r"[^\w\- ]", "", s)
    return s.replace(" ", "-")


def anchors(text):
    seen, out = {}, set()
    for line in outside_code(text):
        m = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not m:
            continue
        base = slug(m.group(1))
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")
    return out


LINK = re.compile(r"\]\(([^)\s]*)(?:\s+\"[^\"]*\")?\)")


def check_links(path, text, read):
    """Every relative link of the page at `path` names an existing file and,
    with #anchor, a heading of that page. `read(path)` gives a page's text
    or None when there is no such file."""
    errors = []
    for line in outside_code(text):
        line = re.sub(r"`[^`]*`", "", line)  # code spans hold no links
        for target in LINK.findall(line):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # https:, mailto:
                continue
            if not target or target == "#":
                errors.append(f"{path}: an empty link")
                continue
            file, _, anchor = target.partition("#")
            dest = os.path.normpath(os.path.join(os.path.dirname(path), file)) if file else path
            if file and not os.path.exists(dest):
                errors.append(f"{path}: link {target}: no file {dest}")
                continue
            if anchor and dest.endswith(".md"):
                page = read(dest)
                if page is not None and anchor not in anchors(page):
                    errors.append(f"{path}: link {target}: no heading #{anchor} in {dest}")
    return errors


def main():
    docs = os.path.normpath(sys.argv[1])
    repo = os.path.dirname(os.path.abspath(docs))
    os.chdir(repo)  # paths in messages are the repository's
    docs = os.path.basename(docs)
    errors, blocks = [], 0
    # A stranger starts at README.md: every page must be reachable from it.
    paths = sorted(glob.glob(os.path.join(docs, "**", "*.md"), recursive=True))
    pages = [os.path.relpath(p, docs) for p in paths]
    with open("README.md") as fh:
        readme = fh.read()
    errors += [f"README.md does not link docs/{p}" for p in unlinked_pages(readme, pages)]
    if "not-a-page.md" not in unlinked_pages(readme, pages + ["not-a-page.md"]):
        errors.append("self-test: an unlinked page went unnoticed")

    texts = {"README.md": readme}
    for path in paths:
        with open(path) as fh:
            texts[path] = fh.read()

    def read(path):
        if path not in texts and os.path.isfile(path):
            with open(path) as fh:
                texts[path] = fh.read()
        return texts.get(path)

    links = 0
    for path, text in texts.items():
        links += sum(len(LINK.findall(line)) for line in outside_code(text))
        errors += check_links(path, text, read)
    # Self-test: a missing page and a missing heading must be caught.
    bad = "[a](docs/no-such-page.md) [b](README.md#no-such-heading) [c](#not-here) [d]()"
    if len(check_links("README.md", bad, read)) != 4:
        errors.append("self-test: a broken link or anchor went unnoticed")
    if slug("Bounding a tenant's MiniClusters (`count/x`)") != "bounding-a-tenants-miniclusters-countx":
        errors.append("self-test: heading anchors are not GitHub's")

    for path in paths:
        blocks += len(yaml_blocks(texts[path]))
        errors += check_text(texts[path], path)
    # The flux-operator guide is what this test is for: it must have YAML.
    guide = texts[os.path.join(docs, "reference", "flux-operator.md")]
    if not any("flux-framework.org/v1alpha2" in b for b in yaml_blocks(guide)):
        errors.append("reference/flux-operator.md has no v1alpha2 MiniCluster YAML")
    # Self-test: a broken guide must be caught.
    for bad, what in [("curve_cert = \"/etc/flux/curve/curve.cert\"",
                       "curve_cert = \"/mnt/flux/curve.cert\""),
                      ("minicluster: lammps", "minicluster: lamps"),
                      ("owner: \"0\"", "owner: flux"),
                      ("csiDriver: curve.minicluster.dev",
                       "csiDriver: curve.example.com"),
                      ("%h.lammps.default.svc", "%h.flux-service.default.svc")]:
        if bad not in guide:
            errors.append(f"self-test: {bad!r} not in flux-operator.md")
        elif not check_text(guide.replace(bad, what), "mutated"):
            errors.append(f"self-test: replacing {bad!r} went unnoticed")
    for e in errors:
        print("FAIL:", e)
    print(f"docs check: {len(texts)} page(s), {links} link(s), {blocks} yaml block(s), "
          f"{len(errors)} problem(s)")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
