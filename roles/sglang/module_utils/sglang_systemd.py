"""What systemd and the journal say about a unit: standard library only."""

import subprocess


def unit_state(unit):
    """Return {ActiveState, SubState, Result, NRestarts} of a unit."""
    out = subprocess.run(
        ["systemctl", "show", unit, "-p", "ActiveState,SubState,Result,NRestarts"],
        capture_output=True, text=True, check=False,
    ).stdout
    state = dict(line.split("=", 1) for line in out.splitlines() if "=" in line)
    state["NRestarts"] = int(state.get("NRestarts") or 0)
    return state


def journal_tail(unit, lines=40):
    """The unit's last journal lines (all invocations: a crash loop spans several)."""
    proc = subprocess.run(
        ["journalctl", "-u", unit, "-n", str(lines), "--no-pager", "-o", "short-iso"],
        capture_output=True, text=True, check=False,
    )
    return (proc.stdout or proc.stderr).splitlines()
