"""The one systemd/journal helper (issue 20): unit names checked before any command runs and
passed after `--`, every call bounded in time, output decoded leniently. systemctl and
journalctl are shell scripts on PATH that record their arguments."""

import os
import time

import pytest

from ansible_collections.sglang.deploy.plugins.module_utils import sglang_stages
from ansible_collections.sglang.deploy.plugins.module_utils import sglang_systemd as systemd


@pytest.fixture
def tools(tmp_path, monkeypatch):
    """Install fake systemctl/journalctl: tools(systemctl=body, ...); returns the argv log."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    log = tmp_path / "argv.log"
    log.touch()

    def install(**scripts):
        for name, body in scripts.items():
            (bindir / name).write_text(f'#!/bin/sh\necho "{name} $*" >> {log}\n{body}\n')
            (bindir / name).chmod(0o755)
        return log

    monkeypatch.setenv("PATH", f"{bindir}:{os.environ['PATH']}")
    return install


def test_a_bad_unit_name_runs_nothing(tools):
    log = tools(systemctl="echo ActiveState=active", journalctl="echo line")
    for bad in ("--all", "-H", "", "sglang\nservice", None):
        assert systemd.unit_name_error(bad)
        assert "not a systemd unit name" in systemd.unit_state(bad)["error"]
        assert "not a systemd unit name" in systemd.journal_tail(bad)[0]
        assert systemd.invocation_journal(bad)[0] == ""
        assert systemd.show(bad, ["User"]) == ({}, systemd.unit_name_error(bad))
        assert sglang_stages.invocation_lines(bad)() == []
    assert log.read_text() == ""


def test_the_unit_comes_after_double_dash(tools):
    log = tools(systemctl='printf "ActiveState=active\\nSubState=running\\nNRestarts=2\\n"')
    assert systemd.unit_state("sglang.service") == {
        "ActiveState": "active", "SubState": "running", "NRestarts": 2}
    assert log.read_text().split("\n")[0].endswith("-- sglang.service")


def test_the_invocation_journal_and_the_stages_reader_read_one_invocation(tools):
    log = tools(systemctl="echo InvocationID=abc123", journalctl="echo 'Load weight begin'")
    assert systemd.invocation_journal("sglang.service") == ("abc123", ["Load weight begin"])
    assert sglang_stages.invocation_lines("sglang.service")() == ["Load weight begin"]
    assert "journalctl _SYSTEMD_INVOCATION_ID=abc123 --no-pager -o cat" in log.read_text()


def test_no_invocation_gives_no_lines(tools):
    tools(systemctl="echo InvocationID=", journalctl="echo never read")
    assert systemd.invocation_journal("sglang.service") == ("", ["no current invocation"])
    assert sglang_stages.invocation_lines("sglang.service")() == []


def test_a_hung_command_is_cut_off(tools, monkeypatch):
    tools(systemctl="sleep 30")
    monkeypatch.setattr(systemd, "COMMAND_TIMEOUT", 0.5)
    state = systemd.unit_state("sglang.service")
    assert "timed out" in state["error"] and state["NRestarts"] == 0


def test_a_nearer_deadline_cuts_a_hung_command_sooner(tools):
    """A readiness wait with 0.5 s left does not give systemctl or journalctl 30 s."""
    tools(systemctl="sleep 30", journalctl="sleep 30")
    started = time.monotonic()
    assert "timed out" in systemd.unit_state("sglang.service", timeout=0.5)["error"]
    assert sglang_stages.invocation_lines("sglang.service", lambda: 0.5)() == []
    assert systemd.invocation_journal("sglang.service", timeout=-3)[0] == ""
    assert time.monotonic() - started < 5


def test_output_in_another_encoding_is_replaced_not_raised(tools):
    tools(journalctl=r"printf 'caf\351 \377\n'")
    assert systemd.journal_tail("sglang.service") == ["caf\ufffd \ufffd"]


def test_a_failing_systemctl_is_an_error(tools):
    tools(systemctl="echo 'Failed to connect to bus' >&2; exit 1")
    assert systemd.show("sglang.service", ["ActiveState"]) == ({}, "Failed to connect to bus")
    assert systemd.systemd_version() is None


def test_systemd_version(tools):
    tools(systemctl='printf "systemd 252 (252.36-1~deb12u1)\\n+PAM +AUDIT\\n"')
    assert systemd.systemd_version() == 252
