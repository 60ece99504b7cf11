#!/usr/bin/env python3
"""Stand-in for `mlnx_qos` (mlnx-tools) holding per-port QoS state in a JSON file.

  mlnx_qos_fake.py -i IF [--trust pcp|dscp] [--pfc|-f 0,0,0,1,0,0,0,0] [--dscp2prio set,D,P]
                   [--prio_tc|-p 8 x TC] [--tsa|-s 8 x ets|strict|vendor] [--tcbw|-t 8 x %]

State file: $AI_L1_FAKE_MLNX_QOS_STATE or /etc/ai-l1-fake/mlnx_qos.json, written by
`--init IF...` (factory defaults: pcp trust, PFC off, identity DSCP map, priority 0 on tc 1
and 1 on tc 0 as the driver sets it, all TCs vendor). Every run prints the port's state in
the mlnx-tools 5.x layout, as the real tool does after a set. Setters validate like the tool
(8 values) and exit 1 with a message on bad input or an unknown interface.
Standard library only: it runs inside lab nodes.
"""

import json
import os
import sys

STATE = os.environ.get('AI_L1_FAKE_MLNX_QOS_STATE', '/etc/ai-l1-fake/mlnx_qos.json')


def default_port():
    return {
        'trust': 'pcp',
        'pfc': [0] * 8,
        'dscp2prio': {str(d): d // 8 for d in range(64)},
        'prio_tc': [1, 0, 2, 3, 4, 5, 6, 7],
        'tsa': ['vendor'] * 8,
        'tcbw': [0] * 8,
    }


def load():
    try:
        with open(STATE) as handle:
            return json.load(handle)
    except FileNotFoundError:
        return {}


def save(state):
    os.makedirs(os.path.dirname(STATE) or '.', exist_ok=True)
    tmp = STATE + '.tmp'
    with open(tmp, 'w') as handle:
        json.dump(state, handle, indent=1, sort_keys=True)
    os.replace(tmp, STATE)


def die(msg):
    sys.stderr.write(msg + '\n')
    sys.exit(1)


def vector(opt, value, allowed):
    items = value.split(',')
    if len(items) != 8 or any(i not in allowed for i in items):
        die('%s: expected 8 comma-separated values from %s, got %r' % (opt, sorted(set(allowed)), value))
    return items


def show(port):
    out = ['DCBX mode: OS controlled', 'Priority trust state: %s' % port['trust']]
    if port['trust'] == 'dscp':
        out.append('dscp2prio mapping:')
        for p in range(8):
            dscps = sorted((int(d) for d, v in port['dscp2prio'].items() if v == p), reverse=True)
            out.append('\tprio:%d dscp:%s' % (p, ''.join('%02d,' % d for d in dscps)))
    out += ['default priority:', 'Receive buffer size (bytes): 130944,130944,0,0,0,0,0,0,',
            'Cable len: 7', 'PFC configuration:',
            '\tpriority    0   1   2   3   4   5   6   7',
            '\tenabled     ' + ''.join('%d   ' % v for v in port['pfc']),
            '\tbuffer      ' + ''.join('%d   ' % v for v in port['pfc'])]
    for tc in (1, 0, 2, 3, 4, 5, 6, 7):
        line = 'tc: %d ratelimit: unlimited, tsa: %s' % (tc, port['tsa'][tc])
        if port['tsa'][tc] == 'ets':
            line += ', bw: %d%%' % port['tcbw'][tc]
        out.append(line)
        prios = [p for p in range(8) if port['prio_tc'][p] == tc]
        if prios:
            out.append('\t priority:  ' + '  '.join(str(p) for p in prios))
    print('\n'.join(out))


def parse_args(argv):
    opts = {}
    i = 0
    aliases = {'-f': '--pfc', '-p': '--prio_tc', '-s': '--tsa', '-t': '--tcbw', '--interface': '-i'}
    while i < len(argv):
        opt = aliases.get(argv[i], argv[i])
        if opt not in ('-i', '--trust', '--pfc', '--dscp2prio', '--prio_tc', '--tsa', '--tcbw') or i + 1 >= len(argv):
            die('mlnx_qos: unknown option or missing value: %s' % argv[i])
        opts[opt] = argv[i + 1]
        i += 2
    return opts


def set_ets(port, opts):
    if '--tsa' in opts:
        tsa = opts['--tsa'].split(',')
        if len(tsa) != 8 or any(t not in ('ets', 'strict', 'vendor') for t in tsa):
            die('--tsa: expected 8 of ets,strict,vendor')
        port['tsa'] = tsa
        if '--tcbw' in opts:
            bw = opts['--tcbw'].split(',')
            if len(bw) != 8 or any(not b.isdigit() for b in bw):
                die('--tcbw: expected 8 percentages')
            if sum(int(bw[i]) for i in range(8) if tsa[i] == 'ets') != 100:
                die('--tcbw: ETS bandwidths must add up to 100')
            port['tcbw'] = [int(b) for b in bw]
    elif '--tcbw' in opts:
        die('--tcbw needs --tsa')


def main(argv):
    state = load()
    if argv[:1] == ['--init']:
        for iface in argv[1:]:
            state[iface] = default_port()
        save(state)
        return
    opts = parse_args(argv)
    iface = opts.get('-i')
    if not iface:
        die('mlnx_qos: -i INTF is required')
    if iface not in state:
        die('Netlink error: interface %s not found (no such device)' % iface)
    port = state[iface]
    if '--trust' in opts:
        if opts['--trust'] not in ('pcp', 'dscp'):
            die('--trust: pcp or dscp')
        port['trust'] = opts['--trust']
    if '--pfc' in opts:
        port['pfc'] = [int(v) for v in vector('--pfc', opts['--pfc'], '01')]
    if '--dscp2prio' in opts:
        parts = opts['--dscp2prio'].split(',')
        if len(parts) != 3 or parts[0] != 'set' or not parts[1].isdigit() or not parts[2].isdigit() \
                or int(parts[1]) > 63 or int(parts[2]) > 7:
            die('--dscp2prio: expected set,DSCP,PRIO')
        port['dscp2prio'][str(int(parts[1]))] = int(parts[2])
    if '--prio_tc' in opts:
        port['prio_tc'] = [int(v) for v in vector('--prio_tc', opts['--prio_tc'], '01234567')]
    set_ets(port, opts)
    save(state)
    show(port)


if __name__ == '__main__':
    main(sys.argv[1:])
