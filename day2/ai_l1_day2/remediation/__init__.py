"""Event-driven remediation: Alertmanager webhooks -> policy -> fault isolation runs.

- `server`   the authenticated HTTP receiver (stdlib ThreadingHTTPServer)
- `policy`   alert -> isolation request, XID lists, dedupe, rate limit, pool ceiling
- `store`    SQLite (WAL) queue, node locks and audit log; survives a restart
- `service`  ties them together: decisions, the worker pool, restart recovery
- `executor` runs one isolation in its own process (ai_l1_day2.runner.run_operation)
- `awx`      or launches the isolate job template through AWX's API and follows the job (run.backend: awx)
- `kube`     the Kubernetes reads the policy needs (nodes, cordon state)
"""
