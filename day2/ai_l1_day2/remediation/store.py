"""SQLite store (WAL): the job queue, per-node locks and the audit log, in one file, so a
restarted receiver loses nothing.

Job states: queued -> running -> done | failed; dry-run is terminal and never runs. A
job holds its node's lock from the moment it is queued until it is done or failed: the
lock row and the job row are written in one transaction, so two jobs can never hold one
node, even across several receiver processes sharing the file.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ACTIVE = ("queued", "running")
TERMINAL = ("done", "failed", "dry-run")

SCHEMA = """
CREATE TABLE IF NOT EXISTS jobs (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    created REAL NOT NULL,
    updated REAL NOT NULL,
    node TEXT NOT NULL,
    kind TEXT NOT NULL,
    detail TEXT NOT NULL DEFAULT '',
    alertname TEXT NOT NULL DEFAULT '',
    fingerprint TEXT NOT NULL DEFAULT '',
    pool TEXT NOT NULL DEFAULT '',
    state TEXT NOT NULL,
    attempts INTEGER NOT NULL DEFAULT 0,
    ident TEXT,
    pid INTEGER,
    owner TEXT,
    run_dir TEXT,
    status TEXT,
    rc INTEGER,
    message TEXT NOT NULL DEFAULT ''
);
CREATE INDEX IF NOT EXISTS jobs_state ON jobs(state);
CREATE INDEX IF NOT EXISTS jobs_fingerprint ON jobs(fingerprint, created);
CREATE TABLE IF NOT EXISTS node_locks (
    node TEXT PRIMARY KEY,
    job_id INTEGER NOT NULL REFERENCES jobs(id),
    acquired REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS audit (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    ts REAL NOT NULL,
    event TEXT NOT NULL,
    decision TEXT NOT NULL DEFAULT '',
    reason TEXT NOT NULL DEFAULT '',
    node TEXT NOT NULL DEFAULT '',
    job_id INTEGER,
    fingerprint TEXT NOT NULL DEFAULT '',
    remote TEXT NOT NULL DEFAULT '',
    details TEXT NOT NULL DEFAULT '{}',
    size INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS audit_event ON audit(event, ts);
CREATE TABLE IF NOT EXISTS heartbeat (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    ts REAL NOT NULL
);
"""


class StoreError(RuntimeError):
    """The store cannot be used as it is (deleted, replaced, unwritable)."""

AUDIT_MAX_ROWS = 100_000
AUDIT_MAX_BYTES = 64 << 20
AUDIT_PRUNE_EVERY = 200  # audit rows written between two checks of the bounds

JOB_FIELDS = ("updated", "state", "attempts", "ident", "pid", "owner", "run_dir", "status", "rc", "message")


class Store:
    def __init__(self, path: str | Path, clock=time.time, *, audit_max_rows: int = AUDIT_MAX_ROWS,
                 audit_max_bytes: int = AUDIT_MAX_BYTES):
        self.path = Path(path)
        # The audit trail is bounded (rows and bytes of its text, the oldest dropped first): nothing
        # a client sends, however often, can fill the volume the decisions are written to.
        self.audit_max_rows, self.audit_max_bytes = audit_max_rows, audit_max_bytes
        self._audit_writes = 0
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.clock = clock
        self._lock = threading.RLock()
        self._db = sqlite3.connect(str(self.path), timeout=30, isolation_level=None, check_same_thread=False)
        self._db.row_factory = sqlite3.Row
        mode = self._db.execute("PRAGMA journal_mode=WAL").fetchone()[0]
        if mode.lower() != "wal":
            raise RuntimeError(f"{self.path}: SQLite refused WAL journal mode (got {mode}); use a local filesystem")
        self._db.execute("PRAGMA synchronous=FULL")
        self._db.execute("PRAGMA foreign_keys=ON")
        self._db.execute("PRAGMA busy_timeout=30000")
        with self._lock:
            self._db.executescript(SCHEMA)
            columns = {r[1] for r in self._db.execute("PRAGMA table_info(audit)")}
            if "size" not in columns:  # a store written before the audit trail was bounded
                self._db.execute("ALTER TABLE audit ADD COLUMN size INTEGER NOT NULL DEFAULT 0")
                self._db.execute("UPDATE audit SET size = length(event) + length(decision) + length(reason) + "
                                 "length(node) + length(fingerprint) + length(remote) + length(details)")
        self.prune_audit()
        # The file this connection writes to: a deleted or replaced file is noticed (check()).
        self._inode = self.path.stat().st_ino

    def check(self) -> None:
        """Raise StoreError unless the store is the file it was opened as and takes a write."""
        self.check_file()
        try:
            with self.transaction() as db:
                db.execute("INSERT OR REPLACE INTO heartbeat (id, ts) VALUES (1, ?)", (self.clock(),))
        except sqlite3.Error as exc:
            raise StoreError(f"{self.path} takes no writes: {exc}") from exc

    def check_file(self) -> None:
        """Raise StoreError unless the store is still the file it was opened as (no write: a webhook
        checks this before deciding, and its decision's own transaction proves the store writable)."""
        try:
            now = self.path.stat().st_ino
        except OSError as exc:
            raise StoreError(f"{self.path} is gone ({exc.strerror}): a new receiver would start over "
                             "with job numbers that exist already") from None
        if now != self._inode:
            raise StoreError(f"{self.path} was replaced by another file")

    def continue_ids_after(self, job_id: int) -> None:
        """New jobs get numbers above job_id (job directories of a lost store exist up to it)."""
        with self.transaction() as db:
            current = db.execute("SELECT seq FROM sqlite_sequence WHERE name = 'jobs'").fetchone()
            if current is None:
                db.execute("INSERT INTO sqlite_sequence (name, seq) VALUES ('jobs', ?)", (job_id,))
            elif current[0] < job_id:
                db.execute("UPDATE sqlite_sequence SET seq = ? WHERE name = 'jobs'", (job_id,))

    def close(self) -> None:
        with self._lock:
            self._db.close()

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """BEGIN IMMEDIATE: one writer at a time, across processes too."""
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield self._db
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    # -- audit ---------------------------------------------------------------------------
    def audit(self, event: str, *, decision: str = "", reason: str = "", node: str = "", job_id: int | None = None,
              fingerprint: str = "", remote: str = "", details: dict | None = None, db=None) -> int:
        sql = ("INSERT INTO audit (ts, event, decision, reason, node, job_id, fingerprint, remote, details, size) "
               "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)")
        text = json.dumps(details or {}, sort_keys=True, default=str)
        size = sum(len(v.encode()) for v in (event, decision, reason, node, fingerprint, remote, text))
        args = (self.clock(), event, decision, reason, node, job_id, fingerprint, remote, text, size)
        if db is not None:
            row = db.execute(sql, args).lastrowid
        else:
            with self.transaction() as tx:
                row = tx.execute(sql, args).lastrowid
        self._audit_writes += 1
        if self._audit_writes % AUDIT_PRUNE_EVERY == 0 and db is None:
            self.prune_audit()
        return row

    def prune_audit(self) -> int:
        """Drop the oldest audit rows past audit_max_rows or audit_max_bytes; the number dropped."""
        with self.transaction() as db:
            cut = db.execute("SELECT id FROM audit ORDER BY id DESC LIMIT 1 OFFSET ?",
                             (self.audit_max_rows,)).fetchone()
            by_bytes = db.execute(
                "SELECT id FROM (SELECT id, SUM(size) OVER (ORDER BY id DESC) AS newer FROM audit) "
                "WHERE newer > ? ORDER BY id DESC LIMIT 1", (self.audit_max_bytes,)).fetchone()
            last = max(cut[0] if cut else 0, by_bytes[0] if by_bytes else 0)
            return db.execute("DELETE FROM audit WHERE id <= ?", (last,)).rowcount if last else 0

    def audit_entries(self, event: str | None = None, node: str | None = None, since_id: int = 0,
                      limit: int | None = None) -> list[dict]:
        """Audit rows after since_id, oldest first; at most `limit` of them (None: all, for callers
        inside the receiver; what answers a client passes a bounded page)."""
        sql, args = "SELECT * FROM audit WHERE id > ?", [since_id]
        if event:
            sql, args = sql + " AND event = ?", [*args, event]
        if node:
            sql, args = sql + " AND node = ?", [*args, node]
        sql += " ORDER BY id"
        if limit is not None:
            sql, args = sql + " LIMIT ?", [*args, limit]
        with self._lock:
            rows = self._db.execute(sql, args).fetchall()
        return [{**dict(r), "details": json.loads(r["details"])} for r in rows]

    # -- jobs ----------------------------------------------------------------------------
    def insert_job(self, db, *, node: str, kind: str, detail: str, alertname: str, fingerprint: str, pool: str,
                   state: str) -> int:
        now = self.clock()
        return db.execute(
            "INSERT INTO jobs (created, updated, node, kind, detail, alertname, fingerprint, pool, state) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (now, now, node, kind, detail, alertname, fingerprint, pool, state)).lastrowid

    def lock_node(self, db, node: str, job_id: int) -> None:
        db.execute("INSERT INTO node_locks (node, job_id, acquired) VALUES (?, ?, ?)", (node, job_id, self.clock()))

    def lock_holder(self, db, node: str) -> dict | None:
        row = db.execute("SELECT jobs.* FROM node_locks JOIN jobs ON jobs.id = node_locks.job_id "
                         "WHERE node_locks.node = ?", (node,)).fetchone()
        return dict(row) if row else None

    def recent_by_fingerprint(self, db, fingerprint: str, since: float) -> dict | None:
        row = db.execute("SELECT * FROM jobs WHERE fingerprint = ? AND created >= ? ORDER BY id DESC LIMIT 1",
                         (fingerprint, since)).fetchone()
        return dict(row) if row else None

    def count_since(self, db, since: float) -> int:
        return db.execute("SELECT COUNT(*) FROM jobs WHERE created >= ?", (since,)).fetchone()[0]

    def active_nodes(self, db) -> set[str]:
        return {r[0] for r in db.execute("SELECT node FROM jobs WHERE state IN (?, ?)", ACTIVE)}

    def claim_next(self, owner: str) -> dict | None:
        """queued -> running for the oldest queued job; None when the queue is empty."""
        with self.transaction() as db:
            row = db.execute("SELECT * FROM jobs WHERE state = 'queued' ORDER BY id LIMIT 1").fetchone()
            if row is None:
                return None
            db.execute("UPDATE jobs SET state = 'running', owner = ?, attempts = attempts + 1, pid = NULL, "
                       "ident = NULL, updated = ? WHERE id = ?", (owner, self.clock(), row["id"]))
            return dict(db.execute("SELECT * FROM jobs WHERE id = ?", (row["id"],)).fetchone())

    def update_job(self, job_id: int, db=None, **fields) -> None:
        unknown = set(fields) - set(JOB_FIELDS)
        if unknown:
            raise ValueError(f"unknown job fields: {sorted(unknown)}")
        fields["updated"] = self.clock()
        sql = "UPDATE jobs SET " + ", ".join(f"{k} = ?" for k in fields) + " WHERE id = ?"
        if db is not None:
            db.execute(sql, (*fields.values(), job_id))
            return
        with self.transaction() as tx:
            tx.execute(sql, (*fields.values(), job_id))

    def finish_job(self, job_id: int, state: str, *, status: str | None, rc: int | None, message: str,
                   ident: str | None = None) -> None:
        """A terminal state, and the node's lock released, in one transaction."""
        if state not in ("done", "failed"):
            raise ValueError(f"not a terminal run state: {state}")
        with self.transaction() as db:
            fields = {"state": state, "status": status, "rc": rc, "message": message}
            if ident:
                fields["ident"] = ident
            self.update_job(job_id, db=db, **fields)
            db.execute("DELETE FROM node_locks WHERE job_id = ?", (job_id,))
            job = dict(db.execute("SELECT * FROM jobs WHERE id = ?", (job_id,)).fetchone())
            self.audit("job.finished", decision=state, reason=message, node=job["node"], job_id=job_id,
                       fingerprint=job["fingerprint"], details={"status": status, "rc": rc, "ident": job["ident"],
                                                                "attempts": job["attempts"]}, db=db)

    def requeue(self, job_id: int, reason: str) -> None:
        with self.transaction() as db:
            self.update_job(job_id, db=db, state="queued", pid=None, owner=None, message=reason)
            job = db.execute("SELECT node, fingerprint FROM jobs WHERE id = ?", (job_id,)).fetchone()
            self.audit("job.requeued", decision="queued", reason=reason, node=job["node"], job_id=job_id,
                       fingerprint=job["fingerprint"], db=db)

    def job(self, job_id: int) -> dict | None:
        with self._lock:
            row = self._db.execute("SELECT * FROM jobs WHERE id = ?", (job_id,)).fetchone()
        return dict(row) if row else None

    def jobs(self, state: str | None = None, node: str | None = None) -> list[dict]:
        sql, args = "SELECT * FROM jobs WHERE 1=1", []
        if state:
            sql, args = sql + " AND state = ?", [*args, state]
        if node:
            sql, args = sql + " AND node = ?", [*args, node]
        with self._lock:
            return [dict(r) for r in self._db.execute(sql + " ORDER BY id", args).fetchall()]
