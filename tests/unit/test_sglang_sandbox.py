"""The sandbox a program runs in as the server's unit runs (module_utils/sglang_sandbox.py):
the command line systemd-run gets, and the stop of a unit that outlives its bound."""

import json
import os
import pwd
import stat
import subprocess
import sys
import types

import pytest

from ansible_collections.sglang.deploy.plugins.module_utils import sglang_sandbox as sandboxes


def props(argv):
    return [argv[i + 1] for i, a in enumerate(argv) if a == "-p"]


def test_the_sandbox_runs_as_the_unit_would():
    argv = sandboxes.argv(
        {"user": "sglang", "group": "sglang", "env_file": "/nonexistent/sglang.env",
         "properties": ["ProtectSystem=strict", "ReadWritePaths=/opt/sglang/cache -/var/x",
                        "Environment=TRITON_HOME=/opt/sglang/cache"]},
        "/tmp/.sglang-resolve-env.x.env")
    assert argv[:5] == ["systemd-run", "--quiet", "--wait", "--pipe", "--collect"]
    assert "User=sglang" in props(argv) and "Group=sglang" in props(argv)
    # The environment comes from a file (the release's, or a private one in check mode),
    # never from the command line (tests/unit/test_hostile_faults.py).
    assert "EnvironmentFile=/tmp/.sglang-resolve-env.x.env" in props(argv)
    # Writable paths that may not exist yet are optional, as "-" marks them.
    assert "ReadWritePaths=-/opt/sglang/cache -/var/x" in props(argv)
    assert "ProtectSystem=strict" in props(argv)
    assert "Environment=TRITON_HOME=/opt/sglang/cache" in props(argv)
    assert argv[-1] == "--" and not any(a.startswith("--unit") for a in argv)
    assert not any(p.startswith(("RuntimeMaxSec", "WorkingDirectory")) for p in props(argv))


def test_a_named_bounded_unit_in_its_own_directory():
    unit = sandboxes.unit_name("sglang-bench")
    assert unit.startswith("sglang-bench-") and unit.endswith(".service")
    assert unit != sandboxes.unit_name("sglang-bench")
    argv = sandboxes.argv({"user": "sglang", "properties": ["PrivateTmp=yes"]}, None, unit, 120,
                          "/opt/sglang/cache/bench-x")
    assert f"--unit={unit}" in argv and argv[-1] == "--"
    # Ended by systemd a second after the caller's bound, even when the caller is gone.
    assert "RuntimeMaxSec=121" in props(argv)
    assert f"TimeoutStopSec={sandboxes.STOP_S}" in props(argv)
    assert "WorkingDirectory=/opt/sglang/cache/bench-x" in props(argv)
    assert "ReadWritePaths=/opt/sglang/cache/bench-x" in props(argv)
    assert not any(p.startswith("EnvironmentFile") for p in props(argv))


def test_a_unit_that_outlives_its_bound_is_stopped_by_name(monkeypatch):
    stopped = []
    monkeypatch.setattr(sandboxes, "stop", stopped.append)
    with pytest.raises(subprocess.TimeoutExpired):
        sandboxes.run(["sleep", "30"], "sglang-bench-0000abcd.service", 0.2)
    assert stopped == ["sglang-bench-0000abcd.service"]
    # Done within the bound: nothing is stopped, the result is the process's.
    done = sandboxes.run(["true"], "sglang-bench-0000abcd.service", 30)
    assert done.returncode == 0 and stopped == ["sglang-bench-0000abcd.service"]


def test_the_environment_file_is_private_and_removed(tmp_path, monkeypatch):
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr(sandboxes.tempfile, "tempdir", None)
    with sandboxes.private_env_file({"OPENAI_API_KEY": 'k"ey', "HOME": "/x"}) as path:
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
        assert open(path).read() == 'HOME="/x"\nOPENAI_API_KEY="k\\"ey"\n'
    assert list(tmp_path.iterdir()) == []


def test_the_units_a_cut_run_left_are_found_by_name_and_stopped(monkeypatch):
    listing = ("sglang-bench-0badc0de.service loaded active running /opt/ml-env/bin/python\n"
               "\u25cf sglang-bench-deadbeef.service loaded failed failed sleep\n"
               "sglang.service loaded active running SGLang\n")
    seen = []

    def fake(argv, **kwargs):
        seen.append(argv)
        return types.SimpleNamespace(stdout=listing, returncode=0)

    monkeypatch.setattr(sandboxes.subprocess, "run", fake)
    stopped = []
    monkeypatch.setattr(sandboxes, "stop", stopped.append)
    found = sandboxes.stop_leftovers("sglang-bench")
    assert found == stopped == ["sglang-bench-0badc0de.service", "sglang-bench-deadbeef.service"]
    assert seen[0][-2:] == ["--", "sglang-bench-*.service"]


def self_report(tmp_path):
    """SELF_REPORT run here, unsandboxed: what it says of this process."""
    out = subprocess.run([sys.executable, "-c", sandboxes.SELF_REPORT, str(tmp_path)],
                         capture_output=True, text=True, check=True, timeout=60).stdout
    return out.splitlines()[0]


def test_what_a_sandboxed_program_says_of_itself_is_judged_against_what_was_asked(tmp_path):
    line = self_report(tmp_path)
    me = pwd.getpwuid(os.getuid()).pw_name
    asked = {"user": me, "properties": ["NoNewPrivileges=yes", "PrivateTmp=yes",
                                        "ProtectSystem=strict", "ProtectHome=yes"]}
    report = sandboxes.seen(line, asked, "sglang-bench-0000abcd.service")
    assert report["uid"] == os.getuid() and report["gid"] == os.getgid()
    # Run here, not in a unit: none of it holds, and the report says so.
    assert report["own_cgroup"] is False and report["host_tmp_hidden"] is False
    expected = {"PrivateTmp", "ProtectSystem"} | ({"NoNewPrivileges"}
                                                  if not report["no_new_privs"] else set())
    assert set(report["unenforced"]) == expected - ({"ProtectSystem"}
                                                   if report["usr_read_only"] else set())
    # Asked for nothing: nothing is unenforced.
    assert sandboxes.seen(line, {"user": me}, "x.service")["unenforced"] == []
    # In the unit's own cgroup (as the manager names it on cgroup v1 and v2).
    moved = json.dumps(dict(json.loads(line), cgroups=["/system.slice/sglang-bench-0000abcd.service"]))
    assert sandboxes.seen(moved, asked, "sglang-bench-0000abcd.service")["own_cgroup"] is True


def test_a_program_that_ran_as_another_account_or_said_nothing_is_refused(tmp_path):
    line = self_report(tmp_path)
    other = "nobody" if os.getuid() != pwd.getpwnam("nobody").pw_uid else "root"
    with pytest.raises(ValueError, match=f"not {other}'s uid"):
        sandboxes.seen(line, {"user": other}, "x.service")
    with pytest.raises(ValueError):
        sandboxes.seen("usage: bench_serving.py [-h]", {"user": other}, "x.service")
    with pytest.raises(ValueError, match="not a self-report"):
        sandboxes.seen("[1, 2]", {"user": other}, "x.service")
