# -*- coding: utf-8 -*-
# Copyright: (c) 2025, ai_platform L1 contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""One accelerator-facts layer: the XID policy and the health view of a GPU or an NPU.

- XidPolicy: which XID codes are ignored (application faults, as the NVIDIA device plugin
  ignores them: 13, 31, 43, 45, 68, 109), which are critical (the GPU needs a reset, a
  reboot or an RMA), and, between the two, the others (worth a look, not a hardware verdict).
- HealthView: the health of one device or node, ok / degraded / failed, with one reason per
  problem; each reason comes from a named fault signal (SIGNALS says what it costs), and
  the worst reason decides the state.

Read by:
- gpu_info (module_utils/nvml.py): gpu_view/nvidia_view; its RV(gpu_info.health) is the
  view's legacy() form, {ok, problems}, as documented before the view existed;
- npu_info: npu_chip_view, the same way;
- the Node Problem Detector GPU plugin (monitoring/npd/check_gpu.py), which runs alone with a
  node's python3 (no collection there): the script in its ConfigMap is this whole file
  followed by the plugin (monitoring/generate.py), so this file must stay standard library
  only, with no module-level imports but __future__'s;
- the remediation receiver (day2/ai_l1_day2/remediation/policy.py): alert_view, from the
  collection on its path (ai_l1_day2/collection.py).

Standard library only, no Ansible import.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

OK, DEGRADED, FAILED = "ok", "degraded", "failed"
STATES = (OK, DEGRADED, FAILED)  # from good to bad

# Application XIDs (user-program faults): the NVIDIA device plugin ignores them for health.
APPLICATION_XIDS = (13, 31, 43, 45, 68, 109)
# XIDs that need a GPU reset, a reboot or an RMA (NVIDIA XID catalogue): 48 DBE, 63/64 row
# remapping, 74 NVLink, 79 fallen off the bus, 92 high SBE rate, 94/95 contained / uncontained
# ECC, 119/120 GSP, 140 unrecovered ECC.
CRITICAL_XIDS = (48, 63, 64, 74, 79, 92, 94, 95, 119, 120, 140)

# Fault signal -> what it makes of the device. A reason names one signal.
SIGNALS = {
    "xid-critical": FAILED,  # an XID in the critical list
    "xid": DEGRADED,  # an XID in neither list (or one whose code is not known)
    "ecc-dbe": FAILED,  # uncorrectable (double-bit) ECC errors, GPU framebuffer or NPU HBM/DDR
    "row-remap-failure": FAILED,  # a row the GPU could not remap: replace it
    "row-remap-pending": DEGRADED,  # remapped rows wait for a GPU reset
    "page-retirement-pending": DEGRADED,  # retired pages wait for a GPU reset
    "gpu-lost": FAILED,  # NVML has no handle for it, or it fell off the bus
    "gpu-unavailable": FAILED,  # the node's GPU exporter stopped answering
    "query-failed": DEGRADED,  # a driver query failed for another reason
    "sxid-fatal": FAILED,  # a fatal NVSwitch error
    "sxid": DEGRADED,  # a non-fatal NVSwitch error
    "fabric-manager-down": FAILED,  # NVSwitch present, fabric manager not running
    "npu-warning": DEGRADED,  # npu-smi health Warning (minor)
    "npu-alarm": FAILED,  # npu-smi health Alarm (major) or Critical
    "npu-unknown": FAILED,  # npu-smi health UNKNOWN (device absent or not started)
    "alert": FAILED,  # an alert a receiver is configured to act on
}


def worst(states):
    """The worst of the states (ok for none)."""
    return max(states, key=STATES.index, default=OK)


class XidPolicy:
    """The ignore list and the critical list of XID codes; ignore wins over critical.

    ignore None: the application XIDs, less any code given in critical (listing a code as
    critical on purpose overrides the default ignore list, not one given explicitly).
    """

    def __init__(self, ignore=None, critical=None):
        self.critical = frozenset(CRITICAL_XIDS if critical is None else critical)
        if ignore is None:
            ignore = [c for c in APPLICATION_XIDS if critical is None or c not in self.critical]
        self.ignore = frozenset(ignore)

    def signal(self, code):
        """'xid-critical', 'xid', or None for an ignored code."""
        if code in self.ignore:
            return None
        return "xid-critical" if code in self.critical else "xid"

    def state(self, code):
        """ok (ignored), degraded or failed."""
        signal = self.signal(code)
        return OK if signal is None else SIGNALS[signal]


class HealthView:
    """The health of a device or a node: reasons, each with the state its signal gives.

    state is the worst reason's (ok without reasons); as_dict() is {state, reasons};
    legacy() the {ok, problems} form of gpu_info and npu_info (ok: no reason at all).
    """

    def __init__(self, reasons=()):
        self._reasons = []  # [(state, text)], in the order found, each text once
        for state, text in reasons:
            self._add(state, text)

    def _add(self, state, text):
        if state not in STATES:
            raise ValueError("unknown health state %r" % (state,))
        if state != OK and all(text != t for _s, t in self._reasons):
            self._reasons.append((state, text))

    def add(self, signal, text):
        """Add a reason for a fault signal (a key of SIGNALS); a text already there is not repeated."""
        self._add(SIGNALS[signal], text)
        return self

    def extend(self, other):
        for state, text in other.items():
            self._add(state, text)
        return self

    def items(self):
        return list(self._reasons)

    @property
    def state(self):
        return worst(s for s, _t in self._reasons)

    @property
    def reasons(self):
        return [t for _s, t in self._reasons]

    def reasons_at(self, state):
        return [t for s, t in self._reasons if s == state]

    def as_dict(self):
        return {"state": self.state, "reasons": self.reasons}

    def legacy(self):
        return {"ok": not self._reasons, "problems": self.reasons}


# ---------------------------------------------------------------- NVIDIA (gpu_info's facts)


def _gpu_label(gpu):
    return "GPU %s (%s)" % (gpu["index"], gpu["pci_bus_id"] or "unknown PCI address")


def _last_seen(events):
    return events[-1]["timestamp"] or "at an unknown time"


def gpu_view(gpu, policy):
    """The view of one GPU of gpu_info's RV(gpu_info.gpus): NVML query failures (a missing
    handle: lost), volatile double-bit ECC, row remapping failed or pending, page retirement
    pending, and one reason per XID code the policy does not ignore."""
    label = _gpu_label(gpu)
    view = HealthView()
    for err in gpu["errors"]:
        view.add("gpu-lost" if err.startswith("handle:") else "query-failed",
                 "%s: NVML query failed: %s" % (label, err))
    if gpu["ecc"]["dbe_volatile"]:
        view.add("ecc-dbe", "%s: %d volatile double-bit ECC errors" % (label, gpu["ecc"]["dbe_volatile"]))
    rows = gpu["remapped_rows"] or {}
    if rows.get("failure"):
        view.add("row-remap-failure", "%s: row remapping failed (replace the GPU)" % label)
    if rows.get("pending"):
        view.add("row-remap-pending", "%s: row remapping pending (reset the GPU)" % label)
    if (gpu["retired_pages"] or {}).get("pending"):
        view.add("page-retirement-pending", "%s: page retirement pending (reset the GPU)" % label)
    seen = {}
    for xid in gpu["xid_errors"]:
        if policy.signal(xid["xid"]) is not None:
            seen.setdefault(xid["xid"], []).append(xid)
    for code in sorted(seen):
        events = seen[code]
        view.add(policy.signal(code), "%s: XID %d seen %d time(s), last %s: %s"
                 % (label, code, len(events), _last_seen(events), events[-1]["message"]))
    return view


def _sxid_signal(sxid):
    # "24007, Fatal, Link 44 ..." -> message "Fatal, Link 44 ..."; "Non-fatal, ..." is not fatal.
    return "sxid-fatal" if sxid["message"].split(",")[0].strip().lower() == "fatal" else "sxid"


def nvidia_view(gpus, policy, *, orphan_xids=(), sxids=(), system_errors=(), fabric_manager=None):
    """The node's view: its GPUs', XIDs of devices NVML does not list, NVSwitch SXid errors
    (one reason per switch and code; the policy's ignore list applies to SXid codes too),
    failed system-wide NVML queries, and a fabric manager not running where NVSwitch is."""
    view = HealthView()
    for gpu in gpus:
        view.extend(gpu_view(gpu, policy))
    for xid in orphan_xids:
        signal = policy.signal(xid["xid"])
        if signal is not None:
            view.add(signal, "XID %d on PCI %s, a device NVML does not list: %s"
                     % (xid["xid"], xid["pci_bus_id"], xid["message"]))
    by_switch = {}
    for sxid in sxids:
        if policy.signal(sxid["xid"]) is not None:
            by_switch.setdefault((sxid["pci_bus_id"], sxid["xid"]), []).append(sxid)
    for pci, code in sorted(by_switch):
        events = by_switch[(pci, code)]
        view.add(_sxid_signal(events[-1]), "NVSwitch (%s): SXid %d seen %d time(s), last %s: %s"
                 % (pci, code, len(events), _last_seen(events), events[-1]["message"]))
    for err in system_errors:
        view.add("query-failed", "NVML query failed: %s" % err)
    fm = fabric_manager or {}
    if fm.get("required") and fm.get("state") != "running":
        view.add("fabric-manager-down", "NVSwitch present but the fabric manager is %s" % fm.get("state"))
    return view


# ---------------------------------------------------------------- Ascend (npu_info's facts)

_NPU_HEALTH_SIGNALS = {"Warning": "npu-warning", "Alarm": "npu-alarm", "Critical": "npu-alarm",
                       "UNKNOWN": "npu-unknown"}


def npu_chip_view(chip):
    """The view of one chip of npu_info's RV(npu_info.chips): a health other than OK (with its
    error codes and information) and HBM/DDR double-bit ECC errors."""
    where = "NPU %d chip %d" % (chip["npu_id"], chip["chip_id"])
    view = HealthView()
    if chip["health"] != "OK":
        text = "health %s" % chip["health"]
        if chip["error_codes"]:
            text += ", error %s" % " ".join(chip["error_codes"])
        if chip["error_information"]:
            text += " (%s)" % chip["error_information"]
        view.add(_NPU_HEALTH_SIGNALS.get(chip["health"], "npu-unknown"), "%s: %s" % (where, text))
    for counter, what in (("hbm_dbe", "HBM"), ("ddr_dbe", "DDR")):
        if chip["ecc"].get(counter):
            view.add("ecc-dbe", "%s: %d %s double-bit ECC errors" % (where, chip["ecc"][counter], what))
    return view


# ---------------------------------------------------------------- alerts (the remediation receiver)

# monitoring/rules/gpu-alerts.rules.yml's alerts -> the signal each one reports.
ALERT_SIGNALS = {
    "GPUECCUncorrectableError": "ecc-dbe",
    "GPURowRemapFailure": "row-remap-failure",
    "GPUFallenOffBus": "gpu-lost",
    "GPUNodeUnavailable": "gpu-unavailable",
}
XID_ALERT = "GPUXidError"


def xid_view(code, policy):
    """The view an XID gives its GPU: ok when ignored, else one reason ('XID <code>')."""
    view = HealthView()
    if code is None:
        view.add("xid", "XID of unknown code")
    elif policy.signal(code) is not None:
        view.add(policy.signal(code), "XID %d" % code)
    return view


def alert_view(alertname, policy, xid=None):
    """The view an alert gives its GPU: GPUXidError by the XID policy; the other GPU alerts
    by ALERT_SIGNALS; any other alert (one a receiver is configured to act on) failed."""
    if alertname == XID_ALERT:
        return xid_view(xid, policy)
    return HealthView().add(ALERT_SIGNALS.get(alertname, "alert"), alertname)
