"""Import the project's plugins, modules and the stand-in as plain Python, without Ansible running."""

import importlib.util
import socket
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ROLE = ROOT / "roles" / "sglang"

sys.path.insert(0, str(ROOT / "filter_plugins"))
sys.path.insert(0, str(ROOT / "tests" / "standin"))


def _load(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


# The role's module_utils, where Ansible would put them for its modules.
for _util in sorted((ROLE / "module_utils").glob("*.py")):
    _load(f"ansible.module_utils.{_util.stem}", _util)


def load_module(name):
    """A module from roles/sglang/library, importable for its functions."""
    return _load(name, ROLE / "library" / f"{name}.py")


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


