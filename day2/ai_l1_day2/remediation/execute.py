"""Child process of the receiver: one isolation run (see executor.py).

    python -m ai_l1_day2.remediation.execute JOB_DIR SPEC_JSON

The receiver passes this process a descriptor holding the job's lease (JOB_DIR/lease); it
stays open for the process's life, and the run's guard takes the lease too (run_operation's
lease), so the run counts as alive until its last process has exited.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

from ai_l1_day2.remediation.executor import LEASE


def _write(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    with open(tmp, "rb") as handle:
        os.fsync(handle.fileno())
    tmp.replace(path)


def main(argv: list[str]) -> int:
    job_dir, spec = Path(argv[0]), json.loads(Path(argv[1]).read_text())
    ident_file = job_dir / "ident"

    def on_event(event: dict) -> bool:
        ident = event.get("runner_ident")
        if ident and not ident_file.exists():
            _write(ident_file, str(ident))
        return True  # keep the event in the artifacts

    started = time.time()
    lease = job_dir / LEASE
    try:
        from ai_l1_day2.runner import run_operation  # noqa: PLC0415

        res = run_operation(spec["operation"], inventory=spec["inventory"], limit=spec["limit"],
                            extravars=spec["extravars"], runs_dir=str(job_dir / "runs"), quiet=True,
                            event_handler=on_event, timeout=spec.get("timeout"),
                            lease=lease if lease.exists() else None)
        result = {"ident": res.ident, "status": res.status, "rc": res.rc, "artifacts_dir": str(res.artifacts_dir),
                  "stats": res.stats, "source": "runner"}
    except Exception as exc:  # noqa: BLE001 (the outcome must be recorded whatever failed)
        result = {"ident": None, "status": "error", "rc": None, "message": f"{type(exc).__name__}: {exc}",
                  "source": "runner"}
    result["seconds"] = round(time.time() - started, 3)
    if result.get("ident") and not ident_file.exists():
        _write(ident_file, str(result["ident"]))
    _write(job_dir / "result.json", json.dumps(result, default=str, sort_keys=True))
    print(json.dumps(result, default=str), flush=True)
    return 0 if result["status"] == "successful" else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
