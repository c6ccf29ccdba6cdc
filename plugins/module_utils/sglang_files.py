"""Files the modules write: whole or not at all, and one writer at a time. Standard library only.

`write_atomic` puts a temp file, created safely (mkstemp: O_EXCL, 0600, a random name) in the
destination's own directory, in place of the destination in one rename; a module passes its
AnsibleModule.atomic_move, which keeps the destination's mode, owner and SELinux context.
`flock_guard` is the lock the deploy lock (sglang_lock) and the release changes (sglang_release)
take on their base directory.
"""

import contextlib
import fcntl
import os
import tempfile


def write_atomic(path, data, mode=None, prefix=None, move=None):
    """Replace `path` whole with `data` (bytes or text); on any failure (ENOSPC...) no temp
    file is left behind. `mode` is set on the new file before the move; `move(tmp, path)` is
    os.replace unless given (AnsibleModule.atomic_move in a module)."""
    directory, name = os.path.split(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=prefix or f".{name}.")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data.encode("utf-8") if isinstance(data, str) else data)
        if mode is not None:
            os.chmod(tmp, mode)
        (move or os.replace)(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


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


@contextlib.contextmanager
def flock_guard(path):
    """Hold an exclusive flock on `path` (created 0644 if missing, never through a symlink)
    for the block; the kernel lets it go when the process dies."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC,
                 0o644)
    with os.fdopen(fd, "ab") as guard:
        fcntl.flock(guard, fcntl.LOCK_EX)
        yield
