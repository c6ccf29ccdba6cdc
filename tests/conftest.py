"""Fixtures shared by tests/unit and tests/integration."""

import sys
import threading
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from support import free_port  # noqa: E402


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
