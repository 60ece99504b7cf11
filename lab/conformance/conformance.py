#!/usr/bin/env python3
"""Upstream Kubernetes conformance tests against the lab cluster, offline.

    python lab/conformance/conformance.py build     # e2e.test, ginkgo, agnhost and the test images
    python lab/conformance/conformance.py run [--nodes N] [--focus REGEX] [--dry-run]

`build` compiles the end-to-end suite (`go test -c k8s.io/kubernetes/test/e2e`), the ginkgo
CLI (at the version k8s.io/kubernetes requires) and agnhost (k8s.io/kubernetes/test/images/
agnhost) from the same module and version the lab's Kubernetes is built from (lab/k8s/build.py,
cached the same way under $AI_L1_CACHE/k8s/conformance/), then builds the images the selected
tests pull and pushes them to the lab registry under the names the suite asks for:

  e2e-test-images/agnhost:2.56         agnhost on the e2e base
  e2e-test-images/busybox:1.37.0-1     Debian's static busybox alone, a link per applet (as upstream)
  e2e-test-images/jessie-dnsutils:1.7  the e2e base (dig, nslookup)
  e2e-test-images/httpd:2.4.38-4, :2.4.39-4   Debian's apache2 in the foreground
  e2e-test-images/nginx:1.14-4, :1.15-4       Debian's nginx-light in the foreground
  pause:3.10.1                          already in the lab registry (the cluster's own)

The e2e base is Debian bookworm minbase with the tools upstream's Alpine images carry (busybox
applets for the rest). The
images are stand-ins built from Debian packages, not the upstream images: a test that depends
on an exact upstream image byte (a version string inside httpd, say) can fail here for that
reason alone, and the run says which tests those are.

`run` points the suite at the lab registry (KUBE_TEST_REPO_LIST), fetches the admin kubeconfig
from the first control plane and runs the [Conformance] tests of the areas the issue names
(Pods, Services, DNS, ConfigMaps, Secrets, scheduling predicates, networking between nodes),
minus SKIPS below (each with its reason), with ginkgo in parallel. It prints the pass, fail and
skip counts and every failure, and writes the JUnit report under $AI_L1_CACHE/conformance/.
It takes longer than `make test` allows: `make conformance` runs it, by hand.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(REPO / "lab" / "k8s"))
sys.path.insert(0, str(REPO / "lab" / "mirror"))
import build as k8sbuild  # noqa: E402
import mirror  # noqa: E402

CACHE = k8sbuild.CACHE
REPORTS = CACHE / "conformance"
INVENTORY = REPO / "inventories" / "lab" / "hosts.yml"
LABCTL = [sys.executable, str(REPO / "lab" / "labctl.py"), "-i", str(INVENTORY)]
AGNHOST_TAG = "2.56"
E2E_REPO = "e2e-test-images"
# The areas of the issue: [Conformance] tests whose name matches one of these.
FOCUS = [
    r"\[sig-node\] Pods ", r"\[sig-node\] PodTemplates", r"\[sig-node\] ConfigMap", r"\[sig-node\] Secrets",
    r"\[sig-node\] Downward API", r"\[sig-node\] Container Runtime", r"\[sig-node\] Probing container",
    r"\[sig-node\] InitContainer", r"\[sig-node\] Kubelet ", r"\[sig-node\] Containers ",
    r"\[sig-storage\] ConfigMap", r"\[sig-storage\] Secrets", r"\[sig-storage\] Projected",
    r"\[sig-network\] Services", r"\[sig-network\] DNS", r"\[sig-network\] Networking",
    r"\[sig-network\] EndpointSlice", r"\[sig-network\] Service endpoints latency",
    r"\[sig-scheduling\] SchedulerPredicates", r"\[sig-scheduling\] LimitRange",
]
# Conformance tests of those areas the lab cannot run, and why. Everything else must pass.
SKIPS = {
    # `sh -c env` in the busybox image must print variables whose names are not shell identifiers
    # (data-1): upstream's busybox image does; the ash of Debian's busybox (1.35 here, 1.37 in
    # trixie, both tried) drops them. An image the lab cannot build, not a cluster fault.
    r"\[sig-node\] (ConfigMap|Secrets) should be consumable via the environment": "needs upstream's busybox",
    r"should be consumable as environment variable names": "needs upstream's busybox",
    # After a Service drops its TCP port, TCP to the ClusterIP's port 80 must stop answering. kube-proxy
    # (iptables mode) then leaves the packet alone and the node routes it to its gateway, the lab host,
    # whose network answers TCP on port 80 for every address (`echo > /dev/tcp/10.110.123.77/80`
    # connects from the host itself). A data centre's gateway drops it; the lab's cannot.
    r"should serve endpoints on same port and different protocols": "the lab host answers TCP port 80 for any address",
}
BASE_PACKAGES = ["bash", "curl", "ca-certificates", "bind9-dnsutils", "netcat-openbsd", "iproute2", "iperf",
                 "procps", "busybox-static", "apache2", "nginx-light", "wget"]


def log(msg: str) -> None:
    print(f"conformance: {msg}", flush=True)


def recipe(v: dict[str, str]) -> k8sbuild.GoRecipe:
    k8s = v["kubernetes"]
    env = k8sbuild.go_env()
    gomod = Path(k8sbuild.module_info("k8s.io/kubernetes", k8s, env)["GoMod"]).read_text()
    ginkgo = re.search(r"^\s*github\.com/onsi/ginkgo/v2 (\S+)", gomod, re.M)
    if not ginkgo:
        raise k8sbuild.BuildError("k8s.io/kubernetes does not require github.com/onsi/ginkgo/v2")
    return k8sbuild.GoRecipe(
        "conformance", k8s, {"k8s.io/kubernetes": k8s, "github.com/onsi/ginkgo/v2": ginkgo.group(1)},
        {"agnhost": "k8s.io/kubernetes/test/images/agnhost", "ginkgo": "github.com/onsi/ginkgo/v2/ginkgo"},
        k8sbuild.k8s_version_ldflags(k8s), main_module="k8s.io/kubernetes",
        staging_version="v0." + k8s.split(".", 1)[1], test_binaries={"e2e.test": "k8s.io/kubernetes/test/e2e"})


def e2e_base() -> str:
    def customize(rootfs: Path) -> None:
        # Upstream's images are Alpine: busybox applets, except where the image installs the real
        # tool (agnhost's netcat-openbsd, curl, bind-tools, iproute2, bash): those stay Debian's.
        subprocess.run(["chroot", str(rootfs), "/bin/busybox", "--install", "-s", "/usr/local/bin"], check=True)
        for link in (rootfs / "usr" / "local" / "bin").iterdir():
            # lexists: Debian's tools are often links to /etc/alternatives, absolute in the rootfs
            if link.is_symlink() and any(os.path.lexists(rootfs / d / link.name)
                                         for d in ("bin", "sbin", "usr/bin", "usr/sbin")):
                link.unlink()
        # agnhost's image defines these (security-context tests look them up).
        with open(rootfs / "etc" / "passwd", "a") as fh:
            fh.write("user-defined-in-image:x:1000:1000::/home/user-defined-in-image:/bin/sh\n")
        with open(rootfs / "etc" / "group", "a") as fh:
            fh.write("user-defined-in-image:x:1000:\ngroup-defined-in-image:x:50000:user-defined-in-image\n")
        for d in ("uploads", "var/log/apache2", "var/log/nginx", "run/apache2", "var/lock/apache2"):
            (rootfs / d).mkdir(parents=True, exist_ok=True)

    return k8sbuild.ensure_debian_base("e2e-base", BASE_PACKAGES, customize, {"customize": 3})


def busybox(base: str) -> tuple[dict[str, Path], dict[str, str]]:
    """Debian's static busybox from the e2e base with a link per applet, and the few /etc files
    the upstream busybox image has: a busybox image's /bin/sh must be busybox's (tests match its
    messages)."""
    out = REPORTS / "busybox" / base.rsplit(":", 1)[-1]
    binary = out / "busybox"
    if not binary.exists():
        out.mkdir(parents=True, exist_ok=True)
        cid = k8sbuild.podman("create", base, "/bin/true").stdout.strip()
        try:
            k8sbuild.podman("cp", f"{cid}:/bin/busybox", str(binary))
        finally:
            k8sbuild.podman("rm", cid, check=False)
        (out / "passwd").write_text("root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/home:/bin/false\n")
        (out / "group").write_text("root:x:0:\nnobody:x:65534:\n")
    applets = subprocess.run([str(binary), "--list-full"], capture_output=True, text=True, check=True).stdout.split()
    links = {f"/{path}": "/bin/busybox" for path in applets if path != "bin/busybox"}
    return {"/bin/busybox": binary, "/etc/passwd": out / "passwd", "/etc/group": out / "group"}, links


def image_recipes(agnhost: Path, porter: Path, base: str) -> dict[str, k8sbuild.ImageRecipe]:
    """Registry target -> image recipe."""
    ir = k8sbuild.ImageRecipe
    bb_files, bb_links = busybox(base)
    httpd = ["/usr/sbin/apache2ctl", "-D", "FOREGROUND"]
    nginx = ["/usr/sbin/nginx", "-g", "daemon off;"]
    return {
        f"{E2E_REPO}/agnhost:{AGNHOST_TAG}": ir(
            "e2e-agnhost", "e2e/agnhost", AGNHOST_TAG,
            # /agnhost-2 is a link upstream; tests run it by that name
            {"/agnhost": agnhost, "/agnhost-2": agnhost,
             **{f"/localhost.{ext}": porter / f"localhost.{ext}" for ext in ("crt", "key")}},
            ["/agnhost"], base=base, cmd=["pause"]),
        f"{E2E_REPO}/busybox:1.37.0-1": ir("e2e-busybox", "e2e/busybox", "1.37.0-1", bb_files, [], cmd=["sh"],
                                            links=bb_links),
        f"{E2E_REPO}/jessie-dnsutils:1.7": ir("e2e-dnsutils", "e2e/jessie-dnsutils", "1.7", {}, [], base=base,
                                               cmd=["sh"]),
        **{f"{E2E_REPO}/httpd:{tag}": ir(f"e2e-httpd-{tag}", "e2e/httpd", tag, {}, httpd, base=base)
           for tag in ("2.4.38-4", "2.4.39-4")},
        **{f"{E2E_REPO}/nginx:{tag}": ir(f"e2e-nginx-{tag}", "e2e/nginx", tag, {}, nginx, base=base)
           for tag in ("1.14-4", "1.15-4")},
    }


def cmd_build(_args) -> int:
    manifest = k8sbuild.manifestlib.load()
    v = k8sbuild.versions(manifest)
    k8sbuild.check_tools()
    with k8sbuild.locked("k8s-build"):
        r = recipe(v)
        result = k8sbuild.build_go(r, k8sbuild.go_version(), int(os.environ.get("AI_L1_BUILD_JOBS", "2")))
        log(f"binaries {'cached' if result['cached'] else 'built'} in {r.root / 'bin'}")
        base = e2e_base()
        porter = Path(k8sbuild.module_info("k8s.io/kubernetes", v["kubernetes"], k8sbuild.go_env())["Dir"])
        images = image_recipes(r.root / "bin" / "agnhost", porter / "test" / "images" / "agnhost" / "porter", base)
        state = json.loads(mirror.STATE.read_text()) if mirror.STATE.exists() else {}
        changed = False
        for target, image in images.items():
            k8sbuild.build_image(image)
            digest, pushed = mirror.publish_image(image.ref, [target], state)
            changed |= pushed
            log(f"{mirror.registry_addr()}/{target} {'pushed' if pushed else 'up to date'} ({digest[:19]})")
        mirror.STATE.write_text(json.dumps(state, indent=2, sort_keys=True) + "\n")
    if changed:
        forget_cached_images()
    return 0


def forget_cached_images() -> None:
    """A rebuilt image keeps its tag: nodes that pulled the old one (IfNotPresent) must drop it."""
    proc = subprocess.run([*LABCTL, "status", "--json"], capture_output=True, text=True, check=False, timeout=60)
    if proc.returncode != 0:
        return  # no lab up: nothing cached
    for node in json.loads(proc.stdout or "[]"):
        subprocess.run([*LABCTL, "ssh", node["host"],
                        f"ctr -n k8s.io images ls -q | grep '/{E2E_REPO}/' | xargs -r ctr -n k8s.io images rm"],
                       capture_output=True, text=True, check=False, timeout=120)


def repo_list(path: Path) -> Path:
    registry = mirror.registry_addr(mirror.HOST)
    path.write_text(json.dumps({
        "promoterE2eRegistry": f"{registry}/{E2E_REPO}",
        "gcRegistry": registry,
        "gcEtcdRegistry": registry,
        "dockerLibraryRegistry": f"{registry}/library",
        "invalidRegistry": "invalid.registry.k8s.io/invalid",
    }, indent=2) + "\n")
    return path


def summarize(junit: Path) -> dict:
    counts = {"passed": 0, "failed": 0, "skipped": 0}
    failures = []
    for case in ET.parse(junit).getroot().iter("testcase"):
        name = case.get("name", "")
        if "[Conformance]" not in name:
            continue
        if case.find("skipped") is not None:
            counts["skipped"] += 1
        elif case.find("failure") is not None or case.find("error") is not None:
            counts["failed"] += 1
            node = case.find("failure") if case.find("failure") is not None else case.find("error")
            failures.append({"test": name, "reason": (node.get("message") or node.text or "").strip()[:600]})
        else:
            counts["passed"] += 1
    return {**counts, "failures": failures}


def cmd_run(args) -> int:
    bindir = k8sbuild.K8S_CACHE / "conformance"
    versions = sorted(p for p in bindir.glob("*/bin/e2e.test"))
    if not versions:
        log("no e2e.test: run `python lab/conformance/conformance.py build` first")
        return 2
    bins = versions[-1].parent
    stamp = time.strftime("%Y%m%dT%H%M%S")
    out = REPORTS / stamp
    out.mkdir(parents=True, exist_ok=True)
    kubeconfig = out / "admin.conf"
    proc = subprocess.run([*LABCTL, "ssh", "cp1", "cat /etc/kubernetes/admin.conf"], capture_output=True,
                          text=True, check=False, timeout=60)
    if proc.returncode != 0 or "server:" not in proc.stdout:
        log(f"cannot read admin.conf from cp1 (is the lab up? make lab): {proc.stderr.strip()[-300:]}")
        return 2
    kubeconfig.write_text(proc.stdout)
    kubeconfig.chmod(0o600)
    focus = args.focus or FOCUS
    skip = [*SKIPS, r"\[Disruptive\]", r"\[Feature:", r"\[Flaky\]"]
    # ginkgo lists (dry-run) in serial only; the report name is relative to --output-dir.
    procs = 1 if args.dry_run else args.nodes
    cmd = [str(bins / "ginkgo"), f"--procs={procs}", "--label-filter=Conformance", "--timeout=3h",
           "--no-color", "--junit-report=junit.xml", "--output-dir", str(out),
           *(f"--focus={f}" for f in focus), *(f"--skip={s}" for s in skip)]
    if args.dry_run:
        cmd.append("--dry-run")
    cmd += [str(bins / "e2e.test"), "--", f"--kubeconfig={kubeconfig}", "--provider=skeleton",
            f"--report-dir={out}", "--e2e-verify-service-account=false"]
    env = {**os.environ, "KUBE_TEST_REPO_LIST": str(repo_list(out / "repo-list.yaml"))}
    log(f"{' '.join(cmd)}")
    t0 = time.monotonic()
    with open(out / "ginkgo.log", "w") as fh:
        rc = subprocess.run(cmd, env=env, stdout=fh, stderr=subprocess.STDOUT, check=False).returncode
    took = time.monotonic() - t0
    if not (out / "junit.xml").exists():
        log(f"ginkgo exited {rc} without a report; see {out / 'ginkgo.log'}")
        return 2
    summary = {**summarize(out / "junit.xml"), "seconds": round(took), "report": str(out), "exit": rc,
               "skipped_on_purpose": SKIPS}
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    print(json.dumps(summary, indent=2))
    log(f"{summary['passed']} passed, {summary['failed']} failed, {summary['skipped']} skipped in {took / 60:.1f} min")
    return 0 if summary["failed"] == 0 else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="cmd", required=True)
    sub.add_parser("build", help="build e2e.test, ginkgo, agnhost and the test images; push them")
    run = sub.add_parser("run", help="run the conformance tests against the lab")
    run.add_argument("--nodes", type=int, default=3, help="ginkgo parallel processes")
    run.add_argument("--focus", action="append", help="replace the default focus (repeatable)")
    run.add_argument("--dry-run", action="store_true", help="list the tests that would run")
    args = parser.parse_args(argv)
    if not shutil.which("podman"):
        log("podman is required (make bootstrap)")
        return 2
    try:
        return {"build": cmd_build, "run": cmd_run}[args.cmd](args)
    except (k8sbuild.BuildError, mirror.MirrorError) as exc:
        log(f"error: {exc}")
        return 2


if __name__ == "__main__":
    sys.exit(main())
