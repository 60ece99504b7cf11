"""kopf handlers: a GPUQuota is applied on create, change and resume, re-checked on a timer (so
validUntil takes effect without an edit), and what it created is removed on delete (kopf's
finalizer keeps the object until the cleanup succeeded)."""

from __future__ import annotations

import datetime
import json
import os

import kopf
from ansible_collections.ai_platform.l1.plugins.module_utils import gpu_queues as model
from kubernetes import config, dynamic
from kubernetes.client import api_client
from kubernetes.dynamic.exceptions import NotFoundError

GROUP, VERSION, PLURAL = model.GPUQUOTA_GROUP, "v1", "gpuquotas"
FIELD_MANAGER = model.GPUQUOTA_MANAGED_BY


def settings(env=os.environ) -> dict:
    """The controller's configuration from its environment (the role's Deployment sets it)."""
    backend = env.get("GPUQUOTA_BACKEND", "")
    if backend not in ("kueue", "volcano"):
        raise SystemExit(f"GPUQUOTA_BACKEND must be kueue or volcano, got {backend!r}")
    try:
        flavors = json.loads(env.get("GPUQUOTA_FLAVORS", "[]"))
    except ValueError as exc:
        raise SystemExit(f"GPUQUOTA_FLAVORS is not JSON: {exc}") from exc
    out = {"backend": backend, "cohort": env.get("GPUQUOTA_COHORT", "gpu-pool"), "flavors": flavors,
           "cpu_per_gpu": env.get("GPUQUOTA_CPU_PER_GPU", "16"),
           "memory_per_gpu": env.get("GPUQUOTA_MEMORY_PER_GPU", "128Gi"),
           "resync_seconds": float(env.get("GPUQUOTA_RESYNC_SECONDS", "15"))}
    for key in ("cpu_per_gpu", "memory_per_gpu"):
        try:
            model.parse_quantity(out[key])
        except model.ModelError as exc:
            raise SystemExit(f"GPUQUOTA_{key.upper()}: {exc}") from exc
    return out


SETTINGS = settings() if os.environ.get("GPUQUOTA_BACKEND") else None
_CLIENT: dynamic.DynamicClient | None = None


def client() -> dynamic.DynamicClient:
    global _CLIENT  # noqa: PLW0603 (one client per process, made on first use)
    if _CLIENT is None:
        try:
            config.load_incluster_config()
        except config.ConfigException:
            config.load_kube_config()
        _CLIENT = dynamic.DynamicClient(api_client.ApiClient())
    return _CLIENT


def apply(obj: dict) -> None:
    meta = obj["metadata"]
    resource = client().resources.get(api_version=obj["apiVersion"], kind=obj["kind"])
    resource.server_side_apply(body=obj, name=meta["name"], namespace=meta.get("namespace"),
                               field_manager=FIELD_MANAGER, force_conflicts=True)


def delete(api_version: str, kind: str, name: str, namespace: str | None = None) -> bool:
    resource = client().resources.get(api_version=api_version, kind=kind)
    try:
        resource.delete(name=name, namespace=namespace)
    except NotFoundError:
        return False
    return True


def now() -> datetime.datetime:
    return datetime.datetime.now(datetime.timezone.utc)


def conditions(state: dict, generation, when: str, old: list | None, error: str = "") -> list[dict]:
    """Ready and Expired, with lastTransitionTime kept while a status does not change."""
    if error:
        ready = ("False", "ApplyFailed", error)
    elif state["expired"]:
        ready = ("True", "Expired", "validUntil has passed: the quota is 0, running Pods keep running")
    else:
        msg = ", ".join(f"{r}={n}" for r, n in state["resources"].items())
        if state["unenforced"]:
            msg += f"; not enforced by the backend: {', '.join(state['unenforced'])}"
        ready = ("True", "Reconciled", msg)
    expired = ("True", "ValidUntilPassed", "validUntil has passed") if state["expired"] else \
        ("False", "Valid", "within validUntil")
    previous = {c.get("type"): c for c in old or []}
    out = []
    for ctype, (status, reason, message) in (("Ready", ready), ("Expired", expired)):
        since = previous.get(ctype, {}).get("lastTransitionTime") \
            if previous.get(ctype, {}).get("status") == status else when
        out.append({"type": ctype, "status": status, "reason": reason, "message": message,
                    "lastTransitionTime": since or when, "observedGeneration": generation})
    return out


def reconcile_one(name: str, namespace: str, spec: dict, *, body, status: dict, patch, settings_: dict) -> dict:
    """Apply what the GPUQuota should be now; report it on status and, on a change, as an event."""
    at = now()
    objects, state = model.gpuquota_objects(
        name, namespace, spec, backend=settings_["backend"], flavors=settings_["flavors"],
        cohort=settings_["cohort"], now=at, cpu_per_gpu=settings_["cpu_per_gpu"],
        memory_per_gpu=settings_["memory_per_gpu"])
    when = at.strftime("%Y-%m-%dT%H:%M:%SZ")
    generation = (body.get("metadata") or {}).get("generation")
    try:
        for obj in objects:
            apply(obj)
    except Exception as exc:  # the API's refusal goes on the object, kopf retries
        patch.status["conditions"] = conditions(state, generation, when, status.get("conditions"), str(exc)[:500])
        kopf.warn(body, reason="ApplyFailed", message=str(exc)[:500])
        raise kopf.TemporaryError(f"applying {name}: {exc}", delay=15) from exc
    summary = {"gpus": state["gpus"], "expired": state["expired"], "backend": settings_["backend"],
               "objects": ["/".join(filter(None, (o["kind"], o["metadata"].get("namespace"), o["metadata"]["name"])))
                           for o in objects]}
    changed = any(status.get(k) != v for k, v in summary.items())
    patch.status.update(summary)
    patch.status["observedGeneration"] = generation
    patch.status["conditions"] = conditions(state, generation, when, status.get("conditions"))
    if changed:
        if state["expired"]:
            kopf.warn(body, reason="Expired", message="validUntil has passed: quota set to 0 GPUs")
        else:
            kopf.info(body, reason="Reconciled", message=f"{state['gpus']} GPUs through {settings_['backend']}")
    return summary


@kopf.on.resume(GROUP, VERSION, PLURAL)
@kopf.on.create(GROUP, VERSION, PLURAL)
@kopf.on.update(GROUP, VERSION, PLURAL, field="spec")
def reconcile(name, namespace, spec, **kwargs):
    return reconcile_one(name, namespace, dict(spec), body=kwargs["body"], status=dict(kwargs["status"] or {}),
                         patch=kwargs["patch"], settings_=SETTINGS)


@kopf.timer(GROUP, VERSION, PLURAL, interval=SETTINGS["resync_seconds"] if SETTINGS else 15,
            idle=None, sharp=True)
def resync(name, namespace, spec, **kwargs):
    # validUntil passes without any change to the object: the timer notices it.
    reconcile_one(name, namespace, dict(spec), body=kwargs["body"], status=dict(kwargs["status"] or {}),
                  patch=kwargs["patch"], settings_=SETTINGS)


@kopf.on.delete(GROUP, VERSION, PLURAL)
def cleanup(name, namespace, **_):
    names = model.gpuquota_names(name, namespace)
    delete("v1", "ResourceQuota", names["resource_quota"], namespace)
    if SETTINGS["backend"] == "kueue":
        delete(model.KUEUE_API, "LocalQueue", names["local_queue"], namespace)
        delete(model.KUEUE_API, "ClusterQueue", names["queue"])
    else:
        delete(model.VOLCANO_API, "Queue", names["queue"])
