"""Every module through main(), with arguments a playbook would pass (the set_module_args
pattern): what each returns, changes and refuses. Hostile arguments: test_hostile.py."""

import json
import os
import socket
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from support import free_port
from support.modules import run_module

# Modules with code (sglang_progress.py only documents its action plugin).
MODULES = sorted(p.stem for p in Path(__file__).resolve().parents[2].glob("plugins/modules/*.py")
                 if "def main(" in p.read_text())


def run(name, args, check_mode=False):
    return run_module(name, args, check_mode)


def fake_bin(tmp_path, monkeypatch, **scripts):
    """Shell scripts on PATH (systemctl, journalctl...) standing in for the host's tools."""
    bindir = tmp_path / "bin"
    bindir.mkdir(exist_ok=True)
    for name, body in scripts.items():
        (bindir / name).write_text("#!/bin/sh\n" + body + "\n")
        (bindir / name).chmod(0o755)
    monkeypatch.setenv("PATH", f"{bindir}:{os.environ['PATH']}")
    return bindir


def fake_venv(tmp_path, help_text):
    """A venv whose python prints `help_text` for any --help."""
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    python = venv / "bin" / "python"
    python.write_text(f"#!/bin/sh\ncat <<'EOF'\n{help_text}\nEOF\n")
    python.chmod(0o755)
    return venv


def test_args_check_names_an_unknown_argument_with_a_suggestion(tmp_path):
    venv = fake_venv(tmp_path, "usage: launch_server [-h] [--model-path MODEL_PATH] "
                               "[--tp-size TP_SIZE]\n  --model-path MODEL_PATH\n  --tp-size TP_SIZE")
    result, code = run("sglang_args_check", {"venv": str(venv),
                                             "args": {"model-path": "/m", "tp-sizee": 2}})
    assert code == 0 and result["checked"], result
    assert [u["name"] for u in result["unknown"]] == ["tp-sizee"]
    assert "tp-size" in result["unknown"][0]["suggestions"]


def test_args_check_without_a_venv_says_why_it_did_not_run(tmp_path):
    result, code = run("sglang_args_check", {"venv": str(tmp_path / "none"), "args": {}})
    assert code == 0 and result["checked"] is False and result["reason"]


def test_facts_reads_the_model_and_reports_no_gpu(tmp_path):
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"architectures": ["Qwen3ForCausalLM"],
                                                   "model_type": "qwen3"}))
    (model / "model.safetensors").write_bytes(b"\0" * 1000)
    result, code = run("sglang_facts", {"venv": str(tmp_path / "none"), "model_path": str(model),
                                        "nvidia_smi": "/nonexistent/nvidia-smi"})
    assert code == 0, result
    assert result["model"]["architectures"] == ["Qwen3ForCausalLM"]
    assert result["model"]["model_type"] == "qwen3"
    assert result["gpus"]["present"] is False and result["gpus"]["count"] == 0
    assert result["sglang_version"] is None


def test_host_prereqs_refuses_too_little_disk(tmp_path):
    result, code = run("sglang_host_prereqs", {
        "venv": str(tmp_path / "venv"), "nvidia_smi": "/nonexistent/nvidia-smi",
        "disk": [{"path": str(tmp_path), "gb": 10 ** 6, "what": "the ml-env"}]})
    assert code == 0, result
    assert any("the ml-env" in f for f in result["failures"]), result["failures"]


def test_host_prereqs_reads_the_packages_and_needs_install_space_only_for_a_missing_pin(
        small_venv, tmp_path):
    def prereqs(pin):
        return run("sglang_host_prereqs", {
            "venv": str(small_venv), "nvidia_smi": "/nonexistent/nvidia-smi",
            "requirements": [pin, "no-such-package-here==1.0"],
            "disk": [{"path": str(tmp_path), "gb": 10 ** 6, "what": "the ml-env's install",
                      "unless_installed": pin}]})

    installed, code = prereqs("demo-pkg==1.2")
    assert code == 0, installed
    assert installed["packages"]["installed"]["demo-pkg"] == "1.2"
    assert installed["packages"]["missing"] == ["no-such-package-here==1.0"]
    assert installed["facts"]["disk"][0]["gb"] == 0 and installed["failures"] == []
    missing, code = prereqs("demo-pkg==2.0")
    assert code == 0, missing
    assert missing["packages"]["missing"] == ["demo-pkg==2.0", "no-such-package-here==1.0"]
    assert any("the ml-env's install needs 1000000" in f for f in missing["failures"]), missing


def test_host_prereqs_refuses_a_disk_entry_bound_to_an_unknown_requirement(tmp_path):
    result, code = run("sglang_host_prereqs", {
        "venv": str(tmp_path), "requirements": ["sglang==0.5.23"],
        "disk": [{"path": str(tmp_path), "gb": 1, "unless_installed": "sglang==0.5.22"}]})
    assert code == 1 and "sglang==0.5.22 is not one of requirements" in result["msg"], result


def test_journal_quotes_the_lines_of_this_invocation(tmp_path, monkeypatch):
    fake_bin(tmp_path, monkeypatch,
             systemctl="echo InvocationID=abc123",
             journalctl="echo 'Capture cuda graph begin. This can take up to several minutes.'")
    result, code = run("sglang_journal", {"unit": "sglang.service"})
    assert code == 0, result
    assert result["invocation"] == "abc123"
    assert result["evidence"]["decode_graph_captured"]["count"] == 1


def test_lock_is_taken_refused_to_another_run_and_released(tmp_path):
    base = str(tmp_path)
    taken, code = run("sglang_lock", {"base_dir": base, "run_id": "run-1"})
    assert code == 0 and taken["changed"] and taken["holder"]["run_id"] == "run-1"
    refused, code = run("sglang_lock", {"base_dir": base, "run_id": "run-2"})
    assert code == 1 and refused["failed"] and "run-1" in refused["msg"]
    released, code = run("sglang_lock", {"base_dir": base, "run_id": "run-1", "state": "absent"})
    assert code == 0 and released["changed"]
    assert not (tmp_path / ".deploy.lock").exists()


@pytest.fixture(scope="module")
def small_venv(tmp_path_factory):
    """A real venv (with pip, as venv makes it) holding one made-up distribution, demo-pkg 1.2."""
    venv = tmp_path_factory.mktemp("venv") / "env"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    site = next(venv.glob("lib/python3*/site-packages"))
    dist = site / "demo_pkg-1.2.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: demo-pkg\nVersion: 1.2\n")
    return venv


def test_model_fetch_without_the_ml_env_says_which_variable(tmp_path):
    result, code = run("sglang_model_fetch", {
        "repo": "Qwen/Qwen3.6-27B", "revision": "0" * 40, "local_dir": str(tmp_path / "m"),
        "venv": str(tmp_path / "none"), "state_dir": str(tmp_path / "state"), "offline": True})
    assert code == 1 and result["failed"] and "sglang_venv" in result["msg"], result
    assert result["pending"] is False


def test_pip_check_reads_installed_and_missing(small_venv):
    result, code = run("sglang_pip_check", {"venv": str(small_venv), "requirements": [
        "demo-pkg==1.2", "demo-pkg>=2", "no-such-package-here==1.0"]})
    assert code == 0 and result["venv_exists"], result
    assert result["installed"]["demo-pkg"] == "1.2"
    assert result["missing"] == ["demo-pkg>=2", "no-such-package-here==1.0"]


def test_ready_answers_once_tokens_come_back(standin):
    url, _ = standin()
    result, code = run("sglang_ready", {"url": url, "timeout": 30, "max_tokens": 4})
    assert code == 0, result
    assert result["completion_tokens"] == 4 and result["model"] == "m"
    assert "server_answers" not in result  # read only when asked


def test_ready_reads_what_the_server_resolved_in_the_same_call_keys_redacted(standin):
    key, admin = "sk-" + "a1" * 16, "ad-" + "b2" * 16
    url, _ = standin(**{"api-key": key, "admin-api-key": admin, "tp-size": 2})
    result, code = run("sglang_ready", {"url": url, "timeout": 30, "api_key": key,
                                        "admin_api_key": admin, "server_info": True})
    assert code == 0, result
    answers = result["server_answers"]
    assert answers["endpoints"] == ["/server_info", "/model_info"]
    assert answers["server_info"]["tp_size"] == 2
    assert answers["server_info"]["api_key"] == "<redacted>"
    assert key not in json.dumps(result) and admin not in json.dumps(result)


def test_ready_fails_when_tokens_come_but_the_resolution_cannot_be_read():
    from sglang_standin.engine import Engine, Knobs
    from sglang_standin.server import Handler

    class NoServerInfo(Handler):
        engine = Engine({"model-path": "/nonexistent", "served-model-name": "m"},
                        Knobs(ttft_ms=5, tok_s=2000))

        def do_GET(self):  # noqa: N802 - http.server naming
            if "server_info" in self.path:
                self._json(404, {"error": "not here"})
            else:
                super().do_GET()

    httpd = ThreadingHTTPServer(("127.0.0.1", free_port()), NoServerInfo)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        result, code = run("sglang_ready", {"url": f"http://127.0.0.1:{httpd.server_address[1]}",
                                            "timeout": 30, "server_info": True})
    finally:
        httpd.shutdown()
        httpd.server_close()
    assert code == 1 and result["failed"], result
    assert "serves tokens, but what it resolved cannot be read" in result["msg"]
    assert "/server_info: HTTP 404" in result["msg"] and result["pending"] is False


def test_release_is_created_once_activated_and_listed(tmp_path):
    base = str(tmp_path)
    args = {"base_dir": base, "stamp": "20261130T101500Z",
            "files": [{"name": "config.yaml", "content": "tp-size: 2\n"}]}
    first, code = run("sglang_release", args)
    assert code == 0 and first["created"], first
    active, code = run("sglang_release", {"base_dir": base, "state": "active",
                                          "release": first["release"]})
    assert code == 0 and active["changed"]
    again, code = run("sglang_release", dict(args, stamp="20261130T111500Z"))
    assert code == 0 and not again["created"] and again["release"] == first["release"]
    info, code = run("sglang_release", {"base_dir": base, "state": "info"})
    assert code == 0 and [r["id"] for r in info["releases"]] == [first["release"]]
    assert info["current"] == first["release"]


def test_release_in_check_mode_writes_nothing(tmp_path):
    result, code = run("sglang_release", {"base_dir": str(tmp_path), "stamp": "20261130T101500Z",
                                          "files": [{"name": "config.yaml", "content": "x\n"}]},
                       check_mode=True)
    assert code == 0 and result["changed"] and result["created"]
    assert not (tmp_path / "releases").exists() or not any((tmp_path / "releases").iterdir())


def test_release_reads_the_service_in_the_same_call_against_the_release_it_plans(
        tmp_path, monkeypatch):
    """A re-run's one read: the release planned and the service's state, the process compared
    with the planned release (not with current); a service argument it cannot use is refused
    with what to change, before anything is read."""
    import hashlib

    base = str(tmp_path)
    fake_bin(tmp_path, monkeypatch, systemctl='printf "ActiveState=inactive\\nUnitFileState=disabled\\n"')
    unit = tmp_path / "sglang.service"
    unit.write_text("[Unit]\n")
    unit.chmod(0o644)
    user = __import__("pwd").getpwuid(os.getuid()).pw_name
    group = __import__("grp").getgrgid(os.getgid()).gr_name
    service = {"service": "sglang-none", "files": [
        {"path": str(unit), "sha256": hashlib.sha256(b"[Unit]\n").hexdigest(), "owner": user,
         "group": group}], "drift": None}
    args = {"base_dir": base, "stamp": "20261130T101500Z", "service": service,
            "files": [{"name": "config.yaml", "content": "tp-size: 2\n"}]}
    planned, code = run("sglang_release", args, check_mode=True)
    assert code == 0 and planned["created"], planned
    assert planned["service"]["differences"] == [
        "sglang-none: inactive, not active", "sglang-none: disabled, not enabled"]
    assert planned["service"]["serving_release"] is None
    assert planned["service"]["serving_reason"] == "the unit is not active"
    assert planned["service"]["pack_differences"] is None
    assert planned["service"]["drift_differences"] is None
    refused, code = run("sglang_release", dict(args, service=dict(service, files=[{"sha256": ""}])),
                        check_mode=True)
    assert code == 1 and refused["msg"].startswith("service: ") and "path" in refused["msg"]
    assert not (tmp_path / "releases").exists()


def test_host_prereqs_read_the_release_that_serves(tmp_path):
    """The release current names and its manifest, read with the prerequisites (a re-run renders
    its pack from it); none, or the reason a link is refused."""
    def prereqs():
        result, code = run("sglang_host_prereqs", {
            "venv": str(tmp_path / "venv"), "nvidia_smi": "/nonexistent/nvidia-smi",
            "envs_base_dir": str(tmp_path), "requirements": ["sglang==0.5.23"]})
        assert code == 0, result
        return result["serving"]

    assert prereqs() == {"release": None, "manifest": None}
    release = "20261130T101500Z-0123abcd"
    (tmp_path / "releases" / release).mkdir(parents=True)
    (tmp_path / "releases" / release / "manifest.json").write_text('{"status": "good", "seq": 3}')
    (tmp_path / "current").symlink_to(f"releases/{release}")
    assert prereqs() == {"release": release,
                         "manifest": {"status": "good", "seq": 3, "id": release}}
    (tmp_path / "current").unlink()
    (tmp_path / "current").symlink_to("/etc")
    refused = prereqs()
    assert refused["release"] is None and "not at releases/<id>" in refused["error"]


def test_resolve_without_sglang_says_it_did_not_run(tmp_path):
    result, code = run("sglang_resolve", {"venv": str(tmp_path / "none"),
                                          "args": {"model-path": "/m"}})
    assert code == 0 and result["ran"] is False and result["reason"], result


def test_server_info_redacts_the_keys(standin):
    key = "k3y-" + "s" * 28
    url, _ = standin(**{"api-key": key, "tp-size": 2})
    result, code = run("sglang_server_info", {"url": url, "api_key": key})
    assert code == 0, result
    assert result["server_info"]["tp_size"] == 2
    assert key not in json.dumps(result)


def test_smoke_measures_each_concurrency_level(standin):
    url, _ = standin()
    result, code = run("sglang_smoke", {"url": url, "concurrency": [1, 2], "requests_per_level": 2,
                                        "max_tokens": 16, "warmup": 0})
    assert code == 0, result
    assert [level["concurrency"] for level in result["levels"]] == [1, 2]
    assert result["model"] == "m"


def test_env_names_the_env_it_would_build_and_builds_nothing_in_check_mode(tmp_path):
    args = {"base_dir": str(tmp_path), "python": sys.executable, "installer": "pip",
            "requirements": ["sglang==0.5.23", "sglang-standin==0.1.0"], "no_deps": True}
    result, code = run("sglang_env", args, check_mode=True)
    assert code == 0 and result["built"] and result["changed"], result
    assert result["path"] == str(tmp_path / "envs" / result["id"]) and len(result["id"]) == 16
    assert not (tmp_path / "envs").exists()
    again, _ = run("sglang_env", args, check_mode=True)
    assert again["id"] == result["id"]
    other, _ = run("sglang_env", dict(args, requirements=["sglang==0.5.15"]), check_mode=True)
    assert other["id"] != result["id"]


class Router(BaseHTTPRequestHandler):
    """sglang-router 0.3's worker API over an in-memory list."""

    listed = []

    def _send(self, status, body):
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):  # noqa: N802
        self._send(200, {"workers": self.listed})

    def do_POST(self):  # noqa: N802
        url = json.loads(self.rfile.read(int(self.headers["Content-Length"])))["url"]
        self.listed.append({"id": f"w{len(self.listed)}", "url": url, "is_healthy": True})
        self._send(202, {"status": "accepted"})

    def log_message(self, *args):
        pass


@pytest.fixture
def router():
    handler = type("R", (Router,), {"listed": []})
    httpd = ThreadingHTTPServer(("127.0.0.1", free_port()), handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}", handler.listed
    httpd.shutdown()
    httpd.server_close()


def test_router_worker_adds_a_worker_once(router):
    url, listed = router
    worker = "http://10.0.0.11:30000"
    added, code = run("sglang_router_worker", {"router_url": url, "worker": worker,
                                               "state": "present", "timeout": 5})
    assert code == 0 and added["changed"], added
    assert added["workers"] == [{"url": worker, "healthy": True}]
    again, code = run("sglang_router_worker", {"router_url": url, "worker": worker,
                                               "state": "present", "timeout": 5})
    assert code == 0 and not again["changed"] and len(listed) == 1


def test_router_worker_ready_fails_for_a_missing_worker(router):
    url, _ = router
    result, code = run("sglang_router_worker", {"router_url": url, "timeout": 0.5,
                                                "workers": ["http://10.0.0.12:30000"]})
    assert code == 1 and "10.0.0.12" in result["msg"]


def test_tune_chart_draws_once_and_rewrites_only_on_change(tmp_path):
    finalists = [{"id": "start", "final_levels": [
        {"concurrency": 1, "tok_s_per_user": 78.2, "output_tok_s": 78.2},
        {"concurrency": 4, "tok_s_per_user": 60.0, "output_tok_s": 240.0}]}]
    dest = str(tmp_path / "tune.png")
    result, code = run("sglang_tune_chart", {"finalists": finalists, "dest": dest})
    assert code == 0 and result["changed"] and result["lines"] == 1
    assert open(dest, "rb").read()[:8] == b"\x89PNG\r\n\x1a\n"
    again, _ = run("sglang_tune_chart", {"finalists": finalists, "dest": dest})
    assert not again["changed"]
    other, _ = run("sglang_tune_chart", {"finalists": finalists * 2, "dest": dest},
                   check_mode=True)
    assert other["changed"] and other["lines"] == 2
    # Rewritten through atomic_move: the file keeps the mode it was given, no temp file stays.
    os.chmod(dest, 0o640)
    redrawn, _ = run("sglang_tune_chart", {"finalists": finalists * 2, "dest": dest})
    assert redrawn["changed"] and os.stat(dest).st_mode & 0o777 == 0o640
    assert os.listdir(tmp_path) == ["tune.png"]


@pytest.mark.parametrize("args, words", [
    ({"title": "x" * 201}, "title: 201 characters, at most 200"),
    ({"finalists": [{"id": str(i), "final_levels": []} for i in range(65)]},
     "finalists: 65, at most 64 lines"),
    ({"finalists": [{"id": "big", "final_levels": [{"concurrency": 1}] * 1001}]},
     "finalist 'big': 1001 levels, at most 1000"),
])
def test_tune_chart_refuses_more_than_a_chart_shows_before_drawing(tmp_path, args, words):
    dest = tmp_path / "tune.png"
    result, code = run("sglang_tune_chart", {"finalists": [], "dest": str(dest), **args})
    assert code == 1 and words in result["msg"], result
    assert not dest.exists()


def test_service_state_names_a_file_that_differs_by_digest(tmp_path):
    import hashlib

    unit = tmp_path / "sglang.service"
    unit.write_text("[Unit]\n")
    user = __import__("pwd").getpwuid(os.getuid()).pw_name
    group = __import__("grp").getgrgid(os.getgid()).gr_name
    want = {"path": str(unit), "owner": user, "group": group, "mode": "0644"}
    unit.chmod(0o644)
    same = hashlib.sha256(b"[Unit]\n").hexdigest()
    result, code = run("sglang_service_state", {"service": "sglang-none", "files": [
        {**want, "sha256": same}]})
    assert code == 0 and not result["changed"]
    assert not any(str(unit) in d for d in result["differences"]), result
    result, _ = run("sglang_service_state", {"service": "sglang-none", "files": [
        {**want, "sha256": "0" * 64}]})
    assert f"{unit}: content differs" in result["differences"] and not result["unchanged"]


def test_service_state_reads_the_monitoring_files_as_their_writers_would_write_them(
        tmp_path, monkeypatch):
    """A re-run skips the pack's write and the drift check's install only when the read says they
    would change nothing: the read and the writers decide by the same functions. Both written,
    nothing differs; a file edited, a unit changed, the timer stopped, a symlink: each named."""
    import hashlib

    state = {"timer": "active"}
    fake_bin(tmp_path, monkeypatch, systemctl=(
        'case "$1" in show) printf "ActiveState=%s\\nUnitFileState=enabled\\n" '
        f'"$(cat {tmp_path}/timer)";; *) echo active > {tmp_path}/timer;; esac'))
    (tmp_path / "timer").write_text("inactive\n")
    pack_args = {"dir": str(tmp_path / "pack"), "host": "gpu1", "target": "[]\n",
                 "rules": "groups: []\n", "dashboard": "{}\n"}
    drift = {"dir": str(tmp_path / "monitoring"), "out": str(tmp_path / "textfile" / "s.prom"),
             "units": [{"name": "sglang-drift.service", "content": "ExecStart=@PYTHON@ x\n"},
                       {"name": "sglang-drift.timer", "content": "[Timer]\n"}],
             "units_dir": str(tmp_path / "units"), "timer": "sglang-drift.timer"}
    (tmp_path / "units").mkdir()
    digests = {k: hashlib.sha256(pack_args[k].encode()).hexdigest()
               for k in ("target", "rules", "dashboard")}
    read_args = {"service": "sglang-none", "pack": {"dir": pack_args["dir"], "host": "gpu1",
                                                    **digests}, "drift": drift}

    def read():
        result, code = run("sglang_service_state", read_args)
        assert code == 0 and not result["changed"], result
        return result["pack_differences"], result["drift_differences"]

    pack, drifted = read()
    assert len(pack) == 3 and all(line.endswith(": differs") for line in pack), pack
    assert any("textfile: missing" in line for line in drifted)
    assert any("sglang-drift.timer: inactive" in line for line in drifted), drifted
    written, code = run("sglang_prometheus_files", pack_args)
    assert code == 0 and written["changed"], written
    base = tmp_path / "base"
    base.mkdir()
    installed, code = run("sglang_drift", {**drift, "base_dir": str(base), "host": "gpu1",
                                           "url": f"http://127.0.0.1:{free_port()}", "timeout": 1})
    assert code == 0 and installed["changed"], installed
    assert read() == ([], [])
    assert run("sglang_prometheus_files", pack_args)[0]["changed"] is False

    (tmp_path / "pack" / "rules" / "gpu1.rules.yml").write_text("groups: [edited]\n")
    (tmp_path / "units" / "sglang-drift.timer").write_text("[Timer]\nOnBootSec=1\n")
    (tmp_path / "timer").write_text("failed\n")
    pack, drifted = read()
    assert pack == [f"{tmp_path}/pack/rules/gpu1.rules.yml: differs"]
    assert drifted == [f"{tmp_path}/units/sglang-drift.timer: differs",
                       "sglang-drift.timer: failed, enabled (want active, enabled)"]
    (tmp_path / "pack" / "rules" / "gpu1.rules.yml").unlink()
    (tmp_path / "pack" / "rules" / "gpu1.rules.yml").symlink_to(tmp_path / "timer")
    assert "is a symlink" in read()[0][0]
    read_args.pop("pack")
    read_args.pop("drift")
    assert read() == (None, None)


def test_free_names_a_foreign_listener_and_refuses(tmp_path):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        result, code = run("sglang_free", {"service": "sglang-none", "user": "root",
                                           "base_dir": str(tmp_path), "port": port,
                                           "nvidia_smi": "/nonexistent/nvidia-smi"})
    assert code == 1 and not result["changed"], result
    assert result["msg"].startswith(f"Refused before SGLang starts: pid {os.getpid()} ")
    assert f"port {port}" in result["msg"]
    result, code = run("sglang_free", {"service": "sglang-none", "user": "root",
                                       "base_dir": str(tmp_path), "port": port, "state": "free"})
    assert code == 0 and result["holders"] == [] and result["ended"] == [], result


def test_stop_leaves_a_unit_that_does_not_run(tmp_path, monkeypatch):
    fake_bin(tmp_path, monkeypatch, systemctl='echo "ActiveState=inactive"')
    result, code = run("sglang_stop", {"service": "sglang-none", "url": f"http://127.0.0.1:{free_port()}"})
    assert code == 0 and not result["changed"], result
    assert result["summary"] == "sglang-none.service was not running: nothing to drain"


def test_drift_without_a_release_publishes_unknown_and_warns(tmp_path):
    out = tmp_path / "textfile" / "sglang.prom"
    out.parent.mkdir()
    result, code = run("sglang_drift", {
        "base_dir": str(tmp_path), "url": f"http://127.0.0.1:{free_port()}", "host": "gpu1",
        "out": str(out), "dir": str(tmp_path / "monitoring")})
    assert code == 0 and result["changed"] and result["check"]["ok"] is None, result
    assert "is not a link to a release" in result["summary"]
    assert 'sglang_drift_check_success{sglang_host="gpu1",release=""} 0' in out.read_text()


def test_prometheus_files_writes_the_pack_and_refuses_a_host_that_climbs_out(tmp_path):
    pack = {"host": "gpu1", "target": "[]\n", "rules": "groups: []\n", "dashboard": "{}\n"}
    result, code = run("sglang_prometheus_files", {"dir": str(tmp_path), **pack})
    assert code == 0 and result["changed"] and result["rules_changed"], result
    assert result["promtool"] is None and (tmp_path / "rules/gpu1.rules.yml").read_text() == "groups: []\n"
    again, code = run("sglang_prometheus_files", {"dir": str(tmp_path), **pack})
    assert code == 0 and not again["changed"], again
    refused, code = run("sglang_prometheus_files", {"dir": str(tmp_path), **pack, "host": "../x"})
    assert code == 1 and "the pack's file names are made from it" in refused["msg"]


def test_serving_bench_measures_a_level_and_keeps_the_key_out_of_its_output(standin):
    key = "sk-" + "k" * 29
    url, _engine = standin(**{"api-key": key})
    result, code = run("sglang_serving_bench", {
        "url": url, "api_key": key, "python": sys.executable, "levels": [1], "timeout": 60,
        "workload": {"input_len": 8, "output_len": 4, "requests_per_level": 2}})
    assert code == 0, result
    assert result["measured_by"] == "own bench" and result["levels"][0]["completed"] == 2
    assert key not in json.dumps(result)
    refused, code = run("sglang_serving_bench", {
        "url": url, "python": sys.executable, "levels": [1],
        "workload": {"dataset": "random", "seed": "x"}, "slo": {"ttft_p99_ms": -1}})
    assert code == 1, refused
    # Every problem in one message, each saying what to change.
    for said in ("dataset 'random': one of random-ids", "seed 'x'", "slo ttft_p99_ms -1"):
        assert said in refused["msg"], refused["msg"]


def test_every_module_has_a_main_test():
    """A module added without a main() test in this file fails here."""
    source = Path(__file__).read_text(encoding="utf-8")
    untested = [name for name in MODULES if f'run("{name}"' not in source]
    assert MODULES and not untested, untested
