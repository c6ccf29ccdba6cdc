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


def unit_name_error(unit):
    """Why `unit` cannot be a systemd unit name (an option, a control character), or None."""
    if not isinstance(unit, str) or not unit or unit.startswith("-") \
            or any(ord(c) < 32 or ord(c) == 127 for c in unit):
        return f"{unit!r} is not a systemd unit name"
    return None


def unit_state(unit):
    """Return {ActiveState, SubState, Result, NRestarts} of a unit (and `error` if unreadable)."""
    if unit_name_error(unit):
        return {"NRestarts": 0, "error": unit_name_error(unit)}
    out, error = _run(["systemctl", "show", "-p", "ActiveState,SubState,Result,NRestarts",
                       "--", unit])
    state = dict(line.split("=", 1) for line in out.splitlines() if "=" in line)
    restarts = state.get("NRestarts") or "0"
    state["NRestarts"] = int(restarts) if restarts.isdigit() else 0
    if error and "ActiveState" not in state:
        state["error"] = error.strip()
    return state


def journal_tail(unit, lines=40):
    """The unit's last journal lines (all invocations: a crash loop spans several)."""
    if unit_name_error(unit):
        return [unit_name_error(unit)]
    out, error = _run(["journalctl", f"--unit={unit}", "-n", str(max(0, int(lines))),
                       "--no-pager", "-o", "short-iso"])
    return (out or error or "").splitlines()


def invocation_journal(unit):
    """(invocation id, its journal lines) of the unit's current run; ("", [reason]) without."""
    if unit_name_error(unit):
        return "", [unit_name_error(unit)]
    out, error = _run(["systemctl", "show", "-p", "InvocationID", "--value", "--", unit])
    invocation = out.strip()
    if not invocation:
        return "", [error or "no current invocation"]
    out, error = _run(["journalctl", f"_SYSTEMD_INVOCATION_ID={invocation}", "--no-pager",
                       "-o", "cat"])
    return invocation, out.splitlines()
