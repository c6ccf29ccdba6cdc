"""sglang_service_state: what the service part of a deploy would change, read in one call (the
functions: module_utils/sglang_service_read.py, also read by sglang_release's `service`)."""

import contextlib
import grp
import hashlib
import io
import json
import os
import pwd

import pytest

from ansible.module_utils import basic

from support import load_module

from ansible_collections.sglang.deploy.plugins.module_utils import sglang_service_read as state

module = load_module("sglang_service_state")
# Files the tests make belong to whoever runs them (root on a host, anyone in `make check`).
OWNER, GROUP = pwd.getpwuid(os.getuid()).pw_name, grp.getgrgid(os.getgid()).gr_name


def want_file(path, content="x\n", **kw):
    return {"path": str(path), "sha256": hashlib.sha256(content.encode()).hexdigest(),
            "state": "present", "owner": OWNER, "group": GROUP, "mode": "0644", **kw}


def test_a_file_as_rendered_has_no_difference(tmp_path):
    path = tmp_path / "unit"
    path.write_text("x\n")
    os.chmod(path, 0o644)
    assert state.file_differences(want_file(path)) == []


def test_content_mode_and_presence_differences_are_named_without_content(tmp_path):
    path = tmp_path / "unit"
    path.write_text("secret-old\n")
    os.chmod(path, 0o600)
    found = state.file_differences(want_file(path, content="secret-new\n"))
    assert found == [f"{path}: content differs", f"{path}: mode 0600 (want 0644)"]
    assert state.file_differences(want_file(tmp_path / "gone")) == [f"{tmp_path}/gone: missing"]
    assert state.file_differences(want_file(path, state="absent")) == [
        f"{path}: present (a deploy removes it)"]
    assert state.file_differences(want_file(tmp_path / "gone", state="absent")) == []


def test_directories_and_users(tmp_path):
    os.chmod(tmp_path, 0o750)
    want = {"path": str(tmp_path), "owner": OWNER, "group": GROUP, "mode": "0750"}
    assert state.directory_differences(want) == []
    assert state.directory_differences({**want, "mode": "0700"}) == [
        f"{tmp_path}: mode 0750 (want 0700)"]
    assert state.user_differences({}) == []
    assert state.user_differences({"name": "root", "group": "root",
                                   "groups": ["no-such-group-here"]}) == []
    assert state.user_differences({"name": "no-such-user", "group": "root"}) == [
        "user no-such-user: missing"]


def test_systemd_state_must_be_active_enabled_and_loaded():
    ok = {"ActiveState": "active", "UnitFileState": "enabled", "NeedDaemonReload": "no"}
    assert state.systemd_differences(ok, "sglang") == []
    assert state.systemd_differences({**ok, "ActiveState": "failed"}, "sglang") == [
        "sglang: failed, not active"]
    assert state.systemd_differences({**ok, "NeedDaemonReload": "yes"}, "sglang") == [
        "sglang: the unit changed on disk since systemd read it"]
    assert state.systemd_differences({"error": "no bus"}, "sglang") == [
        "sglang: systemctl show failed: no bus"]


def test_main_takes_a_digest_never_the_content(tmp_path):
    path = tmp_path / "keys.json"
    path.write_text('{"api_key": "old-key-0123456789"}')
    args = {"service": "sglang-test-none", "files": [
        want_file(path, content='{"api_key": "new-key-0123456789"}', mode="0600")]}
    out = io.StringIO()
    saved = basic._ANSIBLE_ARGS, basic._ANSIBLE_PROFILE
    basic._ANSIBLE_ARGS = json.dumps({"ANSIBLE_MODULE_ARGS": args}).encode()
    basic._ANSIBLE_PROFILE = "legacy"
    try:
        with contextlib.redirect_stdout(out), contextlib.suppress(SystemExit):
            module.main()
    finally:
        basic._ANSIBLE_ARGS, basic._ANSIBLE_PROFILE = saved
    result = json.loads(out.getvalue())
    assert result["changed"] is False and result["unchanged"] is False
    assert f"{path}: content differs" in result["differences"]
    assert "key-0123456789" not in out.getvalue()


# --- which release the unit's process started from (not the one `current` names) ------------

def _proc(tmp_path, pid, argv):
    (tmp_path / "proc" / str(pid)).mkdir(parents=True)
    (tmp_path / "proc" / str(pid) / "cmdline").write_bytes(b"\0".join(a.encode() for a in argv)
                                                           + b"\0")
    return str(tmp_path / "proc")


LAUNCHER = ["/opt/sglang/envs/3f9a/bin/python", "/opt/sglang/releases/{}/launch.py", "--secrets",
            "/etc/sglang/keys.json", "--", "/opt/sglang/envs/3f9a/bin/python", "-m",
            "sglang.launch_server", "--config", "/opt/sglang/releases/{}/config.yaml"]


def _launcher(release):
    return [a.format(release) for a in LAUNCHER]


def test_the_release_run_is_read_from_the_process_never_from_current(tmp_path):
    # A run cut after its switch and before the restart: current names B, A's process serves.
    proc = _proc(tmp_path, 4242, _launcher("20261204T101010-a1"))
    active = {"ActiveState": "active", "MainPID": "4242"}
    serving, found = state.serving_differences(active, "sglang", "/opt/sglang",
                                               "20261204T111111-b2", proc)
    assert serving == {"serving_release": "20261204T101010-a1", "serving_reason": None}
    assert found == ["sglang: its process started from release 20261204T101010-a1, not "
                     "20261204T111111-b2"]
    assert state.serving_differences(active, "sglang", "/opt/sglang", "20261204T101010-a1",
                                     proc)[1] == []
    # No key to hand over: launch.py execs SGLang itself, with the release's --config.
    proc = _proc(tmp_path / "nokey", 4243, ["/opt/sglang/envs/3f9a/bin/python", "-m",
                                            "sglang.launch_server", "--config",
                                            "/opt/sglang/releases/20261204T101010-a1/config.yaml"])
    assert state.serving_differences(dict(active, MainPID="4243"), "sglang", "/opt/sglang",
                                     "20261204T101010-a1", proc) == (
        {"serving_release": "20261204T101010-a1", "serving_reason": None}, [])


@pytest.mark.parametrize("active, argv, why", [
    ({"ActiveState": "active", "MainPID": "0"}, None, "no main process"),
    ({"ActiveState": "active", "MainPID": "4242"}, None, "command line is unreadable"),
    # Something else runs as the unit's main process (an ExecStart edited by hand).
    ({"ActiveState": "active", "MainPID": "4242"}, ["/usr/bin/python3", "-m", "http.server"],
     "runs no release's launch.py or config.yaml under /opt/sglang/releases"),
    # A launch.py elsewhere, or of a release directory's sibling, is not a release.
    ({"ActiveState": "active", "MainPID": "4242"}, ["python", "/tmp/releases/x/launch.py"],
     "runs no release's launch.py"),
])
def test_unknown_is_a_difference_with_its_reason(tmp_path, active, argv, why):
    proc = _proc(tmp_path, 4242, argv) if argv else str(tmp_path / "proc")
    serving, found = state.serving_differences(active, "sglang", "/opt/sglang", "r1", proc)
    assert serving["serving_release"] is None and why in serving["serving_reason"]
    assert found == [f"sglang: which release its process started from is unknown "
                     f"({serving['serving_reason']})"]


def test_a_unit_that_is_not_active_is_said_once():
    serving, found = state.serving_differences({"ActiveState": "inactive"}, "sglang",
                                               "/opt/sglang", "r1")
    assert found == [] and serving["serving_reason"] == "the unit is not active"
    assert state.systemd_differences({"ActiveState": "inactive", "UnitFileState": "enabled"},
                                     "sglang") == ["sglang: inactive, not active"]
