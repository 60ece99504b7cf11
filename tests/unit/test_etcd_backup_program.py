"""roles/etcd_backup/files/ai-l1-etcd-backup without etcd or S3: an in-memory bucket stands in for
boto3's client, a script prints etcdutl's status; openssl is the real one. The program's S3 and
etcd paths run for real in tests/integration/test_etcd_backup.py."""

from __future__ import annotations

import hashlib
import importlib.machinery
import importlib.util
import json
import subprocess
from pathlib import Path

import pytest

PROGRAM = Path(__file__).resolve().parents[2] / "roles" / "etcd_backup" / "files" / "ai-l1-etcd-backup"


def load():
    loader = importlib.machinery.SourceFileLoader("ai_l1_etcd_backup", str(PROGRAM))
    spec = importlib.util.spec_from_loader(loader.name, loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


class Bucket:
    """list_objects_v2, head_object, download_file and upload_file over a dict."""

    def __init__(self):
        self.objects: dict[str, tuple[bytes, dict]] = {}

    def put(self, key: str, data: bytes, metadata: dict) -> None:
        self.objects[key] = (data, metadata)

    def list_objects_v2(self, Bucket, Prefix, **_):  # noqa: N803 (boto3's names)
        keys = sorted(k for k in self.objects if k.startswith(Prefix))
        return {"Contents": [{"Key": k, "Size": len(self.objects[k][0])} for k in keys], "IsTruncated": False}

    def head_object(self, Bucket, Key):  # noqa: N803
        data, metadata = self.objects[Key]
        return {"ContentLength": len(data), "Metadata": metadata}

    def download_file(self, bucket, key, path):
        Path(path).write_bytes(self.objects[key][0])


@pytest.fixture
def setup(tmp_path, monkeypatch):
    program = load()
    bucket = Bucket()
    monkeypatch.setattr(program, "s3_client", lambda cfg: bucket)
    key_file = tmp_path / "key"
    key_file.write_text("lab-passphrase")
    etcdutl = tmp_path / "etcdutl"
    etcdutl.write_text('#!/bin/sh\necho \'{"hash": 1, "revision": 4242, "totalKey": 900, "totalSize": 1}\'\n')
    etcdutl.chmod(0o755)
    cfg = {"key_file": str(key_file), "etcdutl": str(etcdutl), "s3": {"bucket": "etcd-backups", "prefix": "site"}}

    def upload(name: str, plain: bytes, recorded: str | None = None) -> None:
        src, sealed = tmp_path / "plain", tmp_path / "sealed"
        src.write_bytes(plain)
        subprocess.run(["openssl", "enc", "-aes-256-cbc", "-pbkdf2", "-iter", program.PBKDF2_ITER, "-salt",
                        "-pass", f"file:{key_file}", "-in", str(src), "-out", str(sealed)], check=True)
        digest = recorded or hashlib.sha256(plain).hexdigest()
        bucket.put(f"site/{name}", sealed.read_bytes(), {"snapshot-sha256": digest})

    return program, cfg, upload, tmp_path


def test_fetch_takes_the_newest_copy_decrypted_and_checked(setup):
    program, cfg, upload, tmp = setup
    upload("etcd-20261207T010000Z-r100.db.enc", b"older")
    upload("etcd-20261207T013000Z-r200.db.enc", b"newer")
    got = program.fetch(cfg, "latest", tmp / "out" / "snapshot.db")
    assert got["name"] == "etcd-20261207T013000Z-r200.db.enc"
    assert (tmp / "out" / "snapshot.db").read_bytes() == b"newer"
    assert got["sha256"] == hashlib.sha256(b"newer").hexdigest() and got["revision"] == 4242
    assert (tmp / "out" / "snapshot.db").stat().st_mode & 0o777 == 0o600


def test_fetch_by_name(setup):
    program, cfg, upload, tmp = setup
    upload("etcd-20261207T010000Z-r100.db.enc", b"older")
    upload("etcd-20261207T013000Z-r200.db.enc", b"newer")
    program.fetch(cfg, "etcd-20261207T010000Z-r100.db.enc", tmp / "snapshot.db")
    assert (tmp / "snapshot.db").read_bytes() == b"older"


def test_an_unknown_name_is_refused_with_the_newest_names(setup):
    program, cfg, upload, tmp = setup
    upload("etcd-20261207T010000Z-r100.db.enc", b"older")
    with pytest.raises(program.BackupError, match=r"no snapshot 'etcd-nope.db.enc'.*etcd-20261207T010000Z-r100"):
        program.fetch(cfg, "etcd-nope.db.enc", tmp / "snapshot.db")
    assert not (tmp / "snapshot.db").exists()


def test_a_copy_that_decrypts_to_other_bytes_is_refused(setup):
    program, cfg, upload, tmp = setup
    upload("etcd-20261207T010000Z-r100.db.enc", b"tampered", recorded="0" * 64)
    with pytest.raises(program.BackupError, match="not the 0000"):
        program.fetch(cfg, "latest", tmp / "snapshot.db")
    assert not (tmp / "snapshot.db").exists()


def test_a_wrong_key_is_refused(setup):
    program, cfg, upload, tmp = setup
    upload("etcd-20261207T010000Z-r100.db.enc", b"data")
    Path(cfg["key_file"]).write_text("another passphrase")
    # CBC's padding check catches a wrong key about 255 times in 256 (openssl fails); otherwise the
    # garbage it decrypts to is caught by the recorded sha256. Either way nothing is written.
    with pytest.raises(program.BackupError, match=r"openssl|decrypts to sha256 [0-9a-f]{64}, not the"):
        program.fetch(cfg, "latest", tmp / "snapshot.db")
    assert not (tmp / "snapshot.db").exists()


def test_an_empty_bucket_is_refused(setup):
    program, cfg, _, tmp = setup
    with pytest.raises(program.BackupError, match="holds no etcd snapshot"):
        program.fetch(cfg, "latest", tmp / "snapshot.db")


def test_list_prints_the_copies_oldest_first(setup, capsys, monkeypatch):
    program, cfg, upload, tmp = setup
    upload("etcd-20261207T013000Z-r200.db.enc", b"newer")
    upload("etcd-20261207T010000Z-r100.db.enc", b"older")
    config = tmp / "config.json"
    config.write_text(json.dumps(cfg))
    assert program.main(["--config", str(config), "list"]) == 0
    names = [c["name"] for c in json.loads(capsys.readouterr().out)]
    assert names == ["etcd-20261207T010000Z-r100.db.enc", "etcd-20261207T013000Z-r200.db.enc"]
