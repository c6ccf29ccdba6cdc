"""Which pinned requirements a virtual environment satisfies, read without running pip.

The venv's own Python reads installed versions from distribution metadata
(importlib.metadata) and matches them with the packaging library pip vendors: no pip
resolution, no index request (~0.1 s). Used by `sglang_pip_check` and by
`sglang_host_prereqs`, which reads it with the host's prerequisites in one round trip.
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


def check(venv, requirements):
    """{venv_exists, installed: {name: version or None}, missing: [requirement, ...]}.

    Raises RuntimeError when the venv's Python cannot read its packages."""
    python = os.path.join(venv, "bin", "python")
    if not os.path.exists(python):
        return {"venv_exists": False, "installed": {}, "missing": list(requirements)}
    if not requirements:
        return {"venv_exists": True, "installed": {}, "missing": []}
    try:
        proc = subprocess.run([python, "-c", PROBE, json.dumps(requirements)],
                              capture_output=True, text=True, check=False, timeout=120)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise RuntimeError(f"{python} could not read its packages: {exc}") from None
    if proc.returncode != 0:
        raise RuntimeError(f"{python} could not read its packages: {proc.stderr.strip()[-500:]}")
    return {"venv_exists": True, **json.loads(proc.stdout)}
