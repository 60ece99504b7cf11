#!/usr/bin/env python3
"""Local podman lab: one privileged systemd container per inventory host.

    labctl.py image            build the node image (only when lab/image/ changed)
    labctl.py up               bring the lab up (idempotent; cleans up after itself on failure)
    labctl.py down             remove the lab: containers, volumes, network, cached facts
    labctl.py status           show the nodes
    labctl.py hooks            (re)run hardware profile hooks whose files changed
    labctl.py ssh HOST [CMD]   open a shell on a node over SSH, as Ansible does

The nodes come from the lab inventory (-i, default inventories/lab/hosts.yml): every host
with `ansible_host` and `lab_hardware_profile`; `all.vars` gives lab_name, lab_network and
lab_subnet, and `lab_planes`: more networks every node is on (the seed's storage and compute planes,
4.4.1), each `{network, subnet, interface}`, the node at the same last octet as its `ansible_host`;
`lab_cpu_shares`: the CPU weight of all the lab's nodes together against the host's other work
(cpu_group below).
Molecule uses the same code through --spec (a JSON node list, see
lab/molecule/create.yml), so role tests and the lab start nodes the same way.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import json
import os
import shlex
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
IMAGE_DIR = REPO / "lab" / "image"
IMAGE_REPO = "localhost/ai-l1-node"
CACHE_DIR = Path(os.environ.get("AI_L1_CACHE", "/var/cache/ai-l1"))
SSH_KEY = REPO / ".lab" / "ssh" / "id_ed25519"
# The user Ansible connects as (inventories/lab, the molecule base config); the image gives it
# passwordless sudo.
ANSIBLE_USER = "ops"
FACTS_DIR = REPO / ".cache" / "ansible-facts"
DEFAULT_INVENTORY = REPO / "inventories" / "lab" / "hosts.yml"
DEFAULT_PROFILES = REPO / "tests" / "hardware" / "profiles"
LABEL = "ai-l1-lab"
# runc on this kernel refuses limits above the host's; these are what systemd and
# containerd need and what the host allows.
PODMAN_RUN_FLAGS = [
    "--privileged",
    # A cgroup namespace of its own, so the node's kubelet and systemd see their own cgroups
    # at the hierarchy roots (kind's v1 problem). Not podman's systemd mode: on this cgroup v1
    # host it mounts the host's name=systemd root into the node, every node's systemd then
    # shares it, and a node that stops trims the others' cgroups (podman exec breaks for all).
    # systemd as PID 1 needs only these tmpfs mounts (the image's CMD is /sbin/init and it
    # sets STOPSIGNAL and container=podman).
    "--systemd=false",
    "--cgroupns=private",
    "--tmpfs=/run",
    "--tmpfs=/run/lock",
    "--tmpfs=/tmp",
    "--ulimit=nofile=20000:20000",
    "--ulimit=nproc=4096:4096",
]
# Inside the node, where labctl records which profile hook revision it installed.
HOOK_STAMP = "/var/lib/ai-l1-lab/profile-hook.sha256"
# Where a node with lab_disks gets its disk volume (the storage profile's disk files).
LAB_DISKS = "/var/lib/ai-l1-lab/disks"
SSH_OPTS = [
    "-o", "BatchMode=yes",
    "-o", "StrictHostKeyChecking=no",
    "-o", "UserKnownHostsFile=/dev/null",
    "-o", "LogLevel=ERROR",
    "-o", "ConnectTimeout=5",
]
BOOT_TIMEOUT = 180
HOOK_TIMEOUT = 900
CGROUP_ROOT = Path("/sys/fs/cgroup")


class LabError(Exception):
    """A failure with the node and step it happened in."""

    def __init__(self, node: str, step: str, detail: str) -> None:
        super().__init__(f"{node}: {step} failed: {detail}")
        self.node, self.step, self.detail = node, step, detail


def log(msg: str) -> None:
    print(f"labctl: {msg}", flush=True)


def run(cmd: list[str], *, check: bool = True, timeout: float | None = None,
        input_text: str | None = None) -> subprocess.CompletedProcess:
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                          input=input_text, check=False)
    if check and proc.returncode != 0:
        raise subprocess.CalledProcessError(proc.returncode, cmd, proc.stdout, proc.stderr)
    return proc


def podman(*args: str, check: bool = True, timeout: float | None = None,
           input_text: str | None = None) -> subprocess.CompletedProcess:
    return run(["podman", *args], check=check, timeout=timeout, input_text=input_text)


def err_text(exc: subprocess.CalledProcessError) -> str:
    out = (exc.stderr or "") + (exc.stdout or "")
    return " ".join(out.strip().splitlines()[-5:]) or f"exit {exc.returncode}"


@contextlib.contextmanager
def locked(name: str):
    """Serialise labctl runs that touch the same thing (engineers and CI share a host)."""
    lock_dir = CACHE_DIR / "locks"
    lock_dir.mkdir(parents=True, exist_ok=True)
    with open(lock_dir / f"{name}.lock", "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        yield


# ---------------------------------------------------------------- image

def recipe_hash() -> str:
    digest = hashlib.sha256()
    for path in sorted(p for p in IMAGE_DIR.rglob("*") if p.is_file()):
        digest.update(str(path.relative_to(IMAGE_DIR)).encode() + b"\0")
        digest.update(path.read_bytes() + b"\0")
    return digest.hexdigest()[:12]


def ensure_image() -> str:
    """Return the image reference for the current recipe, building it only when missing."""
    tag = recipe_hash()
    ref = f"{IMAGE_REPO}:{tag}"
    with locked("image"):
        if podman("image", "exists", ref, check=False).returncode != 0:
            tarball = CACHE_DIR / "images" / f"ai-l1-node-{tag}.tar"
            tarball.parent.mkdir(parents=True, exist_ok=True)
            if not tarball.exists():
                t0 = time.monotonic()
                log(f"building node image {ref} (recipe changed or no cache)")
                proc = subprocess.run(["bash", str(IMAGE_DIR / "build.sh"), str(tarball)],
                                      check=False)
                if proc.returncode != 0:
                    raise LabError("image", "build", f"lab/image/build.sh exited {proc.returncode}")
                log(f"rootfs built in {time.monotonic() - t0:.1f}s")
            t0 = time.monotonic()
            podman("import", "--change", 'CMD ["/sbin/init"]',
                   "--change", "STOPSIGNAL SIGRTMIN+3",
                   "--change", "ENV container=podman",
                   str(tarball), ref)
            log(f"imported {ref} in {time.monotonic() - t0:.1f}s")
        current = podman("image", "inspect", "--format", "{{.Id}}", ref).stdout.strip()
        have = podman("image", "inspect", "--format", "{{.Id}}", f"{IMAGE_REPO}:current",
                      check=False).stdout.strip()
        if have != current:
            podman("tag", ref, f"{IMAGE_REPO}:current")
            # Older recipes' tarballs and images (unless a container still uses one).
            for old in (CACHE_DIR / "images").glob("ai-l1-node-*.tar"):
                if old.name != f"ai-l1-node-{tag}.tar":
                    old.unlink()
            tags = podman("images", "--format", "{{.Repository}}:{{.Tag}}", IMAGE_REPO).stdout
            for old_ref in tags.split():
                if old_ref not in (ref, f"{IMAGE_REPO}:current"):
                    podman("rmi", old_ref, check=False)
    return ref


# ---------------------------------------------------------------- lab model

@dataclass
class Node:
    host: str
    container: str
    profile: str | None
    ip: str | None = None
    labels: dict[str, str] = field(default_factory=dict)
    # A volume for simulated disks (inventory host var lab_disks: true): a storage node's OSDs
    # keep BlueStore in files there (BlueStore's direct I/O needs a backing that is not overlayfs).
    disks: bool = False

    @property
    def volume(self) -> str:
        # containerd's overlayfs snapshotter needs a backing dir that is not overlayfs.
        return f"{self.container}-containerd"

    @property
    def volumes(self) -> dict[str, str]:
        """Volume name -> mount point in the node."""
        vols = {self.volume: "/var/lib/containerd"}
        if self.disks:
            vols[f"{self.container}-disks"] = LAB_DISKS
        return vols


@dataclass
class Plane:
    """A network beside the management one: the node's `interface` at its host number in `subnet`."""
    network: str
    subnet: str
    interface: str

    def address(self, management_ip: str) -> str:
        return ".".join(self.subnet.split("/")[0].split(".")[:3] + [management_ip.split(".")[3]])


@dataclass
class Lab:
    name: str
    network: str
    subnet: str | None
    nodes: list[Node]
    # A network labctl does not own (molecule uses podman's default one): never created
    # or removed here.
    external_network: bool = False
    planes: list[Plane] = field(default_factory=list)
    # The CPU weight of the nodes as one group (cgroup v1 cpu.shares, 1024 the weight of one
    # process); None: podman's default parent.
    cpu_shares: int | None = None
    # Set by cmd_up from cpu_shares: the cgroup parent the new nodes start in.
    cgroup_parent: str | None = None

    @property
    def networks(self) -> dict[str, str | None]:
        """Every network labctl owns: name -> subnet."""
        return {self.network: self.subnet, **{p.network: p.subnet for p in self.planes}}

    @property
    def labels(self) -> list[str]:
        return [f"--label={LABEL}=1", f"--label={LABEL}.name={self.name}"]


def _walk_group(group: dict, hosts: dict[str, dict]) -> None:
    for host, hvars in ((group or {}).get("hosts") or {}).items():
        hosts.setdefault(host, {}).update(hvars or {})
    for child in ((group or {}).get("children") or {}).values():
        _walk_group(child, hosts)


def lab_from_inventory(path: Path) -> Lab:
    if path.is_dir():
        path = path / "hosts.yml"
    data = yaml.safe_load(path.read_text()) or {}
    top = data.get("all", data)
    lab_vars = (top.get("vars") or {})
    hosts: dict[str, dict] = {}
    _walk_group(top, hosts)
    name = lab_vars.get("lab_name", "ai-l1")
    nodes = []
    for host, hvars in hosts.items():
        missing = [v for v in ("ansible_host", "lab_hardware_profile") if v not in hvars]
        if missing:
            raise LabError(host, "inventory", f"{path} sets no {', '.join(missing)} for {host}")
        nodes.append(Node(host, f"{name}-{host}", hvars["lab_hardware_profile"],
                          ip=hvars["ansible_host"], disks=bool(hvars.get("lab_disks", False))))
    if not nodes:
        raise LabError("inventory", "read", f"{path} has no hosts")
    planes = []
    for plane in (lab_vars.get("lab_planes") or {}).values():
        if not all(plane.get(k) for k in ("network", "subnet", "interface")) or not plane["subnet"].endswith("/24"):
            raise LabError("inventory", "read",
                           f"{path}: each lab_planes entry needs network, interface and a /24 subnet")
        planes.append(Plane(plane["network"], plane["subnet"], plane["interface"]))
    shares = lab_vars.get("lab_cpu_shares")
    if shares is not None and (not isinstance(shares, int) or isinstance(shares, bool) or not 2 <= shares <= 262144):
        raise LabError("inventory", "read", f"{path}: lab_cpu_shares must be a whole number from 2 to 262144")
    return Lab(name, lab_vars.get("lab_network", f"{name}-lab"), lab_vars.get("lab_subnet"),
               nodes, planes=planes, cpu_shares=shares)


def lab_from_spec(path: Path) -> Lab:
    """A node list written by the molecule create playbook."""
    spec = json.loads(path.read_text())
    nodes = [Node(n["host"], n.get("container", n["host"]), n.get("profile"),
                  ip=n.get("ip"), labels=n.get("labels", {})) for n in spec["nodes"]]
    return Lab(spec["lab_name"], spec.get("network", "podman"), spec.get("subnet"), nodes,
               external_network=spec.get("external_network", True))


# ---------------------------------------------------------------- node steps

def containers(lab: Lab) -> dict[str, dict]:
    out = podman("ps", "-a", "--filter", f"label={LABEL}.name={lab.name}",
                 "--format", "json").stdout
    return {c["Names"][0]: c for c in json.loads(out or "[]")}


def ensure_ssh_key() -> str:
    if not SSH_KEY.exists():
        SSH_KEY.parent.mkdir(parents=True, exist_ok=True)
        os.chmod(SSH_KEY.parent, 0o700)
        run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "ai-l1-lab",
             "-f", str(SSH_KEY)])
        log(f"created lab SSH key {SSH_KEY}")
    return SSH_KEY.with_suffix(".pub").read_text()


def node_ip(node: Node, lab: Lab) -> str:
    out = podman("inspect", "--format", "{{json .NetworkSettings.Networks}}",
                 node.container).stdout
    nets = json.loads(out or "{}")
    net = nets.get(lab.network) or next(iter(nets.values()), {})
    return net.get("IPAddress", "")


def ssh_cmd(node: Node, *command: str) -> list[str]:
    return ["ssh", *SSH_OPTS, "-i", str(SSH_KEY), f"root@{node.ip}", *command]


def profile_hook(node: Node, profiles: Path) -> tuple[Path | None, str]:
    """The hook script and a digest of its profile directory (empty when no hook)."""
    if not node.profile:
        return None, ""
    hook = profiles / node.profile / "install.sh"
    if not hook.is_file():
        return None, ""
    digest = hashlib.sha256()
    for path in sorted(p for p in hook.parent.rglob("*") if p.is_file()):
        digest.update(str(path.relative_to(hook.parent)).encode() + b"\0" + path.read_bytes())
    return hook, digest.hexdigest()


def run_hook(node: Node, profiles: Path, force: bool = False) -> str:
    hook, digest = profile_hook(node, profiles)
    if hook is None:
        return f"no hook for profile {node.profile!r}"
    if not force:
        have = podman("exec", node.container, "cat", HOOK_STAMP, check=False).stdout.strip()
        if have == digest:
            return "profile hook up to date"
    try:
        proc = subprocess.run(["bash", str(hook), node.container], cwd=REPO, check=False,
                              capture_output=True, text=True, timeout=HOOK_TIMEOUT,
                              env={**os.environ, "AI_L1_LAB_HOST": node.host})
    except subprocess.TimeoutExpired as exc:
        raise LabError(node.host, "profile hook", f"{hook} timed out") from exc
    if proc.returncode != 0:
        tail = "\n    ".join((proc.stdout + proc.stderr).strip().splitlines()[-15:])
        raise LabError(node.host, "profile hook",
                       f"{hook.relative_to(REPO) if hook.is_relative_to(REPO) else hook} "
                       f"{node.container} exited {proc.returncode}:\n    {tail}")
    podman("exec", node.container, "sh", "-c",
           f"mkdir -p {os.path.dirname(HOOK_STAMP)} && echo {digest} > {HOOK_STAMP}")
    return f"profile hook {node.profile} installed"


def wait_booted(node: Node) -> str:
    deadline = time.monotonic() + BOOT_TIMEOUT
    while True:
        try:
            proc = podman("exec", node.container, "systemctl", "is-system-running", "--wait",
                          check=False, timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired as exc:
            raise LabError(node.host, "systemd boot", f"not up after {BOOT_TIMEOUT}s") from exc
        state = proc.stdout.strip()
        # Right after start PID 1 has not opened its bus yet (no answer, or "offline" while
        # systemctl cannot reach the manager): ask again.
        if (state and state != "offline") or time.monotonic() > deadline:
            break
        time.sleep(0.3)
    if state == "degraded":
        failed = podman("exec", node.container, "systemctl", "--failed", "--plain",
                        "--no-legend", check=False).stdout.split("\n")
        log(f"{node.host}: systemd degraded, failed units: "
            + ", ".join(line.split()[0] for line in failed if line.strip()))
    elif state != "running":
        raise LabError(node.host, "systemd boot", f"state {state!r} {proc.stderr.strip()}")
    if podman("exec", node.container, "systemctl", "is-active", "ssh",
              check=False).returncode != 0:
        raise LabError(node.host, "sshd", "ssh.service is not active")
    return state


def install_key(node: Node, pubkey: str) -> None:
    """The lab key for root (labctl and the tests) and for ops (Ansible; sudo to root)."""
    for user, home in (("root", "/root"), (ANSIBLE_USER, f"/home/{ANSIBLE_USER}")):
        keys = f"{home}/.ssh/authorized_keys"
        have = podman("exec", node.container, "cat", keys, check=False).stdout
        if pubkey.strip() in have:
            continue
        podman("exec", "-i", node.container, "sh", "-c",
               f"umask 077; mkdir -p {home}/.ssh; cat >> {keys}; chown -R {user}: {home}/.ssh",
               input_text=pubkey)


def check_ssh(node: Node, attempts: int = 10) -> None:
    detail = ""
    for _ in range(attempts):
        proc = run(ssh_cmd(node, "true"), check=False, timeout=30)
        if proc.returncode == 0:
            return
        detail = proc.stderr.strip()
        time.sleep(1)
    raise LabError(node.host, "ssh check", f"ssh root@{node.ip} failed: {detail}")


def create_node(node: Node, lab: Lab, image: str) -> None:
    """Start a new node; raises LabError naming the step that failed."""
    try:
        for volume in node.volumes:
            podman("volume", "create", *lab.labels, volume)
        networks = ["--network", lab.network]
        if lab.planes and node.ip and not lab.external_network:
            # The management network first as eth0, then each plane on its own interface.
            networks = ["--network", f"{lab.network}:ip={node.ip},interface_name=eth0"]
            for plane in lab.planes:
                networks += ["--network", f"{plane.network}:ip={plane.address(node.ip)},"
                                          f"interface_name={plane.interface}"]
        args = ["run", "-d", "--name", node.container, "--hostname", node.host,
                *networks, *PODMAN_RUN_FLAGS, *lab.labels,
                f"--label={LABEL}.host={node.host}",
                *[f"--label={k}={v}" for k, v in node.labels.items()],
                *[arg for volume, where in node.volumes.items() for arg in ("-v", f"{volume}:{where}")]]
        if node.ip and not lab.external_network and not lab.planes:
            args += ["--ip", node.ip]
        if lab.cgroup_parent:
            args += ["--cgroup-parent", lab.cgroup_parent]
        podman(*args, image)
    except subprocess.CalledProcessError as exc:
        raise LabError(node.host, "podman run", err_text(exc)) from exc


def healthy(node: Node, lab: Lab, profiles: Path, hooks: bool) -> str | None:
    """One SSH round trip for a node that is already up: booted, reachable, profile current."""
    if lab.external_network or not node.ip:
        node.ip = node_ip(node, lab)
    proc = run(ssh_cmd(node, f"cat {HOOK_STAMP} 2>/dev/null || echo none; "
                       "systemctl is-system-running"), check=False, timeout=30)
    lines = proc.stdout.split()
    if proc.returncode not in (0, 1) or len(lines) != 2 or lines[1] not in ("running", "degraded"):
        return None
    _, digest = profile_hook(node, profiles)
    if hooks and digest and lines[0] != digest:
        return None
    return lines[1]


def bring_up(node: Node, lab: Lab, image: str, pubkey: str, profiles: Path, *,
             new: bool, hooks: bool) -> str:
    t0 = time.monotonic()
    if new:
        create_node(node, lab, image)
    elif state := healthy(node, lab, profiles, hooks):
        return f"{node.host}: ok ({state}) ssh root@{node.ip} {time.monotonic() - t0:.1f}s"
    try:
        state = wait_booted(node)
        install_key(node, pubkey)
    except subprocess.CalledProcessError as exc:
        raise LabError(node.host, "authorized key", err_text(exc)) from exc
    node.ip = node.ip if (node.ip and not lab.external_network) else node_ip(node, lab)
    hook = run_hook(node, profiles) if hooks else "hooks left to the caller"
    check_ssh(node)
    return (f"{node.host}: {'created' if new else 'ok'} ({state}, {hook}) "
            f"ssh root@{node.ip} {time.monotonic() - t0:.1f}s")


def remove(lab: Lab, names: list[str], volumes: list[str], network: bool) -> None:
    if names:
        podman("rm", "-f", "-t", "0", *names, check=False, timeout=120)
    if volumes:
        podman("volume", "rm", "-f", *volumes, check=False)
    if network:
        for name in lab.networks:
            remove_network(name)


def remove_network(name: str, tries: int = 10, pause: float = 1.0) -> bool:
    """podman network rm, again while it fails: on a loaded host a just-removed container can
    still hold the network for a moment ("network is being used"), and a failed cleanup run once
    left a test lab's network behind. True when the network is gone; a line says when it is not."""
    for attempt in range(tries):
        proc = podman("network", "rm", "-f", name, check=False, timeout=120)
        if podman("network", "exists", name, check=False).returncode != 0:
            return True
        if attempt + 1 < tries:
            time.sleep(pause)
    log(f"network {name} not removed: {(proc.stderr or proc.stdout or '').strip()[-300:]}")
    return False


# ---------------------------------------------------------------- commands

def cmd_image(_lab: Lab | None, _args) -> int:
    t0 = time.monotonic()
    ref = ensure_image()
    log(f"image {ref} (also {IMAGE_REPO}:current) ready in {time.monotonic() - t0:.1f}s")
    return 0


def drop_stopped(lab: Lab, existing: dict[str, dict]) -> None:
    """Remove the containers (and volumes) of nodes that are not running, and forget them in
    `existing`, so that they are created anew. A node whose container stopped (a killed
    session, a host reboot) is rebuilt, not restarted: its systemd and Kubernetes state stopped
    mid-flight, and a restarted one was seen to exit at once ("cannot exec in a stopped container")."""
    stopped = [n for n in lab.nodes if n.container in existing and existing[n.container].get("State") != "running"]
    if not stopped:
        return
    log("rebuilding stopped nodes: " + ", ".join(f"{n.host} ({existing[n.container].get('State')})" for n in stopped))
    remove(lab, [n.container for n in stopped], [v for n in stopped for v in n.volumes], False)
    for n in stopped:
        existing.pop(n.container)


def create_networks(lab: Lab) -> bool:
    """The lab's networks that do not exist yet; True when one was created."""
    created = False
    if lab.external_network:
        return created
    for net, subnet in lab.networks.items():
        if podman("network", "exists", net, check=False).returncode == 0:
            continue
        net_args = ["network", "create", *lab.labels]
        if net in {p.network for p in lab.planes}:
            # A plane carries node-to-node traffic only, as in a data centre: no gateway, so no
            # second default route that could become a node's "default address".
            net_args.append("--internal")
        if subnet:
            net_args += ["--subnet", subnet]
        podman(*net_args, net)
        created = True
    return created


def cpu_group(lab: Lab, podman_host: dict) -> str | None:
    """The cgroup parent for the lab's nodes, weighted lab.cpu_shares against the host's other work.

    Every podman container shares one parent by default (cgroupfs: libpod_parent, weight 1024):
    seven nodes together then weigh as much as one process on the host, and a test run beside the
    lab (a linter, pytest workers, molecule's nodes) starves etcd until its writes time out. A
    parent of their own with a weight of several processes keeps the lab's control loops on time
    while the rest use what it leaves. Applied where podman manages cgroups itself (cgroupfs,
    v1 or v2); under systemd's manager the nodes keep podman's default and a line says so.
    `podman_host`: the `host` part of `podman info`."""
    if lab.cpu_shares is None:
        return None
    manager, version = podman_host.get("cgroupManager"), podman_host.get("cgroupVersion")
    if manager != "cgroupfs":
        log(f"lab_cpu_shares not applied: podman's cgroup manager is {manager}, not cgroupfs")
        return None
    parent = f"{LABEL}-{lab.name}"
    if version == "v1":
        group, setting, value = CGROUP_ROOT / "cpu" / parent, "cpu.shares", lab.cpu_shares
    else:
        # cgroup v2's cpu.weight (1-10000) for a v1 share (2-262144): the kernel's and runc's conversion.
        group, setting, value = CGROUP_ROOT / parent, "cpu.weight", 1 + (lab.cpu_shares - 2) * 9999 // 262142
    group.mkdir(parents=True, exist_ok=True)
    (group / setting).write_text(f"{value}\n")
    return f"/{parent}"


def cmd_up(lab: Lab, args) -> int:
    t0 = time.monotonic()
    image = ensure_image()
    pubkey = ensure_ssh_key()
    with locked(f"lab-{lab.name}"):
        if lab.cpu_shares is not None:
            try:
                lab.cgroup_parent = cpu_group(lab, json.loads(podman("info", "--format", "json").stdout)["host"])
            except (OSError, subprocess.CalledProcessError, KeyError, ValueError) as exc:
                log(f"FAILED: the nodes' CPU group ({lab.cpu_shares} shares): {exc}")
                return 1
        existing = containers(lab)
        try:
            created_net = create_networks(lab)
        except subprocess.CalledProcessError as exc:
            log(f"FAILED: network: {err_text(exc)}")
            return 1
        drop_stopped(lab, existing)
        new = [n for n in lab.nodes if n.container not in existing]
        for n in lab.nodes:
            c = existing.get(n.container)
            if c and c.get("Image") not in (image, image.removeprefix("localhost/")):
                log(f"{n.host}: runs {c.get('Image')}, not {image}; "
                    "`labctl down && labctl up` to move it to the new image")
        errors: list[LabError] = []
        with ThreadPoolExecutor(max_workers=len(lab.nodes)) as pool:
            futures = {n.host: pool.submit(bring_up, n, lab, image, pubkey, args.profiles,
                                           new=n in new, hooks=not args.no_hooks) for n in lab.nodes}
            for host, fut in futures.items():
                try:
                    log(fut.result())
                except LabError as exc:
                    errors.append(exc)
                except Exception as exc:  # noqa: BLE001 - any failure must clean up
                    errors.append(LabError(host, "bring-up", repr(exc)))
        if errors:
            for e in errors:
                log(f"FAILED: node {e.node}, step {e.step}: {e.detail}")
            log("removing what this run created: "
                + (", ".join(n.container for n in new) or "no containers")
                + (f", network {lab.network}" if created_net else ""))
            remove(lab, [n.container for n in new], [v for n in new for v in n.volumes], created_net)
            return 1
    log(f"lab {lab.name} up: {len(lab.nodes)} nodes ({len(new)} created) "
        f"in {time.monotonic() - t0:.1f}s")
    return 0


def cmd_down(lab: Lab, _args) -> int:
    t0 = time.monotonic()
    with locked(f"lab-{lab.name}"):
        names = list(containers(lab))
        # Volumes go even when their container is already gone.
        vols = podman("volume", "ls", "--filter", f"label={LABEL}.name={lab.name}",
                      "--format", "{{.Name}}").stdout.split()
        remove(lab, names, vols, False)
        if not lab.external_network:
            owned = podman("network", "ls", "--filter", f"label={LABEL}.name={lab.name}",
                           "--format", "{{.Name}}").stdout.split()
            for net in lab.networks:
                if net in owned:
                    podman("network", "rm", "-f", net, check=False)
        # Cached facts describe containers that no longer exist.
        for n in lab.nodes:
            (FACTS_DIR / n.host).unlink(missing_ok=True)
    log(f"lab {lab.name} down: removed {len(names)} containers, {len(vols)} volumes "
        f"in {time.monotonic() - t0:.1f}s")
    return 0


def cmd_status(lab: Lab, args) -> int:
    existing = containers(lab)
    rows, ok = [], True
    for n in lab.nodes:
        c = existing.get(n.container)
        state = c.get("State") if c else "absent"
        ok &= state == "running"
        ip = node_ip(n, lab) if c else ""
        rows.append({"host": n.host, "container": n.container, "state": state,
                     "ip": ip, "profile": n.profile})
    if args.json:
        print(json.dumps(rows))
    else:
        for r in rows:
            print(f"{r['host']:<8} {r['container']:<22} {r['state']:<9} "
                  f"{r['ip']:<15} {r['profile']}")
    return 0 if ok else 3


def cmd_hooks(lab: Lab, args) -> int:
    for n in lab.nodes:
        try:
            log(f"{n.host}: {run_hook(n, args.profiles, force=args.force)}")
        except LabError as exc:
            log(f"FAILED: node {exc.node}, step {exc.step}: {exc.detail}")
            return 1
    return 0


def cmd_ssh(lab: Lab, args) -> int:
    node = next((n for n in lab.nodes if n.host == args.host), None)
    if node is None:
        log(f"no host {args.host} in the lab")
        return 2
    node.ip = node.ip if not lab.external_network else node_ip(node, lab)
    cmd = ssh_cmd(node, *args.command)
    os.execvp(cmd[0], cmd)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="labctl", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-i", "--inventory", type=Path, default=DEFAULT_INVENTORY,
                        help="lab inventory file or directory (default: %(default)s)")
    parser.add_argument("--spec", type=Path, help="JSON node list instead of an inventory")
    parser.add_argument("--profiles", type=Path,
                        default=Path(os.environ.get("AI_L1_LAB_PROFILES", DEFAULT_PROFILES)),
                        help="hardware profile directory (default: %(default)s)")
    sub = parser.add_subparsers(dest="cmd", required=True)
    sub.add_parser("image", help="build the node image if its recipe changed")
    up = sub.add_parser("up", help="bring the lab up")
    up.add_argument("--no-hooks", action="store_true",
                    help="do not run profile hooks (molecule runs them in prepare)")
    sub.add_parser("down", help="remove the lab")
    st = sub.add_parser("status", help="show the nodes; exit 3 unless all run")
    st.add_argument("--json", action="store_true")
    hk = sub.add_parser("hooks", help="run profile hooks whose files changed")
    hk.add_argument("--force", action="store_true", help="run every hook")
    sh = sub.add_parser("ssh", help="ssh to a node")
    sh.add_argument("host")
    sh.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)

    handlers = {"image": cmd_image, "up": cmd_up, "down": cmd_down, "status": cmd_status,
                "hooks": cmd_hooks, "ssh": cmd_ssh}
    try:
        lab = None
        if args.cmd != "image":
            lab = lab_from_spec(args.spec) if args.spec else lab_from_inventory(args.inventory)
        return handlers[args.cmd](lab, args)
    except LabError as exc:
        log(f"FAILED: {exc}")
        return 1
    except subprocess.CalledProcessError as exc:
        log(f"FAILED: {shlex.join(exc.cmd)}: {err_text(exc)}")
        return 1


if __name__ == "__main__":
    sys.exit(main())
