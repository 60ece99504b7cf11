# -*- coding: utf-8 -*-
# Copyright: (c) 2025, ai_platform L1 contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Check the whole inventory on the controller before any host is touched.

The checks are pure functions over ``groups`` and ``hostvars`` so they can be unit-tested
without Ansible running; ``ActionModule`` only gathers the inputs and reports.

An inventory variable must be read by something: an argument of a role the schema lists
(``role_argument_specs``, including the day-2 roles marked ``day2: true``, whose arguments are
known but not validated here), a variable with its own rule (``variables``; one that no role
reads says who does with ``read_by``, e.g. lab/labctl.py for the lab's ``lab_*`` variables), or
one of Ansible's own (``ansible_*``, the magic variables). Anything else is refused by name:
a role would silently ignore it (check_unread). Extra variables (``-e``) and cached facts are
not inventory variables and are not checked.

Besides the per-variable rules, whole classes of mistakes are refused generically: a number below
``numbers.min`` anywhere in a value (nested ones included), a relative ``type: path`` or an empty
``required`` role argument (from each role's argument spec), ``name_rules`` (a rule for every
variable whose name matches, such as every ``*_port``), ``relations`` between variables (a version
and its branch, a minimum and its maximum, what one value requires of another; role defaults fill
in what the inventory leaves out) and groups no play runs on (``did you mean``).
"""

from __future__ import annotations

import difflib
import ipaddress
import operator
import os
import posixpath
import re
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

import jinja2
import jinja2.meta
from ansible import constants as C
from ansible.module_utils.common.arg_spec import ArgumentSpecValidator
from ansible.plugins.action import ActionBase
from ansible.utils.vars import load_extra_vars
from ansible_collections.ai_platform.l1.plugins.module_utils.gpu_queues import validate_teams

RULE_KEYS = frozenset((
    'hosts', 'required', 'type', 'elements', 'choices', 'min', 'max', 'pattern', 'format', 'version_min',
    'same_on_all_hosts', 'distinct_from', 'read_by',
    'allow_empty', 'min_items', 'counts', 'unique_items', 'hosts_in', 'within', 'each', 'fields',
))
# Keys about a host's whole variable: not in a nested rule (each, fields) nor in a name rule.
TOP_LEVEL_KEYS = frozenset(('hosts', 'same_on_all_hosts', 'distinct_from', 'read_by'))
TYPES = ('str', 'int', 'float', 'bool', 'list', 'dict')
FORMATS = ('ip', 'host_ip', 'cidr', 'abspath', 'mount_path', 'device_path', 'stable_device_path', 'hostname_or_ip',
           'ifname', 'uuid', 'k8s_name', 'k8s_subdomain', 'k8s_node_name', 'k8s_quantity', 'k8s_labels', 'secret',
           'gpu_queue_teams')
RELATION_KEYS = frozenset(('hosts', 'that', 'requires', 'when', 'why'))
# Operators of a relation's `that: [A, OP, B]` and how a message says each.
RELATION_OPS = {
    '==': ('must equal', operator.eq), '!=': ('must differ from', operator.ne),
    '<=': ('must be at most', operator.le), '<': ('must be less than', operator.lt),
    '>=': ('must be at least', operator.ge), '>': ('must be more than', operator.gt),
}
NUMBERS_KEYS = frozenset(('min', 'except'))
# Groups Ansible makes itself.
IMPLICIT_GROUPS = ('all', 'ungrouped')
# Values that sample files and tutorials put where a secret goes; never a real one.
PLACEHOLDER_SECRETS = frozenset((
    'change-me', 'changeme', 'change_me', 'replace-me', 'replaceme', 'password', 'passw0rd', 'secret', 'example',
    'todo', 'fixme', 'xxx', 'xxxx', 'xxxxxxxx', 'admin', '123456', '12345678', 'default', 'test',
))
TYPE_WORDS = {
    'str': 'a string', 'int': 'an integer', 'float': 'a number',
    'bool': 'a boolean', 'list': 'a list', 'dict': 'a dict',
}
LABEL = r'[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?'
HOSTNAME_RE = re.compile(rf'^(?=.{{1,253}}$){LABEL}(\.{LABEL})*$')
# Kubernetes: a Node name is a DNS-1123 subdomain; a label value is at most 63 characters of
# alphanumerics, '-', '_', '.', starting and ending alphanumeric; a key is [prefix/]name.
DNS1123_LABEL = r'[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?'
NODE_NAME_RE = re.compile(rf'^(?=.{{1,253}}$){DNS1123_LABEL}(\.{DNS1123_LABEL})*$')
LABEL_VALUE_RE = re.compile(r'^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$')
LABEL_NAME_RE = re.compile(r'^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$')
# bool before int: True is an int in Python.
TYPE_CLASSES = (
    ('bool', bool), ('int', int), ('float', float), ('str', str), ('dict', Mapping), ('list', (list, tuple)),
)
MAX_HOSTS_NAMED = 5
# How alike (difflib ratio) an unread variable and a read one must be for a "did you mean".
UNREAD_HINT_CUTOFF = 0.75


class _Undefined:
    """Marks a variable a host does not define (None is a legitimate YAML value)."""


UNDEFINED = _Undefined()


# ---------------------------------------------------------------- value helpers

def type_name(value):
    """The YAML-ish name of a value's type (Ansible 2.19 wraps values in tagged subclasses)."""
    if value is None:
        return 'null'
    for name, cls in TYPE_CLASSES:
        if isinstance(value, cls):
            return name
    return type(value).__name__


def show(value):
    """Render a value for an error message the way it looks in YAML."""
    kind = type_name(value)
    if kind == 'str':
        return repr(str(value))
    if kind in ('int', 'float', 'bool'):
        return repr({'int': int, 'float': float, 'bool': bool}[kind](value))
    if kind == 'null':
        return 'null'
    return str(value)


def has_type(value, wanted):
    kind = type_name(value)
    if wanted == 'float':
        return kind in ('int', 'float')
    return kind == wanted


def version_tuple(text):
    """Leading numeric components of a version string: '1.28.6' -> (1, 28, 6)."""
    parts = []
    for part in str(text).split('.'):
        match = re.match(r'\d+', part)
        if not match:
            break
        parts.append(int(match.group(0)))
    return tuple(parts)


def _is_ip(text):
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


def _cidr_problem(text):
    """What is wrong with a CIDR string, or None."""
    if '/' not in text:
        return 'a CIDR with a prefix length such as 10.244.0.0/16'
    try:
        ipaddress.ip_network(text, strict=True)
    except ValueError:
        try:
            loose = ipaddress.ip_network(text, strict=False)
        except ValueError:
            return 'a CIDR such as 10.244.0.0/16'
        return f'a network address, {loose}'
    return None


def _is_hostname(text):
    # All-digit dotted names are mistyped addresses (192.0.2.300), not DNS names.
    return bool(HOSTNAME_RE.match(text)) and not text.replace('.', '').isdigit()


def _node_name_problem(text):
    if NODE_NAME_RE.match(text):
        return None
    return 'a Kubernetes Node name (lowercase letters, digits, - and ., at most 253 characters)'


def _label_problems(labels):
    """What is wrong with a dict of Kubernetes labels, one phrase per bad entry."""
    problems = []
    for raw_key, value in labels.items():
        key = str(raw_key)
        prefix, _slash, name = key.rpartition('/')
        if not LABEL_NAME_RE.match(name) or (prefix and not NODE_NAME_RE.match(prefix)):
            problems.append(f'key {key!r} is not a label key ([DNS prefix/]name, name at most 63 characters)')
        if not isinstance(value, str):
            problems.append(f'{key} must be a string (got {type_name(value)} {show(value)}; quote it in YAML)')
        elif not LABEL_VALUE_RE.match(value):
            problems.append(f'{key}={value!r} is not a label value (at most 63 of A-Z a-z 0-9 - _ ., '
                            'alphanumeric at both ends)')
    return problems


def _unusable_ip(text, *, allowed=()):
    """Why an address cannot be a host's (unspecified, multicast, broadcast, ...), or None.
    ``allowed``: tests that may hold (is_loopback, is_link_local) where the address is only connected to."""
    address = ipaddress.ip_address(text)
    for test, what in (('is_unspecified', 'the unspecified address'), ('is_multicast', 'a multicast address'),
                       ('is_loopback', 'a loopback address'), ('is_link_local', 'a link-local address'),
                       ('is_reserved', 'a reserved address')):
        if getattr(address, test) and test not in allowed:
            # 255.255.255.255 is reserved too; say what it is.
            return 'the broadcast address' if text == '255.255.255.255' else what
    return None


def _host_ip_problem(text):
    """A unicast address another host can reach: a VIP, a node's address."""
    if not _is_ip(text):
        return 'an IP address'
    unusable = _unusable_ip(text)
    return f'a host address, not {unusable}' if unusable else None


def _hostname_or_ip_problem(text):
    if _is_ip(text):
        # Where Ansible connects: loopback (a test, the controller itself) and link-local (a
        # provisioning network) reach a host; 0.0.0.0, a multicast group or the broadcast address do not.
        unusable = _unusable_ip(text, allowed=('is_loopback', 'is_link_local'))
        return f'a host address, not {unusable}' if unusable else None
    return None if _is_hostname(text) else 'an IP address or a DNS name'


def _path_problem(text, what='an absolute path'):
    """An absolute, normalised path (no //, /./, /../, trailing / or whitespace), or why not."""
    if not posixpath.isabs(text) or re.search(r'\s', text):
        return what
    if text != '/' and (text.endswith('/') or '//' in text or posixpath.normpath(text) != text):
        return f'{what} without //, /./, /../ or a trailing / ({posixpath.normpath(text)})'
    return None


# Mounting a file system over one of these hides the system itself.
SYSTEM_DIRS = frozenset(('/', '/bin', '/boot', '/dev', '/etc', '/home', '/lib', '/lib32', '/lib64', '/opt', '/proc',
                         '/root', '/run', '/sbin', '/srv', '/sys', '/tmp', '/usr', '/var', '/var/lib', '/var/log'))


def _mount_path_problem(text):
    problem = _path_problem(text, 'an absolute mount point')
    if problem is None and text in SYSTEM_DIRS:
        return 'a mount point of its own, not a system directory'
    return problem


DEVICE_WHAT = 'an absolute device path such as /dev/disk/by-id/nvme-...'
# Names the kernel gives in probe order: another disk may get them after a reboot or a disk swap.
KERNEL_DISK_RE = re.compile(r'^/dev/(sd[a-z]+|vd[a-z]+|xvd[a-z]+|hd[a-z]+|nvme\d+n\d+)(p?\d+)?$')


def _device_path_problem(text):
    problem = _path_problem(text, DEVICE_WHAT)
    # A directory of devices, not a device.
    if problem is None and (text in ('/dev', '/dev/disk') or (text.startswith('/dev/disk/') and text.count('/') < 4)):
        return DEVICE_WHAT
    return problem


def _stable_device_path_problem(text):
    problem = _device_path_problem(text)
    if problem is None and KERNEL_DISK_RE.match(text):
        return ('a stable device path (/dev/disk/by-id/..., by-path or by-uuid): a kernel name such as /dev/sdb '
                'can name another disk after a reboot')
    return problem


# Linux: IFNAMSIZ is 16 with the terminating NUL; dev_valid_name refuses '.', '..', '/', ':' and whitespace.
IFNAME_RE = re.compile(r'^[^/:\s]{1,15}$')


def _ifname_problem(text):
    if IFNAME_RE.match(text) and text not in ('.', '..'):
        return None
    return "a network interface name (1 to 15 characters, no '/', ':' or whitespace)"


UUID_RE = re.compile(r'^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$')
K8S_NAME_RE = re.compile(rf'^{DNS1123_LABEL}$')
# A Kubernetes resource quantity: no sign, an optional decimal part and suffix.
QUANTITY_RE = re.compile(r'^[0-9]+(\.[0-9]+)?(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?$')

FORMAT_PROBLEMS = {
    'ip': lambda text: None if _is_ip(text) else 'an IP address',
    'host_ip': _host_ip_problem,
    'cidr': _cidr_problem,
    'abspath': _path_problem,
    'mount_path': _mount_path_problem,
    'device_path': _device_path_problem,
    'stable_device_path': _stable_device_path_problem,
    'hostname_or_ip': _hostname_or_ip_problem,
    'ifname': _ifname_problem,
    'uuid': lambda text: None if UUID_RE.match(text) else (
        'a lowercase UUID such as 0c5c1d2e-7f3a-4b8e-9d61-2a4f6b8c0e13'),
    'k8s_name': lambda text: None if K8S_NAME_RE.match(text) else (
        'a Kubernetes name (DNS-1123 label: at most 63 of a-z 0-9 -, alphanumeric at both ends)'),
    'k8s_subdomain': lambda text: None if NODE_NAME_RE.match(text) else (
        'a Kubernetes object name (DNS-1123 subdomain: lowercase letters, digits, - and ., at most 253 characters)'),
    'k8s_node_name': _node_name_problem,
    'k8s_quantity': lambda text: None if QUANTITY_RE.match(text) else (
        'a Kubernetes quantity such as 2, 500m or 34Gi (no sign)'),
}


def stray_whitespace(value):
    """True for a one-line string with spaces, tabs or newlines around it (a YAML slip, never meant)."""
    return isinstance(value, str) and value != value.strip() and '\n' not in value.strip()


def check_format(name, value, fmt):
    """Return an error message if a value is not in the named format, else None."""
    if fmt == 'secret':
        # Never shown: the value is a credential.
        if str(value).strip().lower() in PLACEHOLDER_SECRETS:
            return f'{name} is a placeholder, not a secret: set a real one (keep it in Ansible Vault)'
        return None
    if fmt == 'k8s_labels':
        if not isinstance(value, Mapping):
            return f'{name} must be a dict of Kubernetes labels (got {type_name(value)})'
        problems = _label_problems(value)
        return f"{name}: {'; '.join(problems)}" if problems else None
    if fmt == 'gpu_queue_teams':
        # The team queue model (roles/gpu_queues); each message names the team and its field.
        problems = validate_teams(value)
        return '; '.join(problems) if problems else None
    problem = FORMAT_PROBLEMS[fmt](str(value))
    return f'{name} must be {problem} (got {show(value)})' if problem else None


class Context(NamedTuple):
    """What a rule about one host's value may look at beyond the value: the inventory's groups and
    the host's other variables (``lookup(name)``: the value, UNDEFINED, or (error,) as _get)."""
    groups: Mapping
    lookup: Callable[[str], Any]


NUMBER_RE = re.compile(r'^\s*-?[0-9]+(\.[0-9]+)?\s*$')
# A numeric string with a sign and an optional unit: "-8", "-4Gi", "-500m".
SIGNED_QUANTITY_RE = re.compile(r'^\s*-\s*([0-9]+(\.[0-9]+)?)(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?\s*$')


def as_number(value):
    """An int or float value, or a numeric string's number (role arguments convert them); else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return value
    if isinstance(value, str) and NUMBER_RE.match(value):
        return float(value) if '.' in value else int(value)
    return None


def is_empty(value):
    return value is None or (isinstance(value, (str, Mapping, list, tuple)) and len(value) == 0)


def child(name, key):
    """The path of a nested value: name[0] for an item, name.key or name[odd/key] for a dict's key."""
    if isinstance(key, int):
        return f'{name}[{key}]'
    key = str(key)
    return f'{name}.{key}' if re.match(r'^[A-Za-z_][A-Za-z0-9_]*$', key) else f'{name}[{key}]'


def _allowed(counts):
    counts = [str(c) for c in counts]
    return counts[0] if len(counts) == 1 else ', '.join(counts[:-1]) + f' or {counts[-1]}'


def _collection_problems(name, value, rule):
    """min_items, counts (allowed sizes: a quorum's odd member count) and unique_items of a list or dict."""
    if not isinstance(value, (list, tuple, Mapping)):
        return []
    messages = []
    size = len(value)
    if 'min_items' in rule and size < rule['min_items']:
        messages.append(f'{name} must not be empty' if rule['min_items'] == 1 else
                        f"{name} must have at least {rule['min_items']} entries (has {size})")
    if rule.get('counts') and size and size not in rule['counts']:
        items = ': ' + ', '.join(str(item) for item in value) if isinstance(value, (list, tuple)) else ''
        messages.append(f"{name} must have {_allowed(rule['counts'])} entries (has {size}{items})")
    if rule.get('unique_items') and isinstance(value, (list, tuple)):
        seen = []
        for item in value:
            if item in seen:
                messages.append(f'{name} lists {show(item)} more than once')
            seen.append(item)
    return messages


def _scope_words(scope):
    names = str(scope).split(':')
    if names == ['all']:
        return 'the inventory'
    return f'group {names[0]}' if len(names) == 1 else f"groups {', '.join(names)}"


def host_reference_problems(name, value, scope, groups):
    """A value (or a list's items) that must name inventory hosts of ``scope`` (a group or a:b)."""
    items = [value] if isinstance(value, str) else list(value) if isinstance(value, (list, tuple)) else []
    members = _scope_hosts(groups, scope)
    everyone = _all_hosts(groups)
    messages = []
    seen = set()
    for item in items:
        if not isinstance(item, str) or item == '':
            continue  # the type rule says so; an empty value is allow_empty's
        if item in seen:
            messages.append(f'{name} names {item} more than once')
            continue
        seen.add(item)
        if item in members:
            continue
        if item in everyone:
            messages.append(f'{name} names {item}, which is not in {_scope_words(scope)}')
            continue
        close = difflib.get_close_matches(item, members or everyone, n=1)
        hint = f' (did you mean {close[0]}?)' if close else ''
        messages.append(f'{name} names {item}, which is not a host of {_scope_words(scope)}{hint}')
    return messages


def within_problem(name, value, other, cidr):
    """An address that must lie in the CIDR another variable of the host holds, and be usable there."""
    try:
        address = ipaddress.ip_address(str(value))
        network = ipaddress.ip_network(str(cidr), strict=False)
    except ValueError:
        return None  # not an address or not a network: their own rules say so
    if address.version != network.version or address not in network:
        return f'{name} {show(value)} is outside {other} {show(cidr)}'
    # /31 and /32 (and /127, /128) have no network or broadcast address.
    if network.num_addresses > 2:
        if address == network.network_address:
            return f'{name} {show(value)} is the network address of {other} {show(cidr)}'
        if address.version == 4 and address == network.broadcast_address:
            return f'{name} {show(value)} is the broadcast address of {other} {show(cidr)}'
    return None


def _scalar_problems(name, value, rule):
    """choices, min, max, pattern, format and version_min of one value."""
    messages = []
    if 'choices' in rule and value not in rule['choices']:
        messages.append(f"{name} must be one of {', '.join(show(c) for c in rule['choices'])} (got {show(value)})")
    number = as_number(value)
    if number is not None and 'min' in rule and number < rule['min']:
        messages.append(f"{name} must be >= {rule['min']} (got {show(value)})")
    if number is not None and 'max' in rule and number > rule['max']:
        messages.append(f"{name} must be <= {rule['max']} (got {show(value)})")
    pattern_ok = True
    if 'pattern' in rule and not re.search(rule['pattern'], str(value)):
        pattern_ok = False
        messages.append(f"{name} must match {rule['pattern']} (got {show(value)})")
    if 'format' in rule:
        message = check_format(name, value, rule['format'])
        if message:
            messages.append(message)
    if pattern_ok and 'version_min' in rule and version_tuple(value) < version_tuple(rule['version_min']):
        messages.append(f"{name} must be version {rule['version_min']} or newer (got {show(value)})")
    return messages


def _context_problems(name, value, rule, ctx):
    """hosts_in and within: rules that look at the inventory or at the host's other variables."""
    messages = []
    if rule.get('hosts_in'):
        messages += host_reference_problems(name, value, rule['hosts_in'], ctx.groups)
    if rule.get('within'):
        cidr = ctx.lookup(rule['within'])
        message = None if cidr is UNDEFINED or isinstance(cidr, tuple) else within_problem(
            name, value, rule['within'], cidr)
        if message:
            messages.append(message)
    return messages


def _nested_problems(name, value, rule, ctx):
    """each: the rule of every list item (or dict value); fields: the rules of a dict's keys."""
    messages = []
    if isinstance(rule.get('each'), Mapping):
        items = value.items() if isinstance(value, Mapping) else enumerate(value) if isinstance(
            value, (list, tuple)) else ()
        for key, item in items:
            messages += check_value(child(name, key), item, rule['each'], ctx)
    if isinstance(rule.get('fields'), Mapping) and isinstance(value, Mapping):
        for key, sub in rule['fields'].items():
            if not isinstance(sub, Mapping):
                continue  # reported by check_rules
            if key in value:
                messages += check_value(child(name, key), value[key], sub, ctx)
            elif sub.get('required'):
                messages.append(f'{child(name, key)} is required but not defined')
    return messages


def check_value(name, value, rule, ctx=None):
    """All messages for one defined value against one rule (type errors stop the rest).

    ``ctx`` (a Context) is needed by hosts_in and within; without it they are not checked.
    Nested values (each, fields) are named by their path: gpu_queues_teams[0].capability[cpu]."""
    wanted = rule.get('type')
    if wanted and not has_type(value, wanted):
        hint = '; quote it in YAML' if wanted == 'str' and type_name(value) in ('float', 'int') else ''
        return [f'{name} must be {TYPE_WORDS[wanted]} (got {type_name(value)} {show(value)}{hint})']
    if wanted == 'list' and rule.get('elements'):
        bad = [item for item in value if not has_type(item, rule['elements'])]
        if bad:
            return [f"{name} items must each be {TYPE_WORDS[rule['elements']]} (got {show(bad[0])})"]
    if stray_whitespace(value):
        shown = '' if rule.get('format') == 'secret' else f' (got {show(value)})'
        return [f'{name} has whitespace around it{shown}']
    if rule.get('allow_empty') and is_empty(value):
        return []
    messages = _scalar_problems(name, value, rule)
    messages += _collection_problems(name, value, rule)
    if ctx is not None and not messages:  # a value already refused is not placed in the inventory too
        messages += _context_problems(name, value, rule, ctx)
    return messages + _nested_problems(name, value, rule, ctx)


# ---------------------------------------------------------------- schema sanity

def _rule_errors(where, rule, *, nested=False):
    """Mistakes in one rule; ``where`` names it (variables.x, variables.x.each, name_rules['_port$'])."""
    if not isinstance(rule, Mapping):
        return [f'schema: {where} must be a dict of rules (got {type_name(rule)})']
    errors = []
    known = RULE_KEYS - TOP_LEVEL_KEYS if nested else RULE_KEYS
    for key in sorted(set(rule) - known):
        errors.append(f"schema: {where} has unknown rule '{key}' (known: {', '.join(sorted(known))})")
    for key, choices in (('type', TYPES), ('elements', TYPES), ('format', FORMATS)):
        if rule.get(key) not in (None, *choices):
            errors.append(f"schema: {where}.{key} must be one of {', '.join(choices)} "
                          f"(got {show(rule[key])})")
    if 'read_by' in rule and not (isinstance(rule['read_by'], str) and rule['read_by'].strip()):
        errors.append(f"schema: {where}.read_by must name what reads the variable "
                      f"(got {show(rule['read_by'])})")
    if not isinstance(rule.get('distinct_from', []), list):
        errors.append(f'schema: {where}.distinct_from must be a list of variable names')
    if 'pattern' in rule:
        try:
            re.compile(rule['pattern'])
        except re.error as exc:
            errors.append(f'schema: {where}.pattern is not a valid regular expression ({exc})')
    return errors + _rule_value_errors(where, rule)


def _rule_value_errors(where, rule):
    """The values of the newer rule keys, and the nested rules of each and fields."""
    errors = [f'schema: {where}.{key} must be a number (got {show(rule[key])})'
              for key in ('min', 'max', 'min_items') if key in rule and as_number(rule[key]) is None]
    if 'counts' in rule and not (isinstance(rule['counts'], list) and rule['counts']
                                 and all(type_name(c) == 'int' for c in rule['counts'])):
        errors.append(f'schema: {where}.counts must be a non-empty list of integers')
    errors += [f'schema: {where}.{key} must name a group or a variable (got {show(rule[key])})'
               for key in ('hosts_in', 'within') if key in rule and not (isinstance(rule[key], str) and rule[key])]
    if 'each' in rule:
        errors += _rule_errors(f'{where}.each', rule['each'], nested=True)
    if 'fields' in rule and not isinstance(rule['fields'], Mapping):
        errors.append(f'schema: {where}.fields must be a dict of key -> rule')
    elif 'fields' in rule:
        for key, sub in rule['fields'].items():
            errors += _rule_errors(f'{where}.fields[{key}]', sub, nested=True)
    return errors


def check_rules(rules, name_rules=None, relations=(), numbers=None):
    """Mistakes in the schema itself: they would silently disable a check, so they are errors."""
    errors = []
    for name, rule in rules.items():
        errors += _rule_errors(f'variables.{name}', rule)
    for pattern, rule in (name_rules or {}).items():
        try:
            re.compile(pattern)
        except re.error as exc:
            errors.append(f"schema: name_rules['{pattern}'] is not a valid regular expression ({exc})")
        errors += _rule_errors(f"name_rules['{pattern}']", rule, nested=True)
    for index, relation in enumerate(relations or ()):
        errors += _relation_errors(f'relations[{index}]', relation)
    numbers = numbers or {}
    for key in sorted(set(numbers) - NUMBERS_KEYS):
        errors.append(f"schema: numbers has unknown key '{key}' (known: {', '.join(sorted(NUMBERS_KEYS))})")
    if 'min' in numbers and as_number(numbers['min']) is None:
        errors.append(f"schema: numbers.min must be a number (got {show(numbers['min'])})")
    if not isinstance(numbers.get('except', []), list):
        errors.append('schema: numbers.except must be a list of variable names')
    return errors


def _relation_errors(where, relation):
    if not isinstance(relation, Mapping):
        return [f'schema: {where} must be a dict (got {type_name(relation)})']
    errors = [f"schema: {where} has unknown key '{key}' (known: {', '.join(sorted(RELATION_KEYS))})"
              for key in sorted(set(relation) - RELATION_KEYS)]
    if ('that' in relation) == ('requires' in relation):
        errors.append(f'schema: {where} needs one of that: [A, OP, B] or requires: NAME')
    that = relation.get('that')
    if that is not None:
        if not (isinstance(that, list) and len(that) == 3 and that[1] in RELATION_OPS):
            errors.append(f"schema: {where}.that must be [A, OP, B] with OP one of {', '.join(RELATION_OPS)} "
                          f'(got {show(that)})')
        else:
            for operand in (that[0], that[2]):
                attr = str(operand).partition('.')[2]
                if type_name(operand) != 'int' and attr and attr not in OPERAND_ATTRS:
                    errors.append(f"schema: {where}.that: {operand} has no attribute {attr} "
                                  f"(known: {', '.join(OPERAND_ATTRS)})")
    if not isinstance(relation.get('when', {}), Mapping):
        errors.append(f'schema: {where}.when must be a dict of variable -> value')
    return errors


# ---------------------------------------------------------------- inventory checks
# Each returns a list of (subject, message, scope) where subject is a host name, or a
# string starting with 'group ' / 'hosts ' for errors that are not about one host, and
# scope is the group whose hosts a per-host rule applied to (used to fold repeated lines).

def check_groups(groups, required_groups, group_sizes):
    found = []
    for group in required_groups:
        if group not in groups:
            found.append((f'group {group}', 'required group is missing from the inventory', None))
        elif not groups[group]:
            found.append((f'group {group}', 'required group has no hosts', None))
    for group, sizes in group_sizes.items():
        members = list(groups.get(group) or [])
        if members and len(members) not in sizes:
            allowed = ', '.join(str(s) for s in sizes[:-1]) + f' or {sizes[-1]}' if len(sizes) > 1 else str(sizes[0])
            message = f"must have {allowed} hosts (has {len(members)}: {', '.join(members)})"
            found.append((f'group {group}', message, None))
    return found


def check_membership(groups, exclusive_groups, member_of):
    found = []
    for exclusive in exclusive_groups:
        for host in _all_hosts(groups):
            inside = [g for g in exclusive if host in (groups.get(g) or [])]
            if len(inside) > 1:
                found.append((host, f"is in {' and '.join(inside)}, which are mutually exclusive", None))
    for group, parent in member_of.items():
        parent_hosts = set(groups.get(parent) or [])
        for host in groups.get(group) or []:
            if host not in parent_hosts:
                found.append((host, f'is in {group} but not in {parent}', None))
    return found


def check_play_level(groups, hostvars, play_level):
    """Variables that play keywords read (serial, max_fail_percentage): the plays see only the value
    of the file they load (``play_level`` maps each name to it), so a host whose inventory value
    differs was given it where no play reads it."""
    found = []
    for name, seen in sorted(play_level.items()):
        for host in _all_hosts(groups):
            value = _get(hostvars, host, name)
            if value is not UNDEFINED and value != seen:
                found.append((host, f'{name} is {show(value)} here, but the plays read {show(seen)}: play keywords '
                                    f"cannot see host variables, so set {name} in the inventory's "
                                    'group_vars/all/rollout.yml and nowhere else (playbooks/vars/rollout.yml)', 'all'))
    return found


def check_unique(groups, hostvars, unique_vars):
    found = []
    for name in unique_vars:
        owners = {}
        for host in _all_hosts(groups):
            value = _get(hostvars, host, name)
            if isinstance(value, tuple):  # templating failed; reported by the rules
                continue
            if value is not UNDEFINED and value is not None:
                owners.setdefault(str(value), []).append(host)
        for value, hosts in owners.items():
            if len(hosts) > 1:
                found.append((f'hosts {", ".join(hosts)}', f'{name} must be unique (each is {show(value)})', None))
    return found


def _scoped_rules(rules):
    """(name, rule, scope) for every well-formed rule (check_rules reports the others)."""
    for name, rule in rules.items():
        if isinstance(rule, Mapping):
            yield name, rule, rule.get('hosts', 'all')


def check_vars(groups, hostvars, rules, faulty=None):
    """Each rule on the hosts of its scope. ``faulty``: a set this adds (host, name) to for every value that
    breaks its rule (a relation does not compare a value already refused)."""
    found = []
    for name, rule, scope in _scoped_rules(rules):
        hosts = _scope_hosts(groups, scope)
        seen = {}
        for host in hosts:
            value = _get(hostvars, host, name)
            if isinstance(value, tuple):
                found.append((host, f'{name} cannot be templated: {value[0]}', scope))
            elif value is UNDEFINED:
                if rule.get('required'):
                    found.append((host, f'{name} is required but not defined', scope))
            else:
                seen.setdefault(show(value), []).append(host)
                ctx = Context(groups, lambda other, host=host: _get(hostvars, host, other))
                messages = check_value(name, value, rule, ctx)
                found.extend((host, message, scope) for message in messages)
                if messages and faulty is not None:
                    faulty.add((host, name))
        if rule.get('same_on_all_hosts') and len(seen) > 1:
            detail = '; '.join(f'{value} on {_names(owners)}' for value, owners in seen.items())
            found.append((_scope_label(scope), f'{name} must be the same on every host (got {detail})', None))
    return found


def check_distinct(groups, hostvars, rules):
    """distinct_from: a value no host may have in the named variables (a VIP is nobody's address)."""
    found = []
    for name, rule, scope in _scoped_rules(rules):
        for other in rule.get('distinct_from') or ():
            owners = {}
            for owner in _all_hosts(groups):
                theirs = _get(hostvars, owner, other)
                if theirs is not UNDEFINED and not isinstance(theirs, tuple) and theirs is not None:
                    owners.setdefault(str(theirs), []).append(owner)
            for host in _scope_hosts(groups, scope):
                value = _get(hostvars, host, name)
                if value is UNDEFINED or isinstance(value, tuple) or str(value) not in owners:
                    continue
                found.append((host, f'{name} {show(value)} is the {other} of {_names(owners[str(value)])}', scope))
    return found


def check_disjoint(groups, hostvars, disjoint_cidrs):
    found = []
    for names in disjoint_cidrs:
        for host in _all_hosts(groups):
            nets = []
            for name in names:
                value = _get(hostvars, host, name)
                if value is UNDEFINED or isinstance(value, tuple) or not isinstance(value, str):
                    continue
                try:
                    nets.append((name, value, ipaddress.ip_network(str(value), strict=False)))
                except ValueError:
                    continue  # not an address (e.g. a DNS name in ansible_host) or already reported
            for i, (name_a, value_a, net_a) in enumerate(nets):
                for name_b, value_b, net_b in nets[i + 1:]:
                    if net_a.version == net_b.version and net_a.overlaps(net_b):
                        found.append((host, f'{name_a} {show(value_a)} overlaps {name_b} {show(value_b)}', 'all'))
    return found


# ---------------------------------------------------------------- relations between variables

def _branch(value):
    match = re.match(r'^(\d+)\.', str(value))
    if not match:
        raise ValueError(value)
    return match.group(1)


# NAME.ATTR in a relation: what of the value is compared, and how a message calls it.
OPERAND_ATTRS = {
    'branch': ('the branch', _branch),  # a dotted version's first component: 550 of 550.54.15
    'prefixlen': ('the prefix length', lambda value: ipaddress.ip_network(str(value), strict=False).prefixlen),
    'dscp': ('the DSCP (ToS >> 2)', lambda value: int(as_number(value)) >> 2),  # a ToS byte's upper 6 bits
    'length': ('the length', len),
}


class _RoleDefaults:
    """A role argument's default on a host that runs the role (templated defaults are not known here)."""

    def __init__(self, groups, role_specs):
        self._groups = groups
        self._specs = [(set(_scope_hosts(groups, spec.hosts)), spec.options) for spec in (role_specs or {}).values()
                       if not isinstance(spec.options, str)]

    def get(self, name, host):
        for hosts, options in self._specs:
            option = options.get(name)
            if host in hosts and isinstance(option, Mapping) and 'default' in option:
                default = option['default']
                if isinstance(default, str) and ('{{' in default or '{%' in default):
                    return UNDEFINED
                return default
        return UNDEFINED


def _holds(value, want):
    """A when: condition: the value equals the wanted one (a boolean compared as Ansible's bool filter would)."""
    if isinstance(want, bool):
        return str(value).strip().lower() in (('true', 'yes', '1', 'on') if want else ('false', 'no', '0', 'off'))
    return str(value) == str(want)


def _operand(token, value_of):
    """(value, text) of one side of a relation, or None where it is not known (then nothing is compared)."""
    if type_name(token) == 'int':
        return token, str(token)
    name, _dot, attr = str(token).partition('.')
    raw, defaulted = value_of(name)
    if raw is UNDEFINED or isinstance(raw, tuple) or raw is None:
        return None
    note = " (the role's default)" if defaulted else ''
    if not attr:
        return raw, f'{name} {show(raw)}{note}'
    words, derive = OPERAND_ATTRS[attr]
    try:
        derived = derive(raw)
    except (ValueError, TypeError):
        return None  # the value's own rule reports a malformed value
    return derived, f'{words} ({derived}) of {name} {show(raw)}{note}'


def _compare(op, left, right):
    """True, False, or None where the two cannot be compared (a non-number in an ordering)."""
    compare = RELATION_OPS[op][1]
    if op in ('==', '!='):
        return compare(str(left), str(right))
    numbers = as_number(left), as_number(right)
    return None if None in numbers else compare(*numbers)


def _relation_finding(relation, value_of, condition, why):
    """The message of one relation on one host, or None where it holds (or cannot be checked)."""
    if 'requires' in relation:
        required = relation['requires']
        missing = []
        for name in required if isinstance(required, list) else [required]:
            value, _defaulted = value_of(name)
            if not isinstance(value, tuple) and is_empty(None if value is UNDEFINED else value):
                missing.append(f'{name} must be set when {condition}{why}')
        return missing
    first, op, second = relation['that']
    left, right = _operand(first, value_of), _operand(second, value_of)
    if left is None or right is None or _compare(op, left[0], right[0]) is not False:
        return []
    return [f'{left[1]} {RELATION_OPS[op][0]} {right[1]}{why}']


def check_relations(groups, hostvars, relations, role_specs=None, faulty=()):
    """relations: consistency between a host's variables, each filled in with the role's default when the
    inventory leaves it out. ``that: [A, OP, B]`` compares two values (NAME, NAME.ATTR of OPERAND_ATTRS,
    or an integer); ``requires: NAME`` (or a list) must be set and not empty; ``when: {NAME: value}``
    limits either to hosts where every NAME has that value; ``why`` is appended to the message.
    ``faulty``: (host, name) of values their own rule refused; a comparison with one is left out."""
    defaults = _RoleDefaults(groups, role_specs)
    found = []
    for relation in relations or ():
        if _relation_errors('', relation):
            continue  # reported by check_rules
        scope = relation.get('hosts', 'all')
        why = f": {relation['why']}" if relation.get('why') else ''
        when = relation.get('when') or {}
        condition = ' and '.join(f"{name} is {str(want).lower() if isinstance(want, bool) else show(want)}"
                                 for name, want in when.items())
        operands = {str(o).partition('.')[0] for o in relation.get('that') or () if type_name(o) != 'int'}
        for host in _scope_hosts(groups, scope):
            def value_of(name, host=host):
                value = _get(hostvars, host, name)
                if value is UNDEFINED:
                    value = defaults.get(name, host)
                    return value, value is not UNDEFINED
                return value, False
            if any((host, name) in faulty for name in operands):
                continue
            if all(_holds(value_of(name)[0], want) for name, want in when.items()):
                messages = _relation_finding(relation, value_of, condition, why)
                found.extend((host, message, scope) for message in messages)
    return found


# ---------------------------------------------------------------- classes of mistakes

def numbers_in(name, value):
    """(path, value) of every number, and every numeric string with a sign, in a value, nested ones included."""
    stack = [(name, value)]
    while stack:
        path, current = stack.pop()
        if isinstance(current, Mapping):
            stack.extend((child(path, key), item) for key, item in reversed(list(current.items())))
        elif isinstance(current, (list, tuple)):
            stack.extend((child(path, index), item) for index, item in reversed(list(enumerate(current))))
        elif isinstance(current, str):
            if SIGNED_QUANTITY_RE.match(current):
                yield path, current
        elif as_number(current) is not None:
            yield path, current


def _number(value):
    if isinstance(value, str):
        match = SIGNED_QUANTITY_RE.match(value)
        return -float(match.group(1)) if match else None
    return value


def check_numbers(groups, hostvars, read, numbers, faulty=()):
    """numbers.min: no number anywhere in a read variable's value (a team's capability, a pool's pg_num)
    may be below it; numbers.except names free-form settings handed to another program as they are
    (sysctls, kubelet or Helm values), where -1 can mean "unlimited". ``faulty``: (host, name) of values
    their own rule refused already (one finding per value, not the same number twice)."""
    floor = as_number((numbers or {}).get('min'))
    if floor is None:
        return []
    skip = set((numbers or {}).get('except') or ())
    holders = {}
    for host in _all_hosts(groups):
        for name in _var_names(hostvars, host):
            if name not in read or name in skip or ansible_variable(name) or (host, name) in faulty:
                continue
            value = _get(hostvars, host, name)
            if value is UNDEFINED or isinstance(value, tuple):
                continue
            for path, number in numbers_in(name, value):
                if _number(number) < floor:
                    holders.setdefault(f'{path} must be >= {floor} (got {show(number)})', []).append(host)
    found = []
    for message, hosts in holders.items():
        group = _group_holding(groups, hosts)
        found.extend((host, message, group) for host in _scope_hosts(groups, group) if host in hosts)
    return found


def _spec_problems(path, value, spec):
    """What a role's argument spec implies beyond types: a required argument is not empty, a path is absolute.
    Nested options (a list of dicts, a dict with options) are checked the same way."""
    if not isinstance(spec, Mapping) or value is None:
        return []
    problems = []
    kind = spec.get('type', 'str')
    if spec.get('required') and is_empty(value):
        problems.append(f'{path} must not be empty')
    if kind == 'path' and isinstance(value, str) and value and not posixpath.isabs(value):
        problems.append(f'{path} must be an absolute path (got {show(value)})')
    options = spec.get('options') if isinstance(spec.get('options'), Mapping) else {}
    if kind == 'list' and isinstance(value, (list, tuple)):
        for index, item in enumerate(value):
            if spec.get('elements') == 'path' and isinstance(item, str) and not posixpath.isabs(item):
                problems.append(f'{child(path, index)} must be an absolute path (got {show(item)})')
            elif options and isinstance(item, Mapping):
                problems += _options_problems(child(path, index), item, options)
    elif kind == 'dict' and options and isinstance(value, Mapping):
        problems += _options_problems(path, value, options)
    return problems


def _options_problems(path, value, options):
    problems = []
    for name, spec in options.items():
        if name in value:
            problems += _spec_problems(child(path, name), value[name], spec)
    return problems


def known_groups(*, required_groups=(), group_sizes=None, exclusive_groups=(), member_of=None, role_specs=None,
                 rules=None, relations=(), extra=()):
    """Every group a play runs on or the schema names: the plays' groups are the roles' (role_argument_specs)."""
    scopes = [*required_groups, *(group_sizes or {}), *(g for lst in exclusive_groups for g in lst), *extra]
    for group, parent in (member_of or {}).items():
        scopes += [group, parent]
    scopes += [spec.hosts for spec in (role_specs or {}).values()]
    stack = [rule for rule in (rules or {}).values() if isinstance(rule, Mapping)]
    while stack:
        rule = stack.pop()
        scopes += [rule[key] for key in ('hosts', 'hosts_in') if isinstance(rule.get(key), str)]
        stack += [sub for sub in [rule.get('each'), *(rule.get('fields') or {}).values()] if isinstance(sub, Mapping)]
    scopes += [relation.get('hosts', 'all') for relation in relations or () if isinstance(relation, Mapping)]
    return {re.sub(r'\[.*\]$', '', part) for scope in scopes for part in str(scope).split(':') if part}


def check_known_groups(groups, known, vars_entries=()):
    """A host in a group no play runs on (gpu_nvida for gpu_nvidia) gets none of the roles it was meant for,
    and a host in no group gets none at all; group_vars/host_vars for a group or host the inventory does not
    have are never read. ``vars_entries``: (kind, name, shown path) of the group_vars/host_vars beside the
    inventory."""
    known = set(known) | set(IMPLICIT_GROUPS)
    candidates = sorted(known - set(IMPLICIT_GROUPS))
    found = []
    for group, hosts_of_group in groups.items():
        members = list(hosts_of_group or [])
        if group in known or not members:
            continue
        close = difflib.get_close_matches(group, candidates, n=1)
        hint = f' (did you mean {close[0]}?)' if close else ''
        who = f'host {members[0]} is' if len(members) == 1 else f'hosts {_names(members)} are'
        found.append((f'group {group}', f'{who} in a group no play runs on{hint}', None))
    found.extend((host, 'is in no group, so no play runs on it', None) for host in groups.get('ungrouped') or [])
    hosts = _all_hosts(groups)
    for kind, name, shown in vars_entries:
        if kind == 'group_vars' and name not in groups:
            close = difflib.get_close_matches(name, sorted(g for g in groups if g not in IMPLICIT_GROUPS), n=1)
            hint = f' (did you mean {close[0]}?)' if close else ''
            found.append((f'group {name}', f'{shown} sets variables for a group the inventory does not have, '
                                           f'so no host gets them{hint}', None))
        elif kind == 'host_vars' and name not in hosts:
            close = difflib.get_close_matches(name, hosts, n=1)
            hint = f' (did you mean {close[0]}?)' if close else ''
            found.append((name, f'{shown} sets variables for a host the inventory does not have{hint}', None))
    return found


def apply_name_rules(rules, name_rules, read):
    """Each read variable whose name a name rule's pattern matches gets that rule (every *_port a port's
    range); its own rule, where it has one, wins key by key. Rules of variables no pattern matches stay."""
    if not name_rules:
        return dict(rules)
    compiled = []
    for pattern, rule in name_rules.items():
        try:
            compiled.append((re.compile(pattern), rule))
        except re.error:
            continue  # reported by check_rules
    effective = dict(rules)
    for name in sorted(read):
        merged = {}
        for pattern, rule in compiled:
            if isinstance(rule, Mapping) and pattern.search(name):
                merged.update(rule)
        if merged:
            own = rules.get(name)
            effective[name] = {**merged, **own} if isinstance(own, Mapping) else merged
    return effective


def role_owner(name, roles):
    """The role whose prefix a variable carries; the longest wins (monitoring_k8s_x is not monitoring's)."""
    owners = [role for role in roles if name.startswith(f'{role}_')]
    return max(owners, key=len) if owners else None


class RoleSpec(NamedTuple):
    """How one role is checked.

    ``options`` is the role's argument spec (or an error message when it has none).
    ``set_by_playbook`` names options the play passes to the role itself (role vars win over the
    inventory), so the inventory need not give them and a value it gives would be ignored.
    ``enabled_by`` names a boolean variable without which the play skips the role on a host, or
    ``name=value``: the role runs where that variable has that value.
    ``day2``: a day-2 playbook runs the role, not site.yml. Its arguments (every entry point's)
    are variables an inventory may set, checked for typos and ``set_by_playbook`` only: each
    day-2 run validates them when the role starts.
    """
    hosts: str
    options: Mapping | str
    set_by_playbook: frozenset = frozenset()
    enabled_by: str | None = None
    day2: bool = False


def _switch_name(switch):
    """The variable an ``enabled_by`` names: ``flag`` or ``name=value``."""
    return switch.split('=', 1)[0] if switch else switch


def _enabled(hostvars, host, switch):
    if not switch:
        return True
    name, equals, want = switch.partition('=')
    value = _get(hostvars, host, name)
    if value is UNDEFINED or isinstance(value, tuple):
        return False
    if equals:
        return str(value) == want
    return str(value).lower() in ('true', 'yes', '1', 'on')


def _whitespace(params, options, known):
    """Whitespace around one-line strings given to a role; a secret's value is never shown."""
    for name, value in params.items():
        if stray_whitespace(value) and name not in known:
            shown = '' if options[name].get('no_log') else f' (got {show(value)})'
            yield f'{name} has whitespace around it{shown}'


def _check_arguments(host, hostvars, role, validator, *, from_inventory, known, faulty=()):
    """One host's values of a role's inventory arguments against its argument spec (``faulty``: (host, name)
    of values their own rule refused; what the spec implies beyond types is not said again for them)."""
    found = []
    params = {}
    for name in from_inventory:
        value = _get(hostvars, host, name)
        if isinstance(value, tuple):
            found.append(f'{name} cannot be templated: {value[0]}')
        elif value is not UNDEFINED:
            params[name] = value
    found.extend(f'role {role}: {message}' for message in validator.validate(params).error_messages)
    found.extend(_whitespace(params, from_inventory, known))
    for name, value in params.items():
        if (host, name) not in faulty:
            found.extend(f'role {role}: {message}' for message in _spec_problems(name, value, from_inventory[name]))
    return found


def check_role_specs(groups, hostvars, role_specs, *, known=(), typos=None, faulty=()):
    """role_specs: {role: RoleSpec} -> per-host argument errors.

    ``known`` names variables with their own rule: a role prefix on them is not a typo.
    ``typos``: a set this adds every name reported as a misspelt role variable to.
    """
    found = []
    for role, (scope, options, set_by_playbook, enabled_by, day2) in role_specs.items():
        if isinstance(options, str):
            found.append((f'role {role}', options, None))
            continue
        from_inventory = {name: spec for name, spec in options.items() if name not in set_by_playbook}
        validator = ArgumentSpecValidator(from_inventory)
        for host in _scope_hosts(groups, scope):
            if not _enabled(hostvars, host, enabled_by):
                continue
            if not day2:
                found.extend((host, message, scope) for message in
                             _check_arguments(host, hostvars, role, validator, from_inventory=from_inventory,
                                              known=known, faulty=faulty))
            for name in _var_names(hostvars, host):
                if name in set_by_playbook:
                    found.append((host, f'{name} is set by the playbook that runs role {role}; '
                                        'the inventory value would be ignored', scope))
                # A misspelt role variable is silently ignored by the role: catch it here.
                elif (name not in options and name not in known and name != _switch_name(enabled_by)
                      and role_owner(name, role_specs) == role):
                    close = difflib.get_close_matches(name, list(from_inventory), n=1)
                    hint = f' (did you mean {close[0]}?)' if close else ''
                    found.append((host, f'{name} is not a variable of role {role}{hint}', scope))
                    if typos is not None:
                        typos.add(name)
    return found


def read_variables(rules, role_specs):
    """Every variable something reads: the rules' names and each role's arguments and switch."""
    read = set(rules)
    for spec in role_specs.values():
        if not isinstance(spec.options, str):
            read.update(spec.options)
        read.update(spec.set_by_playbook)
        if spec.enabled_by:
            read.add(_switch_name(spec.enabled_by))
    return read


def ansible_variable(name):
    """Ansible's own: connection and behavioural ansible_* variables and the magic variables."""
    return name.startswith('ansible_') or name in C.INTERNAL_STATIC_VARS


def _group_holding(groups, hosts, fallback='all'):
    """The first group (inventory order, 'all' first) whose hosts are exactly ``hosts``, else ``fallback``."""
    wanted = set(hosts)
    for group, members in groups.items():
        if group != 'ungrouped' and members and set(members) == wanted:
            return group
    return fallback


def template_references(values):
    """Names the templates among ``values`` (nested in lists and dicts) refer to.

    An inventory variable another one's template reads is read: the vault pattern,
    ``monitoring_k8s_feishu_channels: {critical: {url: "{{ vault_feishu_critical_url }}"}}``.
    """
    names = set()
    env = jinja2.Environment()
    stack = list(values)
    while stack:
        value = stack.pop()
        if isinstance(value, Mapping):
            stack.extend(value.values())
        elif isinstance(value, (list, tuple)):
            stack.extend(value)
        elif isinstance(value, str) and ('{{' in value or '{%' in value):
            try:
                names.update(jinja2.meta.find_undeclared_variables(env.parse(str(value))))
            except jinja2.TemplateSyntaxError:
                continue  # templating it fails, and the check that reads it says so
    return names


def check_unread(groups, hostvars, read, *, typos=(), not_inventory=()):
    """Inventory variables nothing reads: a role would silently ignore them.

    ``read``: the variables something reads (read_variables, and those the inventory's own
    templates refer to: template_references). ``typos``: names check_role_specs already reported
    as misspelt role variables. ``not_inventory``: names that are not the inventory's (extra
    variables). A host's cached facts are not inventory variables either.
    Each finding names the group that holds the variable on exactly its hosts, else the hosts.
    """
    holders = {}
    for host in _all_hosts(groups):
        facts = _get(hostvars, host, 'ansible_facts')
        facts = facts if isinstance(facts, Mapping) else {}
        for name in sorted(_var_names(hostvars, host)):
            if (name in read or name in typos or name in not_inventory or ansible_variable(name)
                    or name in facts):
                continue
            holders.setdefault(name, []).append(host)
    candidates = sorted(name for name in read if not ansible_variable(name))
    found = []
    for name, hosts in holders.items():
        # A stricter cutoff than difflib's 0.6: any name is a little like some variable of ~400.
        close = difflib.get_close_matches(name, candidates, n=1, cutoff=UNREAD_HINT_CUTOFF)
        hint = f' (did you mean {close[0]}?)' if close else ''
        group = _group_holding(groups, hosts)
        ordered = [host for host in _scope_hosts(groups, group) if host in hosts]
        found.extend((host, f'{name} is not read by any role or tool{hint}', group) for host in ordered)
    return found


CONNECTION_VARS = ('ansible_host', 'ansible_port', 'ansible_user', 'ansible_connection')


def host_definitions(data, group='all'):
    """(host, group, its vars there) for every host entry of a YAML inventory's group tree."""
    if not isinstance(data, Mapping):
        return
    for host, host_vars in (data.get('hosts') or {}).items():
        yield str(host), group, host_vars if isinstance(host_vars, Mapping) else {}
    for child, child_data in (data.get('children') or {}).items():
        yield from host_definitions(child_data, str(child))


def check_definitions(inventories):
    """A host listed in several groups with different connection variables: Ansible keeps one
    silently (the last it reads), so the other address is never used."""
    seen = {}
    for data in inventories:
        for group, tree in (data or {}).items() if isinstance(data, Mapping) else ():
            for host, where, host_vars in host_definitions(tree, str(group)):
                seen.setdefault(host, []).append((where, host_vars))
    found = []
    for host, definitions in seen.items():
        for name in CONNECTION_VARS:
            values = {}
            for where, host_vars in definitions:
                if name in host_vars:
                    values.setdefault(show(host_vars[name]), []).append(where)
            if len(values) > 1:
                detail = '; '.join(f"{value} in {', '.join(groups)}" for value, groups in values.items())
                found.append((host, f'is defined more than once with different {name} ({detail})', None))
    return found


def fold(found, groups):
    """Turn (subject, message, scope) into lines; the same message on many hosts becomes one line."""
    by_message = {}
    order = []
    for subject, message, scope in found:
        key = (message, scope if scope else subject)
        if key not in by_message:
            by_message[key] = []
            order.append(key)
        if subject not in by_message[key]:
            by_message[key].append(subject)
    lines = []
    for key in order:
        message, scope = key
        subjects = by_message[key]
        if subjects[0].startswith(('group ', 'hosts ', 'role ')):
            lines.append(f'{subjects[0]}: {message}')
        elif len(subjects) == 1:
            lines.append(f'host {subjects[0]}: {message}')
        elif len(subjects) > 1 and subjects == list(_scope_hosts(groups, scope)):
            lines.append(f'{_scope_label(scope)}: {message}')
        elif _group_holding(groups, subjects, fallback=None):
            # A narrower group holds exactly these hosts: where the value was most likely set.
            lines.append(f'group {_group_holding(groups, subjects)}: {message}')
        else:
            lines.append(f'hosts {_names(subjects)}: {message}')
    return lines


def validate_inventory(groups, hostvars, *, required_groups=(), group_sizes=None, exclusive_groups=(), member_of=None,
                       unique_vars=(), rules=None, disjoint_cidrs=(), role_specs=None, inventories=(),
                       refuse_unread=False, not_inventory=(), referenced=(), play_level=None, name_rules=None,
                       numbers=None, relations=(), groups_known=None, vars_entries=()):
    """Every problem found, one line each; an empty list means the inventory is valid.

    ``hostvars`` maps host -> mapping of that host's (templated on access) variables.
    ``role_specs`` maps role -> RoleSpec; ``inventories`` are the parsed YAML inventory files.
    ``refuse_unread``: refuse variables nothing reads (check_unread); ``not_inventory`` names
    variables that are not the inventory's (the run's extra variables); ``referenced`` names
    those the inventory's own templates read (template_references of the raw values).
    ``play_level`` maps the variables play keywords read to the value the plays see (check_play_level).
    ``name_rules`` (pattern -> rule) give every read variable whose name matches a rule (apply_name_rules);
    ``numbers`` ({min, except}) bounds every number in every read value (check_numbers); ``relations``
    tie a host's variables together (check_relations); ``groups_known``, when given, names the groups a
    play runs on: a host in another group is refused (check_known_groups), as are the ``vars_entries``
    (group_vars/host_vars beside the inventory) of groups or hosts it does not have.
    """
    rules = rules or {}
    schema_errors = check_rules(rules, name_rules, relations, numbers)
    read = read_variables(rules, role_specs or {})
    effective = apply_name_rules(rules, name_rules, read)
    found = []
    found += check_definitions(inventories)
    found += check_groups(groups, required_groups, group_sizes or {})
    found += check_membership(groups, exclusive_groups, member_of or {})
    if groups_known is not None:
        found += check_known_groups(groups, groups_known, vars_entries)
    found += check_unique(groups, hostvars, unique_vars)
    found += check_play_level(groups, hostvars, play_level or {})
    faulty = set()
    found += check_vars(groups, hostvars, effective, faulty)
    found += check_distinct(groups, hostvars, effective)
    found += check_disjoint(groups, hostvars, disjoint_cidrs)
    found += check_numbers(groups, hostvars, read, numbers, faulty)
    found += check_relations(groups, hostvars, relations, role_specs, faulty)
    typos = set()
    found += check_role_specs(groups, hostvars, role_specs or {}, known=set(rules), typos=typos, faulty=faulty)
    if refuse_unread:
        found += check_unread(groups, hostvars, read | set(referenced), typos=typos,
                              not_inventory=frozenset(not_inventory))
    return schema_errors + fold(found, groups)


def _all_hosts(groups):
    return list(groups.get('all') or [])


def _scope_hosts(groups, scope):
    """Hosts of a group, or of a union of groups written as in a play's hosts: 'a:b'."""
    hosts = []
    for group in str(scope).split(':'):
        hosts.extend(h for h in groups.get(group) or [] if h not in hosts)
    return hosts


def _scope_label(scope):
    names = str(scope).split(':')
    return f'group {names[0]}' if len(names) == 1 else f"groups {', '.join(names)}"


def _names(hosts):
    if len(hosts) <= MAX_HOSTS_NAMED:
        return ', '.join(hosts)
    return f"{', '.join(hosts[:MAX_HOSTS_NAMED])} and {len(hosts) - MAX_HOSTS_NAMED} more"


def _var_names(hostvars, host):
    try:
        return list(hostvars[host])
    except KeyError:
        return []


def _get(hostvars, host, name):
    """A host's templated value, UNDEFINED, or (error text,) when templating fails."""
    try:
        host_vars = hostvars[host]
    except KeyError:
        return UNDEFINED
    if name not in host_vars:
        return UNDEFINED
    try:
        return host_vars[name]
    except Exception as exc:  # noqa: BLE001 - any templating error is a finding, not a crash
        return (str(exc).splitlines()[0] if str(exc) else type(exc).__name__,)


# ---------------------------------------------------------------- role argument specs

def find_role_options(role, roles_paths, loader, all_entry_points=False):
    """The 'main' entry point options of a role's meta/argument_specs.yml, or an error message.

    ``all_entry_points``: the options of every entry point (a day-2 role's tasks_from: drain, ...).
    """
    for base in roles_paths:
        for name in ('argument_specs.yml', 'argument_specs.yaml', 'main.yml'):
            path = os.path.join(base, role, 'meta', name)
            if not os.path.isfile(path):
                continue
            data = loader.load_from_file(path) or {}
            specs = data.get('argument_specs') if isinstance(data, Mapping) else None
            if not specs:
                continue
            if all_entry_points:
                options = {}
                for entry in specs.values():
                    options.update((entry or {}).get('options') or {})
                return options
            main = specs.get('main') or {}
            return dict(main.get('options') or {})
    return f"no meta/argument_specs.yml with a 'main' entry point found in {', '.join(roles_paths)}"


def yaml_inventory_files(sources):
    """The YAML inventory files among the inventory sources (a directory's top-level files)."""
    files = []
    for source in map(str, sources):
        if os.path.isdir(source):
            files.extend(os.path.join(source, name) for name in sorted(os.listdir(source)))
        else:
            files.append(source)
    return [path for path in files if os.path.isfile(path) and path.endswith(('.yml', '.yaml'))]


def role_spec(entry, options):
    """A RoleSpec from a role_argument_specs value: 'group' or {hosts, set_by_playbook, enabled_by, day2}."""
    if not isinstance(entry, Mapping):
        return RoleSpec(str(entry), options)
    return RoleSpec(str(entry.get('hosts', 'all')), options, frozenset(entry.get('set_by_playbook') or ()),
                    entry.get('enabled_by'), bool(entry.get('day2')))


def is_day2(entry):
    return isinstance(entry, Mapping) and bool(entry.get('day2'))


# ---------------------------------------------------------------- the action

ARGUMENT_SPEC = {
    'required_groups': {'type': 'list', 'elements': 'str', 'default': []},
    'group_sizes': {'type': 'dict', 'default': {}},
    'exclusive_groups': {'type': 'list', 'elements': 'list', 'default': []},
    'member_of': {'type': 'dict', 'default': {}},
    'unique_vars': {'type': 'list', 'elements': 'str', 'default': []},
    'variables': {'type': 'dict', 'default': {}},
    'disjoint_cidrs': {'type': 'list', 'elements': 'list', 'default': []},
    'role_argument_specs': {'type': 'dict', 'default': {}},
    'roles_path': {'type': 'list', 'elements': 'path'},
    'play_level_vars': {'type': 'dict', 'default': {}},
    'name_rules': {'type': 'dict', 'default': {}},
    'numbers': {'type': 'dict', 'default': {}},
    'relations': {'type': 'list', 'elements': 'dict', 'default': []},
    'known_groups': {'type': 'list', 'elements': 'str', 'default': []},
}


def vars_entries(sources):
    """(kind, name, shown path) of every group_vars/host_vars entry beside the inventory sources (a
    directory's own, a file's directory's): NAME/, NAME.yml, NAME.yaml, NAME.json or NAME."""
    entries = []
    bases = []
    for source in map(str, sources):
        base = source if os.path.isdir(source) else os.path.dirname(source)
        if base and base not in bases:
            bases.append(base)
    for base in bases:
        for kind in ('group_vars', 'host_vars'):
            folder = os.path.join(base, kind)
            if not os.path.isdir(folder):
                continue
            for entry in sorted(os.listdir(folder)):
                if entry.startswith('.'):
                    continue
                stem, ext = os.path.splitext(entry)
                if os.path.isdir(os.path.join(folder, entry)):
                    stem, ext = entry, ''
                elif ext not in ('', '.yml', '.yaml', '.json'):
                    continue
                entries.append((kind, stem, f'{kind}/{entry}'))
    return entries


class _CachedVars(Mapping):
    """One host's variables, each templated once (HostVarsVars templates a value on every access)."""

    def __init__(self, variables):
        self._vars = variables
        self._values = {}

    def __getitem__(self, name):
        if name not in self._values:
            try:
                self._values[name] = (True, self._vars[name])
            except Exception as exc:  # noqa: BLE001 - kept and raised again, as the first access did
                self._values[name] = (False, exc)
        ok, value = self._values[name]
        if ok:
            return value
        raise value

    def __contains__(self, name):
        return name in self._vars

    def __iter__(self):
        return iter(self._vars)

    def __len__(self):
        return len(self._vars)


class _HostVarsView(Mapping):
    """Lazy host -> vars mapping over Ansible's HostVars, limited to inventory hosts.

    Each host's vars are computed once: HostVars builds them anew (get_vars: every group's
    and host's variables merged) on every lookup, and the checks look up one host many times
    (measured on 1,000 hosts: tests/bench/fleet_api.py)."""

    def __init__(self, hostvars, hosts):
        self._hostvars = hostvars
        self._hosts = hosts
        self._cache = {}

    def __getitem__(self, host):
        if host not in self._hosts:
            raise KeyError(host)
        if host not in self._cache:
            self._cache[host] = _CachedVars(self._hostvars[host])
        return self._cache[host]

    def __iter__(self):
        return iter(self._hosts)

    def __len__(self):
        return len(self._hosts)


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _requires_connection = False
    _supports_check_mode = True

    def run(self, tmp=None, task_vars=None):
        task_vars = task_vars or {}
        result = super().run(tmp, task_vars)
        del tmp
        _validation, args = self.validate_argument_spec(argument_spec=ARGUMENT_SPEC)

        groups = {name: list(hosts) for name, hosts in (task_vars.get('groups') or {}).items()}
        hosts = set(groups.get('all') or [])
        hostvars = _HostVarsView(task_vars.get('hostvars') or {}, hosts)

        roles_paths = args['roles_path'] or self._default_roles_paths(task_vars)
        role_specs = {}
        for role, entry in args['role_argument_specs'].items():
            options = find_role_options(role, roles_paths, self._loader, all_entry_points=is_day2(entry))
            role_specs[role] = role_spec(entry, options)

        sources = task_vars.get('ansible_inventory_sources') or []
        errors = validate_inventory(
            groups, hostvars,
            required_groups=args['required_groups'],
            group_sizes={g: [int(n) for n in sizes] for g, sizes in args['group_sizes'].items()},
            exclusive_groups=args['exclusive_groups'],
            member_of=args['member_of'],
            unique_vars=args['unique_vars'],
            rules=args['variables'],
            disjoint_cidrs=args['disjoint_cidrs'],
            role_specs=role_specs,
            inventories=[self._loader.load_from_file(path) for path in yaml_inventory_files(sources)],
            refuse_unread=True,
            # -e values are the caller's, not the inventory's; Ansible merges them into every host.
            not_inventory=frozenset(load_extra_vars(self._loader)),
            referenced=self._referenced(task_vars.get('hostvars'), hosts),
            play_level=args['play_level_vars'],
            name_rules=args['name_rules'],
            numbers=args['numbers'],
            relations=args['relations'],
            groups_known=known_groups(
                required_groups=args['required_groups'], group_sizes=args['group_sizes'],
                exclusive_groups=args['exclusive_groups'], member_of=args['member_of'], role_specs=role_specs,
                rules=args['variables'], relations=args['relations'], extra=args['known_groups']),
            vars_entries=vars_entries(sources),
        )
        result.update(changed=False, errors=errors, checked_hosts=len(hosts))
        if errors:
            result['failed'] = True
            result['msg'] = f'inventory validation found {len(errors)} error(s):\n' + '\n'.join(errors)
        else:
            result['msg'] = f'inventory is valid ({len(hosts)} hosts checked)'
        return result

    @staticmethod
    def _referenced(all_hostvars, hosts):
        """Variables the inventory's templates refer to, from each host's values before templating."""
        raw_get = getattr(all_hostvars, 'raw_get', None)
        if raw_get is None:
            return set()
        names = set()
        for host in hosts:
            values = raw_get(host)
            if isinstance(values, Mapping):
                names |= template_references(values.values())
        return names

    @staticmethod
    def _default_roles_paths(task_vars):
        paths = []
        playbook_dir = task_vars.get('playbook_dir')
        if playbook_dir:
            paths.append(os.path.join(playbook_dir, 'roles'))
        paths.extend(C.DEFAULT_ROLES_PATH)
        return paths
