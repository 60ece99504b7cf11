"""roles/k8s_storage: the seed's storage objects (4.3) as the role renders them, and its refusals.

Rendered for real by ansible-playbook on localhost through the role's `render` entry point (its
argument spec, its checks, its templates), which `main` runs before it applies anything. The seed's
objects are checked field by field, corrected where the real drivers differ: every secret ceph-csi
needs on both RBD classes, JuiceFS's cache settings as mount options, a MinIO Tenant holding only
fields of the minio.min.io/v2 CRD (operator v5). The lab validates the same objects against a real
API server (kubectl apply --dry-run=server)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
ROLE = REPO / "roles" / "k8s_storage"
DIGEST = "sha256:" + "ab" * 32
CEPH_KEY = "AQDNIT5fjrwVIhAAqcZURwQRhK3B5fUopYX5Qw=="
S3_SECRET = "s3-s3cret-Kq81"
REDIS_PASSWORD = "redis-pw-Zt42"
MINIO_PASSWORD = "minio-pw-Xw93"
IMAGES = ["ceph-csi-image", "ceph-csi-provisioner-image", "ceph-csi-attacher-image", "ceph-csi-resizer-image",
          "ceph-csi-snapshotter-image", "ceph-csi-node-driver-registrar-image", "juicefs-csi-driver-image",
          "juicefs-mount-image", "juicefs-csi-provisioner-image", "juicefs-csi-resizer-image",
          "juicefs-csi-node-driver-registrar-image", "juicefs-csi-livenessprobe-image", "minio-image", "minio-mc-image"]
ARTIFACTS = {
    **{n: {"image": f"mirror:5000/{n}:v1", "version": "v1", "sha256": DIGEST} for n in IMAGES},
    **{n: {"url": f"http://mirror/{n}", "version": "1.0", "sha256": "c" * 64}
       for n in ("helm", "ceph-csi-rbd-chart", "juicefs-csi-driver-chart")},
}
INPUTS = {
    "k8s_storage_api_host": "cp1",
    "k8s_storage_object_backend": "rgw",
    "k8s_storage_ceph_csi_install": True,
    "k8s_storage_juicefs_csi_install": True,
    "k8s_storage_ceph_cluster_id": "ceph-ai-platform",
    "k8s_storage_ceph_monitors": ["10.0.0.1:6789", "10.0.0.2:6789", "10.0.0.3:6789"],
    "k8s_storage_ceph_csi_user": "kubernetes-rbd",
    "k8s_storage_ceph_csi_key": CEPH_KEY,
    "k8s_storage_s3_endpoint": "http://10.0.0.5:7480",
    "k8s_storage_s3_access_key": "JFSACCESS",
    "k8s_storage_s3_secret_key": S3_SECRET,
    "k8s_storage_juicefs_metaurl": f"redis://:{REDIS_PASSWORD}@10.0.0.6:6379/1",
    "k8s_storage_artifacts": ARTIFACTS,
}
MINIO = {"k8s_storage_object_backend": "minio", "k8s_storage_minio_root_user": "platform-root",
         "k8s_storage_minio_root_password": MINIO_PASSWORD}
SECRETS = (CEPH_KEY, S3_SECRET, REDIS_PASSWORD, MINIO_PASSWORD)
RENDER = """
- hosts: localhost
  connection: local
  gather_facts: false
  tasks:
    - ansible.builtin.include_role:
        name: k8s_storage
        tasks_from: render
{dump}"""
DUMP = """    - ansible.builtin.copy:
        dest: "{{ out }}"
        content: "{{ {'rendered': k8s_storage_rendered, 'secrets': k8s_storage_rendered_secrets} | to_json }}"
        mode: "0600"
"""
MAIN = """
- hosts: localhost
  connection: local
  gather_facts: false
  roles:
    - role: k8s_storage
"""
# minio.min.io/v2 as the MinIO Operator v5 defines it (pkg/apis/minio.min.io/v2/types.go): the Tenant's
# spec, a pool and a bucket have these fields and no others (the API server prunes the rest).
TENANT_SPEC_FIELDS = {
    "pools", "image", "imagePullSecret", "podManagementPolicy", "hostNetwork", "minioContainerPort",
    "consoleContainerPort", "credsSecret", "env", "externalCertSecret", "externalCaCertSecret",
    "externalClientCertSecret", "externalClientCertSecrets", "mountPath", "subPath", "requestAutoCert", "liveness",
    "readiness", "startup", "features", "certConfig", "kes", "prometheusOperator", "serviceAccountName",
    "priorityClassName", "imagePullPolicy", "sideCars", "exposeServices", "serviceMetadata", "users", "buckets",
    "logging", "configuration", "initContainers", "additionalVolumes", "additionalVolumeMounts"}
POOL_FIELDS = {"name", "servers", "volumesPerServer", "volumeClaimTemplate", "resources", "nodeSelector", "affinity",
               "tolerations", "topologySpreadConstraints", "securityContext", "containerSecurityContext",
               "annotations", "labels"}
BUCKET_FIELDS = {"name", "region", "objectLock"}


def run(tmp_path: Path, play: str, extra: dict, *args: str) -> subprocess.CompletedProcess:
    (tmp_path / "play.yml").write_text(play)
    (tmp_path / "vars.json").write_text(json.dumps(extra))
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_PYTHON_INTERPRETER=sys.executable, ANSIBLE_LOCALHOST_WARNING="0")
    return subprocess.run([str(Path(sys.executable).parent / "ansible-playbook"), "-i", "localhost,",
                           str(tmp_path / "play.yml"), "-e", f"@{tmp_path / 'vars.json'}", *args],
                          capture_output=True, text=True, check=False, cwd=REPO, env=env, timeout=300)


def render(tmp_path: Path, **over) -> tuple[dict, dict]:
    out = tmp_path / "rendered.json"
    proc = run(tmp_path, RENDER.format(dump=DUMP), {**INPUTS, **over, "out": str(out)})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    data = json.loads(out.read_text())
    return data["rendered"], data["secrets"]


def refusal(tmp_path: Path, play: str = RENDER.format(dump=""), drop: tuple[str, ...] = (), **over) -> str:
    proc = run(tmp_path, play, {k: v for k, v in {**INPUTS, **over}.items() if k not in drop})
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out
    for secret in SECRETS:
        assert secret not in out
    return " ".join(out.split())


def by_name(objects: list[dict], kind: str) -> dict[str, dict]:
    return {o["metadata"]["name"]: o for o in objects if o["kind"] == kind}


@pytest.fixture(scope="module")
def rgw(tmp_path_factory):
    return render(tmp_path_factory.mktemp("rgw"))


@pytest.fixture(scope="module")
def minio(tmp_path_factory):
    return render(tmp_path_factory.mktemp("minio"), **MINIO)


def test_every_object_is_kubernetes_yaml(rgw, minio):
    for rendered, secrets in (rgw, minio):
        groups = [*rendered.values(), *secrets.values()]
        for objects in groups:
            if isinstance(objects, dict):  # release_values: chart values, not objects
                continue
            for obj in objects:
                assert obj["apiVersion"] and obj["kind"] and obj["metadata"]["name"], obj
                assert yaml.safe_load(yaml.safe_dump(obj)) == obj
    rendered, _ = rgw
    [namespace] = rendered["namespace"]
    assert (namespace["kind"], namespace["metadata"]["name"]) == ("Namespace", "storage")


@pytest.mark.parametrize(("name", "pool", "fstype", "mounter"), [
    ("ceph-rbd-ssd", "ssd-pool", "ext4", "rbd-nbd"),
    ("ceph-rbd-hdd", "hdd-pool", "xfs", "rbd"),
])
def test_the_seeds_rbd_classes_with_every_secret_ceph_csi_needs(rgw, name, pool, fstype, mounter):
    sc = by_name(rgw[0]["objects"], "StorageClass")[name]
    assert sc["provisioner"] == "rbd.csi.ceph.com"
    assert sc["allowVolumeExpansion"] is True and sc["reclaimPolicy"] == "Delete"
    params = sc["parameters"]
    assert {k: params[k] for k in ("clusterID", "pool", "imageFeatures", "csi.storage.k8s.io/fstype", "mounter")} == {
        "clusterID": "ceph-ai-platform", "pool": pool, "imageFeatures": "layering",
        "csi.storage.k8s.io/fstype": fstype, "mounter": mounter}
    for use in ("provisioner", "controller-expand", "node-stage"):
        assert params[f"csi.storage.k8s.io/{use}-secret-name"] == "csi-ceph-secret", use
        assert params[f"csi.storage.k8s.io/{use}-secret-namespace"] == "storage", use
    assert all(isinstance(v, str) for v in params.values())  # StorageClass parameters are strings


def test_the_ssd_class_can_use_krbd(tmp_path):
    rendered, _ = render(tmp_path, k8s_storage_rbd_ssd_mounter="rbd")
    assert by_name(rendered["objects"], "StorageClass")["ceph-rbd-ssd"]["parameters"]["mounter"] == "rbd"
    # without rbd-nbd the node plugin rolls as usual
    assert "updateStrategy" not in rendered["release_values"]["ceph-csi-rbd"]["nodeplugin"]


def test_every_secret_a_class_names_is_rendered_in_its_namespace(rgw, minio):
    rendered, secrets = rgw
    rendered_secrets = {(s["metadata"]["namespace"], s["metadata"]["name"]) for s in secrets["drivers"]}
    refs = set()
    for sc in by_name(rendered["objects"], "StorageClass").values():
        params = sc["parameters"]
        for key, value in params.items():
            if key.endswith("-secret-name"):
                refs.add((params[key.replace("-secret-name", "-secret-namespace")], value))
    assert refs == rendered_secrets == {("storage", "csi-ceph-secret"), ("storage", "juicefs-secret")}
    tenant = by_name(minio[0]["minio"], "Tenant")["ai-platform-minio"]
    job = next(o for o in minio[0]["minio"] if o["kind"] == "Job")
    [minio_secret] = minio[1]["minio"]
    assert tenant["spec"]["configuration"]["name"] == minio_secret["metadata"]["name"]
    assert job["spec"]["template"]["spec"]["volumes"][0]["secret"]["secretName"] == minio_secret["metadata"]["name"]


def test_ceph_csi_config_json_names_the_cluster_and_its_monitors(rgw):
    cm = by_name(rgw[0]["objects"], "ConfigMap")["ceph-csi-config"]
    assert cm["metadata"]["namespace"] == "storage"
    assert json.loads(cm["data"]["config.json"]) == [
        {"clusterID": "ceph-ai-platform", "monitors": ["10.0.0.1:6789", "10.0.0.2:6789", "10.0.0.3:6789"]}]


def test_the_csi_secrets(rgw):
    secrets = by_name(rgw[1]["drivers"], "Secret")
    assert secrets["csi-ceph-secret"]["stringData"] == {"userID": "kubernetes-rbd", "userKey": CEPH_KEY}
    assert secrets["juicefs-secret"]["stringData"] == {
        "name": "jfs-training-data", "metaurl": INPUTS["k8s_storage_juicefs_metaurl"], "storage": "s3",
        "bucket": "http://10.0.0.5:7480/training-data",  # RGW's endpoint, not MinIO's
        "access-key": "JFSACCESS", "secret-key": S3_SECRET}


def test_juicefs_cache_settings_are_mount_options_not_parameters(rgw):
    sc = by_name(rgw[0]["objects"], "StorageClass")["juicefs-cache"]
    assert sc["provisioner"] == "csi.juicefs.com" and sc["reclaimPolicy"] == "Retain"
    assert sc["parameters"] == {
        "csi.storage.k8s.io/provisioner-secret-name": "juicefs-secret",
        "csi.storage.k8s.io/provisioner-secret-namespace": "storage",
        "csi.storage.k8s.io/node-publish-secret-name": "juicefs-secret",
        "csi.storage.k8s.io/node-publish-secret-namespace": "storage"}
    assert sc["mountOptions"] == ["cache-dir=/mnt/nvme/juicefs-cache", "cache-size=51200", "atime-mode=noatime",
                                  "attr-cache=3600", "entry-cache=3600", "dir-entry-cache=3600"]
    # The seed's options that juicefs mount does not have are gone, and nothing is a juicefs/ parameter.
    text = json.dumps(sc)
    assert "cache-evict-threads" not in text and "meta-cache-ttl" not in text and "juicefs/" not in text


def test_juicefs_cache_inputs_reach_the_mount_options(tmp_path):
    rendered, _ = render(tmp_path, k8s_storage_juicefs_cache_dir="/data/nvme0/jfs",
                         k8s_storage_juicefs_cache_size="204800", k8s_storage_juicefs_metadata_cache_ttl=1)
    options = by_name(rendered["objects"], "StorageClass")["juicefs-cache"]["mountOptions"]
    assert options[:2] == ["cache-dir=/data/nvme0/jfs", "cache-size=204800"]
    assert "attr-cache=1" in options


def test_the_seeds_pvc_example(rgw):
    [pvc] = rgw[0]["training_data_pvc"]
    assert pvc["kind"] == "PersistentVolumeClaim" and pvc["metadata"]["name"] == "training-data-pvc"
    assert pvc["spec"] == {"accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": "10Ti"}},
                           "storageClassName": "juicefs-cache"}


def test_the_tenant_holds_only_fields_of_the_crd(minio):
    tenant = by_name(minio[0]["minio"], "Tenant")["ai-platform-minio"]
    assert tenant["apiVersion"] == "minio.min.io/v2" and tenant["metadata"]["namespace"] == "storage"
    spec = tenant["spec"]
    assert set(spec) <= TENANT_SPEC_FIELDS, set(spec) - TENANT_SPEC_FIELDS
    assert not {"bucketDedup", "console", "credsSecret"} & set(spec)
    assert "serviceMetadata" not in spec and spec["exposeServices"] == {"minio": False, "console": False}  # ClusterIP
    [pool] = spec["pools"]
    assert set(pool) <= POOL_FIELDS
    assert (pool["name"], pool["servers"], pool["volumesPerServer"]) == ("pool-0", 4, 8)
    assert pool["volumeClaimTemplate"] == {"metadata": {"name": "data"}, "spec": {
        "accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "8Ti"}},
        "storageClassName": "ceph-rbd-ssd"}}
    assert spec["image"] == f"mirror:5000/minio-image:v1@{DIGEST}" and spec["mountPath"] == "/export"
    assert spec["requestAutoCert"] is True
    assert spec["buckets"] == [{"name": n, "region": "us-east-1"}
                               for n in ("model-weights", "training-data", "checkpoints", "containers")]
    assert all(set(b) <= BUCKET_FIELDS for b in spec["buckets"])  # no quota: the Job sets it


def test_the_tenant_from_other_inputs(tmp_path):
    rendered, _ = render(tmp_path, **MINIO, k8s_storage_minio_servers=8, k8s_storage_minio_volumes_per_server=4,
                         k8s_storage_minio_volume_size="4Ti", k8s_storage_minio_storage_class="ceph-rbd-hdd",
                         k8s_storage_minio_image="site-registry/minio/minio:RELEASE.2024-06-11T01-11-02Z",
                         k8s_storage_minio_buckets=[{"name": "datasets", "quota": "1Pi"}])
    tenant = by_name(rendered["minio"], "Tenant")["ai-platform-minio"]
    [pool] = tenant["spec"]["pools"]
    assert (pool["servers"], pool["volumesPerServer"]) == (8, 4)
    assert pool["volumeClaimTemplate"]["spec"]["resources"]["requests"]["storage"] == "4Ti"
    assert pool["volumeClaimTemplate"]["spec"]["storageClassName"] == "ceph-rbd-hdd"
    assert tenant["spec"]["image"] == "site-registry/minio/minio:RELEASE.2024-06-11T01-11-02Z"
    assert tenant["spec"]["buckets"] == [{"name": "datasets"}]
    [pvc] = rendered["minio_validation"]
    assert pvc["spec"] == pool["volumeClaimTemplate"]["spec"]


def test_the_pool_template_is_rendered_as_a_standalone_pvc(minio):
    [pvc] = minio[0]["minio_validation"]
    [pool] = by_name(minio[0]["minio"], "Tenant")["ai-platform-minio"]["spec"]["pools"]
    assert (pvc["apiVersion"], pvc["kind"], pvc["metadata"]["namespace"]) == ("v1", "PersistentVolumeClaim", "storage")
    assert pvc["metadata"]["name"] == pool["volumeClaimTemplate"]["metadata"]["name"]
    assert pvc["spec"] == pool["volumeClaimTemplate"]["spec"]


def test_the_quota_job_sets_the_seeds_quotas(minio, tmp_path):
    [job] = [o for o in minio[0]["minio"] if o["kind"] == "Job"]
    pod = job["spec"]["template"]["spec"]
    [container] = pod["containers"]
    env = {e["name"]: e["value"] for e in container["env"]}
    assert env["QUOTAS"] == "model-weights=100Ti training-data=500Ti checkpoints=200Ti containers=50Ti"
    assert env["MINIO_URL"] == "https://minio.storage.svc.cluster.local"
    assert container["image"] == f"mirror:5000/minio-mc-image:v1@{DIGEST}"
    assert 'mc admin bucket quota "tenant/$bucket" --hard' in container["args"][0]
    assert pod["automountServiceAccountToken"] is False and pod["securityContext"]["runAsNonRoot"] is True
    assert {"name": "cluster-ca", "mountPath": "/tmp/.mc/certs/CAs", "readOnly": True} in container["volumeMounts"]
    # A changed quota is a new Job (a Job's template cannot change); the same inputs are the same Job.
    changed, _ = render(tmp_path, **MINIO, k8s_storage_minio_buckets=[{"name": "model-weights", "quota": "200Ti"}])
    [job2] = [o for o in changed["minio"] if o["kind"] == "Job"]
    assert job2["metadata"]["name"] != job["metadata"]["name"]
    assert job["metadata"]["name"].startswith("minio-bucket-quotas-")


def test_the_minio_configuration_secret(minio, rgw):
    [secret] = minio[1]["minio"]
    assert secret["stringData"] == {
        "config.env": f"export MINIO_ROOT_USER='platform-root'\nexport MINIO_ROOT_PASSWORD='{MINIO_PASSWORD}'\n"}
    assert rgw[1]["minio"] == []  # rgw: no MinIO credentials exist


def test_release_values_take_every_image_from_the_manifest(rgw):
    ceph = rgw[0]["release_values"]["ceph-csi-rbd"]
    assert ceph["externallyManagedConfigmap"] is True and ceph["configMapName"] == "ceph-csi-config"
    assert ceph["storageClass"] == {"create": False} and ceph["secret"] == {"create": False}
    assert ceph["nodeplugin"]["updateStrategy"] == "OnDelete"  # rbd-nbd on ceph-rbd-ssd
    images = [ceph["nodeplugin"]["plugin"]["image"], ceph["nodeplugin"]["registrar"]["image"],
              *(ceph["provisioner"][s]["image"] for s in ("provisioner", "attacher", "resizer", "snapshotter"))]
    juicefs = rgw[0]["release_values"]["juicefs-csi-driver"]
    images += [juicefs["image"], *juicefs["sidecars"].values()]
    for image in images:
        assert image["repository"].startswith("mirror:5000/") and image["tag"] == f"v1@{DIGEST}", image
    assert ceph["nodeplugin"]["plugin"]["image"]["repository"] == "mirror:5000/ceph-csi-image"
    assert juicefs["defaultMountImage"] == {"ce": f"mirror:5000/juicefs-mount-image:v1@{DIGEST}"}
    assert juicefs["storageClasses"] == [] and juicefs["dashboard"] == {"enabled": False}


def test_without_the_drivers_no_release_and_no_driver_artifacts_needed(tmp_path):
    rendered, _ = render(tmp_path, k8s_storage_ceph_csi_install=False, k8s_storage_juicefs_csi_install=False,
                         k8s_storage_artifacts={})
    assert rendered["release_values"] == {}
    assert {o["metadata"]["name"] for o in rendered["objects"]} == {
        "ceph-csi-config", "ceph-rbd-ssd", "ceph-rbd-hdd", "juicefs-cache"}


@pytest.mark.parametrize(("over", "message"), [
    ({"k8s_storage_ceph_monitors": []}, "k8s_storage_ceph_monitors: at least one monitor is required"),
    ({"k8s_storage_ceph_monitors": ["10.0.0.1"]}, 'k8s_storage_ceph_monitors: "10.0.0.1" is not ip:port'),
    ({"k8s_storage_ceph_monitors": ["10.0.0.1:99999"]}, 'k8s_storage_ceph_monitors: "10.0.0.1:99999" is not ip:port'),
    ({"k8s_storage_ceph_cluster_id": "x" * 37}, "k8s_storage_ceph_cluster_id: 1 to 36 characters"),
    ({"k8s_storage_ceph_csi_user": "client.kubernetes"}, "k8s_storage_ceph_csi_user: the cephx user id without"),
    ({"k8s_storage_ceph_csi_key": "not a key!"}, "k8s_storage_ceph_csi_key: not a cephx key"),
    ({"k8s_storage_s3_endpoint": "10.0.0.5:7480"}, 'k8s_storage_s3_endpoint: "10.0.0.5:7480" is not http(s)://host[:port]'),
    ({"k8s_storage_juicefs_metaurl": "10.0.0.6:6379"}, "k8s_storage_juicefs_metaurl: a JuiceFS metadata engine URL"),
    ({"k8s_storage_juicefs_cache_size": 0}, "k8s_storage_juicefs_cache_size: MiB, at least 1"),
    ({"k8s_storage_juicefs_cache_dir": "nvme/cache"}, "k8s_storage_juicefs_cache_dir: an absolute path"),
    ({"k8s_storage_minio_buckets": [{"name": "model-weights", "quota": "lots"}]},
     'k8s_storage_minio_buckets: model-weights: quota "lots" is not a size like 100Ti'),
    ({"k8s_storage_minio_servers": 1, "k8s_storage_minio_volumes_per_server": 2},
     "k8s_storage_minio_servers x k8s_storage_minio_volumes_per_server: at least 4 volumes"),
    ({**MINIO, "k8s_storage_minio_root_password": "short"}, "k8s_storage_minio_root_password: 8 or more characters"),
    ({"k8s_storage_object_backend": "minio"}, "k8s_storage_minio_root_user: 3 or more characters"),
])
def test_bad_input_is_refused_naming_the_variable(tmp_path, over, message):
    assert message in refusal(tmp_path, **over)


@pytest.mark.parametrize(("over", "drop", "message"), [
    # the argument spec: types, choices, required inputs, bucket fields
    ({"k8s_storage_juicefs_cache_size": "50G"}, (), "k8s_storage_juicefs_cache_size' is of type"),
    ({"k8s_storage_object_backend": "ceph"}, (), "k8s_storage_object_backend must be one of: rgw, minio"),
    ({"k8s_storage_rbd_ssd_mounter": "nbd"}, (), "k8s_storage_rbd_ssd_mounter must be one of: rbd, rbd-nbd"),
    ({}, ("k8s_storage_ceph_csi_key", "k8s_storage_ceph_csi_install"),
     "missing required arguments: k8s_storage_ceph_csi_install, k8s_storage_ceph_csi_key"),
    ({"k8s_storage_minio_buckets": [{"name": "model-weights"}]}, (), "missing required arguments: quota"),
    ({"k8s_storage_ceph_monitors": "10.0.0.1:6789"}, (),
     'k8s_storage_ceph_monitors: a list of ip:port, not "10.0.0.1:6789"'),
])
def test_the_argument_spec_refuses_bad_types(tmp_path, over, drop, message):
    assert message in refusal(tmp_path, drop=drop, **over)


def test_missing_artifacts_are_named(tmp_path):
    text = refusal(tmp_path, k8s_storage_artifacts={}, k8s_storage_juicefs_csi_install=False)
    assert "k8s_storage_artifacts lacks helm, ceph-csi-rbd-chart, ceph-csi-image, ceph-csi-provisioner-image" in text
    assert "juicefs" not in text.split("lacks", 1)[1].split("(", 1)[0]
    text = refusal(tmp_path, k8s_storage_artifacts={}, k8s_storage_ceph_csi_install=False,
                   k8s_storage_juicefs_csi_install=False, **MINIO)
    assert "k8s_storage_artifacts lacks minio-image, minio-mc-image" in text


def test_the_role_refuses_before_touching_any_host(tmp_path):
    """`main`, as a play runs it: the refusal comes from the controller-side checks; no task of the
    Python client role or the API host (k8s_storage_api_host does not exist) is reached."""
    text = refusal(tmp_path, MAIN, k8s_storage_ceph_monitors=["mon1"], k8s_storage_api_host="no-such-host")
    assert 'k8s_storage_ceph_monitors: "mon1" is not ip:port' in text
    assert "k8s_api_client" not in text and "no-such-host" not in text


def test_no_secret_reaches_the_log(tmp_path):
    proc = run(tmp_path, RENDER.format(dump=""), {**INPUTS, **MINIO}, "-vv")
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert "k8s_storage_rendered" in proc.stdout  # the non-secret objects are shown
    for secret in SECRETS:
        assert secret not in proc.stdout + proc.stderr


def test_the_spec_and_the_defaults_agree():
    specs = yaml.safe_load((ROLE / "meta/argument_specs.yml").read_text())["argument_specs"]
    defaults = yaml.safe_load((ROLE / "defaults/main.yml").read_text())
    options = specs["main"]["options"]
    assert specs["render"]["options"] == options
    assert {k: v["default"] for k, v in options.items() if "default" in v} == defaults
    required = {k for k, v in options.items() if v.get("required")}
    assert required == set(INPUTS) - {"k8s_storage_artifacts"}
    assert not required & set(defaults)
    for name in ("k8s_storage_ceph_csi_key", "k8s_storage_s3_access_key", "k8s_storage_s3_secret_key",
                 "k8s_storage_juicefs_metaurl", "k8s_storage_minio_root_password"):
        assert options[name]["no_log"] is True, name


def test_the_quota_job_keeps_the_root_password_off_every_command_line(minio, tmp_path):
    """The Job's script, run by a real shell with a stand-in mc that records its argv: the root
    credentials reach mc through its configuration file, never an argument (/proc/<pid>/cmdline
    is readable by other processes); a password with JSON and shell metacharacters survives."""
    [job] = [o for o in minio[0]["minio"] if o["kind"] == "Job"]
    [container] = job["spec"]["template"]["spec"]["containers"]
    password = 'p"a\\ss$(touch pwned)`w`'
    env_file = tmp_path / "config.env"
    env_file.write_text(f"MINIO_ROOT_USER=root-user\nMINIO_ROOT_PASSWORD='{password}'\n")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "mc").write_text('#!/bin/sh\nprintf "%s\\n" "$*" >> "$MC_ARGV"\n')
    (bin_dir / "mc").chmod(0o755)
    script = container["args"][0].replace("/config/config.env", str(env_file))
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "HOME": str(tmp_path / "home"), "MC_ARGV": str(tmp_path / "argv"),
           **{e["name"]: e["value"] for e in container["env"] if e["name"] != "HOME"}}
    proc = subprocess.run(["/bin/sh", "-ec", script], env=env, cwd=tmp_path, capture_output=True, text=True,
                          timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr
    argv = (tmp_path / "argv").read_text()
    assert "quota tenant/model-weights --hard 100Ti" in argv.replace('"', "")
    assert password not in argv and "root-user" not in argv
    config = json.loads((tmp_path / "home/.mc/config.json").read_text())
    assert config["aliases"]["tenant"] == {"url": "https://minio.storage.svc.cluster.local", "accessKey": "root-user",
                                           "secretKey": password, "api": "s3v4", "path": "auto"}
    assert (tmp_path / "home/.mc/config.json").stat().st_mode & 0o077 == 0
    assert not (tmp_path / "pwned").exists()
