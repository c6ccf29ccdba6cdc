"""sglang_model_fetch with the real huggingface_hub of the pinned SGLang's ml-env (the full
0.5.23 install, scripts/build-sglang-venv.sh), against a hub stand-in over HTTP
(tests/support/fakehub.py, HF_ENDPOINT): the calls the worker makes are the real client's."""

import json
import os

import pytest
from support import ROOT, run_main
from support.fakehub import serve
from support.wheels import full_venv

# Full sglang installs, built with uv from PyPI (cached outside the clone after the first run).
pytestmark = pytest.mark.network

MODULE = ROOT / "plugins" / "modules" / "sglang_model_fetch.py"
COMMIT = "89abcdef0123456789abcdef0123456789abcdef"
TOKEN = "hf_" + "RealClientToken" * 3


@pytest.fixture
def hub(tmp_path, monkeypatch):
    commit = tmp_path / "hub" / "Qwen--Tiny" / COMMIT
    (commit / "sub").mkdir(parents=True)
    (commit / "config.json").write_text(json.dumps({"architectures": ["Qwen3ForCausalLM"]}))
    (commit / "sub" / "tokenizer.json").write_text("{}")
    (commit / "model.safetensors").write_bytes(os.urandom(2 << 20))
    (tmp_path / "hub" / "Qwen--Tiny" / "refs.json").write_text(json.dumps({"main": COMMIT}))
    for var in ("HF_HOME", "HF_HUB_CACHE", "HF_TOKEN", "HF_HUB_OFFLINE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    monkeypatch.setenv("HF_HUB_DISABLE_TELEMETRY", "1")
    monkeypatch.delenv("PYTHONPATH", raising=False)
    args = {"repo": "Qwen/Tiny", "revision": COMMIT, "local_dir": str(tmp_path / "model"),
            "venv": str(full_venv("0.5.23")), "state_dir": str(tmp_path / "state"),
            "min_free_gb": 0, "timeout": 120}
    return tmp_path / "hub", commit, args


def call(args):
    text, _ = run_main(MODULE, args)
    assert TOKEN not in text
    return json.loads(text)


def test_the_real_client_fetches_a_pinned_commit_and_a_re_run_fetches_nothing(hub, monkeypatch):
    root, commit, args = hub
    with serve(root) as (endpoint, requests):
        monkeypatch.setenv("HF_ENDPOINT", endpoint)
        out = call(args)
        assert out["fetched"] and out["changed"] and out["sha"] == COMMIT, out
        assert out["files"] == 3 and out["architectures"] == ["Qwen3ForCausalLM"]
        local = args["local_dir"]
        assert open(os.path.join(local, "model.safetensors"), "rb").read() == \
            (commit / "model.safetensors").read_bytes()
        assert os.path.isfile(os.path.join(local, "sub", "tokenizer.json"))
        assert ("GET", f"/api/models/Qwen/Tiny/revision/{COMMIT}") in requests
        seen = len(requests)
        again = call(args)
        assert not again["changed"] and len(requests) == seen  # the marker: no request


def test_the_real_client_with_a_token_and_a_missing_revision(hub, monkeypatch):
    root, _, args = hub
    with serve(root, token=TOKEN) as (endpoint, _):
        monkeypatch.setenv("HF_ENDPOINT", endpoint)
        out = call({**args, "token": "hf_wrong"})
        assert out["failed"] and "401" in out["msg"]
        out = call({**args, "token": TOKEN, "revision": "f" * 40})
        assert out["failed"] and ("RevisionNotFound" in out["msg"] or "404" in out["msg"]), out
        out = call({**args, "token": TOKEN})
        assert out["fetched"], out


def test_the_real_client_offline_reads_only_the_disk(hub, monkeypatch):
    root, _, args = hub
    with serve(root) as (endpoint, requests):
        monkeypatch.setenv("HF_ENDPOINT", endpoint)
        out = call({**args, "offline": True})
        assert out["failed"] and not requests, out
