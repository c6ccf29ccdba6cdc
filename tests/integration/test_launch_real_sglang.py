"""launch.py with the real SGLang 0.5.23 parser (the full install): SGLang reads its key from the
pipe, and what it prints about its arguments (the key included) leaves redacted."""

import hashlib
import json
import os
import subprocess
import sys

import pytest
from support import ROLE
from support.wheels import full_venv

from ansible_collections.sglang.deploy.plugins.filter import sglang_render as render

# Full sglang installs, built with uv from PyPI (cached outside the clone after the first run).
pytestmark = pytest.mark.network

KEY = "sk-" + "Zx81" * 10

# SGLang's own start-up path for the arguments: prepare_server_args(argv), which merges the
# --config file; then the ServerArgs repr (keys included), as a log line would show it.
PARSE = """
import hashlib, os, sys
from sglang.srt.server_args import prepare_server_args
args = prepare_server_args(sys.argv[1:])
print("server_args=" + repr(args), flush=True)
ok = hashlib.sha256(args.api_key.encode()).hexdigest() == os.environ["KEY_SHA256"]
print(f"key read: {ok}; tp_size {args.tp_size}; launch_command {args.launch_command}")
"""


@pytest.fixture(scope="module")
def venv():
    return str(full_venv("0.5.23"))


def test_real_sglang_reads_the_key_from_the_pipe_and_its_output_is_redacted(venv, tmp_path):
    (tmp_path / "config.yaml").write_text(render.config_yaml(
        {"model-path": "/nonexistent", "tp-size": 2, "device": "cpu"}))
    secrets = tmp_path / "secrets.json"
    secrets.write_text(json.dumps({"api-key": KEY}))
    secrets.chmod(0o600)
    (tmp_path / "run").mkdir(mode=0o700)
    python = os.path.join(venv, "bin", "python")
    proc = subprocess.run(
        [sys.executable, str(ROLE / "files" / "sglang_launch.py"), "--secrets", str(secrets),
         "--fifo-dir", str(tmp_path / "run"), "--", python, "-c", PARSE,
         "--config", str(tmp_path / "config.yaml")],
        capture_output=True, text=True, timeout=300,
        env={**os.environ, "KEY_SHA256": hashlib.sha256(KEY.encode()).hexdigest()})
    out = proc.stdout + proc.stderr
    print(out[-400:])
    assert proc.returncode == 0, out[-2000:]
    assert KEY not in out
    assert "api_key='<redacted>'" in out  # SGLang printed it; the launcher caught it
    assert "key read: True; tp_size 2" in out
    # SGLang records the config merged into its command line (/server_info's launch_command):
    # the key is in it too, redacted here by the launcher and by sglang_server_info.
    assert "launch_command --model-path /nonexistent --tp-size 2 --device cpu --api-key <redacted>" in out
    assert not (tmp_path / "run" / "launch.yaml").exists()
