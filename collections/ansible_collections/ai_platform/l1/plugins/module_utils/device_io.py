# -*- coding: utf-8 -*-
# Copyright: (c) 2025, ai_platform L1 contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""How the collection talks to devices: vendor CLIs and sysfs attributes, one way each.

Vendor CLIs (npu-smi, nvidia-smi, mlnx_qos, and the journalctl/dmesg/systemctl reads of
gpu_info) run through CliRunner, in the spirit of community.general's CmdRunner but smaller:

- argument formats (Arg.*) turn named values into argv words, so a caller writes
  ``runner.args('type npu', type='board', npu=0)`` -> ``['-t', 'board', '-i', '0']``;
- every command runs under ``LC_ALL=C`` (vendor tools print localized text otherwise);
- a timeout per runner: inside a module through coreutils' ``timeout`` around
  ``AnsibleModule.run_command`` (exit code 124 is the timeout), outside Ansible through
  ``subprocess``'s own timeout; npu-smi and nvidia-smi can hang on a wedged device;
- one error, CliError, naming the command, its exit code and its stderr (else stdout):
  "`npu-smi info -t board -i 0` failed with exit code 255: dcmi model initialized failed",
  "`npu-smi info` did not finish within 60 seconds", "`mlnx_qos -i ens1f0` could not be
  run: [Errno 2] No such file or directory".

sysfs and procfs attributes are read with read_attr/list_dir: a missing or unreadable file is
None (an empty list for a directory), content that is not text is a ValueError naming the
file (or None when the caller asks for lenient reads).

Standard library only, no Ansible import: tests/device/gpu_check.py and the unit tests use
it without Ansible (module=None).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import shlex
import shutil
import subprocess

# Vendor tools print localized text under other locales; the parsers read the C locale's.
CLI_ENVIRON = {'LC_ALL': 'C'}
# GNU coreutils' timeout exits 124 when the command ran out of time.
TIMEOUT_RC = 124
# Exit code for "not found / could not be started", as a shell reports it.
NOT_RUN_RC = 127
# How much of stderr/stdout an error message carries (the end: tools print the cause last).
DETAIL_CHARS = 500


class CliError(Exception):
    """A command that could not be run, ran out of time, or exited with an unexpected code.

    Attributes: command (the command line as shown), rc (None when it could not be run),
    stdout, stderr, timeout (seconds, when it ran out of time, else None), reason (why it
    could not be run, else '').
    """

    def __init__(self, command, rc=None, stdout='', stderr='', *, timeout=None, reason=''):
        self.command = command
        self.rc = rc
        self.stdout = stdout or ''
        self.stderr = stderr or ''
        self.timeout = timeout
        self.reason = reason
        super(CliError, self).__init__(self.message())

    @property
    def timed_out(self):
        return self.timeout is not None

    @property
    def detail(self):
        """The end of stderr, else of stdout, stripped; '' when both are empty."""
        return (self.stderr.strip() or self.stdout.strip())[-DETAIL_CHARS:]

    def message(self):
        if self.timed_out:
            return '`%s` did not finish within %d seconds' % (self.command, self.timeout)
        if self.rc is None:
            return '`%s` could not be run: %s' % (self.command, self.reason or 'unknown error')
        return '`%s` failed with exit code %d: %s' % (self.command, self.rc, self.detail or 'no output')

    def result(self):
        """Keys for fail_json besides msg."""
        return {'rc': self.rc, 'stdout': self.stdout, 'stderr': self.stderr}


class CliResult:
    """What one run gave: rc, stdout, stderr, and whether it ran out of time."""

    def __init__(self, rc, stdout, stderr, timed_out=False, started=True):
        self.rc = rc
        self.stdout = stdout
        self.stderr = stderr
        self.timed_out = timed_out
        self.started = started

    def triple(self):
        """(rc, stdout, stderr), as AnsibleModule.run_command returns them."""
        return self.rc, self.stdout, self.stderr


def _merged_env(environ):
    env = dict(os.environ)
    env.update(environ or {})
    return env


def execute(module, argv, timeout=None, environ=None):
    """Run argv once; never raises for a failing command.

    module: an AnsibleModule (run_command, get_bin_path) or None (subprocess, outside Ansible).
    A command that cannot be started gives rc 127 with the reason in stderr and started False.
    """
    argv = [str(a) for a in argv]
    if module is None:
        return _execute_subprocess(argv, timeout, environ)
    cmd = list(argv)
    wrapped = False
    if timeout:
        timeout_bin = module.get_bin_path('timeout')
        if timeout_bin:
            cmd = [timeout_bin, str(int(timeout))] + cmd
            wrapped = True
    try:
        rc, out, err = module.run_command(cmd, environ_update=environ or None, handle_exceptions=False)
    except (OSError, IOError) as exc:
        return CliResult(NOT_RUN_RC, '', str(exc), started=False)
    if wrapped and rc in (126, NOT_RUN_RC) and '/' in argv[0] and not _executable(argv[0]):
        # timeout(1) reports a command it cannot start as 126 (not executable) or 127 (not found),
        # where run_command alone raises OSError: the same answer either way.
        return CliResult(NOT_RUN_RC, out, err, started=False)
    return CliResult(rc, out, err, timed_out=wrapped and rc == TIMEOUT_RC)


def _executable(path):
    return os.path.isfile(path) and os.access(path, os.X_OK)


def _execute_subprocess(argv, timeout, environ):
    try:
        proc = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, check=False,
                              timeout=timeout or None, env=_merged_env(environ) if environ else None)
    except subprocess.TimeoutExpired as exc:
        return CliResult(TIMEOUT_RC, _text(exc.stdout), _text(exc.stderr), timed_out=True)
    except (OSError, IOError) as exc:
        return CliResult(NOT_RUN_RC, '', str(exc), started=False)
    return CliResult(proc.returncode, _text(proc.stdout), _text(proc.stderr))


def _text(data):
    if data is None:
        return ''
    if isinstance(data, bytes):
        return data.decode('utf-8', 'replace')
    return data


def which(module, name, opt_dirs=None):
    """Full path of an executable name (module.get_bin_path, or PATH outside Ansible), or None."""
    if module is not None:
        return module.get_bin_path(name, opt_dirs=list(opt_dirs or []))
    found = shutil.which(name)
    if found is None:
        for directory in opt_dirs or []:
            candidate = os.path.join(directory, name)
            if _executable(candidate):
                return candidate
    return found


def tool_runner(module=None, timeout=None, environ=None):
    """runner(argv) -> (rc, stdout, stderr) for system tools named by argv[0] (journalctl, dmesg,
    systemctl), looked up with which(); never raises.

    A tool that is missing or cannot be started gives rc 127 ('<name> not found' or the reason),
    one that runs out of time rc 124 ('<name> did not finish within N seconds'): answers such as
    "the journal is not available", which the caller may fall back from.
    """
    def runner(argv):
        argv = list(argv)
        path = which(module, argv[0]) if '/' not in argv[0] else argv[0]
        if path is None:
            return NOT_RUN_RC, '', '%s not found' % argv[0]
        result = execute(module, [path] + argv[1:], timeout=timeout, environ=environ)
        if result.timed_out:
            return result.rc, result.stdout, '%s did not finish within %d seconds' % (argv[0], timeout)
        return result.triple()
    return runner


# ---------------------------------------------------------------- argument formats


class Arg:
    """Argument formats: each turns one named value into a list of argv words.

    A value of None always gives no words (the option is left out), except for fixed().
    """

    @staticmethod
    def fixed(*words):
        """The same words whatever the value (a subcommand, a constant flag)."""
        return lambda _value: list(words)

    @staticmethod
    def opt_val(option):
        """['-i', '3']."""
        return lambda value: [] if value is None else [option, str(value)]

    @staticmethod
    def opt_eq_val(option):
        """['--format=csv']."""
        return lambda value: [] if value is None else ['%s=%s' % (option, value)]

    @staticmethod
    def flag(option):
        """[option] when the value is true."""
        return lambda value: [option] if value else []

    @staticmethod
    def joined(option, sep=','):
        """['--pfc', '0,0,0,1,0,0,0,0'] from a list."""
        return lambda value: [] if value is None else [option, sep.join(str(v) for v in value)]

    @staticmethod
    def words():
        """The value's items as words (a list), or the value itself as one word."""
        def fmt(value):
            if value is None:
                return []
            if isinstance(value, (list, tuple)):
                return [str(v) for v in value]
            return [str(value)]
        return fmt


def format_args(formats, order, values):
    """argv words for the names in order (a list, or names separated by blanks).

    A name without a format is a programming error (KeyError names it).
    """
    names = order.split() if isinstance(order, str) else list(order)
    argv = []
    for name in names:
        if name not in formats:
            raise KeyError('no argument format for %r (have: %s)' % (name, ', '.join(sorted(formats))))
        argv.extend(formats[name](values.get(name)))
    return argv


def command_line(words):
    """A command as a shell would read it (for messages and RV(commands))."""
    return ' '.join(shlex.quote(str(w)) for w in words)


# ---------------------------------------------------------------- the runner


class CliRunner:
    """One vendor CLI: its path, display name, argument formats, timeout and environment.

    runner = CliRunner(module, '/usr/local/sbin/npu-smi', name='npu-smi', timeout=60,
                       arg_formats=dict(type=Arg.opt_val('-t'), npu=Arg.opt_val('-i')))
    out = runner.run(['info'] + runner.args('type npu', type='board', npu=0))

    run() returns stdout and raises CliError unless the exit code is in ok; call() returns a
    CliResult and raises nothing. module None runs the command with subprocess.
    """

    def __init__(self, module, path, *, name=None, arg_formats=None, timeout=None, environ=None):
        self.module = module
        self.path = path
        self.name = name or os.path.basename(path)
        self.formats = dict(arg_formats or {})
        self.timeout = timeout
        self.environ = dict(CLI_ENVIRON if environ is None else environ)

    def args(self, order, **values):
        """argv words for the named values, in order (see format_args)."""
        return format_args(self.formats, order, values)

    def display(self, args):
        """The command as error messages show it: the tool's name, then its arguments."""
        return command_line([self.name] + list(args))

    def command_line(self, args):
        """The command as it runs: the tool's path, then its arguments."""
        return command_line([self.path] + list(args))

    def call(self, args):
        return execute(self.module, [self.path] + list(args), timeout=self.timeout, environ=self.environ)

    def run(self, args, ok=(0,)):
        """stdout of the command; CliError when it cannot run, times out, or exits outside ok."""
        result = self.call(args)
        return self.check(args, result, ok)

    def check(self, args, result, ok=(0,)):
        """result.stdout when the result is a success, else CliError."""
        command = self.display(args)
        if result.timed_out:
            raise CliError(command, result.rc, result.stdout, result.stderr, timeout=self.timeout)
        if not result.started:
            raise CliError(command, None, result.stdout, result.stderr, reason=result.stderr.strip())
        if result.rc not in ok:
            raise CliError(command, result.rc, result.stdout, result.stderr)
        return result.stdout


# ---------------------------------------------------------------- sysfs / procfs


def read_file(path):
    """The bytes of a small file, or None when it cannot be read (missing, EINVAL, EACCES)."""
    try:
        with open(path, 'rb') as handle:
            return handle.read()
    except (IOError, OSError):
        return None


def read_attr(path, strict=True):
    """The stripped text of a sysfs/procfs attribute, or None when it cannot be read.

    Content that is not UTF-8 text (a broken driver, a corrupt file) raises ValueError naming
    the file when strict (guessing a value there would compare or configure the wrong thing),
    else reads as None (unknown).
    """
    data = read_file(path)
    if data is None:
        return None
    try:
        return data.decode('utf-8').strip()
    except UnicodeDecodeError:
        if not strict:
            return None
        raise ValueError('%s does not hold text (%r): is the driver broken?' % (path, data[:32])) from None


def list_dir(path):
    """Sorted entries of a directory; [] when it is missing or cannot be read."""
    try:
        return sorted(os.listdir(path))
    except (IOError, OSError):
        return []
