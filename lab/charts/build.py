#!/usr/bin/env python3
"""Build helm and the monitoring chart tarballs for the lab from Go modules, as an air-gapped
site would mirror them.

    build.py [--jobs N]

No chart repository can be reached here, but the Go module proxy serves repositories as
module zips, and those hold the charts' sources:

- helm: helm.sh/helm/v3 at the version artifacts/manifest.yml pins, built with the shared Go
  caches of lab/k8s/build.py (same recipe/stamp logic), packed as get.helm.sh's
  helm-<v>-linux-<arch>.tar.gz (linux-<arch>/helm).
- kube-prometheus-stack: charts/kube-prometheus-stack of github.com/prometheus-community/
  helm-charts at a pinned pseudo-version whose Chart.yaml is the manifest's version; its
  dependencies (kube-state-metrics, prometheus-node-exporter, prometheus-windows-exporter from
  the same zip, grafana from github.com/grafana-community/helm-charts) are put under charts/
  as `helm dependency build` would, then `helm package` makes the tarball. Each dependency's
  version is compared with Chart.yaml and a difference is printed (the proxy holds one
  grafana-community revision; the released tarball upstream bundles the pinned one).
- kueue: charts/kueue of the sigs.k8s.io/kueue module at the manifest's kueue-image version (the
  chart Kueue releases from the same tree), packaged unchanged; its image is built by
  lab/k8s/build.py from the same module.
- volcano: installer/helm/chart/volcano of the Volcano release archive (artifacts/sources.yml, from
  the source cache), packaged unchanged; its images are built by lab/k8s/build.py from the same
  archive.
- gpu-operator, hami: the chart directories of the GPU Operator and HAMi tags, as their archives in
  the source cache (artifacts/sources.yml), packaged with the release's version (the GPU
  Operator's tree says v1.0.0-devel until NVIDIA's release sets it). Rendered and validated in the
  lab only: their images cannot be had here.
- dcgm-exporter: the module proxy refuses github.com/NVIDIA/dcgm-exporter ("403 This module
  version is not available"), so the lab packs the stand-in chart in
  tests/hardware/dcgm/chart (simulated vendor artifact, like the lab's fake driver
  packages) under the upstream chart's name and version. Production mirrors NVIDIA's.

Outputs are cached under $AI_L1_CACHE/charts (default /var/cache/ai-l1/charts) and recorded
in $AI_L1_CACHE/charts/lab-build.json, which lab/k8s/build.py merges into the lab's build
record for lab/mirror/mirror.py to publish. A warm run rebuilds nothing.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
K8S_BUILD = REPO / "lab" / "k8s" / "build.py"
STANDIN_DCGM_CHART = REPO / "tests" / "hardware" / "dcgm" / "chart"

_spec = importlib.util.spec_from_file_location("ai_l1_k8s_build", K8S_BUILD)
kb = importlib.util.module_from_spec(_spec)
sys.modules["ai_l1_k8s_build"] = kb  # dataclasses look their module up
_spec.loader.exec_module(kb)

CACHE = kb.CACHE
CHARTS_CACHE = CACHE / "charts"
RECORD = CHARTS_CACHE / "lab-build.json"
ARCH = kb.ARCH
# Repositories as Go modules (pseudo-versions the proxy serves). Bump together with the
# manifest's chart versions; the build fails when a Chart.yaml disagrees with the manifest.
PROMETHEUS_COMMUNITY = ("github.com/prometheus-community/helm-charts", "v0.0.0-20260828105119-ed5d7d9b5933")
GRAFANA_COMMUNITY = ("github.com/grafana-community/helm-charts", "v0.0.0-20260829030558-dbf9f4fb5fa1")
log = kb.log


def helm_recipe(version: str) -> kb.GoRecipe:
    """As helm's Makefile builds it: version stamps, and the Kubernetes version `helm template`
    assumes taken from the client-go it is built with (v0.37 -> 1.37; 1.20 without them)."""
    gomod = Path(kb.module_info("helm.sh/helm/v3", version, kb.go_env())["GoMod"]).read_text()
    found = re.search(r"^\s*k8s\.io/client-go\s+v(\d+)\.(\d+)\.", gomod, re.M)
    if not found:
        raise kb.BuildError(f"helm {version}: no k8s.io/client-go requirement in its go.mod")
    major, minor = int(found.group(1)) + 1, found.group(2)
    pkg = "helm.sh/helm/v3/internal/version"
    ldflags = [f"-X {pkg}.version={version}", f"-X {pkg}.gitCommit={{commit}}", f"-X {pkg}.gitTreeState=clean"]
    for kpkg in ("helm.sh/helm/v3/pkg/lint/rules", "helm.sh/helm/v3/pkg/chartutil"):
        ldflags += [f"-X {kpkg}.k8sVersionMajor={major}", f"-X {kpkg}.k8sVersionMinor={minor}"]
    return kb.GoRecipe("helm", version, {"helm.sh/helm/v3": version}, {"helm": "helm.sh/helm/v3/cmd/helm"},
                       ldflags, main_module="helm.sh/helm/v3")


def helm_archive(recipe: kb.GoRecipe) -> Path:
    binary = recipe.root / "bin" / "helm"
    dest = recipe.root / "dist" / f"helm-{recipe.version}-linux-{ARCH}.tar.gz"
    members = [(f"linux-{ARCH}/helm", binary)]
    key = kb.digest([(a, kb.sha256_file(p)) for a, p in members])
    stamp = dest.with_name(dest.name + ".recipe")
    if not (dest.exists() and stamp.exists() and stamp.read_text().strip() == key):
        dest.parent.mkdir(parents=True, exist_ok=True)
        kb.deterministic_tgz(dest, members, kb.FIXED_MTIME)
        stamp.write_text(key + "\n")
        log(f"archive {dest.name} written")
    return dest


def module_dir(mod: str, version: str) -> Path:
    return Path(kb.module_info(mod, version, kb.go_env())["Dir"])


def chart_meta(path: Path) -> dict:
    return yaml.safe_load((path / "Chart.yaml").read_text())


def helm_package(helm: Path, chart_dir: Path, version: str, out: Path) -> Path:
    """`helm package` into out/ (tgz named <name>-<version>.tgz); stamped by the source tree's hash."""
    files = sorted(p for p in chart_dir.rglob("*") if p.is_file())
    key = kb.digest({"files": [(str(p.relative_to(chart_dir)), kb.sha256_file(p)) for p in files],
                     "helm": kb.sha256_file(helm)})
    name = chart_meta(chart_dir)["name"]
    dest = out / f"{name}-{version}.tgz"
    stamp = dest.with_name(dest.name + ".recipe")
    if dest.exists() and stamp.exists() and stamp.read_text().strip() == key:
        return dest
    out.mkdir(parents=True, exist_ok=True)
    # helm writes the archive with the files' mtimes: pin them for stable checksums.
    for p in [chart_dir, *chart_dir.rglob("*")]:
        os.utime(p, (kb.FIXED_MTIME, kb.FIXED_MTIME), follow_symlinks=False)
    kb.run([str(helm), "package", str(chart_dir), "--destination", str(out)],
           env={**os.environ, "HELM_CACHE_HOME": str(out / ".helm"), "HELM_CONFIG_HOME": str(out / ".helm"),
                "HELM_DATA_HOME": str(out / ".helm")})
    stamp.write_text(key + "\n")
    log(f"chart {dest.name} packaged")
    return dest


def kube_prometheus_stack(helm: Path, version: str) -> Path:
    pc = module_dir(*PROMETHEUS_COMMUNITY)
    src = pc / "charts" / "kube-prometheus-stack"
    meta = chart_meta(src)
    if str(meta["version"]) != version:
        raise kb.BuildError(f"{PROMETHEUS_COMMUNITY[0]}@{PROMETHEUS_COMMUNITY[1]} holds kube-prometheus-stack "
                            f"{meta['version']}, the manifest pins {version}: bump PROMETHEUS_COMMUNITY")
    where = {"grafana": module_dir(*GRAFANA_COMMUNITY) / "charts" / "grafana"}
    work = Path(tempfile.mkdtemp(prefix="ai-l1-kps.", dir="/var/tmp"))
    try:
        chart = work / "kube-prometheus-stack"
        shutil.copytree(src, chart)
        for dep in meta.get("dependencies", []):
            if not dep.get("repository"):
                continue  # in-tree (crds)
            dsrc = where.get(dep["name"], pc / "charts" / dep["name"])
            if not (dsrc / "Chart.yaml").exists():
                raise kb.BuildError(f"dependency {dep['name']} not found at {dsrc}")
            have = str(chart_meta(dsrc)["version"])
            if have != str(dep["version"]) and not (dep["version"].endswith("*")
                                                   and have.startswith(dep["version"].rstrip("*"))):
                log(f"kube-prometheus-stack: dependency {dep['name']} {have} (Chart.yaml asks {dep['version']}; "
                    "the only revision the module proxy serves)")
            shutil.copytree(dsrc, chart / "charts" / dep["name"])
        return helm_package(helm, chart, version, CHARTS_CACHE / "kube-prometheus-stack" / version)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def kueue_chart(helm: Path, version: str, module_version: str) -> Path:
    src = module_dir("sigs.k8s.io/kueue", module_version) / "charts" / "kueue"
    have = str(chart_meta(src)["version"])
    if have != version:
        raise kb.BuildError(f"sigs.k8s.io/kueue@{module_version} holds chart kueue {have}, the manifest pins {version}")
    work = Path(tempfile.mkdtemp(prefix="ai-l1-kueue.", dir="/var/tmp"))
    try:
        shutil.copytree(src, work / "kueue")
        for p in [work / "kueue", *(work / "kueue").rglob("*")]:  # the module cache is read-only
            p.chmod(p.stat().st_mode | 0o200)
        return helm_package(helm, work / "kueue", version, CHARTS_CACHE / "kueue" / version)
    finally:
        shutil.rmtree(work, ignore_errors=True)


VOLCANO_CHART = "installer/helm/chart/volcano"


def volcano_chart(helm: Path, version: str) -> Path:
    try:
        _, archive = kb.sourcelib.cached("volcano")
    except kb.sourcelib.SourceError as exc:
        raise kb.BuildError(str(exc)) from exc
    work = Path(tempfile.mkdtemp(prefix="ai-l1-volcano.", dir="/var/tmp"))
    try:
        kb.extract_release(archive, work / "release")
        shutil.copytree(work / "release" / VOLCANO_CHART, work / "volcano")
        have = str(chart_meta(work / "volcano")["version"])
        if have != version:
            raise kb.BuildError(f"{archive.name} holds chart volcano {have}, the manifest pins {version}")
        return helm_package(helm, work / "volcano", version, CHARTS_CACHE / "volcano" / version)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def released_chart(helm: Path, source: str, chart: str, version: str, app_version: str | None = None) -> Path:
    """A chart as its project packs it for a release: the chart directory of the tag (the source
    cache's archive, artifacts/sources.yml) with the release's version (and image tag, appVersion)
    in Chart.yaml, packaged."""
    try:
        _, archive = kb.sourcelib.cached(source)
    except kb.sourcelib.SourceError as exc:
        raise kb.BuildError(str(exc)) from exc
    work = Path(tempfile.mkdtemp(prefix=f"ai-l1-{chart}.", dir="/var/tmp"))
    try:
        kb.extract_release(archive, work / chart)
        meta = chart_meta(work / chart)
        if meta.get("name") != chart:
            raise kb.BuildError(f"{archive.name} holds chart {meta.get('name')!r}, not {chart}")
        if str(meta["version"]) != version or (app_version and meta.get("appVersion") != app_version):
            meta["version"] = version
            if app_version:
                meta["appVersion"] = app_version
            (work / chart / "Chart.yaml").write_text(yaml.safe_dump(meta, sort_keys=False))
        return helm_package(helm, work / chart, version, CHARTS_CACHE / chart / version)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def dcgm_exporter_standin(helm: Path, version: str) -> Path:
    work = Path(tempfile.mkdtemp(prefix="ai-l1-dcgm.", dir="/var/tmp"))
    try:
        chart = work / "dcgm-exporter"
        shutil.copytree(STANDIN_DCGM_CHART, chart)
        meta = chart_meta(chart)
        meta["version"] = version
        (chart / "Chart.yaml").write_text(yaml.safe_dump(meta, sort_keys=False))
        return helm_package(helm, chart, version, CHARTS_CACHE / "dcgm-exporter" / version)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=int(os.environ.get("AI_L1_BUILD_JOBS", "2")))
    args = parser.parse_args(argv)
    t0 = time.monotonic()
    try:
        manifest = kb.manifestlib.load()
        versions = {n: manifest.get(n).version for n in ("helm", "kube-prometheus-stack-chart", "dcgm-exporter-chart",
                                                          "kueue-chart", "kueue-image", "volcano-chart",
                                                          "gpu-operator-chart", "gpu-operator-image", "hami-chart")}
        with kb.locked("charts-build"):
            recipe = helm_recipe(versions["helm"])
            result = kb.build_go(recipe, kb.go_version(), args.jobs)
            helm = recipe.root / "bin" / "helm"
            kps, dcgm = versions["kube-prometheus-stack-chart"], versions["dcgm-exporter-chart"]
            record = {"arch": ARCH, "helm_bin": str(helm), "artifacts": {
                "helm": {"version": versions["helm"], "path": str(helm_archive(recipe))},
                "kube-prometheus-stack-chart": {"version": kps, "path": str(kube_prometheus_stack(helm, kps))},
                "dcgm-exporter-chart": {"version": dcgm, "path": str(dcgm_exporter_standin(helm, dcgm))},
                "kueue-chart": {"version": versions["kueue-chart"],
                                "path": str(kueue_chart(helm, versions["kueue-chart"], versions["kueue-image"]))},
                "volcano-chart": {"version": versions["volcano-chart"],
                                  "path": str(volcano_chart(helm, versions["volcano-chart"]))},
                # NVIDIA's release sets the chart's version and appVersion (the operator's image tag).
                "gpu-operator-chart": {"version": versions["gpu-operator-chart"], "path": str(released_chart(
                    helm, "gpu-operator", "gpu-operator", versions["gpu-operator-chart"],
                    versions["gpu-operator-image"]))},
                "hami-chart": {"version": versions["hami-chart"], "path": str(released_chart(
                    helm, "hami", "hami", versions["hami-chart"]))},
            }}
            text = json.dumps(record, indent=2, sort_keys=True) + "\n"
            if not RECORD.exists() or RECORD.read_text() != text:
                RECORD.write_text(text)
    except (kb.BuildError, kb.manifestlib.ManifestError, KeyError) as exc:
        log(f"charts FAILED: {exc}")
        return 1
    if not result.get("cached"):
        log("built helm: " + ", ".join(f"{k}={v}" for k, v in result.items() if k not in ("component", "cached")))
    log(f"charts: {time.monotonic() - t0:.1f}s; record {RECORD}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
