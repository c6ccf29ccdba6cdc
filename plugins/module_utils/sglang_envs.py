# Copyright: sglang-deploy contributors
# SPDX-License-Identifier: Apache-2.0
"""Immutable ml-envs: one venv per package set under `<base_dir>/envs/<id>/`, built once,
never changed, switched with the release that runs on it.

- The id is the first 16 hex digits of the sha256 of what defines the set (the Python, the
  requirements, the install options), so the same inputs always name the same env.
- An env is complete when its marker (`.sglang-env.json`) exists: it is written last, after
  the install, and holds the digest. A directory without it is a build cut short, removed and
  built again.
- The digest is the sha256 over the env's dist-infos' RECORD files (each names every file of
  its distribution with that file's hash): an install, an upgrade or an uninstall in the env
  changes it.
- Disk usage counts a hardlinked file once (uv links from its cache on the same filesystem).

Standard library only: it runs on the host, inside modules.
"""

import glob
import hashlib
import json
import os
import re
import shutil
import stat
import subprocess

from ansible_collections.sglang.deploy.plugins.module_utils.sglang_files import symlink_atomic
from ansible_collections.sglang.deploy.plugins.module_utils.sglang_read import read_bytes

ENVS = "envs"
MARKER = ".sglang-env.json"
ID_RE = re.compile(r"[0-9a-f]{16}")
MARKER_CAP = 4 << 20
RECORD_CAP = 64 << 20


# The Python an env is made from: its major.minor and real executable. A patch upgrade of the
# host's Python keeps the env (its bin/python links to the same executable); 3.11 -> 3.12 or
# another interpreter makes another env.
PYTHON_PROBE = ("import os, sys; "
                "print('%d.%d' % sys.version_info[:2], os.path.realpath(sys.executable))")


class EnvError(Exception):
    """An env that cannot be named, read or trusted."""


def python_identity(python, timeout=60):
    """'3.11 /usr/bin/python3.11' for `python` (a name on PATH or a path)."""
    found = shutil.which(python) or python
    try:
        proc = subprocess.run([found, "-c", PYTHON_PROBE], capture_output=True, check=False,
                              timeout=timeout, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise EnvError(f"{python} cannot make an env: {exc}") from None
    out = proc.stdout.decode("utf-8", "replace").strip()
    if proc.returncode != 0 or not out:
        raise EnvError(f"{python} cannot make an env: "
                       f"{proc.stderr.decode('utf-8', 'replace').strip()[-300:]}")
    return out


def spec_of(python_id, requirements, options, no_deps):
    """What defines an env built from requirements: the Python, the requirements (in any
    order), the install options (index, wheelhouse), --no-deps."""
    return {"python": python_id, "requirements": sorted(requirements), "options": list(options),
            "no_deps": bool(no_deps)}


def env_id(spec):
    """The id of the env that `spec` (a JSON-able dict) defines."""
    text = json.dumps(spec, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def envs_dir(base_dir):
    return os.path.join(base_dir, ENVS)


def env_path(base_dir, env):
    """The directory of env `env`: the one way to name one, never outside envs/."""
    if not isinstance(env, str) or not ID_RE.fullmatch(env):
        raise EnvError(f"env {env!r} is not an env id (16 hex digits)")
    root = envs_dir(base_dir)
    path = os.path.join(root, env)
    if os.path.lexists(path) and (os.path.islink(path) or
                                  os.path.dirname(os.path.realpath(path)) != os.path.realpath(root)):
        raise EnvError(f"{path} is a link or leads outside {root}: remove it")
    return path


def site_packages(path):
    """The env's site-packages directories (lib/pythonX.Y/site-packages, lib64 too)."""
    found = glob.glob(os.path.join(glob.escape(path), "lib*", "python*", "site-packages"))
    return sorted({os.path.realpath(p) for p in found if os.path.isdir(p)})


def digest(path):
    """sha256 over the env's dist-info RECORD files, each with its dist-info's name."""
    outer = hashlib.sha256()
    records = []
    for site in site_packages(path):
        for record in glob.glob(os.path.join(glob.escape(site), "*.dist-info", "RECORD")):
            records.append((os.path.basename(os.path.dirname(record)), record))
    if not records:
        raise EnvError(f"{path} holds no installed distribution (no dist-info RECORD)")
    for name, record in sorted(records):
        try:
            data = read_bytes(record, RECORD_CAP)
        except OSError as exc:
            raise EnvError(f"cannot read {record}: {exc}") from None
        outer.update(name.encode("utf-8", "replace") + b"\0")
        outer.update(hashlib.sha256(data).digest())
    return "sha256:" + outer.hexdigest()


def read_marker(path):
    """The env's marker (a dict) when it is complete, else None."""
    try:
        marker = json.loads(read_bytes(os.path.join(path, MARKER), MARKER_CAP))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise EnvError(f"{os.path.join(path, MARKER)} cannot be read: {exc}") from None
    if not isinstance(marker, dict) or not isinstance(marker.get("digest"), str):
        raise EnvError(f"{os.path.join(path, MARKER)} is not an env marker (no digest)")
    return marker


def check(base_dir, env):
    """{exists, complete, marker, digest, intact} of one env, read-only."""
    path = env_path(base_dir, env)
    out = {"id": env, "path": path, "exists": os.path.isdir(path), "complete": False,
           "marker": None, "digest": None, "intact": False}
    if not out["exists"]:
        return out
    marker = read_marker(path)
    if marker is None:
        return out
    now = digest(path)
    out.update(complete=True, marker=marker, digest=now, intact=now == marker["digest"])
    return out


def disk_usage(paths):
    """Bytes the trees under `paths` take on disk (st_blocks), each inode counted once: files
    hardlinked between envs (or from uv's cache) are not counted twice. Symlinks not followed."""
    seen, total = set(), 0
    for top in paths:
        for root, dirs, files in os.walk(top):
            for name in dirs + files:
                try:
                    info = os.lstat(os.path.join(root, name))
                except OSError:
                    continue
                key = (info.st_dev, info.st_ino)
                if key in seen or stat.S_ISDIR(info.st_mode):
                    continue
                seen.add(key)
                total += info.st_blocks * 512
    return total


def listing(base_dir):
    """Ids of the env directories under envs/ (complete or not), sorted."""
    root = envs_dir(base_dir)
    try:
        names = os.listdir(root)
    except FileNotFoundError:
        return []
    return sorted(n for n in names if ID_RE.fullmatch(n) and os.path.isdir(os.path.join(root, n))
                  and not os.path.islink(os.path.join(root, n)))


def link_target(link):
    """The env id a link (the ml-env path users know) points at; None when nothing is there.

    A real directory there is not ours: EnvError, so that it is never taken over silently."""
    if os.path.islink(link):
        target = os.readlink(link).rstrip("/")
        env = os.path.basename(target)
        return env if ID_RE.fullmatch(env) and os.path.basename(os.path.dirname(target)) == ENVS \
            else target
    if os.path.lexists(link):
        raise EnvError(
            f"{link} is a real directory, not a link to an env (an ml-env made by hand, or changed "
            f"in place by an earlier version of this role): it is left as it is. Move it away to "
            f"keep it (mv {link} {link}.before-envs) or set sglang_venv to another path; the "
            "releases made before stay rollable (a rollback builds their env from their "
            "packages.txt)")
    return None


def switch_link(link, path):
    """Point `link` at `path` with one rename (a symlink made beside it, then moved)."""
    if not os.path.isabs(path):
        raise EnvError(f"{path} is not absolute")
    link_target(link)
    os.makedirs(os.path.dirname(link), mode=0o755, exist_ok=True)
    symlink_atomic(path, link)
