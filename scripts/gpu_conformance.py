"""Real SGLang against the stand-in, on a GPU host (issue 54, part 6): `make gpu-conformance`.

    SGLANG_PYTHON=/opt/ml-env/bin/python make gpu-conformance
    python scripts/gpu_conformance.py [--python PY] [--out DIR] [--server-arg=--flag ...]

It starts real SGLang of the pinned release (roles/sglang/defaults/main.yml's sglang_version,
from the env whose python is --python or $SGLANG_PYTHON) on a tiny generated model (a Qwen2
config.json of a few layers, `--load-format dummy`: random weights, nothing downloaded, and a
word-level tokenizer, tests/support/make_tokenizer.py), waits until it generates a token, and
captures /health_generate, /server_info, /metrics, one `python -m sglang.bench_serving` run
(random-ids, a few requests, --output-file, --output-details: the command line the proof uses,
sglang_workload.argv) and /metrics again. Then it starts the stand-in
(`python -m sglang_standin`, PYTHONPATH=tests/standin) with the same model directory and
arguments, once per metrics source it is asked for (--standin-metrics: the prometheus_client copy
the molecule hosts run, SGLang's own collectors the demo runs), makes the same calls and compares
each answer with SGLang's (tests/support/conformance.py).

Everything goes into one directory outside the clone (--out; a new one under the temporary
directory by default): report.json, the captured answers, each server's log. Exit codes:
0 no difference that matters, 1 a difference that matters (the table says which), 2 nothing
could be compared (no such python, another release, a server that did not get ready),
3 no GPU here (nothing was started; never a pass).
"""

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

sys.dont_write_bytecode = True  # run from the clone: no __pycache__ in the working tree
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from support import conformance, make_tokenizer  # noqa: E402

from ansible_collections.sglang.deploy.plugins.module_utils import sglang_workload  # noqa: E402

EXIT_EQUAL, EXIT_DIFFERENT, EXIT_NOT_COMPARED, EXIT_NO_GPU = 0, 1, 2, 3
MODEL_NAME = "conformance-tiny"
STANDIN_METRICS = ("prometheus_client", "sglang")
# The stand-in as real SGLang streams without speculative decoding: one token a chunk; fast.
STANDIN_KNOBS = {"SGLANG_STANDIN_TOKENS_PER_CHUNK": "1", "SGLANG_STANDIN_TOK_S": "200",
                 "SGLANG_STANDIN_TTFT_MS": "50"}
POLL_S = 2  # between two readiness tries
SETTLE_S = 2  # after the benchmark, before the last scrape: the scheduler's counts land


class NotCompared(Exception):
    """Nothing can be compared: the message says what was waited for or is missing."""


# --- what the host has ---------------------------------------------------------------------------

def find_gpu(run=subprocess.run, which=shutil.which):
    """(True, the GPUs `nvidia-smi -L` lists) or (False, why there is no GPU here)."""
    smi = which("nvidia-smi")
    if not smi:
        return False, "nvidia-smi is not on PATH (no NVIDIA driver on this host)"
    try:
        done = run([smi, "-L"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return False, f"{smi} -L did not run: {exc}"
    gpus = [line.strip() for line in done.stdout.splitlines() if line.startswith("GPU ")]
    if done.returncode != 0 or not gpus:
        said = (done.stdout + done.stderr).strip()[-300:]
        return False, f"{smi} -L lists no GPU (exit {done.returncode}: {said or 'no output'})"
    return True, gpus


def pinned_version(root=ROOT):
    """The release the role installs by default (roles/sglang/defaults/main.yml)."""
    import yaml

    with open(root / "roles/sglang/defaults/main.yml", encoding="utf-8") as handle:
        return str(yaml.safe_load(handle)["sglang_version"])


def installed_version(python):
    """The sglang version `python`'s env holds; NotCompared when it has none."""
    if not python:
        raise NotCompared("no python given: set SGLANG_PYTHON (or --python) to the python of "
                          "an env that has the pinned SGLang, e.g. /opt/ml-env/bin/python")
    code = "import importlib.metadata as m; print(m.version('sglang'))"
    try:
        done = subprocess.run([python, "-c", code], capture_output=True, text=True,
                              timeout=120, cwd="/")
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise NotCompared(f"{python} did not run: {exc}") from None
    if done.returncode != 0:
        raise NotCompared(f"{python} has no sglang: {done.stderr.strip()[-300:]}")
    return done.stdout.strip()


def write_model(directory):
    """A tiny Qwen2 checkpoint without weights (--load-format dummy) and its tokenizer: 2048
    ids (head dim 64, as every attention backend takes), words w1..w2047 (encode(decode(ids))
    == ids, so the benchmark's random-ids prompts count the same on both sides)."""
    make_tokenizer.build(str(directory), 2047)
    config = {
        "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "vocab_size": 2048,
        "hidden_size": 256, "intermediate_size": 512, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 4096,
        "rms_norm_eps": 1e-6, "rope_theta": 10000.0, "hidden_act": "silu",
        "tie_word_embeddings": True, "torch_dtype": "bfloat16", "bos_token_id": 0,
        "eos_token_id": 0, "use_sliding_window": False, "max_window_layers": 2,
        "attention_dropout": 0.0, "initializer_range": 0.02}
    for name, content in (("config.json", config),
                          ("generation_config.json", {"bos_token_id": 0, "eos_token_id": 0})):
        (Path(directory) / name).write_text(json.dumps(content, indent=1) + "\n")


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


# --- HTTP ----------------------------------------------------------------------------------------

def http(url, body=None, timeout=30):
    """(status, text) of a GET (or a POST of `body` as JSON); status None when nothing answered."""
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as answer:
            return answer.status, answer.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode("utf-8", "replace")
    except (OSError, ValueError):
        return None, ""


def generated(url, timeout=60):
    """Whether the server generated a token for a completion."""
    body = {"model": MODEL_NAME, "prompt": "w1 w2 w3", "max_tokens": 2, "temperature": 0}
    status, text = http(url + "/v1/completions", body, timeout)
    try:
        return status == 200 and json.loads(text)["usage"]["completion_tokens"] >= 1
    except (ValueError, KeyError, TypeError):
        return False


# --- a server ------------------------------------------------------------------------------------

class Server:
    """One server process (its own session: SGLang starts a scheduler and a detokenizer beside
    it, stopped with it), its log in a file."""

    def __init__(self, name, argv, env, log, url):
        self.name, self.argv, self.env, self.log, self.url = name, argv, env, log, url
        self.process = None

    def start(self):
        with open(self.log, "wb") as out:
            self.process = subprocess.Popen(self.argv, env=self.env, stdout=out,
                                            stderr=subprocess.STDOUT, cwd=self.log.parent,
                                            start_new_session=True)

    def tail(self, lines=15):
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def wait_ready(self, bound, stall, clock=time.monotonic, sleep=time.sleep):
        """Wait until the server generates a token for POST /v1/completions, as long as its
        log grows (progress: loading, CUDA graph capture, kernel compilation) and at most
        `bound` s; NotCompared naming what was waited for when it exits, stalls for `stall` s
        or takes longer than `bound`."""
        started = last_progress = clock()
        size = -1
        what = f"{self.name} to generate a token for POST {self.url}/v1/completions"
        while True:
            if self.process.poll() is not None:
                raise NotCompared(f"{self.name} exited with {self.process.returncode} before it "
                                  f"generated a token; its log ({self.log}):\n{self.tail()}")
            if generated(self.url):
                return round(clock() - started, 1)
            now_size = self.log.stat().st_size if self.log.exists() else 0
            if now_size != size:
                size, last_progress = now_size, clock()
            if clock() - last_progress > stall:
                raise NotCompared(f"waited {clock() - started:.0f} s for {what}: its log did not "
                                  f"grow for {stall} s (no progress); last lines:\n{self.tail()}")
            if clock() - started > bound:
                raise NotCompared(f"waited {bound} s (the bound) for {what}, its log still "
                                  f"growing; last lines:\n{self.tail()}")
            sleep(POLL_S)

    def stop(self):
        """SIGTERM to its session, SIGKILL after 60 s."""
        if not self.process or self.process.poll() is not None:
            return
        for sig, wait in ((signal.SIGTERM, 60), (signal.SIGKILL, 30)):
            try:
                os.killpg(self.process.pid, sig)
            except ProcessLookupError:
                return
            try:
                self.process.wait(timeout=wait)
                return
            except subprocess.TimeoutExpired:
                continue


# --- what is captured ----------------------------------------------------------------------------

def bench(python, url, model_dir, out, args):
    """One run of SGLang's benchmark as the proof runs it (sglang_workload.argv and env):
    (record or None, its exit code, the tail of its output)."""
    w = {"dataset": "random-ids", "backend": "sglang-oai", "input_len": args.input_len,
         "output_len": args.output_len, "range_ratio": 1.0, "dataset_path": "", "seed": 1,
         "requests_per_level": args.requests, "min_requests": args.requests}
    output, home = out / "bench.jsonl", out / "bench-home"
    home.mkdir(exist_ok=True)
    argv = sglang_workload.argv(python, url, w, args.concurrency, str(output),
                                tokenizer=str(model_dir), model=MODEL_NAME,
                                slo={"ttft_p99_ms": 60000, "itl_p99_ms": 60000})
    try:
        done = subprocess.run(argv, env=sglang_workload.env(os.environ, "", str(home)),
                              capture_output=True, text=True, timeout=args.bench_timeout,
                              cwd=out)
        code, said = done.returncode, (done.stdout + done.stderr)[-2000:]
    except subprocess.TimeoutExpired:
        code, said = None, f"did not end within {args.bench_timeout} s"
    text = output.read_text() if output.exists() else ""
    return sglang_workload.read_run(text), code, said


def capture(server, python, model_dir, out, args):
    """Start `server`, wait until it generates, then /health_generate, /server_info, /metrics,
    the benchmark, /metrics again; stop it. What it answered, each answer saved under `out`."""
    out.mkdir(parents=True, exist_ok=True)
    server.start()
    try:
        ready_after = server.wait_ready(args.ready_timeout, args.stall_timeout)
        health, _ = http(server.url + "/health_generate", timeout=120)
        status, info_text = http(server.url + "/server_info")
        before = http(server.url + "/metrics")[1]
        record, code, said = bench(python, server.url, model_dir, out, args)
        time.sleep(SETTLE_S)
        after = http(server.url + "/metrics")[1]
    finally:
        server.stop()
    try:
        info = json.loads(info_text)
    except ValueError:
        info = None
    answers = {"argv": server.argv, "log": str(server.log), "health_generate": health,
               "server_info_status": status, "server_info": info,
               "metrics_before": before, "metrics_after": after, "bench": record,
               "bench_exit": code, "bench_output": said, "ready_after_s": ready_after}
    for name, text in (("metrics-before.txt", before), ("metrics-after.txt", after),
                       ("server_info.json", json.dumps(info, indent=1))):
        (out / name).write_text(text)
    return answers


def server_argv(python, module, model_dir, port, extra):
    """The same arguments for SGLang and the stand-in."""
    return [python, "-m", module, "--model-path", str(model_dir), "--load-format", "dummy",
            "--served-model-name", MODEL_NAME, "--host", "127.0.0.1", "--port", str(port),
            "--enable-metrics", *extra]


def servers(python, model_dir, out, args):
    """(name, Server) of SGLang, then of the stand-in once per metrics source."""
    base = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
                PYTHONDONTWRITEBYTECODE="1")
    base.pop("PROMETHEUS_MULTIPROC_DIR", None)
    port = free_port()
    yield "sglang", Server(f"SGLang {args.version}",
                           server_argv(python, "sglang.launch_server", model_dir, port,
                                       args.server_arg),
                           base, out / "sglang" / "server.log", f"http://127.0.0.1:{port}")
    for source in args.standin_metrics:
        port = free_port()
        prom = out / f"standin-{source}" / "prometheus"
        prom.mkdir(parents=True, exist_ok=True)
        env = dict(base, PYTHONPATH=str(ROOT / "tests" / "standin"),
                   SGLANG_STANDIN_METRICS=source, PROMETHEUS_MULTIPROC_DIR=str(prom),
                   **STANDIN_KNOBS)
        yield f"standin-{source}", Server(
            f"the stand-in ({source} metrics)",
            server_argv(python, "sglang_standin", model_dir, port, args.server_arg), env,
            out / f"standin-{source}" / "server.log", f"http://127.0.0.1:{port}")


# --- the comparison and the report ---------------------------------------------------------------

def compare(sglang, standin, planned, names):
    """Every difference between SGLang's answers and the stand-in's (conformance.py)."""
    c = conformance
    read = c.families_read(names, c.parse(sglang["metrics_after"]),
                           c.parse(standin["metrics_after"]))
    return (c.compare_metrics(sglang["metrics_after"], standin["metrics_after"], read)
            + c.compare_growth((sglang["metrics_before"], sglang["metrics_after"]),
                               (standin["metrics_before"], standin["metrics_after"]))
            + c.compare_server_info(sglang["server_info"], standin["server_info"])
            + c.compare_health(sglang["health_generate"], standin["health_generate"])
            + c.compare_bench(sglang["bench"], standin["bench"], planned))


def _cell(value, width):
    text = value if isinstance(value, str) else json.dumps(value)
    return text if len(text) <= width else text[:width - 3] + "..."


def table(name, differences):
    """The lines that show a comparison's differences, the ones that matter first."""
    rows = sorted(differences, key=lambda d: (not d["matters"], d["part"], d["where"]))
    lines = [f"{name}: {len(conformance.matters(rows))} differences that matter, "
             f"{len(rows) - len(conformance.matters(rows))} noted",
             f"  {'!!':2} {'part':15} {'kind':26} {'where':46} {'SGLang':22} {'stand-in':22}"]
    for d in rows:
        lines.append(f"  {'!!' if d['matters'] else '  '} {d['part']:15} {_cell(d['kind'], 26):26} "
                     f"{_cell(d['where'], 46):46} {_cell(d['sglang'], 22):22} "
                     f"{_cell(d['standin'], 22):22}")
    return lines


def write_report(path, report):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=1, default=str) + "\n")
    print(f"report: {path}", flush=True)


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--python", default=os.environ.get("SGLANG_PYTHON", ""),
                        help="python of an env with the pinned SGLang (default $SGLANG_PYTHON)")
    parser.add_argument("--out", type=Path, default=None,
                        help="directory of the report and the answers (default: a new one "
                             "under the temporary directory)")
    parser.add_argument("--version", default=None, help="the release expected (default: the "
                        "role's sglang_version)")
    parser.add_argument("--standin-metrics", type=lambda s: s.split(","),
                        default=list(STANDIN_METRICS),
                        help="the stand-in's metrics sources, comma-separated (default "
                             "prometheus_client,sglang)")
    parser.add_argument("--server-arg", action="append", default=[],
                        help="one more argument for both servers (repeat; --server-arg=--flag)")
    for flag, default in (("--requests", 4), ("--concurrency", 2), ("--input-len", 32),
                          ("--output-len", 16), ("--ready-timeout", 3600),
                          ("--stall-timeout", 900), ("--bench-timeout", 900)):
        parser.add_argument(flag, type=int, default=default)
    return parser.parse_args(argv)


def run_all(args, out):
    """Every server's answers ({name: answers}), one server at a time on the same GPU."""
    model_dir = out / "model"
    write_model(model_dir)
    answers = {}
    for name, server in servers(args.python, model_dir, out, args):
        print(f"starting {server.name}: {' '.join(server.argv)}", flush=True)
        answers[name] = capture(server, args.python, model_dir, out / name, args)
        print(f"{server.name}: generated after {answers[name]['ready_after_s']} s, "
              f"benchmark exit {answers[name]['bench_exit']}", flush=True)
    return answers


def summary(answers):
    """What the report keeps of a server's answers (the texts are files beside it)."""
    return {k: v for k, v in answers.items()
            if k not in ("metrics_before", "metrics_after", "server_info", "bench")}


def verdict(args, out, answers):
    """Compare each stand-in with SGLang, print the tables, write the report; the exit code."""
    names = conformance.read_names(conformance.project_texts())
    comparisons = {name: compare(answers["sglang"], answers[name], args.requests, names)
                   for name in answers if name != "sglang"}
    failing = sum(len(conformance.matters(d)) for d in comparisons.values())
    for name, differences in comparisons.items():
        print("\n".join(table(f"{name} against SGLang {args.version}", differences)))
    code = EXIT_DIFFERENT if failing else EXIT_EQUAL
    write_report(out / "report.json", {
        "status": "different" if failing else "equal", "exit_code": code,
        "version": args.version, "python": args.python, "out": str(out),
        "differences_that_matter": failing, "comparisons": comparisons,
        "answers": {name: summary(a) for name, a in answers.items()}})
    print(f"{failing} differences that matter" if failing else
          "no difference that matters between SGLang and the stand-in")
    return code


def main(argv=None, gpu=find_gpu):
    args = parse_args(argv)
    out = args.out or Path(tempfile.mkdtemp(prefix="sglang-gpu-conformance-"))
    out.mkdir(parents=True, exist_ok=True)
    args.version = args.version or pinned_version()
    base = {"version": args.version, "python": args.python, "out": str(out)}
    found, said = gpu()
    if not found:
        write_report(out / "report.json", dict(base, status="no_gpu", exit_code=EXIT_NO_GPU,
                                               why=said))
        print(f"NO GPU: {said}. Nothing was started and nothing compared: this is not a pass "
              f"(exit {EXIT_NO_GPU}).", file=sys.stderr)
        return EXIT_NO_GPU
    print(f"GPUs: {'; '.join(said)}", flush=True)
    try:
        installed = installed_version(args.python)
        if installed != args.version:
            raise NotCompared(f"{args.python} has sglang {installed}, not the pinned "
                              f"{args.version} (--version to compare another)")
        answers = run_all(args, out)
    except NotCompared as exc:
        write_report(out / "report.json", dict(base, status="not_compared", gpus=said,
                                               exit_code=EXIT_NOT_COMPARED, why=str(exc)))
        print(f"NOT COMPARED: {exc}", file=sys.stderr)
        return EXIT_NOT_COMPARED
    return verdict(args, out, answers)


if __name__ == "__main__":
    sys.exit(main())
