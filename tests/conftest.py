"""Fixtures shared by tests/unit and tests/integration."""

import sys
import threading
from pathlib import Path

import pytest
from hypothesis import settings
from hypothesis.configuration import set_hypothesis_home_dir

sys.path.insert(0, str(Path(__file__).resolve().parent))

from support import free_port  # noqa: E402
from support.wheels import CACHE  # noqa: E402

# Hypothesis keeps its examples and caches outside the clone (not .hypothesis/ in the working
# directory). Profiles (pytest --hypothesis-profile=NAME): `full` (the default, `make test`) runs
# every property with the examples its test asks for; `check` (`make check`) a fifth of them
# (support.examples).
set_hypothesis_home_dir(CACHE / "hypothesis")
# No per-example deadline: `make test` runs the unit tests beside molecule on two cores.
settings.register_profile("full", max_examples=100, deadline=None)
settings.register_profile("check", max_examples=20, deadline=None)
settings.load_profile("full")


@pytest.fixture(autouse=True)
def _outside_the_clone(tmp_path, monkeypatch):
    """Every test runs in a directory of its own: a relative path a module or a test writes to
    (a hostile `dest`, a chart, a `.tmp`) lands there, never in the working tree."""
    monkeypatch.chdir(tmp_path)


@pytest.fixture(autouse=True)
def _no_download_unless_marked(request, monkeypatch):
    """Only a test marked `network` may download: pip gets no index for any other, so a test
    that downloads without the mark fails (in `make check` and `make test` alike)."""
    if request.node.get_closest_marker("network") is None:
        monkeypatch.setenv("PIP_NO_INDEX", "1")


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
