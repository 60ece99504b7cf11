"""The lab's build recipes (lab/k8s/build.py) and mirror publishing (lab/mirror/mirror.py),
without building anything: go.mod generation, version consistency, cache keys, archives."""

from __future__ import annotations

import hashlib
import importlib.util
import socket
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
from artifacts import artifacts as lib  # noqa: E402


def load_module(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


build = load_module("lab_k8s_build", REPO / "lab" / "k8s" / "build.py")
mirror = load_module("lab_mirror", REPO / "lab" / "mirror" / "mirror.py")

K8S_GOMOD = """\
module k8s.io/kubernetes

go 1.24.0

godebug default=go1.24

require (
\tgithub.com/blang/semver/v4 v4.0.0
\tk8s.io/api v0.0.0
\tk8s.io/client-go v0.0.0
)

replace (
\tk8s.io/api => ./staging/src/k8s.io/api
\tk8s.io/client-go => ./staging/src/k8s.io/client-go
)
"""


def k8s_recipe(version: str = "v1.34.4"):
    versions = build.versions(lib.load())
    versions["kubernetes"] = version
    return next(r for r in build.go_recipes(versions) if r.component == "kubernetes")


def test_staging_modules_are_replaced_by_their_published_versions():
    text = build.go_mod_text(k8s_recipe(), K8S_GOMOD)
    assert "\tk8s.io/api => k8s.io/api v0.34.4" in text
    assert "\tk8s.io/client-go => k8s.io/client-go v0.34.4" in text
    assert "\tk8s.io/kubernetes v1.34.4" in text
    # Upstream's language version and GODEBUG defaults carry over: same runtime behaviour.
    assert "\ngo 1.24.0\n" in text
    assert "\ngodebug default=go1.24\n" in text
    assert "./staging" not in text


def test_a_module_without_staging_replaces_is_an_error():
    with pytest.raises(build.BuildError, match="no local replaces"):
        build.go_mod_text(k8s_recipe(), "module k8s.io/kubernetes\n\ngo 1.24\n")


RDMA_DP_GOMOD = """module github.com/Mellanox/k8s-rdma-shared-dev-plugin

go 1.23

require google.golang.org/genproto v0.0.0 // indirect

replace (
	github.com/gogo/protobuf => github.com/gogo/protobuf v1.3.2
	google.golang.org/genproto v0.0.0 => github.com/googleapis/go-genproto v0.0.0-20200117163144-32f20d992d24
	example.com/local => ./local
)

replace golang.org/x/sys v0.0.0 => github.com/golang/sys v0.0.0-20190813064441-fde4db37ae7a
"""


def test_upstream_versioned_replaces_carry_over_and_local_ones_do_not():
    recipe = build.GoRecipe("rdma", "v1.5.3", {"github.com/Mellanox/k8s-rdma-shared-dev-plugin": "v1.5.3"}, {},
                            main_module="github.com/Mellanox/k8s-rdma-shared-dev-plugin", upstream_replaces=True)
    text = build.go_mod_text(recipe, RDMA_DP_GOMOD)
    assert ("\tgoogle.golang.org/genproto v0.0.0 => github.com/googleapis/go-genproto "
            "v0.0.0-20200117163144-32f20d992d24") in text
    assert "\tgithub.com/gogo/protobuf => github.com/gogo/protobuf v1.3.2" in text
    assert "\tgolang.org/x/sys v0.0.0 => github.com/golang/sys v0.0.0-20190813064441-fde4db37ae7a" in text
    assert "./local" not in text
    # Without the flag a dependency's replaces stay out (the default for every other recipe).
    recipe.upstream_replaces = False
    assert "replace" not in build.go_mod_text(recipe, RDMA_DP_GOMOD)
    with pytest.raises(build.BuildError, match="no versioned replaces"):
        build.go_mod_text(build.GoRecipe("x", "v1", {"m": "v1"}, {}, main_module="m", upstream_replaces=True),
                          "module m\n\ngo 1.24\n")


def test_kubernetes_version_ldflags_match_hack_lib_version():
    recipe = k8s_recipe("v1.34.4")
    flags = " ".join(recipe.ldflags)
    for pkg in ("k8s.io/client-go/pkg/version", "k8s.io/component-base/version"):
        assert f"-X {pkg}.gitVersion=v1.34.4" in flags
        assert f"-X {pkg}.gitMajor=1" in flags
        assert f"-X {pkg}.gitMinor=34" in flags
        assert f"-X {pkg}.gitTreeState=clean" in flags
        assert f"-X {pkg}.buildDate={{time}}" in flags
    assert set(recipe.binaries) == {"kubeadm", "kubelet", "kubectl", "kube-apiserver",
                                    "kube-controller-manager", "kube-scheduler", "kube-proxy"}


def test_recipe_key_changes_with_version_and_go():
    a, b = k8s_recipe("v1.34.4"), k8s_recipe("v1.34.3")
    assert a.key("go1.26.8") != b.key("go1.26.8")
    assert a.key("go1.26.8") != a.key("go1.26.9")
    assert a.key("go1.26.8") == k8s_recipe("v1.34.4").key("go1.26.8")


def test_versions_refuse_two_kubernetes_versions():
    manifest = lib.load()
    manifest.get("kubelet").version = "v1.34.3"
    with pytest.raises(build.BuildError, match="more than one Kubernetes version"):
        build.versions(manifest)


def test_versions_refuse_an_etcd_image_from_another_etcd():
    manifest = lib.load()
    manifest.get("etcd-image").version = "3.5.24-0"
    with pytest.raises(build.BuildError, match="etcd-image 3.5.24-0 is not a build of etcd v3.6.5"):
        build.versions(manifest)


def test_every_manifest_image_has_a_lab_recipe(tmp_path):
    manifest = lib.load()
    v = build.versions(manifest)
    bins = {n: Path("/x") for n in ("kube-apiserver", "kube-controller-manager", "kube-scheduler",
                                    "kube-proxy", "etcd", "etcdctl", "etcdutl", "coredns", "pause")}
    recipes = {r.artifact: r for r in build.image_recipes(v, bins, "base")}
    monitoring_bins = {n: Path("/x") for r in build.monitoring_recipes(manifest) for n in r.binaries}
    recipes.update({r.artifact: r for r in build.monitoring_image_recipes(manifest, monitoring_bins, "base")})
    receiver = build.receiver_image_recipe(manifest, "base", tmp_path, tmp_path, tmp_path / "ansible.cfg")
    recipes[receiver.artifact] = receiver
    queue_bins = {n: Path("/x") for r in build.queue_recipes(manifest) for n in r.binaries}
    recipes.update({r.artifact: r for r in build.queue_image_recipes(manifest, queue_bins)})
    controller = build.gpuquota_image_recipe(manifest, "base", tmp_path)
    recipes[controller.artifact] = controller
    plugin_bins = {n: Path("/x") for r in build.device_plugin_recipes() for n in r.binaries}
    recipes.update({r.artifact: r for r in build.device_plugin_image_recipes(manifest, plugin_bins, "base")})
    volcano_bins = {n: Path("/x") for n in ("vc-scheduler", "vc-controller-manager", "vc-webhook-manager",
                                            "gen-admission-secret.sh", "kubectl")}
    recipes.update({r.artifact: r for r in build.volcano_image_recipes(manifest, volcano_bins, "base")})
    calico_bins = {n: tmp_path for r in build.calico_recipes() for n in (*r.binaries, *r.keep)}
    recipes.update({r.artifact: r for r in build.calico_image_recipes(manifest, calico_bins, "base")})
    multus_bins = {n: Path("/x") for r in build.multus_recipes() for n in r.binaries}
    multus_bins.update({n: Path("/x") for n in build.whereabouts_recipe(manifest).binaries})
    recipes.update({r.artifact: r for r in build.multus_image_recipes(manifest, multus_bins, "base", "bash-base",
                                                                      tmp_path)})
    rdma_bins = {n: Path("/x") for n in build.rdma_device_plugin_recipe(manifest).binaries}
    rdma = build.rdma_device_plugin_image_recipe(manifest, rdma_bins, "base")
    recipes[rdma.artifact] = rdma
    images = {a.name: a for a in manifest.artifacts.values()
              if a.is_image and not any(a.name.startswith(p) for p in build.NOT_BUILT)}
    assert set(recipes) == set(images)
    for name, recipe in recipes.items():
        # Tagged as `kubeadm config images list` names them (or the charts do), under the local prefix.
        bases = {"registry_k8s_io": "", "quay_io": "", "ai_platform": "", "nvcr_io": "", "docker_io": "",
                 "ghcr_io": ""}
        upstream = lib.render(images[name].template, {**bases, "version": images[name].version})
        assert recipe.ref.endswith(upstream.split("/")[-1]), (recipe.ref, upstream)
        assert recipe.tag == images[name].version


def test_archives_are_byte_for_byte_reproducible(tmp_path):
    binary = tmp_path / "bridge"
    binary.write_bytes(b"\x7fELF fake")
    one, two = tmp_path / "one.tgz", tmp_path / "two.tgz"
    build.deterministic_tgz(one, [("./bridge", binary)], build.FIXED_MTIME)
    binary.touch()  # a new mtime on the input must not change the archive
    build.deterministic_tgz(two, [("./bridge", binary)], build.FIXED_MTIME)
    assert one.read_bytes() == two.read_bytes()
    with tarfile.open(one) as tf:
        [member] = tf.getmembers()
        assert (member.name, member.mode, member.uid, member.mtime) == ("./bridge", 0o755, 0, build.FIXED_MTIME)


def test_publish_file_places_the_file_at_its_upstream_path(tmp_path, monkeypatch):
    monkeypatch.setattr(mirror, "FILES", tmp_path / "www")
    src = tmp_path / "kubeadm"
    src.write_bytes(b"kubeadm")
    rel = "dl.k8s.io/release/v1.34.4/bin/linux/amd64/kubeadm"
    sha, changed = mirror.publish_file(src, rel)
    assert changed and sha == hashlib.sha256(b"kubeadm").hexdigest()
    assert (tmp_path / "www" / rel).read_bytes() == b"kubeadm"
    assert mirror.publish_file(src, rel) == (sha, False)  # a second run changes nothing


def test_the_device_plugin_image_and_its_source_archive_are_one_release(monkeypatch):
    manifest = lib.load()
    bins = {"nvidia-device-plugin": Path("/x"), "gpu-feature-discovery": Path("/g")}
    [recipe] = build.device_plugin_image_recipes(manifest, bins, "base")
    assert (recipe.tag, recipe.entrypoint) == ("v0.20.0", ["nvidia-device-plugin"])
    # One image for the plugin and gpu-feature-discovery, as upstream's Dockerfile builds it.
    assert recipe.files == {"/usr/bin/nvidia-device-plugin": Path("/x"), "/usr/bin/gpu-feature-discovery": Path("/g")}
    manifest.get("nvidia-device-plugin-image").version = "v0.17.1"
    with pytest.raises(build.BuildError, match="v0.17.1 in artifacts/manifest.yml, the source archive .* v0.20.0"):
        build.device_plugin_image_recipes(manifest, bins, "base")


def test_volcano_images_are_the_releases_binaries_and_the_webhook_has_its_admission_script():
    manifest = lib.load()
    bins = {n: Path(f"/b/{n}") for n in ("vc-scheduler", "vc-controller-manager", "vc-webhook-manager",
                                         "gen-admission-secret.sh", "kubectl")}
    images = {r.artifact: r for r in build.volcano_image_recipes(manifest, bins, "debian")}
    assert images["volcano-scheduler-image"].entrypoint == ["/vc-scheduler"]
    assert images["volcano-scheduler-image"].base == "scratch"
    webhook = images["volcano-webhook-manager-image"]
    assert webhook.base == "debian" and set(webhook.files) == {"/vc-webhook-manager", "/gen-admission-secret.sh",
                                                               "/usr/local/bin/kubectl"}
    assert webhook.links == {"/usr/bin/sh": "bash"}  # the release's script needs more than dash
    manifest.get("volcano-scheduler-image").version = "v1.14.0"
    with pytest.raises(build.BuildError, match="volcano-scheduler-image is v1.14.0 .* volcano .* is v1.15.1"):
        build.volcano_image_recipes(manifest, bins, "debian")


def test_calico_images_are_the_releases_binaries_with_its_node_filesystem(tmp_path):
    """calico-node as the release's Dockerfile lays it out: the binary, start_runit and the runit services
    from node/filesystem (etc -> /etc, sbin -> /usr/sbin); the CNI image's installer as entrypoint."""
    fs = tmp_path / "fs"
    (fs / "etc" / "service" / "available" / "felix").mkdir(parents=True)
    (fs / "etc" / "service" / "available" / "felix" / "run").write_text("#!/bin/sh\n")
    (fs / "etc" / "rc.local").write_text("#!/bin/sh\n")
    (fs / "sbin").mkdir()
    (fs / "sbin" / "start_runit").write_text("#!/bin/sh\n")
    bins = {n: Path(f"/b/{n}") for r in build.calico_recipes() for n in r.binaries}
    bins["calico-node-filesystem"] = fs
    manifest = lib.load()
    images = {r.artifact: r for r in build.calico_image_recipes(manifest, bins, "calico-base")}
    node = images["calico-node-image"]
    assert node.entrypoint == ["/usr/sbin/start_runit"] and node.base == "calico-base"
    assert set(node.files) == {"/usr/bin/calico-node", "/etc/rc.local", "/etc/service/available/felix/run",
                               "/usr/sbin/start_runit"}
    cni = images["calico-cni-image"]
    assert cni.entrypoint == ["/opt/cni/bin/install"] and cni.links == {"/opt/cni/bin/calico-ipam": "calico"}
    controllers = images["calico-kube-controllers-image"]
    assert controllers.entrypoint == ["/usr/bin/wrapper", "/usr/bin/kube-controllers"]
    assert controllers.owned_dirs == {"/status": 999, "/profiles": 999}, "its probes read /status/status.json"
    manifest.get("calico-node-image").version = "v3.31.3"
    with pytest.raises(build.BuildError, match="calico-node-image is v3.31.3 .* calico .* is v3.32.1"):
        build.calico_image_recipes(manifest, bins, "calico-base")


def test_the_lab_skips_only_what_it_says_it_skips():
    """Everything else in the manifest must be built; Huawei's device plugin, the GPU Operator's
    and HAMi's images, the storage CSI drivers, MinIO and Istio are production-only."""
    skipped = [n for n in lib.load().artifacts if any(n.startswith(p) for p in build.NOT_BUILT)]
    assert skipped == ["ascend-device-plugin-image",
                       "gpu-operator-image", "k8s-mig-manager-image", "dcgm-exporter-image",
                       "node-feature-discovery-image", "hami-image", "hami-webhook-certgen-image",
                       "ceph-csi-rbd-chart", "ceph-csi-image", "ceph-csi-provisioner-image", "ceph-csi-attacher-image",
                       "ceph-csi-resizer-image", "ceph-csi-snapshotter-image", "ceph-csi-node-driver-registrar-image",
                       "juicefs-csi-driver-chart", "juicefs-csi-driver-image", "juicefs-mount-image",
                       "juicefs-csi-provisioner-image", "juicefs-csi-resizer-image",
                       "juicefs-csi-node-driver-registrar-image", "juicefs-csi-livenessprobe-image",
                       "minio-image", "minio-mc-image",
                       "istio-base-chart", "istio-istiod-chart", "istio-pilot-image", "istio-proxyv2-image"]


def test_files_service_is_idempotent_and_stops(tmp_path, monkeypatch):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setattr(mirror, "FILES", tmp_path / "www")
    monkeypatch.setattr(mirror, "RUN", tmp_path / "run")
    monkeypatch.setattr(mirror, "FILES_PORT", port)
    monkeypatch.setattr(mirror, "LISTEN", "127.0.0.1")
    (tmp_path / "www").mkdir()
    (tmp_path / "www" / "hello").write_text("hi")
    svc = next(s for s in mirror.services() if s.name == "files")
    try:
        assert svc.start() is True
        assert svc.healthy()
        assert svc.start() is False  # already running: nothing to do
        with mirror.urllib.request.urlopen(f"http://127.0.0.1:{port}/hello", timeout=5) as resp:
            assert resp.read() == b"hi"
    finally:
        svc.stop()
    assert svc.pid() is None
    assert not svc.healthy()


def test_prometheus_module_versions():
    assert build.prometheus_module_version("v3.14.0") == "v0.314.0"
    assert build.prometheus_module_version("v3.5.2") == "v0.305.2"


def test_recipe_fields_added_later_keep_older_keys():
    """tags, nosumdb and module_files count only when set: adding them rebuilt nothing."""
    plain = build.GoRecipe("x", "v1", {"m": "v1"}, {"x": "m"}, main_module="m")
    assert plain.key("go1") == build.GoRecipe("x", "v1", {"m": "v1"}, {"x": "m"}, main_module="m", tags=[]).key("go1")
    assert plain.key("go1") != build.GoRecipe("x", "v1", {"m": "v1"}, {"x": "m"}, main_module="m",
                                              tags=["t"]).key("go1")
    assert plain.key("go1") != build.GoRecipe("x", "v1", {"m": "v1"}, {"x": "m"}, main_module="m",
                                              module_files={"a": "b"}).key("go1")


def test_monitoring_images_use_one_operator_release():
    manifest = lib.load()
    manifest.get("prometheus-config-reloader-image").version = "v0.92.0"
    with pytest.raises(build.BuildError, match="one release"):
        build.monitoring_recipes(manifest)


def test_receiver_image_holds_the_isolation_run_and_nothing_of_the_lab(tmp_path):
    """The isolate playbook, its role, both collections and the day2 package are in the image;
    the lab (inventories, tests/hardware) is not."""
    site, bundled = tmp_path / "site", tmp_path / "bundle"
    (site / "ansible_runner").mkdir(parents=True)
    (site / "ansible_runner" / "__init__.py").write_text("")
    (site / "ansible_runner" / "__pycache__").mkdir()
    (site / "ansible_runner" / "__pycache__" / "x.pyc").write_text("")
    (bundled / "kubernetes" / "core" / "plugins").mkdir(parents=True)
    (bundled / "kubernetes" / "core" / "plugins" / "k8s.py").write_text("")
    recipe = build.receiver_image_recipe(lib.load(), "base", site, bundled, tmp_path / "ansible.cfg")
    files = set(recipe.files)
    home = build.RECEIVER_HOME
    for needed in ("project/playbooks/day2/isolate.yml", "project/playbooks/day2/validate_request.yml",
                   "project/roles/node_drain/tasks/drain.yml", "project/ansible.cfg",
                   "project/collections/ansible_collections/kubernetes/core/plugins/k8s.py",
                   "project/collections/ansible_collections/ai_platform/l1/galaxy.yml",
                   "python/ai_l1_day2/remediation/server.py", "python/ansible_runner/__init__.py",
                   "python/ansible_runner/__pycache__/x.pyc"):
        assert f"{home}/{needed}" in files, needed
    assert not [f for f in files if ("__pycache__" in f and "/python/ansible_runner/" not in f) or "inventories" in f
                or "hardware" in f or "/.complete" in f]
    assert recipe.env["AI_L1_PROJECT_DIR"] == f"{home}/project"
    assert recipe.user == f"{build.RECEIVER_UID}:{build.RECEIVER_UID}"


def test_a_mirror_service_started_from_another_checkout_is_recognised(tmp_path):
    """`mirror.py up` from a second clone (CI after a session, another engineer's checkout) finds
    the running file server of the shared cache: same arguments, another checkout's interpreter.
    Refusing it ("something else already answers") failed every run after the first."""
    argv = ["-c", "import time; time.sleep(30)", str(tmp_path)]
    proc = subprocess.Popen([sys.executable, *argv])
    try:
        service = mirror.Service("files", ["/another/checkout/.venv/bin/python", *argv], "http://127.0.0.1:9/")
        service.pidfile = tmp_path / "files.pid"
        service.pidfile.write_text(str(proc.pid))
        deadline = time.monotonic() + 5
        while service.pid() is None and time.monotonic() < deadline:  # /proc/<pid>/cmdline once exec'd
            time.sleep(0.05)
        assert service.pid() == proc.pid
        other = mirror.Service("files", ["/another/checkout/.venv/bin/python", "-c", "other", str(tmp_path)],
                               "http://127.0.0.1:9/")
        other.pidfile = service.pidfile
        assert other.pid() is None
    finally:
        proc.kill()
        proc.wait()
