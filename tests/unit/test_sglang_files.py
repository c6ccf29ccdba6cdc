"""Module writes (issue 20): a temp file made safely in the destination's directory and moved in
place whole; one flock guard for the deploy lock and the release changes."""

import errno
import fcntl
import os
import re
from pathlib import Path

import pytest

from ansible_collections.sglang.deploy.plugins.module_utils import sglang_files as files
from ansible_collections.sglang.deploy.plugins.module_utils import sglang_release_store
from ansible_collections.sglang.deploy.plugins.modules import sglang_lock

PLUGINS = Path(__file__).resolve().parents[2] / "plugins"


def test_write_atomic_replaces_whole_with_the_mode_asked(tmp_path):
    dest = tmp_path / "state.json"
    dest.write_text("old")
    files.write_atomic(str(dest), "new", 0o600)
    assert dest.read_text() == "new" and dest.stat().st_mode & 0o777 == 0o600
    files.write_atomic(str(dest), b"\x89PNG")
    assert dest.read_bytes() == b"\x89PNG" and os.listdir(tmp_path) == ["state.json"]


def test_write_atomic_leaves_nothing_behind_when_the_move_fails(tmp_path):
    dest = tmp_path / "state.json"
    dest.write_text("old")

    def full(_src, _dst):
        raise OSError(errno.ENOSPC, "No space left on device")

    with pytest.raises(OSError, match="No space"):
        files.write_atomic(str(dest), "new", move=full)
    assert dest.read_text() == "old" and os.listdir(tmp_path) == ["state.json"]


def test_write_atomic_hands_the_move_to_the_caller(tmp_path):
    moved = []
    files.write_atomic(str(tmp_path / "chart.png"), b"png", move=lambda src, dst: moved.append(
        (os.path.dirname(src), os.path.basename(src).startswith(".chart.png."), dst)))
    assert moved == [(str(tmp_path), True, str(tmp_path / "chart.png"))]


def test_the_guard_excludes_another_holder_and_refuses_a_symlink(tmp_path):
    path = tmp_path / ".guard"
    with files.flock_guard(str(path)):
        with open(path, "ab") as other:
            with pytest.raises(BlockingIOError):
                fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
    with open(path, "ab") as other:
        fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)  # let go after the block
    (tmp_path / "link").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(OSError):
        with files.flock_guard(str(tmp_path / "link")):
            pass
    assert not (tmp_path / "elsewhere").exists()


def test_lock_and_release_share_the_guard():
    assert sglang_lock.flock_guard is files.flock_guard
    assert sglang_release_store.flock_guard is files.flock_guard


def test_no_hand_made_temp_name_in_the_plugins():
    found = [f"{path.relative_to(PLUGINS)}:{n}" for path in PLUGINS.rglob("*.py")
             for n, line in enumerate(path.read_text().splitlines(), 1)
             if re.search(r"""\+ *["']\.tmp["']|\{[a-z_\[\]"']+\}\.tmp["']""", line)]
    assert not found, found
