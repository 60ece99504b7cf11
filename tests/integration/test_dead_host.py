"""A host that dies in the middle of site.yml: the run goes on for the others.

gpu2 is killed while site.yml runs (its container stops the moment the run reaches the
Kubernetes layer, the layer whose pod-routes template once read a fact from every host). The run
must go on for the other hosts (they finish every later layer), report gpu2 unreachable and exit
non-zero, leave every host's cached facts readable, keep routing to gpu2's pods (Calico: gpu1's
route to gpu2's address block through the VXLAN tunnel; the bridge plugin: the route from the API's
Node, not from gpu2's facts), and a re-run after gpu2 is back converges it with no manual step.
The run that kills gpu2 covers the layers from Kubernetes on (kubernetes, labels: the Node labels
are reconciled in one call for the batch) on one control plane and the three workers; the re-run,
limited to gpu2 as an operator would after a host came back, covers every layer a worker passes
through (baseline, kubernetes, labels): the restart lost what the kernel held.
"""

from __future__ import annotations

import json
import subprocess
import time

import yaml
from conftest import (
    CONTROL_PLANES,
    ENV,
    LAB_INVENTORY,
    LAB_NAME,
    REPO,
    SITE,
    kubectl_json,
    on,
    playbook,
    recap,
    record,
    sh,
    tail,
    wait_for,
    wait_nodes_ready,
)

VICTIM = "gpu2"
TAGS = "kubernetes,labels"
# One control plane is enough for the workers' layers; the other two would only add batches.
LIMIT = ",".join([CONTROL_PLANES[0], "gpu1", VICTIM, "npu1"])
RERUN_TAGS = "baseline,kubernetes,labels"
KILL_AT = "PLAY [Container runtime and node binaries]"
LAST_PLAY = "PLAY [Accelerator node labels]"
FACTS = REPO / ".cache" / "ansible-facts"
CNI = yaml.safe_load((LAB_INVENTORY / "group_vars" / "all" / "k8s.yml").read_text())["k8s_cni_plugin"]


def run_site_killing(container: str) -> tuple[subprocess.CompletedProcess, float | None]:
    """site.yml with the layers' tags; `container` is killed when the run reaches KILL_AT."""
    cmd = ["ansible-playbook", "-i", str(LAB_INVENTORY), str(SITE), "--tags", TAGS, "--limit", LIMIT]
    proc = subprocess.Popen(cmd, cwd=REPO, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines, killed_at = [], None
    t0 = time.monotonic()
    for line in proc.stdout:
        lines.append(line)
        if killed_at is None and line.startswith(KILL_AT):
            sh("podman", "kill", container, check=True)
            killed_at = time.monotonic() - t0
    rc = proc.wait(timeout=1800)
    return subprocess.CompletedProcess(cmd, rc, "".join(lines), ""), killed_at


def test_a_host_killed_mid_run_does_not_stop_the_others(k8s_cluster):  # noqa: ARG001 (needs the cluster)
    container = f"{LAB_NAME}-{VICTIM}"
    node = kubectl_json(f"get node {VICTIM}")
    pod_cidr = node["spec"]["podCIDR"]
    address = next(a["address"] for a in node["status"]["addresses"] if a["type"] == "InternalIP")
    try:
        t0 = time.monotonic()
        run, killed_at = run_site_killing(container)
        record("dead_host_killed_run_s", time.monotonic() - t0)
        assert killed_at is not None, f"the run never reached {KILL_AT!r}:\n{tail(run, 60)}"
        stats = recap(run.stdout)
        assert run.returncode != 0, "a run with an unreachable host must not exit 0"
        assert stats[VICTIM]["unreachable"] == 1, stats
        others = {h: s for h, s in stats.items() if h != VICTIM}
        assert all(s["failed"] == 0 and s["unreachable"] == 0 for s in others.values()), tail(run, 120)
        # The others went on to the last layer.
        last = run.stdout.split(LAST_PLAY, 1)
        assert len(last) == 2, f"the run stopped before {LAST_PLAY!r}:\n{tail(run, 120)}"
        for host in ("gpu1", "npu1"):
            assert f"[{host}" in last[1], f"{host} did not run the labels layer:\n{tail(run, 120)}"
        # No cached fact file was left half-written.
        for path in FACTS.iterdir():
            json.loads(path.read_text())
        if CNI == "calico":
            # Felix on gpu1 keeps its route to every block Calico's IPAM gave gpu2, through the tunnel.
            blocks = [b["spec"]["cidr"] for b in kubectl_json("get blockaffinities.crd.projectcalico.org")["items"]
                      if b["spec"]["node"] == VICTIM]
            assert blocks, "Calico's IPAM gave gpu2 no address block"
            for block in blocks:
                route = on("gpu1", f"ip route show {block}")
                assert "dev vxlan.calico" in route.stdout, (block, route.stdout)
        else:
            # gpu1's routes come from the API's Nodes, gpu2's facts or not.
            routes = on("gpu1", "cat /usr/local/sbin/ai-platform-pod-routes")
            assert f"ip route replace {pod_cidr} via {address}" in routes.stdout, routes.stdout
    finally:
        sh("podman", "start", container, check=True)
    wait_for(f"{VICTIM} answering over SSH", lambda: on(VICTIM, "true", timeout=20).returncode == 0, timeout=180)
    assert not wait_nodes_ready(CONTROL_PLANES[0], timeout=300), f"{VICTIM} not Ready after its restart"

    # The kill above runs under the default (linear) strategy; the re-run, like the tests' other runs, under mitogen.
    t0 = time.monotonic()
    again = playbook(SITE, "--tags", RERUN_TAGS, "--limit", VICTIM)
    record("dead_host_rerun_s", time.monotonic() - t0)
    assert again.returncode == 0, f"the re-run after {VICTIM} came back failed:\n{tail(again, 150)}"
    assert all(s["failed"] == 0 and s["unreachable"] == 0 for s in recap(again.stdout).values())

