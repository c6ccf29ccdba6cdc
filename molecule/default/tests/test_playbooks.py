"""The read-only entry points, run against the deployed host with ansible-runner."""

import os
import sys

sys.path.insert(0, os.path.join(os.environ["MOLECULE_PROJECT_DIRECTORY"], "tests"))
from support.runner import play  # noqa: E402


def debug_messages(events):
    return [e["event_data"]["res"]["msg"] for e in events
            if e["event"] == "runner_on_ok" and "msg" in (e["event_data"].get("res") or {})
            and e["event_data"].get("task_action") in ("ansible.builtin.debug", "debug")]


def test_smoke_playbook_measures_and_changes_nothing(host):
    before = host.check_output("ls -1 /opt/sglang/releases; cat /opt/sglang/current/manifest.json")
    out = play("playbooks/smoke.yml")
    assert out["status"] == "successful", out["msg"]
    assert out["changed"] == 0
    report = "\n".join(debug_messages(out["events"]))
    assert "verification: OK" in report and "smoke: OK" in report
    # The baseline is the serving release's own last smoke test.
    assert "no previous good release" not in report
    assert host.check_output("ls -1 /opt/sglang/releases; cat /opt/sglang/current/manifest.json") == before


def test_doctor_reports_the_whole_investigation(host):
    out = play("playbooks/doctor.yml")
    assert out["status"] == "successful", out["msg"]
    assert out["changed"] == 0
    report = "\n".join(debug_messages(out["events"]))
    for line in ("sglang 0.5.23 at http://127.0.0.1:30000, model /srv/models/Qwen3.6-27B "
                 "(Qwen3_5ForConditionalGeneration)",
                 "Qwen3_5ForConditionalGeneration is not in piecewise_cuda_graph_disabled_model_archs "
                 "(sglang 0.5.23, sglang/srt/configs/model_config.py:2475)",
                 "journal decode_graph_captured x1",
                 "verification: OK", "tok/s/user"):
        assert line in report, line
