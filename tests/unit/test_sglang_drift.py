"""The drift check (module_utils/sglang_drift.py, run by the timer) and its module: the live
server's resolution against the serving release's record, published for node_exporter; missing
evidence is `unknown` with the reason, never a clean bill. The server is the stand-in engine."""

import json
import os
import re
import subprocess
import sys

import pytest

from support import free_port, load_module

from ansible_collections.sglang.deploy.plugins.module_utils import sglang_drift as drift
from ansible_collections.sglang.deploy.plugins.module_utils.sglang_effective import effective

module = load_module("sglang_drift")
ARGS = {"speculative-algorithm": "NEXTN", "speculative-num-steps": 3, "tp-size": 2}


def released(base, info, release="20261203T120000Z-abc123", status="good"):
    """A base directory whose current release recorded `info`'s effective view when proven."""
    path = base / "releases" / release
    path.mkdir(parents=True)
    manifest = {"id": release, "status": status}
    if info is not None:
        manifest["verification"] = {"effective": effective(info), "ok": True}
    (path / "manifest.json").write_text(json.dumps(manifest))
    os.symlink(f"releases/{release}", base / "current")
    return str(base)


def series(text):
    """{name{labels}: value} of a text exposition, each line checked for the format."""
    out = {}
    for line in text.splitlines():
        if line.startswith("#"):
            assert re.fullmatch(r"# (HELP|TYPE) \w+ .+", line), line
            continue
        match = re.fullmatch(r'(\w+)(\{(?:\w+="(?:[^"\\]|\\.)*",?)*\})? (\S+)', line)
        assert match, line
        out[match.group(1) + (match.group(2) or "")] = float(match.group(3))
    return out


def test_a_server_that_resolves_what_its_release_recorded_has_no_drift(standin, tmp_path):
    url, engine = standin(**ARGS)
    base = released(tmp_path, engine.server_info())
    result = drift.check(base, url)
    assert result["ok"] is True and result["release"] == "20261203T120000Z-abc123"
    assert {row["setting"] for row in result["settings"] if row["drift"] is False} == set(drift.SETTINGS)
    text = drift.prom(result, "gpu1")
    values = series(text)
    assert values['sglang_drift_check_success{sglang_host="gpu1",release="20261203T120000Z-abc123"}'] == 1
    assert values['sglang_drift{sglang_host="gpu1",release="20261203T120000Z-abc123",'
                  'setting="decode_cuda_graph",recorded="on",live="on"}'] == 0
    assert ('setting="speculative",recorded="algorithm=EAGLE,eagle_topk=1,num_draft_tokens=4,'
            'num_steps=3",live="algorithm=EAGLE,eagle_topk=1,num_draft_tokens=4,num_steps=3"} 0') in text


def test_a_graph_that_turned_itself_off_is_drift_named_with_both_values(standin, tmp_path):
    url, engine = standin(**ARGS)
    base = released(tmp_path, engine.server_info())
    engine.knobs.resolved = {"cuda_graph_config": {"decode": {"backend": "disabled"},
                                                   "prefill": {"backend": "disabled"}},
                             "attention_backend": "triton"}
    result = drift.check(base, url)
    assert result["ok"] is False
    assert result["reason"] == ("drift: decode_cuda_graph, decode_backend, prefill_cuda_graph, "
                                "prefill_backend, attention_backend")
    values = series(drift.prom(result, "gpu1"))
    assert values['sglang_drift{sglang_host="gpu1",release="20261203T120000Z-abc123",'
                  'setting="attention_backend",recorded="flashinfer",live="triton"}'] == 1


def test_a_release_proven_without_a_record_is_unknown_not_clean(standin, tmp_path):
    url, _engine = standin(**ARGS)
    result = drift.check(released(tmp_path, None), url)
    assert result["ok"] is None and result["kind"] == "no_record"
    assert "recorded no verification (status good)" in result["reason"]
    values = series(drift.prom(result, "gpu1"))
    assert values['sglang_drift_check_success{sglang_host="gpu1",release="20261203T120000Z-abc123"}'] == 0
    assert values['sglang_drift_check_error{sglang_host="gpu1",release="20261203T120000Z-abc123",'
                  'kind="no_record"}'] == 1
    assert not any(name.startswith("sglang_drift{") for name in values)


def test_no_current_link_and_no_server_are_unknown_with_the_reason(tmp_path):
    assert drift.check(str(tmp_path), "http://127.0.0.1:1")["kind"] == "no_record"
    base = released(tmp_path, {"tp_size": 2})
    down = drift.check(base, f"http://127.0.0.1:{free_port()}", timeout=2)
    assert down["ok"] is None and down["kind"] == "unreachable"


def test_a_server_behind_a_key_is_read_with_the_service_key_file(standin, tmp_path):
    url, engine = standin(**ARGS, **{"api-key": "k" * 32})
    base = released(tmp_path, engine.server_info())
    assert drift.check(base, url)["kind"] == "auth"
    secrets = tmp_path / "secrets.json"
    secrets.write_text(json.dumps({"api-key": "k" * 32}))
    assert drift.check(base, url, str(secrets))["ok"] is True


def test_a_setting_the_release_did_not_record_is_not_drift(standin, tmp_path):
    """A release proven before the record had a setting (attention_backend) says nothing of it."""
    url, engine = standin(**ARGS)
    info = dict(engine.server_info())
    info.pop("attention_backend")
    result = drift.check(released(tmp_path, info), url)
    row = next(r for r in result["settings"] if r["setting"] == "attention_backend")
    assert result["ok"] is True and row == {"setting": "attention_backend", "recorded": None,
                                            "live": "flashinfer", "drift": None}


def test_the_module_installs_the_program_the_timer_runs_and_it_runs_alone(standin, tmp_path):
    """What the timer runs is the four files the module wrote, with no Ansible on the path."""
    url, engine = standin(**ARGS)
    (tmp_path / "base").mkdir()
    base = released(tmp_path / "base", engine.server_info())
    params = {"base_dir": base, "url": url, "host": "gpu1", "secrets": "", "timeout": 10,
              "out": str(tmp_path / "sglang.prom"), "dir": str(tmp_path / "monitoring")}
    planned = module.run(params, check_mode=True)
    assert planned["changed"] and not os.path.exists(params["dir"])
    assert not os.path.exists(params["out"]) and planned["check"]["ok"] is True
    first = module.run(params, check_mode=False)
    assert first["changed"] and sorted(os.listdir(params["dir"])) == [
        "sglang_drift.py", "sglang_effective.py", "sglang_files.py", "sglang_read.py"]
    assert module.run(params, check_mode=False)["changed"] is False
    engine.knobs.resolved = {"attention_backend": "triton"}
    out = tmp_path / "timer.prom"
    ran = subprocess.run(
        [sys.executable, "-E", "-s", first["program"], "--base-dir", base, "--url", url,
         "--host", "gpu1", "--out", str(out)],
        capture_output=True, text=True, cwd="/", check=False, env={"PATH": "/usr/bin:/bin"})
    assert ran.returncode == 1, ran.stderr
    assert "DRIFT: drift: attention_backend" in ran.stdout
    assert 'setting="attention_backend",recorded="flashinfer",live="triton"} 1' in out.read_text()
    assert oct(out.stat().st_mode & 0o777) == "0o644"
    assert [n for n in os.listdir(tmp_path) if n.startswith(".sglang-drift.")] == []


def test_the_module_installs_its_units_and_starts_the_timer_once(standin, tmp_path):
    """The units (the module's Python in ExecStart), a systemd reload only when one changed, the
    timer enabled and started only when it is not: a second run changes nothing."""
    url, engine = standin(**ARGS)
    (tmp_path / "base").mkdir()
    base = released(tmp_path / "base", engine.server_info())
    units = tmp_path / "units"
    units.mkdir()
    state, calls = {"enabled": False}, []

    def systemctl(*args):
        calls.append(args)
        if args[0] == "enable":
            state["enabled"] = True
        return 0

    def show(unit):
        assert unit == "sglang-drift.timer"
        return ({"ActiveState": "active", "UnitFileState": "enabled"} if state["enabled"]
                else {"ActiveState": "inactive", "UnitFileState": "disabled"})

    params = {"base_dir": base, "url": url, "host": "gpu1", "secrets": "", "timeout": 10,
              "out": str(tmp_path / "textfile" / "sglang.prom"), "dir": str(tmp_path / "monitoring"),
              "units": [{"name": "sglang-drift.timer", "content": "[Timer]\n"},
                        {"name": "sglang-drift.service", "content": "ExecStart=@PYTHON@ -B x\n"}],
              "units_dir": str(units), "timer": "sglang-drift.timer"}
    planned = module.run(params, True, systemctl, show)
    assert planned["changed"] and calls == [] and not (tmp_path / "textfile").exists()
    first = module.run(params, False, systemctl, show)
    assert first["changed"] and first["units"] == ["sglang-drift.service", "sglang-drift.timer"]
    assert (units / "sglang-drift.service").read_text() == f"ExecStart={sys.executable} -B x\n"
    assert oct((tmp_path / "textfile").stat().st_mode & 0o777) == "0o755"
    assert calls[0] == ("daemon-reload",) and ("enable", "--now", "sglang-drift.timer") in calls
    calls.clear()
    again = module.run(params, False, systemctl, show)
    assert not again["changed"] and again["units"] == [] and ("daemon-reload",) not in calls
    assert not any(call[0] == "enable" for call in calls)


def test_a_symlinked_textfile_directory_is_refused_not_followed(tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    (tmp_path / "textfile").symlink_to(elsewhere)
    params = {"base_dir": str(tmp_path), "url": f"http://127.0.0.1:{free_port()}", "host": "gpu1",
              "secrets": "", "timeout": 1, "out": str(tmp_path / "textfile" / "sglang.prom"),
              "dir": str(tmp_path / "monitoring")}
    with pytest.raises(module.MonitoringFileError, match="is a symlink"):
        module.run(params, False)
    assert oct(elsewhere.stat().st_mode & 0o777) == "0o700" and os.listdir(elsewhere) == []


def test_what_a_cut_run_left_is_swept_but_not_a_timer_runs_write_in_progress(tmp_path):
    programs, textfile = tmp_path / "monitoring", tmp_path / "textfile"
    programs.mkdir()
    textfile.mkdir()
    (programs / ".sglang_drift.py.x1y2").write_text("half")
    (programs / "notes.txt").write_text("the operator's")
    old, young = textfile / ".sglang-drift.old", textfile / ".sglang-drift.now"
    old.write_text("half")
    young.write_text("being written")
    os.utime(old, (0, 0))
    module.sweep(str(programs), module.PROGRAM_TEMP)
    module.sweep(str(textfile), module.OUT_TEMP, module.OUT_TEMP_AGE_S)
    assert sorted(os.listdir(programs)) == ["notes.txt"]
    assert sorted(os.listdir(textfile)) == [".sglang-drift.now"]


# --- whatever answers on the port (docs/security.md#trust-boundaries) -----------------------

def _hostile(handler_body):
    """A server on a free port whose every GET runs `handler_body(self)`; yields its URL."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class Handler(BaseHTTPRequestHandler):
        seen = []

        def do_GET(self):  # noqa: N802 - http.server's name
            Handler.seen.append((self.path, self.headers.get("Authorization")))
            handler_body(self)

        def log_message(self, *args):
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", free_port()), Handler)
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    return httpd, Handler.seen


def _keyed(tmp_path):
    secrets = tmp_path / "secrets.json"
    secrets.write_text(json.dumps({"api-key": "k" * 32}))
    return str(secrets)


def test_a_redirect_to_another_origin_is_not_followed_and_the_key_stays(standin, tmp_path):
    elsewhere, elsewhere_seen = _hostile(lambda h: (h.send_response(200), h.end_headers(),
                                                    h.wfile.write(b"{}")))
    target = f"http://127.0.0.1:{elsewhere.server_address[1]}/steal"

    def redirect(handler):
        handler.send_response(302)
        handler.send_header("Location", target)
        handler.end_headers()

    port, _ = _hostile(redirect)
    try:
        base = released(tmp_path / "base", {"tp_size": 2})
        result = drift.check(base, f"http://127.0.0.1:{port.server_address[1]}",
                             _keyed(tmp_path), timeout=5)
    finally:
        port.shutdown()
        elsewhere.shutdown()
    assert result["ok"] is None and result["kind"] == "bad_answer"
    assert "HTTP 302 (a redirect is not followed)" in result["reason"]
    assert elsewhere_seen == [], "the key went to another origin"


def test_a_trickling_answer_is_cut_at_the_deadline(tmp_path):
    import time

    def trickle(handler):
        handler.send_response(200)
        handler.send_header("Content-Length", "100000")
        handler.end_headers()
        for _ in range(600):
            handler.wfile.write(b" ")
            handler.wfile.flush()
            time.sleep(0.05)

    server, _ = _hostile(trickle)
    try:
        base = released(tmp_path / "base", {"tp_size": 2})
        started = time.monotonic()
        result = drift.check(base, f"http://127.0.0.1:{server.server_address[1]}", timeout=1)
        took = time.monotonic() - started
    finally:
        server.shutdown()
    assert result["ok"] is None and "did not end within the timeout" in result["reason"]
    # A byte every 50 ms for 30 s: the check ends at its 1 s deadline plus at most one read.
    assert took < 10, took


def test_a_lone_surrogate_in_server_info_is_written_escaped(tmp_path):
    body = b'{"tp_size": 2, "version": "0.5.23\\ud800"}'
    server, _ = _hostile(lambda h: (h.send_response(200), h.end_headers(), h.wfile.write(body)))
    try:
        base = released(tmp_path / "base", {"tp_size": 2, "version": "0.5.23"})
        result = drift.check(base, f"http://127.0.0.1:{server.server_address[1]}", timeout=5)
    finally:
        server.shutdown()
    assert result["ok"] is False
    out = tmp_path / "sglang.prom"
    drift.publish(str(out), result, "gpu1")
    assert 'live="0.5.23\\\\ud800"' in out.read_text(encoding="utf-8")


def test_a_record_with_none_of_the_settings_is_unknown_not_a_clean_bill(standin, tmp_path):
    url, _engine = standin(**ARGS)
    base = tmp_path / "base"
    released(base, None)
    manifest = base / "current" / "manifest.json"
    manifest.write_text(json.dumps({"id": "x", "status": "good",
                                    "verification": {"effective": {}, "ok": True}}))
    result = drift.check(str(base), url)
    assert result["ok"] is None and result["kind"] == "no_record"
    assert "recorded none of the settings" in result["reason"]
    assert series(drift.prom(result, "gpu1"))[
        'sglang_drift_check_success{sglang_host="gpu1",release="20261203T120000Z-abc123"}'] == 0


@pytest.mark.parametrize("plant", ["fifo", "link", "huge"])
def test_a_key_file_the_service_user_turned_hostile_is_a_published_failure(standin, tmp_path, plant):
    """Issue 55, part 2: the key file is the service user's (0600, its owner), and the timer
    reads it as root. A FIFO there held the read for ever, a link to a file only root reads was
    read and its content sent as the key, a huge file was read until memory ran out. Each is a
    named failure now, published as the check's failure (never a stale success), its content
    never shown."""
    url, engine = standin(**ARGS, **{"api-key": "k" * 32})
    base = released(tmp_path, engine.server_info())
    secrets = tmp_path / "secrets.json"
    if plant == "fifo":
        os.mkfifo(secrets)
    elif plant == "link":
        (tmp_path / "root-only").write_text(json.dumps({"api-key": "r" * 32}))
        secrets.symlink_to(tmp_path / "root-only")
    else:
        secrets.write_text(json.dumps({"api-key": "k" * 32, "pad": "x" * drift.KEY_CAP}))
    result = drift.check(base, url, str(secrets))
    assert result["ok"] is None and result["kind"] == "no_key", result
    assert str(secrets) in result["reason"] and "r" * 32 not in json.dumps(result)
    out = tmp_path / "sglang.prom"
    drift.publish(str(out), result, "gpu1")
    assert "sglang_drift_check_success{" in out.read_text() and \
        re.search(r"sglang_drift_check_success\{[^}]*\} 0", out.read_text())


def test_a_manifest_that_is_a_link_is_not_followed(standin, tmp_path):
    url, engine = standin(**ARGS)
    base = released(tmp_path, engine.server_info())
    manifest = os.path.join(base, "current", "manifest.json")
    os.rename(manifest, manifest + ".real")
    os.symlink(manifest + ".real", manifest)
    result = drift.check(base, url)
    assert result["ok"] is None and result["kind"] == "no_record", result


def test_the_program_and_units_are_compared_by_mode_and_owner_and_repaired(tmp_path):
    """Issue 55, part 3: the drift program and its units, which root runs and systemd loads,
    are state by content, mode and owner: a chmod 666 or a chown to another account is a change
    the re-run's read names and the install repairs; a program directory another account can
    write is refused, since root runs code from it."""
    from ansible_collections.sglang.deploy.plugins.module_utils import sglang_monitoring_files as files

    directory = tmp_path / "monitoring"
    assert module.install(str(directory), check_mode=False)
    assert files.program_changes(str(directory)) == []
    (directory / "sglang_read.py").chmod(0o666)
    assert files.program_changes(str(directory)) == ["sglang_read"]
    assert module.install(str(directory), check_mode=False) == ["sglang_read"]
    assert oct((directory / "sglang_read.py").stat().st_mode & 0o777) == "0o644"
    if os.geteuid() == 0:
        os.chown(directory / "sglang_files.py", 65534, 65534)
        assert files.program_changes(str(directory)) == ["sglang_files"]
        module.install(str(directory), check_mode=False)
        assert (directory / "sglang_files.py").stat().st_uid == 0
    units = tmp_path / "units"
    units.mkdir()
    wanted = [{"name": "sglang-drift.service", "content": "[Service]\nExecStart=@PYTHON@ x\n"}]
    [(name, path, text)] = files.unit_changes(wanted, str(units))
    (units / name).write_text(text)
    (units / name).chmod(0o644)
    assert files.unit_changes(wanted, str(units)) == []
    (units / name).chmod(0o664)
    assert [n for n, _p, _t in files.unit_changes(wanted, str(units))] == [name]
    directory.chmod(0o777)
    with pytest.raises(files.MonitoringFileError, match="can be written by an account other"):
        files.program_changes(str(directory))
    directory.chmod(0o755)
    # A sticky directory of root's (as /tmp) lets no other account replace root's entries.
    sticky = tmp_path / "sticky"
    sticky.mkdir()
    sticky.chmod(0o1777)
    assert files.writable_by_another(str(sticky / "monitoring")) is None
