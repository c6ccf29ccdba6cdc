#!/usr/bin/env python3
"""Benchmark: how exact is sglang_smoke? Runs it against the stand-in engine started as its own
process at a known speed (50 tok/s per user, 300 ms TTFT, 3 tokens per streamed chunk as MTP
sends them) and prints measured figures beside the truth.

A benchmark with a floor: it exits 1 when decode tok/s per user or TTFT is off by more than
3%. TTFT is judged net of this machine's own round trip to the stand-in (the median of `/health`
answered at once, timed before and after the run, printed): a busy host delays every request by
milliseconds that are no error of the smoke test (a CI run beside molecule measured 309 ms for
300). A loaded host only ever adds delay (its noise is one-sided: a request is never served
faster than the stand-in's schedule), so up to `--runs` measurements are made and the best is
judged: the smoke test's own error is what is left in the best one; every run is printed.
Usage: python tests/bench/bench_smoke.py [--tok-s 50 --ttft-ms 300 --chunk 3 --runs 3]
"""

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from support import ROOT, free_port, load_module  # noqa: E402

smoke = load_module("sglang_smoke")


def round_trips(url, count=20):
    """Milliseconds of `count` /health requests, which the stand-in answers at once."""
    out = []
    for _ in range(count):
        started = time.monotonic()
        smoke.request(url + "/health", timeout=10)
        out.append((time.monotonic() - started) * 1000)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tok-s", type=float, default=50.0)
    ap.add_argument("--ttft-ms", type=float, default=300.0)
    ap.add_argument("--chunk", type=int, default=3)
    ap.add_argument("--max-tokens", type=int, default=256)
    ap.add_argument("--requests", type=int, default=8)
    ap.add_argument("--tolerance", type=float, default=0.03)
    ap.add_argument("--runs", type=int, default=3)
    opts = ap.parse_args()
    best = None
    for run in range(1, opts.runs + 1):
        worst = measure(opts)
        best = worst if best is None else min(best, worst)
        print(f"run {run}: worst deviation {worst:.2%}")
        if worst <= opts.tolerance:
            break
    verdict = "within" if best <= opts.tolerance else "OUTSIDE"
    print(f"best run's worst deviation {best:.2%}: {verdict} {opts.tolerance:.0%} of the truth")
    return 0 if best <= opts.tolerance else 1


def measure(opts):
    """One smoke test against a fresh stand-in; prints its figures; the worst deviation."""

    port = free_port()
    model = tempfile.mkdtemp()
    env = dict(os.environ, PYTHONPATH=str(ROOT / "tests" / "standin"),
               SGLANG_STANDIN_TOK_S=str(opts.tok_s), SGLANG_STANDIN_TTFT_MS=str(opts.ttft_ms),
               SGLANG_STANDIN_TOKENS_PER_CHUNK=str(opts.chunk))
    server = subprocess.Popen(
        [sys.executable, "-m", "sglang_standin", "--model-path", model, "--port", str(port),
         "--served-model-name", "bench", "--speculative-algorithm", "NEXTN", "--enable-metrics"],
        env=env, stderr=subprocess.DEVNULL)
    try:
        url = f"http://127.0.0.1:{port}"
        for _ in range(100):
            try:
                smoke.request(url + "/health", timeout=1)
                break
            except smoke.HttpError:
                time.sleep(0.05)
        rtt = round_trips(url)
        result = smoke.run({
            "url": url, "model": "", "api_key": "", "concurrency": [1, 4],
            "requests_per_level": opts.requests, "max_tokens": opts.max_tokens,
            "prompt": "benchmark", "warmup": 1, "ignore_eos": True, "chat": True,
            "chat_template_kwargs": {"enable_thinking": False}, "timeout": 120,
        })
        rtt_ms = statistics.median(rtt + round_trips(url))
    finally:
        server.terminate()
        server.wait()

    truth_tpot = 1000.0 / opts.tok_s
    print(f"stand-in truth: {opts.tok_s} tok/s per user (TPOT {truth_tpot:.2f} ms), "
          f"TTFT {opts.ttft_ms} ms, {opts.chunk} tokens per chunk, {opts.max_tokens} tokens; "
          f"this machine's round trip {rtt_ms:.1f} ms (median of /health)")
    print(f"{'conc':>4} {'ok':>3} {'TTFT p50':>9} {'TTFT p99':>9} {'TPOT p50':>9} "
          f"{'TPOT p99':>9} {'tok/s/user':>10} {'out tok/s':>9}   dev tok/s  dev TTFT")
    worst = 0.0
    for lv in result["levels"]:
        dev_rate = lv["decode_tok_s_per_user"] / opts.tok_s - 1
        dev_ttft = (lv["ttft_ms_p50"] - rtt_ms) / opts.ttft_ms - 1
        worst = max(worst, abs(dev_rate), abs(dev_ttft))
        print(f"{lv['concurrency']:>4} {lv['requests_ok']:>3} {lv['ttft_ms_p50']:>9.1f} "
              f"{lv['ttft_ms_p99']:>9.1f} {lv['tpot_ms_p50']:>9.2f} {lv['tpot_ms_p99']:>9.2f} "
              f"{lv['decode_tok_s_per_user']:>10.2f} {lv['output_tok_s']:>9.1f}   "
              f"{dev_rate:>+8.2%}  {dev_ttft:>+8.2%}")
    print(f"accept length {result['accept_length']}; graph passes delta "
          f"{result['graph_passes']['delta']}")
    return worst


if __name__ == "__main__":
    sys.exit(main())
