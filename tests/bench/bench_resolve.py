#!/usr/bin/env python3
"""Benchmark: what SGLang's resolution costs against importing it. Alternates, `--runs` times
(median printed): `import sglang.srt.server_args` in the 0.5.23 env (the floor: SGLang cannot
answer faster than it imports; also with TORCHDYNAMO_DISABLE=1, as the probe runs), the preflight what-if (sglang_resolve of the reference profile
in that env: one resolution, then the loader's file selection) and the upgrade what-if (the
same in the 0.5.15 and 0.5.23 envs at once, as upgrade.yml asks them). Prints the
seconds and the ratios to the import. Needs the full envs (scripts/build-sglang-venv.sh, as
`make integration` builds them). Usage: python tests/bench/bench_resolve.py [--runs 3]
"""

import argparse
import concurrent.futures
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "integration"))
from support import layouts  # noqa: E402
from support.wheels import full_venv  # noqa: E402
from test_resolve_real_sglang import A6000X2, config, resolve_mod  # noqa: E402


def both(call, *venvs):
    """`call` on each venv at once (upgrade.yml: the serving side's in the background)."""
    with concurrent.futures.ThreadPoolExecutor(len(venvs)) as pool:
        for future in [pool.submit(call, venv) for venv in venvs]:
            future.result()


def timed(call):
    started = time.monotonic()
    call()
    return time.monotonic() - started


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3)
    opts = ap.parse_args()
    model = layouts.build("qwen3-8b", tempfile.mkdtemp(prefix="bench-resolve-"))
    args = dict(config(), **{"model-path": str(model)})
    new, old = full_venv("0.5.23"), full_venv("0.5.15")

    phases = {}

    def ask(venv):
        out = resolve_mod.resolve({"venv": str(venv), "args": args, "gpus": A6000X2,
                                   "timeout": 900})
        assert out["ran"] and out.get("weights", {}).get("files"), out.get("reason")
        for name, secs in (out.get("phases_s") or {}).items():
            phases.setdefault(f"{venv.name.split('-')[0]} {name}", []).append(secs)

    def import_(**env):
        subprocess.run([str(new / "bin" / "python"), "-c", "import sglang.srt.server_args"],
                       check=True, capture_output=True, env={**os.environ, **env})

    steps = {
        "import sglang.srt.server_args": import_,
        # The probe's environment (sglang_probe.probe): torch.compile decorators left as they
        # are. The floor for a resolution asked as the probe asks it.
        "the same import, TORCHDYNAMO_DISABLE=1": lambda: import_(TORCHDYNAMO_DISABLE="1"),
        "preflight what-if (0.5.23)": lambda: ask(new),
        "upgrade what-if (0.5.15 and 0.5.23)": lambda: both(ask, old, new),
    }
    seconds = {name: [] for name in steps}
    for _ in range(opts.runs):
        for name, call in steps.items():
            seconds[name].append(timed(call))
    base = statistics.median(seconds["import sglang.srt.server_args"])
    probe_base = statistics.median(seconds["the same import, TORCHDYNAMO_DISABLE=1"])
    for name, runs in seconds.items():
        median = statistics.median(runs)
        print(f"{name:40s} median {median:6.1f} s  ({', '.join(f'{s:.1f}' for s in runs)})  "
              f"{median / base:.2f}x the import, {median / probe_base:.2f}x as the probe runs it")
    print("where a what-if's seconds go, inside the ml-env's Python (median):")
    for name, runs in phases.items():
        print(f"  {name:30s} {statistics.median(runs):6.1f} s")


if __name__ == "__main__":
    main()
