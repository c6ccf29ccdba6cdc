"""A program run as the server's unit runs: `systemd-run --wait --pipe` with the unit's user,
group and sandbox properties, its environment from a 0600 file (never the command line, where
any local user reads it), in a transient unit of its own (its own cgroup), ended by systemd
when its bound passes (RuntimeMaxSec) and stopped at once when the caller gives up on it. The
resolution (sglang_resolve) and SGLang's benchmark (sglang_serving_bench) run so, with no more
than the server has. Standard library only."""

import contextlib
import grp
import json
import os
import pwd
import secrets
import shutil
import subprocess
import tempfile

from ansible_collections.sglang.deploy.plugins.module_utils.sglang_systemd import env_file_line, stop

# Seconds systemd gives the transient unit's processes after SIGTERM before it kills them.
STOP_S = 10

# What a program in the sandbox sees of itself, one JSON line on stdout (argv[1]: a path of
# the host's /tmp, which a PrivateTmp unit cannot see). Run by the sandbox's Python before the
# program it vouches for (`python -c SELF_REPORT <path> && ...`, or first in the same process).
SELF_REPORT = r"""
import json, os, sys
status = {}
with open("/proc/self/status") as handle:
    for line in handle:
        key, _sep, value = line.partition(":")
        status[key] = value.strip()
with open("/proc/self/cgroup") as handle:
    cgroups = [line.strip().split(":", 2)[-1] for line in handle if line.strip()]
print(json.dumps({"uid": os.getuid(), "gid": os.getgid(), "groups": sorted(os.getgroups()),
                  "no_new_privs": status.get("NoNewPrivs") == "1", "cgroups": cgroups,
                  "usr_read_only": bool(os.statvfs("/usr").f_flag & os.ST_RDONLY),
                  "host_tmp_hidden": not os.path.lexists(sys.argv[1])}), flush=True)
"""


# What in the run's environment chooses the code a Python (or any program) run as root loads:
# the interpreter's own variables and the dynamic loader's. A unit gets none of them.
CODE_CHOOSERS = ("PYTHON", "LD_PRELOAD", "LD_AUDIT", "LD_LIBRARY_PATH")


def inherited(environ):
    """The run's environment less CODE_CHOOSERS, for a program run outside a unit (no systemd,
    or a program that is not the server's): PYTHONPATH or LD_PRELOAD there would run another
    account's code as root."""
    return {key: value for key, value in environ.items() if not key.startswith(CODE_CHOOSERS)}


def systemd_running():
    return os.path.isdir("/run/systemd/system") and shutil.which("systemd-run") is not None


def refusal(sandbox):
    """Why `sandbox` ({user, group, ...}) cannot be entered here (None when it can)."""
    if not systemd_running():
        return "systemd is not running here"
    for key, lookup in (("user", pwd.getpwnam), ("group", grp.getgrnam)):
        name = sandbox.get(key)
        if name:
            try:
                lookup(name)
            except KeyError:
                return f"the service {key} {name} does not exist yet (check mode on a new host)"
    return None


def env_file_text(env):
    """A systemd EnvironmentFile holding `env`, quoted as the release's sglang.env is (the
    caller has checked the names and that no value holds a line break)."""
    return "".join(env_file_line(name, value) + "\n" for name, value in sorted(env.items()))


@contextlib.contextmanager
def private_env_file(env, prefix=".sglang-sandbox-env.", directory=None):
    """A 0600 file holding `env` for systemd-run's EnvironmentFile=, removed after (systemd
    reads it as root, before it drops to the unit's user), in `directory` (None: the system's
    temporary directory)."""
    fd, path = tempfile.mkstemp(prefix=prefix, suffix=".env", dir=directory)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(env_file_text(env))
        yield path
    finally:
        with contextlib.suppress(OSError):
            os.unlink(path)


def unit_name(prefix):
    """A transient unit's name no other run picks: `prefix`, then 8 random hex digits."""
    return f"{prefix}-{secrets.token_hex(4)}.service"


def argv(sandbox, env_file, unit=None, max_s=None, workdir=None):
    """systemd-run as the unit runs, up to and including `--` (the command follows): its user,
    group, environment file and sandbox properties (`sandbox["properties"]`, the unit's
    Key=value lines). Writable paths that do not exist yet (check mode on a fresh host) are
    optional ("-"), where the unit would have them. With `unit`, the transient unit's name
    (the caller stops it by name); with `max_s`, systemd ends it after that many seconds even
    when the caller is gone; with `workdir`, the directory it runs in, writable to it."""
    out = ["systemd-run", "--quiet", "--wait", "--pipe", "--collect",
           "--service-type=exec", "-p", "Environment=PYTHONUNBUFFERED=1"]
    if unit:
        out += [f"--unit={unit}", "-p", f"TimeoutStopSec={STOP_S}"]
    if max_s:
        out += ["-p", f"RuntimeMaxSec={int(max_s) + 1}"]
    for key, prop in (("user", "User"), ("group", "Group")):
        if sandbox.get(key):
            out += ["-p", f"{prop}={sandbox[key]}"]
    if env_file:
        out += ["-p", f"EnvironmentFile={env_file}"]
    for line in sandbox.get("properties") or []:
        key, _unused, value = str(line).partition("=")
        if key in ("ReadWritePaths", "ReadOnlyPaths"):
            value = " ".join(p if p.startswith("-") else "-" + p for p in value.split())
        out += ["-p", f"{key}={value}"]
    if workdir:
        out += ["-p", f"WorkingDirectory={workdir}", "-p", f"ReadWritePaths={workdir}"]
    return out + ["--"]


def run(command, unit, timeout, **kwargs):
    """subprocess.run(`command`, a systemd-run of argv(unit=`unit`)) bounded by `timeout`: when
    the bound passes, the transient unit is stopped (its whole cgroup, not only systemd-run's
    client) before subprocess.TimeoutExpired reaches the caller."""
    try:
        return subprocess.run(command, timeout=timeout, check=False, **kwargs)
    except subprocess.TimeoutExpired:
        if unit:
            stop(unit)
        raise


def running_units(prefix):
    """The loaded units named `prefix`-*.service (a run cut before its unit ended leaves one:
    RuntimeMaxSec ends it in time, the next run at once)."""
    try:
        proc = subprocess.run(["systemctl", "list-units", "--all", "--plain", "--no-legend",
                               "--type=service", "--", f"{prefix}-*.service"],
                              capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.SubprocessError):
        return []
    # A failed unit's line may begin with a bullet: the name is the field that matches.
    return sorted({field for line in proc.stdout.splitlines() for field in line.split()[:2]
                   if field.startswith(prefix + "-") and field.endswith(".service")})


def stop_leftovers(prefix):
    """Stop every unit running_units(`prefix`) finds; the names stopped."""
    found = running_units(prefix)
    for unit in found:
        stop(unit)
    return found


def seen(first_line, sandbox, unit):
    """What the program in `unit` said of itself (SELF_REPORT's line), judged against what the
    sandbox asks for: {uid, no_new_privs, own_cgroup, ..., unenforced: [the asked properties
    this manager did not apply, e.g. namespaces in a container without CAP_SYS_ADMIN]}. The
    server's unit runs under the same manager, so it has no more than this either. ValueError
    when the line is not the report, or the program ran as another account than asked."""
    report = json.loads(first_line)
    if not isinstance(report, dict) or not isinstance(report.get("uid"), int):
        raise ValueError(f"not a self-report: {first_line[:200]!r}")
    want = pwd.getpwnam(sandbox["user"]).pw_uid if sandbox.get("user") else 0
    if report["uid"] != want:
        raise ValueError(f"it ran as uid {report['uid']}, not {sandbox.get('user') or 'root'}'s "
                         f"uid {want}")
    asked = dict(str(line).partition("=")[::2] for line in sandbox.get("properties") or [])
    report["own_cgroup"] = any(c.endswith("/" + unit) for c in report.get("cgroups") or [])
    checks = {"NoNewPrivileges": report.get("no_new_privs"),
              "ProtectSystem": report.get("usr_read_only"),
              "PrivateTmp": report.get("host_tmp_hidden")}
    report["unenforced"] = sorted(key for key, held in checks.items()
                                  if asked.get(key, "no") not in ("no", "false", "0", "")
                                  and not held)
    return report
