#!/usr/bin/env python3
"""Build the lab's Kubernetes supply chain from Go modules, as an air-gapped site would.

    build.py [--only COMPONENT ...] [--jobs N]
    build.py --only kwok      # the benchmark tool, built on demand only (tests/bench/fleet_api.py)

Versions come from artifacts/manifest.yml (one source of truth). Each component is a
small Go module under the cache (never in the repo) that requires the upstream module at
the pinned version; its binaries land in

    $AI_L1_CACHE/k8s/<component>/<version>/bin      (default AI_L1_CACHE=/var/cache/ai-l1)

next to recipe.sha256 (the recipe the binaries were built from) and timings.json. A
component whose recipe hash matches is not touched: a warm run does nothing. Archives
(CNI plugins, etcd) and the control-plane images (podman, localhost/ai-l1-k8s/*) are
derived from the binaries and cached the same way. The result, per manifest artifact, is
recorded in $AI_L1_CACHE/k8s/lab-build.json for lab/mirror/mirror.py to publish.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import gzip
import hashlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import urllib.request
from dataclasses import asdict, dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
from artifacts import artifacts as manifestlib  # noqa: E402
from lab import sources as sourcelib  # noqa: E402

HERE = Path(__file__).resolve().parent
CACHE = Path(os.environ.get("AI_L1_CACHE", "/var/cache/ai-l1"))
K8S_CACHE = CACHE / "k8s"
BUILD_RECORD = K8S_CACHE / "lab-build.json"
GOPROXY = os.environ.get("AI_L1_GOPROXY") or os.environ.get("GOPROXY") or "https://proxy.golang.org,direct"
# Bump when the build logic changes in a way the recipe data below does not show.
RECIPE_REVISION = 1
IMAGE_PREFIX = "localhost/ai-l1-k8s"
# Manifest artifacts (by name prefix) the lab does not build, and why. The lab's overlay has
# no checksum for them, so a lab rollout that asked for one would be refused by name.
NOT_BUILT = {
    "ascend-device-plugin-": "not obtainable here; the lab runs the stand-in tests/hardware/device_plugin",
    "ceph-csi-": "refused by the Go module proxy; the lab validates the objects roles/k8s_storage renders",
    "juicefs-": "refused by the Go module proxy; the lab validates the objects roles/k8s_storage renders",
    "minio-": "AGPL, excluded on these machines; roles/k8s_storage renders its Tenant only",
    # The charts are packed (lab/charts/build.py); the images behind them cannot be had here.
    "gpu-operator-image": "not obtainable here; the lab renders and validates the GPU Operator release",
    "k8s-mig-manager-image": "not obtainable here; the lab renders and validates the GPU Operator release",
    "dcgm-exporter-image": "not obtainable here; the lab renders and validates the GPU Operator release",
    "node-feature-discovery-image": "not obtainable here; the lab renders and validates the GPU Operator release",
    "hami-image": "HAMi needs real GPUs (its CUDA interception); the lab renders and validates the release",
    "hami-webhook-certgen-image": "HAMi needs real GPUs; the lab renders and validates the release",
    # Istio is not run here: the lab validates roles/istio_traffic's objects against istio-crds.
    "istio-base-chart": "Istio is not run in the lab; roles/istio_traffic's objects are validated against its CRDs",
    "istio-istiod-chart": "Istio is not run in the lab; roles/istio_traffic's objects are validated against its CRDs",
    "istio-pilot-image": "Istio is not run in the lab; roles/istio_traffic's objects are validated against its CRDs",
    "istio-proxyv2-image": "Istio is not run in the lab; roles/istio_traffic's objects are validated against its CRDs",
}
ARCH = "amd64"  # the lab builds for this machine only
# 2000-01-01: file and image timestamps, so rebuilds give the same bytes.
FIXED_MTIME = 946684800
DEBIAN_MIRROR = os.environ.get("AI_L1_DEBIAN_MIRROR", "http://deb.debian.org/debian")


def log(msg: str) -> None:
    print(f"k8s-build: {msg}", flush=True)


class BuildError(Exception):
    pass


def sha256_file(path: Path) -> str:
    return manifestlib.sha256_file(path)


def digest(obj: object) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True).encode()).hexdigest()


@contextlib.contextmanager
def locked(name: str):
    """Engineers and CI share this host: one build of a thing at a time."""
    lock_dir = CACHE / "locks"
    lock_dir.mkdir(parents=True, exist_ok=True)
    with open(lock_dir / f"{name}.lock", "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        yield


def run(cmd: list[str], *, cwd: Path | None = None, env: dict | None = None, logfile: Path | None = None) -> str:
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, check=False)
    if logfile:
        with open(logfile, "a") as fh:
            fh.write(f"$ {' '.join(cmd)}\n{proc.stdout}{proc.stderr}\n")
    if proc.returncode != 0:
        tail = "\n".join((proc.stderr or proc.stdout).strip().splitlines()[-25:])
        raise BuildError(f"{' '.join(cmd[:6])}{' ...' if len(cmd) > 6 else ''} exited {proc.returncode}:\n{tail}")
    return proc.stdout


# ---------------------------------------------------------------- Go components

def go_env() -> dict[str, str]:
    env = dict(os.environ)
    env.update({
        "GOMODCACHE": str(CACHE / "go" / "mod"),
        "GOCACHE": str(CACHE / "go" / "build"),
        "GOPROXY": GOPROXY,
        # Never fetch another toolchain: the Go on this machine builds everything, or the
        # build says which version the module wants.
        "GOTOOLCHAIN": "local",
        "GOFLAGS": "-trimpath -buildvcs=false",
        "CGO_ENABLED": "0",
        "GOOS": "linux",
        "GOARCH": ARCH,
    })
    return env


def go_version() -> str:
    return run(["go", "env", "GOVERSION"], env=go_env()).strip()


@dataclass
class GoRecipe:
    component: str
    version: str
    # module path -> version required by the build module
    require: dict[str, str]
    # binary name -> package path
    binaries: dict[str, str]
    ldflags: list[str] = field(default_factory=list)
    # The upstream module whose go.mod supplies `go`/`godebug` lines and local replaces.
    main_module: str = ""
    # Local (./staging/...) replaces of main_module are mapped to this version; "" keeps none.
    staging_version: str = ""
    # Files written into the build module (name -> content), e.g. a main package.
    files: dict[str, str] = field(default_factory=dict)
    # Test binary name -> package, compiled with `go test -c` (the e2e suite).
    test_binaries: dict[str, str] = field(default_factory=dict)
    # Go build tags (e.g. Prometheus without the cloud service discoveries).
    tags: list[str] = field(default_factory=list)
    # Modules the checksum database does not know (the proxy serves them): GONOSUMDB.
    nosumdb: list[str] = field(default_factory=list)
    # Files added to a copy of main_module the build uses instead (path -> content): generated
    # files a module zip leaves out, such as web assets that //go:embed wants.
    module_files: dict[str, str] = field(default_factory=dict)
    # Take main_module's versioned replaces (module => module version) as they are: a release
    # whose go.mod pins a dependency at a version the proxy cannot serve (v0.0.0) maps it there.
    upstream_replaces: bool = False

    @property
    def root(self) -> Path:
        return K8S_CACHE / self.component / self.version

    def key(self, gover: str) -> str:
        recipe = asdict(self)
        # Fields added later count only when set: older recipes keep their keys (and builds).
        for name in ("tags", "nosumdb", "module_files", "upstream_replaces"):
            if not recipe[name]:
                del recipe[name]
        return digest({"recipe": recipe, "go": gover, "rev": RECIPE_REVISION})


def module_info(mod: str, version: str, env: dict) -> dict:
    out = run(["go", "mod", "download", "-json", f"{mod}@{version}"], env=env)
    info = json.loads(out)
    if info.get("Error"):
        raise BuildError(f"{mod}@{version}: {info['Error']}")
    meta = json.loads(Path(info["Info"]).read_text())
    info["Time"] = meta.get("Time", "")
    info["Commit"] = (meta.get("Origin") or {}).get("Hash", "")
    return info


def go_mod_text(recipe: GoRecipe, upstream_gomod: str) -> str:
    """The build module's go.mod: upstream's language/godebug lines, requires and replaces.

    k8s.io/kubernetes points its staging modules (k8s.io/api, client-go, ...) at
    ./staging/src/... with `replace`; replaces of a dependency are ignored, so the build
    module maps each of them to the published staging version (v1.34.4 -> v0.34.4).
    """
    lines = ["// Generated by lab/k8s/build.py; not part of the repository.",
             f"module ai-l1.lab/build/{recipe.component}", ""]
    gover = re.search(r"^go\s+(\S+)", upstream_gomod, re.M)
    lines.append(f"go {gover.group(1) if gover else '1.24'}")
    lines += [m.group(0) for m in re.finditer(r"^godebug\s+.+$", upstream_gomod, re.M)]
    lines += ["", "require ("] + [f"\t{m} {v}" for m, v in sorted(recipe.require.items())] + [")"]
    if recipe.staging_version:
        local = re.findall(r"^\s*(\S+)\s+=>\s+\./\S+\s*$", upstream_gomod, re.M)
        if not local:
            raise BuildError(f"{recipe.main_module}: no local replaces found in its go.mod")
        lines += ["", "replace ("] + [f"\t{m} => {m} {recipe.staging_version}" for m in sorted(local)] + [")"]
    if recipe.upstream_replaces:
        versioned = [f"\t{m.group(1)} => {m.group(2)}" for m in upstream_replace_lines(upstream_gomod)]
        if not versioned:
            raise BuildError(f"{recipe.main_module}: no versioned replaces found in its go.mod")
        lines += ["", "replace ("] + versioned + [")"]
    return "\n".join(lines) + "\n"


def upstream_replace_lines(gomod: str) -> list[re.Match]:
    """`old [version] => new version` lines of a go.mod (in a replace block or on their own);
    local replaces (=> ./path) are left out."""
    body = "\n".join(re.findall(r"^replace\s*\(\n(.*?)^\)", gomod, re.M | re.S))
    body += "\n" + "\n".join(re.findall(r"^replace\s+([^(\s].*)$", gomod, re.M))
    return [m for m in re.finditer(r"^\s*(\S+(?:\s+v\S+)?)\s+=>\s+(\S+\s+v\S+)\s*$", body, re.M)]


def go_get(recipe: GoRecipe, src: Path, env: dict, logfile: Path) -> None:
    """`go get pkg@version` records exactly the go.sum lines these packages need."""
    pkgs = []
    for pkg in recipe.binaries.values():
        if pkg.startswith("."):  # the build module's own package (recipe.files)
            continue
        owner = max((m for m in recipe.require if pkg == m or pkg.startswith(m + "/")), key=len)
        pkgs.append(f"{pkg}@{recipe.require[owner]}")
    if pkgs:
        run(["nice", "-n", "15", "go", "get", *pkgs], cwd=src, env=env, logfile=logfile)
    if recipe.test_binaries:
        # -t: the go.sum lines of the test files' imports too.
        tests = [f"{pkg}@{recipe.require[recipe.main_module]}" for pkg in recipe.test_binaries.values()]
        run(["nice", "-n", "15", "go", "get", "-t", *tests], cwd=src, env=env, logfile=logfile)
    if recipe.files:
        # Our own sources: the requires are pinned in the recipe; tidy writes go.sum for them.
        run(["nice", "-n", "15", "go", "mod", "tidy"], cwd=src, env=env, logfile=logfile)


def build_go(recipe: GoRecipe, gover: str, jobs: int) -> dict:
    key = recipe.key(gover)
    root = recipe.root
    bindir, stamp = root / "bin", root / "recipe.sha256"
    outputs = [bindir / name for name in (*recipe.binaries, *recipe.test_binaries)]
    if stamp.exists() and stamp.read_text().strip() == key and all(p.exists() for p in outputs):
        return {"component": recipe.component, "cached": True}
    env = go_env()
    if recipe.nosumdb:
        env["GONOSUMDB"] = ",".join(recipe.nosumdb)
    tags = ["-tags", ",".join(recipe.tags)] if recipe.tags else []
    src, logfile = root / "src", root / "build.log"
    src.mkdir(parents=True, exist_ok=True)
    logfile.write_text("")
    t0 = time.monotonic()
    info = module_info(recipe.main_module, recipe.require[recipe.main_module], env)
    upstream_gomod = Path(info["GoMod"]).read_text()
    gomod = go_mod_text(recipe, upstream_gomod)
    if recipe.module_files:
        copy = src / "upstream"
        shutil.rmtree(copy, ignore_errors=True)
        shutil.copytree(info["Dir"], copy)
        for path in [copy, *copy.rglob("*")]:  # the module cache is read-only
            path.chmod(path.stat().st_mode | 0o200)
        for name, content in recipe.module_files.items():
            (copy / name).parent.mkdir(parents=True, exist_ok=True)
            (copy / name).write_text(content)
        gomod += f"\nreplace {recipe.main_module} => ./upstream\n"
    (src / "go.mod").write_text(gomod)
    (src / "go.sum").unlink(missing_ok=True)
    for name, content in recipe.files.items():
        (src / name).write_text(content)
    go_get(recipe, src, env, logfile)
    fetch_s = time.monotonic() - t0
    ldflags = " ".join(["-s", "-w", *[f.format(time=info["Time"], commit=info["Commit"]) for f in recipe.ldflags]])
    staging = root / "bin.new"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir()
    timings = {"fetch_s": round(fetch_s, 1)}
    for name, pkg in recipe.binaries.items():
        t1 = time.monotonic()
        log(f"{recipe.component} {recipe.version}: go build {name}")
        run(["nice", "-n", "15", "go", "build", "-p", str(jobs), "-o", str(staging / name), *tags,
             "-ldflags", ldflags, pkg], cwd=src, env=env, logfile=logfile)
        timings[name] = round(time.monotonic() - t1, 1)
        log(f"{recipe.component}: {name} built in {timings[name]}s")
    for name, pkg in recipe.test_binaries.items():
        t1 = time.monotonic()
        log(f"{recipe.component} {recipe.version}: go test -c {name}")
        run(["nice", "-n", "15", "go", "test", "-c", "-p", str(jobs), "-o", str(staging / name),
             "-ldflags", ldflags, pkg], cwd=src, env=env, logfile=logfile)
        timings[name] = round(time.monotonic() - t1, 1)
        log(f"{recipe.component}: {name} built in {timings[name]}s")
    shutil.rmtree(bindir, ignore_errors=True)
    staging.rename(bindir)
    timings["total_s"] = round(time.monotonic() - t0, 1)
    (root / "timings.json").write_text(json.dumps({"go": gover, **timings}, indent=2) + "\n")
    stamp.write_text(key + "\n")
    return {"component": recipe.component, "cached": False, **timings}


# ---------------------------------------------------------------- Go components from source archives

@dataclass
class ArchiveRecipe:
    """A Go program built from an upstream release archive (artifacts/sources.yml) with the
    release's own vendor/ tree, as its Makefile builds it: no module proxy involved."""
    component: str
    source: str  # name in artifacts/sources.yml
    # binary name -> package, relative to the archive's top folder (./cmd/...)
    binaries: dict[str, str]
    ldflags: list[str] = field(default_factory=list)
    cgo: bool = False
    # False: the release's go.mod and go.sum through the module proxy (checked by go.sum).
    vendored: bool = True
    # Files of the release kept beside the binaries (name -> path in the tree), for the images.
    keep: dict[str, str] = field(default_factory=dict)

    def key(self, gover: str, source: sourcelib.Source) -> str:
        return digest({"recipe": asdict(self), "sha256": source.sha256, "go": gover, "rev": RECIPE_REVISION})


def archive_root(recipe: ArchiveRecipe, source: sourcelib.Source) -> Path:
    return K8S_CACHE / recipe.component / source.version


def extract_release(archive: Path, dest: Path) -> None:
    """The archive's one top folder becomes dest (its members checked by tarfile's data filter)."""
    shutil.rmtree(dest, ignore_errors=True)
    unpack = dest.with_name(dest.name + ".unpack")
    shutil.rmtree(unpack, ignore_errors=True)
    unpack.mkdir(parents=True)
    with tarfile.open(archive) as tf:
        tf.extractall(unpack, filter="data")
    tops = list(unpack.iterdir())
    if len(tops) != 1 or not tops[0].is_dir():
        raise BuildError(f"{archive}: expected one top folder, found {sorted(p.name for p in tops)}")
    tops[0].rename(dest)
    unpack.rmdir()


def build_archive_go(recipe: ArchiveRecipe, gover: str, jobs: int) -> dict:
    try:
        source, archive = sourcelib.cached(recipe.source)
    except sourcelib.SourceError as exc:
        raise BuildError(str(exc)) from exc
    root = archive_root(recipe, source)
    key = recipe.key(gover, source)
    bindir, stamp = root / "bin", root / "recipe.sha256"
    if stamp.exists() and stamp.read_text().strip() == key and all((bindir / n).exists()
                                                                   for n in (*recipe.binaries, *recipe.keep)):
        return {"component": recipe.component, "cached": True}
    root.mkdir(parents=True, exist_ok=True)
    logfile = root / "build.log"
    logfile.write_text("")
    t0 = time.monotonic()
    src = root / "src"
    extract_release(archive, src)
    env = go_env()
    env["CGO_ENABLED"] = "1" if recipe.cgo else "0"
    if recipe.vendored:
        # The release's vendor/ tree only: a build that would need the network fails instead.
        env.update({"GOPROXY": "off", "GOFLAGS": env["GOFLAGS"] + " -mod=vendor"})
    else:
        env["GOFLAGS"] += " -mod=readonly"  # exactly the release's go.sum
    ldflags = " ".join(["-s", "-w", *[f.format(version=source.version, commit=source.commit) for f in recipe.ldflags]])
    staging = root / "bin.new"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir()
    timings = {"extract_s": round(time.monotonic() - t0, 1)}
    for name, pkg in recipe.binaries.items():
        t1 = time.monotonic()
        log(f"{recipe.component} {source.version}: go build {name} (from {archive.name})")
        run(["nice", "-n", "15", "go", "build", "-p", str(jobs), "-o", str(staging / name), "-ldflags", ldflags, pkg],
            cwd=src, env=env, logfile=logfile)
        timings[name] = round(time.monotonic() - t1, 1)
        log(f"{recipe.component}: {name} built in {timings[name]}s")
    for name, path in recipe.keep.items():
        if (src / path).is_dir():
            shutil.copytree(src / path, staging / name, symlinks=True)
        else:
            shutil.copyfile(src / path, staging / name)
    shutil.rmtree(bindir, ignore_errors=True)
    staging.rename(bindir)
    shutil.rmtree(src, ignore_errors=True)  # the archive stays in the source cache
    timings["total_s"] = round(time.monotonic() - t0, 1)
    (root / "timings.json").write_text(json.dumps({"go": gover, **timings}, indent=2) + "\n")
    stamp.write_text(key + "\n")
    return {"component": recipe.component, "cached": False, **timings}


# NVIDIA's device plugin (roles/k8s_device_plugins): cmd/nvidia-device-plugin and
# cmd/gpu-feature-discovery as its Makefile builds them (cgo: go-nvml loads libnvidia-ml.so.1 at run
# time through dlopen; the linker flags leave NVML's symbols to that library), imaged as upstream's
# Dockerfile does (one image for both): /usr/bin/nvidia-device-plugin, the entrypoint,
# /usr/bin/gpu-feature-discovery, the NVIDIA_* environment. Debian base: the binaries need glibc.
DEVICE_PLUGIN_INFO = "github.com/NVIDIA/k8s-device-plugin/internal/info"


def archive_bins(recipes: list[ArchiveRecipe]) -> dict[str, Path]:
    listed = sourcelib.load()
    return {n: archive_root(r, listed[r.source]) / "bin" / n for r in recipes for n in (*r.binaries, *r.keep)}


def same_release(manifest: manifestlib.Manifest, artifact: str, source: str, version: str | None = None) -> str:
    """The manifest's version of `artifact`, refused unless it is the source archive's release."""
    version = version or manifest.get(artifact).version
    have = sourcelib.load()[source].version
    if have.lstrip("v") != version.lstrip("v"):
        raise BuildError(f"{artifact} is {version} in artifacts/manifest.yml, the source archive {source} "
                         f"in artifacts/sources.yml is {have}: pin one release")
    return version


def device_plugin_recipes() -> list[ArchiveRecipe]:
    return [ArchiveRecipe("nvidia-device-plugin", "k8s-device-plugin",
                          {"nvidia-device-plugin": "./cmd/nvidia-device-plugin",
                           "gpu-feature-discovery": "./cmd/gpu-feature-discovery"},
                          ["'-extldflags=-Wl,--export-dynamic -Wl,--unresolved-symbols=ignore-in-object-files'",
                           f"-X {DEVICE_PLUGIN_INFO}.gitCommit={{commit}}",
                           f"-X {DEVICE_PLUGIN_INFO}.version={{version}}"],
                          cgo=True)]


def device_plugin_image_recipes(manifest: manifestlib.Manifest, bins: dict[str, Path], base: str) -> list[ImageRecipe]:
    version = same_release(manifest, "nvidia-device-plugin-image", "k8s-device-plugin")
    return [ImageRecipe("nvidia-device-plugin-image", "k8s-device-plugin", version,
                        {"/usr/bin/nvidia-device-plugin": bins["nvidia-device-plugin"],
                         "/usr/bin/gpu-feature-discovery": bins["gpu-feature-discovery"]}, ["nvidia-device-plugin"],
                        base=base, env={"NVIDIA_DISABLE_REQUIRE": "true", "NVIDIA_VISIBLE_DEVICES": "all",
                                        "NVIDIA_DRIVER_CAPABILITIES": "compute,utility"})]


# Volcano (roles/gpu_queues with gpu_queues_backend: volcano): the scheduler, controller manager and
# admission webhook as the release's Makefile builds them (CGO off, version stamps), from the release
# archive with its go.mod (every dependency is on the module proxy); imaged as its Dockerfiles do:
# /vc-<name> as entrypoint; the webhook image also carries the release's gen-admission-secret.sh and
# what it runs (openssl, kubectl), for the chart's admission-init Job. The chart: lab/charts/build.py.
VOLCANO_VERSION_PKG = "volcano.sh/volcano/pkg/version"
VOLCANO_COMPONENTS = ("scheduler", "controller-manager", "webhook-manager")


VOLCANO_ADMISSION_SCRIPT = "installer/dockerfile/webhook-manager/gen-admission-secret.sh"


def volcano_recipes() -> list[ArchiveRecipe]:
    ldflags = [f"-X {VOLCANO_VERSION_PKG}.GitSHA={{commit}}", f"-X {VOLCANO_VERSION_PKG}.Version={{version}}"]
    return [ArchiveRecipe("volcano", "volcano", {f"vc-{c}": f"./cmd/{c}" for c in VOLCANO_COMPONENTS}, ldflags,
                          vendored=False, keep={"gen-admission-secret.sh": VOLCANO_ADMISSION_SCRIPT})]


def volcano_image_recipes(manifest: manifestlib.Manifest, bins: dict[str, Path],
                          webhook_base: str) -> list[ImageRecipe]:
    recipes = []
    for c in VOLCANO_COMPONENTS:
        artifact = f"volcano-{c}-image"
        version = same_release(manifest, artifact, "volcano")
        files = {f"/vc-{c}": bins[f"vc-{c}"]}
        base = "scratch"
        links = {}
        if c == "webhook-manager":
            files.update({"/gen-admission-secret.sh": bins["gen-admission-secret.sh"],
                          "/usr/local/bin/kubectl": bins["kubectl"]})
            base = webhook_base
            # The script says #!/bin/sh but uses [[ and arrays: upstream's alpine sh (busybox ash)
            # takes them, Debian's dash does not; bash does.
            links = {"/usr/bin/sh": "bash"}  # /bin is usr/bin on Debian: a /bin entry would replace it
        recipes.append(ImageRecipe(artifact, f"vc-{c}", version, files, [f"/vc-{c}"], base=base, links=links))
    return recipes


def ensure_volcano_webhook_base() -> str:
    """Debian minbase with what the release's gen-admission-secret.sh runs (upstream: alpine)."""
    return ensure_debian_base("volcano-webhook-base", ["openssl", "ca-certificates"])


# Calico (roles/k8s_cni with k8s_cni_plugin: calico): calico-node, the CNI plugin and its installer,
# kube-controllers, from the release archive with its go.mod (every dependency is on the module
# proxy), as its Makefiles build them but with CGO off: felix then compiles its eBPF loader stub
# (the release's libbpf_stub.go), so the eBPF data plane is out and the iptables/nftables one in.
# No BGP daemon (bird) is built: the lab runs the VXLAN backend (calico_backend: vxlan), which
# needs none. Imaged as the release's Dockerfiles do, on Debian instead of UBI: calico-node with
# runit and the release's node/filesystem (start_runit, rc.local, the runit services), the CNI
# image with /opt/cni/bin/install as entrypoint, kube-controllers behind its restart wrapper. The
# release's manifests (calico.yaml: BGP; calico-vxlan.yaml: VXLAN) are kept for the mirror.
CALICO_BUILDINFO = "github.com/projectcalico/calico/pkg/buildinfo"
CALICO_NODE_BASE_PACKAGES = ["iptables", "ipset", "nftables", "iproute2", "conntrack", "kmod", "procps", "runit",
                             "net-tools", "iputils-ping", "findutils"]
CALICO_MANIFESTS = {"calico-manifest": "calico.yaml", "calico-vxlan-manifest": "calico-vxlan.yaml"}


def calico_recipes() -> list[ArchiveRecipe]:
    ldflags = [f"-X {CALICO_BUILDINFO}.Version={{version}}", f"-X {CALICO_BUILDINFO}.GitRevision={{commit}}"]
    return [ArchiveRecipe("calico", "calico",
                          {"calico-node": "./node/cmd/calico-node",
                           "calico-cni": "./cni-plugin/cmd/calico",
                           "calico-cni-install": "./cni-plugin/cmd/install",
                           "calico-kube-controllers": "./kube-controllers/cmd/kube-controllers",
                           "calico-check-status": "./kube-controllers/cmd/check-status",
                           "calico-wrapper": "./kube-controllers/cmd/wrapper"},
                          ldflags, vendored=False,
                          keep={"calico-node-filesystem": "node/filesystem",
                                **{f: f"manifests/{f}" for f in CALICO_MANIFESTS.values()}})]


def calico_image_recipes(manifest: manifestlib.Manifest, bins: dict[str, Path], node_base: str) -> list[ImageRecipe]:
    fs = bins["calico-node-filesystem"]
    node_files = {**tree_files("/etc", fs / "etc"), **tree_files("/usr/sbin", fs / "sbin"),
                  "/usr/bin/calico-node": bins["calico-node"]}
    return [
        ImageRecipe("calico-node-image", "calico-node", same_release(manifest, "calico-node-image", "calico"),
                    node_files, ["/usr/sbin/start_runit"], base=node_base, env={"SVDIR": "/etc/service/enabled"}),
        ImageRecipe("calico-cni-image", "calico-cni", same_release(manifest, "calico-cni-image", "calico"),
                    {"/opt/cni/bin/calico": bins["calico-cni"], "/opt/cni/bin/install": bins["calico-cni-install"]},
                    ["/opt/cni/bin/install"], links={"/opt/cni/bin/calico-ipam": "calico"}),
        ImageRecipe("calico-kube-controllers-image", "calico-kube-controllers",
                    same_release(manifest, "calico-kube-controllers-image", "calico"),
                    {"/usr/bin/kube-controllers": bins["calico-kube-controllers"],
                     "/usr/bin/check-status": bins["calico-check-status"],
                     "/usr/bin/wrapper": bins["calico-wrapper"]},
                    ["/usr/bin/wrapper", "/usr/bin/kube-controllers"], user="999",
                    # Its status file (the probes read /status/status.json) and profiles, as upstream's image.
                    owned_dirs={"/status": 999, "/profiles": 999}),
    ]


def calico_manifest_files(manifest: manifestlib.Manifest, bins: dict[str, Path]) -> dict[str, dict]:
    return {artifact: {"version": same_release(manifest, artifact, "calico"), "path": str(bins[f])}
            for artifact, f in CALICO_MANIFESTS.items()}


# Multus (thin plugin) and whereabouts (roles/k8s_multus): Multus from its release archive with the
# release's vendor/ tree, as its hack/build-go.sh builds it (CGO off, version stamps), imaged as its
# Dockerfile does (/thin_entrypoint, /install_multus, the plugin under /usr/src/multus-cni/bin) on
# Debian instead of distroless; whereabouts from its Go module (the proxy serves it), imaged as its
# Dockerfile does on Debian (its scripts run with /bin/sh and `source`: bash, as alpine's ash
# takes it). The release manifests: Multus' deployments/multus-daemonset.yml, whereabouts'
# doc/crds (DaemonSet and the two CRDs) from the module.
MULTUS_VERSION_PKG = "gopkg.in/k8snetworkplumbingwg/multus-cni.v4/pkg/multus"
WHEREABOUTS_MODULE = "github.com/k8snetworkplumbingwg/whereabouts"
WHEREABOUTS_MANIFESTS = {"whereabouts-manifest": "doc/crds/daemonset-install.yaml",
                         "whereabouts-ippools-crd": "doc/crds/whereabouts.cni.cncf.io_ippools.yaml",
                         "whereabouts-overlapping-crd":
                             "doc/crds/whereabouts.cni.cncf.io_overlappingrangeipreservations.yaml"}
WHEREABOUTS_SCRIPTS = ("install-cni.sh", "lib.sh", "token-watcher.sh")


def multus_recipes() -> list[ArchiveRecipe]:
    ldflags = [f"-X {MULTUS_VERSION_PKG}.version={{version}}", f"-X {MULTUS_VERSION_PKG}.commit={{commit}}",
               f"-X {MULTUS_VERSION_PKG}.releaseStatus=,released"]
    return [ArchiveRecipe("multus", "multus-cni",
                          {"multus": "./cmd/multus", "multus-install": "./cmd/install_multus",
                           "multus-thin-entrypoint": "./cmd/thin_entrypoint", "multus-passthru": "./cmd/passthru-cni"},
                          ldflags, keep={"multus-daemonset.yml": "deployments/multus-daemonset.yml"})]


def whereabouts_recipe(manifest: manifestlib.Manifest) -> GoRecipe:
    version = manifest.get("whereabouts-image").version
    pkg = f"{WHEREABOUTS_MODULE}/pkg/version"
    return GoRecipe("whereabouts", version, {WHEREABOUTS_MODULE: version},
                    {"whereabouts": f"{WHEREABOUTS_MODULE}/cmd",
                     "ip-control-loop": f"{WHEREABOUTS_MODULE}/cmd/controlloop"},
                    [f"-X {pkg}.Version={version}", f"-X {pkg}.ReleaseStatus=,released"],
                    main_module=WHEREABOUTS_MODULE)


def whereabouts_source(manifest: manifestlib.Manifest) -> Path:
    """The whereabouts module's files (its scripts and manifests), from the module cache."""
    return Path(module_info(WHEREABOUTS_MODULE, manifest.get("whereabouts-image").version, go_env())["Dir"])


def multus_image_recipes(manifest: manifestlib.Manifest, bins: dict[str, Path], base: str,
                         whereabouts_base: str, src: Path) -> list[ImageRecipe]:
    """Multus' image and whereabouts' (src: whereabouts_source)."""
    version = same_release(manifest, "multus-image", "multus-cni")
    whereabouts = manifest.get("whereabouts-image").version
    return [
        ImageRecipe("multus-image", "multus-cni", version,
                    {"/thin_entrypoint": bins["multus-thin-entrypoint"], "/install_multus": bins["multus-install"],
                     # install_multus --type thin copies both (hack/build-go.sh builds them into bin/)
                     "/usr/src/multus-cni/bin/multus": bins["multus"],
                     "/usr/src/multus-cni/bin/passthru": bins["multus-passthru"]}, ["/thin_entrypoint"], base=base),
        ImageRecipe("whereabouts-image", "whereabouts", whereabouts,
                    {"/whereabouts": bins["whereabouts"], "/ip-control-loop": bins["ip-control-loop"],
                     **{f"/{n}": src / "script" / n for n in WHEREABOUTS_SCRIPTS}},
                    ["/install-cni.sh"], base=whereabouts_base, links={"/usr/bin/sh": "bash"}),
    ]


def multus_manifest_files(manifest: manifestlib.Manifest, bins: dict[str, Path], src: Path) -> dict[str, dict]:
    whereabouts = manifest.get("whereabouts-image").version
    out = {"multus-manifest": {"version": same_release(manifest, "multus-manifest", "multus-cni"),
                               "path": str(bins["multus-daemonset.yml"])}}
    out.update({name: {"version": whereabouts, "path": str(src / rel)} for name, rel in WHEREABOUTS_MANIFESTS.items()})
    return out


# NVIDIA/Mellanox's RDMA shared device plugin (roles/k8s_multus, k8s_multus_rdma_resources): from its
# Go module as its Makefile builds it (CGO off, tag no_openssl), imaged as its Dockerfile does on Debian
# with the PCI ID database (alpine's hwdata-pci there). The release manifest: the module's
# deployment/k8s/base/daemonset.yaml.
RDMA_DP_MODULE = "github.com/Mellanox/k8s-rdma-shared-dev-plugin"


def rdma_device_plugin_recipe(manifest: manifestlib.Manifest) -> GoRecipe:
    version = manifest.get("rdma-shared-dev-plugin-image").version
    return GoRecipe("rdma-shared-dev-plugin", version, {RDMA_DP_MODULE: version},
                    {"k8s-rdma-shared-dp": f"{RDMA_DP_MODULE}/cmd/k8s-rdma-shared-dp"},
                    [f"-X main.version={version}"], main_module=RDMA_DP_MODULE, tags=["no_openssl"],
                    # its go.mod pins genproto and x/sys at v0.0.0 and replaces them
                    upstream_replaces=True)


def rdma_device_plugin_image_recipe(manifest: manifestlib.Manifest, bins: dict[str, Path], base: str) -> ImageRecipe:
    return ImageRecipe("rdma-shared-dev-plugin-image", "k8s-rdma-shared-dev-plugin",
                       manifest.get("rdma-shared-dev-plugin-image").version,
                       {"/bin/k8s-rdma-shared-dp": bins["k8s-rdma-shared-dp"]}, ["/bin/k8s-rdma-shared-dp"], base=base)


def rdma_device_plugin_manifest_file(manifest: manifestlib.Manifest) -> dict[str, dict]:
    version = manifest.get("rdma-shared-dev-plugin-image").version
    src = Path(module_info(RDMA_DP_MODULE, version, go_env())["Dir"])
    return {"rdma-shared-dev-plugin-manifest": {"version": version,
                                                "path": str(src / "deployment" / "k8s" / "base" / "daemonset.yaml")}}


# Resource definitions of add-ons the lab does not run, for validating the objects the roles apply
# (roles/istio_traffic, roles/karmada_propagation): Istio's from its API module (the proxy serves
# istio.io/api), Karmada's PropagationPolicy from the source cache (artifacts/sources.yml).
ISTIO_API_MODULE = "istio.io/api"


def addon_crd_files(manifest: manifestlib.Manifest) -> dict[str, dict]:
    istio = manifest.get("istio-crds").version
    istio_src = Path(module_info(ISTIO_API_MODULE, istio, go_env())["Dir"])
    karmada, karmada_path = sourcelib.cached("karmada-propagationpolicies-crd")
    return {"istio-crds": {"version": istio,
                           "path": str(istio_src / "kubernetes" / "customresourcedefinitions.gen.yaml")},
            "karmada-propagationpolicy-crd": {"version": karmada.version, "path": str(karmada_path)}}


# ---------------------------------------------------------------- recipes from the manifest

def versions(manifest: manifestlib.Manifest) -> dict[str, str]:
    get = manifest.get
    k8s = {get(n).version for n in ("kubeadm", "kubelet", "kubectl", "kube-apiserver-image",
                                    "kube-controller-manager-image", "kube-scheduler-image",
                                    "kube-proxy-image")}
    if len(k8s) != 1:
        raise BuildError(f"the manifest pins more than one Kubernetes version: {sorted(k8s)}")
    etcd = get("etcd").version
    etcd_tag = get("etcd-image").version
    if not etcd_tag.startswith(etcd.lstrip("v") + "-"):
        raise BuildError(f"etcd-image {etcd_tag} is not a build of etcd {etcd}")
    return {"kubernetes": k8s.pop(), "etcd": etcd, "etcd_tag": etcd_tag,
            "coredns": get("coredns-image").version, "pause": get("pause-image").version,
            "cni": get("cni-plugins").version}


def k8s_version_ldflags(k8s: str) -> list[str]:
    """hack/lib/version.sh sets both packages; kubeadm checks its own version against the
    cluster version it deploys, so these must be the real release values."""
    major, minor = k8s.lstrip("v").split(".")[:2]
    kver = []
    for pkg in ("k8s.io/client-go/pkg/version", "k8s.io/component-base/version"):
        kver += [f"-X {pkg}.gitVersion={k8s}", f"-X {pkg}.gitMajor={major}", f"-X {pkg}.gitMinor={minor}",
                 f"-X {pkg}.gitTreeState=clean", f"-X {pkg}.buildDate={{time}}",
                 f"-X {pkg}.gitCommit={{commit}}"]
    return kver


def go_recipes(v: dict[str, str]) -> list[GoRecipe]:
    k8s = v["kubernetes"]
    kver = k8s_version_ldflags(k8s)
    k8s_cmds = ["kubeadm", "kubelet", "kubectl", "kube-apiserver", "kube-controller-manager",
                "kube-scheduler", "kube-proxy"]
    etcd = v["etcd"]
    cni = v["cni"]
    # The release archive's plugins that the lab's pod network and attachments use (Multus' extra
    # interfaces: macvlan, ipvlan, host-device, tuning; static addresses).
    cni_plugins = {"bridge": "main/bridge", "host-local": "ipam/host-local", "loopback": "main/loopback",
                   "portmap": "meta/portmap", "macvlan": "main/macvlan", "ipvlan": "main/ipvlan",
                   "host-device": "main/host-device", "tuning": "meta/tuning", "static": "ipam/static"}
    return [
        GoRecipe("kubernetes", k8s, {"k8s.io/kubernetes": k8s},
                 {c: f"k8s.io/kubernetes/cmd/{c}" for c in k8s_cmds}, kver,
                 main_module="k8s.io/kubernetes", staging_version="v0." + k8s.split(".", 1)[1]),
        GoRecipe("etcd", etcd,
                 {"go.etcd.io/etcd/server/v3": etcd, "go.etcd.io/etcd/etcdctl/v3": etcd,
                  "go.etcd.io/etcd/etcdutl/v3": etcd},
                 {"etcd": "go.etcd.io/etcd/server/v3", "etcdctl": "go.etcd.io/etcd/etcdctl/v3",
                  "etcdutl": "go.etcd.io/etcd/etcdutl/v3"},
                 ["-X go.etcd.io/etcd/api/v3/version.GitSHA=module-build"],
                 main_module="go.etcd.io/etcd/server/v3"),
        GoRecipe("coredns", v["coredns"], {"github.com/coredns/coredns": v["coredns"]},
                 {"coredns": "github.com/coredns/coredns"},
                 ["-X github.com/coredns/coredns/coremain.GitCommit={commit}"],
                 main_module="github.com/coredns/coredns"),
        GoRecipe("cni-plugins", cni, {"github.com/containernetworking/plugins": cni},
                 {n: f"github.com/containernetworking/plugins/plugins/{p}" for n, p in cni_plugins.items()},
                 [f"-X github.com/containernetworking/plugins/pkg/utils/buildversion.BuildVersion={cni}"],
                 main_module="github.com/containernetworking/plugins"),
    ]


# The monitoring stack (roles/monitoring_k8s, roles/monitoring_npd): production images the
# manifest pins, built here from their Go modules as for Kubernetes.
def prometheus_module_version(release: str) -> str:
    """Prometheus 3.x is published as Go module v0.3MM.P: v3.14.0 is v0.314.0."""
    major, minor, patch = release.lstrip("v").split(".")
    return f"v0.{int(major) * 100 + int(minor)}.{patch}"


def prometheus_version_ldflags(version: str) -> list[str]:
    """What promu sets: the version the binaries report (/api/v1/status/buildinfo, --version)."""
    pkg = "github.com/prometheus/common/version"
    return [f"-X {pkg}.Version={version.lstrip('v')}", f"-X {pkg}.Revision={{commit}}", f"-X {pkg}.Branch=HEAD",
            f"-X {pkg}.BuildUser=ai-l1-lab", f"-X {pkg}.BuildDate={{time}}"]


MONITORING_COMPONENTS = ("prometheus-operator", "prometheus", "alertmanager", "node-exporter", "node-problem-detector")


def monitoring_recipes(manifest: manifestlib.Manifest) -> list[GoRecipe]:
    get = manifest.get
    operator = get("prometheus-operator-image").version
    if get("prometheus-config-reloader-image").version != operator:
        raise BuildError("prometheus-config-reloader-image and prometheus-operator-image are one release: "
                         "pin the same version")
    prometheus, alertmanager = get("prometheus-image").version, get("alertmanager-image").version
    node_exporter, npd = get("node-exporter-image").version, get("node-problem-detector-image").version
    po, prom, am = ("github.com/prometheus-operator/prometheus-operator", "github.com/prometheus/prometheus",
                    "github.com/prometheus/alertmanager")
    ne, npd_mod = "github.com/prometheus/node_exporter", "k8s.io/node-problem-detector"
    return [
        # The operator's module replaces its own pkg/apis and pkg/client with local paths; their
        # published modules carry the same version.
        GoRecipe("prometheus-operator", operator, {po: operator},
                 {"operator": f"{po}/cmd/operator",
                  "prometheus-config-reloader": f"{po}/cmd/prometheus-config-reloader"},
                 prometheus_version_ldflags(operator), main_module=po, staging_version=operator),
        # Only the Kubernetes service discovery (the operator's configs use nothing else): the
        # cloud SDKs of the others are most of Prometheus' build time.
        GoRecipe("prometheus", prometheus, {prom: prometheus_module_version(prometheus)},
                 {"prometheus": f"{prom}/cmd/prometheus"}, prometheus_version_ldflags(prometheus),
                 main_module=prom, tags=["remove_all_sd", "enable_kubernetes_sd"]),
        # The web UI's built assets are not in the module zip; the API (all the operator and the
        # tests use) does not need them: an empty UI is embedded.
        GoRecipe("alertmanager", alertmanager, {am: alertmanager}, {"alertmanager": f"{am}/cmd/alertmanager"},
                 prometheus_version_ldflags(alertmanager), main_module=am,
                 module_files={f"ui/app/dist/{ui}/index.html": "<!-- web UI not built (lab/k8s/build.py) -->\n"
                               for ui in ("elm", "mantine")}),
        GoRecipe("node-exporter", node_exporter, {ne: node_exporter}, {"node_exporter": ne},
                 prometheus_version_ldflags(node_exporter), main_module=ne),
        # sum.golang.org answers 404 for this version although the proxy serves it.
        GoRecipe("node-problem-detector", npd, {npd_mod: npd},
                 {"node-problem-detector": f"{npd_mod}/cmd/nodeproblemdetector"},
                 [f"-X {npd_mod}/pkg/version.version={npd}"], main_module=npd_mod, nosumdb=[npd_mod]),
    ]


def monitoring_image_recipes(manifest: manifestlib.Manifest, bins: dict[str, Path], base: str) -> list[ImageRecipe]:
    """Upstream's binary paths and users, so the chart's and the operator's defaults hold."""
    get = manifest.get

    def image(artifact: str, name: str, binary: str, path: str, **kw) -> ImageRecipe:
        return ImageRecipe(artifact, name, get(artifact).version, {path: bins[binary]}, [path], **kw)

    nobody = "65534:65534"
    return [
        image("prometheus-operator-image", "prometheus-operator", "operator", "/bin/operator", user=nobody),
        image("prometheus-config-reloader-image", "prometheus-config-reloader", "prometheus-config-reloader",
              "/bin/prometheus-config-reloader", user=nobody),
        image("prometheus-image", "prometheus", "prometheus", "/bin/prometheus", user=nobody),
        image("alertmanager-image", "alertmanager", "alertmanager", "/bin/alertmanager", user=nobody),
        image("node-exporter-image", "node-exporter", "node_exporter", "/bin/node_exporter", user=nobody),
        # Upstream's NPD image is Debian too: custom plugins need a shell and coreutils (the
        # project's GPU plugin runs the node's python3 through chroot, monitoring/npd).
        image("node-problem-detector-image", "node-problem-detector", "node-problem-detector",
              "/node-problem-detector", base=base),
    ]


# Team GPU queues (roles/gpu_queues): Kueue's manager, as its Makefile builds it (cmd/kueue,
# the version stamped into pkg/version), imaged as upstream's: the binary at /manager, user 65532.
def queue_recipes(manifest: manifestlib.Manifest) -> list[GoRecipe]:
    version = manifest.get("kueue-image").version
    pkg = "sigs.k8s.io/kueue/pkg/version"
    ldflags = [f"-X {pkg}.GitVersion={version}", f"-X {pkg}.GitCommit={{commit}}", f"-X {pkg}.BuildDate={{time}}"]
    return [GoRecipe("kueue", version, {"sigs.k8s.io/kueue": version},
                     {"kueue-manager": "sigs.k8s.io/kueue/cmd/kueue"}, ldflags, main_module="sigs.k8s.io/kueue")]


def queue_image_recipes(manifest: manifestlib.Manifest, bins: dict[str, Path]) -> list[ImageRecipe]:
    return [ImageRecipe("kueue-image", "kueue", manifest.get("kueue-image").version,
                        {"/manager": bins["kueue-manager"]}, ["/manager"], user="65532:65532")]


# The Stargz snapshotter (roles/stargz_snapshotter): the proxy does not serve upstream's `cmd`
# module (never tagged), so containerd-stargz-grpc's main is the lab's (lab/k8s/stargz/main.go) on
# the root module's packages at the manifest's version; published in the release archive's slot.
STARGZ_MODULE = "github.com/containerd/stargz-snapshotter"


def storage_recipes(manifest: manifestlib.Manifest) -> list[GoRecipe]:
    version = manifest.get("stargz-snapshotter").version
    return [GoRecipe("stargz-snapshotter", version,
                     {STARGZ_MODULE: version, "github.com/pelletier/go-toml": "v1.9.5",
                      "github.com/coreos/go-systemd/v22": "v22.7.0"},
                     {"containerd-stargz-grpc": "."}, [f"-X {STARGZ_MODULE}/version.Version={version}"],
                     main_module=STARGZ_MODULE, files={"main.go": (HERE / "stargz" / "main.go").read_text()})]


# Lab-only programs from tests/hardware (never production artifacts): built like the components
# above, imaged and pushed to the lab registry under ai-l1-lab/ (lab/mirror/mirror.py).
HARDWARE = REPO / "tests" / "hardware"


def lab_go_recipes(v: dict[str, str]) -> list[GoRecipe]:
    staging = "v0." + v["kubernetes"].split(".", 1)[1]
    plugin_src = HARDWARE / "device_plugin" / "main.go"
    return [
        # The stand-in for NVIDIA's device plugin (tests/hardware/device_plugin/README.md).
        GoRecipe("lab-device-plugin", "v0.1.0",
                 {"k8s.io/kubelet": staging, "google.golang.org/grpc": "v1.72.1"},
                 {"ai-l1-device-plugin": "."}, main_module="k8s.io/kubelet",
                 files={"main.go": plugin_src.read_text()}),
        # Converts lab images to eStargz in the lab registry (lab/mirror/mirror.py).
        GoRecipe("lab-estargz-convert", "v0.1.0",
                 {f"{STARGZ_MODULE}/estargz": "v0.19.1", "github.com/google/go-containerregistry": "v0.22.1"},
                 {"ai-l1-estargz-convert": "."}, main_module=f"{STARGZ_MODULE}/estargz",
                 files={"main.go": (HERE / "estargz" / "main.go").read_text()}),
    ]


def lab_image_recipes(lab_bins: dict[str, Path], base: str, python_base: str) -> list[ImageRecipe]:
    """Images the lab needs beside the manifest's: the device-plugin stand-ins (the NVIDIA one runs
    the host driver's nvidia-smi, so it needs glibc; Huawei's DaemonSet runs its binary through
    bash: Debian base), the workload image tests run, the dcgm-exporter stand-in (the lab's fake
    exporter of lab/packages/nvidia on Debian's python3) and that python3 image alone, for the
    Feishu relay (any python3 image does; Docker Hub's cannot be pulled here)."""
    tag = "v0.1.0"
    dcgm = REPO / "lab" / "packages" / "nvidia" / "files" / "dcgm-exporter"
    return [
        ImageRecipe("lab-dcgm-exporter", "lab/dcgm-exporter-standin", tag,
                    {"/usr/bin/dcgm-exporter": dcgm,
                     "/usr/lib/dcgm-exporter/fake_dcgm_exporter.py": HARDWARE / "dcgm" / "fake_dcgm_exporter.py"},
                    ["/usr/bin/dcgm-exporter"], base=python_base),
        ImageRecipe("lab-python", "lab/python3-debian", "bookworm", {}, ["/usr/bin/python3"], base=python_base),
        ImageRecipe("lab-device-plugin", "lab/nvidia-device-plugin-standin", tag,
                    {"/usr/local/bin/ai-l1-device-plugin": lab_bins["ai-l1-device-plugin"]},
                    ["/usr/local/bin/ai-l1-device-plugin"], base=base),
        # The same program in the slot of Huawei's Ascend device plugin, under its binary name.
        ImageRecipe("lab-ascend-device-plugin", "lab/ascend-device-plugin-standin", tag,
                    {"/usr/local/bin/device-plugin": lab_bins["ai-l1-device-plugin"]},
                    ["/usr/local/bin/device-plugin"], base=base),
        ImageRecipe("lab-workload", "lab/workload", tag,
                    {"/usr/local/bin/ai-l1-workload": HARDWARE / "workload" / "ai-l1-workload"},
                    ["/usr/local/bin/ai-l1-workload"], base=base),
    ]


def build_lab(v: dict[str, str], gover: str, jobs: int, base: str) -> tuple[list[dict], list]:
    recipes = lab_go_recipes(v)
    results = [build_go(r, gover, jobs) for r in recipes]
    bins = {n: r.root / "bin" / n for r in recipes for n in r.binaries}
    python_base = ensure_debian_base("python3-base", ["python3"])
    return results, [(r, build_image(r)) for r in lab_image_recipes(bins, base, python_base)]


# Benchmark-only tools (never artifacts, never published, not in the build record): built on demand
# only, by `build.py --only kwok` or by the benchmark that needs it (ensure_kwok), never by a plain
# build.sh run (`make lab`, `make test`). Pinned here, not in artifacts/manifest.yml: nothing a site
# installs. kwok (Kubernetes WithOut Kubelet) keeps fake Nodes Ready against the lab's real control
# plane for tests/bench/fleet_api.py, as its release build does (hack/releases.sh: cmd/kwok, the
# version in pkg/consts).
KWOK_MODULE = "sigs.k8s.io/kwok"
KWOK_VERSION = "v0.8.0"
# kwok v0.8.0 has no built-in stages: without a Node stage it manages nothing ("no stages found").
# These are its own files from the module (kustomize/stage/node), passed with --config: Ready once
# (node-initialize), then the heartbeat that goes with the Lease kwok renews (the default 40 s lease).
KWOK_NODE_STAGES = ("kustomize/stage/node/fast/node-initialize.yaml",
                    "kustomize/stage/node/heartbeat-with-lease/node-heartbeat-with-lease.yaml")
BENCH_COMPONENTS = ("kwok",)


def bench_go_recipes() -> list[GoRecipe]:
    return [GoRecipe("kwok", KWOK_VERSION, {KWOK_MODULE: KWOK_VERSION}, {"kwok": f"{KWOK_MODULE}/cmd/kwok"},
                     [f"-X {KWOK_MODULE}/pkg/consts.Version={KWOK_VERSION}"], main_module=KWOK_MODULE)]


def ensure_kwok(jobs: int = 2) -> dict:
    """The kwok binary, built first if it is not in the cache (minutes, cold; then nothing), and its
    Node stage files: {"binary": Path, "stages": [Path, ...], "cached": bool, ...timings}."""
    [recipe] = bench_go_recipes()
    if not shutil.which("go"):
        raise BuildError("missing tool: go (Go comes with the machine)")
    with locked("k8s-build"):  # the lock `build.py --only kwok` takes: one build of it at a time
        result = build_go(recipe, go_version(), jobs)
        src = Path(module_info(KWOK_MODULE, KWOK_VERSION, go_env())["Dir"])
    stages = [src / s for s in KWOK_NODE_STAGES]
    absent = [str(s) for s in stages if not s.is_file()]
    if absent:
        raise BuildError(f"kwok {KWOK_VERSION}: stage files not in the module: {', '.join(absent)}")
    return {**result, "binary": recipe.root / "bin" / "kwok", "stages": stages}


# ---------------------------------------------------------------- the remediation receiver

RECEIVER_UID = 65532
RECEIVER_PACKAGES = ["ansible-core", "ansible-runner", "kubernetes"]
RECEIVER_HOME = "/opt/ai-l1"
# What the receiver's isolation runs need of the repository (playbooks/day2/isolate.yml).
RECEIVER_PROJECT = ["playbooks/day2", "roles/node_drain", "collections/ansible_collections/ai_platform/l1"]
RECEIVER_ANSIBLE_CFG = f"""\
# The receiver image's Ansible configuration (lab/k8s/build.py): the project under {RECEIVER_HOME}/project.
[defaults]
collections_path = {RECEIVER_HOME}/project/collections
roles_path = {RECEIVER_HOME}/project/roles
interpreter_python = auto_silent
retry_files_enabled = false
host_key_checking = false
local_tmp = /tmp/.ansible-local
remote_tmp = /tmp/.ansible-remote
"""


def tree_files(dest: str, src: Path, bytecode: bool = False) -> dict[str, Path]:
    """Every file under src, at dest/<relative path>; bytecode caches only with `bytecode` (the
    ones receiver_python compiled; a checkout's own are whatever its Python left there)."""
    return {f"{dest}/{p.relative_to(src)}": p for p in sorted(src.rglob("*"))
            if p.is_file() and (bytecode or "__pycache__" not in p.parts)}


def python_site(name: str, packages: list[str]) -> Path:
    """`packages` at the lock's versions, installed for bookworm's python3 (this host's
    /usr/bin/python3 is the same release: the scripts' shebangs and the compiled extensions fit the
    image), byte-compiled with unchecked hashes (the image's files carry a fixed mtime, and its file
    system is read-only)."""
    py = run(["/usr/bin/python3", "-c", "import sys; print(sys.version.split()[0])"]).strip()
    lock = REPO / "requirements.txt"
    key = digest({"packages": packages, "lock": sha256_file(lock), "python": py, "rev": RECIPE_REVISION})
    root = K8S_CACHE / name / key[:16]
    if (root / ".complete").exists():
        return root
    t0 = time.monotonic()
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    run([sys.executable, "-m", "pip", "--python", "/usr/bin/python3", "install", "--quiet", "--no-compile",
         "--root-user-action=ignore", "--no-warn-script-location", "--target", str(root), "-c", str(lock),
         *packages])
    shutil.rmtree(root / "ansible_test", ignore_errors=True)
    run(["/usr/bin/python3", "-m", "compileall", "-q", "-j", "0", "--invalidation-mode", "unchecked-hash", str(root)])
    (root / ".complete").write_text(key + "\n")
    log(f"{name} packages in {time.monotonic() - t0:.0f}s")
    return root


def receiver_python() -> Path:
    """ansible-core, ansible-runner and the Kubernetes client for the receiver image."""
    return python_site("receiver-python", RECEIVER_PACKAGES)


def receiver_image_recipe(manifest: manifestlib.Manifest, base: str, site: Path, bundled: Path,
                          cfg: Path) -> ImageRecipe:
    """ai-l1-remediate with what its isolation runs need: the day2 package, ansible-core and
    ansible-runner with the Kubernetes client (`site`, from receiver_python), the isolate
    playbook and its role, this repository's collection and kubernetes.core (from `bundled`, the
    pinned `ansible` bundle's ansible_collections), and the image's ansible.cfg (`cfg`)."""
    python_dir = f"{RECEIVER_HOME}/python"
    files = {path: src for path, src in tree_files(python_dir, site, bytecode=True).items()
             if not path.endswith("/.complete")}
    files.update(tree_files(f"{python_dir}/ai_l1_day2", REPO / "day2" / "ai_l1_day2"))
    for part in RECEIVER_PROJECT:
        files.update(tree_files(f"{RECEIVER_HOME}/project/{part}", REPO / part))
    files.update(tree_files(f"{RECEIVER_HOME}/project/collections/ansible_collections/kubernetes/core",
                            bundled / "kubernetes" / "core"))
    files[f"{RECEIVER_HOME}/project/ansible.cfg"] = cfg
    return ImageRecipe(
        "remediation-receiver-image", "remediation-receiver", manifest.get("remediation-receiver-image").version,
        files, ["/usr/bin/python3", "-m", "ai_l1_day2.remediation"], base=base, user=f"{RECEIVER_UID}:{RECEIVER_UID}",
        cmd=["serve", "--config", "/etc/ai-l1-remediate/remediation.yml"],
        env={"PYTHONPATH": python_dir, "PATH": f"{python_dir}/bin:/usr/local/bin:/usr/bin:/bin",
             "ANSIBLE_CONFIG": f"{RECEIVER_HOME}/project/ansible.cfg", "AI_L1_PROJECT_DIR": f"{RECEIVER_HOME}/project",
             "HOME": "/tmp", "PYTHONDONTWRITEBYTECODE": "1"})


def build_receiver(manifest: manifestlib.Manifest) -> tuple[ImageRecipe, dict]:
    def add_user(rootfs: Path) -> None:
        with open(rootfs / "etc" / "passwd", "a") as fh:
            fh.write(f"ai-l1-remediate:x:{RECEIVER_UID}:{RECEIVER_UID}::/tmp:/usr/sbin/nologin\n")
        with open(rootfs / "etc" / "group", "a") as fh:
            fh.write(f"ai-l1-remediate:x:{RECEIVER_UID}:\n")

    base = ensure_debian_base("receiver-base", ["python3"], add_user, {"uid": RECEIVER_UID})
    import ansible_collections  # noqa: PLC0415 (the pinned `ansible` bundle of this venv)
    bundled = next(Path(p) for p in ansible_collections.__path__ if (Path(p) / "kubernetes" / "core").is_dir())
    cfg = K8S_CACHE / "receiver-ansible.cfg"
    if not cfg.exists() or cfg.read_text() != RECEIVER_ANSIBLE_CFG:
        cfg.write_text(RECEIVER_ANSIBLE_CFG)
    recipe = receiver_image_recipe(manifest, base, receiver_python(), bundled, cfg)
    return recipe, build_image(recipe)


# ---------------------------------------------------------------- the GPUQuota controller

GPUQUOTA_PACKAGES = ["kopf", "kubernetes"]


def gpuquota_image_recipe(manifest: manifestlib.Manifest, base: str, site: Path) -> ImageRecipe:
    """ai_l1_gpuquota (kopf and the Kubernetes client from `site`, gpuquota_python) with the one
    module of this repository's collection it imports (module_utils/gpu_queues.py: what a GPUQuota
    becomes), on Debian's python3, user 65532."""
    python_dir = "/opt/ai-l1/python"
    files = {path: src for path, src in tree_files(python_dir, site, bytecode=True).items()
             if not path.endswith("/.complete")}
    files.update(tree_files(f"{python_dir}/ai_l1_gpuquota", REPO / "day2" / "ai_l1_gpuquota"))
    utils = "collections/ansible_collections/ai_platform/l1/plugins/module_utils/gpu_queues.py"
    files[f"{python_dir}/{utils.split('/', 1)[1]}"] = REPO / utils
    return ImageRecipe("gpuquota-controller-image", "gpuquota-controller",
                       manifest.get("gpuquota-controller-image").version, files,
                       ["/usr/bin/python3", "-m", "ai_l1_gpuquota"], base=base, user="65532:65532",
                       # USER: kopf names itself by getpass.getuser(); uid 65532 has no passwd entry.
                       env={"PYTHONPATH": python_dir, "HOME": "/tmp", "PYTHONDONTWRITEBYTECODE": "1",
                            "USER": "gpuquota-controller"})


def build_gpuquota_controller(manifest: manifestlib.Manifest) -> tuple[ImageRecipe, dict]:
    base = ensure_debian_base("python3-base", ["python3"])
    recipe = gpuquota_image_recipe(manifest, base, python_site("gpuquota-python", GPUQUOTA_PACKAGES))
    return recipe, build_image(recipe)


# ---------------------------------------------------------------- pause (C, static)

def build_pause(v: dict[str, str], k8s_src: Path) -> dict:
    """kubernetes' own build/pause/linux/pause.c, compiled as its Makefile does."""
    version = v["pause"]
    root = K8S_CACHE / "pause" / version
    source = k8s_src / "build" / "pause" / "linux" / "pause.c"
    cmd = ["gcc", "-Os", "-Wall", "-Werror", "-static", f"-DVERSION=v{version}", "-o", "pause.new", str(source)]
    gcc = run(["gcc", "-dumpfullversion"]).strip()
    key = digest({"cmd": cmd[:-1], "src": sha256_file(source), "gcc": gcc, "rev": RECIPE_REVISION})
    out, stamp = root / "bin" / "pause", root / "recipe.sha256"
    if stamp.exists() and stamp.read_text().strip() == key and out.exists():
        return {"component": "pause", "cached": True}
    t0 = time.monotonic()
    out.parent.mkdir(parents=True, exist_ok=True)
    run(cmd, cwd=out.parent)
    run(["strip", "pause.new"], cwd=out.parent)
    (out.parent / "pause.new").rename(out)
    stamp.write_text(key + "\n")
    return {"component": "pause", "cached": False, "total_s": round(time.monotonic() - t0, 1)}


# ---------------------------------------------------------------- archives

def deterministic_tgz(dest: Path, members: list[tuple[str, Path]], mtime: int) -> None:
    """Same inputs, same bytes: the lab's checksums stay stable across rebuilds."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.GNU_FORMAT) as tf:
        for arcname, path in members:
            ti = tf.gettarinfo(str(path), arcname)
            ti.uid = ti.gid = 0
            ti.uname = ti.gname = "root"
            ti.mtime = mtime
            ti.mode = 0o755
            with open(path, "rb") as fh:
                tf.addfile(ti, fh)
    tmp = dest.with_name(dest.name + ".partial")
    with open(tmp, "wb") as out, gzip.GzipFile(filename="", mode="wb", fileobj=out, mtime=0) as gz:
        gz.write(raw.getvalue())
    tmp.replace(dest)


def build_archives(v: dict[str, str], recipes: dict[str, GoRecipe]) -> dict[str, Path]:
    out = {}
    cni = recipes["cni-plugins"]
    dest = cni.root / "dist" / f"cni-plugins-linux-{ARCH}-{cni.version}.tgz"
    out["cni-plugins"] = (dest, [(f"./{n}", cni.root / "bin" / n) for n in sorted(cni.binaries)])
    etcd = recipes["etcd"]
    top = f"etcd-{etcd.version}-linux-{ARCH}"
    dest = etcd.root / "dist" / f"{top}.tar.gz"
    out["etcd"] = (dest, [(f"{top}/{n}", etcd.root / "bin" / n) for n in ("etcd", "etcdctl", "etcdutl")])
    stargz = recipes["stargz-snapshotter"]
    dest = stargz.root / "dist" / f"stargz-snapshotter-{stargz.version}-linux-{ARCH}.tar.gz"
    out["stargz-snapshotter"] = (dest, [(n, stargz.root / "bin" / n) for n in sorted(stargz.binaries)])
    result = {}
    for name, (dest, members) in out.items():
        key = digest([(a, sha256_file(p)) for a, p in members])
        stamp = dest.with_name(dest.name + ".recipe")
        if not (dest.exists() and stamp.exists() and stamp.read_text().strip() == key):
            dest.parent.mkdir(parents=True, exist_ok=True)
            deterministic_tgz(dest, members, FIXED_MTIME)
            stamp.write_text(key + "\n")
            log(f"archive {dest.name} written")
        result[name] = dest
    return result


# ---------------------------------------------------------------- images

def podman(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run(["podman", *args], capture_output=True, text=True, check=False)
    if check and proc.returncode != 0:
        raise BuildError(f"podman {' '.join(args[:4])}: {proc.stderr.strip()[-2000:]}")
    return proc


def image_label(ref: str) -> str:
    proc = podman("image", "inspect", "--format", '{{ index .Labels "ai-l1.recipe" }}', ref, check=False)
    return proc.stdout.strip() if proc.returncode == 0 else ""


KUBE_PROXY_BASE_PACKAGES = ["iptables", "conntrack", "ipset", "kmod"]


def ensure_debian_base(name: str, packages: list[str], customize=None, extra: dict | None = None) -> str:
    """A Debian bookworm minbase image with `packages`, cached by recipe; `customize(rootfs)` runs
    before it is imported (`extra` goes into the key: whatever customize depends on)."""
    key = digest({"suite": "bookworm", "packages": packages, **(extra or {}), "rev": RECIPE_REVISION})[:12]
    ref = f"{IMAGE_PREFIX}/{name}:{key}"
    if podman("image", "exists", ref, check=False).returncode == 0:
        return ref
    t0 = time.monotonic()
    log(f"{name}: debootstrap bookworm minbase + {', '.join(packages)}")
    work = Path(tempfile.mkdtemp(prefix=f"ai-l1-{name}.", dir="/var/tmp"))
    rootfs = work / "rootfs"
    try:
        run(["nice", "-n", "15", "debootstrap", "--variant=minbase",
             "--include=" + ",".join(packages), "bookworm", str(rootfs), DEBIAN_MIRROR],
            logfile=work / "debootstrap.log")
        if customize:
            customize(rootfs)
        for junk in ("var/cache/apt", "var/lib/apt/lists", "usr/share/doc", "usr/share/man",
                     "usr/share/locale"):
            shutil.rmtree(rootfs / junk, ignore_errors=True)
            (rootfs / junk).mkdir(parents=True, exist_ok=True)
        for log_file in (rootfs / "var" / "log").rglob("*"):
            if log_file.is_file():
                log_file.unlink()
        tarball = work / "rootfs.tar"
        run(["tar", "--numeric-owner", "-C", str(rootfs), "-cf", str(tarball), "."])
        podman("import", "--change", 'CMD ["/bin/sh"]', str(tarball), ref)
    finally:
        for m in ("proc", "sys", "dev/pts", "dev"):
            subprocess.run(["umount", "-l", str(rootfs / m)], capture_output=True, check=False)
        shutil.rmtree(work, ignore_errors=True)
    log(f"{name} {ref} in {time.monotonic() - t0:.0f}s")
    return ref


def ensure_kube_proxy_base() -> str:
    """Debian minbase with iptables for kube-proxy (upstream uses distroless-iptables)."""
    script = (HERE / "iptables-wrapper").read_text()

    def wrap_iptables(rootfs: Path) -> None:
        wrapper = rootfs / "usr" / "sbin" / "iptables-wrapper"
        wrapper.write_text(script)
        wrapper.chmod(0o755)
        # Until the wrapper runs, every iptables* name goes through it (as upstream's image).
        for name in ("iptables", "iptables-save", "iptables-restore",
                     "ip6tables", "ip6tables-save", "ip6tables-restore"):
            link = rootfs / "usr" / "sbin" / name
            link.unlink(missing_ok=True)
            link.symlink_to("iptables-wrapper")

    return ensure_debian_base("kube-proxy-base", KUBE_PROXY_BASE_PACKAGES, wrap_iptables, {"wrapper": script})


@dataclass
class ImageRecipe:
    artifact: str
    name: str  # repository under IMAGE_PREFIX
    tag: str
    files: dict[str, Path]  # path in image -> file on host
    entrypoint: list[str]
    base: str = "scratch"
    user: str = ""
    cmd: list[str] = field(default_factory=list)
    links: dict[str, str] = field(default_factory=dict)  # path in image -> symlink target
    env: dict[str, str] = field(default_factory=dict)
    # Empty directories the image's user must own (path -> uid), such as a status directory.
    owned_dirs: dict[str, int] = field(default_factory=dict)

    @property
    def ref(self) -> str:
        return f"{IMAGE_PREFIX}/{self.name}:{self.tag}"


def rootfs_tar(dest: Path, recipe: ImageRecipe) -> None:
    """The image's files as one layer, with exact modes (COPY cannot make a 1777 /tmp)."""
    with tarfile.open(dest, "w", format=tarfile.GNU_FORMAT) as tf:
        def add_dir(name: str, mode: int, uid: int = 0) -> None:
            ti = tarfile.TarInfo(name)
            ti.type, ti.mode, ti.mtime, ti.uid, ti.gid = tarfile.DIRTYPE, mode, FIXED_MTIME, uid, uid
            tf.addfile(ti)
        parents = {Path(f.lstrip("/")).parent for f in (*recipe.files, *recipe.links)}
        for name in sorted({str(p) for q in parents for p in [q, *q.parents] if str(p) != "."}):
            add_dir(name, 0o755)
        if recipe.base == "scratch":
            add_dir("tmp", 0o1777)
        for name, uid in sorted(recipe.owned_dirs.items()):
            add_dir(name.lstrip("/"), 0o755, uid)
        for dest_path, src in sorted(recipe.files.items()):
            ti = tarfile.TarInfo(dest_path.lstrip("/"))
            ti.size, ti.mode, ti.mtime = src.stat().st_size, 0o755, FIXED_MTIME
            with open(src, "rb") as fh:
                tf.addfile(ti, fh)
        for dest_path, target in sorted(recipe.links.items()):
            ti = tarfile.TarInfo(dest_path.lstrip("/"))
            ti.type, ti.linkname, ti.mode, ti.mtime = tarfile.SYMTYPE, target, 0o777, FIXED_MTIME
            tf.addfile(ti)


def build_image(recipe: ImageRecipe) -> dict:
    lines = [f"FROM {recipe.base}", "ADD rootfs.tar /",
             "ENV PATH=/usr/local/bin:/usr/local/sbin:/usr/sbin:/usr/bin:/sbin:/bin"]
    lines += [f"ENV {k}={json.dumps(v)}" for k, v in sorted(recipe.env.items())]
    if recipe.user:
        lines.append(f"USER {recipe.user}")
    lines.append(f"ENTRYPOINT {json.dumps(recipe.entrypoint)}")
    if recipe.cmd:
        lines.append(f"CMD {json.dumps(recipe.cmd)}")
    containerfile = "\n".join(lines) + "\n"
    key = digest({"containerfile": containerfile, "base": recipe.base,
                  "files": {d: sha256_file(p) for d, p in recipe.files.items()}, "rev": RECIPE_REVISION,
                  **({"links": recipe.links} if recipe.links else {}),
                  **({"owned_dirs": recipe.owned_dirs} if recipe.owned_dirs else {})})
    if image_label(recipe.ref) == key:
        return {"image": recipe.ref, "cached": True}
    t0 = time.monotonic()
    old = podman("image", "inspect", "--format", "{{.Id}}", recipe.ref, check=False).stdout.strip()
    ctx = Path(tempfile.mkdtemp(prefix="ai-l1-img.", dir="/var/tmp"))
    try:
        rootfs_tar(ctx / "rootfs.tar", recipe)
        (ctx / "Containerfile").write_text(containerfile + f'LABEL ai-l1.recipe="{key}"\n')
        # A fixed timestamp makes the image (and so its digest) reproducible.
        podman("build", "--quiet", "--timestamp", str(FIXED_MTIME), "--format", "docker",
               "-f", str(ctx / "Containerfile"), "-t", recipe.ref, str(ctx))
    finally:
        shutil.rmtree(ctx, ignore_errors=True)
    if old:
        # Our superseded build only (by ID); never a prune, which would take others' images.
        podman("rmi", old, check=False)
    return {"image": recipe.ref, "cached": False, "total_s": round(time.monotonic() - t0, 1)}


def image_recipes(v: dict[str, str], bins: dict[str, Path], kube_proxy_base: str) -> list[ImageRecipe]:
    k8s = v["kubernetes"]
    recipes = [ImageRecipe(f"{c}-image", c, k8s, {f"/usr/local/bin/{c}": bins[c]}, [f"/usr/local/bin/{c}"])
               for c in ("kube-apiserver", "kube-controller-manager", "kube-scheduler")]
    recipes.append(ImageRecipe("kube-proxy-image", "kube-proxy", k8s, {"/usr/local/bin/kube-proxy": bins["kube-proxy"]},
                               ["/usr/local/bin/kube-proxy"], base=kube_proxy_base))
    recipes.append(ImageRecipe("etcd-image", "etcd", v["etcd_tag"],
                               {f"/usr/local/bin/{b}": bins[b] for b in ("etcd", "etcdctl", "etcdutl")},
                               ["/usr/local/bin/etcd"]))
    recipes.append(ImageRecipe("coredns-image", "coredns", v["coredns"], {"/coredns": bins["coredns"]}, ["/coredns"]))
    recipes.append(ImageRecipe("pause-image", "pause", v["pause"], {"/pause": bins["pause"]}, ["/pause"],
                               user="65535:65535"))
    return recipes


# ---------------------------------------------------------------- main

def check_tools() -> None:
    missing = [t for t in ("go", "gcc", "strip", "podman", "debootstrap", "tar") if not shutil.which(t)]
    if missing:
        raise BuildError(f"missing tools: {', '.join(missing)} (run `make bootstrap`; Go comes with the machine)")
    try:
        urllib.request.urlopen(GOPROXY.split(",")[0].rstrip("/") + "/k8s.io/kubernetes/@v/list", timeout=20)
    except OSError as exc:
        if not (K8S_CACHE / "lab-build.json").exists():
            log(f"warning: Go module proxy {GOPROXY} unreachable ({exc}); only cached modules can build")


def main(argv: list[str] | None = None) -> int:  # noqa: PLR0915 (the build's steps, in order)
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", action="append",
                        choices=["kubernetes", "etcd", "coredns", "cni-plugins", *MONITORING_COMPONENTS, "kueue",
                                 "stargz-snapshotter", "nvidia-device-plugin", "volcano", "calico", "multus",
                                 "whereabouts", "rdma-shared-dev-plugin",
                                 *BENCH_COMPONENTS],
                        help="build only these Go components (no images, no record); the benchmark tools "
                             f"({', '.join(BENCH_COMPONENTS)}) are built this way only")
    parser.add_argument("--jobs", type=int, default=int(os.environ.get("AI_L1_BUILD_JOBS", "2")))
    args = parser.parse_args(argv)
    t0 = time.monotonic()
    try:
        manifest = manifestlib.load()
        v = versions(manifest)
        check_tools()
        with locked("k8s-build"):
            gover = go_version()
            # The benchmark tools (bench_go_recipes) only with --only: never in a full build or its record.
            recipes = {r.component: r for r in [*go_recipes(v), *monitoring_recipes(manifest),
                                                 *queue_recipes(manifest), *storage_recipes(manifest),
                                                 whereabouts_recipe(manifest), rdma_device_plugin_recipe(manifest),
                                                 *(bench_go_recipes() if args.only else [])]}
            archive_recipes = [*device_plugin_recipes(), *volcano_recipes(), *calico_recipes(), *multus_recipes()]
            results = []
            for name, recipe in recipes.items():
                if args.only and name not in args.only:
                    continue
                results.append(build_go(recipe, gover, args.jobs))
            results += [build_archive_go(r, gover, args.jobs) for r in archive_recipes
                        if not args.only or r.component in args.only]
            if args.only:
                log(json.dumps(results))
                return 0
            k8s_src = Path(module_info("k8s.io/kubernetes", v["kubernetes"], go_env())["Dir"])
            results.append(build_pause(v, k8s_src))
            bins = {n: r.root / "bin" / n for r in recipes.values() for n in r.binaries}
            bins["pause"] = K8S_CACHE / "pause" / v["pause"] / "bin" / "pause"
            bins.update(archive_bins(archive_recipes))
            archives = build_archives(v, recipes)
            base = ensure_kube_proxy_base()
            images = [(r, build_image(r)) for r in image_recipes(v, bins, base)]
            lab_results, lab_images = build_lab(v, gover, args.jobs, base)
            results += lab_results
            images += lab_images
            images += [*((r, build_image(r)) for r in monitoring_image_recipes(manifest, bins, base)),
                       *((r, build_image(r)) for r in queue_image_recipes(manifest, bins)),
                       *((r, build_image(r)) for r in device_plugin_image_recipes(manifest, bins, base)),
                       *((r, build_image(r)) for r in volcano_image_recipes(manifest, bins,
                                                                             ensure_volcano_webhook_base())),
                       *((r, build_image(r)) for r in calico_image_recipes(
                           manifest, bins, ensure_debian_base("calico-node-base", CALICO_NODE_BASE_PACKAGES))),
                       *((r, build_image(r)) for r in multus_image_recipes(
                           manifest, bins, base, ensure_debian_base("whereabouts-base", ["bash"]),
                           whereabouts_source(manifest))),
                       *((r, build_image(r)) for r in [rdma_device_plugin_image_recipe(
                           manifest, bins, ensure_debian_base("rdma-dp-base", ["pci.ids"]))]),
                       build_receiver(manifest), build_gpuquota_controller(manifest)]
            record = {"arch": ARCH, "versions": v, "artifacts": {},
                      # Lab tooling run by lab/mirror/mirror.py (the eStargz converter).
                      "lab_tools": {n: str(r.root / "bin" / n) for r in lab_go_recipes(v) for n in r.binaries
                                    if n == "ai-l1-estargz-convert"},
                      "lab_images": {r.artifact: {"image": r.ref, "target": f"ai-l1-{r.name}:{r.tag}"}
                                     for r, _ in lab_images}}
            for name in ("kubeadm", "kubelet", "kubectl"):
                record["artifacts"][name] = {"version": v["kubernetes"], "path": str(bins[name])}
            for name, path in archives.items():
                record["artifacts"][name] = {"version": manifest.get(name).version, "path": str(path)}
            record["artifacts"].update(calico_manifest_files(manifest, bins))
            record["artifacts"].update(multus_manifest_files(manifest, bins, whereabouts_source(manifest)))
            record["artifacts"].update(rdma_device_plugin_manifest_file(manifest))
            record["artifacts"].update(addon_crd_files(manifest))
            for recipe, _ in images:
                if recipe.artifact not in record["lab_images"]:
                    record["artifacts"][recipe.artifact] = {"version": recipe.tag, "image": recipe.ref}
            record["not_built"] = {n: NOT_BUILT[p] for n in manifest.artifacts for p in NOT_BUILT
                                   if n.startswith(p)}
            # helm and the monitoring charts: built and recorded by lab/charts/build.py (same Go
            # caches; make lab-artifacts runs it before this).
            charts_record = CACHE / "charts" / "lab-build.json"
            if charts_record.exists():
                record["artifacts"].update(json.loads(charts_record.read_text())["artifacts"])
            # Artifacts with an upstream checksum (pure-Python wheels) are not built: the mirror
            # publishes the upstream file (lab/mirror/mirror.py, verified against that checksum).
            upstream = {n for n, a in manifest.artifacts.items() if ARCH in a.sha256}
            missing = set(manifest.artifacts) - set(record["artifacts"]) - set(record["not_built"]) - upstream
            if missing:
                raise BuildError(f"manifest artifacts with no lab recipe: {', '.join(sorted(missing))} "
                                 "(helm and charts: run python lab/charts/build.py first)")
            text = json.dumps(record, indent=2, sort_keys=True) + "\n"
            if not BUILD_RECORD.exists() or BUILD_RECORD.read_text() != text:
                BUILD_RECORD.write_text(text)
    except (BuildError, manifestlib.ManifestError, sourcelib.SourceError) as exc:
        log(f"FAILED: {exc}")
        return 1
    built = [r for r in results if not r.get("cached")] + [r for _, r in images if not r.get("cached")]
    for r in built:
        log(f"built {r.get('component') or r.get('image')}: " +
            ", ".join(f"{k}={val}" for k, val in r.items() if k not in ("component", "image", "cached")))
    log(f"{'nothing to do' if not built else f'{len(built)} built'}; {time.monotonic() - t0:.1f}s; "
        f"record {BUILD_RECORD}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
