# -*- coding: utf-8 -*-
# Copyright: ai_platform L1 contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Team GPU queues: one model of teams (seed 4.1.6) rendered for Volcano and for Kueue.

The model (role gpu_queues, variable gpu_queues_teams) is a list of teams::

    name: ai-platform-team          # DNS-1123 label: the queue's name
    weight: 10                      # >= 1
    capability: {nvidia.com/gpu: 128, cpu: 512, memory: 4096Gi}
    reclaimable: true
    guarantee: {percent: 50, resources: [nvidia.com/gpu]}   # optional; resources: default all
    namespaces: [ai-platform]       # where the team submits from (at least one)
    accelerator_models: [A100-SXM-80GB]   # optional: the models it may use (default all)

Pure functions only (no Kubernetes client): the role's filter plugin and the GPUQuota controller
(day2/ai_l1_day2/gpuquota) both import them, so the two backends are rendered in one place.
"""

from __future__ import annotations

import hashlib
import re
from decimal import ROUND_FLOOR, Decimal, InvalidOperation

TEAM_LABEL = "ai-platform.io/team"
# Accelerator vendor (the seed's `accelerator` node label) -> the device plugin's resource.
ACCELERATOR_RESOURCES = {"nvidia": "nvidia.com/gpu", "huawei-ascend": "huawei.com/Ascend910"}
MODEL_LABEL = "accelerator-model"
CPU_MEMORY_FLAVOR = "default-flavor"
KUEUE_API = "kueue.x-k8s.io/v1beta2"
VOLCANO_API = "scheduling.volcano.sh/v1beta1"

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
_QUANTITY = re.compile(r"^([0-9]+(?:\.[0-9]+)?)(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?$")
_SUFFIX = {"": 1, "m": Decimal("0.001"), "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15,
           "E": 10**18, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
TEAM_KEYS = {"name", "weight", "capability", "reclaimable", "guarantee", "namespaces", "accelerator_models"}


class ModelError(ValueError):
    """The team model is wrong; the message names the team and the field."""


def parse_quantity(value) -> Decimal:
    """A Kubernetes quantity (128, "4096Gi", "500m") as a Decimal of base units."""
    if isinstance(value, bool):
        raise ModelError(f"{value!r} is not a quantity")
    if isinstance(value, int):
        return Decimal(value)
    found = _QUANTITY.match(str(value).strip()) if isinstance(value, (str, float)) else None
    if not found:
        raise ModelError(f"{value!r} is not a Kubernetes quantity (e.g. 128, 512, 500m, 4096Gi)")
    try:
        return Decimal(found.group(1)) * Decimal(_SUFFIX[found.group(2) or ""])
    except InvalidOperation as exc:  # pragma: no cover - the pattern admits only numbers
        raise ModelError(f"{value!r} is not a quantity") from exc


def format_quantity(amount: Decimal, like) -> str:
    """amount in the unit family of `like` (the capability's own notation): binary suffixes keep
    the largest binary unit that divides it, cpu-like values fall back to millis."""
    amount = amount.quantize(Decimal("0.001"), rounding=ROUND_FLOOR)
    text = str(like)
    if re.search(r"[KMGTPE]i$", text):
        whole = int(amount)
        if whole >= _SUFFIX["Mi"]:  # rounded down to whole Mi: no byte-exact fractions of a Gi
            whole -= whole % _SUFFIX["Mi"]
        for suffix in ("Ei", "Pi", "Ti", "Gi", "Mi", "Ki"):
            if whole and whole % _SUFFIX[suffix] == 0:
                return f"{whole // _SUFFIX[suffix]}{suffix}"
        return str(whole)
    if amount == amount.to_integral_value():
        return str(int(amount))
    return f"{int(amount * 1000)}m"


def _is_accelerator(resource: str) -> bool:
    return resource in ACCELERATOR_RESOURCES.values()


def _capability_errors(where: str, capability) -> list[str]:
    if not isinstance(capability, dict) or not capability:
        return [f"{where}.capability: a dict of resource -> quantity is required"]
    errors = []
    for resource, value in capability.items():
        try:
            amount = parse_quantity(value)
        except ModelError as exc:
            errors.append(f"{where}.capability[{resource}]: {exc}")
            continue
        if _is_accelerator(resource) and amount != amount.to_integral_value():
            errors.append(f"{where}.capability[{resource}]: devices are whole numbers, got {value}")
    errors += [f"{where}.capability: {needed} is required (Kueue admits no workload whose requests its "
               "ClusterQueue does not cover)" for needed in ("cpu", "memory") if needed not in capability]
    if not any(_is_accelerator(r) for r in capability):
        errors.append(f"{where}.capability: no accelerator resource ({', '.join(ACCELERATOR_RESOURCES.values())})")
    return errors


def _guarantee_errors(where: str, guarantee, capability) -> list[str]:
    if guarantee is None:
        return []
    if not isinstance(guarantee, dict) or set(guarantee) - {"percent", "resources"}:
        return [f"{where}.guarantee: a dict with percent and optional resources"]
    errors = []
    pct = guarantee.get("percent")
    if isinstance(pct, bool) or not isinstance(pct, (int, float)) or not 0 <= pct <= 100:
        errors.append(f"{where}.guarantee.percent: {pct!r} is not a number from 0 to 100")
    resources = guarantee.get("resources") or []
    if not isinstance(resources, list):
        return [*errors, f"{where}.guarantee.resources: a list of capability resources"]
    errors += [f"{where}.guarantee.resources: {r} is not in capability"
               for r in resources if not isinstance(capability, dict) or r not in capability]
    return errors


def _namespace_errors(where: str, team: dict, owners: dict[str, str]) -> list[str]:
    namespaces = team.get("namespaces")
    if not isinstance(namespaces, list) or not namespaces:
        return [f"{where}.namespaces: at least one namespace is required"]
    errors = []
    for ns in namespaces:
        if not isinstance(ns, str) or not _DNS_LABEL.match(ns):
            errors.append(f"{where}.namespaces: {ns!r} is not a DNS-1123 label")
        elif owners.setdefault(ns, team.get("name")) != team.get("name"):
            errors.append(f"{where}.namespaces: {ns} already belongs to team {owners[ns]} "
                          "(a namespace submits to one team's queue)")
    return errors


def _team_errors(i: int, team, names: dict[str, int], owners: dict[str, str]) -> list[str]:
    where = f"gpu_queues_teams[{i}]"
    if not isinstance(team, dict):
        return [f"{where}: a team is a dict, got {type(team).__name__}"]
    errors = []
    name = team.get("name")
    if isinstance(name, str) and _DNS_LABEL.match(name):
        where = f"{where} ({name})"
        if name in names:
            errors.append(f"{where}: name repeats team {names[name]}")
        names.setdefault(name, i)
    else:
        errors.append(f"{where}.name: {name!r} is not a DNS-1123 label (lower case, digits, '-')")
    unknown = sorted(set(team) - TEAM_KEYS)
    if unknown:
        errors.append(f"{where}: unknown field(s) {', '.join(unknown)} (known: {', '.join(sorted(TEAM_KEYS))})")
    weight = team.get("weight")
    if isinstance(weight, bool) or not isinstance(weight, int) or weight < 1:
        errors.append(f"{where}.weight: {weight!r} is not an integer >= 1")
    if not isinstance(team.get("reclaimable"), bool):
        errors.append(f"{where}.reclaimable: {team.get('reclaimable')!r} is not a boolean")
    errors += _capability_errors(where, team.get("capability"))
    errors += _guarantee_errors(where, team.get("guarantee"), team.get("capability"))
    errors += _namespace_errors(where, team, owners)
    models = team.get("accelerator_models", [])
    if not isinstance(models, list) or not all(isinstance(m, str) and m for m in models):
        errors.append(f"{where}.accelerator_models: a list of model names (the accelerator-model label)")
    return errors


def validate_teams(teams) -> list[str]:
    """Every problem of the model, each naming the team and field (an empty list: valid)."""
    if not isinstance(teams, list) or not teams:
        return ["gpu_queues_teams: a non-empty list of teams is required"]
    names: dict[str, int] = {}
    owners: dict[str, str] = {}
    errors: list[str] = []
    for i, team in enumerate(teams):
        errors += _team_errors(i, team, names, owners)
    return errors


def check_teams(teams) -> None:
    errors = validate_teams(teams)
    if errors:
        raise ModelError("; ".join(errors))


def guaranteed(team: dict) -> dict[str, str]:
    """The guarantee as absolute quantities (Volcano takes resources, not a percentage): each
    guaranteed resource's capability x percent / 100, rounded down (whole devices)."""
    guarantee = team.get("guarantee")
    if not guarantee:
        return {}
    pct = Decimal(str(guarantee["percent"]))
    out = {}
    for resource in guarantee.get("resources") or list(team["capability"]):
        cap = team["capability"][resource]
        amount = parse_quantity(cap) * pct / 100
        if _is_accelerator(resource):
            amount = amount.to_integral_value(rounding=ROUND_FLOOR)
        out[resource] = format_quantity(amount, cap)
    return out


# ------------------------------------------------------------------------------------- Volcano

def volcano_queues(teams: list[dict]) -> list[dict]:
    """The seed's Queues (scheduling.volcano.sh/v1beta1) with the guarantee made absolute."""
    check_teams(teams)
    out = []
    for team in teams:
        spec = {"weight": team["weight"], "reclaimable": team["reclaimable"],
                "capability": {r: str(v) for r, v in team["capability"].items()}}
        guarantee = guaranteed(team)
        if guarantee:
            spec["guarantee"] = {"resource": guarantee}
            # Volcano's admission webhook wants guarantee <= deserved <= capability for every
            # guaranteed resource: deserved is set to the guarantee, the share the team is owed
            # (the proportion plugin works out the live share by weight).
            spec["deserved"] = dict(guarantee)
        out.append({"apiVersion": VOLCANO_API, "kind": "Queue",
                    "metadata": {"name": team["name"], "labels": {TEAM_LABEL: team["name"]}}, "spec": spec})
    return out


def team_namespaces(teams: list[dict]) -> list[dict]:
    """The namespaces teams submit from, labelled with their team (Kueue's ClusterQueue selects them)."""
    return [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns, "labels": {TEAM_LABEL: t["name"]}}}
            for t in teams for ns in t["namespaces"]]


# --------------------------------------------------------------------------------------- Kueue

def flavor_name(model: str) -> str:
    """A100-SXM-80GB -> a100-sxm-80gb (a DNS-1123 name for the ResourceFlavor)."""
    name = re.sub(r"[^a-z0-9]+", "-", model.lower()).strip("-")
    return name[:63].rstrip("-") or "accelerator"


def accelerator_flavors(nodes: list[dict]) -> list[dict]:
    """One flavor per accelerator model present on the Nodes (the node_labels role's labels):
    [{name, model, accelerator, resource}], sorted by name."""
    found = {}
    for node in nodes:
        labels = (node.get("metadata") or {}).get("labels") or {}
        accelerator, model = labels.get("accelerator"), labels.get(MODEL_LABEL)
        if accelerator in ACCELERATOR_RESOURCES and model:
            found[model] = {"name": flavor_name(model), "model": model, "accelerator": accelerator,
                            "resource": ACCELERATOR_RESOURCES[accelerator]}
    return sorted(found.values(), key=lambda f: f["name"])


def kueue_limits(team: dict, resource: str) -> dict:
    """nominalQuota / borrowingLimit / lendingLimit of one resource (README: the mapping).

    reclaimable: nominal = the guarantee (capability without one); it may borrow up to its
      capability, and what it runs on borrowed quota is taken back by preemption.
    not reclaimable: nominal = capability, never borrows (nothing of it is ever reclaimed);
      lends what is above its guarantee, all of it without a guarantee being exclusive.
    """
    cap = team["capability"][resource]
    guarantee = guaranteed(team)
    limits = {"name": resource}
    if team["reclaimable"]:
        nominal = guarantee.get(resource, str(cap))
        limits["nominalQuota"] = nominal
        spare = parse_quantity(cap) - parse_quantity(nominal)
        limits["borrowingLimit"] = format_quantity(spare, cap)
    else:
        limits["nominalQuota"] = str(cap)
        limits["borrowingLimit"] = "0"
        lend = parse_quantity(cap) - parse_quantity(guarantee[resource]) if resource in guarantee else Decimal(0)
        limits["lendingLimit"] = format_quantity(lend, cap)
    return limits


def cluster_queue(name: str, cohort: str, weight, resource_groups: list[dict], *, namespace_selector: dict,
                  labels: dict | None = None) -> dict:
    """A ClusterQueue in the cohort: fair-sharing weight, lenders reclaim by preemption."""
    return {"apiVersion": KUEUE_API, "kind": "ClusterQueue",
            "metadata": {"name": name, "labels": labels or {}},
            "spec": {"cohortName": cohort, "namespaceSelector": namespace_selector,
                     "queueingStrategy": "BestEffortFIFO",
                     "fairSharing": {"weight": str(weight)},
                     "preemption": {"reclaimWithinCohort": "Any", "withinClusterQueue": "LowerPriority"},
                     "resourceGroups": resource_groups}}


def team_resource_groups(team: dict, flavors: list[dict], limits=kueue_limits) -> list[dict]:
    """cpu and memory on the default flavor; each accelerator resource on its models' flavors
    (only the team's accelerator_models when it names some). Kueue counts quota per flavor: a team
    allowed two models may use its capability on each; the GPUQuota's ResourceQuota caps the sum."""
    groups = [{"coveredResources": ["cpu", "memory"],
               "flavors": [{"name": CPU_MEMORY_FLAVOR,
                            "resources": [limits(team, "cpu"), limits(team, "memory")]}]}]
    allowed = set(team.get("accelerator_models") or [])
    for resource in sorted(r for r in team["capability"] if _is_accelerator(r)):
        usable = [f for f in flavors if f["resource"] == resource and (not allowed or f["model"] in allowed)]
        if usable:
            groups.append({"coveredResources": [resource],
                           "flavors": [{"name": f["name"], "resources": [limits(team, resource)]} for f in usable]})
    return groups


def kueue_objects(teams: list[dict], flavors: list[dict], cohort: str) -> list[dict]:
    """ResourceFlavors, one ClusterQueue per team in `cohort`, a LocalQueue (named after the team)
    in each of its namespaces. Namespaces themselves: team_namespaces()."""
    check_teams(teams)
    out = [{"apiVersion": KUEUE_API, "kind": "ResourceFlavor", "metadata": {"name": CPU_MEMORY_FLAVOR}, "spec": {}}]
    for f in flavors:
        out.append({"apiVersion": KUEUE_API, "kind": "ResourceFlavor",
                    "metadata": {"name": f["name"], "labels": {"accelerator": f["accelerator"]}},
                    "spec": {"nodeLabels": {MODEL_LABEL: f["model"]}}})
    for team in teams:
        selector = {"matchLabels": {TEAM_LABEL: team["name"]}}
        out.append(cluster_queue(team["name"], cohort, team["weight"], team_resource_groups(team, flavors),
                                 namespace_selector=selector, labels={TEAM_LABEL: team["name"]}))
        for ns in team["namespaces"]:
            out.append({"apiVersion": KUEUE_API, "kind": "LocalQueue",
                        "metadata": {"name": team["name"], "namespace": ns, "labels": {TEAM_LABEL: team["name"]}},
                        "spec": {"clusterQueue": team["name"]}})
    return out


def queue_objects(backend: str, teams: list[dict], flavors: list[dict], cohort: str) -> list[dict]:
    """Everything the role applies for the backend, namespaces first."""
    if backend == "volcano":
        return team_namespaces(teams) + volcano_queues(teams)
    if backend == "kueue":
        return team_namespaces(teams) + kueue_objects(teams, flavors, cohort)
    raise ModelError(f"unknown backend {backend!r} (volcano or kueue)")


# ------------------------------------------------------------------------ GPUQuota (seed 5.2)

GPUQUOTA_GROUP = "ai.internal"
GPUQUOTA_MANAGED_BY = "gpuquota-controller"
MANAGED_LABEL = "app.kubernetes.io/managed-by"
OWNER_ANNOTATION = "ai.internal/gpuquota"


GPUQUOTA_MAX_GPUS = 100000  # the CRD's maximum: cpu and memory per GPU stay exact Decimals below it
# RFC 3339 date-time, the CRD's pattern for validUntil: what Kubernetes' date-time format alone admits
# also takes trailing text after a second 't', any character before the fraction and offsets past 23:59.
GPUQUOTA_DATE_TIME = re.compile(
    r"(?P<date>(000[1-9]|00[1-9][0-9]|0[1-9][0-9]{2}|[1-9][0-9]{3})-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01]))"
    r"[Tt](?P<time>([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9])(\.(?P<fraction>[0-9]+))?"
    r"(?P<zone>[Zz]|[+-]([01][0-9]|2[0-3]):[0-5][0-9])")


def gpuquota_valid_until(text):
    """validUntil as an aware datetime; ModelError for anything but an RFC 3339 date-time."""
    from datetime import datetime  # noqa: PLC0415 (only these helpers need it)

    found = GPUQUOTA_DATE_TIME.fullmatch(text) if isinstance(text, str) else None
    if not found:
        raise ModelError(f"{text!r} is not an RFC 3339 date-time (e.g. 2026-12-31T23:59:59Z)")
    zone = found["zone"].upper().replace("Z", "+00:00")
    fraction = f".{found['fraction'][:6]:0<6}" if found["fraction"] else ""
    try:  # a day past the month's end
        return datetime.fromisoformat(f"{found['date']}T{found['time']}{fraction}{zone}")
    except ValueError as exc:
        raise ModelError(f"{text!r} is not a date: {exc}") from exc


def gpuquota_expired(spec: dict, now) -> bool:
    """validUntil (RFC 3339) is past. `now` is an aware datetime."""
    until = spec.get("validUntil")
    return until is not None and gpuquota_valid_until(until) <= now


def gpuquota_errors(spec) -> list[str]:
    """What the controller cannot enforce as written, each naming the field. The CRD's schema
    refuses most of it; this catches what the API server stores anyway (objects stored under an
    older schema, values a looser schema admits)."""
    if not isinstance(spec, dict):
        return ["spec: an object is required"]
    errors = []
    if not isinstance(spec.get("team"), str) or not spec["team"]:
        errors.append(f"team: {spec.get('team')!r} is not a non-empty string")
    total = spec.get("totalGPUs")
    if isinstance(total, bool) or not isinstance(total, int) or not 0 <= total <= GPUQUOTA_MAX_GPUS:
        errors.append(f"totalGPUs: {total!r} is not an integer from 0 to {GPUQUOTA_MAX_GPUS}")
    priority = spec.get("priority", 3)
    if isinstance(priority, bool) or not isinstance(priority, int) or not 1 <= priority <= 5:
        errors.append(f"priority: {priority!r} is not an integer from 1 to 5")
    if not isinstance(spec.get("preemptible", False), bool):
        errors.append(f"preemptible: {spec['preemptible']!r} is not a boolean")
    if spec.get("validUntil") is not None:
        try:
            gpuquota_valid_until(spec["validUntil"])
        except ModelError as exc:
            errors.append(f"validUntil: {exc}")
    for key in ("allowedModels", "excludedNodes"):
        value = spec.get(key) or []
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            errors.append(f"{key}: {value!r} is not a list of strings")
    return errors


def _hashed_name(readable: str, key: str, limit: int) -> str:
    """gpuquota-<readable, cut to fit>-<16 hex of sha256(key)>: a DNS-1123 label (subdomain past
    63) of at most `limit` characters, distinct for distinct keys whatever the readable part is."""
    digest = hashlib.sha256(key.encode()).hexdigest()[:16]
    readable = re.sub(r"[^a-z0-9]+", "-", readable.lower())[:limit - len("gpuquota--") - len(digest)].strip("-")
    return f"gpuquota-{readable}-{digest}" if readable else f"gpuquota-{digest}"


def gpuquota_names(name: str, namespace: str) -> dict:
    """What a GPUQuota creates: a ResourceQuota beside it, a cluster-wide queue, a LocalQueue.

    The cluster-wide queue is `gpuquota-<namespace>-<name, cut to fit>-<hash of namespace/name>`,
    at most 63 characters (a label value wherever a consumer uses it as one): `<namespace>-<name>`
    alone is ambiguous (research-lab/x and research/lab-x). The namespaced names cannot collide
    across namespaces. legacy_queue: the name before the hash, removed when it carries this
    GPUQuota's mark."""
    rq = f"gpuquota-{name}"
    return {"resource_quota": rq if len(rq) <= 253 else _hashed_name(name, name, 253),
            "queue": _hashed_name(f"{namespace}-{name}", f"{namespace}/{name}", 63),
            "local_queue": name, "legacy_queue": f"gpuquota-{namespace}-{name}"[:253]}


def gpuquota_owner(namespace: str, name: str) -> str:
    """The mark (annotation OWNER_ANNOTATION) on everything a GPUQuota creates: the controller
    patches and deletes only objects that carry it."""
    return f"{namespace}/{name}"


def gpuquota_owned_by(obj, owner: str) -> bool:
    return (((obj or {}).get("metadata") or {}).get("annotations") or {}).get(OWNER_ANNOTATION) == owner


def _label_value(text: str) -> str:
    """text as a valid label value (the API refuses the whole object for a bad one)."""
    return re.sub(r"[^A-Za-z0-9._-]+", "-", text)[:63].strip("-._")


def gpuquota_resources(spec: dict, flavors: list[dict]) -> dict[str, int]:
    """GPUs per accelerator resource: totalGPUs for the resources of allowedModels (every
    accelerator resource when it names none), 0 for the others."""
    total = int(spec["totalGPUs"])
    allowed = set(spec.get("allowedModels") or [])
    if not allowed:
        return {r: total for r in sorted(ACCELERATOR_RESOURCES.values())}
    usable = {f["resource"] for f in flavors if f["model"] in allowed}
    return {r: (total if r in usable else 0) for r in sorted(ACCELERATOR_RESOURCES.values())}


def gpuquota_objects(name: str, namespace: str, spec: dict, *, backend: str, flavors: list[dict], cohort: str,
                     now, cpu_per_gpu: str, memory_per_gpu: str) -> tuple[list[dict], dict]:
    """The objects a GPUQuota reconciles into, and its state for the status.

    An expired GPUQuota keeps its objects with zero quota: nothing new is admitted, and running
    Pods are not touched (a ResourceQuota never evicts; Kueue keeps admitted workloads when a
    quota shrinks). An invalid one (state["errors"], gpuquota_errors) fails closed the same way:
    its objects are rendered with 0 GPUs from its name alone, never with its old or its bad cap.
    Either way a Kueue queue does not borrow: zero quota means nothing admitted."""
    errors = gpuquota_errors(spec)
    if errors:
        spec = {"team": spec.get("team") if isinstance(spec, dict) and isinstance(spec.get("team"), str) else "",
                "totalGPUs": 0}
    expired = not errors and gpuquota_expired(spec, now)
    names = gpuquota_names(name, namespace)
    per_resource = gpuquota_resources({**spec, "totalGPUs": 0 if expired else spec["totalGPUs"]}, flavors)
    gpus = max(per_resource.values())
    meta_labels = {MANAGED_LABEL: GPUQUOTA_MANAGED_BY, TEAM_LABEL: _label_value(spec["team"])}
    owner = {OWNER_ANNOTATION: gpuquota_owner(namespace, name)}
    borrows = bool(spec.get("preemptible", False)) and not (expired or errors)
    objects = [{"apiVersion": "v1", "kind": "ResourceQuota",
                "metadata": {"name": names["resource_quota"], "namespace": namespace, "labels": meta_labels,
                             "annotations": owner},
                "spec": {"hard": {f"requests.{r}": str(n) for r, n in per_resource.items()}}}]
    if backend == "kueue":
        team = {"name": names["queue"], "reclaimable": borrows,
                "capability": {"cpu": format_quantity(parse_quantity(cpu_per_gpu) * gpus, cpu_per_gpu),
                               "memory": format_quantity(parse_quantity(memory_per_gpu) * gpus, memory_per_gpu),
                               **per_resource}}

        def limits(team, resource):
            # preemptible: may borrow idle quota of the cohort (and gives it back by preemption).
            out = {"name": resource, "nominalQuota": str(team["capability"][resource])}
            if not team["reclaimable"]:
                out["borrowingLimit"] = "0"
            return out

        usable = [f for f in flavors if per_resource.get(f["resource"], 0) or not spec.get("allowedModels")]
        queue = cluster_queue(names["queue"], cohort, spec.get("priority", 3),
                              team_resource_groups(team, usable, limits),
                              namespace_selector={"matchLabels": {"kubernetes.io/metadata.name": namespace}},
                              labels=meta_labels)
        queue["metadata"]["annotations"] = owner
        objects.append(queue)
        objects.append({"apiVersion": KUEUE_API, "kind": "LocalQueue",
                        "metadata": {"name": names["local_queue"], "namespace": namespace, "labels": meta_labels,
                                     "annotations": owner},
                        "spec": {"clusterQueue": names["queue"]}})
    elif backend == "volcano":
        objects.append({"apiVersion": VOLCANO_API, "kind": "Queue",
                        "metadata": {"name": names["queue"], "labels": meta_labels, "annotations": owner},
                        "spec": {"weight": int(spec.get("priority", 3)),
                                 "reclaimable": bool(spec.get("preemptible", False)),
                                 "capability": {r: str(n) for r, n in per_resource.items()}}})
    else:
        raise ModelError(f"unknown backend {backend!r} (volcano or kueue)")
    state = {"expired": expired, "gpus": gpus, "resources": per_resource, "errors": errors,
             "unenforced": ["excludedNodes"] if spec.get("excludedNodes") else []}
    return objects, state
