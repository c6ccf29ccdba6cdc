#!/usr/bin/python
# Copyright: sglang-deploy contributors
# SPDX-License-Identifier: Apache-2.0
"""A release measured at its workload by SGLang's own serving benchmark; its proven capacity."""

DOCUMENTATION = r"""
module: sglang_serving_bench
short_description: Measure a live SGLang server at a workload with SGLang's serving benchmark, level by level
description:
  - Runs C(python -m sglang.bench_serving) from the release's env (O(python)) against the live
    server, once per concurrency level in O(levels), with the workload's dataset, lengths and
    seed, and reads the JSON line each run appends to its output file.
  - Each level records TTFT, ITL and end-to-end latency at p50, p90 and p99, tokens per second
    per user and in total, the accept length, errors and goodput. The proven capacity is the
    highest level that met every SLO in O(slo) with no failed request.
  - The key reaches the benchmark in its environment (E(OPENAI_API_KEY)), never its command line;
    the hub is offline (the tokenizer is O(tokenizer), the model directory).
  - Where SGLang's benchmark cannot run (an env without it or its dependencies, such as the
    stand-in's), the project's own bench measures the same workload (random words from the
    same seed and lengths, no two prompts sharing a prefix) and C(measured_by) says so.
  - Changes nothing on the server.
extends_documentation_fragment:
  - sglang.deploy.sglang.server
options:
  python:
    description: The Python of the release's env (C(<env>/bin/python)), where SGLang's benchmark
      is installed.
    type: path
    required: true
  tokenizer:
    description: The tokenizer SGLang's benchmark makes prompts with (the model directory); empty
      to ask the server's C(/model_info).
    type: str
    default: ''
  model:
    description: The served model name; empty for the first of C(/v1/models).
    type: str
    default: ''
  user:
    description:
      - The account SGLang's benchmark runs as, the service user's (its primary group, no other),
        in a work directory it owns (0700). The benchmark loads the tokenizer with
        C(trust_remote_code=True) (0.5.23 C(sglang/benchmark/utils.py):60-62), so code in the
        model directory, or in the one the server's C(/model_info) names, runs as this account,
        never with more than the server it measures.
      - Empty runs it as the connection user.
    type: str
    default: ''
  workload:
    description:
      - The traffic (C(dataset) random-ids, generated-shared-prefix or custom with
        C(dataset_path); C(input_len), C(output_len) and C(range_ratio); C(seed);
        C(requests_per_level), 0 for 4 per stream and at least C(min_requests); C(backend)
        sglang-oai, sglang or sglang-oai-chat).
    type: dict
    default: {}
  levels:
    description: The concurrency levels, lowest first.
    type: list
    elements: int
    required: true
  slo:
    description: The objectives a level must meet to count in the capacity (C(ttft_p99_ms),
      C(itl_p99_ms), C(min_tok_s_per_user)); a missing one is not judged.
    type: dict
    default: {}
  mode:
    description:
      - C(sweep) measures every level in O(levels).
      - C(quick) measures the levels a deploy's gates need, the lowest (the floors), the
        capacity O(baseline) proved at the same workload, SLOs and benchmark (else the highest
        level) and the level above it; when one misses, the levels between the highest proven
        and the lowest missed are bisected until the capacity is pinned to a level of O(levels).
    type: str
    choices: [sweep, quick]
    default: sweep
  baseline:
    description: The proof (C(record)) of the release this one replaces, for C(mode=quick); empty
      for none.
    type: dict
    default: {}
  own_bench:
    description: Measure with the project's own bench even where SGLang's can run (tests).
    type: bool
    default: false
  timeout:
    description: Seconds one level may take in all (its process is ended past it).
    type: float
    default: 1800
notes:
  - Not a builtin because no builtin runs a benchmark level by level and reads its figures; the
    benchmark is SGLang's own, from the release's env.
author:
  - sglang-deploy maintainers (@sglang-deploy)
"""

EXAMPLES = r"""
- name: Prove the release at the chat workload, concurrency 1 to 48
  sglang.deploy.sglang_serving_bench:
    url: http://127.0.0.1:30000
    api_key: "{{ sglang_api_key }}"
    python: /opt/sglang/envs/3f9a0c1d2e4b5a69/bin/python
    tokenizer: /srv/models/Qwen3.6-27B
    workload: {dataset: random-ids, input_len: 2048, output_len: 512, range_ratio: 0.5, seed: 1}
    levels: [1, 4, 16, 32, 48]
    slo: {ttft_p99_ms: 3000, itl_p99_ms: 60, min_tok_s_per_user: 20}
  register: proof
"""

RETURN = r"""
measured_by:
  description: C(sglang.bench_serving) (SGLang's benchmark, from the release's env), or
    C(own bench) with C(own_bench_reason).
  type: str
  returned: always
own_bench_reason:
  description: Why SGLang's benchmark did not measure (null when it did).
  type: str
  returned: always
workload:
  description: The workload measured, its defaults filled in.
  type: dict
  returned: always
levels:
  description: One entry per level, each with C(concurrency), C(requests), C(completed),
    C(errors), C(ttft_ms), C(itl_ms) and C(e2e_ms) ({p50, p90, p99}), C(tok_s_per_user),
    C(output_tok_s), C(accept_length), C(goodput_rps), C(slo_attainment), C(misses) and C(met).
  type: list
  elements: dict
  returned: always
capacity:
  description: The proven capacity, C(concurrency) (null when no level met every SLO) and the
    C(reason); the highest level that met every SLO with every level measured below it met.
  type: dict
  returned: always
slo:
  description: The SLOs judged.
  type: dict
  returned: always
mode:
  description: C(sweep) or C(quick), as asked.
  type: str
  returned: always
record:
  description: What a release keeps of its proof (every key above but C(table)), the next
    release's O(baseline).
  type: dict
  returned: always
elapsed_s:
  description: Seconds the levels took.
  type: float
  returned: always
table:
  description: The proof as a table, a line each (the play prints it).
  type: list
  elements: str
  returned: always
"""

import os
import pwd
import random
import subprocess
import tempfile
import time

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.sglang.deploy.plugins.module_utils import sglang_workload as workloads
from ansible_collections.sglang.deploy.plugins.module_utils.sglang_bench import percentile, run_requests, served_model
from ansible_collections.sglang.deploy.plugins.module_utils.sglang_http import HttpError
from ansible_collections.sglang.deploy.plugins.module_utils.sglang_read import read_text, text_of
from ansible_collections.sglang.deploy.plugins.module_utils.sglang_redact import excerpt

PROBE_TIMEOUT = 300


def account(user):
    """The subprocess arguments that run the benchmark as `user` (its uid, its primary group, no
    supplementary group of the run's), {} for the connection user; KeyError for no such user."""
    if not user:
        return {}
    entry = pwd.getpwnam(user)
    return {"user": entry.pw_uid, "group": entry.pw_gid, "extra_groups": []}


def can_run(python, runs_as, home):
    """(True, None) when the env runs SGLang's benchmark as the account it will measure as, else
    (False, why)."""
    try:
        # cwd "/": `-m` puts the working directory first on the import path.
        proc = subprocess.run([python, "-m", "sglang.bench_serving", "--help"],
                              capture_output=True, check=False, timeout=PROBE_TIMEOUT,
                              stdin=subprocess.DEVNULL, cwd="/",
                              env=workloads.env(os.environ, "", home), **runs_as)
    except (OSError, subprocess.SubprocessError) as exc:
        return False, f"{python} -m sglang.bench_serving: {exc}"
    if proc.returncode != 0:
        last = (text_of(proc.stderr) or text_of(proc.stdout)).strip().splitlines()[-1:]
        return False, f"{python} -m sglang.bench_serving --help exited {proc.returncode}: " \
                      f"{(last or ['?'])[0][:300]}"
    return True, None


def sglang_level(p, w, concurrency, work, runs_as=None):
    """One level measured by SGLang's benchmark (as `runs_as`, account()'s): its figures, or
    raises RuntimeError."""
    output = os.path.join(work, f"level-{concurrency}.jsonl")
    argv = workloads.argv(p["python"], p["url"], w, concurrency, output, p["tokenizer"],
                          p["model"], p["slo"])
    try:
        proc = subprocess.run(argv, capture_output=True, check=False, timeout=p["timeout"],
                              stdin=subprocess.DEVNULL, cwd=work,
                              env=workloads.env(os.environ, p["api_key"], work), **(runs_as or {}))
    except subprocess.TimeoutExpired:
        raise RuntimeError(f"concurrency {concurrency}: not done within {p['timeout']:g} s "
                           "(sglang_workload's requests or the timeout)") from None
    record = None
    if os.path.lexists(output):
        # Written by the benchmark's account: a regular file of a record's size, not a FIFO that
        # would hold this read for ever, /dev/zero, or a link to a file only root reads.
        try:
            record = workloads.read_run(read_text(output, workloads.record_cap(w, concurrency),
                                                  follow=False))
        except OSError as exc:
            raise RuntimeError(f"concurrency {concurrency}: the benchmark's record: {exc}") from None
    planned = workloads.requests_at(w, concurrency)
    if record is None:
        # Every request failed (or the warmup): the benchmark exits 1 and writes nothing.
        # Its end, redacted first: where a traceback says why (the start is import warnings).
        said = excerpt(text_of(proc.stderr) or text_of(proc.stdout), [p["api_key"]], 1 << 20).rstrip()
        said = said if len(said) <= 600 else "..." + said[-600:]
        level = workloads.level({}, concurrency, planned)
        return dict(level, error=f"exit {proc.returncode}, no result: {said}")
    # What it sent, completed and failed: its own counts in the record (workloads.counts).
    return workloads.level(record, concurrency, planned)


def own_level(p, w, concurrency, endpoint, model):
    """One level measured by the own bench, in the same shape (ITL is each request's TPOT)."""
    sent = workloads.requests_at(w, concurrency)
    rng = random.Random(workloads.level_seed(w, concurrency) + 1)
    bodies = [{"model": model, "prompt": text, "max_tokens": workloads.output_len(w, rng),
               "stream": True, "temperature": 0, "ignore_eos": True,
               "stream_options": {"include_usage": True}}
              for text in workloads.prompts(w, sent, seed_offset=concurrency)]
    results, wall = run_requests(endpoint, bodies, concurrency, p["api_key"], p["timeout"])
    ok = [r for r in results if r.get("ok")]
    ttft = [r["ttft_s"] * 1000 for r in ok]
    tpot = [(r["latency_s"] - r["ttft_s"]) * 1000 / (r["tokens"] - 1) for r in ok
            if r["tokens"] > 1]
    e2e = [r["latency_s"] * 1000 for r in ok]
    mean_tpot = sum(tpot) / len(tpot) if tpot else None

    def quantiles(values):
        return {q: (round(percentile(values, float(q[1:])), 2) if values else None)
                for q in workloads.QUANTILES}

    return {"concurrency": concurrency, "requests": sent, "planned": sent, "completed": len(ok),
            "errors": sent - len(ok), "ttft_ms": quantiles(ttft), "itl_ms": quantiles(tpot),
            "e2e_ms": quantiles(e2e),
            "tok_s_per_user": round(1000.0 / mean_tpot, 2) if mean_tpot else None,
            "output_tok_s": round(sum(r["tokens"] for r in ok) / wall, 2) if wall > 0 else None,
            "accept_length": None, "goodput_rps": None, "slo_attainment": None}


def _checked(p):
    """The parameters with the workload and SLOs filled in, or WorkloadError naming every problem."""
    problems = []
    for name, checked in (("workload", workloads.check), ("slo", workloads.check_slo)):
        try:
            p = dict(p, **{name: checked(p[name])})
        except workloads.WorkloadError as exc:
            problems.append(str(exc))
    if not 0 < p["timeout"] <= 86400:
        problems.append(f"timeout {p['timeout']!r}: seconds above 0, at most a day")
    levels = sorted(set(p["levels"]))
    if not levels or levels[0] < 1:
        problems.append(f"levels {p['levels']}: concurrency levels of at least 1")
    if problems:
        raise workloads.WorkloadError("; ".join(problems))
    return dict(p, levels=levels)


def measure_levels(p, measure, measured_by):
    """Every level (a sweep), or the quick form: the levels the gates need, then the levels
    between the highest proven and the lowest missed, bisected, until they are neighbours."""
    if p["mode"] == "sweep":
        return [measure(c) for c in p["levels"]]
    base, _why = workloads.comparable(
        {"workload": p["workload"], "slo": p["slo"], "measured_by": measured_by}, p["baseline"])
    todo = workloads.first_levels(p["levels"], (base or {}).get("capacity", {}).get("concurrency"))
    measured = [measure(c) for c in todo]
    while True:
        judged, _capacity = workloads.judge(measured, p["slo"])
        step = workloads.next_level(p["levels"], judged)
        if step is None:
            return measured
        measured.append(measure(step))


def run(p):
    """The module's result."""
    p = _checked(p)
    w = p["workload"]
    url = p["url"].rstrip("/")
    try:
        runs_as = account(p["user"])
    except KeyError:
        raise workloads.WorkloadError(f"user {p['user']!r}: no such account on the host (the "
                                      "service user the benchmark runs as)") from None
    with tempfile.TemporaryDirectory(prefix="sglang-bench-") as work:
        # The benchmark's HOME and output, the account's own: no other user reads or plants in it.
        if runs_as:
            os.chown(work, runs_as["user"], runs_as["group"])
        return _measured(p, w, url, runs_as, work)


def _measured(p, w, url, runs_as, work):
    """run()'s result, measured from `work` as `runs_as`."""
    runs, why = (False, "asked for the own bench (own_bench)") if p["own_bench"] \
        else can_run(p["python"], runs_as, work)
    measured_by = "sglang.bench_serving" if runs else "own bench"
    if not runs and w["dataset"] != "random-ids":
        # The own bench sends random words: it would call a shared-prefix or custom workload
        # measured when it measured another.
        raise workloads.WorkloadError(
            f"dataset {w['dataset']} needs SGLang's benchmark, which cannot run here ({why}); "
            "the own bench measures random-ids only: install SGLang's dependencies in the "
            "release's env, or prove at dataset random-ids")
    started = time.monotonic()
    if runs:
        measured = measure_levels(p, lambda c: sglang_level(p, w, c, work, runs_as), measured_by)
    else:
        model = p["model"] or served_model(url, p["api_key"])
        measured = measure_levels(
            p, lambda c: own_level(p, w, c, url + "/v1/completions", model), measured_by)
    judged, capacity = workloads.judge(measured, p["slo"])
    result = {"changed": False, "measured_by": measured_by, "own_bench_reason": why,
              "workload": w, "slo": p["slo"], "mode": p["mode"], "levels": judged,
              "capacity": capacity, "elapsed_s": round(time.monotonic() - started, 2)}
    return dict(result, record=workloads.record(result), table=workloads.table(result))


def main():
    module = AnsibleModule(
        argument_spec={
            "url": {"type": "str", "required": True},
            "api_key": {"type": "str", "default": "", "no_log": True},
            "python": {"type": "path", "required": True},
            "tokenizer": {"type": "str", "default": "", "no_log": False},
            "model": {"type": "str", "default": ""},
            "user": {"type": "str", "default": ""},
            "workload": {"type": "dict", "default": {}},
            "levels": {"type": "list", "elements": "int", "required": True},
            "slo": {"type": "dict", "default": {}},
            "mode": {"type": "str", "default": "sweep", "choices": ["sweep", "quick"]},
            "baseline": {"type": "dict", "default": {}},
            "own_bench": {"type": "bool", "default": False},
            "timeout": {"type": "float", "default": 1800},
        },
        supports_check_mode=True,
    )
    try:
        module.exit_json(**run(module.params))
    except workloads.WorkloadError as exc:
        module.fail_json(msg=f"sglang_workload: {exc}")
    except (HttpError, RuntimeError, OSError) as exc:
        module.fail_json(msg=f"the serving benchmark could not measure: {exc}")


if __name__ == "__main__":
    main()
