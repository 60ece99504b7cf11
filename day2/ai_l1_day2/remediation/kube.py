"""The Kubernetes reads (and the one optional write) the receiver does itself, through the
official client. Everything else happens in the isolation playbook."""

from __future__ import annotations

from .policy import NodeInfo

MIRROR_ANNOTATION = "kubernetes.io/config.mirror"
FINISHED = ("Succeeded", "Failed")


class KubeError(RuntimeError):
    pass


class KubeNodes:
    def __init__(self, kubeconfig: str | None = None, context: str | None = None):
        try:
            from kubernetes import client, config  # noqa: PLC0415 (optional at import time)
        except ImportError as exc:
            raise KubeError("the 'kubernetes' Python package is missing (pip install kubernetes)") from exc
        try:
            if kubeconfig is None and context is None:
                try:
                    config.load_incluster_config()
                except config.ConfigException:
                    config.load_kube_config()
            else:
                config.load_kube_config(config_file=kubeconfig, context=context)
        except Exception as exc:
            raise KubeError(f"cannot load Kubernetes credentials ({kubeconfig or 'in-cluster/~/.kube/config'}): "
                            f"{exc}") from exc
        self._api = client.CoreV1Api()
        self._version = client.VersionApi()

    def check(self) -> None:
        """Raise KubeError unless the API server answers (a cheap read, whatever the fleet size)."""
        try:
            self._version.get_code(_request_timeout=5)
        except Exception as exc:
            raise KubeError(f"the Kubernetes API does not answer: {exc}") from exc

    def nodes(self) -> dict[str, NodeInfo]:
        try:
            items = self._api.list_node(_request_timeout=10).items
        except Exception as exc:
            raise KubeError(f"listing Nodes failed: {exc}") from exc
        return {n.metadata.name: _info(n) for n in items}

    def node(self, name: str) -> NodeInfo | None:
        return self.nodes().get(name)

    def pods_to_evict(self, name: str) -> list[str]:
        """namespace/name of the Pods a drain of the Node still has to evict, by the rules of
        kubectl drain (the filter ai_platform.l1.drain_blockers the playbook judges with):
        mirror and DaemonSet Pods stay, finished Pods do not count."""
        try:
            pods = self._api.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={name}",
                                                         _request_timeout=10).items
        except Exception as exc:
            raise KubeError(f"listing the Pods on {name} failed: {exc}") from exc
        left = []
        for pod in pods:
            meta = pod.metadata
            if MIRROR_ANNOTATION in (meta.annotations or {}) or (pod.status and pod.status.phase in FINISHED):
                continue
            if any(ref.kind == "DaemonSet" for ref in meta.owner_references or []):
                continue
            left.append(f"{meta.namespace}/{meta.name}")
        return sorted(left)

    def cordon(self, name: str, annotation: str, reason: str) -> None:
        """spec.unschedulable with the reason beside it, in one patch (as roles/node_drain does)."""
        body = {"metadata": {"annotations": {annotation: reason}}, "spec": {"unschedulable": True}}
        try:
            self._api.patch_node(name, body, _request_timeout=10)
        except Exception as exc:
            raise KubeError(f"cordoning Node {name} failed: {exc}") from exc


def _info(node) -> NodeInfo:
    return NodeInfo(
        name=node.metadata.name,
        labels=dict(node.metadata.labels or {}),
        unschedulable=bool(node.spec.unschedulable),
        taints=tuple(t.key for t in (node.spec.taints or [])),
        addresses=tuple(a.address for a in (node.status.addresses or [])) if node.status else (),
    )
