"""What the day-2 tools share with this repository's collection (ai_platform.l1): its module_utils.

The one accelerator-facts layer (plugins/module_utils/accelerator_health.py: the XID policy and
the health view) lives in the collection, where gpu_info and npu_info use it on the nodes; the
remediation receiver reads the same module. It is imported as
``ansible_collections.ai_platform.l1.plugins.module_utils.<name>`` when the collection's parent
directory is on sys.path (pytest's pythonpath in a checkout). Else the directories Ansible
itself would look in are added, first one holding the collection wins:

- ``$AI_L1_PROJECT_DIR/collections`` (the receiver image: /opt/ai-l1/project, whose ansible.cfg
  names that collections_path; the systemd service: the project directory),
- the checkout this package runs from (``<repo>/collections``, an editable install),
- ``$ANSIBLE_COLLECTIONS_PATH`` (colon-separated), ``~/.ansible/collections`` and
  ``/usr/share/ansible/collections`` (an execution environment's installed collections).
"""

from __future__ import annotations

import importlib
import os
import sys
from pathlib import Path
from types import ModuleType

PACKAGE = "ansible_collections.ai_platform.l1.plugins.module_utils"
PROJECT_ENV = "AI_L1_PROJECT_DIR"  # as ai_l1_day2.runner.PROJECT_ENV


def candidate_paths() -> list[Path]:
    """Directories that may hold ansible_collections/ai_platform/l1, in the order tried."""
    paths = []
    if os.environ.get(PROJECT_ENV):
        paths.append(Path(os.environ[PROJECT_ENV]) / "collections")
    paths += [parent / "collections" for parent in Path(__file__).resolve().parents]
    for var in ("ANSIBLE_COLLECTIONS_PATH", "ANSIBLE_COLLECTIONS_PATHS"):
        paths += [Path(p).expanduser() for p in os.environ.get(var, "").split(os.pathsep) if p]
    paths += [Path("~/.ansible/collections").expanduser(), Path("/usr/share/ansible/collections")]
    return paths


def module_utils(name: str) -> ModuleType:
    """plugins/module_utils/<name> of ai_platform.l1; ImportError naming where it looked."""
    try:
        return importlib.import_module(f"{PACKAGE}.{name}")
    except ImportError:
        pass
    tried = []
    for path in candidate_paths():
        tried.append(str(path))
        if (path / "ansible_collections" / "ai_platform" / "l1" / "plugins" / "module_utils" / f"{name}.py").is_file():
            if str(path) not in sys.path:
                sys.path.append(str(path))
            importlib.invalidate_caches()
            return importlib.import_module(f"{PACKAGE}.{name}")
    raise ImportError(f"the ai_platform.l1 collection's module_utils/{name}.py is not importable and not in "
                      f"{', '.join(tried)}; set {PROJECT_ENV} to the project directory (the one holding "
                      "collections/ansible_collections/ai_platform/l1)")
