# -*- coding: utf-8 -*-
# Copyright: (c) 2025, ai_platform L1 authors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""RoCE lines of NVIDIA Onyx and Cumulus NVUE switch configurations: wanted lines, what is
managed in a running configuration, and the commands that turn one into the other; and the
check of a switch's SSH host key against the pinned fingerprints and known_hosts entries.

Free of netmiko, paramiko and AnsibleModule so it can be unit-tested on its own.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import re
import struct
from collections import namedtuple

DEVICE_TYPES = ('mellanox_mlnxos', 'cumulus_linux')
ROCE_MODES = ('lossless', 'lossy')
# Onyx releases from which `roce lossless|lossy` exists; older ones get the explicit lines.
ONYX_ROCE_RELEASE = (3, 8, 2000)
# NVIDIA's lossless RoCE recipe for Onyx (DSCP mode): ECN marking on the RoCE traffic class
# from 150 KB of queue, every packet from 1500 KB.
ECN_MIN_KB = 150
ECN_MAX_KB = 1500


class SwitchRoceError(Exception):
    """Invalid wanted settings."""


class HostKeyError(Exception):
    """The switch offered an SSH host key that is not trusted (raised before any login)."""


_ONYX_PFC = re.compile(r'^dcb priority-flow-control priority ([0-7]) enable$')
_NV_PFC = re.compile(r'^nv set qos pfc default-global switch-priority ([0-7])$')
_ONYX_IF = re.compile(r'^interface ethernet (\S+) (.+)$')
_ONYX_PORT = re.compile(r'^(\d+)/(\d+)$')
_ONYX_IF_PFC = 'dcb priority-flow-control mode on force'
_ONYX_TRUST = re.compile(r'^qos trust (\S+)$')
_ONYX_ECN = re.compile(r'^traffic-class ([0-7]) congestion-control (.+)$')
_ONYX_RELEASE = re.compile(r'^\s*Product release:\s*(\d+)\.(\d+)\.(\d+)', re.M)


def expand_ports(text):
    """Onyx ethernet ports of `1/1`, `1/1-1/4` or a comma list of those, in order."""
    ports = []
    for part in str(text).split(','):
        first, last = (part.strip().split('-', 1) + [''])[:2]
        ma, mb = _ONYX_PORT.match(first), _ONYX_PORT.match(last or first)
        if not ma or not mb or ma.group(1) != mb.group(1) or int(mb.group(2)) < int(ma.group(2)):
            raise SwitchRoceError('interface %r is not an Onyx ethernet port or range such as 1/1 or 1/1-1/32'
                                  % part.strip())
        ports += ['%s/%d' % (ma.group(1), n) for n in range(int(ma.group(2)), int(mb.group(2)) + 1)]
    return ports


def port_key(port):
    return tuple(int(x) for x in port.split('/'))


def validate(device_type, roce_mode, pfc_priorities, interfaces=None, *, ecn_min_kb=ECN_MIN_KB, ecn_max_kb=ECN_MAX_KB):
    """Check the wanted settings before any switch is contacted; return the sorted PFC priorities."""
    if device_type not in DEVICE_TYPES:
        raise SwitchRoceError('device_type %r is not supported; use one of %s' % (device_type, ', '.join(DEVICE_TYPES)))
    if roce_mode not in ROCE_MODES:
        raise SwitchRoceError('roce_mode must be one of %s, got %r' % (ROCE_MODES, roce_mode))
    prios = []
    for p in pfc_priorities or []:
        if isinstance(p, bool) or not isinstance(p, int) or not 0 <= p <= 7:
            raise SwitchRoceError('pfc_priorities: priority %r is out of 0..7' % (p,))
        if p not in prios:
            prios.append(p)
    if roce_mode == 'lossless' and not prios:
        raise SwitchRoceError('roce_mode lossless needs at least one PFC priority')
    for item in interfaces or []:
        expand_ports(item)
    if not 0 < ecn_min_kb <= ecn_max_kb:
        raise SwitchRoceError('ECN thresholds must satisfy 0 < ecn_min_kb <= ecn_max_kb, got %r and %r'
                              % (ecn_min_kb, ecn_max_kb))
    return sorted(prios)


def onyx_has_roce_command(show_version):
    """Whether the Onyx release in `show version` output has the `roce` command; None if it names none."""
    m = _ONYX_RELEASE.search(show_version or '')
    if not m:
        return None
    return tuple(int(x) for x in m.groups()) >= ONYX_ROCE_RELEASE


def wanted_lines(device_type, roce_mode, pfc_priorities, onyx_roce_command=True, ports=(), *,
                 ecn_min_kb=ECN_MIN_KB, ecn_max_kb=ECN_MAX_KB):
    """The managed configuration lines the switch should have, in the platform's syntax.

    Onyx with the `roce` command: `roce MODE` and the PFC priorities. Without it, the explicit
    equivalent: PFC globally and on the priorities (lossless only), and on every listed port PFC
    mode on (lossless only), DSCP trust (`qos trust L3`) and ECN on the RoCE traffic classes
    (switch priority N is traffic class N in Onyx's default map).
    """
    if device_type == 'mellanox_mlnxos':
        lines = ['roce %s' % roce_mode] if onyx_roce_command else []
        pfc = pfc_priorities if (onyx_roce_command or roce_mode == 'lossless') else []
        if pfc:
            lines.append('dcb priority-flow-control enable force')
        lines += ['dcb priority-flow-control priority %d enable' % p for p in pfc]
        if onyx_roce_command:
            return lines
        for port in sorted(ports, key=port_key):
            prefix = 'interface ethernet %s ' % port
            if roce_mode == 'lossless':
                lines.append(prefix + _ONYX_IF_PFC)
            lines.append(prefix + 'qos trust L3')
            lines += [prefix + 'traffic-class %d congestion-control ecn minimum-absolute %d maximum-absolute %d'
                      % (p, ecn_min_kb, ecn_max_kb) for p in pfc_priorities]
        return lines
    lines = ['nv set qos roce enable on', 'nv set qos roce mode %s' % roce_mode]
    lines += ['nv set qos pfc default-global switch-priority %d' % p for p in pfc_priorities]
    return lines


def _onyx_interface_managed(body):
    return body.startswith('dcb priority-flow-control mode') or bool(_ONYX_TRUST.match(body)) \
        or bool(_ONYX_ECN.match(body))


def managed(device_type, line, onyx_roce_command=True, ports=()):
    """Whether a running-configuration line (one port per interface line) is one this module owns."""
    if device_type == 'mellanox_mlnxos':
        m = _ONYX_IF.match(line)
        if m:
            return not onyx_roce_command and m.group(1) in ports and _onyx_interface_managed(m.group(2))
        return (onyx_roce_command and line.split()[0] == 'roce') \
            or line.startswith('dcb priority-flow-control enable') or bool(_ONYX_PFC.match(line))
    return line.startswith(('nv set qos roce ', 'nv set qos pfc default-global switch-priority '))


def _split_ports(line):
    """Onyx prints a setting shared by consecutive ports once, for the range: one line per port."""
    m = _ONYX_IF.match(line)
    if not m:
        return [line]
    try:
        return ['interface ethernet %s %s' % (port, m.group(2)) for port in expand_ports(m.group(1))]
    except SwitchRoceError:
        return [line]   # not a plain ethernet port (port-channel, split port): never managed


def current_lines(device_type, text, onyx_roce_command=True, ports=()):
    lines = [line.strip() for line in text.splitlines()]
    lines = [line for line in lines if line and not line.startswith('#')]
    if device_type == 'mellanox_mlnxos':
        lines = [one for line in lines for one in _split_ports(line)]
    return [line for line in lines if managed(device_type, line, onyx_roce_command, ports)]


def _negate(device_type, line):
    if device_type == 'mellanox_mlnxos':
        m = _ONYX_IF.match(line)
        if not m:
            return 'no ' + line
        prefix, body = 'interface ethernet %s ' % m.group(1), m.group(2)
        ecn = _ONYX_ECN.match(body)
        if ecn:
            return prefix + 'no traffic-class %s congestion-control' % ecn.group(1)
        if _ONYX_TRUST.match(body):
            return prefix + 'no qos trust'
        return prefix + 'no dcb priority-flow-control mode force'
    m = _NV_PFC.match(line)
    if m:
        return 'nv unset qos pfc default-global switch-priority %s' % m.group(1)
    # nv unset PATH drops a single-valued key; the value is not part of the path
    return 'nv unset ' + ' '.join(line.split()[2:-1])


def _single_key(device_type, line):
    """Key of a single-valued line: setting a new value replaces the old one, no unset needed."""
    if device_type == 'mellanox_mlnxos':
        m = _ONYX_IF.match(line)
        if m:
            ecn = _ONYX_ECN.match(m.group(2))
            if ecn:
                return 'interface ethernet %s traffic-class %s congestion-control' % (m.group(1), ecn.group(1))
            if _ONYX_TRUST.match(m.group(2)):
                return 'interface ethernet %s qos trust' % m.group(1)
            return None
        return 'roce' if line.split()[0] == 'roce' else None
    if _NV_PFC.match(line):
        return None
    return ' '.join(line.split()[:-1])


def plan(device_type, current, wanted):
    """Return (commands, removed lines, added lines) to go from current to wanted lines."""
    added = [line for line in wanted if line not in current]
    replaced = set(_single_key(device_type, line) for line in added) - {None}
    removed = [line for line in current if line not in wanted]
    commands = [_negate(device_type, line) for line in removed if _single_key(device_type, line) not in replaced]
    # Onyx turns per-priority PFC off before the global switch; on after it.
    commands += added
    return commands, removed, added


def _note(line, verb):
    m = _ONYX_PFC.match(line) or _NV_PFC.match(line)
    if m:
        return 'PFC priority %s: %s' % (m.group(1), 'on' if verb == 'add' else 'off')
    m = _ONYX_IF.match(line)
    if m and m.group(2) == _ONYX_IF_PFC:
        return 'PFC port %s: %s' % (m.group(1), 'on' if verb == 'add' else 'off')
    ecn = _ONYX_ECN.match(m.group(2)) if m else None
    if ecn:
        state = ecn.group(2) if verb == 'add' else 'off'
        return 'ECN traffic-class %s port %s: %s' % (ecn.group(1), m.group(1), state)
    return '%s: %s' % (verb, line)


def describe(device_type, removed, added):
    """Human-readable change notes that name each PFC priority (and, on Onyx, each port)."""
    replaced = set(_single_key(device_type, line) for line in added) - {None}
    notes = [_note(line, 'remove') for line in removed if _single_key(device_type, line) not in replaced]
    return notes + [_note(line, 'add') for line in added]


# --- SSH host keys --------------------------------------------------------------------------
# A switch is trusted by the SHA256 fingerprints pinned for it and by the known_hosts entries that
# name it; the check runs in the SSH client's host-key step, after key exchange and before any
# authentication, so an impostor never sees the password.

_FINGERPRINT = re.compile(r'^SHA256:([A-Za-z0-9+/]{43})=?$')
_KNOWN_MARKERS = ('@revoked', '@cert-authority')
# Host key algorithms an SSH client negotiates for a key type of a known_hosts line.
_KEY_ALGORITHMS = {'ssh-rsa': ('rsa-sha2-512', 'rsa-sha2-256', 'ssh-rsa')}


# One known_hosts line: marker (None, @revoked or @cert-authority), host patterns, key type and blob,
# and where it was read (source, line number).
KnownHost = namedtuple('KnownHost', 'marker patterns key_type blob source lineno')


def fingerprint(blob):
    """SHA256 fingerprint of a public key blob, as `ssh-keygen -lf` prints it."""
    return 'SHA256:' + base64.b64encode(hashlib.sha256(blob).digest()).decode('ascii').rstrip('=')


def parse_fingerprint(text):
    """`SHA256:<43 base64 characters>` (a trailing `=` is dropped) or SwitchRoceError."""
    m = _FINGERPRINT.match(str(text).strip())
    if not m:
        raise SwitchRoceError('%r is not a SHA256 host key fingerprint as ssh-keygen -lf prints it '
                              '(SHA256: followed by 43 base64 characters)' % (text,))
    return 'SHA256:' + m.group(1)


def known_host_name(host, port):
    """The name known_hosts files hold a host under: HOST on port 22, [HOST]:PORT on any other."""
    host = str(host).lower()
    return host if int(port) == 22 else '[%s]:%d' % (host, int(port))


def _blob_type(blob):
    """Key type named at the start of an SSH public key blob, or None."""
    if len(blob) < 4:
        return None
    size = struct.unpack('>I', blob[:4])[0]
    if size > 64 or len(blob) < 4 + size:
        return None
    return blob[4:4 + size].decode('ascii', 'replace')


def _check_hashed(pattern):
    parts = pattern.split('|')
    try:
        ok = len(parts) == 4 and len(base64.b64decode(parts[2], validate=True)) > 0 \
            and len(base64.b64decode(parts[3], validate=True)) == 20
    except (binascii.Error, ValueError):
        ok = False
    return ok


def parse_known_hosts(text, source):
    """KnownHost entries of OpenSSH known_hosts text; SwitchRoceError names the source and line of a bad one."""
    entries = []
    for lineno, raw in enumerate(str(text).splitlines(), 1):
        fields = raw.split()
        if not fields or fields[0].startswith('#'):
            continue
        marker = None
        if fields[0].startswith('@'):
            marker = fields.pop(0)
            if marker not in _KNOWN_MARKERS:
                raise SwitchRoceError('%s line %d: unknown marker %s' % (source, lineno, marker))
        if len(fields) < 3:
            raise SwitchRoceError('%s line %d is not a known_hosts entry (HOSTS KEY-TYPE BASE64-KEY)'
                                  % (source, lineno))
        patterns, key_type, data = fields[:3]
        try:
            blob = base64.b64decode(data, validate=True)
        except (binascii.Error, ValueError):
            raise SwitchRoceError('%s line %d: the key is not base64' % (source, lineno)) from None
        if _blob_type(blob) != key_type:
            raise SwitchRoceError('%s line %d: the key is not a %s key' % (source, lineno, key_type))
        patterns = tuple(p for p in patterns.split(',') if p)
        bad = [p for p in patterns if p.startswith('|') and not _check_hashed(p)]
        if bad or not patterns:
            raise SwitchRoceError('%s line %d: bad host name %r' % (source, lineno, (bad or [''])[0]))
        entries.append(KnownHost(marker, patterns, key_type, blob, source, lineno))
    return entries


def _glob(pattern, name):
    """OpenSSH host pattern: `*` any characters, `?` one; case-insensitive; no other specials."""
    rx = ''.join('.*' if c == '*' else '.' if c == '?' else re.escape(c) for c in pattern.lower())
    return re.fullmatch(rx, name) is not None


def host_matches(patterns, name):
    """Whether known_hosts host patterns (plain, wildcard, !negated or |1| hashed) name `name`."""
    hit = False
    for pattern in patterns:
        if pattern.startswith('|1|'):
            salt, digest = pattern.split('|')[2:4]
            mine = hmac.new(base64.b64decode(salt), name.encode(), hashlib.sha1).digest()
            hit = hit or hmac.compare_digest(mine, base64.b64decode(digest))
            continue
        negated = pattern.startswith('!')
        if _glob(pattern[1:] if negated else pattern, name):
            if negated:
                return False
            hit = True
    return hit


def host_key_algorithms(entries, name):
    """Host key algorithms of the keys known for `name` (None if none is known), to negotiate one of them."""
    types = [e.key_type for e in entries if e.marker is None and host_matches(e.patterns, name)]
    if not types:
        return None
    algorithms = []
    for key_type in types:
        algorithms += [a for a in _KEY_ALGORITHMS.get(key_type, (key_type,)) if a not in algorithms]
    return algorithms


def check_host_key(name, key_type, blob, fingerprints=(), entries=()):
    """Accept the key a switch offered, or raise HostKeyError naming it and what is trusted.

    `name` is known_host_name(); the key is trusted if its fingerprint is one of `fingerprints`
    or a known_hosts entry naming `name` holds it, and no @revoked entry holds it.
    """
    got = fingerprint(blob)
    offered = '%s key %s' % (key_type, got)
    for e in entries:
        if e.marker == '@revoked' and e.blob == blob:
            raise HostKeyError('the switch offered %s, which %s line %d marks @revoked; refused before the login'
                               % (offered, e.source, e.lineno))
    if got in fingerprints:
        return got
    known = [e for e in entries if e.marker is None and host_matches(e.patterns, name)]
    if any(e.blob == blob for e in known):
        return got
    trusted = ['%s (ssh_host_key_fingerprints)' % f for f in fingerprints]
    trusted += ['%s key %s (%s line %d)' % (e.key_type, fingerprint(e.blob), e.source, e.lineno) for e in known]
    raise HostKeyError('the switch offered %s, trusted for %s: %s; refused before the login'
                       % (offered, name, ', '.join(trusted) or 'none'))
