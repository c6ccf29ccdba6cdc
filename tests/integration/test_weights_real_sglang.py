"""The memory row by SGLang's own loader: five checkpoint layouts of the hub (tests/data/layouts,
built as sparse files with real safetensors headers by tests/support/layouts.py), each resolved
by the real SGLang 0.5.23, whose DefaultModelLoader._prepare_weights selects the files to load.
Printed per layout: the files SGLang loads, the bytes per GPU, the verdict."""

import pytest
from support import layouts
from support.wheels import full_venv
from test_resolve_real_sglang import rows

from ansible_collections.sglang.deploy.plugins.filter import sglang_preflight as pf
from test_resolve_real_sglang import resolve_mod

pytestmark = pytest.mark.network
GIB = 1024 ** 3
RTX4090 = {"count": 1, "name": "NVIDIA GeForce RTX 4090", "memory_mib": 24564,
           "compute_capability": "8.9"}
A6000X2 = {"count": 2, "name": "NVIDIA RTX A6000", "memory_mib": 49140,
           "compute_capability": "8.6"}


def resolved(path, gpus, tp):
    args = {"model-path": str(path), "tp-size": tp, "mem-fraction-static": 0.85}
    out = resolve_mod.resolve({"venv": str(full_venv("0.5.23")), "args": args, "gpus": gpus,
                               "env": {}, "timeout": 900})
    assert out["ran"] and not out["error"], out.get("reason") or out["error"]
    facts = {"sglang_version": "0.5.23", "model": {"architectures": []},
             "piecewise_blacklist": {}, "gpus": pf.described_gpus(gpus)}
    return out, pf.sglang_preflight(facts, args, {}, {}, resolution=out)


@pytest.mark.parametrize("name, gpus, tp, expected", [
    ("qwen3-8b", RTX4090, 1, "fits"),
    ("mistral-7b-instruct-v0.3", RTX4090, 1, "fits"),   # 27 GiB on disk, 13.5 loaded
    ("llama-2-7b-hf", RTX4090, 1, "fits"),              # 25.1 GiB on disk, 12.6 loaded
    ("qwen2.5-0.5b-instruct", RTX4090, 1, "fits"),
    ("qwen3-8b-fp8", A6000X2, 2, "fits"),
])
def test_the_memory_row_counts_what_sglangs_loader_loads(tmp_path, name, gpus, tp, expected):
    path = layouts.build(name, tmp_path)
    out, v = resolved(path, gpus, tp)
    weights, row = out["weights"], rows(v)["memory"]
    per_gpu = (weights["sharded_bytes"] / tp + weights["replicated_bytes"]) / GIB
    print(f"\n{name}: SGLang loads {weights['files']} ({weights['selected_by']}); "
          f"{layouts.on_disk_bytes(path) / GIB:.2f} GiB on disk, {per_gpu:.2f} GiB per GPU at "
          f"tp {tp}: {row['predicted']} ({row['status']}): {row['evidence']}")
    assert weights["files"] == layouts.layouts()[name]["loads"]
    assert weights["unread"] == [] and weights["selected_by"].startswith(
        "sglang/srt/model_loader/loader.py:")
    assert row["predicted"] == expected
