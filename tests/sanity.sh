#!/usr/bin/env bash
# ansible-test sanity on the collection, in its own cached virtualenvs (~/.ansible/test).
# Extra args are passed through, e.g. `bash tests/sanity.sh --test validate-modules`.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
export PATH=$root/.venv/bin:$PATH

# ansible-test bootstraps pip in its venvs with a get-pip script downloaded from a host
# this network cannot reach. Stand in for it with the interpreter's own ensurepip
# followed by a normal pip install of what ansible-test asked for (pip from PyPI).
pip_version=$(python - <<'PY'
import re, ansible_test, pathlib
src = pathlib.Path(ansible_test.__file__).parent.joinpath('_internal/python_requirements.py').read_text()
print(re.search(r"pip='([0-9.]+)'", src).group(1))
PY
)
get_pip=~/.ansible/test/cache/get_pip_${pip_version//./_}.py
if ! grep -q "ensurepip" "$get_pip" 2>/dev/null || ! grep -q saved "$get_pip"; then
  mkdir -p "$(dirname "$get_pip")"
  cat > "$get_pip" <<'PY'
"""Offline stand-in for get-pip.py: ensurepip, then pip install with the given arguments."""
import ensurepip
import os
import runpy
import sys

saved = dict(os.environ)
ensurepip.bootstrap(upgrade=True)
# ensurepip points PIP_CONFIG_FILE at /dev/null; give pip the user's configuration back.
os.environ.clear()
os.environ.update(saved)
args = [a for a in sys.argv[1:] if a not in ('--no-setuptools', '--no-wheel')]
sys.argv = ['pip', 'install'] + args
runpy.run_module('pip', run_name='__main__', alter_sys=True)
PY
fi

cd "$root/collections/ansible_collections/ai_platform/l1"
# ansible-test shares its venvs under ~/.ansible/test: concurrent runs would corrupt them.
mkdir -p ~/.ansible/test
exec flock ~/.ansible/test/.ai-l1-sanity.lock ansible-test sanity --venv --python 3.11 --color no "$@"
