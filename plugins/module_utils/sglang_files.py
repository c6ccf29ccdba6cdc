"""Files the modules write: whole or not at all, and one writer at a time. Standard library only.

`write_atomic` puts a temp file, created safely (mkstemp: O_EXCL, 0600, a random name) in the
destination's own directory, in place of the destination in one rename; a module passes its
AnsibleModule.atomic_move, which keeps the destination's mode, owner and SELinux context.
`flock_guard` is the lock the deploy lock (sglang_lock) and the release changes (sglang_release)
take on their base directory. `discard` removes a tree so that a cut leaves no half of it where
it was: renamed into a trash directory first (one rename), emptied after; `empty_trash` finishes
what a cut run left there.

Durability: the data is flushed (fsync) before the rename that publishes it, and the directory
after it, so a power cut never shows a published name over unwritten data (the failure the
crash-consistency studies ALICE and CrashMonkey found most often).
"""

import contextlib
import fcntl
import os
import shutil
import tempfile


def fsync_dir(path):
    """Flush a directory's entries (a rename, a new link) to disk; best effort where the
    filesystem refuses directory fsync."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def write_atomic(path, data, mode=None, prefix=None, move=None):
    """Replace `path` whole with `data` (bytes or text); on any failure (ENOSPC...) no temp
    file is left behind. `mode` is set on the new file before the move; `move(tmp, path)` is
    os.replace unless given (AnsibleModule.atomic_move in a module)."""
    directory, name = os.path.split(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=prefix or f".{name}.")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data.encode("utf-8") if isinstance(data, str) else data)
            handle.flush()
            os.fsync(handle.fileno())
        if mode is not None:
            os.chmod(tmp, mode)
        (move or os.replace)(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    fsync_dir(directory)


def symlink_atomic(target, link):
    """Point `link` at `target` in one rename: a symlink made beside it (a per-process name),
    then moved over it; on any failure no temp link is left behind."""
    tmp = os.path.join(os.path.dirname(link), f".{os.path.basename(link)}.{os.getpid()}")
    try:
        if os.path.lexists(tmp):
            os.unlink(tmp)
        os.symlink(target, tmp)
        os.replace(tmp, link)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    fsync_dir(os.path.dirname(link) or ".")


def discard(path, trash):
    """Remove the tree `path`: renamed into `trash` (same filesystem) in one step, then removed.
    Cut at any point, `path` is either whole or gone, and what is left sits in `trash`."""
    if not os.path.lexists(path):
        return
    os.makedirs(trash, mode=0o700, exist_ok=True)
    doomed = tempfile.mkdtemp(dir=trash, prefix=f"{os.path.basename(path)}.")
    os.rename(path, os.path.join(doomed, "tree"))
    fsync_dir(os.path.dirname(path))
    shutil.rmtree(doomed)
    with contextlib.suppress(OSError):
        os.rmdir(trash)


def empty_trash(trash):
    """Remove what a cut `discard` left in `trash`; the names it removed."""
    try:
        names = sorted(os.listdir(trash))
    except FileNotFoundError:
        return []
    for name in names:
        shutil.rmtree(os.path.join(trash, name))
    with contextlib.suppress(OSError):
        os.rmdir(trash)
    return names


@contextlib.contextmanager
def flock_guard(path):
    """Hold an exclusive flock on `path` (created 0644 if missing, never through a symlink)
    for the block; the kernel lets it go when the process dies."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC,
                 0o644)
    with os.fdopen(fd, "ab") as guard:
        fcntl.flock(guard, fcntl.LOCK_EX)
        yield
