import pytest
from support import free_port, load_module
from sglang_standin.engine import Knobs

ready = load_module("sglang_ready")


def params(url, **kw):
    base = {"url": url, "unit": "", "timeout": 5, "poll": 0.05, "model": "",
            "prompt": "The capital of France is", "max_tokens": 8, "api_key": ""}
    return {**base, **kw}


def test_ready_when_tokens_come_back(standin):
    url, engine = standin()
    out = ready.wait_ready(params(url))
    assert out["model"] == "m"
    assert out["completion_tokens"] == 8
    assert engine.requests == 1


def test_api_key_is_sent_and_a_wrong_one_stops_at_once(standin):
    url, _ = standin(**{"api-key": "s3cret"})
    assert ready.wait_ready(params(url, api_key="s3cret"))["completion_tokens"] == 8
    with pytest.raises(ready.Failed, match="API key"):
        ready.wait_ready(params(url, api_key="wrong", model="m"))


def test_deadline_names_the_last_answer():
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens
    with pytest.raises(ready.Failed, match=r"not ready after 0.5 s; last answer: .*refused"):
        ready.wait_ready(params(url, timeout=0.5))


def test_health_alone_is_not_ready(standin):
    """/health answers 200 while the scheduler is broken (sglang#6624): not ready."""
    url, _ = standin(knobs=Knobs(broken_scheduler=True))
    with pytest.raises(ready.Failed, match="not ready after 0.3 s; last answer: "
                                           "/v1/completions answered 503"):
        ready.wait_ready(params(url, timeout=0.3))


def test_a_crashing_unit_fails_fast_without_waiting_for_the_deadline(standin, monkeypatch):
    states = iter([
        {"ActiveState": "activating", "SubState": "auto-restart", "Result": "exit-code",
         "NRestarts": 0},
    ])
    monkeypatch.setattr(ready, "unit_state", lambda unit, timeout=30: next(states))
    with pytest.raises(ready.Failed, match="crashes during start"):
        ready.wait_ready(params("http://127.0.0.1:1", unit="sglang", timeout=600))


@pytest.mark.parametrize(
    "state, message",
    [
        ({"ActiveState": "failed", "SubState": "failed", "Result": "exit-code"}, "is failed"),
        ({"ActiveState": "active", "SubState": "running", "Result": "success", "NRestarts": 2},
         "restarted 2 time"),
        ({"ActiveState": "inactive", "SubState": "dead", "Result": "success"}, "not running"),
    ],
)
def test_unit_states_that_will_not_become_ready(monkeypatch, state, message):
    monkeypatch.setattr(ready, "unit_state", lambda unit, timeout=30: {"NRestarts": 0, **state})
    with pytest.raises(ready.Failed, match=message):
        ready.check_unit("sglang")


def test_running_unit_passes(monkeypatch):
    monkeypatch.setattr(ready, "unit_state", lambda unit, timeout=30: {
        "ActiveState": "active", "SubState": "running", "Result": "success", "NRestarts": 0})
    ready.check_unit("sglang")


def test_restarts_before_the_wait_are_not_a_crash_of_this_start(monkeypatch):
    """systemd's NRestarts can still count a failed release's restarts after the rollback's
    stop and restart (a stop that met a pending automatic restart, seen under CPU load), or a
    restart by systemd weeks before a no-change run: only restarts during the wait count."""
    monkeypatch.setattr(ready, "unit_state", lambda unit, timeout=30: {
        "ActiveState": "active", "SubState": "running", "Result": "success", "NRestarts": 1})
    ready.check_unit("sglang", restarts_before=1)
    with pytest.raises(ready.Failed, match="restarted 1 time.* during this wait"):
        ready.check_unit("sglang", restarts_before=0)

