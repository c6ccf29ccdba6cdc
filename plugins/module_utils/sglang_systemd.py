"""What systemd and the journal say about a unit: the one place modules run systemctl and
journalctl. Every call is bounded in time, a unit name is checked before use and passed after
`--` (never read as an option), and output is decoded leniently (a journal line in another
encoding must not crash a module). Standard library only."""

import re
import subprocess

# systemctl and journalctl answer in well under a second; a hung one must not hang the play.
COMMAND_TIMEOUT = 30
# A variable name a systemd EnvironmentFile (and a shell) accepts.
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def env_file_line(name, value):
    """One line of a systemd EnvironmentFile: NAME="value", backslashes and quotes escaped.
    The caller has checked the name (ENV_NAME) and that the value holds no line break."""
    value = str(value).replace("\\", "\\\\").replace('"', '\\"')
    return f'{name}="{value}"'


def _run(argv, timeout=COMMAND_TIMEOUT):
    """(stdout, error text or None) of a systemd command, bounded in time: `timeout` seconds,
    never more than COMMAND_TIMEOUT (a caller with a nearer deadline passes what is left)."""
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, encoding="utf-8",
                              errors="replace", check=False,
                              timeout=max(0.1, min(COMMAND_TIMEOUT, timeout)))
    except (OSError, subprocess.SubprocessError) as exc:
        return "", f"{argv[0]}: {exc}"
    if proc.returncode != 0:
        return proc.stdout or "", (proc.stderr or proc.stdout or "").strip() \
            or f"{argv[0]} exited {proc.returncode}"
    return proc.stdout or "", (proc.stderr or None) if not proc.stdout else None


def unit_name_error(unit):
    """Why `unit` cannot be a systemd unit name (an option, a control character), or None."""
    if not isinstance(unit, str) or not unit or unit.startswith("-") \
            or any(ord(c) < 32 or ord(c) == 127 for c in unit):
        return f"{unit!r} is not a systemd unit name"
    return None


def show(unit, properties, timeout=COMMAND_TIMEOUT):
    """({property: value}, error text or None) of `systemctl show -p ... -- unit`."""
    if unit_name_error(unit):
        return {}, unit_name_error(unit)
    out, error = _run(["systemctl", "show", "-p", ",".join(properties), "--", unit], timeout)
    return dict(line.split("=", 1) for line in out.splitlines() if "=" in line), error


def stop_no_block(unit):
    """Ask systemd to stop `unit` and return at once (error text or None): the caller watches
    the stop (its drain) and bounds it."""
    if unit_name_error(unit):
        return unit_name_error(unit)
    return _run(["systemctl", "stop", "--no-block", "--", unit])[1]


def stop(unit):
    """Stop `unit` and wait until it is stopped, within COMMAND_TIMEOUT (error text or None)."""
    if unit_name_error(unit):
        return unit_name_error(unit)
    return _run(["systemctl", "stop", "--", unit])[1]


def unit_state(unit, timeout=COMMAND_TIMEOUT):
    """Return {ActiveState, SubState, Result, NRestarts} of a unit (and `error` if unreadable)."""
    state, error = show(unit, ["ActiveState", "SubState", "Result", "NRestarts"], timeout)
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


def invocation_journal(unit, timeout=COMMAND_TIMEOUT):
    """(invocation id, its journal lines) of the unit's current run; ("", [reason]) without."""
    state, error = show(unit, ["InvocationID"], timeout)
    invocation = (state.get("InvocationID") or "").strip()
    if not invocation:
        return "", [error or "no current invocation"]
    out, error = _run(["journalctl", f"_SYSTEMD_INVOCATION_ID={invocation}", "--no-pager",
                       "-o", "cat"], timeout)
    return invocation, out.splitlines()


def systemd_version():
    """systemd's major version (252 on Debian 12), None when systemctl does not answer."""
    out, _error = _run(["systemctl", "--version"])
    found = re.match(r"systemd (\d+)", out)
    return int(found.group(1)) if found else None
