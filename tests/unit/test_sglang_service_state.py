"""sglang_service_state: what the service part of a deploy would change, read in one call."""

import contextlib
import grp
import hashlib
import io
import json
import os
import pwd

from ansible.module_utils import basic

from support import load_module

state = load_module("sglang_service_state")
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
            state.main()
    finally:
        basic._ANSIBLE_ARGS, basic._ANSIBLE_PROFILE = saved
    result = json.loads(out.getvalue())
    assert result["changed"] is False and result["unchanged"] is False
    assert f"{path}: content differs" in result["differences"]
    assert "key-0123456789" not in out.getvalue()
