"""What the stand-in reports and how fast it "generates": pure state, no HTTP."""

import contextlib
import json
import os
import threading
import time
from dataclasses import dataclass, field

from . import args as argmod
from . import perf


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
        )


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

    def __init__(self, server_args, knobs):
        self.args = server_args
        self.knobs = knobs
        self.started = time.time()
        self.lock = threading.Lock()
        self.requests = 0
        self.running = 0
        self.draining = False  # SIGTERM received: finishing what runs (server.py)
        self.prompt_tokens = 0
        self.generation_tokens = 0
        self.decode_steps = 0
        self.prefill_steps = 0
        self.ttft_observations = []
        # sglang:inter_token_latency_seconds as SGLang keeps it (metrics_collector.py,
        # observe_inter_token_latency): the sum grows by each decode interval, the count by the
        # tokens it brought, so rate(count) / rate(sum) is tokens per second per stream.
        self.itl_sum = 0.0
        self.itl_count = 0
        self.model_config = _read_model_config(server_args["model-path"])
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
            "served_model_name": self.served_model_name,
            "tp_size": argmod.get(self.args, "tp-size", 1, int),
            "host": str(self.args.get("host", "127.0.0.1")),
            "port": argmod.get(self.args, "port", 30000, int),
            "context_length": argmod.get(self.args, "context-length", None, int),
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
            state["avg_spec_accept_length"] = self.knobs.accept_length
        return state

    # ---- generation -----------------------------------------------------------------------
    def admit(self, prompt_tokens):
        """Count one generation request; returns False when the crash knob says die."""
        with self.lock:
            self.requests += 1
            self.prompt_tokens += prompt_tokens
            self.prefill_steps += 1
            return not (self.knobs.crash_after and self.requests > self.knobs.crash_after)

    def schedule(self, max_tokens):
        """Yield (seconds after request start, tokens in chunk) for one streamed answer.

        One token comes with the first chunk (the prefill step), then chunks of
        `tokens_per_chunk` tokens, each token spaced 1/tok_s apart: so TTFT and TPOT as
        sglang.bench_serving defines them equal the knobs exactly.
        """
        if self.knobs.perf_model:
            yield from self._modelled_schedule(max_tokens)
            return
        ttft = self.knobs.ttft_ms / 1000.0
        yield ttft, 1
        sent = 1
        while sent < max_tokens:
            n = min(self.knobs.tokens_per_chunk, max_tokens - sent)
            sent += n
            yield ttft + (sent - 1) / self.knobs.tok_s, n

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

    def record(self, ttft_s, tokens, decode_s=0.0):
        """One finished request: its TTFT, tokens and the seconds its decode took."""
        with self.lock:
            self.ttft_observations.append(ttft_s)
            self.generation_tokens += tokens
            if tokens > 1 and decode_s > 0:
                self.itl_sum += decode_s
                self.itl_count += tokens - 1
            self.decode_steps += max(0, -(-(tokens - 1) // self.knobs.tokens_per_chunk))

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
        info = self.server_info()
        graph = not (info.get("disable_cuda_graph") or info.get("cuda_graph_config", {})
                     .get("decode", {}).get("backend") == "disabled")
        accept = f"accept len: {self.knobs.accept_length:.2f}, " if self.speculative() else ""
        return (f"standin: Decode batch, #running-req: 1, {accept}cuda graph: {graph}, "
                f"gen throughput (token/s): {self.knobs.tok_s:.2f}")

    def metrics(self):
        name = self.served_model_name
        labels = f'model_name="{name}"'
        graph_off = self.server_info().get("disable_cuda_graph") or (
            self.server_info().get("cuda_graph_config", {}).get("decode", {}).get("backend")
            == "disabled"
        )
        decode_mode = "decode_none" if graph_off else "decode_cuda_graph"
        lines = [
            "# HELP sglang:gen_throughput The generation throughput (token/s).",
            "# TYPE sglang:gen_throughput gauge",
            f"sglang:gen_throughput{{{labels}}} {self.knobs.tok_s}",
            "# TYPE sglang:prompt_tokens_total counter",
            f"sglang:prompt_tokens_total{{{labels}}} {self.prompt_tokens}",
            "# TYPE sglang:generation_tokens_total counter",
            f"sglang:generation_tokens_total{{{labels}}} {self.generation_tokens}",
            "# TYPE sglang:num_running_reqs gauge",
            f"sglang:num_running_reqs{{{labels}}} {self.running}",
            "# TYPE sglang:num_queue_reqs gauge",
            f"sglang:num_queue_reqs{{{labels}}} 0",
            "# TYPE sglang:token_usage gauge",
            f"sglang:token_usage{{{labels}}} {min(1.0, self.running / 64):.4f}",
            "# TYPE sglang:num_requests_total counter",
            f"sglang:num_requests_total{{{labels}}} {self.requests}",
            "# TYPE sglang:cuda_graph_passes_total counter",
            f'sglang:cuda_graph_passes_total{{{labels},mode="{decode_mode}"}} {self.decode_steps}',
            f'sglang:cuda_graph_passes_total{{{labels},mode="prefill_cuda_graph"}} '
            f"{self.prefill_steps}",
        ]
        if self.speculative():
            lines += [
                "# TYPE sglang:spec_accept_length gauge",
                f"sglang:spec_accept_length{{{labels}}} {self.knobs.accept_length}",
            ]
        count = len(self.ttft_observations)
        lines += [
            "# TYPE sglang:time_to_first_token_seconds histogram",
            f'sglang:time_to_first_token_seconds_bucket{{{labels},le="+Inf"}} {count}',
            f"sglang:time_to_first_token_seconds_sum{{{labels}}} {sum(self.ttft_observations)}",
            f"sglang:time_to_first_token_seconds_count{{{labels}}} {count}",
            "# TYPE sglang:inter_token_latency_seconds histogram",
            f'sglang:inter_token_latency_seconds_bucket{{{labels},le="+Inf"}} {self.itl_count}',
            f"sglang:inter_token_latency_seconds_sum{{{labels}}} {self.itl_sum}",
            f"sglang:inter_token_latency_seconds_count{{{labels}}} {self.itl_count}",
        ]
        return "\n".join(lines) + "\n"


def _legacy_shape(shape):
    try:
        return tuple(int(p) for p in shape.split(".")[:3]) <= (0, 5, 12)
    except ValueError:
        return False
