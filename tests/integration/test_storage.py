"""Ceph on the lab's storage node (issue 18), as site.yml left it: roles/ceph on stor1 with one
monitor and manager, three BlueStore OSDs on disk files (two ssd, one hdd), the seed's pools
ssd-pool and hdd-pool, client.csi-rbd, and the RADOS Gateway with the seed's buckets and quotas.

Asserted against the running cluster:
- health is HEALTH_OK, or HEALTH_WARN with only the lab's accepted check (one replica per pool);
- each pool uses its class's rule and every placement group sits on OSDs of that class only;
- an RBD image is created, written and read back with client.csi-rbd's key, which cannot create a
  pool nor read a pool outside its caps; no host but the monitor holds client.admin's key (that a
second run changes nothing and keeps every OSD is test_kubernetes.py's second site.yml run);
- an OSD killed with SIGKILL is marked down by the monitor and comes back up (systemd restarts it);
- through RGW's S3 API: every seed bucket exists under its owner with the seed's quota; a user's key
  reaches only its own buckets; a write past a bucket's quota is refused with QuotaExceeded;
- the Kubernetes side (roles/k8s_storage, on cp1): the ceph-csi Secret holds client.csi-rbd's key and
  the cluster map the monitor's address; the JuiceFS Secret's keys write to training-data through
  the gateway; every object the role renders (both backends) passes `kubectl apply --dry-run=server`
  except the MinIO Tenant (its CRD is MinIO's); a broken StorageClass is refused. The CSI drivers
  are not run here (the Go module proxy refuses them), so no PVC is bound.
"""

from __future__ import annotations

import base64
import json
import shlex
import sys
import time

import pytest
import yaml
from conftest import (
    LAB_INVENTORY,
    REPO,
    group_hosts,
    kubectl_json,
    on,
    server_dry_run,
    sh,
    tail,
    wait_for,
)

# roles/k8s_storage's renderer as the unit tests drive it (the same inputs, through the role's render entry point).
sys.path.insert(0, str(REPO / "tests" / "unit"))
import test_k8s_storage as storage_render  # noqa: E402

INV = yaml.safe_load((LAB_INVENTORY / "hosts.yml").read_text())["all"]
STORAGE = group_hosts(INV["children"]["storage"])
LAB_CEPH = yaml.safe_load((LAB_INVENTORY / "group_vars" / "storage" / "ceph.yml").read_text())
MON = LAB_CEPH["ceph_mon_hosts"][0]
RGW = LAB_CEPH["ceph_rgw_hosts"][0]
ROLE_DEFAULTS = yaml.safe_load((REPO / "roles" / "ceph" / "defaults" / "main.yml").read_text())
TIB = 1024 ** 4
# The gateway's storage-plane address (ceph_address), where the lab puts Ceph.
RGW_ADDRESS = next(h.get("ceph_address", h["ansible_host"]) for g in INV["children"].values()
                   for name, h in (g.get("hosts") or {}).items() if name == RGW)
ENDPOINT = f"http://{RGW_ADDRESS}:{LAB_CEPH.get('ceph_rgw_port', 7480)}"


def ceph(command: str, host: str = MON) -> dict | list:
    proc = on(host, f"sudo ceph {command} -f json")
    assert proc.returncode == 0, f"ceph {command} on {host}:\n{tail(proc)}"
    return json.loads(proc.stdout)


def on_ok(host: str, command: str, timeout: int = 120) -> str:
    proc = on(host, command, timeout=timeout)
    assert proc.returncode == 0, f"{command} on {host}:\n{tail(proc)}"
    return proc.stdout


def s3(script: str, host: str = RGW) -> dict:
    """Run a boto3 script on the gateway host (python3-boto3 is there) and return its JSON output.

    The script gets `keys` (uid -> access/secret) and `client(uid)`; it prints one JSON object."""
    users = [u["uid"] for u in ROLE_DEFAULTS["ceph_rgw_users"]] + ["quota-test"]
    prelude = f"""
import json, subprocess, boto3, botocore
keys = {{}}
for uid in {users!r}:
    proc = subprocess.run(['radosgw-admin', 'user', 'info', '--uid', uid], capture_output=True, text=True)
    if proc.returncode == 0:
        k = json.loads(proc.stdout)['keys'][0]
        keys[uid] = (k['access_key'], k['secret_key'])
def client(uid):
    return boto3.client('s3', endpoint_url='{ENDPOINT}',
                        aws_access_key_id=keys[uid][0], aws_secret_access_key=keys[uid][1], region_name='us-east-1')
def code(call):
    try:
        call()
        return 'ok'
    except botocore.exceptions.ClientError as exc:
        return exc.response['Error']['Code']
"""
    program = prelude + script
    out = on_ok(host, f"sudo python3 -c {shlex.quote(program)}")
    return json.loads(out.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def cluster(k8s_cluster):  # noqa: ARG001 (site.yml has run, the storage play with it)
    wait_for("the Ceph cluster to answer", lambda: on(MON, "sudo ceph -s --connect-timeout 5").returncode == 0, 120)
    return MON


def test_health_is_ok_or_only_the_labs_expected_warning(cluster):
    def settled():
        health = ceph("health detail")
        ok = health["status"] == "HEALTH_OK" or set(health["checks"]) <= set(LAB_CEPH["ceph_health_accepted"])
        return health if ok else None

    health = wait_for("health to settle", settled, 180)
    assert set(health.get("checks", {})) <= {"POOL_NO_REDUNDANCY"}, health


def test_each_pool_lives_on_its_device_class_only(cluster):
    classes = {n["id"]: n["device_class"] for n in ceph("osd tree")["nodes"] if n["type"] == "osd"}
    assert sorted(classes.values()) == ["hdd", "ssd", "ssd"], classes
    rules = {r["rule_id"]: r for r in ceph("osd crush rule dump")}
    pools = {p["pool_name"]: p for p in ceph("osd pool ls detail")}
    for name, device_class in (("ssd-pool", "ssd"), ("hdd-pool", "hdd")):
        pool = pools[name]
        rule = rules[pool["crush_rule"]]
        assert rule["rule_name"] == f"replicated-{device_class}"
        assert any(s.get("item_name") == f"default~{device_class}" for s in rule["steps"]), rule
        assert "rbd" in pool["application_metadata"]
        assert pool["size"] == LAB_CEPH["ceph_pool_size"]
        pgs = ceph(f"pg ls-by-pool {name}")
        pgs = pgs["pg_stats"] if isinstance(pgs, dict) else pgs
        assert pgs, f"{name} has no placement groups"
        acting = {osd for pg in pgs for osd in pg["acting"]}
        assert {classes[o] for o in acting} == {device_class}, (name, acting)


def test_rbd_image_with_the_least_privilege_client(cluster, tmp_path):
    keyring = "/tmp/csi-rbd.keyring"
    on_ok(MON, f"sudo ceph auth get client.csi-rbd -o {keyring}")
    auth = f"--id csi-rbd --keyring {keyring}"
    image = f"ssd-pool/it-{int(time.time())}"
    try:
        on_ok(MON, f"sudo rbd {auth} create {image} --size 64M")
        out = on_ok(MON, f"sudo sh -ec 'head -c 4194304 /dev/urandom > /tmp/rbd-in; rbd {auth} import --no-progress "
                         f"/tmp/rbd-in {image}-copy; rbd {auth} export --no-progress {image}-copy /tmp/rbd-out; "
                         f"sha256sum /tmp/rbd-in /tmp/rbd-out'")
        sums = {line.split()[1]: line.split()[0] for line in out.splitlines()}
        assert sums["/tmp/rbd-in"] == sums["/tmp/rbd-out"], out
        # The same key cannot administer the cluster nor read a pool outside its caps.
        refused = on(MON, f"sudo ceph {auth} osd pool create it-not-allowed 8")
        assert refused.returncode != 0 and "EACCES" in refused.stdout + refused.stderr, tail(refused)
        foreign = on(MON, f"sudo rados {auth} -p .rgw.root ls")
        assert foreign.returncode != 0, tail(foreign)
    finally:
        on(MON, f"sudo sh -c 'rbd {auth} rm --no-progress {image}; rbd {auth} rm --no-progress {image}-copy; "
                f"rm -f {keyring} /tmp/rbd-in /tmp/rbd-out'")
    for host in group_hosts(INV):
        if host in LAB_CEPH["ceph_mon_hosts"]:
            continue
        leaked = on(host, "sudo find /etc/ceph /var/lib/ceph -name '*client.admin*' 2>/dev/null")
        assert not leaked.stdout.strip(), f"client.admin's key on {host}: {leaked.stdout}"


def osd_state() -> dict[int, tuple[str, int]]:
    return {o["osd"]: (o["uuid"], o["up"]) for o in ceph("osd dump")["osds"]}


def test_a_killed_osd_is_reported_down_and_comes_back(cluster):
    unit = "ceph-osd@0"
    restarts = int(on_ok(MON, f"systemctl show -p NRestarts --value {unit}").strip())
    pid = on_ok(MON, f"systemctl show -p MainPID --value {unit}").strip()
    assert pid != "0"
    on_ok(MON, f"sudo kill -9 {pid}")
    wait_for("the monitor to mark osd.0 down", lambda: osd_state()[0][1] == 0, 60, 1)
    wait_for("osd.0 to be up again", lambda: osd_state()[0][1] == 1, 120, 2)
    assert int(on_ok(MON, f"systemctl show -p NRestarts --value {unit}").strip()) == restarts + 1


def test_seed_buckets_exist_under_their_owners_with_the_seed_quotas(cluster):
    stats = {b["bucket"]: b for b in json.loads(on_ok(RGW, "sudo radosgw-admin bucket stats"))}
    seed = {"model-weights": 100, "training-data": 500, "checkpoints": 200, "containers": 50}
    owners = {b["name"]: u["uid"] for u in ROLE_DEFAULTS["ceph_rgw_users"] for b in u["buckets"]}
    assert set(seed) <= set(stats), sorted(stats)
    for name, tib in seed.items():
        quota = stats[name]["bucket_quota"]
        assert quota["enabled"] and quota["max_size"] == tib * TIB, (name, quota)
        assert stats[name]["owner"] == owners[name]
    seen = s3("""
print(json.dumps({uid: sorted(b['Name'] for b in client(uid).list_buckets()['Buckets']) for uid in keys}))
""")
    for uid, buckets in seen.items():
        assert buckets == sorted(n for n, o in owners.items() if o == uid), (uid, buckets)


def test_a_key_reaches_only_its_own_buckets(cluster):
    codes = s3("""
print(json.dumps({
    'own': code(lambda: client('juicefs').put_object(Bucket='training-data', Key='it-probe', Body=b'x')),
    'foreign_put': code(lambda: client('juicefs').put_object(Bucket='model-weights', Key='it-probe', Body=b'x')),
    'foreign_list': code(lambda: client('registry').list_objects_v2(Bucket='checkpoints')),
    'cleanup': code(lambda: client('juicefs').delete_object(Bucket='training-data', Key='it-probe')),
}))
""")
    assert codes == {"own": "ok", "foreign_put": "AccessDenied", "foreign_list": "AccessDenied", "cleanup": "ok"}


def test_a_write_past_a_bucket_quota_is_refused(cluster):
    """The role's own module sets a 1 MiB quota on a test bucket; a 2 MiB object is then refused."""
    users = [{"uid": "quota-test", "display_name": "integration test",
              "buckets": [{"name": "it-quota", "quota": "1Mi"}]}]
    run = sh("ansible", "-i", LAB_INVENTORY, RGW, "-b", "-m", "ai_platform.l1.ceph_rgw",
             "-a", json.dumps({"endpoint": ENDPOINT, "users": users}))
    assert run.returncode == 0, tail(run)
    try:
        codes = s3("""
print(json.dumps({
    'small': code(lambda: client('quota-test').put_object(Bucket='it-quota', Key='small', Body=b'x' * 1024)),
    'past_quota': code(lambda: client('quota-test').put_object(Bucket='it-quota', Key='big', Body=b'x' * 2097152)),
}))
""")
        assert codes == {"small": "ok", "past_quota": "QuotaExceeded"}
    finally:
        on(RGW, "sudo radosgw-admin bucket rm --bucket it-quota --purge-objects; "
                "sudo radosgw-admin user rm --uid quota-test")


# ---------------------------------------------------------------- the Kubernetes side (roles/k8s_storage)

def secret_data(namespace: str, name: str) -> dict[str, str]:
    data = kubectl_json(f"-n {namespace} get secret {name}")["data"]
    return {k: base64.b64decode(v).decode() for k, v in data.items()}


def test_the_csi_secret_and_cluster_map_are_the_ceph_clusters(cluster):
    secret = secret_data("storage", "csi-ceph-secret")
    key = on_ok(MON, "sudo ceph auth get-key client.csi-rbd").strip()
    assert secret == {"userID": "csi-rbd", "userKey": key}
    config = json.loads(kubectl_json("-n storage get configmap ceph-csi-config")["data"]["config.json"])
    assert config == [{"clusterID": "ceph-ai-platform", "monitors": [f"{RGW_ADDRESS}:6789"]}]
    classes = {c["metadata"]["name"]: c for c in kubectl_json("get storageclass")["items"]}
    assert {"ceph-rbd-ssd", "ceph-rbd-hdd", "juicefs-cache"} <= set(classes)
    assert classes["ceph-rbd-ssd"]["parameters"]["clusterID"] == "ceph-ai-platform"


def test_the_juicefs_secret_reaches_its_bucket_through_the_gateway(cluster):
    secret = secret_data("storage", "juicefs-secret")
    assert secret["bucket"] == f"{ENDPOINT}/training-data"
    result = s3(f"""
c = boto3.client('s3', endpoint_url='{ENDPOINT}', aws_access_key_id={secret['access-key']!r},
                 aws_secret_access_key={secret['secret-key']!r}, region_name='us-east-1')
print(json.dumps({{'put': code(lambda: c.put_object(Bucket='training-data', Key='it-jfs', Body=b'x')),
                  'delete': code(lambda: c.delete_object(Bucket='training-data', Key='it-jfs'))}}))
""")
    assert result == {"put": "ok", "delete": "ok"}


def test_every_rendered_object_passes_server_side_validation(cluster, tmp_path):
    """What roles/k8s_storage renders for both backends (the unit tests' inputs), MinIO's included, except the
    Tenant itself: its CRD is MinIO's (AGPL, not here); its pool's claim template is validated as a PVC."""
    objects = []
    for name, over in (("rgw", {}), ("minio", storage_render.MINIO)):
        (tmp_path / name).mkdir()
        rendered, secrets = storage_render.render(tmp_path / name, **over)
        for group in ("objects", "training_data_pvc", "minio", "minio_validation"):
            objects += rendered.get(group) or []
        for group in ("drivers", "minio"):
            objects += secrets.get(group) or []
    kinds = {o["kind"] for o in objects}
    assert {"StorageClass", "ConfigMap", "Secret", "PersistentVolumeClaim", "Job", "Tenant"} <= kinds, kinds
    checked = [o for o in objects if o["kind"] != "Tenant"]
    for o in checked:  # PVCs and Jobs go to the namespace that exists in the lab
        if o["kind"] in ("PersistentVolumeClaim", "Job"):
            o["metadata"]["namespace"] = "storage"
    proc = server_dry_run(checked)
    assert proc.returncode == 0, tail(proc)
    assert proc.stdout.count("(server dry run)") == len(checked), proc.stdout


def test_a_broken_storageclass_is_refused_by_the_api(cluster, tmp_path):
    rendered, _ = storage_render.render(tmp_path)
    broken = next(o for o in rendered["objects"] if o["kind"] == "StorageClass")
    broken = {**broken, "metadata": {"name": "it-broken"}, "reclaimPolicy": "Sometimes"}
    proc = server_dry_run([broken])
    assert proc.returncode != 0
    assert "reclaimPolicy" in proc.stdout + proc.stderr, tail(proc)


def test_juicefs_metadata_redis_takes_only_the_secrets_password_and_keeps_every_key(cluster):
    """The JuiceFS Secret's metaurl reaches the Redis roles/juicefs_metadata set up on the storage node."""
    metaurl = secret_data("storage", "juicefs-secret")["metaurl"]
    password, address = metaurl.removeprefix("redis://:").split("@", 1)
    host, port = address.split("/", 1)[0].split(":")
    base = f"redis-cli -h {host} -p {port} --no-auth-warning"
    assert on_ok(RGW, f"REDISCLI_AUTH={shlex.quote(password)} {base} PING").strip() == "PONG"
    assert "NOAUTH" in on(RGW, f"{base} PING").stdout + on(RGW, f"{base} PING").stderr
    config = on_ok(RGW, f"REDISCLI_AUTH={shlex.quote(password)} {base} CONFIG GET maxmemory-policy").split()
    assert config == ["maxmemory-policy", "noeviction"]
    aof = on_ok(RGW, f"REDISCLI_AUTH={shlex.quote(password)} {base} CONFIG GET appendonly").split()
    assert aof == ["appendonly", "yes"]
