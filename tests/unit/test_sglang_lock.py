import json
import os

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


STALE = {"run_id": "killed", "owner": "carol@ctl", "since": 1000.0}


def test_exactly_one_of_many_breakers_wins(tmp_path):
    """Before: two runs breaking one stale lock both held it, or one crashed (FileNotFoundError)."""
    import threading

    for _ in range(20):
        (tmp_path / ".deploy.lock").write_text(json.dumps(STALE))
        start = threading.Barrier(6)
        outcomes = []

        def breaker(n):
            start.wait()
            try:
                outcomes.append(lock.acquire(str(tmp_path), f"run-{n}", stale_after=60,
                                             break_stale=True, now=lambda: 5000.0)[0])
            except lock.Locked:
                outcomes.append("refused")

        threads = [threading.Thread(target=breaker, args=(n,)) for n in range(6)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert outcomes.count(True) == 1 and outcomes.count("refused") == 5, outcomes
        holder = json.loads((tmp_path / ".deploy.lock").read_text())
        assert holder["run_id"].startswith("run-")
        (tmp_path / ".deploy.lock").unlink()
        assert sorted(p.name for p in tmp_path.iterdir()) == [".deploy.lock.guard"]


@pytest.mark.parametrize("content", ["[1, 2]", "null", '"x"', '{"since": "yesterday"}',
                                     '{"since": NaN}', '{"since": Infinity}', '{"since": true}',
                                     '{"run_id": ["a"], "owner": {"x": 1}, "since": 1000.0}'])
def test_wrong_typed_lock_content_blocks_then_breaks(tmp_path, content):
    """Before: a JSON list or null, a string or NaN `since` raised instead of answering."""
    path = tmp_path / ".deploy.lock"
    path.write_text(content)
    os.utime(path, (1000.0, 1000.0))
    with pytest.raises(lock.Locked, match="stale"):
        lock.acquire(str(tmp_path), "run-e", stale_after=60, now=lambda: 5000.0)
    assert lock.acquire(str(tmp_path), "run-e", stale_after=60, break_stale=True,
                        now=lambda: 5000.0)[0] is True


def test_dangling_symlink_lock_can_be_broken(tmp_path):
    """Before: a lock that is a dangling symlink was never stale (its age was always 0)."""
    os.symlink(tmp_path / "gone", tmp_path / ".deploy.lock")
    os.utime(tmp_path / ".deploy.lock", (1000.0, 1000.0), follow_symlinks=False)
    with pytest.raises(lock.Locked, match="stale .*unreadable lock file"):
        lock.acquire(str(tmp_path), "run-f", stale_after=60, now=lambda: 5000.0)
    assert lock.acquire(str(tmp_path), "run-f", stale_after=60, break_stale=True,
                        now=lambda: 5000.0)[0] is True
    assert not os.path.islink(tmp_path / ".deploy.lock")


def test_future_since_can_be_broken(tmp_path):
    """Before: a `since` in the future had a negative age: never stale, never breakable."""
    (tmp_path / ".deploy.lock").write_text(json.dumps({**STALE, "since": 9e9}))
    with pytest.raises(lock.Locked, match="stale .*in the future"):
        lock.acquire(str(tmp_path), "run-g", stale_after=60, now=lambda: 5000.0)
    assert lock.acquire(str(tmp_path), "run-g", stale_after=60, break_stale=True,
                        now=lambda: 5000.0)[0] is True


def test_a_lock_never_shows_half_written(tmp_path):
    lock.acquire(str(tmp_path), "run-h", "me")
    assert json.loads((tmp_path / ".deploy.lock").read_text())["run_id"] == "run-h"
    assert sorted(p.name for p in tmp_path.iterdir()) == [".deploy.lock", ".deploy.lock.guard"]


def test_a_run_that_takes_its_lock_again_renews_it_so_a_long_sweep_is_never_stale(tmp_path):
    # A tune sweep (budget 14400 s) holds the lock longer than its stale age (7200 s): it takes
    # it again before each candidate, and a deploy that breaks stale locks still finds it held.
    clock = {"now": 1000.0}
    assert lock.acquire(str(tmp_path), "sweep", "alice@ctl", now=lambda: clock["now"])[0]
    for step in range(1, 5):
        clock["now"] = 1000.0 + step * 3600
        taken, held = lock.acquire(str(tmp_path), "sweep", "alice@ctl", now=lambda: clock["now"])
        assert not taken and held["since"] == clock["now"]
    assert json.loads((tmp_path / ".deploy.lock").read_text())["since"] == 1000.0 + 4 * 3600
    with pytest.raises(lock.Locked, match="another deploy or rollback holds"):
        lock.acquire(str(tmp_path), "deploy", stale_after=7200, break_stale=True,
                     now=lambda: clock["now"] + 60)
    assert sorted(os.listdir(tmp_path)) == [".deploy.lock", ".deploy.lock.guard"]  # no temp left


def test_a_release_never_removes_the_lock_a_breaker_took_meanwhile(tmp_path, monkeypatch):
    """Round seven (issue 55): the release read the lock, then unlinked it, outside the guard.
    A run that broke the releasing run's lock as stale in between had its own lock removed, and
    a third run could then take the host beside it. Now the release holds the guard: the breaker
    waits, then takes the lock, and keeps it."""
    import threading

    base = str(tmp_path)
    assert lock.acquire(base, "slow", now=lambda: 1000.0)[0]
    real_read, inside, go, taken = lock._read, threading.Event(), threading.Event(), []

    def paused(path):
        held = real_read(path)
        if threading.current_thread().name == "releaser":
            inside.set()
            go.wait(30)
        return held

    monkeypatch.setattr(lock, "_read", paused)
    releaser = threading.Thread(target=lock.release, args=(base, "slow"), name="releaser")
    releaser.start()
    assert inside.wait(30), "the release did not read the lock"
    breaker = threading.Thread(target=lambda: taken.append(lock.acquire(
        base, "new", stale_after=7200, break_stale=True, now=lambda: 1000.0 + 7201)))
    breaker.start()
    breaker.join(2)  # the old code let it break and take the lock here
    go.set()
    releaser.join(30)
    breaker.join(30)
    assert taken and taken[0][0] is True
    assert json.loads((tmp_path / ".deploy.lock").read_text())["run_id"] == "new"
