# -*- coding: utf-8 -*-
# Copyright: (c) 2025, ai_platform L1 contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

# This file only documents the action plugin of the same name, as ansible.builtin.assert does:
# the checks run on the controller and never reach a managed host.

from __future__ import annotations

DOCUMENTATION = r"""
---
module: inventory_validate
short_description: Check the whole inventory before any host is touched
version_added: 0.1.0
description:
  - Runs on the controller and checks every inventory host's groups and variables at once,
    so that a bad inventory fails the run before any host is contacted.
  - Checks group structure (required groups, allowed group sizes such as an odd etcd member
    count, mutually exclusive groups, groups that must lie inside another group), unique
    values (such as C(ansible_host)), typed per-host values, CIDR overlaps, and each host's
    role variables against the C(meta/argument_specs.yml) of the roles the host will run.
  - Reads the YAML inventory files among the inventory sources and refuses a host defined in
    several groups with different connection variables (Ansible would keep one silently).
  - Collects every error and fails once with one line per error, each naming the host (or
    group) and the variable. The same error on every host of a rule's group is folded into
    one C(group NAME:) line.
  - Types are strict, unlike role argument validation, which converts. A YAML C(12.4) is a
    float, not the version string C("12.4").
  - Besides per-variable rules it refuses whole classes of mistakes generically - a negative
    number anywhere in a value (O(numbers)), a relative C(type=path) or an empty C(required) role
    argument (from each role's argument spec, nested options included), a rule for every variable
    whose name matches (O(name_rules), such as every C(*_port)), inconsistent variables
    (O(relations)) and a host in a group no play runs on (with a "did you mean").
options:
  required_groups:
    description: Groups that must exist and have at least one host.
    type: list
    elements: str
    default: []
  group_sizes:
    description:
      - Group name to the list of allowed host counts, for example
        C(k8s_control_plane) V([1, 3, 5, 7]). An absent or empty group is not checked here.
    type: dict
    default: {}
  exclusive_groups:
    description: Lists of groups; a host may be in at most one group of each list.
    type: list
    elements: list
    default: []
  member_of:
    description: Group name to a parent group; every host of the group must also be in the parent.
    type: dict
    default: {}
  unique_vars:
    description: Variables whose value must differ between hosts (hosts that do not define them are ignored).
    type: list
    elements: str
    default: []
  variables:
    description:
      - Variable name to a dict of rules checked on every host the rule applies to.
      - C(hosts) is the group the rule applies to (default C(all)), or a union of groups
        written as in a play, C(k8s_control_plane:k8s_worker); C(required) makes the variable
        mandatory there.
      - C(type) is one of C(str), C(int), C(float), C(bool), C(list), C(dict); C(elements)
        types list items.
      - C(choices), C(min), C(max) (numbers, and numeric strings), C(pattern) (a Python regular
        expression, searched), C(format) and C(version_min) (a dotted version the value must be at
        least) constrain the value.
      - C(format) is C(ip), C(host_ip) (an address a host can have, not the unspecified, a
        loopback, multicast, link-local, reserved or broadcast address), C(cidr), C(abspath)
        (absolute and normalised), C(mount_path) (an absolute mount point that is not a system
        directory such as C(/) or C(/var)), C(device_path) (an absolute device path),
        C(stable_device_path) (also not a kernel name such as C(/dev/sdb), which can name another
        disk after a reboot), C(hostname_or_ip) (an IP address no host can have is refused),
        C(ifname) (a Linux interface name, at most 15 characters, no C(/), C(:) or whitespace),
        C(uuid) (lowercase), C(k8s_name) (a DNS-1123 label, as a namespace), C(k8s_subdomain) (a
        DNS-1123 subdomain, as most object names), C(k8s_node_name) (a DNS-1123 subdomain, as
        kubeadm registers the Node), C(k8s_quantity) (C(2), C(500m), C(34Gi); no sign),
        C(k8s_labels) (a dict of Kubernetes label keys and string values), C(secret) (refuses
        placeholders such as C(change-me); the value is never shown in a message) or
        C(gpu_queue_teams) (the team queue model of role gpu_queues, checked by
        P(ai_platform.l1.gpu_queue_model_errors#filter)).
      - C(allow_empty) accepts an empty string, list or dict whatever the other rules say.
        C(min_items) is the least number of entries of a list or dict; C(counts) the allowed
        numbers of entries (V([1, 3, 5, 7]) for a quorum's members); C(unique_items) refuses a
        list item given twice.
      - C(hosts_in) is a group (or C(a:b)) whose hosts a value, or each item of a list, must name
        (with a "did you mean" for an unknown name); C(within) names a variable of the same host
        holding a CIDR that an address must lie in without being its network or broadcast address.
      - C(each) is a rule for every item of a list (or value of a dict) and C(fields) maps a dict's
        keys to rules (C(required) there requires the key); they nest, and messages name the path,
        C(ceph_osd_devices[0].path).
      - C(distinct_from) lists variables no host may have the value in, for example a VIP that
        must not be any node's C(ansible_host).
      - A one-line string with whitespace around it is refused, here and in role variables.
      - C(same_on_all_hosts) requires one value across the group, for cluster-wide settings.
      - An unknown rule key is reported as an error, so a typo cannot disable a check.
      - C(read_by) names the files that read a variable no role has as an argument (a playbook,
        a lab tool).
      - An inventory variable that nothing reads (no role argument, no rule here, not Ansible's
        own) is refused; C(-e) variables, cached facts and variables the inventory's own templates
        refer to are not.
    type: dict
    default: {}
  disjoint_cidrs:
    description:
      - Lists of variable names whose values (CIDRs or addresses) must not overlap on any host,
        for example the pod range, the service range and the node address.
      - Values that are not addresses, such as DNS names, are ignored.
    type: list
    elements: list
    default: []
  role_argument_specs:
    description:
      - Role name to the group (or union of groups, C(a:b)) whose hosts run the role, or to a
        dict with C(hosts) (that group), C(set_by_playbook) and C(enabled_by).
      - Each host's variables named in the role's C(main) entry point are validated against its
        C(meta/argument_specs.yml) (types, choices, required).
      - A variable with the role's prefix (C(ROLE_)) that the spec does not know is reported as
        a probable typo with the closest option (did you mean). The longest role prefix owns a
        name, so C(monitoring_k8s_x) is checked against C(monitoring_k8s), not C(monitoring).
        A variable that has its own rule in O(variables) is never a typo.
      - C(set_by_playbook) lists options the play passes to the role itself. Role variables win
        over the inventory, so they are not required from it, and an inventory value for one is
        reported because it would be ignored.
      - C(enabled_by) names a variable; hosts where it is not true skip the role and are not
        checked against it. C(name=value) instead enables the role where that variable has that value.
      - C(day2) true marks a role a day-2 playbook runs (not the rollout); its options are known
        (an inventory may set them) and checked for typos and C(set_by_playbook) only.
      - A role without C(meta/argument_specs.yml) is an error.
      - Beyond types, the spec's C(required) options must not be empty and its C(type=path)
        options (and C(elements=path) items) must be absolute, nested options included.
    type: dict
    default: {}
  roles_path:
    description:
      - Directories searched for the roles of O(role_argument_specs).
      - Defaults to the playbook directory's C(roles/) and then the configured roles path.
    type: list
    elements: path
  play_level_vars:
    description:
      - Variable name to the value the plays see, for variables that play keywords read (C(serial),
        C(max_fail_percentage)). Play keywords cannot see host variables, so the plays load one file
        of the inventory themselves; a host whose inventory value differs was given it somewhere
        the plays do not read, and is reported.
    type: dict
    default: {}
  name_rules:
    description:
      - A Python regular expression (searched in a variable's name) to a rule, with the keys of
        O(variables) about one value. Every variable something reads (a role argument or a
        variable of O(variables)) whose name matches gets the rule on every host that defines it,
        for example C(_port$) with C(min) 1 and C(max) 65535; its own rule in O(variables) wins key by key.
      - A name rule does not make a variable read.
    type: dict
    default: {}
  numbers:
    description:
      - C(min) bounds every number anywhere in every value something reads, nested in lists and
        dicts (a team's capability in C(gpu_queues_teams), a pool's C(pg_num)); a numeric string
        with a sign (C("-8"), C("-4Gi")) counts. The message names the path of the number.
      - C(except) lists variables not walked, such as settings handed to another program as they
        are, where C(-1) can mean unlimited (sysctls, kubelet or Helm values).
    type: dict
    default: {}
  relations:
    description:
      - Rules between a host's variables, each a dict with C(hosts) (default C(all)), C(when)
        (a dict of variable to value; the rule applies where every one has it), C(why) (appended
        to the message) and either C(that) or C(requires).
      - C(that) is V([A, OP, B]) with OP one of C(==), C(!=), C(<=), C(<), C(>=), C(>); A and B
        are integers or variable names, optionally with an attribute - C(NAME.branch) (the first
        component of a dotted version), C(NAME.prefixlen) (of a CIDR), C(NAME.dscp) (a ToS byte
        shifted right by 2) or C(NAME.length).
      - C(requires) names a variable (or a list) that must be set and not empty.
      - A variable the inventory does not set is taken from the argument spec default of a role
        the host runs; a relation with a value known neither way is not checked.
    type: list
    elements: dict
    default: []
  known_groups:
    description:
      - Groups a play runs on beyond those the other options name (the groups of O(required_groups),
        O(group_sizes), O(exclusive_groups), O(member_of), O(role_argument_specs), O(variables) and
        O(relations) are known).
      - A host in any other group (a misspelt C(gpu_nvida)) is refused with the closest known
        group, as is a host in no group, and C(group_vars) or C(host_vars) beside the inventory
        for a group or host the inventory does not have.
    type: list
    elements: str
    default: []
extends_documentation_fragment:
  - action_common_attributes
  - action_common_attributes.conn
  - action_common_attributes.flow
attributes:
  action:
    support: full
  async:
    support: none
  become:
    support: none
  bypass_host_loop:
    support: none
  check_mode:
    support: full
  connection:
    support: none
  delegation:
    support: none
    details: It always runs on the controller; delegation only chooses whose connection variables are ignored.
  diff_mode:
    support: none
  platform:
    platforms: all
seealso:
  - module: ansible.builtin.assert
  - module: ansible.builtin.validate_argument_spec
author:
  - ai_platform L1 contributors (@ai-platform)
"""

EXAMPLES = r"""
- name: Validate the inventory
  hosts: all
  gather_facts: false
  any_errors_fatal: true
  tasks:
    - name: Check groups and values before any host is touched
      ai_platform.l1.inventory_validate:
        required_groups: [k8s_control_plane, k8s_worker]
        group_sizes:
          k8s_control_plane: [1, 3, 5, 7]
        exclusive_groups:
          - [k8s_control_plane, k8s_worker]
        member_of:
          gpu_nvidia: k8s_worker
        unique_vars: [ansible_host]
        disjoint_cidrs:
          - [k8s_pod_cidr, k8s_service_cidr, ansible_host]
        role_argument_specs:
          common: k8s_control_plane:k8s_worker
          k8s_worker:
            hosts: k8s_worker
            set_by_playbook: [k8s_worker_join]
        variables:
          k8s_pod_cidr:
            required: true
            type: str
            format: cidr
            same_on_all_hosts: true
          nvidia_driver_version:
            hosts: gpu_nvidia
            type: str
            pattern: '^\d{3}\.\d{2,3}(\.\d{2,3})?$'
      run_once: true
      delegate_to: localhost
"""

RETURN = r"""
errors:
  description:
    - One line per problem found.
    - Each starts with C(host NAME:), C(hosts A, B:), C(group NAME:) or C(role NAME:).
  returned: always
  type: list
  elements: str
  sample:
    - "group k8s_control_plane: must have 1, 3, 5 or 7 hosts (has 2: cp1, cp2)"
    - "host gpu1: nvidia_driver_version must match ^\\d{3}\\.\\d{2,3}(\\.\\d{2,3})?$ (got '55x')"
checked_hosts:
  description: Number of inventory hosts checked.
  returned: always
  type: int
  sample: 99
msg:
  description: A summary, followed on failure by every error line.
  returned: always
  type: str
  sample: inventory is valid (99 hosts checked)
"""
