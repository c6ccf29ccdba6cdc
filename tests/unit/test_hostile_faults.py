"""Hostile input and faults, round three (issue 22): each case through a module's main() (or
the filter or function the role calls), as a user or a broken host would present it.

Classes: package lines of a recorded set, secrets on a command line, bytes and numbers from
nvidia-smi, GPU descriptions out of range, deadlines of the smoke test's side reads, fetch
numbers / tokens / worker state, model files that are not regular files; and a scan that
fails when a module calls a subprocess without a timeout.
"""

import ast
import json
import os
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support import ROOT, load_module, run_main
from support.hostile import reply, serve, trickle

MODULES = ROOT / "plugins" / "modules"


def main_of(name, args, check_mode=False):
    text, code = run_main(MODULES / f"{name}.py", args, check_mode)
    assert "Traceback" not in text, text
    result = json.loads(text)
    if result.get("failed"):
        assert isinstance(result.get("msg"), str) and len(result["msg"]) >= 10, result
    return result, code


def fake_smi(tmp_path, data, name="nvidia-smi"):
    """An nvidia-smi that prints `data` (bytes) whatever it is asked."""
    out = tmp_path / f"{name}.out"
    out.write_bytes(data)
    smi = tmp_path / name
    smi.write_text(f"#!/bin/sh\ncat '{out}'\n")
    smi.chmod(0o755)
    return str(smi)


def fake_venv(tmp_path):
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True, exist_ok=True)
    if not (venv / "bin" / "python").exists():
        (venv / "bin" / "python").symlink_to(sys.executable)
    return venv


# --- 1. an env built again from a release's record: package lines ---------------------------

@pytest.fixture(name="base_dir")
def _base_dir(tmp_path):
    """A base dir with an env that serves (what a rebuild must never touch) and its link."""
    base = tmp_path / "base"
    env = base / "envs" / "00000000000000aa"
    (env / "bin").mkdir(parents=True)
    (env / ".sglang-env.json").write_text('{"digest": "sha256:0"}')
    (tmp_path / "ml-env").symlink_to(env)
    return base


def tree(base):
    return sorted(str(p.relative_to(base)) for p in base.rglob("*"))


HOSTILE_LINES = [
    "--index-url=http://127.0.0.1:9/simple", "-i http://127.0.0.1:9/simple",
    "--extra-index-url http://127.0.0.1:9/", "-e /tmp/evil", "/tmp/evil", "./evil",
    "file:///tmp/evil", "evil @ file:///tmp/evil", "evil @ https://127.0.0.1:9/e.whl",
    "-r /etc/passwd", "-c /tmp/c.txt", "evil==1.0 --hash=sha256:00", "evil==1.0; python_version>'3'",
    "evil[extra]==1.0", "evil>=1.0", "evil===1.0", "evil==1.*", "evil==1.0\nother==2",
    "ev il==1.0", "-evil==1.0", "evil==", "==1.0", "evil==1.0\0",
    "http://127.0.0.1:9/evil-1.0.tar.gz", "evil==1.0 #", "../evil.whl",
]


@pytest.mark.parametrize("line", HOSTILE_LINES)
def test_a_recorded_set_with_a_line_that_is_not_name_and_version_is_refused(line, base_dir):
    before = tree(base_dir)
    for check_mode in (True, False):
        for env in ("0123456789abcdef", None):  # a release's env, one made before envs
            result, _ = main_of("sglang_env", {
                "base_dir": str(base_dir), "env": env, "python": sys.executable,
                "packages": ["sglang==0.5.23", line], "installer": "pip"}, check_mode)
            assert result.get("failed"), result
            assert "name==version" in result["msg"] and repr(line)[:20] in result["msg"]
            assert "nothing was installed or removed" in result["msg"]
    assert tree(base_dir) == before


@pytest.mark.parametrize("packages, words", [
    ([], "no package"), (["# The ml-env's packages"], "no package"),
    (["pip==24.0", "numpy==2.0.0"], "no sglang"),
    (["sglang==0.5.23", "SGLang==0.5.22"], "twice"),
])
def test_a_recorded_set_that_is_empty_or_lacks_sglang_is_refused(packages, words, base_dir):
    before = tree(base_dir)
    for check_mode in (True, False):
        result, _ = main_of("sglang_env", {
            "base_dir": str(base_dir), "env": "0123456789abcdef", "python": sys.executable,
            "packages": packages, "installer": "pip"}, check_mode)
        assert result.get("failed") and words in result["msg"], result
    assert tree(base_dir) == before


@settings(max_examples=60, deadline=None)
@given(line=st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=40))
def test_the_package_line_validator_takes_only_name_and_exact_version(line):
    from ansible_collections.sglang.deploy.plugins.module_utils.sglang_packages import (
        PackageSetError, package_line)
    try:
        name, version = package_line(line)
    except PackageSetError as exc:
        assert repr(line)[:20] in str(exc)
        return
    assert line.strip() == f"{name}=={version}"
    assert not set(line.strip()) & set(" \t;@[]<>!~*,/\\:\0#'\"")
    assert not version.lower().endswith((".zip", ".whl", ".gz", ".tgz", ".tar", ".xz", ".bz2"))


@pytest.mark.parametrize("line", ["x==1.0+evil.tar.gz", "x==1.0+evil.whl", "x==1.0+a.ZIP",
                                  "x==1.0+evil.tgz", "x==1.0+evil.tar"])
def test_a_version_whose_local_label_ends_like_an_archive_is_refused(line):
    from ansible_collections.sglang.deploy.plugins.module_utils.sglang_packages import (
        PackageSetError, package_line)
    with pytest.raises(PackageSetError, match="ends like an archive.*working directory"):
        package_line(line)


def release_with_packages(tmp_path, lines):
    base = tmp_path / "base"
    args = {"base_dir": str(base), "stamp": "20261101T000000Z",
            "files": [{"name": "config.yaml", "content": "x: 1\n"}]}
    made, _ = main_of("sglang_release", args)
    recorded, _ = main_of("sglang_release", {"base_dir": str(base), "state": "packages",
                                             "release": made["release"], "packages": lines})
    return base, made["release"], recorded


def test_packages_txt_is_covered_by_the_manifest_hash(tmp_path):
    lines = ["pip==24.0", "sglang==0.5.23"]
    base, release, recorded = release_with_packages(tmp_path, lines)
    assert recorded["changed"] and not recorded.get("failed"), recorded
    path = base / "releases" / release / "packages.txt"
    manifest = json.loads((base / "releases" / release / "manifest.json").read_text())
    assert manifest["packages_sha256"]
    read, _ = main_of("sglang_release", {"base_dir": str(base), "state": "packages",
                                         "release": release}, check_mode=True)
    assert read["packages"] == lines and read["recorded"] and not read["changed"]
    # An index injected after the fact: the hash no longer matches, the set is refused.
    path.write_text(path.read_text() + "--index-url=http://127.0.0.1:9/simple\n")
    read, _ = main_of("sglang_release", {"base_dir": str(base), "state": "packages",
                                         "release": release})
    assert read["failed"] and "packages.txt" in read["msg"] and "sha256" in read["msg"]
    path.unlink()
    read, _ = main_of("sglang_release", {"base_dir": str(base), "state": "packages",
                                         "release": release})
    assert read["failed"] and "missing" in read["msg"]


def test_a_set_with_a_hostile_line_is_never_recorded(tmp_path):
    _, _, recorded = release_with_packages(tmp_path, ["sglang==0.5.23", "--index-url=http://x/"])
    assert recorded["failed"] and "name==version" in recorded["msg"]


def test_a_release_made_before_sets_were_hashed_is_read_through_the_validator(tmp_path):
    base, release, _ = release_with_packages(tmp_path, ["sglang==0.5.23"])
    folder = base / "releases" / release
    manifest = json.loads((folder / "manifest.json").read_text())
    del manifest["packages_sha256"]
    (folder / "manifest.json").write_text(json.dumps(manifest))
    (folder / "packages.txt").write_text("# old\nsglang==0.5.22\npip==24.0\n")
    read, _ = main_of("sglang_release", {"base_dir": str(base), "state": "packages",
                                         "release": release})
    assert read["packages"] == ["sglang==0.5.22", "pip==24.0"] and not read["verified"]
    (folder / "packages.txt").write_text("# old\n-e /tmp/evil\nsglang==0.5.22\n")
    read, _ = main_of("sglang_release", {"base_dir": str(base), "state": "packages",
                                         "release": release})
    assert read["failed"] and "'-e /tmp/evil'" in read["msg"]
    (folder / "packages.txt").unlink()
    read, _ = main_of("sglang_release", {"base_dir": str(base), "state": "packages",
                                         "release": release})
    assert not read.get("failed") and read["recorded"] is False and read["packages"] == []


# --- 2. resolution sandbox: no secret on a command line ------------------------------------

def test_the_sandbox_without_an_env_file_passes_the_environment_in_a_private_file(
        tmp_path, monkeypatch):
    resolve = load_module("sglang_resolve")
    seen = {}

    def run(argv, **kwargs):
        seen["argv"] = list(argv)
        props = [argv[i + 1] for i, a in enumerate(argv) if a == "-p"]
        files = [p.split("=", 1)[1] for p in props if p.startswith("EnvironmentFile=")]
        seen["files"] = files
        for name in files:
            info = os.stat(name)
            seen["mode"] = stat.S_IMODE(info.st_mode)
            seen["text"] = Path(name).read_text()
        return subprocess.CompletedProcess(argv, 0, stdout="{}", stderr="")

    monkeypatch.setattr(resolve.sandboxes, "refusal", lambda sandbox: None)
    monkeypatch.setattr(resolve.subprocess, "run", run)
    secret = "hf_Secret token with spaces"
    out = resolve.resolve({"venv": str(fake_venv(tmp_path)), "args": {},
                           "gpus": {"count": 1, "name": "x", "memory_mib": 1,
                                    "compute_capability": "8.6"},
                           "sandbox": {"user": "root", "env_file": str(tmp_path / "none.env")},
                           "env": {"HF_TOKEN": secret, "QUOTE": 'a"b\\c$d'}})
    assert out["sandbox"]["used"], out
    assert not any("hf_Secret" in a for a in seen["argv"])
    assert len(seen["files"]) == 1 and seen["mode"] == 0o600
    assert f'HF_TOKEN="{secret}"' in seen["text"] and 'QUOTE="a\\"b\\\\c$d"' in seen["text"]
    assert not os.path.exists(seen["files"][0]), "the environment file was left behind"


def test_an_environment_that_no_env_file_can_hold_is_refused_without_running(tmp_path,
                                                                              monkeypatch):
    resolve = load_module("sglang_resolve")
    monkeypatch.setattr(resolve.sandboxes, "refusal", lambda sandbox: None)
    monkeypatch.setattr(resolve.subprocess, "run", lambda *a, **k: pytest.fail("ran"))
    for env in ({"A": "x\ny"}, {"A B": "x"}, {"A": "x\0"}):
        out = resolve.resolve({"venv": str(fake_venv(tmp_path)), "args": {},
                               "gpus": {"count": 1, "name": "x", "memory_mib": 1,
                                        "compute_capability": "8.6"},
                               "sandbox": {"user": "root"}, "env": env})
        assert not out["ran"] and "env" in out["reason"], out


# --- 3. GPU facts: bytes and numbers from nvidia-smi ---------------------------------------

SMI_OUTPUTS = {
    "inf memory": b"0, NVIDIA H100, inf, 9.0\n",
    "nan memory": b"0, NVIDIA H100, nan, 9.0\n",
    "huge memory": b"0, NVIDIA H100, " + b"9" * 400 + b", 9.0\n",
    "negative memory": b"0, NVIDIA H100, -5, 9.0\n",
    "not UTF-8": b"0, NVIDIA \xff\xfe H100, 81559, 9.0\n",
    "not UTF-8 driver": b"\xff\xfe550.54\n",
    "huge index": b"9" * 5000 + b", NVIDIA H100, 81559, 9.0\n",
    "NUL": b"0, NVIDIA\0H100, 81559, 9.0\n",
}


@pytest.mark.parametrize("case", sorted(SMI_OUTPUTS))
def test_resolve_reads_a_hostile_nvidia_smi_without_a_traceback(case, tmp_path):
    smi = fake_smi(tmp_path, SMI_OUTPUTS[case])
    result, _ = main_of("sglang_resolve", {"venv": str(fake_venv(tmp_path)), "args": {},
                                           "nvidia_smi": smi, "timeout": 5})
    if not result["ran"]:
        assert result["reason"], result
    gpus = result.get("gpus") or {}
    if gpus:
        assert 1 <= gpus["memory_mib"] < 10 ** 7 and 1 <= gpus["count"] <= 256


@pytest.mark.parametrize("case", sorted(SMI_OUTPUTS))
def test_host_prereqs_reads_a_hostile_nvidia_smi_without_a_traceback(case, tmp_path):
    smi = fake_smi(tmp_path, SMI_OUTPUTS[case])
    result, _ = main_of("sglang_host_prereqs", {"venv": str(tmp_path / "none"),
                                                "nvidia_smi": smi,
                                                "cuda_min_driver": {"12.4": "550.54"}})
    assert not result.get("failed"), result
    driver = result["facts"]["driver"]
    assert driver is None or all(part.isdigit() for part in driver.split(".")), driver


@pytest.mark.parametrize("case", sorted(SMI_OUTPUTS))
def test_facts_read_a_hostile_nvidia_smi_without_a_traceback(case, tmp_path):
    smi = fake_smi(tmp_path, SMI_OUTPUTS[case])
    result, _ = main_of("sglang_facts", {"venv": str(tmp_path / "none"), "nvidia_smi": smi})
    assert not result.get("failed"), result
    for device in result["gpus"]["devices"]:
        assert device["memory_mib"] is None or 1 <= device["memory_mib"] < 10 ** 7


# --- 4. GPU descriptions: a count out of range ---------------------------------------------

@pytest.mark.parametrize("key, value", [("count", 10 ** 9), ("count", 257), ("memory_mib", 10 ** 12),
                                        ("sm_count", 10 ** 9), ("count", 2 ** 70)])
def test_a_gpu_description_out_of_range_is_refused_by_name(key, value, tmp_path):
    gpus = {"count": 2, "name": "x", "memory_mib": 1000, "compute_capability": "8.6", key: value}
    started = time.monotonic()
    result, _ = main_of("sglang_resolve", {"venv": str(fake_venv(tmp_path)), "args": {},
                                           "gpus": gpus, "timeout": 5})
    assert result.get("failed") and f"sglang_gpus.{key}" in result["msg"], result
    from ansible.errors import AnsibleFilterError
    from ansible_collections.sglang.deploy.plugins.filter.sglang_preflight import described_gpus
    with pytest.raises(AnsibleFilterError, match=f"sglang_gpus.{key}"):
        described_gpus(gpus)
    assert time.monotonic() - started < 5


# --- 5. deadlines: the smoke test's side reads ---------------------------------------------

def test_the_smoke_timeout_bounds_the_server_info_and_metrics_reads():
    def answer(conn, request, stop):
        path = request.split(b" ", 2)[1]
        if path.startswith((b"/server_info", b"/get_server_info", b"/metrics")):
            return trickle(0.2)(conn, request, stop)
        body = (b'data: {"choices": [{"text": "x"}]}\n\ndata: {"choices": [], "usage": '
                b'{"completion_tokens": 1}}\n\ndata: [DONE]\n\n')
        return reply(200, body, (b"Content-Type: text/event-stream",))(conn, request, stop)

    with serve(answer) as url:
        started = time.monotonic()
        result, _ = main_of("sglang_smoke", {"url": url, "model": "m", "concurrency": [1],
                                             "requests_per_level": 1, "warmup": 0,
                                             "timeout": 1})
        elapsed = time.monotonic() - started
    assert not result.get("failed"), result
    # Two /server_info (+ /get_server_info) and two /metrics reads, 1 s each at most.
    assert elapsed < 12, f"the side reads took {elapsed:.0f} s with a 1 s timeout"


# --- 6. fetch: numbers, tokens, the worker's state -----------------------------------------

COMMIT = "0123456789abcdef0123456789abcdef01234567"


@pytest.mark.parametrize("value", [float("nan"), float("inf"), -1, 1e30])
def test_the_fetch_plan_refuses_min_free_gb_that_is_not_a_sane_number(value):
    from ansible.errors import AnsibleFilterError
    from ansible_collections.sglang.deploy.plugins.filter.sglang_inputs import sglang_fetch_plan
    for key in ("min_free_gb", "timeout"):
        with pytest.raises(AnsibleFilterError, match=f"sglang_model_fetch.{key}"):
            sglang_fetch_plan({"repo": "o/m", "revision": COMMIT, key: value}, "/srv/models/m")


def fetch_args(tmp_path, **extra):
    return {"repo": "owner/model", "revision": COMMIT, "local_dir": str(tmp_path / "model"),
            "venv": str(fake_venv(tmp_path)), "state_dir": str(tmp_path / "state"),
            "min_free_gb": 0, "timeout": 5, **extra}


@pytest.mark.parametrize("extra, words", [
    ({"min_free_gb": float("nan")}, "min_free_gb"), ({"min_free_gb": float("inf")}, "min_free_gb"),
    ({"min_free_gb": -1}, "min_free_gb"), ({"token": "hf_abc\0def"}, "token"),
    ({"token": "hf_abc\ndef"}, "token"), ({"slice": float("nan")}, "slice"),
])
def test_fetch_arguments_that_cannot_be_used_are_refused_by_name(extra, words, tmp_path):
    result, _ = main_of("sglang_model_fetch", fetch_args(tmp_path, **extra))
    assert result.get("failed") and words in result["msg"], result
    assert "hf_abc" not in json.dumps(result)
    assert not (tmp_path / "state").exists()


@pytest.mark.parametrize("state", [
    {"phase": "downloading", "sha": None, "files": None, "total_bytes": None},
    {"phase": "downloading", "sha": 5, "files": "x", "total_bytes": "many", "need_bytes": []},
    {"phase": "done", "sha": None, "files": None, "total_bytes": None},
    {"phase": "failed", "error": None},
    {"phase": ["x"]},
])
def test_a_worker_state_of_the_wrong_shape_is_read_without_a_traceback(state, tmp_path):
    fetch = load_module("sglang_model_fetch")
    args = fetch_args(tmp_path)
    work = Path(fetch.work_dir(dict(args, allow_patterns=[])))
    work.mkdir(parents=True)
    (work / "state.json").write_text(json.dumps(state))
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "config.json").write_text('{"architectures": ["X"]}')
    result, _ = main_of("sglang_model_fetch", dict(args, resume={"phase": "starting"}))
    assert result.get("failed") or result.get("fetched"), result
    if result.get("fetched"):
        assert result["sha"] == COMMIT


def test_the_worker_pins_the_asked_revision_when_the_hub_omits_the_sha(monkeypatch):
    """A hub or mirror that omits the sha: the worker fetches the pinned revision, never the
    default branch (snapshot_download(revision=None))."""
    from types import SimpleNamespace
    monkeypatch.syspath_prepend(str(ROOT / "tests" / "fakes" / "hub"))
    import huggingface_hub
    worker = load_module_util("sglang_fetch_worker")
    for sha in (None, "", 5):
        monkeypatch.setattr(huggingface_hub.HfApi, "model_info", lambda self, *a, **k: SimpleNamespace(
            sha=sha, siblings=[SimpleNamespace(rfilename="config.json", size=2)]))
        files, pinned = worker.plan({"repo": "o/m", "revision": COMMIT, "allow_patterns": []}, "")
        assert pinned == COMMIT and files == {"config.json": 2}
    monkeypatch.setattr(huggingface_hub.HfApi, "model_info", lambda self, *a, **k: SimpleNamespace(
        sha="f" * 40, siblings=[SimpleNamespace(rfilename="config.json", size=2)]))
    with pytest.raises(RuntimeError, match="answered commit"):
        worker.plan({"repo": "o/m", "revision": COMMIT, "allow_patterns": []}, "")


def load_module_util(name):
    import importlib
    return importlib.import_module(f"ansible_collections.sglang.deploy.plugins.module_utils.{name}")


# --- 7. model config: regular files only, with a size cap ----------------------------------

def _config_dir(tmp_path, kind):
    model = tmp_path / "model"
    model.mkdir()
    config = model / "config.json"
    if kind == "fifo":
        os.mkfifo(config)
    elif kind == "dev-zero":
        config.symlink_to("/dev/zero")
    elif kind == "huge":
        with open(config, "wb") as handle:
            handle.write(b'{"x": "' + b"y" * (20 << 20) + b'"}')
    elif kind == "directory":
        config.mkdir()
    elif kind == "not UTF-8":
        config.write_bytes(b'{"architectures": ["\xff"]}')
    return model


@pytest.mark.parametrize("kind", ["fifo", "dev-zero", "huge", "directory", "not UTF-8"])
def test_facts_read_only_a_regular_config_json_of_sane_size(kind, tmp_path):
    model = _config_dir(tmp_path, kind)
    box = {}

    def call():
        box["result"] = main_of("sglang_facts", {"venv": str(tmp_path / "none"),
                                                 "model_path": str(model),
                                                 "nvidia_smi": "/nonexistent"})[0]
    thread = threading.Thread(target=call, daemon=True)
    thread.start()
    thread.join(20)
    if kind == "fifo" and thread.is_alive():
        # Unblock the reader so the test run can end.
        with open(model / "config.json", "w", encoding="utf-8"):
            pass
        thread.join(5)
        pytest.fail("sglang_facts hung on a FIFO config.json")
    assert not thread.is_alive(), "sglang_facts never answered"
    result = box["result"]
    if kind == "not UTF-8":
        # Decoded leniently: the byte is replaced, the verdict refuses the architecture.
        assert result["model"]["architectures"] == ["\ufffd"], result
        return
    assert result.get("failed") and "config.json" in result["msg"], result


# --- 8. every subprocess a module runs has a timeout ---------------------------------------

SUBPROCESS_CALLS = {"run", "check_output", "check_call", "call"}
# Call sites allowed without a timeout, each with why.
NO_TIMEOUT_ALLOWED = {
    # The fetch worker is started detached (start_new_session) on purpose: it outlives the
    # task, which watches it with its own deadline (sglang_model_fetch.timeout).
    ("plugins/modules/sglang_model_fetch.py", "Popen"),
}
# In the hands of the issue-22 systemd helper (one module_util for every systemctl and
# journalctl call): strict xfail, so that the exception goes away the moment they have one.


def _calls_without_timeout(path):
    tree = ast.parse(path.read_text(), str(path))
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
        owner = func.value.id if isinstance(func, ast.Attribute) and \
            isinstance(func.value, ast.Name) else ""
        keywords = {k.arg for k in node.keywords}
        if owner == "subprocess" and name in SUBPROCESS_CALLS | {"Popen"}:
            kind = name
        elif name == "run_command":
            kind = "run_command"
        elif name in ("communicate", "wait") and owner != "subprocess" and owner:
            kind = name
        else:
            continue
        if "timeout" in keywords or None in keywords:  # timeout=..., or **kwargs that hold one
            continue
        if kind == "Popen":
            # A Popen is bounded where it is waited for: communicate(timeout=) / wait(timeout=).
            kind = "Popen"
        found.append((kind, node.lineno))
    return found


SOURCES = sorted(p for d in ("modules", "module_utils", "action", "filter", "plugin_utils")
                 for p in (ROOT / "plugins" / d).glob("*.py"))


@pytest.mark.parametrize("path", SOURCES, ids=[p.name for p in SOURCES])
def test_every_subprocess_a_module_runs_has_a_timeout(path):
    rel = str(path.relative_to(ROOT))
    found = [(kind, line) for kind, line in _calls_without_timeout(path)
             if (rel, kind) not in NO_TIMEOUT_ALLOWED]
    assert not found, f"{rel}: subprocess calls without a timeout at {found}"


def test_the_timeout_scan_can_fail(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("import subprocess\nsubprocess.run(['x'])\nm.run_command(['y'])\n"
                   "proc.communicate()\nsubprocess.run(['z'], timeout=3)\n")
    assert [k for k, _ in _calls_without_timeout(bad)] == ["run", "run_command", "communicate"]


# --- 9. more of the same kind: the router's worker module and the progress action ----------

@pytest.mark.parametrize("name", ["timeout", "drain_timeout"])
@pytest.mark.parametrize("value", [float("nan"), float("inf"), -1.0, 1e12])
def test_router_worker_deadlines_that_never_pass_are_refused(name, value):
    with serve(reply(200, b'{"workers": []}')) as url:
        started = time.monotonic()
        result, _ = main_of("sglang_router_worker", {
            "router_url": url, "worker": "http://10.0.0.1:30000", "workers": ["http://x:1"],
            "state": "ready", name: value})
    assert result.get("failed") and name in result["msg"], result
    assert time.monotonic() - started < 5


def test_router_worker_ids_from_the_router_stay_one_path_segment():
    seen = []

    def answer(conn, request, stop):
        line = request.split(b"\r\n", 1)[0]
        seen.append(line)
        if line.startswith(b"GET"):
            body = json.dumps({"workers": [{"id": "../../admin?x=1", "url": "http://w:1",
                                            "is_healthy": True}] if len(seen) < 3 else []})
            return reply(200, body.encode())(conn, request, stop)
        return reply(204)(conn, request, stop)

    with serve(answer) as url:
        result, _ = main_of("sglang_router_worker", {
            "router_url": url, "worker": "http://w:1", "state": "absent", "timeout": 3,
            "drain_timeout": 1})
    deletes = [line for line in seen if line.startswith(b"DELETE")]
    assert deletes == [b"DELETE /workers/..%2F..%2Fadmin%3Fx%3D1 HTTP/1.1"], seen
    assert not result.get("failed"), result


@pytest.mark.parametrize("worker_id", [None, "", True, ["x"]])
def test_router_worker_without_a_usable_id_is_refused(worker_id):
    def answer(conn, request, stop):
        body = json.dumps({"workers": [{"id": worker_id, "url": "http://w:1",
                                        "is_healthy": True}]})
        return reply(200, body.encode())(conn, request, stop)

    with serve(answer) as url:
        result, _ = main_of("sglang_router_worker", {
            "router_url": url, "worker": "http://w:1", "state": "absent", "timeout": 2})
    assert result.get("failed") and "without an id" in result["msg"], result


def test_a_drain_over_a_gauge_of_nan_is_unknown_not_endless():
    from ansible_collections.sglang.deploy.plugins.module_utils.sglang_server import requests_in_flight
    with serve(reply(200, b"sglang:num_running_reqs{x=\"1\"} NaN\n")) as url:
        assert requests_in_flight(url) is None
    with serve(reply(200, b"sglang:num_running_reqs 2\nsglang:num_running_reqs 1.5\n")) as url:
        assert requests_in_flight(url) == 3.5


def _progress_action():
    import importlib.util
    spec = importlib.util.spec_from_file_location(
        "sglang_progress_action_hostile", ROOT / "plugins" / "action" / "sglang_progress.py")
    action = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(action)
    return action


@pytest.mark.parametrize("options", [{"slice": float("nan")}, {"slice": float("inf")},
                                     {"heartbeat": float("nan")}, {"slice": "nan"}])
def test_progress_action_refuses_slices_that_never_end(options, monkeypatch):
    from ansible.errors import AnsibleActionFail
    action = _progress_action()
    plugin = action.ActionModule.__new__(action.ActionModule)
    plugin._task = type("Task", (), {"args": {"module": "m", "args": {}, **options},
                                     "async_val": 0, "check_mode": False, "diff": False})()
    monkeypatch.setattr(action.ActionBase, "run", lambda self, tmp=None, task_vars=None: {})
    plugin._execute_module = lambda **kwargs: pytest.fail("the module ran")
    with pytest.raises(AnsibleActionFail, match="slice"):
        plugin.run(task_vars={})


@given(line=st.text(max_size=60))
def test_progress_lines_reach_the_terminal_without_control_characters(line):
    action = _progress_action()
    shown = action.shown_text(line + "\x1b[2J\r\n\x9b31m")
    assert not any(ord(c) < 32 or 0x7f <= ord(c) <= 0x9f for c in shown)


@pytest.mark.parametrize("name", ["wheelhouse", "python", "nvidia_smi", "venv"])
def test_host_prereqs_refuses_a_nul_in_a_path_by_name(name, tmp_path):
    """Found by the harness (test_hostile.py) while this round ran: glob raised ValueError."""
    args = {"venv": str(tmp_path), "nvidia_smi": "/nonexistent", name: "a\0b"}
    result, _ = main_of("sglang_host_prereqs", args)
    assert result.get("failed") and name in result["msg"], result


@pytest.mark.parametrize("metrics, drained, words", [
    (reply(200, b"sglang:num_running_reqs 0\n"), True, "no request running"),
    (reply(200, b"sglang:num_running_reqs{x=\"1\"} NaN\n"), None, "gives no running count"),
    (reply(401, b"{}"), None, "gives no running count"),
    (reply(404, b"no metrics"), None, "gives no running count"),
    (reply(200, b"sglang:num_running_reqs 3\n"), False, "3 requests running"),
])
def test_a_drain_without_a_running_count_is_unknown_never_drained(metrics, drained, words):
    worker = load_module("sglang_router_worker")
    with serve(metrics) as url:
        result = worker.drain(url, drain_timeout=1.5)
    assert result["drained"] is drained and words in result["drain_reason"], result
