"""The release's arguments checked by the real SGLang 0.5.23 parser (--help), the fallback when
SGLang's resolution cannot run."""

import sys
from pathlib import Path

import pytest
import yaml
from support import load_module
from support.wheels import full_venv

# Full sglang installs, built with uv from PyPI (cached outside the clone after the first run).
pytestmark = pytest.mark.network

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "collections"))
from ansible_collections.sglang.deploy.plugins.filter import sglang_preflight as pf  # noqa: E402
from ansible_collections.sglang.deploy.plugins.filter import sglang_render as render  # noqa: E402

args_check = load_module("sglang_args_check")
PROFILE = yaml.safe_load((ROOT / "roles/sglang/profiles/qwen3.6-27b-tp2-mtp.yml").read_text())


@pytest.fixture(scope="module")
def venv():
    return str(full_venv("0.5.23"))


def test_the_default_profile_is_accepted(venv):
    args = render.sglang_server_config(PROFILE, {"cuda-graph-max-bs-decode": 32},
                                       "/srv/models/Qwen3.6-27B")
    out = args_check.check(venv, args, timeout=600)
    print(f"\nsglang 0.5.23 --help: {out['known_count']} options in {out['elapsed_s']} s")
    assert out["checked"], out["reason"]
    assert out["known_count"] > 300
    assert out["unknown"] == []


@pytest.mark.parametrize(
    "flag, nearest",
    [
        ("cuda-graph-max-bs", "cuda-graph-max-bs-decode"),
        ("mamba-scheduler-strategy", "mamba-radix-cache-strategy"),
        ("disable-piecewise-cuda-graph", "disable-prefill-cuda-graph"),
    ],
)
def test_removed_flags_are_rejected_with_a_suggestion(venv, flag, nearest):
    args = render.sglang_server_config(PROFILE, {flag: 8 if "bs" in flag else True})
    out = args_check.check(venv, args, timeout=600)
    assert out["unknown"] == [{"name": flag, "suggestions": out["unknown"][0]["suggestions"]}]
    assert nearest in out["unknown"][0]["suggestions"]
    facts = {"sglang_version": "0.5.23", "gpus": {"present": False, "reason": "no GPU"},
             "model": {"architectures": []}, "piecewise_blacklist": {}}
    verdict = pf.sglang_preflight(facts, args, {}, {}, False, args_check=out)
    flags = [r for r in verdict["rows"] if r["name"] == "flags"][0]
    assert flags["status"] == "fail" and not verdict["ok"]
    assert f"--{flag} (nearest: " in flags["evidence"] and f"--{nearest}" in flags["evidence"]


def test_a_venv_that_cannot_run_the_parser_says_why(tmp_path):
    out = args_check.check(str(tmp_path), {"tp-size": 2})
    assert out["checked"] is False and "--help" in out["reason"]
