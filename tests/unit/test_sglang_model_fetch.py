"""sglang_model_fetch through main(), with its worker run as a real detached process against
a stand-in huggingface_hub (tests/fakes/hub) that serves a directory instead of the hub."""

import json
import os
import sys
import time

import pytest
from support import ROOT, run_main

MODULE = ROOT / "plugins" / "modules" / "sglang_model_fetch.py"
COMMIT = "0123456789abcdef0123456789abcdef01234567"
TOKEN = "hf_SecretToken" + "Q7" * 10


@pytest.fixture
def hub(tmp_path, monkeypatch):
    """A hub holding owner/model at COMMIT (config, tokenizer, 3 MB of weights), a ml-env
    whose python imports the stand-in, and the arguments of a fetch."""
    root = tmp_path / "hub"
    commit = root / "owner--model" / COMMIT
    commit.mkdir(parents=True)
    (commit / "config.json").write_text(json.dumps({"architectures": ["Qwen3ForCausalLM"]}))
    (commit / "tokenizer.json").write_text("{}")
    (commit / "model.safetensors").write_bytes(os.urandom(3 << 20))
    (root / "owner--model" / "refs.json").write_text(json.dumps({"main": COMMIT}))
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    # The ml-env's Python, with the fake hub installed in it: the run's own PYTHONPATH never
    # reaches the worker (it runs as root; test_cwd_imports.py).
    (venv / "bin" / "python").write_text(
        f"#!/bin/sh\nPYTHONPATH={ROOT / 'tests' / 'fakes' / 'hub'} exec {sys.executable} \"$@\"\n")
    (venv / "bin" / "python").chmod(0o755)
    monkeypatch.setenv("FAKE_HUB_DIR", str(root))
    monkeypatch.setenv("FAKE_HUB_DELAY", "0")
    args = {"repo": "owner/model", "revision": COMMIT, "local_dir": str(tmp_path / "model"),
            "venv": str(venv), "state_dir": str(tmp_path / "state"), "min_free_gb": 0,
            "timeout": 60}
    return args, commit


def call(args, check_mode=False):
    text, code = run_main(MODULE, args, check_mode)
    assert TOKEN not in text and TOKEN[3:11] not in text
    return json.loads(text), code


def until_done(args, slice_s=0.3):
    """Call the module slice after slice, as the sglang_progress action does."""
    resume, progress, statuses = {}, [], []
    for _ in range(200):
        out, _ = call({**args, "slice": slice_s, "resume": resume})
        progress += out.get("progress", [])
        if out.get("failed") or not out.get("pending"):
            return out, progress, statuses
        statuses.append(out["status"])
        resume = out["resume"]
    raise AssertionError("the fetch never ended")


def test_fetches_in_slices_with_progress_then_changes_nothing(hub, monkeypatch):
    args, commit = hub
    monkeypatch.setenv("FAKE_HUB_DELAY", "0.25")  # ~0.75 s for the weights: a few slices
    out, progress, statuses = until_done(args)
    assert out["changed"] and out["fetched"] and out["sha"] == COMMIT and out["files"] == 3
    model = os.path.join(args["local_dir"], "model.safetensors")
    assert open(model, "rb").read() == (commit / "model.safetensors").read_bytes()
    assert any("3 files, 3.1 MB, 3.1 MB to download" in line for line in progress), progress
    assert progress[-1].startswith("fetched 3 files")
    assert statuses and all(s.startswith("fetching owner/model@0123456789ab") for s in statuses)
    again, _ = call({**args, "slice": 0.3})
    assert not again["changed"] and again["fetched"] and not again["pending"]


def test_a_re_run_attaches_to_the_running_fetch(hub, monkeypatch):
    args, _ = hub
    monkeypatch.setenv("FAKE_HUB_DELAY", "0.3")
    first, _ = call({**args, "slice": 0.2})
    assert first["pending"]
    pid = open(os.path.join(args["state_dir"], os.listdir(args["state_dir"])[0], "pid")).read()
    out, _, _ = until_done(args)  # a new play: no resume state
    assert out["fetched"]
    work = os.path.join(args["state_dir"], os.listdir(args["state_dir"])[0])
    assert open(os.path.join(work, "pid")).read() == pid  # no second worker


def test_not_enough_disk_is_refused_before_the_download(hub):
    args, _ = hub
    out, code = call({**args, "min_free_gb": 10 ** 6})
    assert out["failed"] and code == 1
    assert "GB free" in out["msg"] and "min_free_gb" in out["msg"]
    assert not os.path.exists(os.path.join(args["local_dir"], "model.safetensors"))


def test_a_revision_the_hub_does_not_have_fails_with_its_answer(hub):
    args, _ = hub
    out, _ = call({**args, "revision": "f" * 40})
    assert out["failed"] and "Revision Not Found" in out["msg"]


def test_the_token_reaches_the_hub_and_never_the_output(hub):
    args, commit = hub
    (commit.parent / "token").write_text(TOKEN)
    out, _ = call({**args, "token": TOKEN})
    assert out["fetched"]
    os.unlink(os.path.join(args["local_dir"], ".sglang-fetch.json"))
    wrong = TOKEN[:-4] + "XXXX"
    out, _ = call({**args, "token": wrong})  # the stand-in echoes the token it got
    assert out["failed"] and "401" in out["msg"] and wrong not in json.dumps(out)


def test_offline_uses_only_the_disk(hub):
    args, _ = hub
    out, _ = call({**args, "offline": True})
    assert out["failed"] and "offline" in out["msg"]
    assert call(args)[0]["fetched"]
    os.unlink(os.path.join(args["local_dir"], ".sglang-fetch.json"))
    out, _ = call({**args, "offline": True})
    assert out["fetched"] and out["changed"]


def test_check_mode_fetches_nothing(hub):
    args, _ = hub
    out, _ = call(args, check_mode=True)
    assert out["changed"] and not out["fetched"] and "would fetch" in out["progress"][0]
    assert not os.path.exists(args["local_dir"])


def test_a_worker_that_dies_is_reported_with_its_log(hub, tmp_path):
    args, _ = hub
    broken = tmp_path / "broken"
    (broken / "bin").mkdir(parents=True)
    (broken / "bin" / "python").write_text("#!/bin/sh\necho 'no python here' >&2\nexit 3\n")
    (broken / "bin" / "python").chmod(0o755)
    started = time.monotonic()
    out, _ = call({**args, "venv": str(broken)})
    assert out["failed"] and "exited without a result" in out["msg"]
    assert out["log"] == ["no python here"] and time.monotonic() - started < 10


def test_a_changed_pattern_or_revision_fetches_again(hub):
    args, _ = hub
    assert call(args)[0]["changed"]
    out, _ = call({**args, "allow_patterns": ["*.json"]})
    assert out["changed"] and out["files"] == 2


def test_a_repo_that_is_not_a_checkpoint_is_refused(hub):
    args, commit = hub
    (commit / "config.json").write_text(json.dumps({"model_type": "x"}))
    out, _ = call(args)
    assert out["failed"] and "architectures None" in out["msg"]


def test_a_fetch_that_ends_between_two_slices_still_says_it_fetched(hub, monkeypatch):
    """On a loaded host the worker can finish after one slice returned and before the next
    call: that call finds the marker and must still close the progress."""
    args, _commit = hub
    monkeypatch.setenv("FAKE_HUB_DELAY", "0.25")  # the weights take longer than the slice
    first, _ = call({**args, "slice": 0.01})
    assert first["pending"]
    for _ in range(600):  # the worker ends on its own: wait on its marker, not on a clock
        if os.path.exists(os.path.join(args["local_dir"], ".sglang-fetch.json")):
            break
        time.sleep(0.05)
    out, _ = call({**args, "slice": 0.3, "resume": first["resume"]})
    assert out["fetched"] and out["changed"] and not out["pending"]
    assert out["progress"] and out["progress"][-1].startswith("fetched 3 files, 3.1 MB in ")
