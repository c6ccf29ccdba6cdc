"""A TEST performance model over SGLang's arguments, so that a tuner has a known best answer.

Turned on with `SGLANG_STANDIN_PERF_MODEL=1`; then the speed no longer comes from
`SGLANG_STANDIN_TOK_S` but from the release's own arguments, the way a real GPU would make it
depend on them (made-up numbers, shaped like the reference deployment's):

- MTP accept length: each further draft token is accepted less often (ACCEPT_RATES), so more
  speculative steps give a longer accept length with diminishing returns;
- each forward step costs the target model (TARGET_MS, plus BATCH_MS per running request)
  and each speculative step a draft pass (DRAFT_MS);
- a batch larger than `--cuda-graph-max-bs` runs without CUDA graphs (NO_GRAPH_FACTOR slower);
- `--attention-backend` changes the target step (BACKEND_FACTOR); `fa3` needs Hopper and the
  engine refuses to start on the (described) Ampere GPUs;
- top-k above 1 or draft tokens other than steps + 1 with top-k 1 waste verification work.

With the reference profile's arguments (NEXTN 3/1/4, flashinfer, graph max bs 32) at concurrency
1: 78.2 tok/s per user; the best at concurrency 1 is 2 steps (draft tokens 3): 84.4 tok/s
(1 step 74.5, 4 steps 69.3; triton 72.0; fa3 does not start).
"""

from . import args as argmod

ACCEPT_RATES = (0.9, 0.75, 0.3, 0.15, 0.05, 0.02, 0.01, 0.01)
TARGET_MS = 20.0
BATCH_MS = 0.5
DRAFT_MS = 5.0
NO_GRAPH_FACTOR = 1.6
BACKEND_FACTOR = {"flashinfer": 1.0, "triton": 1.15, "torch_native": 2.0}
UNSUPPORTED_BACKENDS = {"fa3": "fa3 attention needs compute capability 9.0 (Hopper); "
                               "these GPUs are sm_86"}
TTFT_MS = 250.0
TTFT_PER_REQUEST_MS = 20.0


def enabled(env):
    return str(env.get("SGLANG_STANDIN_PERF_MODEL", "")).lower() in ("1", "true", "yes")


def startup_error(server_args):
    """What the engine dies of at start with these arguments, or None."""
    backend = str(server_args.get("attention-backend") or "flashinfer")
    return UNSUPPORTED_BACKENDS.get(backend)


def _speculative(server_args):
    if not server_args.get("speculative-algorithm"):
        return 0, 1, 1
    steps = argmod.get(server_args, "speculative-num-steps", 3, int)
    topk = argmod.get(server_args, "speculative-eagle-topk", 1, int)
    draft = argmod.get(server_args, "speculative-num-draft-tokens", steps + 1, int)
    return steps, topk, draft


def accept_length(server_args):
    steps, _topk, draft = _speculative(server_args)
    length, chain = 1.0, 1.0
    for rate in ACCEPT_RATES[:min(steps, max(draft - 1, 0))]:
        chain *= rate
        length += chain
    return round(length, 4)


def step_ms(server_args, running):
    """Milliseconds of one decode step (target + drafts) with `running` requests in the batch."""
    steps, topk, draft = _speculative(server_args)
    backend = str(server_args.get("attention-backend") or "flashinfer")
    target = (TARGET_MS + BATCH_MS * running) * BACKEND_FACTOR.get(backend, 1.0)
    # Verifying more draft tokens than the chain can accept costs target work for nothing.
    waste = max(0, draft - (steps + 1)) + (topk - 1) * steps
    target *= 1.0 + 0.05 * waste
    max_bs = argmod.get(server_args, "cuda-graph-max-bs", 32, int)
    if argmod.get(server_args, "disable-cuda-graph", False, bool) or running > max_bs:
        target *= NO_GRAPH_FACTOR
    return target + DRAFT_MS * steps


def tok_s_per_user(server_args, running=1):
    return round(accept_length(server_args) * 1000.0 / step_ms(server_args, max(1, running)), 3)


def ttft_ms(running=1):
    return TTFT_MS + TTFT_PER_REQUEST_MS * max(0, running - 1)
