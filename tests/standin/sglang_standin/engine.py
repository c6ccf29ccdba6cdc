"""What the stand-in reports and how fast it "generates": pure state, no HTTP."""

import collections
import contextlib
import hashlib
import json
import os
import threading
import time
from dataclasses import dataclass, field

from . import args as argmod
from . import metrics, perf


@dataclass
class Knobs:
    tok_s: float = 50.0
    ttft_ms: float = 300.0
    tokens_per_chunk: int = 3
    accept_length: float = 3.0
    shape: str = "0.5.23"  # default: the version of the sglang installed beside it
    resolved: dict = field(default_factory=dict)
    startup_delay_s: float = 0.0
    refuse_flag: str = ""
    crash_after: int = 0
    broken_scheduler: bool = False
    perf_model: bool = False
    # The workload model (tests/standin/README.md, "A workload, not a prompt"); each off by
    # default, so a knob's TTFT and TPOT are exact where a test sets no other.
    prefill_tok_s: float = 0.0  # prompt tokens prefilled per second; 0: prefill is free
    knee: int = 0  # running requests past which per-user decode slows (total flat); 0: never
    accept_spread: float = 0.0  # accept length varies with the text by up to this fraction

    @classmethod
    def from_env(cls, env=None):
        env = os.environ if env is None else env

        def pick(name, cast, default):
            raw = env.get("SGLANG_STANDIN_" + name, "")
            return cast(raw) if raw != "" else default

        chunk = pick("TOKENS_PER_CHUNK", int, 3)
        return cls(
            tok_s=pick("TOK_S", float, 50.0),
            ttft_ms=pick("TTFT_MS", float, 300.0),
            tokens_per_chunk=max(1, chunk),
            accept_length=pick("ACCEPT_LENGTH", float, float(chunk)),
            shape=pick("SHAPE", str, _installed_sglang_version() or "0.5.23"),
            resolved=pick("RESOLVED", json.loads, {}),
            startup_delay_s=pick("STARTUP_DELAY_S", float, 0.0),
            refuse_flag=pick("REFUSE_FLAG", str, "").lstrip("-"),
            crash_after=pick("CRASH_AFTER", int, 0),
            broken_scheduler=pick("BROKEN_SCHEDULER", str, "0") in ("1", "true", "yes"),
            perf_model=perf.enabled(env),
            prefill_tok_s=max(0.0, pick("PREFILL_TOK_S", float, 0.0)),
            knee=max(0, pick("KNEE", int, 0)),
            accept_spread=min(0.9, max(0.0, pick("ACCEPT_SPREAD", float, 0.0))),
        )


class PrefixCache:
    """SGLang's radix cache, as far as a first token's time can tell: the longest prefix of a
    prompt's tokens (here its words) that an earlier prompt shared is not prefilled again. Each
    prefix is one entry (a hash chained over its tokens); the least recently used go first past
    `capacity` tokens, as the KV cache evicts."""

    def __init__(self, capacity=200_000):
        self.capacity = capacity
        self.entries = collections.OrderedDict()

    def admit(self, tokens):
        """How many leading tokens were cached; the whole prompt is cached afterwards."""
        cached, chain, hit = 0, 0, True
        for token in tokens:
            chain = hash((chain, token))
            if hit and chain in self.entries:
                cached += 1
                self.entries.move_to_end(chain)
            else:
                hit = False
                self.entries[chain] = None
        while len(self.entries) > self.capacity:
            self.entries.popitem(last=False)
        return cached


def _installed_sglang_version():
    try:
        from importlib.metadata import version

        return version("sglang")
    except Exception:  # noqa: BLE001 - no sglang beside us is fine for a stand-in
        return ""


def _read_model_config(model_path):
    path = os.path.join(str(model_path), "config.json")
    try:
        with open(path, encoding="utf-8") as handle:
            return json.load(handle)
    except (OSError, ValueError):
        return {}


class Engine:
    """Holds the parsed arguments, the knobs and the counters behind /metrics."""

    def __init__(self, server_args, knobs, collectors=None):
        self.args = server_args
        self.knobs = knobs
        self.started = time.time()
        self.lock = threading.Lock()
        self.requests = 0
        self.running = 0
        self.draining = False  # SIGTERM received: finishing what runs (server.py)
        self.prompt_tokens = 0
        self.decode_steps = 0
        self.prefix_cache = PrefixCache()
        self.cached_tokens = 0
        self.accept_lengths = collections.deque(maxlen=256)
        self.model_config = _read_model_config(server_args["model-path"])
        # /metrics as SGLang writes it (metrics.py): SGLang's own collectors where the env has
        # them (__main__ asks for those), else prometheus_client's copy of their series.
        self.collectors = collectors or metrics.CopiedCollectors(self.served_model_name)
        if knobs.perf_model:
            # The speed follows the arguments (tests/standin/sglang_standin/perf.py).
            knobs.accept_length = perf.accept_length(server_args)
            knobs.tokens_per_chunk = max(1, round(knobs.accept_length))
            knobs.tok_s = perf.tok_s_per_user(server_args, 1)
            knobs.ttft_ms = perf.ttft_ms(1)

    # ---- identity -------------------------------------------------------------------------
    @property
    def served_model_name(self):
        return str(self.args.get("served-model-name") or self.args["model-path"])

    @property
    def api_key(self):
        return self.args.get("api-key")

    def speculative(self):
        algo = self.args.get("speculative-algorithm")
        if not algo:
            return {}
        steps = argmod.get(self.args, "speculative-num-steps", 3, int)
        return {
            # SGLang resolves the NEXTN alias to EAGLE and reports EAGLE.
            "speculative_algorithm": "EAGLE" if str(algo).upper() == "NEXTN" else str(algo),
            "speculative_num_steps": steps,
            "speculative_eagle_topk": argmod.get(self.args, "speculative-eagle-topk", 1, int),
            "speculative_num_draft_tokens": argmod.get(
                self.args, "speculative-num-draft-tokens", steps + 1, int
            ),
        }

    def resolved_args(self):
        """Every argument as a snake_case field, the way SGLang's resolved_dict() has them."""
        return {str(k).replace("-", "_"): v for k, v in self.args.items()}

    def model_info(self):
        return {
            "model_path": str(self.args["model-path"]),
            "tokenizer_path": str(self.args.get("tokenizer-path") or self.args["model-path"]),
            "is_generation": True,
            "architectures": self.model_config.get("architectures"),
            "model_type": self.model_config.get("model_type"),
            "weight_version": "default",
            "stand_in": True,
        }

    def server_info(self):
        """`/server_info` in the shape of a real SGLang version, plus knob overrides."""
        disable_graph = argmod.get(self.args, "disable-cuda-graph", False, bool)
        max_bs = argmod.get(self.args, "cuda-graph-max-bs-decode", None, int) or argmod.get(
            self.args, "cuda-graph-max-bs", 256, int
        )
        info = {
            "model_path": str(self.args["model-path"]),
            # Every resolved field (sglang/srt/utils/common.py:3589, build_server_info); an unset
            # tokenizer path resolves to the model path (srt/arg_groups/serving_hook.py:636).
            "tokenizer_path": str(self.args.get("tokenizer-path") or self.args["model-path"]),
            "served_model_name": self.served_model_name,
            "tp_size": argmod.get(self.args, "tp-size", 1, int),
            "host": str(self.args.get("host", "127.0.0.1")),
            "port": argmod.get(self.args, "port", 30000, int),
            "context_length": argmod.get(self.args, "context-length", None, int),
            # SGLang 0.5.23 caps it at 48 with speculative decoding when unset (notes/sglang.md).
            "max_running_requests": argmod.get(self.args, "max-running-requests",
                                               48 if self.speculative() else 256, int),
            "mem_fraction_static": argmod.get(self.args, "mem-fraction-static", None, float),
            "enable_metrics": argmod.get(self.args, "enable-metrics", False, bool),
            "speculative_algorithm": None,
            # SGLang resolves an unset backend for the GPU; the stand-in names one.
            "attention_backend": str(self.args.get("attention-backend") or "flashinfer"),
        }
        info.update(self.speculative())
        # Like SGLang's /server_info (build_server_info over resolved_dict()): keys included.
        info["api_key"] = self.args.get("api-key")
        info["admin_api_key"] = self.args.get("admin-api-key")
        if _legacy_shape(self.knobs.shape):
            info.update(
                disable_cuda_graph=disable_graph,
                cuda_graph_max_bs=max_bs,
                disable_piecewise_cuda_graph=argmod.get(
                    self.args, "disable-piecewise-cuda-graph", False, bool
                ),
            )
        else:
            info["cuda_graph_config"] = {
                "decode": {"backend": "disabled" if disable_graph else "full", "max_bs": max_bs},
                "prefill": {"backend": "disabled" if disable_graph else "breakable", "max_bs": 1},
            }
            # SGLang 0.5.23 records the --config file merged into a command line, keys included.
            info["launch_command"] = " ".join(f"--{k} {v}" for k, v in self.args.items())
        info.update(self.knobs.resolved)
        info["internal_states"] = [self._internal_state()]
        info["version"] = self.knobs.resolved.get("version", self.knobs.shape)
        info["stand_in"] = True
        return info

    def _internal_state(self):
        state = {"last_gen_throughput": self.knobs.tok_s}
        if self.speculative() and self.decode_steps:
            state["avg_spec_accept_length"] = self.observed_accept_length()
        return state

    # ---- generation -----------------------------------------------------------------------
    def admit(self, prompt_tokens, prompt=""):
        """Count one generation request: (alive, cached), alive False when the crash knob says
        die, cached the prompt's leading tokens (words) the prefix cache held."""
        with self.lock:
            self.requests += 1
            self.prompt_tokens += prompt_tokens
            cached = min(prompt_tokens, self.prefix_cache.admit(prompt.split()))
            self.cached_tokens += cached
            alive = not (self.knobs.crash_after and self.requests > self.knobs.crash_after)
        # The prefill's forward pass (SGLang's scheduler counts one per prefill batch).
        self.collectors.scheduler.increment_prefill_cuda_graph_pass(self._graph_on("prefill"))
        return alive, cached

    def prefill_s(self, prompt_tokens, cached):
        """Seconds the prefill of the uncached part of a prompt adds to its first token."""
        if not self.knobs.prefill_tok_s:
            return 0.0
        return max(0, prompt_tokens - cached) / self.knobs.prefill_tok_s

    def per_user_tok_s(self, running=None):
        """Decode tokens per second of one request with `running` in the batch: the knob up to
        the knee, then falling so that the total stays flat (the GPU's bandwidth is spent)."""
        running = self.running if running is None else running
        if self.knobs.knee and running > self.knobs.knee:
            return self.knobs.tok_s * self.knobs.knee / running
        return self.knobs.tok_s

    def observed_accept_length(self):
        """What the server reports: the mean over the recent requests' texts (the knob itself
        when the accept length does not depend on the text)."""
        if not self.knobs.accept_spread or not self.accept_lengths:
            return self.knobs.accept_length
        return round(sum(self.accept_lengths) / len(self.accept_lengths), 4)

    def accept_length_of(self, text):
        """The speculative accept length of one text: the knob, moved by up to accept_spread
        by the text itself (the same text, the same length), as a draft model's hit rate is."""
        if not self.knobs.accept_spread:
            return self.knobs.accept_length
        digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).digest()
        where = int.from_bytes(digest[:4], "big") / 0xFFFFFFFF * 2 - 1
        return round(max(1.0, self.knobs.accept_length * (1 + self.knobs.accept_spread * where)),
                     4)

    def schedule(self, max_tokens, prefill_s=0.0):
        """Yield (seconds after request start, tokens in chunk) for one streamed answer.

        One token comes with the first chunk (the prefill step, `prefill_s` later for the
        uncached part of the prompt), then chunks of `tokens_per_chunk` tokens, each token spaced
        1/tok_s apart (the per-user speed past the knee): so TTFT and TPOT as
        sglang.bench_serving defines them equal the knobs exactly.
        """
        if self.knobs.perf_model:
            yield from self._modelled_schedule(max_tokens)
            return
        ttft = self.knobs.ttft_ms / 1000.0 + prefill_s
        yield ttft, 1
        sent = 1
        at = ttft
        while sent < max_tokens:
            n = min(self.knobs.tokens_per_chunk, max_tokens - sent)
            sent += n
            # Paced at the per-user speed of the batch running now (the knob below the knee).
            at += n / self.per_user_tok_s()
            yield at, n

    def _modelled_schedule(self, max_tokens):
        """As schedule, at the speed the performance model gives for the batch running now."""
        at = perf.ttft_ms(self.running) / 1000.0
        yield at, 1
        sent = 1
        while sent < max_tokens:
            n = min(self.knobs.tokens_per_chunk, max_tokens - sent)
            sent += n
            at += n / perf.tok_s_per_user(self.args, self.running)
            yield at, n

    @contextlib.contextmanager
    def running_request(self):
        """Counts a request in flight (sglang:num_running_reqs), for drains to wait on."""
        with self.lock:
            self.running += 1
        try:
            yield
        finally:
            with self.lock:
                self.running -= 1

    # The events SGLang's tokenizer manager reports to its collectors (tokenizer_manager.py,
    # collect_metrics), at the same moments.
    def first_token(self, ttft_s, stream):
        """The first chunk of a request went out `ttft_s` after it came."""
        self.collectors.tokenizer.observe_time_to_first_token(self.collectors.labels, ttft_s,
                                                              stream=stream)

    def streamed(self, interval_s, tokens):
        """A later chunk of `tokens` went out `interval_s` after the one before: one decode
        forward pass, and the inter-token histogram grows now, while the answer streams."""
        with self.lock:
            self.decode_steps += 1
        self.collectors.scheduler.increment_decode_cuda_graph_pass(self._graph_on("decode"))
        self.collectors.tokenizer.observe_inter_token_latency(self.collectors.labels,
                                                              interval_s, tokens)

    def finished(self, prompt_tokens, tokens, cached, e2e_s, ttft_s, stream,
                 accept_length=None):
        """One request finished: only now do SGLang's token and request counters grow."""
        with self.lock:
            if accept_length is not None:
                self.accept_lengths.append(accept_length)
        tpot = (e2e_s - ttft_s) / (tokens - 1) if tokens > 1 else None
        self.collectors.tokenizer.observe_one_finished_request(
            self.collectors.labels, prompt_tokens, tokens, cached, e2e_s, False,
            is_streaming=stream, time_per_output_token=tpot)

    def set_knobs(self, changes):
        """TEST STAND-IN ONLY: change speed knobs of a running server (POST /standin/knobs), so a
        test can slow a serving release without a restart. Returns the knobs now, or raises
        ValueError naming what it cannot set."""
        settable = {"tok_s": float, "ttft_ms": float, "accept_length": float}
        if not isinstance(changes, dict) or set(changes) - set(settable):
            raise ValueError(f"settable knobs: {sorted(settable)}")
        with self.lock:
            for name, value in changes.items():
                number = settable[name](value)
                if number <= 0:
                    raise ValueError(f"{name} must be above 0")
                setattr(self.knobs, name, number)
            return {name: getattr(self.knobs, name) for name in settable}

    def decode_batch_line(self):
        """SGLang's periodic scheduler line, as the journal shows it."""
        graph = self._graph_on("decode")
        accept = f"accept len: {self.observed_accept_length():.2f}, " if self.speculative() else ""
        return (f"standin: Decode batch, #running-req: 1, {accept}cuda graph: {graph}, "
                f"gen throughput (token/s): {self.knobs.tok_s:.2f}")

    def _graph_on(self, phase):
        """Whether the `phase` ("decode" or "prefill") runs in a CUDA graph, as /server_info
        reports it."""
        info = self.server_info()
        if "cuda_graph_config" in info:
            return info["cuda_graph_config"][phase]["backend"] != "disabled"
        return not info.get("disable_cuda_graph" if phase == "decode"
                            else "disable_piecewise_cuda_graph")

    def metrics(self):
        """The exposition text of /metrics, the scheduler's gauges reported first (SGLang
        reports them each log interval; the stand-in at each scrape)."""
        with self.lock:
            values = {
                "num_running_reqs": self.running,
                "num_queue_reqs": 0,
                "gen_throughput": self.knobs.tok_s,
                "cache_hit_rate": self.cached_tokens / self.prompt_tokens
                if self.prompt_tokens else 0.0,
                "token_usage": min(1.0, self.running / 64),
            }
        if self.speculative():
            values["spec_accept_length"] = self.observed_accept_length()
        self.collectors.report(values)
        return self.collectors.exposition()


def _legacy_shape(shape):
    try:
        return tuple(int(p) for p in shape.split(".")[:3]) <= (0, 5, 12)
    except ValueError:
        return False
