"""The sglang_progress action: a long module called slice after slice, its progress printed
as it comes, its last result returned (without the internal keys)."""

import importlib.util

import pytest
from support import ROOT

from ansible.errors import AnsibleActionFail

spec = importlib.util.spec_from_file_location(
    "sglang_progress_action", ROOT / "plugins" / "action" / "sglang_progress.py")
action = importlib.util.module_from_spec(spec)
spec.loader.exec_module(action)


class Task:
    def __init__(self, args):
        self.args = args
        self.async_val = 0
        self.check_mode = False
        self.diff = False


def run(args, answers, monkeypatch):
    calls, shown = [], []
    plugin = action.ActionModule.__new__(action.ActionModule)
    plugin._task = Task(args)
    monkeypatch.setattr(action.ActionBase, "run", lambda self, tmp=None, task_vars=None: {})
    answers = iter(answers)

    def execute(module_name, module_args, task_vars):
        calls.append((module_name, dict(module_args)))
        return next(answers)

    plugin._execute_module = execute
    monkeypatch.setattr(action.display, "display", shown.append)
    return plugin.run(task_vars={"inventory_hostname": "gpu1"}), calls, shown


def test_calls_until_done_handing_on_the_state_and_printing_progress(monkeypatch):
    answers = [
        {"pending": True, "progress": ["weights loading at 3.0 s"], "status": "s1",
         "resume": {"n": 1}},
        {"pending": True, "progress": [], "status": "waiting for 'weights loaded'",
         "resume": {"n": 2}},
        {"pending": False, "progress": ["server up at 9.0 s"], "changed": False, "model": "m"},
    ]
    result, calls, shown = run({"module": "sglang_ready", "args": {"url": "u"}, "slice": 2,
                                "heartbeat": 0}, answers, monkeypatch)
    assert [c[1]["resume"] for c in calls] == [{}, {"n": 1}, {"n": 2}]
    assert all(c == ("sglang_ready", {"url": "u", "slice": 2.0, "resume": c[1]["resume"]})
               for c in calls)
    assert shown == ["gpu1: weights loading at 3.0 s", "gpu1: s1",
                     "gpu1: waiting for 'weights loaded'", "gpu1: server up at 9.0 s"]
    assert result == {"changed": False, "model": "m"}


def test_the_status_waits_for_the_heartbeat(monkeypatch):
    answers = [{"pending": True, "progress": [], "status": "s", "resume": {}}] * 3 + [
        {"pending": False, "progress": []}]
    _, calls, shown = run({"module": "m", "args": {}, "heartbeat": 3600}, answers, monkeypatch)
    assert len(calls) == 4 and shown == []


def test_a_failure_ends_the_calls_and_is_returned(monkeypatch):
    answers = [{"pending": True, "progress": [], "status": "s", "resume": {"n": 1}},
               {"failed": True, "msg": "SGLang is not serving: unit crashed", "pending": False}]
    result, calls, _ = run({"module": "sglang_ready", "args": {}}, answers, monkeypatch)
    assert len(calls) == 2 and result["failed"] and "crashed" in result["msg"]


@pytest.mark.parametrize("args", [{"args": {}}, {"module": "m", "args": "x"},
                                  {"module": "m", "slice": 0}, {"module": "m", "slice": "abc"}])
def test_bad_options_are_refused(args, monkeypatch):
    with pytest.raises(AnsibleActionFail):
        run(args, [], monkeypatch)
