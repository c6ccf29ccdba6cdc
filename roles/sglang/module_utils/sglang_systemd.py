"""What systemd and the journal say about a unit: standard library only."""

import subprocess

# systemctl and journalctl answer in well under a second; a hung one must not hang the play.
COMMAND_TIMEOUT = 30


def _run(argv):
    """(stdout, error text or None) of a systemd command, bounded in time."""
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, check=False,
                              timeout=COMMAND_TIMEOUT)
    except (OSError, subprocess.SubprocessError) as exc:
        return "", f"{argv[0]}: {exc}"
    return proc.stdout or "", (proc.stderr or None) if not proc.stdout else None


def unit_state(unit):
    """Return {ActiveState, SubState, Result, NRestarts} of a unit (and `error` if unreadable)."""
    out, error = _run(["systemctl", "show", unit, "-p", "ActiveState,SubState,Result,NRestarts"])
    state = dict(line.split("=", 1) for line in out.splitlines() if "=" in line)
    restarts = state.get("NRestarts") or "0"
    state["NRestarts"] = int(restarts) if restarts.isdigit() else 0
    if error and "ActiveState" not in state:
        state["error"] = error.strip()
    return state


def journal_tail(unit, lines=40):
    """The unit's last journal lines (all invocations: a crash loop spans several)."""
    out, error = _run(["journalctl", "-u", unit, "-n", str(lines), "--no-pager",
                       "-o", "short-iso"])
    return (out or error or "").splitlines()
