"""sglang_serving_bench: a release measured at a workload, level by level, by SGLang's own
benchmark (the record it writes: tests/unit/data/bench_serving-0.5.23.jsonl, two lines a real
0.5.23 `python -m sglang.bench_serving --output-file` appended), and its proven capacity. Where
SGLang's benchmark cannot run (this venv has no SGLang), the own bench measures the stand-in at
the same workload: the capacity it finds is the knee the stand-in was given."""

import contextlib
import json
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import pytest
from sglang_standin.engine import Knobs
from support import load_module

from ansible_collections.sglang.deploy.plugins.module_utils import sglang_workload as workloads

bench = load_module("sglang_serving_bench")
RECORDED = (Path(__file__).parent / "data" / "bench_serving-0.5.23.jsonl").read_text()


def detailed(text, errors):
    """The recorded lines as --output-details writes them: `errors`, one entry a request sent
    ("" when it completed; serving.py:1942-1966), beside the summary."""
    return "".join(
        json.dumps(dict(json.loads(line), errors=errors,
                        completed=sum(1 for e in errors if not e))) + "\n"
        for line in text.splitlines() if line.strip())


DETAILED = detailed(RECORDED, [""] * 20)
KEY = "sk-" + "k" * 29


def test_the_key_goes_in_the_environment_never_the_command_line():
    w = workloads.check({})
    argv = workloads.argv("/e/bin/python", "http://127.0.0.1:30000/", w, 8, "/w/l.jsonl",
                          "/srv/models/q", "", {"ttft_p99_ms": 3000, "itl_p99_ms": 60})
    assert KEY not in " ".join(argv)
    assert argv[:3] == ["/e/bin/python", "-m", "sglang.bench_serving"]
    assert argv[argv.index("--base-url") + 1] == "http://127.0.0.1:30000"
    assert argv[argv.index("--dataset-name") + 1] == "random-ids"  # synthetic, offline
    assert argv[argv.index("--max-concurrency") + 1] == "8"
    assert argv[argv.index("--num-prompts") + 1] == "32"  # 4 per stream
    assert argv[argv.index("--goodput"):argv.index("--goodput") + 3] == [
        "--goodput", "ttft:3000", "tpot:60"]
    env = workloads.env({"PATH": "/bin", "API_KEY": "old"}, KEY, "/w")
    assert env["OPENAI_API_KEY"] == KEY and "API_KEY" not in env
    assert env["HF_HUB_OFFLINE"] == "1" and env["HOME"] == "/w"


def test_every_problem_of_a_workload_is_said_at_once():
    with pytest.raises(workloads.WorkloadError) as err:
        workloads.check({"dataset": "random", "input_len": 0, "range_ratio": 2})
    said = str(err.value)
    assert "dataset 'random': one of random-ids" in said
    assert "input_len 0" in said and "range_ratio 2" in said


@pytest.mark.parametrize("path", ["traffic.jsonl", "--dataset-name=random"])
def test_a_custom_dataset_is_named_by_an_absolute_path(path):
    """Round six: the benchmark runs in a directory of its own, where a relative path names
    nothing (found only after the restart, by a proof that failed every level); one that looks
    like an option is not a path."""
    with pytest.raises(workloads.WorkloadError, match="an absolute path on the host"):
        workloads.check({"dataset": "custom", "dataset_path": path})
    assert workloads.check({"dataset": "custom", "dataset_path": "/srv/traffic.jsonl"})


def test_a_level_reads_sglangs_record_percentiles_tok_s_accept_and_goodput():
    record = workloads.read_run(DETAILED + "not json\n")
    assert record["request_rate"] == float("inf")  # a bare Infinity reads
    level = workloads.level(record, 4, 20)
    assert level["completed"] == level["requests"] == 20 and level["errors"] == 0
    assert workloads.misses(level, {}) == []
    assert level["ttft_ms"]["p99"] == record["p99_ttft_ms"]
    assert level["itl_ms"]["p50"] == record["median_itl_ms"]
    assert level["e2e_ms"]["p90"] == record["p90_e2e_latency_ms"]
    assert level["tok_s_per_user"] == round(1000 / record["mean_tpot_ms"], 2)
    assert level["accept_length"] == 3.0 and level["goodput_rps"] == record["request_goodput"]



def test_a_levels_counts_are_what_the_benchmark_sent_never_what_the_command_line_asked():
    """Issue 54: the shared-prefix dataset sends groups x prompts per group, a custom file at
    most its rows: what was sent, completed and failed is read from the record's own list."""
    planned = 20
    # It sent 64 x 16 (the dataset's defaults) and 3 failed: read as 1024 sent, 3 failed.
    many = workloads.read_run(detailed(RECORDED, [""] * 1021 + ["HTTP 500"] * 3))
    level = workloads.level(many, 4, planned)
    assert (level["requests"], level["completed"], level["errors"]) == (1024, 1021, 3)
    assert workloads.misses(level, {}) == ["3 of 1024 requests failed"]
    # A short file: 6 sent, all completed: fewer than the level asks, so it proves nothing.
    short = workloads.level(workloads.read_run(detailed(RECORDED, [""] * 6)), 4, planned)
    assert (short["requests"], short["errors"], short["planned"]) == (6, 0, 20)
    assert workloads.misses(short, {}) == [
        "6 requests sent of the 20 the level asks (a custom file with fewer usable rows?)"]
    # No list (no --output-details): how many were sent is not known, so the level never meets.
    bare = workloads.level(workloads.read_run(RECORDED), 4, planned)
    assert bare["requests"] is None and "does not say which requests" in \
        workloads.misses(bare, {})[0]
    # Counts that disagree, and a run that sent nothing, are misses too.
    odd = workloads.level(dict(many, completed=1000), 4, planned)
    assert "counts disagree" in workloads.misses(dict(odd, errors=0), {})[0]
    none = workloads.level(workloads.read_run(detailed(RECORDED, [])), 4, planned)
    assert "sent no request" in workloads.misses(none, {})[0]


def test_the_shared_prefix_dataset_is_asked_for_the_levels_requests():
    """Without --gsp-num-groups/--gsp-prompts-per-group it sends 64 x 16 = 1024 requests at
    every level (datasets/generated_shared_prefix.py:92-93), whatever --num-prompts says."""
    w = workloads.check({"dataset": "generated-shared-prefix", "min_requests": 6})
    argv = workloads.argv("/e/bin/python", "http://h:1", w, 8, "/w/l.jsonl")
    groups = int(argv[argv.index("--gsp-num-groups") + 1])
    per_group = int(argv[argv.index("--gsp-prompts-per-group") + 1])
    assert groups * per_group == workloads.requests_at(w, 8) == 32 and per_group == 4
    assert workloads.gsp_groups(6) == (2, 4) and workloads.gsp_groups(3) == (1, 3)
    assert "--output-details" in argv


def _level(concurrency, ttft, itl, tok_s, errors=0):
    return {"concurrency": concurrency, "requests": 16, "completed": 16 - errors,
            "errors": errors, "ttft_ms": {"p50": ttft, "p90": ttft, "p99": ttft},
            "itl_ms": {"p50": itl, "p90": itl, "p99": itl}, "e2e_ms": {},
            "tok_s_per_user": tok_s}


SLO = {"ttft_p99_ms": 1000, "itl_p99_ms": 50, "min_tok_s_per_user": 20}


def test_the_capacity_is_the_highest_level_that_met_every_slo_on_evidence():
    levels = [_level(1, 200, 20, 50), _level(8, 400, 30, 33), _level(16, 900, 45, 22),
              _level(32, 1800, 80, 12)]
    judged, capacity = workloads.judge(levels, SLO)
    assert capacity == {"concurrency": 16, "reason": "32 missed: ttft_p99_ms: 1800 above 1000; "
                                                       "itl_p99_ms: 80 above 50; "
                                                       "min_tok_s_per_user: 12 below 20"}
    assert [lv["met"] for lv in judged] == [True, True, True, False]
    # A failed request, or a figure the run did not give, is a miss: no capacity on no evidence.
    _judged, capacity = workloads.judge([_level(1, 200, 20, 50, errors=1)], SLO)
    assert capacity["concurrency"] is None and "1 of 16 requests failed" in capacity["reason"]
    _judged, capacity = workloads.judge([_level(1, None, 20, 50)], SLO)
    assert capacity["concurrency"] is None and "ttft_p99_ms: not measured" in capacity["reason"]
    assert workloads.judge([], SLO)[1] == {"concurrency": None, "reason": "no level was measured"}
    assert "may lie beyond" in workloads.judge(levels[:2], SLO)[1]["reason"]


def test_a_level_that_met_above_one_that_missed_is_not_capacity():
    """16 met, but 8 below it missed: the capacity is 1 (luck at 16 is not capacity)."""
    levels = [_level(1, 200, 20, 50), _level(8, 400, 30, 12), _level(16, 900, 45, 22)]
    judged, capacity = workloads.judge(list(reversed(levels)), SLO)
    assert [lv["concurrency"] for lv in judged] == [1, 8, 16]
    assert capacity["concurrency"] == 1 and capacity["reason"].startswith("8 missed")


def test_the_quick_proof_measures_the_levels_its_gates_need_then_bisects():
    levels = [1, 2, 4, 8, 16, 32, 48]
    # No baseline: the lowest and the production concurrency; a baseline's capacity and the
    # level above it (a faster release proves more).
    assert workloads.first_levels(levels) == [1, 48]
    assert workloads.first_levels(levels, 8) == [1, 8, 16]
    assert workloads.first_levels(levels, 48) == [1, 48]
    assert workloads.first_levels(levels, 12) == [1, 48]  # not a level: the top

    def met(*pairs):
        return [{"concurrency": c, "met": ok} for c, ok in pairs]

    assert workloads.next_level(levels, met((1, True), (48, False))) == 8
    assert workloads.next_level(levels, met((1, True), (8, True), (48, False))) == 32
    assert workloads.next_level(levels, met((1, True), (8, True), (16, False), (48, False))) is None
    assert workloads.next_level(levels, met((1, True), (48, True))) is None  # the top met
    assert workloads.next_level(levels, met((1, False), (48, False))) is None  # none met


def test_the_quick_proof_pins_the_knee_a_sweep_finds_in_fewer_levels(standin):
    """Knee 8 at 60 tok/s per user, held to 40: a sweep of 1..32 and the quick proof find 8;
    the quick proof measured 1, 32, then 8 and 16 (bisected); with that proof as baseline,
    1, 8 and 16 only."""
    url, _engine = standin(knobs=Knobs(ttft_ms=5, tok_s=60, tokens_per_chunk=1, knee=8))
    params = {"url": url, "api_key": "", "python": "/nonexistent/python", "tokenizer": "",
              "model": "", "levels": [1, 2, 4, 8, 16, 32], "mode": "sweep", "baseline": {},
              "own_bench": False, "sandbox": {}, "timeout": 120,
              "workload": {"input_len": 32, "output_len": 24, "range_ratio": 1.0,
                           "min_requests": 2},
              "slo": {"min_tok_s_per_user": 40}}
    sweep = bench.run(params)
    quick = bench.run(dict(params, mode="quick"))
    again = bench.run(dict(params, mode="quick", baseline=quick["record"]))
    seen = {name: ([lv["concurrency"] for lv in r["levels"]], r["capacity"]["concurrency"],
                   r["elapsed_s"]) for name, r in (("sweep", sweep), ("quick", quick),
                                                   ("quick again", again))}
    print(seen)
    assert seen["sweep"][:2] == ([1, 2, 4, 8, 16, 32], 8)
    assert seen["quick"][:2] == ([1, 8, 16, 32], 8)
    assert seen["quick again"][:2] == ([1, 8, 16], 8)
    assert again["record"]["mode"] == "quick" and "table" not in again["record"]


def test_own_bench_prompts_miss_the_prefix_cache_and_follow_the_seed():
    w = workloads.check({"input_len": 100, "range_ratio": 0.5, "seed": 7})
    first = workloads.prompts(w, 20)
    assert first == workloads.prompts(w, 20) and first != workloads.prompts(dict(w, seed=8), 20)
    assert all(50 <= len(p.split()) <= 100 for p in first)
    assert len({p.split()[0] for p in first}) == 20  # no two share a first word


def test_where_sglangs_benchmark_cannot_run_the_own_bench_says_so_and_finds_the_knee(standin):
    """The stand-in serves 25 tok/s per user up to 4 streams, then the total stays flat: at a
    floor of 18 tok/s per user the capacity is 4 (8 streams get 12.5 each). A token each 40 ms
    (10 ms sleeps overslept on a loaded CI host) and 4 requests per stream (one wave of 8 let
    its streams start and end apart, and read 60 tok/s at 8 in a CI run)."""
    url, engine = standin(knobs=Knobs(ttft_ms=5, tok_s=25, tokens_per_chunk=1, knee=4,
                                      prefill_tok_s=20000))
    params = {"url": url, "api_key": "", "python": sys.executable, "tokenizer": "",
              "model": "", "levels": [1, 2, 4, 8], "mode": "sweep", "baseline": {}, "own_bench": False, "sandbox": {}, "timeout": 120,
              "workload": {"input_len": 64, "output_len": 16, "range_ratio": 1.0,
                           "min_requests": 8},
              "slo": {"min_tok_s_per_user": 18, "ttft_p99_ms": 2000}}
    result = bench.run(params)
    figures = {lv["concurrency"]: lv["tok_s_per_user"] for lv in result["levels"]}
    print(f"measured by {result['measured_by']} ({result['own_bench_reason']}); tok/s per user "
          f"by level {figures}; capacity {result['capacity']} (knee 4)")
    assert result["measured_by"] == "own bench"
    assert "sglang.bench_serving --help exited 1" in result["own_bench_reason"]
    assert result["capacity"]["concurrency"] == 4, result["capacity"]
    assert figures[8] < 18 < figures[4]
    # The prompts missed the prefix cache (random words from the seed; one fixed prompt would
    # have hit it after its first request).
    assert engine.cached_tokens < 0.05 * engine.prompt_tokens


@pytest.mark.skipif(not os.access("/bin/true", os.X_OK), reason="no /bin/true")
def test_a_level_that_writes_no_record_counts_every_request_failed(tmp_path):
    w = workloads.check({"requests_per_level": 5})
    params = {"python": "/bin/true", "url": "http://127.0.0.1:9", "tokenizer": "", "model": "",
              "slo": {}, "timeout": 30, "api_key": ""}
    with contextlib.ExitStack() as stack:
        level = bench.sglang_level(params, w, 2, bench.Runner({}, "", stack))
    assert level["errors"] == 5 and level["completed"] == 0 and "no result" in level["error"]
    # The proof's table says why: what the benchmark said, beside the count.
    [said] = workloads.misses(dict(level, error="exit 1, no result: ZeroDivisionError"), {})
    assert said == "5 of 5 requests failed (exit 1, no result: ZeroDivisionError)"


def test_a_benchmark_that_fails_is_quoted_from_its_end_with_the_key_removed(tmp_path):
    """Found on the demo: SGLang's benchmark prints pages of import warnings, then the traceback
    whose last line says why; the start of its output said nothing."""
    key = "sk-" + "q" * 29
    fake = tmp_path / "python"
    fake.write_text("#!/bin/sh\n"
                    f"for i in $(seq 40); do echo 'UserWarning: only CUDA supports this' >&2; done\n"
                    f"echo 'Authorization: Bearer {key}' >&2\n"
                    "echo 'ValueError: Warmup failed: Not Found' >&2\nexit 1\n")
    fake.chmod(0o755)
    w = workloads.check({"requests_per_level": 4})
    params = {"python": str(fake), "url": "http://127.0.0.1:9", "tokenizer": "", "model": "",
              "slo": {}, "timeout": 30, "api_key": key}
    with contextlib.ExitStack() as stack:
        level = bench.sglang_level(params, w, 1, bench.Runner({}, key, stack))
    assert level["error"].endswith("ValueError: Warmup failed: Not Found")
    assert level["error"].startswith("exit 1, no result: ...") and key not in level["error"]
    assert len(level["error"]) < 700


@pytest.mark.parametrize("dataset", ["generated-shared-prefix", "custom"])
def test_the_own_bench_never_stands_in_for_another_dataset(dataset):
    """Round six: the own bench sends random words; it refuses to call a shared-prefix or custom
    workload measured."""
    params = {"url": "http://127.0.0.1:9", "api_key": "", "python": "/nonexistent/python",
              "tokenizer": "", "model": "", "levels": [1], "mode": "sweep", "baseline": {},
              "own_bench": False, "sandbox": {}, "timeout": 30, "slo": {},
              "workload": {"dataset": dataset, "dataset_path": "/srv/traffic.jsonl"}}
    with pytest.raises(workloads.WorkloadError, match=f"dataset {dataset} needs SGLang's benchmark"):
        bench.run(params)


def fake_bench(body):
    """A shell script that stands in for <env>/bin/python -m sglang.bench_serving: `--help`
    succeeds; a run finds its --output-file in $out, then runs `body`."""
    return ('#!/bin/sh\ncase "$*" in *--help*) exit 0;; esac\n'
            'out=; prev=; for a in "$@"; do [ "$prev" = "--output-file" ] && out=$a; prev=$a; done\n'
            + body + "\n")


# Says who it runs as and where, and appends the recorded result to its output.
FAKE_BENCH = fake_bench(
    """echo "$(id -u) $(id -G) $(stat -c '%u %a' "$HOME") $(pwd)" >> "$SGLANG_TEST_SEEN"\n"""
    'cat "$SGLANG_TEST_RECORD" >> "$out"')


@pytest.mark.skipif(os.geteuid() != 0, reason="runs the benchmark as another account: needs root")
def test_sglangs_benchmark_runs_as_the_service_user_in_a_directory_of_its_own(monkeypatch):
    """Round six: SGLang's benchmark loads the tokenizer with trust_remote_code=True (0.5.23
    sglang/benchmark/utils.py:60-62), the model directory's or the one /model_info names: run as
    root it ran that code as root. It runs as the service user (its primary group only), in a
    0700 directory that user owns, and the record it writes is read back."""
    nobody = pwd.getpwnam("nobody")
    shared = Path(tempfile.mkdtemp(prefix="bench-as-"))
    try:
        shared.chmod(0o777)  # the fake benchmark, readable and writable by nobody
        python = shared / "python"
        python.write_text(FAKE_BENCH)
        python.chmod(0o755)
        (shared / "record.jsonl").write_text(DETAILED)
        monkeypatch.setenv("SGLANG_TEST_SEEN", str(shared / "seen"))
        monkeypatch.setenv("SGLANG_TEST_RECORD", str(shared / "record.jsonl"))
        params = {"url": "http://127.0.0.1:9", "api_key": KEY, "python": str(python),
                  "tokenizer": "/srv/models/q", "model": "m", "levels": [4], "mode": "sweep",
                  "baseline": {}, "own_bench": False, "timeout": 60, "slo": {},
                  "workload": {"requests_per_level": 20}, "sandbox": {"user": "nobody"}}
        result = bench.run(params)
        assert result["measured_by"] == "sglang.bench_serving"
        assert result["levels"][0]["completed"] == 20, result["levels"]
        uid, gids, home_owner, home_mode, cwd = (shared / "seen").read_text().split()
        assert (uid, gids) == (str(nobody.pw_uid), str(nobody.pw_gid))  # no group of root's
        assert (home_owner, home_mode) == (str(nobody.pw_uid), "700") and cwd.startswith("/")
        assert not Path(cwd).exists()  # removed with what it held
        with pytest.raises(workloads.WorkloadError, match="'no-such-account': no such account"):
            bench.run(dict(params, sandbox={"user": "no-such-account"}))
    finally:
        shutil.rmtree(shared)


@pytest.mark.parametrize("plant", ["mkfifo \"$out\"", "ln -s /etc/hostname \"$out\"",
                                   "ln -s /dev/zero \"$out\""])
def test_the_record_the_benchmarks_account_wrote_is_read_as_a_bounded_regular_file(tmp_path, plant):
    """Round six: the benchmark's account (and the model-directory code it runs) owns the
    directory its record is read from. A FIFO there held root's read for ever, a link to
    /dev/zero read until memory ran out, a link to a file only root reads was read: each is now
    the level's error, at once."""
    python = tmp_path / "python"
    python.write_text(fake_bench(plant))
    python.chmod(0o755)
    stack = contextlib.ExitStack()
    runner = bench.Runner({}, "", stack)
    work = Path(runner.work)
    params = {"python": str(python), "url": "http://127.0.0.1:9", "tokenizer": "", "model": "",
              "slo": {}, "timeout": 30, "api_key": ""}
    outcome = []

    def level():
        try:
            outcome.append(bench.sglang_level(params, workloads.check({}), 2, runner))
        except RuntimeError as exc:
            outcome.append(exc)

    reader = threading.Thread(target=level, daemon=True)
    reader.start()
    reader.join(60)
    if reader.is_alive():  # unblock the read the old code was stuck in, then say so
        with open(work / "level-2.jsonl", "w", encoding="utf-8"):
            pass
    assert not reader.is_alive() and outcome, "the read of the record did not return"
    assert isinstance(outcome[0], RuntimeError), outcome
    assert "the benchmark's record" in str(outcome[0])
    stack.close()
    assert not work.exists()  # removed with what it held


# SGLang's benchmark as a module on the fake env's import path: --help succeeds; a run says what
# it saw (its key, HOME, working directory) and appends the recorded result to --output-file.
FAKE_MODULE = '''import json, os, sys
if "--help" in sys.argv:
    print("usage: bench_serving.py [-h]")
    sys.exit(0)
out = sys.argv[sys.argv.index("--output-file") + 1]
with open(os.environ["SGLANG_TEST_SEEN"], "a") as seen:
    seen.write(json.dumps({"key": os.environ.get("OPENAI_API_KEY"), "home": os.environ["HOME"],
                           "cwd": os.getcwd()}) + "\\n")
with open(os.environ["SGLANG_TEST_RECORD"]) as record, open(out, "a") as handle:
    handle.write(record.read())
'''


@pytest.fixture
def in_units(tmp_path, monkeypatch):
    """The systemd path without systemd: `sandboxes.run` is a stand-in for systemd-run that
    applies what the unit would get from its argv (EnvironmentFile=, WorkingDirectory=) and runs
    the command after `--` as this account; every argv it got, and the environment file's mode,
    are kept."""
    package = tmp_path / "pkg" / "sglang"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "bench_serving.py").write_text(FAKE_MODULE)
    python = tmp_path / "python"
    python.write_text(f"#!/bin/sh\nPYTHONPATH={tmp_path / 'pkg'} exec {sys.executable} \"$@\"\n")
    python.chmod(0o755)
    (tmp_path / "record.jsonl").write_text(DETAILED)
    (tmp_path / "run").mkdir()
    calls = []

    def fake_run(argv, unit, timeout, **kwargs):
        props = dict(argv[i + 1].split("=", 1) for i, a in enumerate(argv) if a == "-p")
        env_file = props["EnvironmentFile"]
        calls.append({"argv": argv, "unit": unit, "props": props,
                      "env_mode": oct(os.stat(env_file).st_mode & 0o777)})
        env = {"SGLANG_TEST_SEEN": str(tmp_path / "seen"),
               "SGLANG_TEST_RECORD": str(tmp_path / "record.jsonl"), "PATH": os.environ["PATH"]}
        for line in Path(env_file).read_text().splitlines():
            name, _eq, value = line.partition("=")
            env[name] = json.loads(value) if value.startswith('"') else value
        return subprocess.run(argv[argv.index("--") + 1:], env=env, cwd=props["WorkingDirectory"],
                              timeout=timeout, check=False, **kwargs)

    leftovers = []
    monkeypatch.setattr(bench.sandboxes, "refusal", lambda sandbox: None)
    monkeypatch.setattr(bench.sandboxes, "run", fake_run)
    monkeypatch.setattr(bench.sandboxes, "stop_leftovers",
                        lambda prefix: leftovers.append(prefix) or ["sglang-bench-0badc0de.service"])
    monkeypatch.setattr(bench, "SANDBOX_WORK_PARENT", str(tmp_path / "run"))
    me = pwd.getpwuid(os.getuid()).pw_name
    params = {"url": "http://127.0.0.1:9", "api_key": KEY, "python": str(python),
              "tokenizer": "/srv/models/q", "model": "m", "levels": [4], "mode": "sweep",
              "baseline": {}, "own_bench": False, "timeout": 60, "slo": {},
              "workload": {"requests_per_level": 20},
              "sandbox": {"user": me, "group": "", "properties": [
                  "NoNewPrivileges=yes", "PrivateTmp=yes", "ProtectSystem=strict"]}}
    return params, calls, leftovers, tmp_path


def test_where_systemd_runs_each_run_is_a_unit_of_its_own_with_the_servers_sandbox(in_units):
    """Issue 54, part 5: the benchmark runs with no more than the server has. Each run (the
    probe, each level) is a transient unit named sglang-bench-<hex>, with the unit's user and
    sandbox properties, bounded by RuntimeMaxSec, in a 0700 directory of /run; the key reaches
    it in a 0600 environment file, never its argv; units a cut run left are stopped first; what
    the probe saw of itself is reported, the properties this manager did not apply named."""
    params, calls, leftovers, tmp_path = in_units
    result = bench.run(params)
    assert result["measured_by"] == "sglang.bench_serving", result["own_bench_reason"]
    assert result["levels"][0]["completed"] == 20
    assert leftovers == ["sglang-bench"]
    assert len(calls) == 2 and calls[0]["unit"] != calls[1]["unit"]  # the probe, the level
    for call in calls:
        argv, props = call["argv"], call["props"]
        assert argv[0] == "systemd-run" and f"--unit={call['unit']}" in argv
        assert call["unit"].startswith("sglang-bench-") and KEY not in " ".join(argv)
        assert props["User"] == params["sandbox"]["user"] and props["PrivateTmp"] == "yes"
        assert props["RuntimeMaxSec"] in ("61", str(bench.PROBE_TIMEOUT + 1))
        assert call["env_mode"] == "0o600"
        assert Path(props["WorkingDirectory"]).parent == tmp_path / "run"
    seen_by_bench = json.loads((tmp_path / "seen").read_text())
    assert seen_by_bench["key"] == KEY and seen_by_bench["home"] == seen_by_bench["cwd"]
    sandbox = result["record"]["sandbox"]
    assert sandbox["used"] and sandbox["stopped_leftovers"] == ["sglang-bench-0badc0de.service"]
    assert sandbox["seen"]["uid"] == os.getuid()
    # No systemd applied them here: said, not claimed.
    assert sandbox["seen"]["unenforced"] == ["NoNewPrivileges", "PrivateTmp", "ProtectSystem"] \
        or sandbox["seen"]["usr_read_only"]
    assert not list((tmp_path / "run").iterdir())  # the work directory is gone
    [line] = [x for x in result["table"] if x.startswith("ran ")]
    assert "systemd-run as" in line and "not applied by this systemd" in line
    assert "sglang-bench-0badc0de.service" in line


def test_a_sandbox_that_runs_the_benchmark_as_another_account_is_refused(in_units):
    params, _calls, _leftovers, _tmp = in_units
    other = "nobody" if os.getuid() != pwd.getpwnam("nobody").pw_uid else "root"
    with pytest.raises(RuntimeError, match=f"not {other}'s uid"):
        bench.run(dict(params, sandbox=dict(params["sandbox"], user=other)))


def test_a_level_past_its_bound_is_an_error_and_its_unit_is_stopped(in_units, monkeypatch):
    params, calls, _leftovers, tmp_path = in_units
    real = bench.sandboxes.run

    def slow(argv, unit, timeout, **kwargs):
        if "--output-file" in argv:
            calls.append({"timed_out": unit})
            raise subprocess.TimeoutExpired(argv, timeout)
        return real(argv, unit, timeout, **kwargs)

    monkeypatch.setattr(bench.sandboxes, "run", slow)
    with pytest.raises(RuntimeError, match="concurrency 4: not done within 60 s"):
        bench.run(params)
    assert calls[-1]["timed_out"].startswith("sglang-bench-")
    assert not list((tmp_path / "run").iterdir())
