"""Start-up stages read from the journal, each with its own deadline."""

import pytest
from support import ROOT, load_module

from ansible_collections.sglang.deploy.plugins.module_utils.sglang_stages import NAMES, StageOverdue, StageWatch, reached_index

ready = load_module("sglang_ready")

# What the real sglang 0.5.23 logged under the unit in molecule/real (no GPU), then what a GPU
# host adds (the same source lines: model_runner.py, kv_cache_configurator.py, ...).
NO_GPU = [
    "[2026-11-30 13:52:07] server_args={'model_path': '/srv/models/tiny-qwen2', ...}",
    "[2026-11-30 13:52:07] No chat template found, defaulting to 'string' content format",
    "[2026-11-30 13:52:40] Init parallel begin.",
    "RuntimeError: Found no NVIDIA driver on your system.",
]
GPU = NO_GPU[:3] + [
    "[..] Load weight begin. avail mem=46.80 GB",
    "[..] Load weight end. type=Qwen3_5ForConditionalGeneration, dtype=torch.bfloat16, mem usage=25.9 GB",
    "[..] Memory pool end. avail mem=6.10 GB",
    "[..] Capture target decode CUDA graph begin. This can take up to several minutes.",
    "[..] The server is fired up and ready to roll!",
]


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def test_the_milestones_of_a_gpu_less_and_a_gpu_start():
    assert NAMES[reached_index(NO_GPU)] == "scheduler started"
    assert NAMES[reached_index(GPU)] == "server up"
    assert reached_index([]) == -1
    # Without CUDA graphs the capture line never shows: server up still counts.
    no_graph = [line for line in GPU if "Capture" not in line]
    assert NAMES[reached_index(no_graph)] == "server up"


def test_each_stage_has_its_own_deadline_from_the_one_before():
    clock, lines = Clock(), []
    watch = StageWatch({"weights loaded": 100, "server up": None}, lambda: lines, clock)
    lines += GPU[:4]  # weights loading
    clock.now = 30
    assert watch.check() == "weights loading"
    clock.now = 129  # 99 s into the weight load
    watch.check()
    clock.now = 131
    with pytest.raises(StageOverdue, match="'weights loaded' did not show within 100 s of "
                                           "weights loading"):
        watch.check()
    assert watch.summary() == ("reached: arguments resolved at 30.0 s, scheduler started at "
                               "30.0 s, weights loading at 30.0 s")


def test_a_stage_without_deadline_waits_for_the_overall_one():
    clock, lines = Clock(), list(GPU[:6])
    watch = StageWatch({"weights loaded": 10}, lambda: lines, clock)
    clock.now = 10_000
    assert watch.check() == "KV cache allocated"
    clock.now = 20_000
    assert watch.check() == "KV cache allocated"


def test_unknown_stage_names_are_refused():
    with pytest.raises(ValueError, match="unknown readiness stages"):
        StageWatch({"weights": 10}, list, Clock())


def test_the_default_deadlines_name_known_stages():
    import yaml
    defaults = yaml.safe_load((ROOT / "roles/sglang/defaults/main.yml").read_text())
    assert set(defaults["sglang_ready_stage_timeouts"]) == set(NAMES)


def test_the_ready_module_fails_with_the_stage_that_is_overdue(monkeypatch):
    clock, lines = Clock(), list(NO_GPU[:1])
    watch = StageWatch({"scheduler started": 5}, lambda: lines, clock)

    def unit_check(_unit):
        clock.now += 3
        try:
            watch.check()
        except StageOverdue as exc:
            raise ready.Failed(str(exc)) from exc

    def never_ready(*_args):
        raise ready.NotReady("connection refused")

    monkeypatch.setattr(ready, "try_generate", never_ready)
    params = {"url": "http://x", "unit": "sglang", "timeout": 100, "poll": 0, "model": "",
              "prompt": "p", "max_tokens": 1, "api_key": ""}
    with pytest.raises(ready.Failed, match="'scheduler started' did not show within 5 s"):
        ready.wait_ready(params, clock=clock, sleep=lambda _s: None, unit_check=unit_check)


def test_a_wait_in_slices_goes_on_where_the_last_call_stopped():
    """Each slice is another process: the state it hands on keeps the stages and deadlines."""
    clock, lines = Clock(), list(GPU[:4])
    first = StageWatch({"weights loaded": 100}, lambda: lines, clock)
    clock.now = 10
    first.check()
    clock.now = 60
    second = StageWatch({"weights loaded": 100}, lambda: lines, clock).restore(first.state())
    assert second.waiting() == ("waiting for 'weights loaded' after weights loading "
                                "(50 s ago), 60 s in all")
    second.check()
    assert second.reached == first.reached  # nothing counted twice
    clock.now = 111  # 101 s after weights loading was first seen, in the first call
    with pytest.raises(StageOverdue, match="'weights loaded' did not show within 100 s"):
        second.check()


def test_the_ready_module_returns_pending_at_the_end_of_a_slice(monkeypatch):
    monkeypatch.setattr(ready, "try_generate", lambda *a: (_ for _ in ()).throw(
        ready.NotReady("/health answered 503")))
    clock = Clock()

    def sleep(seconds):
        clock.now += seconds

    params = {"url": "http://x", "unit": "", "timeout": 100, "poll": 1, "model": "",
              "prompt": "p", "max_tokens": 1, "api_key": ""}
    with pytest.raises(ready.Pending, match="503"):
        ready.wait_ready(params, clock=clock, sleep=sleep, start=0, until=5)
    assert clock.now == 5
    # The overall deadline counts from the start of the first slice, not of this one.
    with pytest.raises(ready.Failed, match="not ready after 100 s"):
        ready.wait_ready(params, clock=clock, sleep=sleep, start=-95, until=50)


def test_through_main_the_stages_come_slice_by_slice_then_tokens(standin, monkeypatch):
    """sglang_ready's main() as the sglang_progress action calls it: pending with the stages
    of this slice (those seen at once on one line) and a resume state, then ready."""
    import json

    from support import free_port, run_main

    from ansible_collections.sglang.deploy.plugins.module_utils import sglang_stages, sglang_systemd

    journal = list(GPU[:3])
    monkeypatch.setattr(sglang_stages, "invocation_lines", lambda unit, timeout=None: lambda: list(journal))
    monkeypatch.setattr(sglang_systemd, "unit_state", lambda unit, timeout=30: {
        "ActiveState": "active", "SubState": "running", "Result": "success", "NRestarts": 0})
    args = {"url": f"http://127.0.0.1:{free_port()}", "unit": "sglang", "timeout": 60,
            "poll": 0.05, "slice": 0.2, "stage_timeouts": {"server up": 30}}
    first = json.loads(run_main(ROOT / "plugins" / "modules" / "sglang_ready.py", args)[0])
    assert first["pending"] and first["progress"] == [
        "arguments resolved, scheduler started at 0.0 s"]
    assert first["status"].startswith("waiting for 'weights loading' after scheduler started")
    journal += GPU[3:]
    url, _ = standin()
    last = json.loads(run_main(ROOT / "plugins" / "modules" / "sglang_ready.py",
                               {**args, "url": url, "resume": first["resume"]})[0])
    assert not last["pending"] and last["completion_tokens"] == 8
    assert last["progress"][0].startswith("weights loading, weights loaded, KV cache allocated, "
                                          "CUDA graph capture, server up at ")
    assert last["progress"][-1].startswith("tokens after ")
    assert [s["stage"] for s in last["stages"]] == NAMES
