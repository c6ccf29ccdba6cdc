"""Crash points of the switch, the env build and rebuild, and the cleanup, enumerated.

As the crash-consistency studies of applications do (ALICE, CrashMonkey): run an operation once
to count its file operations (rename, replace, symlink, unlink, mkdir, rmdir, every open for
writing, and the installer's process, before and halfway through its files); then, for each
operation k and each fault kind, run it again in a child process that meets the fault at k:

- kill: the process ends there (os._exit: no finally, no except, as SIGKILL or the OOM killer);
- ENOSPC, EROFS: the operation fails with that error and the code handles it as it does;
- timeout (at the installer's process only): it does not finish within its bound, which the
  module reports as it reports a failed install.

Each resulting state is checked as a reboot would find it (CUT_INVARIANTS), then the next run
(the same deploy, rollback or cleanup run again, without faults) and its result are checked
(NEXT_INVARIANTS). The real module code runs; only the installer is a stand-in that writes a
venv's files (uv is not what is tested here; tests/unit/test_sglang_env.py runs the real one).

Run: python tests/support/crash_points.py  (prints the summary; exit 1 on any violation).
"""

import builtins
import errno
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from support import ROOT  # noqa: E402,F401  (puts the collection on sys.path)

from ansible_collections.sglang.deploy.plugins.module_utils import sglang_envs as envs  # noqa: E402
from ansible_collections.sglang.deploy.plugins.modules import sglang_env as envmod  # noqa: E402
from ansible_collections.sglang.deploy.plugins.modules import sglang_drift as driftmod  # noqa: E402
from ansible_collections.sglang.deploy.plugins.module_utils import sglang_release_cleanup as clean  # noqa: E402
from ansible_collections.sglang.deploy.plugins.module_utils import sglang_release_store as store  # noqa: E402
from ansible_collections.sglang.deploy.plugins.module_utils import sglang_release_switch as switch  # noqa: E402
from ansible_collections.sglang.deploy.plugins.module_utils.sglang_releases import (  # noqa: E402
    read_current, read_manifest)

FAULTS = ("kill", "ENOSPC", "EROFS")
INSTALLER_FAULTS = FAULTS + ("timeout",)
KILLED = 86
PY = "python3.11"
ENV_A, ENV_B, ENV_C = "a" * 16, "b" * 16, "c" * 16

CUT_INVARIANTS = {
    "S1": "current names a release whose files match its manifest (what a reboot starts)",
    "S2": "the ml-env link leads to the env of the release current names",
    "S3": "the env of the release current names is complete and as built",
    "S4": "current names the release before the operation or its target, nothing else",
    "M1": "the drift check's textfile is the one before or a whole new one (node_exporter reads it)",
    "M2": "each drift check file is the one before or the whole new source (the timer runs them)",
}
NEXT_INVARIANTS = {
    "N1": "every directory under envs/ is complete (marker) after the next run",
    "N2": "no temp name, trash or half tree is left after the next run",
    "N3": "the next run reaches the operation's target",
    "N4": "cleanup frees what it reports (du before and after, hardlinks once)",
    "N5": "no env a kept release names, and no kept release, was removed",
    "N6": "the drift check's files are the sources, its textfile new, no temp name left",
}


# --- the stand-in installer: a venv's files, as uv or pip would leave them -------------------

def _site(path):
    return os.path.join(path, "lib", PY, "site-packages")


def _installed(path):
    site = _site(path)
    names = os.listdir(site) if os.path.isdir(site) else []
    return bool(names), sorted("==".join(n[:-len(".dist-info")].rsplit("-", 1))
                               for n in names if n.endswith(".dist-info"))


def _install(path, item, cache):
    name, version = item.split("==")
    site = _site(path)
    os.makedirs(os.path.join(site, name), exist_ok=True)
    with open(os.path.join(site, name, "__init__.py"), "w", encoding="utf-8") as fh:
        fh.write(f"VERSION = {version!r}\n")
    dist = os.path.join(site, f"{name}-{version}.dist-info")
    os.makedirs(dist, exist_ok=True)
    with open(os.path.join(dist, "RECORD"), "w", encoding="utf-8") as fh:
        fh.write(f"{name}/__init__.py,,\n{name}-{version}.dist-info/RECORD,,\n")
    if cache:
        entry = os.path.join(cache, "archive-v0", f"{name}-{version}")
        os.makedirs(os.path.join(entry, f"{name}-{version}.dist-info"), exist_ok=True)
        with open(os.path.join(entry, "payload"), "wb") as fh:
            fh.write(b"\0" * 8192)


def fake_run(argv, timeout, env=None):
    """The installer's process: `python -m venv PATH`, or an install of name==version items."""
    del timeout
    if argv[1:3] == ["-m", "venv"]:
        os.makedirs(os.path.join(argv[3], "bin"))
        with open(os.path.join(argv[3], "pyvenv.cfg"), "w", encoding="utf-8") as fh:
            fh.write("home = /usr/bin\n")
        return ""
    _tick("installer")
    path = os.path.dirname(os.path.dirname(argv[argv.index("--python") + 1]))
    items = [a for a in argv if "==" in a and not a.startswith("-")]
    for i, item in enumerate(items):
        if i == len(items) // 2:
            _tick("installer (halfway)")
        _install(path, item, (env or {}).get("UV_CACHE_DIR"))
    return ""


envmod.installed = _installed
# The cuts are process deaths and failed calls, not power losses: the page cache survives them,
# so the harness need not wait for the disk (fsync is for power losses, see sglang_files).
os.fsync = lambda fd: None


# --- fault injection -------------------------------------------------------------------------

class _Plan:
    at = None
    fault = None
    seen = []


def _tick(what):
    _Plan.seen.append(what)
    if _Plan.at is not None and len(_Plan.seen) == _Plan.at:
        if _Plan.fault == "kill":
            os._exit(KILLED)
        if _Plan.fault == "timeout":
            raise envs.EnvError(f"{what} did not finish within its timeout")
        code = getattr(errno, _Plan.fault)
        raise OSError(code, os.strerror(code))


def _writes(_file, mode="r", *_a, **_k):
    return any(c in str(mode) for c in "wax+")


def _os_open_writes(_path, flags, *_a, **_k):
    return bool(flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT))


def _truncates(_file, mode="r", *_a, **_k):
    return "w" in str(mode)


def _os_open_truncates(_path, flags, *_a, **_k):
    return bool(flags & os.O_TRUNC)


def _wrap(owner, name, when=None, after=None):
    """Count (and fault) each call of owner.name that `when(*args, **kwargs)` says writes, and
    once more after it returned when `after` says it emptied a file: a cut there finds the
    file truncated, as a file written in place is."""
    real = getattr(owner, name)

    def wrapped(*args, **kwargs):
        if when is None or when(*args, **kwargs):
            _tick(name)
        out = real(*args, **kwargs)
        if after is not None and after(*args, **kwargs):
            _tick(f"{name} (truncated)")
        return out
    setattr(owner, name, wrapped)


def _arm():
    for name in ("rename", "replace", "symlink", "unlink", "mkdir", "rmdir", "link"):
        _wrap(os, name)
    _wrap(os, "open", _os_open_writes, _os_open_truncates)
    _wrap(builtins, "open", _writes, _truncates)


def _in_child(operation, at, fault):
    """Run `operation` in a child that meets `fault` at file operation `at` (None: count);
    returns (exit kind, the operations seen)."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        _Plan.at, _Plan.fault, _Plan.seen = at, fault, []
        code = 0
        try:
            _arm()
            operation()
        except BaseException:  # noqa: B036 - the child reports, whatever happened
            code = 1
        with os.fdopen(write, "w") as out:
            out.write(json.dumps(_Plan.seen))
        os._exit(code)
    os.close(write)
    with os.fdopen(read) as src:
        seen = json.loads(src.read() or "[]")
    _, status = os.waitpid(pid, 0)
    code = os.waitstatus_to_exitcode(status)
    return {0: "ok", 1: "error", KILLED: "killed"}.get(code, f"exit {code}"), seen


# --- the scenarios: a host as a deploy leaves it, then one operation -------------------------

def _env(base, env, items):
    return envmod.build(str(base), env, sys.executable, items, [], installer="uv", uv="uv",
                        run=fake_run, mode="copy")


def _release(base, env, config, stamp="20261201T000000Z"):
    files = [{"name": "config.yaml", "content": config},
             {"name": "launch", "content": f"#!/bin/sh\nexec {base}/envs/{env}/bin/python\n",
              "mode": "0755"}]
    made = store.prepare(str(base), stamp, files, {"sglang_version": "0.5.23"})["release"]
    marker = envs.read_marker(envs.env_path(str(base), env))
    store.packages(str(base), made, marker["packages"],
                   env={"env": env, "env_digest": marker["digest"]})
    return made


class Host:
    """A base dir with release A (good, serving on env A) and B (on env B), the ml-env link."""

    def __init__(self, root, old_layout=False):
        self.base = Path(root) / "base"
        self.link = Path(root) / "ml-env"
        _env(self.base, ENV_A, ["sglang==0.5.23", "torch==2.14.1"])
        _env(self.base, ENV_B, ["sglang==0.5.22", "torch==2.14.1"])
        self.a = _release(self.base, ENV_A, "a: 1\n")
        self.b = _release(self.base, ENV_B, "b: 1\n", "20261201T000001Z")
        switch.activate(str(self.base), self.a, env_link=str(self.link))
        switch.mark(str(self.base), self.a, "good")
        switch.mark(str(self.base), self.b, "good")
        if old_layout:  # as the version before left it: the ml-env link straight to envs/<id>
            os.unlink(self.link)
            os.symlink(str(self.base / "envs" / ENV_A), self.link)
            os.unlink(self.base / "releases" / self.a / "env")


def _switch(host, target, rolled_back_reason=None):
    return lambda: switch.activate(str(host.base), target, env_link=str(host.link),
                                   rolled_back_reason=rolled_back_reason)


def _cleanup(host):
    return lambda: clean.cleanup(str(host.base), 0, 0, env_link=str(host.link))


OLD_PROM = "# HELP sglang_drift_check_success before\nsglang_drift_check_success 1\n"


def _drift_params(host):
    root = host.base.parent
    return {"base_dir": str(host.base), "url": "http://127.0.0.1:1", "host": "gpu1",
            "secrets": "", "timeout": 1.0, "out": str(root / "textfile" / "sglang.prom"),
            "dir": str(host.base / "monitoring")}


def _drift(host):
    """The monitoring step's writes on the host: the drift check's files (an older version of
    each installed) and its textfile (one published before)."""
    params = _drift_params(host)
    os.makedirs(params["dir"])
    for name in driftmod.SOURCES:
        Path(params["dir"], f"{name}.py").write_text(f"# {name}, the version before\n")
    os.makedirs(os.path.dirname(params["out"]))
    Path(params["out"]).write_text(OLD_PROM)
    # No timer runs beside the harness: what a cut left in the textfile directory is swept now.
    driftmod.OUT_TEMP_AGE_S = 0
    return lambda: driftmod.run(params, False)


SCENARIOS = {
    # name: (setup(host) -> (operation, the target release, the env it must leave complete))
    "deploy: switch to a new release": lambda h: (_switch(h, h.b), h.b, None),
    "deploy: switch from the layout before": lambda h: (_switch(h, h.b), h.b, None),
    "rollback: switch back": lambda h: (
        switch.activate(str(h.base), h.b, env_link=str(h.link))
        and _switch(h, h.a, "rolled back by hand"), h.a, None),
    "env build beside the serving one": lambda h: (
        lambda: _env(h.base, ENV_C, ["sglang==0.5.23", "torch==2.14.1", "extra==1.0"]),
        h.a, ENV_C),
    "env rebuild of the rollback target's": lambda h: (
        lambda: _env(h.base, ENV_B, ["sglang==0.5.22", "torch==2.14.1"]), h.a, ENV_B),
    "cleanup: releases, envs and cache": lambda h: (
        _env(h.base, ENV_C, ["sglang==0.5.21", "extra==1.0"])
        and switch.mark(str(h.base), _release(h.base, ENV_C, "c: 1\n", "20261201T000002Z"),
                        "failed", "refused") and _cleanup(h), h.a, None),
    "monitoring: the drift check and its textfile": lambda h: (_drift(h), h.a, None),
}


# --- the invariants --------------------------------------------------------------------------

def _current_env(host):
    current = read_current(str(host.base))
    return current, (read_manifest(str(host.base), current) or {}).get("env")


def check_cut(host, before, target):
    """What a reboot would find: violated invariants, each with what was seen."""
    bad = {}
    try:
        current, env = _current_env(host)
        manifest = store.require(str(host.base), current)
        store.verify(str(host.base), current, manifest)
    except Exception as exc:  # noqa: BLE001 - any failure is the violation
        return {"S1": str(exc)}
    if current not in (before, target):
        bad["S4"] = f"current is {current}"
    if os.path.basename(os.path.realpath(host.link)) != env:
        bad["S2"] = f"{host.link} leads to {os.path.realpath(host.link)}, current's env is {env}"
    state = envs.check(str(host.base), env)
    if not state["intact"]:
        bad["S3"] = f"env {env}: {state}"
    return bad


def _whole_prom(text):
    return text == OLD_PROM or (text.startswith("# HELP sglang_drift_check_success ")
                                and text.endswith("\n") and "sglang_drift_check_error" in text)


def check_monitoring_cut(host):
    params, bad = _drift_params(host), {}
    text = Path(params["out"]).read_text() if os.path.exists(params["out"]) else ""
    if not _whole_prom(text):
        bad["M1"] = f"{params['out']}: {text[:80]!r}"
    for name, module in driftmod.SOURCES.items():
        seen = Path(params["dir"], f"{name}.py").read_text()
        if seen not in (f"# {name}, the version before\n", driftmod.inspect.getsource(module)):
            bad["M2"] = f"{name}.py: {seen[:80]!r}"
    return bad


def check_monitoring_next(host):
    params = _drift_params(host)
    left = [n for d in (params["dir"], os.path.dirname(params["out"])) for n in os.listdir(d)
            if n.startswith(".")]
    stale = [n for n, m in driftmod.SOURCES.items()
             if Path(params["dir"], f"{n}.py").read_text() != driftmod.inspect.getsource(m)]
    text = Path(params["out"]).read_text()
    if left or stale or text == OLD_PROM or not _whole_prom(text):
        return {"N6": f"temp names {left}, stale files {stale}, textfile {text[:60]!r}"}
    return {}


def _leftovers(host):
    base = host.base
    found = [n for n in os.listdir(base) if n.startswith((".current.", ".trash"))]
    found += [n for n in os.listdir(base / "releases") if n.startswith(".")]
    for release in os.listdir(base / "releases"):
        found += [f"{release}/{n}" for n in os.listdir(base / "releases" / release)
                  if store.TEMP_RE.fullmatch(n)]
    found += [n for n in os.listdir(base / "envs") if n.startswith(".trash")
              or envs.ASIDE_RE.fullmatch(n)]
    found += [n for n in os.listdir(host.link.parent) if n.startswith(".ml-env.")]
    return found


def check_next(host, name, target, env, result):
    bad = {}
    incomplete = [e for e in envs.listing(str(host.base))
                  if envs.read_marker(envs.env_path(str(host.base), e)) is None]
    if incomplete:
        bad["N1"] = f"incomplete envs {incomplete}"
    unreadable = [m["id"] for m in store.info(str(host.base))["releases"]
                  if m.get("status") == "unreadable"]
    if _leftovers(host) or unreadable:
        bad["N2"] = f"left {_leftovers(host)}, half releases {unreadable}"
    current, _ = _current_env(host)
    if current != target or (env and not envs.check(str(host.base), env)["intact"]):
        bad["N3"] = f"current {current}, env {env}"
    if name.startswith("cleanup"):
        measured = envs.disk_usage([envs.envs_dir(str(host.base))])
        if result.get("envs_disk_bytes") != measured:
            bad["N4"] = f"reported {result.get('envs_disk_bytes')}, du {measured}"
    named = {m.get("env") for m in store.info(str(host.base))["releases"]}
    gone = [e for e in named - {None} if not os.path.isdir(envs.env_path(str(host.base), e))]
    if gone or not {host.a, host.b} <= {m["id"] for m in store.info(str(host.base))["releases"]}:
        bad["N5"] = f"envs gone {gone}"
    return bad


def run_scenario(name, workdir, faults=None):
    """Every crash point x fault kind of one scenario (or only the `faults` named):
    {points, runs, violations}."""
    def fresh(tag):
        root = tempfile.mkdtemp(dir=workdir, prefix=f"{tag}.")
        host = Host(root, old_layout="layout before" in name)
        operation, target, env = SCENARIOS[name](host)
        return host, operation, target, env

    host, operation, _, _ = fresh("count")
    outcome, seen = _in_child(operation, None, None)
    if outcome != "ok":
        raise AssertionError(f"{name}: the operation fails without a fault ({outcome})")
    violations, runs = [], 0
    for at in range(1, len(seen) + 1):
        kinds = INSTALLER_FAULTS if seen[at - 1].startswith("installer") else FAULTS
        for fault in (f for f in kinds if faults is None or f in faults):
            host, operation, target, env = fresh(f"{at}-{fault}")
            before = read_current(str(host.base))
            _in_child(operation, at, fault)
            runs += 1
            where = f"{name}: {fault} at #{at} ({seen[at - 1]})"
            monitoring = name.startswith("monitoring")
            cut = check_cut(host, before, target)
            cut.update(check_monitoring_cut(host) if monitoring else {})
            violations += [f"{where}: {k} {v}" for k, v in cut.items()]
            result = operation() or {}
            after = check_next(host, name, target, env, result)
            after.update(check_monitoring_next(host) if monitoring else {})
            violations += [f"{where}, then the next run: {k} {v}" for k, v in after.items()]
            shutil.rmtree(os.path.dirname(host.base))
    return {"points": len(seen), "runs": runs, "kinds": sorted(set(seen)),
            "violations": violations}


def _faults(r):
    return f"{len(FAULTS)}-{len(INSTALLER_FAULTS)}" if "installer" in r["kinds"] else f"{len(FAULTS)}"


def run_all(workdir):
    return {name: run_scenario(name, workdir) for name in SCENARIOS}


def summary(results):
    lines = [f"{'operation':<46} {'points':>6} x faults = runs  violations"]
    for name, r in results.items():
        lines.append(f"{name:<46} {r['points']:>6} x {_faults(r):<6} = {r['runs']:>4}  "
                     f"{len(r['violations'])}")
    total = sum(r["runs"] for r in results.values())
    kinds = sorted({k for r in results.values() for k in r["kinds"]})
    lines += [f"{total} cut runs; fault kinds: {', '.join(INSTALLER_FAULTS)} (timeout at the "
              f"installer's process); operations cut: {', '.join(kinds)}",
              "checked in each cut state: " + "; ".join(f"{k} {v}" for k, v in
                                                        CUT_INVARIANTS.items()),
              "checked after the next run: " + "; ".join(f"{k} {v}" for k, v in
                                                         NEXT_INVARIANTS.items())]
    lines += [v for r in results.values() for v in r["violations"][:20]]
    return "\n".join(lines)


def main():
    with tempfile.TemporaryDirectory(prefix="crash-points.") as workdir:
        results = run_all(workdir)
    print(summary(results))
    return 1 if any(r["violations"] for r in results.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
