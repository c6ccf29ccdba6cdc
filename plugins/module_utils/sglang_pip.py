"""What a virtual environment holds, read without running pip.

The venv's own Python reads installed versions from distribution metadata
(importlib.metadata), and for `check` matches them with the packaging library pip vendors: no
pip resolution, no index request (~0.1 s). `check` is used by `sglang_pip_check` and by
`sglang_host_prereqs` (with the host's prerequisites in one round trip); `installed` (the whole
set as name==version lines) by `sglang_env`, for the marker of an env it built.
"""

import json
import os
import subprocess

# Runs inside the venv: stdlib plus pip's vendored packaging (every venv made by venv has pip).
PROBE = r"""
import json, sys
import importlib.metadata as md
from pip._vendor.packaging.requirements import Requirement
out = {"installed": {}, "missing": []}
for text in json.loads(sys.argv[1]):
    req = Requirement(text)
    try:
        version = md.version(req.name)
    except md.PackageNotFoundError:
        version = None
    out["installed"][req.name] = version
    if version is None or not req.specifier.contains(version, prereleases=True):
        out["missing"].append(text)
print(json.dumps(out))
"""

# Every distribution of the venv, name and version (stdlib only).
SET_PROBE = r"""
import json
import importlib.metadata as md
print(json.dumps(sorted({d.metadata["Name"]: d.version for d in md.distributions()
                         if d.metadata["Name"]}.items())))
"""
READ_TIMEOUT = 120


def _probe(python, argv):
    try:
        # cwd "/": `-c` puts the working directory first on the import path (a run started in /tmp
        # would import, as root, a json.py any local user left there).
        proc = subprocess.run([python, "-c", *argv], capture_output=True, text=True,
                              errors="replace", check=False, timeout=READ_TIMEOUT, cwd="/")
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise RuntimeError(f"{python} could not read its packages: {exc}") from None
    if proc.returncode != 0:
        raise RuntimeError(f"{python} could not read its packages: {proc.stderr.strip()[-500:]}")
    try:
        return json.loads(proc.stdout)
    except ValueError:
        raise RuntimeError(f"{python} could not read its packages: {proc.stdout.strip()[-200:]!r}"
                           " is not what the probe prints") from None


def installed(venv):
    """(venv_exists, sorted name==version lines of every distribution the venv holds)."""
    python = os.path.join(venv, "bin", "python")
    if not os.path.exists(python):
        return False, []
    return True, [f"{name}=={version}" for name, version in _probe(python, [SET_PROBE])]


def check(venv, requirements):
    """{venv_exists, installed: {name: version or None}, missing: [requirement, ...]}.

    Raises RuntimeError when the venv's Python cannot read its packages."""
    python = os.path.join(venv, "bin", "python")
    if not os.path.exists(python):
        return {"venv_exists": False, "installed": {}, "missing": list(requirements)}
    if not requirements:
        return {"venv_exists": True, "installed": {}, "missing": []}
    return {"venv_exists": True, **_probe(python, [PROBE, json.dumps(requirements)])}
