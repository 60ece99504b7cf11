"""The CA hash the control-plane role hands to joining nodes is the one kubeadm expects.

kubeadm's --discovery-token-ca-cert-hash is "sha256:" and the hex SHA-256 of the CA's DER
SubjectPublicKeyInfo, what its docs compute with
`openssl x509 -pubkey | openssl pkey -pubin -outform der | sha256sum`. The role reads
community.crypto.x509_certificate_info's public_key_fingerprints.sha256 instead (colon-separated
hex pairs). Here the module runs in-process on throwaway CAs made with openssl, and the role's own
ca_cert_hash template (from credentials.yml) is rendered with its result and compared with the
openssl pipeline's.
"""

import hashlib
import shutil
import subprocess
from pathlib import Path

import jinja2
import pytest
import yaml
from ansible_collections.community.crypto.plugins.modules import x509_certificate_info

ROOT = Path(__file__).resolve().parents[2]
CREDENTIALS = ROOT / "roles/k8s_control_plane/tasks/credentials.yml"



@pytest.fixture(autouse=True)
def openssl_cli():
    # The reference hash is openssl's: its absence fails (make bootstrap installs it), never skips.
    if shutil.which("openssl") is None:
        pytest.fail("the openssl CLI is missing: run make bootstrap (lab/bootstrap.sh installs it)")


def make_ca(tmp_path, key_args):
    """A self-signed CA like kubeadm's (CN=kubernetes), key type from key_args."""
    key, crt = tmp_path / "ca.key", tmp_path / "ca.crt"
    subprocess.run(["openssl", "req", "-x509", "-new", "-nodes", "-days", "1", "-subj", "/CN=kubernetes",
                    *key_args, "-keyout", str(key), "-out", str(crt)], check=True, capture_output=True)
    return crt


def openssl_pipeline_hash(crt):
    """kubeadm's documented recipe, in the pipeline the role used to run."""
    pub = subprocess.run(["openssl", "x509", "-in", str(crt), "-noout", "-pubkey"],
                         check=True, capture_output=True).stdout
    der = subprocess.run(["openssl", "pkey", "-pubin", "-outform", "der"], input=pub,
                         check=True, capture_output=True).stdout
    return hashlib.sha256(der).hexdigest()


def role_ca_cert_hash_template():
    tasks = yaml.safe_load(CREDENTIALS.read_text())
    share = next(t for t in tasks if "ansible.builtin.set_fact" in t)
    return share["ansible.builtin.set_fact"]["k8s_control_plane_join"]["ca_cert_hash"]


@pytest.mark.parametrize("key_args", [
    ["-newkey", "rsa:2048"],  # kubeadm's default CA key
    ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1"],  # kubeadm's ECDSA-P256 option
], ids=["rsa", "ecdsa"])
def test_role_hash_equals_kubeadm_recipe(tmp_path, key_args, run_module):
    crt = make_ca(tmp_path, key_args)
    result = run_module(x509_certificate_info, path=str(crt))
    assert result["_rc"] == 0, result
    assert not result.get("changed")  # an info module: it only reads
    fingerprint = result["public_key_fingerprints"]["sha256"]
    assert len(fingerprint.split(":")) == 32  # colon-separated hex pairs, as the role expects

    rendered = jinja2.Environment().from_string(role_ca_cert_hash_template()).render(
        k8s_control_plane__ca=result)
    assert rendered == "sha256:" + openssl_pipeline_hash(crt)


def test_whole_certificate_fingerprint_would_be_wrong(tmp_path, run_module):
    """The certificate's own fingerprint (the other field of the module) is not kubeadm's hash."""
    crt = make_ca(tmp_path, ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1"])
    result = run_module(x509_certificate_info, path=str(crt))
    assert result["fingerprints"]["sha256"].replace(":", "") != openssl_pipeline_hash(crt)
