"""etcd backups off the node on the lab (roles/etcd_backup, playbooks/etcd_backup.yml): every control
plane runs the timer, the leader of the moment takes the copy, each copy is a valid snapshot once
decrypted with the inventory's key, it lands in the lab's own Ceph gateway as a user who owns only
its bucket, the retention count holds, and a failed run is recorded in the metrics. Then the
restore drill: the etcd data of every control plane destroyed, `ai-l1-day2 restore-etcd` brings
the objects back from the newest copy while the workers' Pods keep running (its RTO printed).

The copies go to the bucket of inventories/lab/group_vars/all/etcd_backup.yml; S3 is read from a
control plane with the same credentials the program uses (python3-boto3 is there).
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
import yaml
from conftest import (
    CONTROL_PLANES,
    KUBECTL,
    LAB_INVENTORY,
    REPO,
    WORKERS,
    day2_tool,
    kubectl_json,
    not_ready_nodes,
    on,
    playbook,
    recap,
    record,
    tail,
    wait_for,
)

VARS = yaml.safe_load((LAB_INVENTORY / "group_vars" / "all" / "etcd_backup.yml").read_text())
PLAY = REPO / "playbooks" / "etcd_backup.yml"
CONFIG = "/etc/ai-l1/etcd-backup/config.json"
TEXTFILE = "/var/lib/node_exporter/textfile"
PKI = "/etc/kubernetes/pki/etcd"
ETCD_TLS = (f"--endpoints=https://127.0.0.1:2379 --cacert={PKI}/ca.crt "
            f"--cert={PKI}/healthcheck-client.crt --key={PKI}/healthcheck-client.key")


def tool(name: str) -> str:
    """etcdctl or etcdutl where the role installs them (the manifest's etcd release)."""
    manifest = yaml.safe_load((REPO / "artifacts" / "manifest.yml").read_text())
    version = next(a["version"] for a in manifest["artifacts"] if a["name"] == "etcd")
    return f"/opt/ai-platform/etcd/{version}/etcd-{version}-linux-amd64/{name}"


def s3(host: str, script: str) -> object:
    """A boto3 client `c` for the backup user on `host`; the script prints one JSON line."""
    program = (
        "import json, boto3, botocore\n"
        f"cfg = json.load(open({CONFIG!r}))['s3']\n"
        "c = boto3.client('s3', endpoint_url=cfg['endpoint'], aws_access_key_id=cfg['access_key'],\n"
        "                 aws_secret_access_key=cfg['secret_key'], region_name=cfg['region'])\n" + script)
    proc = on(host, f"sudo python3 -c {shlex.quote(program)}")
    assert proc.returncode == 0, tail(proc)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def copies(host: str) -> list[str]:
    prefix = VARS["etcd_backup_s3_prefix"] + "/"
    return s3(host, f"print(json.dumps(sorted(o['Key'] for o in c.list_objects_v2("
                    f"Bucket={VARS['etcd_backup_s3_bucket']!r}, Prefix={prefix!r}).get('Contents', []))))")


def leader() -> str:
    for host in CONTROL_PLANES:
        proc = on(host, f"sudo ETCDCTL_API=3 {tool('etcdctl')} {ETCD_TLS} endpoint status -w json")
        if proc.returncode == 0:
            status = json.loads(proc.stdout)[0]["Status"]
            if status["header"]["member_id"] == status["leader"]:
                return host
    pytest.fail("no control plane leads etcd")


def metrics(host: str) -> dict[str, float]:
    proc = on(host, f"cat {TEXTFILE}/etcd_backup_*.prom")
    return {line.split()[0]: float(line.split()[1]) for line in proc.stdout.splitlines()
            if line and not line.startswith("#")}


def test_every_control_plane_runs_the_timer(k8s_cluster):  # noqa: ARG001
    for host in CONTROL_PLANES:
        proc = on(host, "systemctl is-enabled ai-l1-etcd-backup.timer && systemctl is-active ai-l1-etcd-backup.timer")
        assert proc.stdout.split() == ["enabled", "active"], f"{host}: {proc.stdout}{proc.stderr}"


def test_the_rollout_left_a_copy_in_s3(k8s_cluster):  # noqa: ARG001
    assert copies(CONTROL_PLANES[0]), "site.yml took no first copy"


def test_the_leader_takes_a_copy_that_decrypts_to_a_valid_snapshot(k8s_cluster):  # noqa: ARG001
    host = leader()
    before = copies(host)
    run = on(host, "sudo systemctl start ai-l1-etcd-backup.service", timeout=600)
    assert run.returncode == 0, tail(run)
    after = copies(host)
    new = sorted(set(after) - set(before))
    assert len(new) == 1, (before, after)
    got = metrics(host)
    assert got["ai_l1_etcd_backup_last_attempt_success"] == 1
    # The benchmark figures: how long one copy takes (snapshot to upload checked) and its size.
    record("etcd_backup_duration_s", got["ai_l1_etcd_backup_last_duration_seconds"])
    print(f"etcd backup size: {got['ai_l1_etcd_backup_last_size_bytes'] / 2**20:.1f} MiB (encrypted)")
    assert got["ai_l1_etcd_backup_interval_seconds"] == 60 * VARS.get("etcd_backup_interval_minutes", 30)
    # Decrypted with the inventory's key, etcdutl reads it; its revision is the one the metric has.
    key = VARS["etcd_backup_encryption_key"]
    fetch = (f"c.download_file({VARS['etcd_backup_s3_bucket']!r}, {new[0]!r}, '/tmp/it-etcd.db.enc'); "
             "print(json.dumps(True))")
    assert s3(host, fetch) is True
    check = on(host, f"set -e; cd /tmp; printf %s {shlex.quote(key)} > it-key; "
                     "openssl enc -d -aes-256-cbc -pbkdf2 -iter 200000 -pass file:it-key "
                     "-in it-etcd.db.enc -out it-etcd.db; "
                     f"sudo {tool('etcdutl')} snapshot status it-etcd.db -w json; rm -f it-key it-etcd.db*")
    assert check.returncode == 0, tail(check)
    status = json.loads(check.stdout.strip().splitlines()[-1])
    assert status["totalKey"] > 100 and status["revision"] == got["ai_l1_etcd_backup_last_revision"]


def test_a_member_that_does_not_lead_takes_no_copy(k8s_cluster):  # noqa: ARG001
    follower = next(h for h in CONTROL_PLANES if h != leader())
    before = copies(follower)
    run = on(follower, "sudo /usr/local/sbin/ai-l1-etcd-backup")
    assert run.returncode == 0 and "does not lead" in run.stdout, tail(run)
    assert copies(follower) == before


def test_retention_keeps_the_newest_copies(k8s_cluster):  # noqa: ARG001
    host = leader()
    for _ in range(VARS["etcd_backup_retention"] + 1):
        assert on(host, "sudo /usr/local/sbin/ai-l1-etcd-backup", timeout=600).returncode == 0
    kept = copies(host)
    assert len(kept) == VARS["etcd_backup_retention"], kept


def test_the_backup_user_reaches_only_its_bucket(k8s_cluster):  # noqa: ARG001
    code = s3(CONTROL_PLANES[0], "try:\n    c.list_objects_v2(Bucket='model-weights'); print(json.dumps('ok'))\n"
                                 "except botocore.exceptions.ClientError as e:\n"
                                 "    print(json.dumps(e.response['Error']['Code']))")
    assert code == "AccessDenied"


def test_a_failed_run_is_recorded_and_the_rollout_puts_the_configuration_back(k8s_cluster):  # noqa: ARG001
    host = leader()
    broken = on(host, f"sudo python3 -c \"import json; p={CONFIG!r}; c=json.load(open(p)); "
                      "c['s3']['secret_key']='wrong'; json.dump(c, open(p, 'w'))\"")
    assert broken.returncode == 0, tail(broken)
    run = on(host, "sudo systemctl start ai-l1-etcd-backup.service", timeout=600)
    assert run.returncode != 0
    assert metrics(host)["ai_l1_etcd_backup_last_attempt_success"] == 0
    fixed = playbook(PLAY)
    assert fixed.returncode == 0, tail(fixed)
    assert recap(fixed.stdout)[host]["changed"] >= 1  # the configuration, then a copy to prove it
    assert metrics(CONTROL_PLANES[0])["ai_l1_etcd_backup_last_attempt_success"] == 1
    again = playbook(PLAY)
    assert again.returncode == 0 and all(s["changed"] == 0 for s in recap(again.stdout).values()), tail(again)


# ---- the restore drill (ai-l1-day2 restore-etcd)

# Kinds counted before the snapshot and after the restore (cluster-wide).
KINDS = ("namespaces", "configmaps", "secrets", "serviceaccounts", "services", "deployments", "daemonsets",
         "nodes", "clusterroles", "clusterrolebindings", "customresourcedefinitions", "pods")
MARKER_NS = "restore-drill"


def restore(*args: str, timeout: int = 900) -> subprocess.CompletedProcess:
    return day2_tool("restore-etcd", *args, timeout=timeout)


def counts() -> dict[str, int]:
    return {kind: len(kubectl_json(f"get {kind} -A")["items"]) for kind in KINDS}


def worker_pods() -> dict[str, tuple]:
    """The workers' running Pods: uid -> (namespace, name, restart counts)."""
    pods = kubectl_json("get pods -A --field-selector status.phase=Running")["items"]
    return {p["metadata"]["uid"]: (p["metadata"]["namespace"], p["metadata"]["name"],
                                   tuple(c.get("restartCount", 0) for c in p["status"].get("containerStatuses", [])))
            for p in pods if p["spec"].get("nodeName") in WORKERS}


def destroy_etcd(host: str) -> subprocess.CompletedProcess:
    """Stop the member, delete its data, start it again on the empty directory."""
    return on(host, "set -e; sudo mv /etc/kubernetes/manifests/etcd.yaml /root/etcd.yaml.drill; "
                    "for i in $(seq 90); do ss -Hltn 'sport = :2379' | grep -q . || break; sleep 1; done; "
                    "sudo rm -rf /var/lib/etcd; sudo mv /root/etcd.yaml.drill /etc/kubernetes/manifests/etcd.yaml",
              timeout=180)


def test_restore_is_refused_while_a_quorum_is_healthy(k8s_cluster):  # noqa: ARG001
    proc = restore()
    assert proc.returncode == 2, tail(proc)
    assert "healthy quorum" in proc.stdout + proc.stderr, tail(proc)
    assert not on(CONTROL_PLANES[0], "sudo test -e /etc/kubernetes/ai-l1-restore").returncode == 0


def test_restore_after_every_member_lost_its_data(k8s_cluster):  # noqa: ARG001
    marker = os.urandom(8).hex()
    namespace = f"{MARKER_NS}-{marker[:6]}"
    cp = CONTROL_PLANES[0]
    made = on(cp, f"{KUBECTL} create namespace {namespace} && "
                  f"{KUBECTL} -n {namespace} create configmap marker --from-literal=value={marker}")
    assert made.returncode == 0, tail(made)
    before, running = counts(), worker_pods()
    snap = on(leader(), "sudo /usr/local/sbin/ai-l1-etcd-backup", timeout=600)
    assert snap.returncode == 0, tail(snap)
    with ThreadPoolExecutor(len(CONTROL_PLANES)) as pool:
        for host, proc in zip(CONTROL_PLANES, pool.map(destroy_etcd, CONTROL_PLANES), strict=True):
            assert proc.returncode == 0, f"{host}: {tail(proc)}"
    lost = on(cp, f"{KUBECTL} --request-timeout=10s -n {namespace} get configmap marker", timeout=60)
    assert lost.returncode != 0, "the API still serves the ConfigMap: the data was not destroyed"

    t0 = time.monotonic()
    proc = restore()
    assert proc.returncode == 0, tail(proc, 120)
    wait_for("the API through the VIP", lambda: on(cp, f"{KUBECTL} get --raw /readyz").returncode == 0, 300, 1)
    record("etcd_restore_rto_s", time.monotonic() - t0)  # from the command to the API answering
    assert json.loads(proc.stdout)["status"] == "successful"

    got = kubectl_json(f"-n {namespace} get configmap marker")
    assert got["data"]["value"] == marker
    wait_for("the same objects", lambda: counts() == before, 120, 5)
    # The workers' Pods ran through it: the same Pods (none replaced), no workload container restarted.
    # A controller that holds a leader lease (Kueue's, Volcano's) exits when the API is gone longer
    # than its lease and the kubelet restarts it in place: allowed in the *-system namespaces only.
    still = worker_pods()
    assert set(running) <= set(still), [running[uid][0] for uid in set(running) - set(still)]
    restarted = {running[uid][:2]: (running[uid][2], still[uid][2]) for uid in running
                 if still[uid][2] != running[uid][2]}
    print("restarted during the restore:", restarted)
    assert [ns_name for ns_name in restarted if not ns_name[0].endswith("-system")] == []
    assert not_ready_nodes() == []
    members = on(cp, f"sudo ETCDCTL_API=3 {tool('etcdctl')} {ETCD_TLS} member list -w json")
    assert len(json.loads(members.stdout)["members"]) == len(CONTROL_PLANES), tail(members)
    for host in CONTROL_PLANES:
        on(host, "sudo rm -rf /var/lib/etcd.before-restore-*")
    on(cp, f"{KUBECTL} delete namespace {namespace} --wait=false")
