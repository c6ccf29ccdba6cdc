"""The environment a run inherits, its working directory: every Python this project runs as
root with `-c` or `-m` (which put the working directory first on sys.path) runs from "/", so a
run started in /tmp never imports what another local user left there (round six of issue 44)."""

import contextlib
import json
import os
import sys

import pytest
from support import load_module

from ansible_collections.sglang.deploy.plugins.module_utils import sglang_cli, sglang_envs, sglang_pip
from ansible_collections.sglang.deploy.plugins.module_utils import sglang_workload as workloads

bench = load_module("sglang_serving_bench")


@pytest.fixture(name="planted")
def _planted(tmp_path, monkeypatch):
    """A working directory where another user left json.py, sglang/ and a module of the probe's
    name, each of which writes a mark when imported."""
    mark = tmp_path / "imported"
    code = f"open({str(mark)!r}, 'a').write(__name__ + '\\n')\n"
    for name in ("json.py", "planted_probe.py"):
        (tmp_path / name).write_text(code)
    (tmp_path / "sglang").mkdir()
    (tmp_path / "sglang" / "__init__.py").write_text(code)
    (tmp_path / "sglang" / "bench_serving.py").write_text(code)
    monkeypatch.chdir(tmp_path)
    return mark


def test_no_probe_imports_from_the_working_directory(planted):
    sglang_pip._probe(sys.executable, ["import json, sys; print(json.dumps([sys.path[0]]))"])
    sglang_envs.python_identity(sys.executable)
    text, why, _elapsed = sglang_cli.run_help(sys.executable, module="planted_probe")
    assert text is None and "No module named planted_probe" in why
    with contextlib.ExitStack() as stack:  # the benchmark runs in a directory of its own
        runs, why = bench.Runner({}, "", stack).can_run(sys.executable)
    assert not runs and "sglang" in why
    assert not planted.exists(), planted.read_text()


def test_the_benchmark_inherits_no_python_or_hub_variable():
    child = workloads.env({"PATH": "/usr/bin", "PYTHONPATH": "/tmp/evil", "PYTHONHOME": "/x",
                           "HF_TOKEN": "hf_secret", "OPENAI_API_KEY": "old"}, "sk-new", "/w")
    assert child["PATH"] == "/usr/bin" and child["OPENAI_API_KEY"] == "sk-new"
    assert not [k for k in child if k.startswith(("PYTHONPATH", "PYTHONHOME", "HF_TOKEN"))]
    assert json.dumps(child).count("sk-new") == 1 and os.sep in child["HOME"]


@pytest.mark.parametrize("name", ["PYTHONPATH", "PYTHONSTARTUP", "LD_PRELOAD", "LD_LIBRARY_PATH"])
def test_root_runs_no_code_the_runs_environment_chooses(name, monkeypatch, tmp_path):
    """Round seven (issue 55): the resolution run without a sandbox and the model fetch's
    worker are Pythons run as root with the run's environment: a PYTHONPATH or an LD_PRELOAD in
    it ran another account's code as root. Both now leave such variables out; the sandboxed
    resolution gets its environment from the unit's env file alone."""
    monkeypatch.setenv(name, str(tmp_path / "evil"))
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy:3128")  # the run's other settings stay
    resolve = load_module("sglang_resolve")
    with contextlib.ExitStack() as stack:
        _argv, env, how = resolve._probe_command({}, sys.executable, {"HF_HUB_OFFLINE": "1"}, stack)
    assert not how["used"] and name not in env and env["HF_HUB_OFFLINE"] == "1"
    assert env["HTTPS_PROXY"] == "http://proxy:3128"
    fetch = load_module("sglang_model_fetch")
    seen = {}

    class Popen:
        def __init__(self, argv, env, **kwargs):
            seen.update(env)
            self.pid = 1

    monkeypatch.setattr(fetch.subprocess, "Popen", Popen)
    fetch.start({"repo": "org/model", "revision": "main", "local_dir": str(tmp_path / "model"),
                 "allow_patterns": [], "offline": True, "min_free_gb": 0, "token": "",
                 "venv": str(tmp_path / "venv")}, str(tmp_path / "work"))
    assert seen and name not in seen and seen["HTTPS_PROXY"] == "http://proxy:3128"
