import json

import pytest
from support import load_module

lock = load_module("sglang_lock")


def test_one_run_at_a_time(tmp_path):
    assert lock.acquire(str(tmp_path), "run-a", "alice@ctl")[0] is True
    assert lock.acquire(str(tmp_path), "run-a")[0] is False  # the same run may take it again
    with pytest.raises(lock.Locked, match="holds .*run run-a by alice@ctl since"):
        lock.acquire(str(tmp_path), "run-b", "bob@ctl")
    assert lock.release(str(tmp_path), "run-b")[0] is False  # not bob's to release
    assert lock.release(str(tmp_path), "run-a")[0] is True
    assert lock.acquire(str(tmp_path), "run-b")[0] is True


def test_stale_lock_is_detected_and_cleared_only_when_asked(tmp_path):
    (tmp_path / ".deploy.lock").write_text(json.dumps(
        {"run_id": "killed", "owner": "carol@ctl", "since": 1000.0}))
    with pytest.raises(lock.Locked, match="is stale .*sglang_lock_break_stale=true"):
        lock.acquire(str(tmp_path), "run-c", stale_after=60, now=lambda: 5000.0)
    taken, holder = lock.acquire(str(tmp_path), "run-c", stale_after=60, break_stale=True,
                                 now=lambda: 5000.0)
    assert taken and holder["run_id"] == "run-c"


def test_unreadable_lock_still_blocks(tmp_path):
    (tmp_path / ".deploy.lock").write_text("garbage")
    with pytest.raises(lock.Locked, match="unreadable lock file"):
        lock.acquire(str(tmp_path), "run-d")
