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
"""

from __future__ import annotations

import difflib
import ipaddress
import os
import posixpath
import re
from collections.abc import Mapping
from typing import NamedTuple

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
))
TYPES = ('str', 'int', 'float', 'bool', 'list', 'dict')
FORMATS = ('ip', 'cidr', 'abspath', 'hostname_or_ip', 'k8s_node_name', 'k8s_labels', 'secret', 'gpu_queue_teams')
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


FORMAT_PROBLEMS = {
    'ip': lambda text: None if _is_ip(text) else 'an IP address',
    'cidr': _cidr_problem,
    'abspath': lambda text: None if posixpath.isabs(text) else 'an absolute path',
    'hostname_or_ip': lambda text: None if _is_ip(text) or _is_hostname(text) else 'an IP address or a DNS name',
    'k8s_node_name': _node_name_problem,
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


def check_value(name, value, rule):
    """All messages for one defined value against one rule (type errors stop the rest)."""
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
    messages = []
    if 'choices' in rule and value not in rule['choices']:
        messages.append(f"{name} must be one of {', '.join(show(c) for c in rule['choices'])} (got {show(value)})")
    if 'min' in rule and value < rule['min']:
        messages.append(f"{name} must be >= {rule['min']} (got {show(value)})")
    if 'max' in rule and value > rule['max']:
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


# ---------------------------------------------------------------- schema sanity

def check_rules(rules):
    """Mistakes in the schema itself: they would silently disable a check, so they are errors."""
    errors = []
    for name, rule in rules.items():
        if not isinstance(rule, Mapping):
            errors.append(f'schema: variables.{name} must be a dict of rules (got {type_name(rule)})')
            continue
        for key in sorted(set(rule) - RULE_KEYS):
            errors.append(f"schema: variables.{name} has unknown rule '{key}' (known: {', '.join(sorted(RULE_KEYS))})")
        for key, known in (('type', TYPES), ('elements', TYPES), ('format', FORMATS)):
            if rule.get(key) not in (None, *known):
                errors.append(f"schema: variables.{name}.{key} must be one of {', '.join(known)} "
                              f"(got {show(rule[key])})")
        if 'read_by' in rule and not (isinstance(rule['read_by'], str) and rule['read_by'].strip()):
            errors.append(f"schema: variables.{name}.read_by must name what reads the variable "
                          f"(got {show(rule['read_by'])})")
        if not isinstance(rule.get('distinct_from', []), list):
            errors.append(f'schema: variables.{name}.distinct_from must be a list of variable names')
        if 'pattern' in rule:
            try:
                re.compile(rule['pattern'])
            except re.error as exc:
                errors.append(f'schema: variables.{name}.pattern is not a valid regular expression ({exc})')
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


def check_vars(groups, hostvars, rules):
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
                found.extend((host, message, scope) for message in check_value(name, value, rule))
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


def _check_arguments(host, hostvars, role, validator, *, from_inventory, known):
    """One host's values of a role's inventory arguments against its argument spec."""
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
    return found


def check_role_specs(groups, hostvars, role_specs, known=(), typos=None):
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
                                              known=known))
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


def _group_holding(groups, hosts):
    """The first group (inventory order, 'all' first) whose hosts are exactly ``hosts``, else 'all'."""
    wanted = set(hosts)
    for group, members in groups.items():
        if group != 'ungrouped' and members and set(members) == wanted:
            return group
    return 'all'


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
        else:
            lines.append(f'hosts {_names(subjects)}: {message}')
    return lines


def validate_inventory(groups, hostvars, *, required_groups=(), group_sizes=None, exclusive_groups=(), member_of=None,
                       unique_vars=(), rules=None, disjoint_cidrs=(), role_specs=None, inventories=(),
                       refuse_unread=False, not_inventory=(), referenced=(), play_level=None):
    """Every problem found, one line each; an empty list means the inventory is valid.

    ``hostvars`` maps host -> mapping of that host's (templated on access) variables.
    ``role_specs`` maps role -> RoleSpec; ``inventories`` are the parsed YAML inventory files.
    ``refuse_unread``: refuse variables nothing reads (check_unread); ``not_inventory`` names
    variables that are not the inventory's (the run's extra variables); ``referenced`` names
    those the inventory's own templates read (template_references of the raw values).
    ``play_level`` maps the variables play keywords read to the value the plays see (check_play_level).
    """
    rules = rules or {}
    schema_errors = check_rules(rules)
    found = []
    found += check_definitions(inventories)
    found += check_groups(groups, required_groups, group_sizes or {})
    found += check_membership(groups, exclusive_groups, member_of or {})
    found += check_unique(groups, hostvars, unique_vars)
    found += check_play_level(groups, hostvars, play_level or {})
    found += check_vars(groups, hostvars, rules)
    found += check_distinct(groups, hostvars, rules)
    found += check_disjoint(groups, hostvars, disjoint_cidrs)
    typos = set()
    found += check_role_specs(groups, hostvars, role_specs or {}, known=set(rules), typos=typos)
    if refuse_unread:
        read = read_variables(rules, role_specs or {}) | set(referenced)
        found += check_unread(groups, hostvars, read, typos=typos, not_inventory=frozenset(not_inventory))
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
}


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
            self._cache[host] = self._hostvars[host]
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
            inventories=[self._loader.load_from_file(path) for path in
                         yaml_inventory_files(task_vars.get('ansible_inventory_sources') or [])],
            refuse_unread=True,
            # -e values are the caller's, not the inventory's; Ansible merges them into every host.
            not_inventory=frozenset(load_extra_vars(self._loader)),
            referenced=self._referenced(task_vars.get('hostvars'), hosts),
            play_level=args['play_level_vars'],
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
