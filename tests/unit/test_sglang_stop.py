"""sglang_stop: the stop waits for SGLang's drain and says how many requests, how long, and any
it cut. systemd is stood in for by the three calls the module makes (its state, the stop, the
stop's Result); the server is the stand-in engine, whose running requests are set by hand."""

import threading

import pytest
from support import free_port, load_module

stop = load_module("sglang_stop")


class Systemd:
    """A unit that stops `after` seconds after it is asked to, with `result`; the stand-in's
    requests finish at that moment unless the stop is a kill."""

    def __init__(self, monkeypatch, engine, state="active", after=0.6, result="success"):
        self.state, self.result, self.asked = state, result, []
        monkeypatch.setattr(stop, "unit_state", lambda unit: {"ActiveState": self.state})
        monkeypatch.setattr(stop, "show", lambda unit, props: ({"Result": self.result}, None))

        def stop_no_block(unit):
            self.asked.append(unit)
            self.state = "deactivating"

            def drained():
                if result == "success":
                    engine.running = 0
                self.state = "inactive"
            threading.Timer(after, drained).start()
        monkeypatch.setattr(stop, "stop_no_block", stop_no_block)
        monkeypatch.setattr(stop, "POLL_S", 0.05)


def test_the_stop_waits_for_the_drain_and_says_how_many_and_how_long(standin, monkeypatch):
    url, engine = standin(**{"enable-metrics": True})
    engine.running = 3
    systemd = Systemd(monkeypatch, engine)
    out = stop.run({"service": "sglang", "url": url, "timeout": 60}, False)
    assert systemd.asked == ["sglang.service"]
    assert out["changed"] and out["in_flight"] == 3 and out["cut"] == 0
    assert out["result"] == "success" and out["seconds"] >= 0.5
    assert out["summary"].startswith("sglang.service stopped in ")
    assert "after SGLang finished the 3 requests in flight at the stop" in out["summary"]


def test_a_stop_systemd_ended_with_sigkill_says_the_requests_it_cut(standin, monkeypatch):
    url, engine = standin(**{"enable-metrics": True})
    engine.running = 2
    Systemd(monkeypatch, engine, result="timeout")
    out = stop.run({"service": "sglang", "url": url, "timeout": 60}, False)
    assert out["cut"] == 2 and out["result"] == "timeout"
    assert "2 requests cut; raise sglang_drain_timeout" in out["summary"]


def test_a_kill_without_metrics_cut_an_unknown_number(monkeypatch):
    Systemd(monkeypatch, engine=type("E", (), {})(), result="timeout")
    out = stop.run({"service": "sglang", "url": f"http://127.0.0.1:{free_port()}", "timeout": 60},
                   False)
    assert out["cut"] is None and "unknown requests cut" in out["summary"]


def test_without_metrics_the_counts_are_unknown_and_say_why(monkeypatch):
    Systemd(monkeypatch, engine=type("E", (), {})())
    url = f"http://127.0.0.1:{free_port()}"
    out = stop.run({"service": "sglang", "url": url, "timeout": 60}, False)
    assert out["in_flight"] is None and out["cut"] == 0  # systemd's Result says none was cut
    assert "counts unknown: " + url + "/metrics" in out["summary"]


def test_a_unit_that_is_not_running_is_left_and_check_mode_stops_nothing(standin, monkeypatch):
    url, engine = standin()
    systemd = Systemd(monkeypatch, engine, state="failed")
    out = stop.run({"service": "sglang", "url": url, "timeout": 60}, False)
    assert not out["changed"] and "was not running" in out["summary"] and systemd.asked == []
    systemd.state = "active"
    out = stop.run({"service": "sglang", "url": url, "timeout": 60}, True)
    assert out["changed"] and out["summary"].startswith("would stop sglang.service once its 0 requests")
    assert systemd.asked == []


def test_a_stop_that_never_ends_fails_at_the_bound(standin, monkeypatch):
    url, engine = standin()
    systemd = Systemd(monkeypatch, engine, after=3600)
    with pytest.raises(TimeoutError, match="still stopping after 1 s"):
        stop.run({"service": "sglang", "url": url, "timeout": 1}, False)
    systemd.state = "inactive"
