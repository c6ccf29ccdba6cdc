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
  changes it. The tree (`tree`) is what an in-place edit changes: every file's size, mtime,
  ctime, inode and mode, and the bytecode the build compiled, grouped per top-level package,
  recorded in the marker and read again before a switch (a walk of lstat calls, no file is
  read: see docs/design.md for its cost).
- Envs share no file: uv links them from its cache by reflink where the filesystem has them
  and by copy elsewhere (`link_mode`); a hardlink would make an edit of one env an edit of
  every env and of the cache. `hardlink` stays available, asked by name, for hosts short of
  disk, and the tree check then names every env an edit reached.
- Every directory under envs/ is complete (its marker) or being built under the envs lock;
  what a cut build leaves (a directory without marker, an env moved aside for a rebuild, a
  half-removed tree in `.trash`) is put back or removed by `recover`, which every build, switch
  and cleanup runs first under that lock.
- Disk usage counts a hardlinked file once; cleanup reclaims the cache's share of the envs no
  release names (`reclaim_cache`).

Standard library only: it runs on the host, inside modules.
"""

import concurrent.futures
import contextlib
import glob
import hashlib
import json
import multiprocessing
import os
import re
import shutil
import subprocess
import time

from ansible_collections.sglang.deploy.plugins.module_utils.sglang_files import (
    discard, empty_trash, flock_guard, fsync_dir, symlink_atomic)
from ansible_collections.sglang.deploy.plugins.module_utils.sglang_packages import canonical
from ansible_collections.sglang.deploy.plugins.module_utils.sglang_read import read_bytes

ENVS = "envs"
MARKER = ".sglang-env.json"
TRASH = ".trash"
LOCK = ".lock"
UV_CACHE = ".uv-cache"
ID_RE = re.compile(r"[0-9a-f]{16}")
ASIDE_RE = re.compile(r"([0-9a-f]{16})\.replaced-[0-9]+")
LINK_MODES = ("auto", "clone", "copy", "hardlink")
FICLONE = 0x40049409  # linux/fs.h: _IOW(0x94, 9, int)
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
        # cwd "/": `-c` puts the working directory first on the import path.
        proc = subprocess.run([found, "-c", PYTHON_PROBE], capture_output=True, check=False,
                              timeout=timeout, stdin=subprocess.DEVNULL, cwd="/")
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


def _group(rel):
    """The group a file of the env counts in: its top-level package under site-packages, or
    its first two path parts elsewhere (bin/python, include/...)."""
    head, sep, rest = rel.partition("/site-packages/")
    if sep:
        return f"{head}/site-packages/{rest.split('/', 1)[0]}"
    return "/".join(rel.split("/", 2)[:2])


def _dir_group(rel):
    """The group of every file directly in the directory `rel` (_group of each), or None where
    it depends on the file's name (the top, its first level, site-packages itself)."""
    head, sep, rest = (rel + "/").partition("/site-packages/")
    if sep:
        return f"{head}/site-packages/{rest.split('/', 1)[0]}" if rest else None
    parts = rel.split("/", 2) if rel else []
    return "/".join(parts[:2]) if len(parts) >= 2 else None


def _name(entry):
    return entry.name


# The tree's form: 2 counts each file's ctime (an edit with its mtime put back still moves it)
# and the bytecode the build compiled; a marker without `tree_version` was recorded in form 1
# (no ctime, no __pycache__) and is read again in that form.
TREE_VERSION = 2
# Processes that read an env's packages (the full install's 110,000 files: 0.86 s in one on the
# demo host, 0.56 s in two), and the packages below which one process reads them all.
TREE_WORKERS = min(8, os.cpu_count() or 1)
TREE_PARALLEL_MIN = 32


def _read(path, rel, at_ns, ctime, groups, packages=None):
    """Add the entries under `rel` to `groups` ({group: sha256 object}), depth first, each
    directory's entries sorted by name (one call a directory, not a generator step a file: the
    env's ~110,000 files are read on every deploy). With `packages` (a list), the directories
    under site-packages are not read but added to it: each is one group of its own."""
    with os.scandir(os.path.join(path, rel)) as it:
        entries = sorted(it, key=_name)
    in_group = _dir_group(rel)
    cached = os.path.basename(rel) == "__pycache__"
    site = packages is not None and in_group is None and os.path.basename(rel) == "site-packages"
    for entry in entries:
        name = f"{rel}/{entry.name}" if rel else entry.name
        if entry.is_dir(follow_symlinks=False):
            if site:
                packages.append(name)
            else:
                _read(path, name, at_ns, ctime, groups, packages)
            continue
        what = _line(name, entry, cached, at_ns, ctime)
        if what is None:
            continue
        group = in_group or _group(name)
        digest = groups.get(group)
        if digest is None:
            digest = groups[group] = hashlib.sha256()
        digest.update(what.encode("utf-8", "surrogateescape"))
    return groups


def _line(name, entry, cached, at_ns, ctime):
    """What the tree counts of one entry that is not a directory (None: not counted)."""
    if name == MARKER:
        return None
    if entry.is_symlink():
        return f"{name}\0l {os.readlink(entry.path)}\n"
    info = entry.stat(follow_symlinks=False)
    if cached and (at_ns is None or info.st_ctime_ns > at_ns):
        return None
    stamp = f" {info.st_ctime_ns}" if ctime or cached else ""
    return f"{name}\0f {info.st_size} {info.st_mtime_ns} {info.st_ino} {info.st_mode:o}{stamp}\n"


def _hex(groups):
    return {group: h.hexdigest() for group, h in groups.items()}


def _package(job):
    """{group: hex} of one package directory (job: path, rel, at_ns, ctime)."""
    path, rel, at_ns, ctime = job
    return _hex(_read(path, rel, at_ns, ctime, {}))


def tree(path, at_ns=None, ctime=False):
    """{group: sha256} over what an in-place edit changes: each entry's name, kind, size, mtime
    (ns), inode and mode (symlinks: their target), lstat only, nothing read; with `ctime` its
    ctime too (not for hardlinked envs: linking the same file into another env moves it).
    `__pycache__`: with `at_ns` (when the build recorded the tree) the bytecode that existed
    then, so a .pyc replaced afterwards (its ctime is later) is missed from the set and named,
    while one Python writes later for a module the build did not compile is not counted; without
    it, none (form 1). Not counted: the marker."""
    packages = []
    groups = _hex(_read(path, "", at_ns, ctime, {}, packages))
    jobs = [(path, rel, at_ns, ctime) for rel in packages]
    if TREE_WORKERS > 1 and len(jobs) >= TREE_PARALLEL_MIN:
        # A package's files are all of its group and no other's: each package is read on its
        # own, in processes (the GIL would serialise threads), the digests the same.
        with concurrent.futures.ProcessPoolExecutor(
                TREE_WORKERS, mp_context=multiprocessing.get_context("fork")) as pool:
            for found in pool.map(_package, jobs, chunksize=4):
                groups.update(found)
    else:
        for job in jobs:
            groups.update(_package(job))
    return dict(sorted(groups.items()))


def record_tree(path, link_mode):
    """What a build records of its tree (the marker's keys): the form, when, the groups."""
    at_ns = time.time_ns()
    return {"tree_version": TREE_VERSION, "tree_at_ns": at_ns,
            "tree": tree(path, at_ns, ctime=link_mode != "hardlink")}


def old_form(marker):
    """Whether `marker` recorded its tree in an older form than TREE_VERSION (form 1: an older
    release of this project), in which a same-size edit with its mtime put back, or a replaced
    .pyc, is not seen."""
    return marker.get("tree_version") != TREE_VERSION or not isinstance(marker.get("tree"), dict)


def rerecorded(path, marker):
    """`marker` with its tree recorded again in today's form: done once, by the build step, for
    an env that is intact in the form it was recorded in (what changed before then cannot be
    told; what changes after is seen)."""
    return dict(marker, **record_tree(path, marker.get("link_mode", "copy")))


def tree_again(path, marker):
    """The tree read again in the form its marker recorded it."""
    if marker.get("tree_version") == TREE_VERSION and isinstance(marker.get("tree_at_ns"), int):
        return tree(path, marker["tree_at_ns"], ctime=marker.get("link_mode") != "hardlink")
    return tree(path)


def tree_changes(recorded, now):
    """The groups (top-level packages) whose files differ, sorted."""
    return sorted(g for g in set(recorded) | set(now) if recorded.get(g) != now.get(g))


def check(base_dir, env):
    """{exists, complete, marker, digest, intact, changed} of one env, read-only: intact when
    its RECORDs (what was installed) and its tree (what was edited in place, when the marker
    records it) are as they were built. `changed` names the packages whose files differ."""
    path = env_path(base_dir, env)
    out = {"id": env, "path": path, "exists": os.path.isdir(path), "complete": False,
           "marker": None, "digest": None, "intact": False, "changed": []}
    if not out["exists"]:
        return out
    marker = read_marker(path)
    if marker is None:
        return out
    now = digest(path)
    recorded = marker.get("tree")
    changed = tree_changes(recorded, tree_again(path, marker)) if isinstance(recorded, dict) else []
    out.update(complete=True, marker=marker, digest=now, changed=changed,
               intact=now == marker["digest"] and not changed)
    return out


def refusal(state):
    """Why an env that is not intact is refused, naming what changed."""
    what = (f"files changed in place in {', '.join(state['changed'][:8])}"
            + (f" and {len(state['changed']) - 8} more" if len(state["changed"]) > 8 else "")
            if state["changed"] else
            f"its digest is {state['digest']}, it was built as {state['marker']['digest']} "
            "(something was installed or removed in it)")
    return f"env {state['id']} ({state['path']}) changed since it was built: {what}"


def link_mode(base_dir, asked="auto"):
    """How uv puts files into an env: `asked`, or for `auto` reflinks (`clone`) where the envs'
    filesystem makes them (probed with FICLONE on two files of its own) and copies elsewhere:
    uv's own `clone` falls back to hardlinks on ext4, which would share every edit."""
    if asked != "auto":
        return asked
    import fcntl
    import tempfile
    root = envs_dir(base_dir)
    os.makedirs(root, mode=0o755, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=root, prefix=".probe.") as probe:
        src, dst = os.path.join(probe, "a"), os.path.join(probe, "b")
        with open(src, "wb") as fh:
            fh.write(b"reflink probe\n")
        with open(src, "rb") as a, open(dst, "wb") as b:
            try:
                fcntl.ioctl(b.fileno(), FICLONE, a.fileno())
            except OSError:
                return "copy"
    return "clone"


def lock(base_dir):
    """The envs lock: builds, recovery and removals of envs/ happen one at a time."""
    os.makedirs(envs_dir(base_dir), mode=0o755, exist_ok=True)
    return flock_guard(os.path.join(envs_dir(base_dir), LOCK))


def trash_dir(base_dir):
    return os.path.join(envs_dir(base_dir), TRASH)


def recover(base_dir):
    """Finish or undo what a cut run left under envs/ (call it under `lock`): an env moved aside
    for a rebuild is put back unless the rebuild finished; a directory without marker (a build
    cut short) is removed; the trash is emptied. Returns what it did, one line each."""
    root, done = envs_dir(base_dir), []
    try:
        names = sorted(os.listdir(root))
    except FileNotFoundError:
        return done
    done += [f"removed {name} (a removal cut short)" for name in empty_trash(trash_dir(base_dir))]
    for name in (n for n in names if n.startswith(".probe.")):
        shutil.rmtree(os.path.join(root, name), ignore_errors=True)
        done.append(f"removed {name} (a filesystem probe cut short)")
    for name in names:
        aside = ASIDE_RE.fullmatch(name)
        if not aside:
            continue
        path = os.path.join(root, aside.group(1))
        if os.path.isdir(path) and read_marker(path) is not None:
            discard(os.path.join(root, name), trash_dir(base_dir))
            done.append(f"removed {name} (its rebuild finished)")
            continue
        discard(path, trash_dir(base_dir))
        os.rename(os.path.join(root, name), path)
        fsync_dir(root)
        done.append(f"put {name} back as {aside.group(1)} (its rebuild was cut short)")
    for env in listing(base_dir):
        if read_marker(env_path(base_dir, env)) is None:
            discard(env_path(base_dir, env), trash_dir(base_dir))
            done.append(f"removed {env} (a build cut short)")
    return done


def _dist_of(dist_info):
    """(canonical name, version) of a `name-version.dist-info` directory name, or None."""
    stem = dist_info[:-len(".dist-info")]
    name, sep, version = stem.rpartition("-")
    return (canonical(name), version.lower()) if sep and name else None


def reclaim_cache(base_dir, keep, check_mode=False):
    """Remove the entries of uv's cache (unpacked wheels, `archive-v0/<id>/`) whose
    distributions no kept env holds; `keep` is the kept envs' `name==version` lines. Returns the
    entries removed.

    uv's index (`wheels-v*/`: a pointer file per wheel naming its archive's id) goes first: a
    pointer left to a removed archive made uv "prepare" the wheel from the cache and fail to
    read it, so an env removed with its entries could not be built again (make crash-tasks, an
    upgrade move back to a version cleaned up). Without its pointer uv fetches the wheel again
    from the index or wheelhouse; a cut between the two leaves an archive nothing points at."""
    wanted = {(canonical(line.split("==")[0]), line.split("==", 1)[1].lower())
              for line in keep if "==" in line}
    cache = os.path.join(envs_dir(base_dir), UV_CACHE)
    doomed = [archive for archive in sorted(glob.glob(os.path.join(glob.escape(cache),
                                                                   "archive-v*", "*")))
              if _unwanted(archive, wanted)]
    if doomed and not check_mode:
        for pointer in _pointers_to(cache, {os.path.basename(a) for a in doomed}):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(pointer)
        for archive in doomed:
            discard(archive, trash_dir(base_dir))
    return [os.path.relpath(a, envs_dir(base_dir)) for a in doomed]


def _unwanted(archive, wanted):
    """Whether `archive` (an unpacked wheel of uv's cache) holds distributions, none wanted."""
    if not os.path.isdir(archive) or os.path.islink(archive):
        return False
    dists = {_dist_of(n) for n in os.listdir(archive) if n.endswith(".dist-info")} - {None}
    return bool(dists) and not dists & wanted


# uv's pointer files are small (an HTTP cache policy and an archive id); a bigger file is data.
POINTER_MAX_BYTES = 1 << 20


def _pointers_to(cache, ids):
    """The files of uv's wheel index that name one of the archive `ids`, with their siblings of
    the same stem (the .lock and .msgpack beside a pointer)."""
    found = set()
    needles = [i.encode() for i in ids]
    for index in glob.glob(os.path.join(glob.escape(cache), "wheels-v*")):
        for root, _dirs, files in os.walk(index):
            for name in files:
                if _names_one(os.path.join(root, name), needles):
                    stem = os.path.splitext(name)[0]
                    found |= {os.path.join(root, f) for f in files
                              if os.path.splitext(f)[0] == stem}
    return sorted(found)


def _names_one(path, needles):
    try:
        if os.path.islink(path) or os.path.getsize(path) > POINTER_MAX_BYTES:
            return False
        with open(path, "rb") as handle:
            data = handle.read()
    except OSError:
        return False
    return any(n in data for n in needles)


def disk_usage(paths):
    """Bytes the trees under `paths` take on disk (st_blocks, directories included, as du
    counts them), each inode counted once: files hardlinked between envs (or from uv's cache)
    are not counted twice. Symlinks not followed."""
    seen, total = set(), 0
    for top in paths:
        for root, dirs, files in os.walk(top):
            for name in dirs + files:
                try:
                    info = os.lstat(os.path.join(root, name))
                except OSError:
                    continue
                key = (info.st_dev, info.st_ino)
                if key in seen:
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
    """The env id a link (the ml-env path users know) leads to, through `current/env` or
    straight to envs/<id>; its target when it leads elsewhere; None when nothing is there.

    A real directory there is not ours: EnvError, so that it is never taken over silently."""
    if os.path.islink(link):
        target = os.path.realpath(link)
        env = os.path.basename(target)
        return env if ID_RE.fullmatch(env) and os.path.basename(os.path.dirname(target)) == ENVS \
            else os.readlink(link)
    if os.path.lexists(link):
        raise EnvError(
            f"{link} is a real directory, not a link to an env (an ml-env made by hand, or changed "
            f"in place by an earlier version of this role): it is left as it is. Move it away to "
            f"keep it (mv {link} {link}.before-envs) or set sglang_venv to another path; the "
            "releases made before stay rollable (a rollback builds their env from their "
            "packages.txt)")
    return None


def switch_link(link, path):
    """Point `link` at `path` with one rename (a symlink made beside it, then moved); the temp
    links a cut switch left beside it (`.<name>.<pid>`) are removed first."""
    if not os.path.isabs(path):
        raise EnvError(f"{path} is not absolute")
    link_target(link)
    parent, name = os.path.split(link)
    os.makedirs(parent, mode=0o755, exist_ok=True)
    temp = re.compile(re.escape(f".{name}.") + "[0-9]+")
    for stale in os.listdir(parent):
        if temp.fullmatch(stale) and os.path.islink(os.path.join(parent, stale)):
            os.unlink(os.path.join(parent, stale))
    symlink_atomic(path, link)
