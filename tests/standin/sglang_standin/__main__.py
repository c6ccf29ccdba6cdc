"""`python -m sglang_standin <sglang.launch_server arguments>`: a TEST STAND-IN for SGLang.

It generates no real tokens. It exists so that the deployment (systemd unit, readiness,
verification, smoke test) can run for real on hosts without a GPU.
"""

import sys
import time

from . import args as argmod
from . import metrics, perf
from .engine import Engine, Knobs
from .server import serve


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if "--help" in argv or "-h" in argv:
        # Never the place to learn SGLang's flags: its own parser is (sglang_args_check).
        sys.stderr.write("standin: TEST STAND-IN for sglang.launch_server; it has no --help\n")
        return 2
    try:
        server_args = argmod.load_args(argv)
    except (argmod.ArgsError, OSError) as exc:
        sys.stderr.write(f"standin: error: {exc}\n")
        return 2
    knobs = Knobs.from_env()
    sys.stderr.write(
        "standin: TEST STAND-IN for sglang.launch_server (no GPU, no model weights); "
        f"shape {knobs.shape}, {knobs.tok_s} tok/s per user, TTFT {knobs.ttft_ms} ms, "
        f"{knobs.tokens_per_chunk} tokens per chunk\n"
    )
    if knobs.refuse_flag and knobs.refuse_flag in server_args:
        sys.stderr.write(f"standin: error: refusing to start with --{knobs.refuse_flag}\n")
        return 1
    if knobs.perf_model and perf.startup_error(server_args):
        sys.stderr.write(f"standin: error: {perf.startup_error(server_args)}\n")
        return 1
    if knobs.startup_delay_s:
        time.sleep(knobs.startup_delay_s)
    try:
        # SGLang's own collectors where this env has the full install (metrics.py).
        collectors = metrics.create(str(server_args.get("served-model-name")
                                        or server_args["model-path"]))
    except metrics.MetricsError as exc:
        sys.stderr.write(f"standin: error: {exc}\n")
        return 1
    sys.stderr.write(f"standin: /metrics by {collectors.source} "
                     f"(SGLang {collectors.version}'s series)\n")
    serve(Engine(server_args, knobs, collectors))
    return 0


if __name__ == "__main__":
    sys.exit(main())
