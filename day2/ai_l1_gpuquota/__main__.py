"""python -m ai_l1_gpuquota: run the controller (kopf, every namespace, standalone: one replica)."""

import sys

import kopf

from ai_l1_gpuquota import operator  # noqa: F401  (registers the handlers)


def main() -> int:
    kopf.configure(verbose=False)
    # Standalone: no peering objects to create or RBAC for them; the Deployment runs one replica
    # with the Recreate strategy, so two controllers never overlap.
    kopf.run(clusterwide=True, standalone=True, liveness_endpoint="http://0.0.0.0:8080/healthz")
    return 0


if __name__ == "__main__":
    sys.exit(main())
