"""roles/remediation_receiver as it renders: the objects its kubernetes mode applies (the
NetworkPolicy that admits only Alertmanager among them), the systemd unit, the systemd mode's
listen address and the role's refusal of a listener on every address.

Rendered for real by ansible-playbook on localhost with the role's own defaults, vars, template
and tasks: the objects are the ones the "Apply the receiver's objects" task of tasks/kubernetes.yml
loops over (its own loop expression, read from the file); the refusals come from the role's
tasks/validate.yml through include_role. The lab applies the same objects to a real API server
(tests/integration/test_monitoring_k8s.py) and runs the unit (test_remediation_systemd.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
ROLE = REPO / "roles" / "remediation_receiver"
HOST = "recv1"
HOST_ADDRESS = "10.0.0.9"
TOKEN = "unit-test-token-0123456789"
BASE = {
    "remediation_receiver_token": TOKEN,
    "remediation_receiver_artifacts": {"remediation-receiver-image": {"image": "mirror:5000/remediation-receiver:0.1.0",
                                                                      "sha256": "sha256:" + "ab" * 32}},
    # Made by tasks/tls.yml (community.crypto) in a real run.
    "remediation_receiver__tls": {"cert": "CERT", "key": "KEY"},
}
# What monitoring_k8s deploys: kube-prometheus-stack's Alertmanager in namespace monitoring, whose
# Pods the Prometheus operator labels so (the chart's Service selects them by the same labels).
ALERTMANAGER = {"app.kubernetes.io/name": "alertmanager", "alertmanager": "kube-prometheus-stack-alertmanager"}


def apply_loop() -> str:
    """The expression the role's apply task loops over (tasks/kubernetes.yml), without its braces."""
    tasks = yaml.safe_load((ROLE / "tasks" / "kubernetes.yml").read_text())
    [task] = [t for t in tasks if t["name"] == "Apply the receiver's objects"]
    loop = task["loop"].strip()
    assert loop.startswith("{{") and loop.endswith("}}"), loop
    return " ".join(loop[2:-2].split())


RENDER_TASK = """
    - name: Render {name}
      ansible.builtin.copy:
        dest: "{{{{ out }}}}/{name}.json"
        content: >-
          {{{{ {{'applied': ({loop}) | map(attribute='definition') | list,
                'config': remediation_receiver__config, 'url': remediation_receiver__url,
                'ready_url': remediation_receiver__ready_url | default(none),
                'tls_dns': remediation_receiver__tls_dns, 'tls_ips': remediation_receiver__tls_ips,
                'unit': lookup('ansible.builtin.template',
                               '{role}/templates/ai-l1-remediate.service.j2')}} | to_json }}}}
        mode: "0600"
      vars: {vars}
"""
VALIDATE_TASK = """
    - name: Validate {name}
      block:
        - name: The role's checks
          ansible.builtin.include_role:
            name: remediation_receiver
            tasks_from: validate
          vars: {vars}
        - name: Passed
          ansible.builtin.copy: {{dest: "{{{{ out }}}}/{name}.txt", content: "passed", mode: "0600"}}
      rescue:
        - name: Refused
          ansible.builtin.copy:
            dest: "{{{{ out }}}}/{name}.txt"
            content: "{{{{ ansible_failed_result.msg }}}}"
            mode: "0600"
"""


def playbook(tmp_path: Path, tasks: str, extra: dict | None = None) -> subprocess.CompletedProcess:
    (tmp_path / "hosts.yml").write_text(yaml.safe_dump({"all": {"hosts": {HOST: {
        "ansible_host": HOST_ADDRESS, "ansible_connection": "local", "ansible_python_interpreter": sys.executable}}}}))
    (tmp_path / "play.yml").write_text(f"""
- hosts: {HOST}
  gather_facts: false
  vars_files: [{ROLE}/defaults/main.yml, {ROLE}/vars/main.yml]
  tasks:
{tasks}""")
    (tmp_path / "vars.json").write_text(json.dumps({**BASE, **(extra or {}), "out": str(tmp_path)}))
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_LOCALHOST_WARNING="0")
    proc = subprocess.run([str(Path(sys.executable).parent / "ansible-playbook"), "-i", str(tmp_path / "hosts.yml"),
                           str(tmp_path / "play.yml"), "-e", f"@{tmp_path / 'vars.json'}"],
                          capture_output=True, text=True, check=False, cwd=REPO, env=env, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc


# Scenario name -> the inventory's variables (task vars: above the role's defaults, as an inventory's are).
RENDERED = {
    "kubernetes": {},
    "kubernetes_site": {"remediation_receiver_namespace": "remediation", "remediation_receiver_port": 9443,
                        "remediation_receiver_alertmanager_namespace": "observability",
                        "remediation_receiver_alertmanager_pod_selector": {"app": "am"}},
    "systemd": {"remediation_receiver_mode": "systemd"},
    "systemd_address": {"remediation_receiver_mode": "systemd", "remediation_receiver_listen_host": "10.1.0.5"},
    "systemd_any": {"remediation_receiver_mode": "systemd", "remediation_receiver_listen_host": "0.0.0.0",
                    "remediation_receiver_listen_any": True},
    "systemd_v6": {"remediation_receiver_mode": "systemd", "remediation_receiver_listen_host": "fd00::5"},
}


@pytest.fixture(scope="module")
def rendered(tmp_path_factory) -> dict[str, dict]:
    tmp = tmp_path_factory.mktemp("receiver-render")
    loop = apply_loop()
    playbook(tmp, "".join(RENDER_TASK.format(name=name, loop=loop, role=ROLE, vars=json.dumps(over))
                          for name, over in RENDERED.items()))
    return {name: json.loads((tmp / f"{name}.json").read_text()) for name in RENDERED}


def kinds(objects: list[dict], kind: str) -> list[dict]:
    return [o for o in objects if o["kind"] == kind]


# ---- kubernetes mode: the NetworkPolicy

def test_the_apply_task_applies_a_network_policy_with_the_other_objects(rendered):
    applied = rendered["kubernetes"]["applied"]
    assert [o["kind"] for o in applied] == ["ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Secret",
                                            "ConfigMap", "Service", "NetworkPolicy", "PersistentVolumeClaim",
                                            "Deployment"]
    [policy] = kinds(applied, "NetworkPolicy")
    assert policy["apiVersion"] == "networking.k8s.io/v1"
    assert policy["metadata"]["name"] == "ai-l1-remediate"
    assert policy["metadata"]["namespace"] == "ai-l1-remediation"


def test_the_policy_admits_only_alertmanager_to_the_receivers_port(rendered):
    applied = rendered["kubernetes"]["applied"]
    [policy] = kinds(applied, "NetworkPolicy")
    [deployment] = kinds(applied, "Deployment")
    [service] = kinds(applied, "Service")
    # It selects the receiver's Pods (exactly the Deployment's template labels), Ingress only.
    assert policy["spec"]["podSelector"] == {"matchLabels": deployment["spec"]["template"]["metadata"]["labels"]}
    assert policy["spec"]["podSelector"] == {"matchLabels": deployment["spec"]["selector"]["matchLabels"]}
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    assert "egress" not in policy["spec"]
    # One rule: one peer (namespace AND Pod selector in the same element), on the container's port.
    assert policy["spec"]["ingress"] == [{
        "from": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}},
                  "podSelector": {"matchLabels": ALERTMANAGER}}],
        "ports": [{"protocol": "TCP", "port": 9095}],
    }]
    [container] = deployment["spec"]["template"]["spec"]["containers"]
    assert container["ports"] == [{"name": "https", "containerPort": 9095}]
    assert service["spec"]["ports"][0]["targetPort"] == "https"


def test_the_defaults_match_what_monitoring_k8s_deploys():
    """The release's Alertmanager: namespace monitoring (roles/monitoring_k8s), the CR named
    <release>-alertmanager, which the receiver's URL for NodeIsolated names too."""
    deploy = yaml.safe_load((REPO / "roles/monitoring_k8s/tasks/deploy.yml").read_text())
    [stack] = [t for t in deploy if t.get("kubernetes.core.helm", {}).get("name") == "kube-prometheus-stack"]
    namespace = stack["kubernetes.core.helm"]["release_namespace"]
    defaults = yaml.safe_load((ROLE / "defaults/main.yml").read_text())
    assert defaults["remediation_receiver_alertmanager_namespace"] == namespace == "monitoring"
    assert defaults["remediation_receiver_alertmanager_pod_selector"] == ALERTMANAGER
    assert defaults["remediation_receiver_alertmanager_url"].startswith(
        f"http://{ALERTMANAGER['alertmanager']}.{namespace}.svc:")


def test_a_sites_namespace_selector_and_port_reach_the_policy(rendered):
    applied = rendered["kubernetes_site"]["applied"]
    [policy] = kinds(applied, "NetworkPolicy")
    assert policy["metadata"]["namespace"] == "remediation"
    assert policy["spec"]["ingress"] == [{
        "from": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "observability"}},
                  "podSelector": {"matchLabels": {"app": "am"}}}],
        "ports": [{"protocol": "TCP", "port": 9443}],
    }]


# ---- systemd mode: the unit and the listen address

def service_section(unit: str) -> list[str]:
    section, lines = None, []
    for raw in unit.splitlines():
        line = raw.strip()
        if line.startswith("["):
            section = line
        elif section == "[Service]" and line and not line.startswith("#"):
            lines.append(line)
    return lines


def test_the_unit_raises_the_open_file_limit(rendered):
    service = service_section(rendered["systemd"]["unit"])
    assert [line for line in service if line.startswith("LimitNOFILE=")] == ["LimitNOFILE=65536"]
    # What the receiver needs is still there: its user, its state directory, KillMode=process.
    assert "KillMode=process" in service and "User=ai-l1-remediate" in service
    assert "WorkingDirectory=/var/lib/ai-l1-remediate" in service
    assert "NoNewPrivileges=true" in service and "ProtectSystem=full" in service
    # Never a sandbox that hides the checkout or the interpreter (often under /home) or /var/lib.
    assert not [line for line in service if line.startswith(("ProtectHome=", "ReadOnlyPaths=", "InaccessiblePaths="))]
    assert "ProtectSystem=strict" not in service


def test_the_default_listen_address_is_loopback(rendered):
    defaults = yaml.safe_load((ROLE / "defaults/main.yml").read_text())
    spec = yaml.safe_load((ROLE / "meta/argument_specs.yml").read_text())["argument_specs"]["main"]["options"]
    assert defaults["remediation_receiver_listen_host"] == spec["remediation_receiver_listen_host"]["default"] \
        == "127.0.0.1"
    assert defaults["remediation_receiver_listen_any"] is spec["remediation_receiver_listen_any"]["default"] is False
    assert spec["remediation_receiver_listen_any"]["type"] == "bool"
    systemd = rendered["systemd"]
    assert systemd["config"]["listen"]["host"] == "127.0.0.1"
    assert systemd["ready_url"] == "https://127.0.0.1:9095/readyz"
    # In the cluster the Pod listens on its own address (the NetworkPolicy guards it).
    assert rendered["kubernetes"]["config"]["listen"]["host"] == "0.0.0.0"


def test_a_listen_address_is_what_alertmanager_is_given_and_the_certificate_names(rendered):
    site = rendered["systemd_address"]
    assert site["config"]["listen"]["host"] == "10.1.0.5"
    assert site["url"] == "https://10.1.0.5:9095/webhook"
    assert site["ready_url"] == "https://10.1.0.5:9095/readyz"
    assert site["tls_ips"] == [HOST_ADDRESS, "10.1.0.5"]
    assert site["tls_dns"] == [HOST]
    v6 = rendered["systemd_v6"]
    assert v6["config"]["listen"]["host"] == "fd00::5"
    assert v6["url"] == "https://[fd00::5]:9095/webhook"
    assert v6["ready_url"] == "https://[fd00::5]:9095/readyz"
    assert v6["tls_ips"] == [HOST_ADDRESS, "fd00::5"]


def test_every_address_with_the_opt_in_gives_alertmanager_the_hosts_address(rendered):
    anywhere = rendered["systemd_any"]
    assert anywhere["config"]["listen"]["host"] == "0.0.0.0"
    assert anywhere["url"] == f"https://{HOST_ADDRESS}:9095/webhook"
    assert anywhere["ready_url"] == "https://127.0.0.1:9095/readyz"
    assert anywhere["tls_ips"] == [HOST_ADDRESS]


# ---- the role's refusals (tasks/validate.yml)

SYSTEMD = {"remediation_receiver_mode": "systemd"}
VALIDATED = {
    "default": SYSTEMD,
    "address": {**SYSTEMD, "remediation_receiver_listen_host": "10.1.0.5"},
    "any_v4": {**SYSTEMD, "remediation_receiver_listen_host": "0.0.0.0"},
    "any_v6": {**SYSTEMD, "remediation_receiver_listen_host": "::"},
    "any_v6_brackets": {**SYSTEMD, "remediation_receiver_listen_host": "[::]"},
    "any_empty": {**SYSTEMD, "remediation_receiver_listen_host": ""},
    "any_opted_in": {**SYSTEMD, "remediation_receiver_listen_host": "0.0.0.0", "remediation_receiver_listen_any": True},
    "any_v6_opted_in": {**SYSTEMD, "remediation_receiver_listen_host": "::", "remediation_receiver_listen_any": True},
    "kubernetes": {},
    "kubernetes_no_namespace": {"remediation_receiver_alertmanager_namespace": ""},
}


@pytest.fixture(scope="module")
def validated(tmp_path_factory) -> dict[str, str]:
    tmp = tmp_path_factory.mktemp("receiver-validate")
    playbook(tmp, "".join(VALIDATE_TASK.format(name=name, vars=json.dumps(over)) for name, over in VALIDATED.items()))
    return {name: " ".join((tmp / f"{name}.txt").read_text().split()) for name in VALIDATED}


@pytest.mark.parametrize("name", ["any_v4", "any_v6", "any_v6_brackets", "any_empty"])
def test_every_address_is_refused_without_the_opt_in(validated, name):
    message = validated[name]
    assert message != "passed"
    assert "remediation_receiver_listen_any: true" in message, message
    assert "remediation_receiver_listen_host is" in message, message


@pytest.mark.parametrize("name", ["default", "address", "any_opted_in", "any_v6_opted_in", "kubernetes"])
def test_a_specific_address_or_the_opt_in_passes(validated, name):
    assert validated[name] == "passed"


def test_a_policy_without_the_alertmanager_namespace_is_refused(validated):
    assert "remediation_receiver_alertmanager_namespace must name" in validated["kubernetes_no_namespace"]


# ---- the lab

def test_the_lab_listens_on_the_address_its_test_reaches():
    """test_remediation_systemd.py calls the receiver from the lab host at the node's ansible_host."""
    lab = yaml.safe_load((REPO / "inventories/lab/group_vars/all/remediation_receiver.yml").read_text())
    assert lab["remediation_receiver_listen_host"] == "{{ ansible_host }}"
