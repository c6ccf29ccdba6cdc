"""sglang_resolve and its probe against a small fake sglang package laid out like the real
one: a parser, a record whose resolution writes fields (<= 0.5.18) or declares them
(0.5.19+), an import that needs the NVIDIA driver, and torch's device queries. The real
releases are asked in tests/integration/test_resolve_real_sglang.py."""

import ast
import json
import os
import struct
import sys
import textwrap

import pytest
from support import load_module

resolve_mod = load_module("sglang_resolve")
GPUS = {"count": 2, "name": "NVIDIA RTX A6000", "memory_mib": 49140, "compute_capability": "8.6"}

TORCH = '''
class _Cuda:
    def is_available(self):
        raise RuntimeError("the probe must answer device queries itself")
cuda = _Cuda()
class version:
    cuda = "13.0"
__version__ = "0.0-fake"
'''

NEEDS_DRIVER = '''
raise ImportError("libcuda.so.1: cannot open shared object file: No such file or directory")
'''

SERVER_ARGS = '''
import argparse
import dataclasses
import logging
import os
from typing import Optional

import needs_driver  # like sgl_kernel: its import needs libcuda.so.1
import torch

logger = logging.getLogger(__name__)


@dataclasses.dataclass
class Graphs:
    backend: Optional[str] = None


@dataclasses.dataclass
class ServerArgs:
    model_path: str = ""
    tp_size: int = 1
    max_running_requests: Optional[int] = None
    speculative_algorithm: Optional[str] = None
    prefill: Graphs = dataclasses.field(default_factory=Graphs)
    strategy: str = "auto"
    gpu_memory: Optional[int] = None
    random_seed: Optional[int] = None

    def __post_init__(self):
        if not STAGED:
            self.resolve()

    def resolve(self):
        if self.speculative_algorithm == "NEXTN":
            self.speculative_algorithm = "EAGLE"                     # line WRITE_ALGO
        if self.speculative_algorithm and self.max_running_requests is None:
            self.max_running_requests = 48 if torch.cuda.device_count() == 2 else 1
        self.prefill.backend = "disabled" if torch.cuda.get_device_capability()[0] < 9 else "on"
        import subprocess
        smi = subprocess.run(["nvidia-smi", "--query-gpu=memory.total", "--format=csv,noheader"],
                             capture_output=True, text=True, check=True)
        self.gpu_memory = int(smi.stdout.split()[0])
        if self.random_seed is None:
            import random
            self.random_seed = random.randint(0, 1 << 30)
        logger.warning("Breakable graph is incompatible; disabling prefill graph.")
        if self.strategy == "raise":
            raise ValueError("strategy raise is not supported with " + os.environ.get("WHO", "?"))

    @staticmethod
    def add_cli_args(parser):
        parser.add_argument("--config")
        parser.add_argument("--model-path", default="")
        parser.add_argument("--tp-size", type=int, default=1)
        parser.add_argument("--max-running-requests", type=int)
        parser.add_argument("--speculative-algorithm")
        parser.add_argument("--strategy", default="auto")


def prepare_server_args(argv):
    parser = argparse.ArgumentParser(prog="fake")
    ServerArgs.add_cli_args(parser)
    import json
    path = argv[argv.index("--config") + 1]
    with open(path) as handle:
        data = json.load(handle)
    for key in data:
        if key not in ("model-path", "tp-size", "max-running-requests",
                       "speculative-algorithm", "strategy"):
            parser.error(f"unrecognized arguments: --{key}")
    raw = parser.parse_args([a for k, v in data.items() for a in (f"--{k}", str(v))])
    return ServerArgs(model_path=raw.model_path, tp_size=raw.tp_size,
                      max_running_requests=raw.max_running_requests,
                      speculative_algorithm=raw.speculative_algorithm, strategy=raw.strategy)
'''

STAGED_METHODS = '''
def _declare(self, source, **fields):
    stash = getattr(self, "_resolved_overrides", None)
    if stash is None:
        stash = []
        self._resolved_overrides = stash
    stash.append((source, dict(fields)))


def _handle_spec(self):
    _declare(self, "_handle_spec", max_running_requests=48)          # line DECLARE


def _handle_seed(self):
    import random
    _declare(                                                        # as 0.5.23 draws its seed
        self, "_handle_seed",
        random_seed=random.randint(0, 1 << 30),
    )


def resolve_once(self):
    self._resolved_overrides = list(getattr(self, "_resolved_overrides", ()))
    _handle_spec(self)
    _handle_seed(self)


def resolved_dict(self):
    out = dataclasses.asdict(self)
    for _source, fields in self._resolved_overrides:
        out.update(fields)
    return out


ServerArgs.resolve_once = resolve_once
ServerArgs.resolved_dict = resolved_dict
'''


def fake_sglang(tmp_path, staged):
    site = tmp_path / "site-packages"
    (site / "sglang" / "srt").mkdir(parents=True)
    (site / "sglang" / "__init__.py").write_text("")
    (site / "sglang" / "srt" / "__init__.py").write_text("")
    source = f"STAGED = {staged}\n" + SERVER_ARGS + (STAGED_METHODS if staged else "")
    (site / "sglang" / "srt" / "server_args.py").write_text(source)
    (site / "torch.py").write_text(TORCH)
    (site / "needs_driver.py").write_text(NEEDS_DRIVER)
    dist = site / "sglang-9.9.9.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: sglang\nVersion: 9.9.9\n")
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    os.symlink(sys.executable, venv / "bin" / "python")
    lines = source.splitlines()
    return venv, site, {tag: lines.index(next(l for l in lines if tag in l)) + 1
                        for tag in ("WRITE_ALGO", "DECLARE")
                        if any(tag in l for l in lines)}


def run(venv, site, args, **extra):
    params = {"venv": str(venv), "args": args, "gpus": GPUS,
              "env": {"PYTHONPATH": str(site), **extra.pop("env", {})}, "timeout": 60, **extra}
    return resolve_mod.resolve(params)


ARGS = {"model-path": "/m", "tp-size": 2, "speculative-algorithm": "NEXTN"}


def test_writes_in_post_init_are_traced_to_their_line(tmp_path):
    venv, site, lines = fake_sglang(tmp_path, staged=False)
    out = run(venv, site, ARGS)
    assert out["ran"] and out["error"] is None, out
    assert out["entry"] == "ServerArgs.__post_init__" and out["sglang_version"] == "9.9.9"
    changes = {c["field"]: c for c in out["changes"]}
    algo = changes["speculative_algorithm"]
    assert (algo["asked"], algo["resolved"]) == ("NEXTN", "EAGLE")
    assert (algo["file"], algo["line"], algo["function"]) == (
        "sglang/srt/server_args.py", lines["WRITE_ALGO"], "ServerArgs.resolve")
    # Device queries answered from the description: 2 GPUs, capability 8.6.
    assert changes["max_running_requests"]["resolved"] == 48
    # nvidia-smi on PATH answers from the description too.
    assert changes["gpu_memory"]["resolved"] == 49140
    # A write into a nested record is traced to its line too.
    assert changes["prefill.backend"]["resolved"] == "disabled"
    assert changes["prefill.backend"]["file"] == "sglang/srt/server_args.py"
    assert "tp_size" not in changes  # asked and kept
    assert out["stubbed"] == {"needs_driver": "ImportError: libcuda.so.1: cannot open shared "
                                              "object file: No such file or directory"}
    assert [r["message"] for r in out["log"]] == [
        "Breakable graph is incompatible; disabling prefill graph."]
    assert out["sandbox"] == {"used": False, "how": "unsandboxed: no sandbox asked for"}
    # Every distribution of the venv, for an upgrade plan to compare; what a second
    # resolution sets otherwise is named (its log lines are not repeated above).
    assert out["packages"]["sglang"] == "9.9.9"
    assert out["volatile"] == ["random_seed"]


def test_declarations_of_staged_resolution_are_traced_to_the_declaring_function(tmp_path):
    venv, site, lines = fake_sglang(tmp_path, staged=True)
    out = run(venv, site, ARGS)
    assert out["entry"] == "ServerArgs.resolve_once" and out["error"] is None, out
    change = [c for c in out["changes"] if c["field"] == "max_running_requests"][0]
    assert (change["asked"], change["resolved"]) == (None, 48)
    assert (change["line"], change["function"], change["source"]) == (
        lines["DECLARE"], "_handle_spec", "_handle_spec")
    # A seed drawn inside a declaration that spans lines is drawn at random all the same.
    assert out["volatile"] == ["random_seed"]


def test_an_error_sglang_raises_comes_back_with_its_type_message_and_line(tmp_path):
    venv, site, _ = fake_sglang(tmp_path, staged=False)
    out = run(venv, site, {**ARGS, "strategy": "raise"}, env={"WHO": "the release env"})
    assert out["ran"] and out["resolved"] is None
    err = out["error"]
    assert (err["type"], err["file"], err["function"], err["stage"]) == (
        "ValueError", "sglang/srt/server_args.py", "resolve", "resolve")
    assert err["message"] == "strategy raise is not supported with the release env"


def test_an_unknown_argument_is_the_parsers_own_message(tmp_path):
    venv, site, _ = fake_sglang(tmp_path, staged=False)
    out = run(venv, site, {**ARGS, "cuda-graph-max-bs": 8})
    err = out["error"]
    assert (err["type"], err["stage"]) == ("SystemExit", "parse")
    assert err["message"] == "fake: error: unrecognized arguments: --cuda-graph-max-bs"
    assert out["unknown_flags"][0]["name"] == "cuda-graph-max-bs"


def test_an_ml_env_that_cannot_import_sglang_is_a_reason_not_a_verdict(tmp_path):
    venv, site, _ = fake_sglang(tmp_path, staged=False)
    (site / "torch.py").unlink()
    out = run(venv, site, ARGS)
    assert not out["ran"] and out["error"] is None
    assert out["reason"].startswith("sglang could not be imported: ModuleNotFoundError")


def test_no_python_and_no_gpus_are_reasons(tmp_path):
    out = resolve_mod.resolve({"venv": str(tmp_path), "args": {}, "gpus": GPUS})
    assert not out["ran"] and "no Python at" in out["reason"]
    venv, site, _ = fake_sglang(tmp_path, staged=False)
    out = resolve_mod.resolve({"venv": str(venv), "args": {}, "gpus": {},
                               "nvidia_smi": "no-such-nvidia-smi"})
    assert not out["ran"] and "no GPU to describe" in out["reason"]


def test_host_gpus_read_from_nvidia_smi(tmp_path):
    smi = tmp_path / "nvidia-smi"
    smi.write_text(textwrap.dedent("""\
        #!/bin/sh
        echo "0, NVIDIA RTX A6000, 49140, 8.6"
        echo "1, NVIDIA RTX A6000, 49140, 8.6"
        """))
    smi.chmod(0o755)
    assert resolve_mod.host_gpus(str(smi)) == GPUS


@pytest.mark.parametrize("gpus, words", [
    ({"count": 0, "name": "x", "memory_mib": 1, "compute_capability": "8.6"}, "gpus.count"),
    ({"count": 2, "name": "x", "memory_mib": True, "compute_capability": "8.6"}, "gpus.memory_mib"),
    ({"count": 2, "name": "x", "memory_mib": 1, "compute_capability": "eight"}, "compute_capability"),
    ({"count": 2, "name": "x", "memory_mib": 1, "compute_capability": "8.6", "vram": 1}, "unknown keys"),
])
def test_bad_gpu_descriptions_are_refused(gpus, words):
    assert words in resolve_mod.check_gpus(gpus)


def test_the_probe_leaves_no_working_directory_behind(tmp_path):
    venv, site, _ = fake_sglang(tmp_path, staged=False)
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    out = run(venv, site, ARGS, env={"TMPDIR": str(scratch)})
    assert out["ran"] and out["error"] is None, out
    assert list(scratch.iterdir()) == []


LOAD_CONFIG = '''
import dataclasses

@dataclasses.dataclass
class LoadConfig:
    load_format: str = "auto"
'''

# The loader's top level imports what the file selection never uses (every layer and
# quantization: ~15 s on 0.5.23); here it cannot be imported at all.
LOADER = '''
from __future__ import annotations

import glob
import logging
import os

import layers_that_take_fifteen_seconds  # noqa: F401

logger = logging.getLogger(__name__)
PATTERNS = ["*.safetensors", "*.bin"]


class DefaultModelLoader(layers_that_take_fifteen_seconds.BaseModelLoader):
    def load_model(self):
        raise AssertionError("never called by the probe")

    def _prepare_weights(self, model_name_or_path: str, revision, fall_back_to_pt: bool):
        logger.info("selecting weights in %s", model_name_or_path)
        for pattern in PATTERNS:
            files = glob.glob(os.path.join(model_name_or_path, pattern))
            if files:
                return model_name_or_path, files, pattern.endswith(".safetensors")
        return model_name_or_path, UNDEFINED_HERE, False
'''


def with_loader(site, model):
    (site / "sglang" / "srt" / "configs").mkdir()
    (site / "sglang" / "srt" / "configs" / "__init__.py").write_text("")
    (site / "sglang" / "srt" / "configs" / "load_config.py").write_text(LOAD_CONFIG)
    (site / "sglang" / "srt" / "model_loader").mkdir()
    (site / "sglang" / "srt" / "model_loader" / "__init__.py").write_text("")
    (site / "sglang" / "srt" / "model_loader" / "loader.py").write_text(LOADER)
    (site / "layers_that_take_fifteen_seconds.py").write_text(
        "raise ImportError('the probe imported the whole loader module')\n")
    model.mkdir()
    header = json.dumps({"w": {"dtype": "BF16", "shape": [4, 8], "data_offsets": [0, 64]},
                         "b": {"dtype": "BF16", "shape": [8], "data_offsets": [64, 80]}})
    (model / "model.safetensors").write_bytes(
        struct.pack("<Q", len(header)) + header.encode() + b"\0" * 80)
    (model / "training_args.bin").write_bytes(b"\0" * 16)
    line = LOADER.splitlines().index(next(l for l in LOADER.splitlines()
                                          if "def _prepare_weights" in l)) + 1
    return f"sglang/srt/model_loader/loader.py:{line} DefaultModelLoader._prepare_weights"


def test_the_loader_selects_the_files_without_its_module_s_other_imports(tmp_path):
    venv, site, _ = fake_sglang(tmp_path, staged=True)
    selected_by = with_loader(site, tmp_path / "model")
    out = run(venv, site, {**ARGS, "model-path": str(tmp_path / "model")})
    assert out["ran"] and out["error"] is None, out
    weights = out["weights"]
    assert weights["files"] == ["model.safetensors"] and weights["selected_by"] == selected_by
    assert (weights["sharded_bytes"], weights["replicated_bytes"]) == (64, 16)
    assert set(out["phases_s"]) == {"packages", "import", "parse", "resolve", "weights"}


def test_a_name_the_loader_needs_and_its_module_does_not_bind_is_the_loader_s_error(tmp_path):
    venv, site, _ = fake_sglang(tmp_path, staged=True)
    with_loader(site, tmp_path / "model")
    (tmp_path / "model" / "model.safetensors").unlink()
    (tmp_path / "model" / "training_args.bin").unlink()
    out = run(venv, site, {**ARGS, "model-path": str(tmp_path / "model")})
    assert out["ran"] and out["error"] is None, out
    assert out["weights"]["error"] == "NameError: name 'UNDEFINED_HERE' is not defined"


def test_the_probe_s_parts_are_sent_each_after_the_parts_it_imports():
    """The program runs in the ml-env from what stdin brings alone: every part's source, each
    made a module (BOOTSTRAP) after those it imports by plain name, the program last."""
    parts = resolve_mod.sglang_probe.PARTS
    assert set(resolve_mod.PROBE_PARTS) == set(parts) and parts[-1] == "sglang_probe"
    _request, sent = resolve_mod._probe_input({"args": {}}, GPUS).split("\n", 1)
    assert [name for name, _source in json.loads(sent)] == list(parts)
    for index, (name, source) in enumerate(json.loads(sent)):
        imported = {node.module for node in ast.walk(ast.parse(source))
                    if isinstance(node, ast.ImportFrom) and node.module
                    and node.module.startswith("sglang_probe")}
        assert imported <= set(parts[:index]), (name, imported)
