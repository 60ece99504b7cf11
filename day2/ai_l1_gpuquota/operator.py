"""kopf handlers: a GPUQuota is applied on create, change and resume, re-checked on a timer (so
validUntil takes effect without an edit), and what it created is removed on delete (kopf's
finalizer keeps the object until the cleanup succeeded).

Ownership: everything a GPUQuota creates carries the annotation ai.internal/gpuquota:
<namespace>/<name>. An object of a target name without that mark is never patched (reconcile
leaves it, Ready=False NotOwner, a Warning event) nor deleted (cleanup leaves it).

Fail closed: a spec the controller cannot enforce (gpuquota_errors: e.g. a validUntil or
totalGPUs an older or looser schema let through) is not a crash; its objects are applied with
0 GPUs and no borrowing, as on expiry (a new quota gets them at 0, an existing one drops its old
cap), with Ready=False InvalidSpec and a Warning event, until the spec is fixed.
"""

from __future__ import annotations

import datetime
import json
import logging
import os

import kopf
from ansible_collections.ai_platform.l1.plugins.module_utils import gpu_queues as model
from kubernetes import config, dynamic
from kubernetes.client import api_client
from kubernetes.dynamic.exceptions import NotFoundError

GROUP, VERSION, PLURAL = model.GPUQUOTA_GROUP, "v1", "gpuquotas"
FIELD_MANAGER = model.GPUQUOTA_MANAGED_BY
LOG = logging.getLogger(__name__)


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


def get(api_version: str, kind: str, name: str, namespace: str | None = None) -> dict | None:
    resource = client().resources.get(api_version=api_version, kind=kind)
    try:
        return resource.get(name=name, namespace=namespace).to_dict()
    except NotFoundError:
        return None


def apply(obj: dict) -> None:
    meta = obj["metadata"]
    resource = client().resources.get(api_version=obj["apiVersion"], kind=obj["kind"])
    resource.server_side_apply(body=obj, name=meta["name"], namespace=meta.get("namespace"),
                               field_manager=FIELD_MANAGER, force_conflicts=True)


def delete(api_version: str, kind: str, name: str, namespace: str | None, uid: str) -> bool:
    """Delete the object read as `uid`: the API refuses (409) if it has been replaced since."""
    resource = client().resources.get(api_version=api_version, kind=kind)
    try:
        resource.delete(name=name, namespace=namespace, body={"preconditions": {"uid": uid}})
    except NotFoundError:
        return False
    return True


def delete_owned(api_version: str, kind: str, name: str, namespace: str | None, owner: str) -> bool:
    """Delete the object only when it carries `owner`'s mark; one without it is left alone."""
    found = get(api_version, kind, name, namespace)
    if found is None:
        return False
    if not model.gpuquota_owned_by(found, owner):
        LOG.warning("left %s %s: it is not GPUQuota %s's", kind, "/".join(filter(None, (namespace, name))), owner)
        return False
    return delete(api_version, kind, name, namespace, found["metadata"]["uid"])


def queue_kind(backend: str) -> tuple[str, str]:
    return (model.KUEUE_API, "ClusterQueue") if backend == "kueue" else (model.VOLCANO_API, "Queue")


def ref(obj: dict) -> str:
    return "/".join(filter(None, (obj["kind"], obj["metadata"].get("namespace"), obj["metadata"]["name"])))


def now() -> datetime.datetime:
    return datetime.datetime.now(datetime.timezone.utc)


def conditions(state: dict, generation, when: str, old: list | None,
               refused: tuple[str, str] | None = None) -> list[dict]:
    """Ready and Expired, with lastTransitionTime kept while a status does not change. refused:
    (reason, message) of a failure (ApplyFailed, NotOwner); an invalid spec is InvalidSpec."""
    if refused:
        ready = ("False", *refused)
    elif state["errors"]:
        ready = ("False", "InvalidSpec", f"{'; '.join(state['errors'])}: quota set to 0 GPUs until the spec is fixed")
    elif state["expired"]:
        ready = ("True", "Expired", "validUntil has passed: the quota is 0, running Pods keep running")
    else:
        msg = ", ".join(f"{r}={n}" for r, n in state["resources"].items())
        if state["unenforced"]:
            msg += f"; not enforced by the backend: {', '.join(state['unenforced'])}"
        ready = ("True", "Reconciled", msg)
    if state["errors"]:
        expired = ("Unknown", "InvalidSpec", "the spec is invalid")
    else:
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


def not_owned(objects: list[dict], found: dict[str, dict | None], owner: str) -> list[dict]:
    """The objects whose target exists (`found`, by ref) without `owner`'s mark, and the LocalQueue
    when its queue is one of them (it would send the namespace's work to a queue not its own)."""
    out = [o for o in objects if found[ref(o)] is not None and not model.gpuquota_owned_by(found[ref(o)], owner)]
    if any(o["kind"] in ("ClusterQueue", "Queue") for o in out):
        out += [o for o in objects if o["kind"] == "LocalQueue" and o not in out]
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
    owner = model.gpuquota_owner(namespace, name)
    try:
        found = {ref(o): get(o["apiVersion"], o["kind"], o["metadata"]["name"], o["metadata"].get("namespace"))
                 for o in objects}
        refused = not_owned(objects, found, owner)
        applied = [o for o in objects if o not in refused]
        for obj in applied:
            old = found[ref(obj)]
            if obj["kind"] == "LocalQueue" and old and (old.get("spec") or {}).get("clusterQueue") != \
                    obj["spec"]["clusterQueue"]:  # immutable in Kueue: re-pointed (legacy name) by a re-create
                delete(obj["apiVersion"], obj["kind"], obj["metadata"]["name"], namespace, old["metadata"]["uid"])
            apply(obj)
        if not refused:  # the queue's name before the hash (an older controller's), once re-pointed
            delete_owned(*queue_kind(settings_["backend"]), model.gpuquota_names(name, namespace)["legacy_queue"],
                         None, owner)
    except Exception as exc:  # the API's refusal goes on the object, kopf retries
        patch.status["conditions"] = conditions(state, generation, when, status.get("conditions"),
                                                ("ApplyFailed", str(exc)[:500]))
        kopf.warn(body, reason="ApplyFailed", message=str(exc)[:500])
        raise kopf.TemporaryError(f"applying {name}: {exc}", delay=15) from exc
    summary = {"gpus": state["gpus"], "expired": state["expired"], "backend": settings_["backend"],
               "objects": [ref(o) for o in applied]}
    failure = ("NotOwner", f"not taken over, they exist without annotation {model.OWNER_ANNOTATION}={owner}: "
               f"{', '.join(ref(o) for o in refused)}") if refused else None
    new = conditions(state, generation, when, status.get("conditions"), failure)
    old_ready = {c.get("type"): c for c in status.get("conditions") or []}.get("Ready", {})
    changed = any(status.get(k) != v for k, v in summary.items()) or \
        (old_ready.get("reason"), old_ready.get("message")) != (new[0]["reason"], new[0]["message"])
    patch.status.update(summary)
    patch.status["observedGeneration"] = generation
    patch.status["conditions"] = new
    if changed:
        if refused or state["errors"]:
            kopf.warn(body, reason=new[0]["reason"], message=new[0]["message"][:500])
        elif state["expired"]:
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
    # Only what carries this GPUQuota's mark: a team's own LocalQueue or ResourceQuota of the same
    # name, or another GPUQuota's queue, is left alone.
    names, owner = model.gpuquota_names(name, namespace), model.gpuquota_owner(namespace, name)
    delete_owned("v1", "ResourceQuota", names["resource_quota"], namespace, owner)
    if SETTINGS["backend"] == "kueue":
        delete_owned(model.KUEUE_API, "LocalQueue", names["local_queue"], namespace, owner)
    for queue in (names["queue"], names["legacy_queue"]):
        delete_owned(*queue_kind(SETTINGS["backend"]), queue, None, owner)
