#!/usr/bin/env python3
"""Simulated leaf switch over SSH (paramiko) speaking enough NVIDIA Onyx and Cumulus NVUE CLI for netmiko.

It holds real state: a running configuration (Onyx) or an applied + pending NVUE revision
(Cumulus), and a saved/startup copy, so a client's idempotence and drift repair are tested
against a server, not a mock.

  Onyx (netmiko mellanox_mlnxos): prompts `HOST [standalone: master] >`, `... #`, `... (config) #`;
    enable, disable, configure terminal, exit, no cli session paging enable, terminal ...,
    show version (`Product release: RELEASE`), show running-config, configuration write, and in
    config mode
      [no] roce [lossless|lossy]                   (only from release 3.8.2000 on; older: unrecognized)
      [no] dcb priority-flow-control enable [force]
      [no] dcb priority-flow-control priority N enable
      interface ethernet PORTS [no] qos trust [L2|L3|both]
      interface ethernet PORTS dcb priority-flow-control mode on force
      interface ethernet PORTS no dcb priority-flow-control mode [force]
      interface ethernet PORTS traffic-class N congestion-control ecn|red|both
                               minimum-absolute KB maximum-absolute KB
      interface ethernet PORTS no traffic-class N congestion-control
    PORTS is 1/N or a range 1/N-1/M of the switch's 32 ports. Per-port settings are held per port
    and printed the way Onyx prints them: one line per setting, consecutive ports with the same
    setting folded into a range (`interface ethernet 1/1-1/4 qos trust L3`), in `##` sections.
    Anything else: `% Unrecognized command`; a port that does not exist: `% Invalid interface`.
  Cumulus (netmiko cumulus_linux): prompt `cumulus@HOST:mgmt:~$ `;
    nv set PATH VALUE, nv unset PATH [VALUE], nv config apply [-y], nv config save,
    nv config show -o commands, nv config diff, exit.

SSH host keys: one RSA key per process unless `host_keys` (or `--host-key FILE`) names others;
`FakeSwitch.fingerprints` and `known_hosts()` give what a client pins. `state.connections` counts
TCP connections and `state.logins` records every authentication request (method, user), so a test
sees that a client refused the host key before it sent a user name or password.

Syntax of the explicit Onyx lines as in NVIDIA's "Lossless RoCE Configuration for MLNX-OS Switches
in DSCP-Based QoS Mode" (community DOC-3017, as quoted in att/netarbiter nvmf/README) and the
mellanox.onyx collection's onyx_traffic_class / onyx_qos / onyx_pfc_interface commands.

  python3 fake_switch.py --kind onyx|cumulus --port 2222 [--user admin --password admin]
                         [--release 3.9.3124] [--host-key FILE]
"""

import argparse
import base64
import copy
import hashlib
import os
import re
import socket
import threading

import paramiko

ONYX_HEADER = ['##', '## Running database "initial"', '## Generated at 2026/01/01 00:00:00 +0000', '##', '']
ONYX_BASE = ['hostname {host}', 'interface ethernet 1/1-1/32 mtu 9216 force', 'ip routing vrf default']
CUMULUS_BASE = ['nv set system hostname {host}', 'nv set interface swp1-32 link mtu 9216']
# NVUE keys that hold a set of values (nv set adds a member); every other key holds one value.
CUMULUS_SET_KEYS = ('qos pfc default-global switch-priority',)
_PFC_PRIO = re.compile(r'^dcb priority-flow-control priority ([0-7]) enable$')
_IF = re.compile(r'^interface ethernet (\S+) (.+)$')
_ECN = re.compile(r'^traffic-class ([0-7]) congestion-control (ecn|red|both) '
                  r'minimum-absolute (\d+) maximum-absolute (\d+)$')
ONYX_PORTS = 32
ROCE_COMMAND_SINCE = (3, 8, 2000)
UNRECOGNIZED = '% Unrecognized command "{}".\nType "?" for help.'


def _ports(text):
    """['1/1', ...] for `1/N` or `1/N-1/M` on this switch, or None."""
    m = re.match(r'^1/(\d+)(?:-1/(\d+))?$', text)
    if not m:
        return None
    first, last = int(m.group(1)), int(m.group(2) or m.group(1))
    if not 1 <= first <= last <= ONYX_PORTS:
        return None
    return ['1/%d' % n for n in range(first, last + 1)]


def _fold(ports):
    """Consecutive ports as Onyx prints them: ['1/1', '1/2', '1/4'] -> ['1/1-1/2', '1/4']."""
    nums = sorted(int(p.split('/')[1]) for p in ports)
    out, start = [], None
    for i, n in enumerate(nums):
        start = n if start is None else start
        if i + 1 == len(nums) or nums[i + 1] != n + 1:
            out.append('1/%d' % start if start == n else '1/%d-1/%d' % (start, n))
            start = None
    return out


class SwitchState:
    """Configuration of one simulated switch; tests read and change it directly (drift by hand)."""

    def __init__(self, kind, host, release='3.9.3124'):
        self.kind = kind
        self.host = host
        self.release = release   # Onyx `Product release`; decides whether `roce` exists
        self.lock = threading.Lock()
        base = ONYX_BASE if kind == 'onyx' else CUMULUS_BASE
        self.running = [line.format(host=host) for line in base]
        # Onyx per-port settings: port -> {'trust': 'L3', 'pfc': True, 'ecn': {tc: 'ecn minimum-absolute ..'}}
        self.ports = {}
        self.pending = list(self.running)
        self.saved = self.snapshot()
        self.revision = 1
        self.log = []   # every command line received, in order
        self.connections = 0   # TCP connections accepted
        self.logins = []       # every authentication request: (method, username)

    def snapshot(self):
        """The configuration as `configuration write` / `nv config save` stores it."""
        return (list(self.running), copy.deepcopy(self.ports))

    def has_roce_command(self):
        return tuple(int(x) for x in re.findall(r'\d+', self.release)[:3]) >= ROCE_COMMAND_SINCE

    # --- Onyx -------------------------------------------------------------------------
    def onyx_interface(self, ports_text, cmd):  # noqa: PLR0911 -- one return per setting
        ports = _ports(ports_text)
        if ports is None:
            return '% Invalid interface ethernet {}'.format(ports_text)
        words = cmd.split()
        neg = words[:1] == ['no']
        text = ' '.join(words[1:] if neg else words)
        settings = [self.ports.setdefault(p, {'trust': None, 'pfc': False, 'ecn': {}}) for p in ports]
        m = re.match(r'^qos trust(?: (L2|L3|both))?$', text)
        if m and (neg or m.group(1)):
            for port in settings:
                port['trust'] = None if neg else m.group(1)
            return ''
        if (not neg and text == 'dcb priority-flow-control mode on force') or \
                (neg and text in ('dcb priority-flow-control mode', 'dcb priority-flow-control mode force')):
            for port in settings:
                port['pfc'] = not neg
            return ''
        m = re.match(r'^traffic-class ([0-7]) congestion-control$', text)
        if neg and m:
            for port in settings:
                port['ecn'].pop(int(m.group(1)), None)
            return ''
        m = _ECN.match(text)
        if not neg and m:
            if int(m.group(3)) > int(m.group(4)):
                return '% minimum-absolute must not exceed maximum-absolute'
            for port in settings:
                port['ecn'][int(m.group(1))] = text.split(' congestion-control ', 1)[1]
            return ''
        return UNRECOGNIZED.format('interface ethernet %s %s' % (ports_text, cmd))

    def onyx_config(self, cmd):  # noqa: PLR0911 -- one return per CLI verb
        m = _IF.match(cmd)
        if m:
            return self.onyx_interface(m.group(1), m.group(2))
        words = cmd.split()
        neg = words[:1] == ['no']
        body = words[1:] if neg else words
        text = ' '.join(body)
        if body[:1] == ['roce'] and not self.has_roce_command():
            return UNRECOGNIZED.format(cmd)
        if body[:1] == ['roce'] and (len(body) == 1 or body[1:] in (['lossless'], ['lossy'])):
            self.running = [line for line in self.running if not line.startswith('roce')]
            if not neg:
                self.running.append('roce ' + (body[1] if len(body) > 1 else 'lossless'))
            return ''
        if text in ('dcb priority-flow-control enable', 'dcb priority-flow-control enable force'):
            self.running = [line for line in self.running if not line.startswith('dcb priority-flow-control enable')]
            if not neg:
                self.running.append('dcb priority-flow-control enable force')
            return ''
        if _PFC_PRIO.match(text):
            self.running = [line for line in self.running if line != text]
            if not neg:
                self.running.append(text)
            return ''
        return '% Unrecognized command "{}".\nType "?" for help.'.format(cmd)

    def onyx_interface_lines(self):
        """Per-port settings as Onyx prints them, consecutive ports folded into ranges."""
        by_setting = {}
        for port, conf in self.ports.items():
            bodies = []
            if conf['trust']:
                bodies.append('qos trust %s' % conf['trust'])
            if conf['pfc']:
                bodies.append('dcb priority-flow-control mode on force')
            bodies += ['traffic-class %d congestion-control %s' % kv for kv in sorted(conf['ecn'].items())]
            for body in bodies:
                by_setting.setdefault(body, []).append(port)
        return ['interface ethernet %s %s' % (ports, body)
                for body in sorted(by_setting) for ports in _fold(by_setting[body])]

    def onyx_show_running(self):
        def key(line):
            m = _PFC_PRIO.match(line)
            return (line.split()[0], int(m.group(1)) if m else -1, line)
        out = list(ONYX_HEADER)
        for line in sorted(self.running, key=key):
            out.append('   ' + line)
        iface = self.onyx_interface_lines()
        if iface:
            out += ['', '##', '## Interface Ethernet configuration', '##'] + ['   ' + line for line in iface]
        return '\n'.join(out)

    def onyx_show_version(self):
        return '\n'.join(['Product name:      Onyx', 'Product release:   %s' % self.release,
                          'Build ID:          #1-dev', 'System type:       x86_64',
                          'Uptime:            1d 2h 3m 4.000s'])

    # --- Cumulus ------------------------------------------------------------------------
    def nv(self, cmd):  # noqa: PLR0911 -- one return per CLI verb
        words = cmd.split()
        if words[:2] == ['nv', 'set'] and len(words) >= 4:
            path, value = ' '.join(words[2:-1]), words[-1]
            if path not in CUMULUS_SET_KEYS:
                self.pending = [line for line in self.pending if not line.startswith('nv set %s ' % path)]
            line = 'nv set %s %s' % (path, value)
            if line not in self.pending:
                self.pending.append(line)
            return ''
        if words[:2] == ['nv', 'unset'] and len(words) >= 3:
            target = 'nv set ' + ' '.join(words[2:])
            self.pending = [line for line in self.pending if line != target and not line.startswith(target + ' ')]
            return ''
        if words[:3] == ['nv', 'config', 'apply']:
            if sorted(self.pending) == sorted(self.running):
                return 'Warning: no changes to apply.'
            self.running = list(self.pending)
            self.revision += 1
            return 'applied [rev_id: %d]' % self.revision
        if words[:3] == ['nv', 'config', 'save']:
            self.saved = self.snapshot()
            return 'saved [rev_id: %d]' % self.revision
        if words[:3] == ['nv', 'config', 'show'] and words[3:] == ['-o', 'commands']:
            return '\n'.join(sorted(self.running))
        if words[:3] == ['nv', 'config', 'diff']:
            return '\n'.join(['- ' + line for line in sorted(set(self.running) - set(self.pending))]
                             + ['+ ' + line for line in sorted(set(self.pending) - set(self.running))])
        return "Error: Invalid Command: {}".format(cmd)


class _Session:
    def __init__(self, state, chan):
        self.state = state
        self.chan = chan
        self.mode = 'user' if state.kind == 'onyx' else 'shell'

    def prompt(self):
        if self.state.kind == 'cumulus':
            return 'cumulus@%s:mgmt:~$ ' % self.state.host
        end = {'user': ' >', 'enable': ' #', 'config': ' (config) #'}[self.mode]
        return '%s [standalone: master]%s ' % (self.state.host, end)

    def send(self, text):
        self.chan.sendall(text.replace('\r\n', '\n').replace('\n', '\r\n').encode())

    def handle(self, cmd):
        """Run one line; return the output, or None to close the session."""
        with self.state.lock:
            self.state.log.append(cmd)
            if not cmd:
                return ''
            if cmd in ('exit', 'quit', 'logout'):
                if self.mode == 'config':
                    self.mode = 'enable'
                    return ''
                return None
            if self.state.kind == 'cumulus':
                return self.state.nv(cmd) if cmd.startswith('nv ') else ''
            return self.onyx(cmd)

    def onyx(self, cmd):  # noqa: PLR0911 -- one return per CLI verb
        if cmd.startswith(('terminal ', 'no cli session paging', 'cli session')):
            return ''
        if cmd == 'enable':
            self.mode = 'enable' if self.mode == 'user' else self.mode
            return ''
        if cmd == 'disable':
            self.mode = 'user'
            return ''
        if cmd.startswith('show running-config'):
            return self.state.onyx_show_running()
        if cmd == 'show version':
            return self.state.onyx_show_version()
        if self.mode == 'user':
            return '% Unrecognized command "{}".\nType "?" for help.'.format(cmd)
        if cmd in ('configure terminal', 'config term', 'conf t', 'configure t'):
            self.mode = 'config'
            return ''
        if self.mode == 'config':
            if cmd in ('configuration write', 'write memory'):
                self.state.saved = self.state.snapshot()
                return ''
            return self.state.onyx_config(cmd)
        return '% Unrecognized command "{}".\nType "?" for help.'.format(cmd)

    def run(self):
        banner = 'NVIDIA Onyx Switch Management\n\n'
        if self.state.kind == 'cumulus':
            banner = 'Welcome to NVIDIA Cumulus Linux\n\n'
        self.send(banner + self.prompt())
        buf = ''
        while True:
            data = self.chan.recv(4096)
            if not data:
                return
            buf += data.decode(errors='replace')
            while re.search(r'[\r\n]', buf):
                line, sep, buf = re.split(r'(\r\n|\r|\n)', buf, maxsplit=1)
                # echo like a terminal, so netmiko's command verification sees the command
                self.send(line + '\n')
                out = self.handle(line.strip())
                if out is None:
                    self.chan.close()
                    return
                self.send((out + '\n' if out else '') + self.prompt())


class _Server(paramiko.ServerInterface):
    def __init__(self, username, password, state):
        self.username = username
        self.password = password
        self.state = state
        self.shell = threading.Event()

    def _login(self, method, username):
        with self.state.lock:
            self.state.logins.append((method, username))

    def check_auth_none(self, username):
        self._login('none', username)
        return paramiko.AUTH_FAILED

    def check_auth_publickey(self, username, key):
        self._login('publickey', username)
        return paramiko.AUTH_FAILED

    def check_auth_interactive(self, username, submethods):
        self._login('keyboard-interactive', username)
        return paramiko.AUTH_FAILED

    def check_auth_password(self, username, password):
        self._login('password', username)
        if (username, password) == (self.username, self.password):
            return paramiko.AUTH_SUCCESSFUL
        return paramiko.AUTH_FAILED

    def get_allowed_auths(self, username):
        return 'password'

    def check_channel_request(self, kind, chanid):
        return paramiko.OPEN_SUCCEEDED if kind == 'session' else paramiko.OPEN_FAILED_ADMINISTRATIVELY_PROHIBITED

    def check_channel_pty_request(self, *args):
        return True

    def check_channel_shell_request(self, channel):
        self.shell.set()
        return True


_HOST_KEY = []


def _host_key():
    if not _HOST_KEY:
        _HOST_KEY.append(paramiko.RSAKey.generate(2048))
    return _HOST_KEY[0]


def fingerprint(key):
    """SHA256 fingerprint of a paramiko key, as `ssh-keygen -lf` prints it."""
    return 'SHA256:' + base64.b64encode(hashlib.sha256(key.asbytes()).digest()).decode().rstrip('=')


def load_or_make_host_key(path):
    """The private host key in `path` (OpenSSH/PEM; RSA, ECDSA or Ed25519), made (RSA) if there is none,
    so a simulated switch keeps its key across restarts and can be pinned in an inventory."""
    if os.path.exists(path):
        for cls in (paramiko.RSAKey, paramiko.ECDSAKey, paramiko.Ed25519Key):
            try:
                return cls.from_private_key_file(path)
            except paramiko.SSHException:
                continue
        raise SystemExit('%s holds no RSA, ECDSA or Ed25519 private key' % path)
    key = paramiko.RSAKey.generate(2048)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, 'w') as f:
        key.write_private_key(f)
    return key


class FakeSwitch:
    """One simulated switch listening on 127.0.0.1 (or `bind`); start() returns the port.

    `host_keys`: the paramiko private keys it offers (default: the process's one RSA key)."""

    def __init__(self, kind, host='leaf1', username='admin', password='admin', *, bind='127.0.0.1', port=0,
                 release='3.9.3124', host_keys=None):
        if kind not in ('onyx', 'cumulus'):
            raise ValueError('kind must be onyx or cumulus')
        self.state = SwitchState(kind, host, release)
        self.username, self.password = username, password
        self.host_keys = list(host_keys) if host_keys else [_host_key()]
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind((bind, port))
        self.port = self.sock.getsockname()[1]
        self._stop = threading.Event()

    @property
    def fingerprints(self):
        """SHA256 fingerprints of the host keys, as `ssh-keygen -lf` prints them."""
        return [fingerprint(key) for key in self.host_keys]

    def known_hosts(self, host='127.0.0.1'):
        """known_hosts lines for the host keys, as `ssh-keyscan -p PORT HOST` prints them."""
        name = host if self.port == 22 else '[%s]:%d' % (host, self.port)
        return ''.join('%s %s %s\n' % (name, key.get_name(), key.get_base64()) for key in self.host_keys)

    def start(self):
        self.sock.listen(16)
        threading.Thread(target=self._accept, daemon=True).start()
        return self.port

    def stop(self):
        self._stop.set()
        self.sock.close()

    def _accept(self):
        while not self._stop.is_set():
            try:
                client, _ = self.sock.accept()
            except OSError:
                return
            with self.state.lock:
                self.state.connections += 1
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client):
        transport = paramiko.Transport(client)
        for key in self.host_keys:
            transport.add_server_key(key)
        server = _Server(self.username, self.password, self.state)
        try:
            transport.start_server(server=server)
            chan = transport.accept(20)
            if chan is None or not server.shell.wait(10):
                return
            _Session(self.state, chan).run()
        except (paramiko.SSHException, OSError, EOFError):
            return
        finally:
            transport.close()


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('--kind', required=True, choices=('onyx', 'cumulus'))
    parser.add_argument('--host', default='leaf1')
    parser.add_argument('--bind', default='127.0.0.1')
    parser.add_argument('--port', type=int, default=2222)
    parser.add_argument('--user', default='admin')
    parser.add_argument('--password', default='admin')
    parser.add_argument('--release', default='3.9.3124', help='Onyx release; before 3.8.2000 there is no roce command')
    parser.add_argument('--host-key', metavar='FILE',
                        help='private host key to offer, made (RSA, mode 0600) if FILE does not exist; '
                             'without it a new key every start')
    args = parser.parse_args()
    keys = [load_or_make_host_key(args.host_key)] if args.host_key else None
    switch = FakeSwitch(args.kind, args.host, args.user, args.password, bind=args.bind, port=args.port,
                        release=args.release, host_keys=keys)
    print('%s %s listening on %s:%d' % (args.kind, args.host, args.bind, switch.start()), flush=True)
    print('host key %s; known_hosts line:' % ', '.join(switch.fingerprints), flush=True)
    print(switch.known_hosts(args.bind), end='', flush=True)
    threading.Event().wait()


if __name__ == '__main__':
    main()
