# -*- coding: utf-8 -*-
# Copyright: (c) 2025, ai_platform L1 contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""NVIDIA GPU discovery through NVML (pynvml) plus the kernel log for XID errors.

Pure Python with no Ansible imports, so tests/device/gpu_check.py can load it on a
machine that only has python3 and nvidia-ml-py. The gpu_info module wraps it.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import ctypes
import json
import re
import time
import traceback
from datetime import datetime, timedelta, timezone

from ansible_collections.ai_platform.l1.plugins.module_utils import accelerator_health, device_io

try:
    import pynvml

    HAS_PYNVML = True
    PYNVML_IMPORT_ERROR = None
except ImportError:
    pynvml = None
    HAS_PYNVML = False
    PYNVML_IMPORT_ERROR = traceback.format_exc()

# Application XIDs (user-program faults) that the NVIDIA device plugin also ignores
# for health; they are still listed in xid_errors (the one XID policy: accelerator_health).
DEFAULT_XID_IGNORE = list(accelerator_health.APPLICATION_XIDS)
DEFAULT_XID_WINDOW = 86400
XID_LIMIT_PER_GPU = 100

# NVML constants, kept here so a pynvml without one of them does not break us.
_NOT_SUPPORTED = 3
_INVALID_ARGUMENT = 2
_FUNCTION_NOT_FOUND = 13
_ARGUMENT_VERSION_MISMATCH = 25
_UNSUPPORTED = (_NOT_SUPPORTED, _FUNCTION_NOT_FOUND, _ARGUMENT_VERSION_MISMATCH)
_NVLINK_DEVICE_TYPE_SWITCH = 2
_P2P_CAPS_INDEX_NVLINK = 2
_P2P_STATUS_OK = 0
_GPU_INSTANCE_PROFILE_COUNT = 0x12
_NVLINK_MAX_LINKS = 36

_INIT_REASONS = {
    9: "NVIDIA kernel driver is not loaded (NVML: Driver Not Loaded)",
    12: "NVML library libnvidia-ml.so.1 not found (NVIDIA driver not installed)",
    4: "no permission to use NVML (NVML: Insufficient Permissions)",
    18: "NVIDIA driver and NVML library versions do not match (reboot or reload the driver)",
}

XID_RE = re.compile(
    r"NVRM: Xid \(PCI:([0-9a-fA-F]+):([0-9a-fA-F]+):([0-9a-fA-F]+)(?:\.[0-9a-fA-F]+)?\): (\d+),\s*(.*)"
)
# NVSwitch errors: "nvidia-nvswitch0: SXid (PCI:0000:c5:00.0): 24007, Fatal, Link 44 ...".
SXID_RE = re.compile(
    r"nvidia-nvswitch\d*: SXid \(PCI:([0-9a-fA-F]+):([0-9a-fA-F]+):([0-9a-fA-F]+)(?:\.[0-9a-fA-F]+)?\): (\d+),\s*(.*)"
)
# The lines after an SXid's first one ("..., Severity 0 Engine ...", "..., Data {...}") are its details.
_SXID_DETAIL_RE = re.compile(r"^(?:Severity \d|Data \{)")
# A GPU that fell off the bus is not always reported with an Xid token:
# "NVRM: GPU 0000:3b:00.0: GPU has fallen off the bus." It counts as XID 79, which says the same.
FALLEN_OFF_BUS_XID = 79
_PCI_ADDRESS_RE = re.compile(r"(?:PCI:)?([0-9a-fA-F]{4,8}):([0-9a-fA-F]{2}):([0-9a-fA-F]{2})\b")
_ISO_RE = re.compile(
    r"^(\d{4})-(\d\d)-(\d\d)[T ](\d\d):(\d\d):(\d\d)(?:[.,](\d+))?(Z|[+-]\d\d:?\d\d)?"
)
_SYSLOG_RE = re.compile(r"^([A-Z][a-z]{2}) +(\d{1,2}) (\d\d):(\d\d):(\d\d) ")
_DMESG_REL_RE = re.compile(r"^\[\s*(\d+\.\d+)\]")
# `dmesg -T`: "[Tue Dec  1 10:00:00 2026] ..." (local time).
_DMESG_CTIME_RE = re.compile(r"^\[[A-Z][a-z]{2} ([A-Z][a-z]{2}) +(\d{1,2}) (\d\d):(\d\d):(\d\d) (\d{4})\]")
# What may stand before a dmesg time: a raw priority ("<4>", dmesg -r), the facility and level
# of `dmesg --decode` ("kern  :warn  : "), a bare syslog "kernel: " tag.
_KERNEL_PREFIX_RE = re.compile(r"^(?:<\d{1,3}>)?(?:[a-z]+ *:[a-z]+ *: ?)?(?:kernel: *)?")
# Latest time accepted (9999-12-30): later ones cannot be shown as dates.
_MAX_STAMP = 253402128000.0
_MONTHS = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]


def empty_result(reason):
    """The documented absent result: present false, reason set, other keys empty."""
    return {
        "present": False,
        "reason": reason,
        "driver_version": "",
        "cuda_driver_version": "",
        "count": 0,
        "topology": "",
        "fabric_manager": {"required": False, "state": "n/a"},
        "gpus": [],
        "health": {"ok": True, "problems": []},
    }


def _code(exc):
    return getattr(exc, "value", None)


def _text(value):
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return "" if value is None else str(value)


class _Caller:
    """Calls NVML, turns unsupported answers into None and records real failures."""

    def __init__(self, nvml, errors):
        self.nvml = nvml
        self.errors = errors

    def __call__(self, what, fn_name, *args, **kwargs):
        fn = getattr(self.nvml, fn_name, None)
        if fn is None:
            return None
        try:
            return fn(*args, **kwargs)
        except UnicodeDecodeError as exc:
            # pynvml decodes strings as UTF-8; keep what the driver said, marked as garbled.
            self.errors.append("%s: not valid UTF-8" % what)
            return exc.object.decode("utf-8", "replace") if isinstance(exc.object, bytes) else None
        except self.nvml.NVMLError as exc:
            if _code(exc) not in _UNSUPPORTED:
                self.errors.append("%s: %s" % (what, _nvml_error_text(exc)))
            return None
        except Exception as exc:  # noqa: BLE001 -- a broken answer must never traceback
            self.errors.append("%s: %s" % (what, exc))
            return None


def _nvml_error_text(exc):
    try:
        return str(exc)
    except Exception:  # noqa: BLE001
        return "NVML error %s" % _code(exc)


def cuda_version_text(value):
    """12040 -> '12.4' (NVML encodes major*1000 + minor*10)."""
    if not isinstance(value, int) or value <= 0:
        return ""
    return "%d.%d" % (value // 1000, (value % 1000) // 10)


def normalize_pci(bus_id):
    """Any PCI address form -> (domain, bus, device) ints, or None."""
    m = re.match(r"^\s*([0-9a-fA-F]+):([0-9a-fA-F]+):([0-9a-fA-F]+)", bus_id or "")
    if not m:
        return None
    return tuple(int(x, 16) for x in m.groups())


def classify_topology(count, any_switch, nvlink_pairs_ok, pair_count):
    """single / nvswitch / nvlink-fullmesh / nvlink-partial / pcie ('' for no GPU)."""
    if count <= 0:
        return ""
    if count == 1:
        return "single"
    if any_switch:
        return "nvswitch"
    if pair_count and nvlink_pairs_ok == pair_count:
        return "nvlink-fullmesh"
    if nvlink_pairs_ok:
        return "nvlink-partial"
    return "pcie"


def _blank_gpu(index):
    return {
        "index": index,
        "name": "",
        "uuid": "",
        "vbios_version": "",
        "pci_bus_id": "",
        "memory_total_mib": None,
        "memory_used_mib": None,
        "temperature_c": None,
        "power_draw_w": None,
        "power_limit_w": None,
        "persistence_mode": None,
        "compute_capability": "",
        "mig": {"capable": False, "current": False, "pending": False, "profiles": [], "instances": []},
        "nvlink": {"links_active": 0, "remote_nvswitch": False},
        "ecc": {"dbe_volatile": None, "dbe_aggregate": None, "sbe_volatile": None, "sbe_aggregate": None},
        "remapped_rows": None,
        "retired_pages": None,
        "xid_errors": [],
        "errors": [],
    }


def _temperature(nvml, call, handle):
    sensor = getattr(nvml, "NVML_TEMPERATURE_GPU", 0)
    if hasattr(nvml, "nvmlDeviceGetTemperatureV"):
        quiet = _Caller(nvml, [])
        value = quiet("temperature", "nvmlDeviceGetTemperatureV", handle, sensor)
        if value is not None:
            return value
    # Drivers before nvmlDeviceGetTemperatureV only have the legacy call.
    return call("temperature", "nvmlDeviceGetTemperature", handle, sensor)


def _mig_profile_name(info):
    name = _text(getattr(info, "name", b""))
    if name.startswith("MIG "):
        name = name[4:]
    if not name:
        # Version 1 structs have no name: rebuild NVIDIA's "<slices>g.<GB>gb" form.
        name = "%dg.%dgb" % (info.sliceCount, int(round(info.memorySizeMB / 1024.0)))
    return name


def _mig_profiles(nvml, handle):
    """Supported GPU instance profile infos, ordered by slice count as the seed lists them."""
    quiet = _Caller(nvml, [])
    count = getattr(nvml, "NVML_GPU_INSTANCE_PROFILE_COUNT", _GPU_INSTANCE_PROFILE_COUNT)
    found = []
    version = 2
    for index in range(count):
        try:
            info = nvml.nvmlDeviceGetGpuInstanceProfileInfo(handle, index, version)
        except nvml.NVMLError as exc:
            if version == 2 and _code(exc) == _FUNCTION_NOT_FOUND:
                # Drivers without the V call only know the version 1 struct.
                version = 1
                info = quiet("mig profile %d" % index, "nvmlDeviceGetGpuInstanceProfileInfo", handle, index, 1)
            else:
                info = None  # NOT_SUPPORTED / INVALID_ARGUMENT: this GPU lacks the profile
        except Exception:  # noqa: BLE001
            info = None
        if info is None or not info.instanceCount:
            continue
        found.append((info.sliceCount, info.memorySizeMB, index, info))
    found.sort(key=lambda f: f[:3])
    return [f[3] for f in found]


def _mig(nvml, call, handle):
    mig = {"capable": False, "current": False, "pending": False, "profiles": [], "instances": []}
    modes = _Caller(nvml, [])("mig mode", "nvmlDeviceGetMigMode", handle)
    if not modes:
        return mig
    mig["capable"] = True
    mig["current"] = bool(modes[0])
    mig["pending"] = bool(modes[1])
    profiles = _mig_profiles(nvml, handle)
    names = {}
    for info in profiles:
        name = _mig_profile_name(info)
        names[info.id] = name
        if name not in mig["profiles"]:
            mig["profiles"].append(name)
    if mig["current"]:
        mig["instances"] = _mig_instances(nvml, call, handle, profiles, names)
    return mig


def _mig_instances(nvml, call, handle, profiles, names):
    instances = []
    for info in profiles:
        array = (nvml.c_nvmlGpuInstance_t * max(info.instanceCount, 1))()
        n = ctypes.c_uint(0)
        if call("mig instances", "nvmlDeviceGetGpuInstances", handle, info.id, array, ctypes.byref(n)) is None:
            continue
        for k in range(min(n.value, len(array))):
            gi = call("mig instance info", "nvmlGpuInstanceGetInfo", array[k])
            if gi is None:
                continue
            instances.append(
                {
                    "profile": names.get(gi.profileId, ""),
                    "profile_id": gi.profileId,
                    "gi_id": gi.id,
                    "placement_start": gi.placement.start,
                    "placement_size": gi.placement.size,
                }
            )
    return sorted(instances, key=lambda i: (i["placement_start"], i["gi_id"]))


def _nvlink(nvml, handle):
    """Active link count and whether any active link ends at an NVSwitch."""
    quiet = _Caller(nvml, [])
    active = 0
    switch = False
    max_links = getattr(nvml, "NVML_NVLINK_MAX_LINKS", _NVLINK_MAX_LINKS)
    for link in range(max_links):
        try:
            state = nvml.nvmlDeviceGetNvLinkState(handle, link)
        except nvml.NVMLError as exc:
            if link == 0 and _code(exc) == _NOT_SUPPORTED:
                break  # no NVLink on this GPU
            continue  # links beyond the GPU's count answer INVALID_ARGUMENT or NOT_SUPPORTED
        except Exception:  # noqa: BLE001
            continue
        if not state:
            continue
        active += 1
        remote = quiet("nvlink remote", "nvmlDeviceGetNvLinkRemoteDeviceType", handle, link)
        if remote == _NVLINK_DEVICE_TYPE_SWITCH:
            switch = True
    return {"links_active": active, "remote_nvswitch": switch}


def _ecc(nvml, call, handle):
    unc = getattr(nvml, "NVML_MEMORY_ERROR_TYPE_UNCORRECTED", 1)
    cor = getattr(nvml, "NVML_MEMORY_ERROR_TYPE_CORRECTED", 0)
    vol = getattr(nvml, "NVML_VOLATILE_ECC", 0)
    agg = getattr(nvml, "NVML_AGGREGATE_ECC", 1)
    return {
        "dbe_volatile": call("ecc", "nvmlDeviceGetTotalEccErrors", handle, unc, vol),
        "dbe_aggregate": call("ecc", "nvmlDeviceGetTotalEccErrors", handle, unc, agg),
        "sbe_volatile": call("ecc", "nvmlDeviceGetTotalEccErrors", handle, cor, vol),
        "sbe_aggregate": call("ecc", "nvmlDeviceGetTotalEccErrors", handle, cor, agg),
    }


def _remapped_rows(call, handle):
    rows = call("remapped rows", "nvmlDeviceGetRemappedRows", handle)
    if not rows or len(rows) != 4:
        return None
    return {
        "correctable": int(rows[0]),
        "uncorrectable": int(rows[1]),
        "pending": bool(rows[2]),
        "failure": bool(rows[3]),
    }


def _retired_pages(call, handle):
    sbe = call("retired pages", "nvmlDeviceGetRetiredPages", handle, 0)
    dbe = call("retired pages", "nvmlDeviceGetRetiredPages", handle, 1)
    if sbe is None or dbe is None:
        return None
    pending = call("retired pages", "nvmlDeviceGetRetiredPagesPendingStatus", handle)
    return {"sbe": len(sbe), "dbe": len(dbe), "pending": bool(pending)}


def _gpu(nvml, index, handle):
    gpu = _blank_gpu(index)
    call = _Caller(nvml, gpu["errors"])
    gpu["name"] = _text(call("name", "nvmlDeviceGetName", handle))
    gpu["uuid"] = _text(call("uuid", "nvmlDeviceGetUUID", handle))
    gpu["vbios_version"] = _text(call("vbios", "nvmlDeviceGetVbiosVersion", handle))
    pci = call("pci info", "nvmlDeviceGetPciInfo", handle)
    if pci is not None:
        gpu["pci_bus_id"] = _text(pci.busId)
    mem = call("memory", "nvmlDeviceGetMemoryInfo", handle)
    if mem is not None:
        gpu["memory_total_mib"] = int(mem.total) // (1024 * 1024)
        gpu["memory_used_mib"] = int(mem.used) // (1024 * 1024)
    gpu["temperature_c"] = _temperature(nvml, call, handle)
    power = call("power usage", "nvmlDeviceGetPowerUsage", handle)
    gpu["power_draw_w"] = None if power is None else power / 1000.0
    limit = call("power limit", "nvmlDeviceGetEnforcedPowerLimit", handle)
    gpu["power_limit_w"] = None if limit is None else limit / 1000.0
    persistence = call("persistence mode", "nvmlDeviceGetPersistenceMode", handle)
    gpu["persistence_mode"] = None if persistence is None else bool(persistence)
    cc = call("compute capability", "nvmlDeviceGetCudaComputeCapability", handle)
    if cc:
        gpu["compute_capability"] = "%d.%d" % tuple(cc)
    gpu["mig"] = _mig(nvml, call, handle)
    gpu["nvlink"] = _nvlink(nvml, handle)
    gpu["ecc"] = _ecc(nvml, call, handle)
    gpu["remapped_rows"] = _remapped_rows(call, handle)
    gpu["retired_pages"] = _retired_pages(call, handle)
    return gpu


def collect_nvml(nvml=None):
    """Everything NVML can tell, without the kernel log and systemd.

    Returns the contract's dict (xid_errors empty, fabric manager state not
    looked up) plus the private key '_nvswitch'.
    """
    nvml = nvml or pynvml
    try:
        nvml.nvmlInit()
    except nvml.NVMLError as exc:
        reason = _INIT_REASONS.get(_code(exc), "NVML initialisation failed: %s" % _nvml_error_text(exc))
        return dict(empty_result(reason), _nvswitch=False)
    except OSError as exc:
        return dict(empty_result("cannot load libnvidia-ml.so.1: %s" % exc), _nvswitch=False)
    try:
        return _collect_initialised(nvml)
    finally:
        try:
            nvml.nvmlShutdown()
        except Exception:  # noqa: BLE001 -- shutdown failures change nothing for the caller
            pass


def _collect_initialised(nvml):
    system_errors = []
    call = _Caller(nvml, system_errors)
    result = empty_result("")
    result["driver_version"] = _text(call("driver version", "nvmlSystemGetDriverVersion"))
    cuda = call("cuda driver version", "nvmlSystemGetCudaDriverVersion_v2")
    if cuda is None:
        cuda = call("cuda driver version", "nvmlSystemGetCudaDriverVersion")
    result["cuda_driver_version"] = cuda_version_text(cuda)
    count = call("device count", "nvmlDeviceGetCount") or 0
    result["count"] = count
    handles = []
    gpus = []
    for index in range(count):
        errors = []
        handle = _Caller(nvml, errors)("handle", "nvmlDeviceGetHandleByIndex", index)
        if handle is None:
            gpu = _blank_gpu(index)
            gpu["errors"] = errors or ["handle: not available"]
        else:
            gpu = _gpu(nvml, index, handle)
        handles.append(handle)
        gpus.append(gpu)
    pairs = 0
    nvlink_ok = 0
    for i in range(count):
        for j in range(i + 1, count):
            pairs += 1
            if handles[i] is None or handles[j] is None:
                continue
            status = _Caller(nvml, [])("p2p", "nvmlDeviceGetP2PStatus", handles[i], handles[j], _P2P_CAPS_INDEX_NVLINK)
            if status == _P2P_STATUS_OK:
                nvlink_ok += 1
    any_switch = any(g["nvlink"]["remote_nvswitch"] for g in gpus)
    result["gpus"] = gpus
    result["topology"] = classify_topology(count, any_switch, nvlink_ok, pairs)
    result["fabric_manager"] = {"required": any_switch, "state": "n/a"}
    result["_nvswitch"] = any_switch
    result["_system_errors"] = system_errors
    if count == 0:
        result["present"] = False
        result["reason"] = "the NVIDIA driver is loaded but NVML reports no GPU"
    else:
        result["present"] = True
    return result


# ---------------------------------------------------------------- kernel log / XID


def _tz(text):
    if not text or text == "Z":
        return timezone.utc
    sign = -1 if text[0] == "-" else 1
    digits = text[1:].replace(":", "")
    return timezone(sign * timedelta(hours=int(digits[:2]), minutes=int(digits[2:4])))


def _iso_stamp(m):
    frac = m.group(7) or "0"
    try:
        dt = datetime(
            int(m.group(1)), int(m.group(2)), int(m.group(3)),
            int(m.group(4)), int(m.group(5)), int(m.group(6)),
            int((frac + "000000")[:6]), tzinfo=_tz(m.group(8)),
        )
    except ValueError:
        return None
    if m.group(8) is None:
        # No zone: syslog writes local time.
        return time.mktime(dt.replace(tzinfo=None).timetuple()) + dt.microsecond / 1e6
    return dt.timestamp()


def _syslog_stamp(m, now):
    now = now if now is not None else time.time()
    year = time.localtime(now).tm_year
    stamp = None
    for y in (year, year - 1):  # syslog has no year: the newest date not in the future
        try:
            stamp = time.mktime(
                (y, _MONTHS.index(m.group(1)) + 1, int(m.group(2)), int(m.group(3)),
                 int(m.group(4)), int(m.group(5)), 0, 0, -1)
            )
        except (OverflowError, ValueError):
            return None
        if stamp <= now + 86400:
            break
    return stamp


def _ctime_stamp(m):
    if m.group(1) not in _MONTHS:
        return None
    try:
        return time.mktime(
            (int(m.group(6)), _MONTHS.index(m.group(1)) + 1, int(m.group(2)), int(m.group(3)),
             int(m.group(4)), int(m.group(5)), 0, 0, -1)
        )
    except (OverflowError, ValueError):
        return None


def _sane(stamp):
    """stamp when it is a time a date can show (0 .. year 9999), else None."""
    if stamp is None or not 0 <= stamp <= _MAX_STAMP:  # also false for NaN
        return None
    return stamp


def _stamp(line, now, boot_time):
    m = _ISO_RE.match(line)
    if m:
        return _iso_stamp(m)
    m = _SYSLOG_RE.match(line)
    if m and m.group(1) in _MONTHS:
        return _syslog_stamp(m, now)
    line = line[_KERNEL_PREFIX_RE.match(line).end():]
    m = _DMESG_CTIME_RE.match(line)
    if m:
        return _ctime_stamp(m)
    m = _DMESG_REL_RE.match(line)
    if m and boot_time is not None:
        return boot_time + float(m.group(1))
    m = _ISO_RE.match(line)  # `dmesg --decode --time-format iso`
    if m:
        return _iso_stamp(m)
    return None


def parse_timestamp(line, now=None, boot_time=None):
    """Epoch seconds of a kernel log line, or None.

    Forms: ISO 8601, syslog ("May  1 10:15:45 host kernel: ..."), and the dmesg ones
    ("[  123.456]" uptime, "[Tue Dec  1 10:00:00 2026]" of dmesg -T), also after a raw
    priority ("<4>"), the facility and level of dmesg --decode ("kern  :warn  : ") or a
    bare "kernel: " tag. A time outside 1970..9999 (a garbled uptime) is None.
    """
    return _sane(_stamp(line, now, boot_time))


def parse_xid_lines(entries, since=None):
    """entries: (epoch or None, text). Returns XID dicts, oldest first.

    Lines without a readable time are kept: they cannot be shown to be old.
    """
    found = []
    last_fallen = {}  # PCI key -> stamp of its latest XID 79
    for raw_stamp, text in entries:
        match = _xid_match(text)
        if match is None:
            continue
        kind, address, code, message = match
        stamp = _sane(raw_stamp)
        if since is not None and stamp is not None and stamp < since:
            continue
        domain, bus, dev = (int(x, 16) for x in address)
        key = (domain, bus, dev)
        if kind == "fallen":
            previous = last_fallen.get(key, False)
            # The driver often prints the Xid 79 line and this one for the same event.
            if previous is not False and (previous is None or stamp is None or abs(stamp - previous) <= 60):
                continue
        if kind != "sxid" and code == FALLEN_OFF_BUS_XID:
            last_fallen[key] = stamp
        entry = {
            "xid": code,
            "pci_bus_id": "%08X:%02X:%02X.0" % (domain, bus, dev),
            "message": message,
            "timestamp": "" if stamp is None else datetime.fromtimestamp(stamp, timezone.utc).isoformat(),
            "_key": key,
        }
        if kind == "sxid":
            entry["_kind"] = "sxid"
        found.append(entry)
    return found


def _xid_match(text):
    """(kind, (domain, bus, device) hex strings, code, message) of an XID-like line, or None.

    kind: "xid" (NVRM: Xid), "fallen" (a fallen-off-the-bus line without an Xid, as XID 79)
    or "sxid" (an NVSwitch SXid; its detail lines are not counted again).
    """
    m = XID_RE.search(text)
    if m:
        return "xid", m.group(1, 2, 3), int(m.group(4)), m.group(5).strip()
    m = SXID_RE.search(text)
    if m:
        message = m.group(5).strip()
        if _SXID_DETAIL_RE.match(message):
            return None
        return "sxid", m.group(1, 2, 3), int(m.group(4)), message
    where = text.find("NVRM: ")
    if where >= 0 and "fallen off the bus" in text:
        rest = text[where + len("NVRM: "):]
        m = _PCI_ADDRESS_RE.search(rest)
        if m:
            return "fallen", m.group(1, 2, 3), FALLEN_OFF_BUS_XID, rest.strip()
    return None


def _boot_time():
    try:
        return time.time() - float(device_io.read_attr("/proc/uptime", strict=False).split()[0])
    except (AttributeError, ValueError, IndexError):  # unreadable (None), empty or garbled
        return None


# Seconds journalctl, dmesg or systemctl may take (a huge journal, a hung systemd): the XID
# read then reports that it could not read the kernel log, instead of hanging the caller.
SYSTEM_TOOL_TIMEOUT = 120


def default_runner(args):
    """run_command stand-in for use outside Ansible: (rc, stdout, stderr)."""
    return device_io.tool_runner(None, timeout=SYSTEM_TOOL_TIMEOUT)(args)


def _journal(runner, since):
    args = ["journalctl", "_TRANSPORT=kernel", "-o", "json", "--no-pager", "-q",
            "--output-fields=MESSAGE,__REALTIME_TIMESTAMP"]
    if since is not None:
        args.append("--since=@%d" % int(since))
    rc, out, err = runner(args)
    if rc != 0:
        raise OSError("journalctl failed (rc %s): %s" % (rc, err.strip()))
    entries = []
    for line in out.splitlines():
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if not isinstance(rec, dict):
            continue  # not a journal record (journalctl -o json prints one object a line)
        msg = rec.get("MESSAGE")
        if isinstance(msg, list):  # journald sends non-UTF-8 messages as byte arrays
            msg = bytes(b & 0xFF for b in msg if isinstance(b, int)).decode("utf-8", "replace")
        try:
            stamp = _sane(int(rec.get("__REALTIME_TIMESTAMP")) / 1e6)
        except (TypeError, ValueError, OverflowError):
            stamp = None
        entries.append((stamp, _text(msg)))
    return entries


def _dmesg(runner):
    rc, out, err = runner(["dmesg", "--time-format", "iso"])
    if rc == 0:
        return [(parse_timestamp(line), line) for line in out.splitlines()]
    rc, out, err2 = runner(["dmesg"])
    if rc != 0:
        raise OSError("dmesg failed (rc %s): %s" % (rc, (err2 or err).strip()))
    boot = _boot_time()
    return [(parse_timestamp(line, boot_time=boot), line) for line in out.splitlines()]


def _file(path, now):
    with open(path, "rb") as f:
        data = f.read().decode("utf-8", "replace")
    boot = _boot_time()
    return [(parse_timestamp(line, now=now, boot_time=boot), line) for line in data.splitlines()]


def read_xids(source="auto", path=None, window=DEFAULT_XID_WINDOW, runner=None, now=None):
    """Returns (xid list, source used, error text or '')."""
    runner = runner or default_runner
    now = time.time() if now is None else now
    since = now - window if window and window > 0 else None
    readers = {
        "none": lambda: [],
        "file": lambda: _file(path, now),
        "journal": lambda: _journal(runner, since),
        "dmesg": lambda: _dmesg(runner),
    }
    order = ["journal", "dmesg"] if source == "auto" else [source]
    error = ""
    for name in order:
        try:
            return parse_xid_lines(readers[name](), since), name, ""
        except (OSError, IOError) as exc:
            error = "cannot read the kernel log (%s) for XID errors: %s" % (name, exc)
    return [], source, error


# ---------------------------------------------------------------- fabric manager


def fabric_manager_state(service, runner):
    rc, out, _err = runner(["systemctl", "show", "-p", "LoadState,ActiveState,SubState", "--", service])
    if rc != 0 and not out:
        return "unknown"
    props = dict(line.split("=", 1) for line in out.splitlines() if "=" in line)
    if props.get("LoadState") == "not-found":
        return "not-installed"
    active = props.get("ActiveState", "")
    if active == "active":
        return "running" if props.get("SubState") in ("running", "") else props.get("SubState", "running")
    return active or "unknown"


# ---------------------------------------------------------------- health and assembly


def health(result, xid_ignore=None, policy=None):
    """RV(gpu_info.health) of an assembled result: the accelerator health view's {ok, problems}.

    policy: an accelerator_health.XidPolicy; else one with xid_ignore as its ignore list.
    """
    return health_view(result, xid_ignore, policy).legacy()


def health_view(result, xid_ignore=None, policy=None):
    """The node's accelerator_health.HealthView (ok / degraded / failed, with reasons)."""
    if policy is None:
        policy = accelerator_health.XidPolicy(ignore=xid_ignore)
    return accelerator_health.nvidia_view(
        result["gpus"], policy, orphan_xids=result.get("_orphan_xids", []), sxids=result.get("_sxids", []),
        system_errors=result.get("_system_errors", []), fabric_manager=result["fabric_manager"])


def gpu_info(
    nvml=None,
    *,
    xid_source="auto",
    xid_log_path=None,
    xid_window=DEFAULT_XID_WINDOW,
    xid_ignore=None,
    fabric_manager_service="nvidia-fabricmanager",
    runner=None,
):
    """The full contract: NVML facts, XIDs from the kernel log, fabric manager, health.

    Returns (result, warnings).
    """
    runner = runner or default_runner
    xid_ignore = DEFAULT_XID_IGNORE if xid_ignore is None else xid_ignore
    warnings = []
    result = collect_nvml(nvml)
    if not result["present"]:
        return _public(result), warnings
    xids, _used, error = read_xids(xid_source, xid_log_path, xid_window, runner)
    if error:
        warnings.append(error)
    by_pci = {normalize_pci(g["pci_bus_id"]): g for g in result["gpus"] if g["pci_bus_id"]}
    orphans = []
    sxids = []
    for xid in xids:
        key = xid.pop("_key")
        if xid.pop("_kind", "xid") == "sxid":
            sxids.append(xid)  # NVSwitch errors: health problems, no GPU's xid_errors
            continue
        gpu = by_pci.get(key)
        if gpu is None:
            orphans.append(xid)
        else:
            gpu["xid_errors"].append(xid)
    for gpu in result["gpus"]:
        gpu["xid_errors"] = gpu["xid_errors"][-XID_LIMIT_PER_GPU:]
    result["_orphan_xids"] = orphans
    result["_sxids"] = sxids
    if result["fabric_manager"]["required"]:
        result["fabric_manager"]["state"] = fabric_manager_state(fabric_manager_service, runner)
    result["health"] = health(result, xid_ignore)
    return _public(result), warnings


def _public(result):
    return {k: v for k, v in result.items() if not k.startswith("_")}


__all__ = [
    "DEFAULT_XID_IGNORE",
    "DEFAULT_XID_WINDOW",
    "HAS_PYNVML",
    "PYNVML_IMPORT_ERROR",
    "classify_topology",
    "collect_nvml",
    "cuda_version_text",
    "empty_result",
    "fabric_manager_state",
    "gpu_info",
    "parse_timestamp",
    "parse_xid_lines",
    "read_xids",
]
