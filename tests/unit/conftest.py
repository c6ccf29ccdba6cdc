"""Import the project's plugins, modules and the stand-in as plain Python, without Ansible running."""

import importlib.util
import socket
import sys
import threading
from pathlib import Path

import pytest

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


@pytest.fixture
def standin():
    """Start the stand-in engine in this process; yields (base url, engine)."""
    from http.server import ThreadingHTTPServer

    from sglang_standin.engine import Engine, Knobs
    from sglang_standin.server import Handler

    def start(knobs=None, **args):
        server_args = {"model-path": "/nonexistent", "served-model-name": "m", **args}
        engine = Engine(server_args, knobs or Knobs(ttft_ms=5, tok_s=2000))
        handler = type("H", (Handler,), {"engine": engine})
        httpd = ThreadingHTTPServer(("127.0.0.1", free_port()), handler)
        httpd.daemon_threads = True
        threading.Thread(target=httpd.serve_forever, daemon=True).start()
        servers.append(httpd)
        return f"http://127.0.0.1:{httpd.server_address[1]}", engine

    servers = []
    yield start
    for httpd in servers:
        httpd.shutdown()
        httpd.server_close()
