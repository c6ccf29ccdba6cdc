# Copyright: sglang-deploy contributors
# SPDX-License-Identifier: Apache-2.0
"""A release measured at a workload by SGLang's own serving benchmark, and its capacity.

SGLang 0.5.23 ships `python -m sglang.bench_serving` (an alias of `sglang/benchmark/serving.py`,
`cli_main` at line 2298) in every full install: the release's env runs it against the live
server, one run per concurrency level, and each run appends one JSON line to its
`--output-file` (serving.py:1960-1966; `request_rate` may be a bare `Infinity`). What is read
from it, and how, lives here; the module (sglang_serving_bench) runs the processes. Facts this
relies on, each read in the 0.5.23 wheel:

- the key goes in OPENAI_API_KEY (`get_auth_headers`, serving.py:131-139, `Bearer <key>`),
  never on the command line;
- `--dataset-name random-ids` is synthetic and offline: prompt i is a run of token ids from a
  random offset, decoded (datasets/random.py:145-163), so prompts miss the prefix cache;
  `random` samples ShareGPT, which it downloads; lengths are uniform in
  [floor(L * ratio), L] (datasets/common.py:56-64);
- a backend whose name holds "sglang" reads the accept length from /server_info after the run
  (serving.py:1642-1662); `sglang-oai` speaks /v1/completions;
- `--goodput ttft:MS tpot:MS` counts the requests within every limit (benchmark/goodput.py);
- a run whose every request failed, or whose warmup failed, exits 1 and writes no line;
- what it sent is not `--num-prompts` for every dataset: generated-shared-prefix sends
  `--gsp-num-groups` x `--gsp-prompts-per-group` (64 x 16 by default,
  datasets/generated_shared_prefix.py:92-93), a custom file at most its rows
  (datasets/custom.py, sample_custom_requests); with `--output-details` the record carries one
  entry a request sent in `errors` (serving.py:1942-1966: "" for a request that completed), so
  the counts of a level are read from there, never from the command line.

Standard library only.
"""

import json
import math
import random

DATASETS = ("random-ids", "generated-shared-prefix", "custom")
BACKENDS = ("sglang-oai", "sglang", "sglang-oai-chat")
QUANTILES = ("p50", "p90", "p99")


class WorkloadError(Exception):
    """A workload that cannot be measured as given (says what to change)."""


KEYS = ("dataset", "backend", "input_len", "output_len", "range_ratio", "dataset_path", "seed",
        "requests_per_level", "min_requests")


def _whole(value, least):
    return isinstance(value, int) and not isinstance(value, bool) and value >= least


def check(workload):
    """The workload with its defaults filled in, or WorkloadError naming every problem."""
    w = {"dataset": "random-ids", "backend": "sglang-oai", "input_len": 1024, "output_len": 256,
         "range_ratio": 0.5, "dataset_path": "", "seed": 1, "requests_per_level": 0,
         "min_requests": 8, **(workload or {})}
    problems = [f"{key} {w[key]!r}: a whole number of at least {least}"
                for key, least in (("input_len", 1), ("output_len", 1), ("min_requests", 1),
                                   ("seed", 0), ("requests_per_level", 0))
                if not _whole(w[key], least)]
    problems += _choices(w)
    unknown = sorted(map(str, set(w) - set(KEYS)))
    if unknown:
        problems.append(f"unknown keys {', '.join(unknown)}: the keys are {', '.join(KEYS)}")
    if problems:
        raise WorkloadError("; ".join(problems))
    return w


def _choices(w):
    problems = []
    if w["dataset"] not in DATASETS:
        problems.append(f"dataset {w['dataset']!r}: one of {', '.join(DATASETS)}")
    if w["backend"] not in BACKENDS:
        problems.append(f"backend {w['backend']!r}: one of {', '.join(BACKENDS)}")
    if not isinstance(w["range_ratio"], (int, float)) or not 0 <= w["range_ratio"] <= 1:
        problems.append(f"range_ratio {w['range_ratio']!r}: between 0 and 1")
    if not isinstance(w["dataset_path"], str):
        problems.append(f"dataset_path {w['dataset_path']!r}: a path")
    elif w["dataset"] == "custom" and not w["dataset_path"]:
        problems.append("dataset custom needs dataset_path (JSONL, SGLang's custom format)")
    elif w["dataset_path"] and not w["dataset_path"].startswith("/"):
        # The benchmark runs in a directory of its own: a relative path names nothing there.
        problems.append(f"dataset_path {w['dataset_path']!r}: an absolute path on the host")
    return problems


SLO_KEYS = ("ttft_p99_ms", "itl_p99_ms", "min_tok_s_per_user")


def check_slo(slo):
    """The SLOs, or WorkloadError naming every one that is not a positive number (or unknown)."""
    problems = [f"slo {key!r}: one of {', '.join(SLO_KEYS)}" for key in slo or {}
                if key not in SLO_KEYS]
    problems += [f"slo {key} {value!r}: a number above 0 (or null: not judged)"
                 for key, value in (slo or {}).items() if key in SLO_KEYS and value is not None
                 and (_number(value) is None or value <= 0)]
    if problems:
        raise WorkloadError("; ".join(problems))
    return {key: value for key, value in (slo or {}).items() if value is not None}


def requests_at(workload, concurrency):
    """Requests measured at one level: as given, or 4 per stream and at least min_requests
    (every stream then sees several requests, the first ones' warm-up diluted)."""
    return workload["requests_per_level"] or max(workload["min_requests"], 4 * concurrency)


GSP_PER_GROUP = 4  # prompts sharing one system prompt, at most: a group per 4 requests


def gsp_groups(requests):
    """(groups, prompts per group) of the generated-shared-prefix dataset for `requests`: it
    sends their product, at least `requests`."""
    per_group = min(GSP_PER_GROUP, requests)
    return -(-requests // per_group), per_group


def record_cap(workload, concurrency):
    """The most bytes the level's record may hold: its summary, and per request sent
    (--output-details) its text and inter-token gaps, generously (64 bytes a token)."""
    groups, per_group = gsp_groups(requests_at(workload, concurrency))
    return (1 << 20) + 64 * max(groups * per_group, requests_at(workload, concurrency)) * (
        workload["output_len"] + 16)


def level_seed(workload, concurrency):
    """The seed of one level: the workload's, moved by the level, so that a level does not send
    the prompts the level before it left in the prefix cache; the same on both sides of every
    comparison (the same workload, level and seed)."""
    return workload["seed"] * 1000 + concurrency


def argv(python, url, workload, concurrency, output, tokenizer="", model="", slo=None):
    """The benchmark's command line for one level: no key on it (OPENAI_API_KEY carries it)."""
    w = workload
    args = [python, "-m", "sglang.bench_serving", "--backend", w["backend"],
            "--base-url", url.rstrip("/"), "--dataset-name", w["dataset"],
            "--num-prompts", str(requests_at(w, concurrency)),
            "--max-concurrency", str(concurrency), "--request-rate", "inf",
            "--seed", str(level_seed(w, concurrency)), "--warmup-requests", "1", "--disable-tqdm",
            "--ready-check-timeout-sec", "0", "--output-file", output, "--output-details"]
    if w["dataset"] == "random-ids":
        args += ["--random-input-len", str(w["input_len"]),
                 "--random-output-len", str(w["output_len"]),
                 "--random-range-ratio", str(w["range_ratio"])]
    elif w["dataset"] == "generated-shared-prefix":
        groups, per_group = gsp_groups(requests_at(w, concurrency))
        args += ["--gsp-num-groups", str(groups), "--gsp-prompts-per-group", str(per_group),
                 "--gsp-question-len", str(w["input_len"]), "--gsp-output-len",
                 str(w["output_len"]), "--gsp-range-ratio", str(w["range_ratio"])]
    else:
        args += ["--dataset-path", w["dataset_path"], "--sharegpt-output-len", str(w["output_len"])]
    if tokenizer:
        args += ["--tokenizer", tokenizer]
    if model:
        args += ["--served-model-name", model]
    limits = (("ttft", "ttft_p99_ms"), ("tpot", "itl_p99_ms"))
    goodput = [f"{name}:{slo[key]:g}" for name, key in limits if (slo or {}).get(key)]
    if goodput:
        args += ["--goodput", *goodput]
    return args


def env(base, api_key, home):
    """The benchmark's environment: the run's, the key in OPENAI_API_KEY (never argv), the hub
    offline (the tokenizer is the model directory's), HOME a directory of its own (SGLang caches
    generated datasets under it). No PYTHON* variable of the run reaches it (PYTHONPATH would
    choose the code root runs), nor HF_* (the hub's, a token)."""
    child = {k: v for k, v in base.items() if k not in ("OPENAI_API_KEY", "API_KEY")
             and not k.startswith(("PYTHON", "HF_"))}
    child.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", HOME=home,
                 PYTHONUNBUFFERED="1")
    if api_key:
        child["OPENAI_API_KEY"] = api_key
    return child


def _number(value):
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) \
        and math.isfinite(value) else None


def read_run(text):
    """The last JSON object the benchmark appended to its output file (None when none)."""
    for line in reversed(text.splitlines()):
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict):
            return record
    return None


def counts(record):
    """(sent, failed) as the benchmark's record says them: one entry of `errors` a request it
    sent, "" when that one completed; (None, None) when the record has no such list."""
    errors = record.get("errors")
    if not isinstance(errors, list):
        return None, None
    return len(errors), sum(1 for error in errors if error)


def level(record, concurrency, planned):
    """One level's figures from the benchmark's record: the requests it sent, completed and
    failed (its own counts: `counts`), TTFT, ITL and E2E p50/p90/p99 (ms), tok/s per user
    (1000 / mean TPOT) and in total, accept length, goodput. An empty record (the benchmark
    wrote none: every request failed) counts the `planned` requests as failed."""
    def quantiles(name):
        return {"p50": _number(record.get(f"median_{name}_ms")),
                "p90": _number(record.get(f"p90_{name}_ms")),
                "p99": _number(record.get(f"p99_{name}_ms"))}

    completed = int(_number(record.get("completed")) or 0)
    sent, failed = counts(record) if record else (planned, planned)
    tpot = _number(record.get("mean_tpot_ms"))
    return {"concurrency": concurrency, "requests": sent, "planned": planned,
            "completed": completed, "errors": failed,
            "ttft_ms": quantiles("ttft"), "itl_ms": quantiles("itl"),
            "e2e_ms": quantiles("e2e_latency"),
            "tok_s_per_user": round(1000.0 / tpot, 2) if tpot else None,
            "output_tok_s": _number(record.get("output_throughput")),
            "accept_length": _number(record.get("accept_length")),
            "goodput_rps": _number(record.get("request_goodput")),
            "slo_attainment": _number(record.get("slo_attainment"))}


def misses(lv, slo):
    """What keeps one level from counting: failed requests, each SLO it missed, and each SLO
    whose figure the run did not give (a level is proven only on evidence)."""
    # With what the benchmark said when it wrote no result (the end of its output, key removed).
    why = f" ({lv['error']})" if lv.get("error") else ""
    if lv["requests"] is None:
        found = ["the benchmark's record does not say which requests it sent (no errors list: "
                 "--output-details)"]
    elif lv["errors"]:
        found = [f"{lv['errors']} of {lv['requests']} requests failed{why}"]
    elif lv["completed"] != lv["requests"]:
        found = [f"{lv['completed']} of {lv['requests']} requests sent completed, none failed: "
                 "the benchmark's counts disagree"]
    elif not lv["requests"]:
        found = ["the benchmark sent no request (a dataset with no requests to count?)"]
    elif lv["requests"] < lv.get("planned", lv["requests"]):
        found = [f"{lv['requests']} requests sent of the {lv['planned']} the level asks (a "
                 "custom file with fewer usable rows?)"]
    else:
        found = []
    for key, figure, worse in (("ttft_p99_ms", lv["ttft_ms"]["p99"], "above"),
                               ("itl_p99_ms", lv["itl_ms"]["p99"], "above"),
                               ("min_tok_s_per_user", lv["tok_s_per_user"], "below")):
        limit = slo.get(key)
        if limit is None:
            continue
        if figure is None:
            found.append(f"{key}: not measured")
        elif (figure > limit) if worse == "above" else (figure < limit):
            found.append(f"{key}: {figure:g} {worse} {limit:g}")
    return found


def judge(levels, slo):
    """Each level marked against the SLOs (`misses`, empty when it met every one), and the
    proven capacity: the highest level that met every SLO with no error and no level below it
    missing one (a level that met above one that missed is luck, not capacity), or None with why."""
    judged = sorted((dict(lv, misses=misses(lv, slo or {})) for lv in levels),
                    key=lambda lv: lv["concurrency"])
    judged = [dict(lv, met=not lv["misses"]) for lv in judged]
    if not judged:
        return judged, {"concurrency": None, "reason": "no level was measured"}
    first_miss, below = met_below_first_miss(judged)
    if not below:
        return judged, {"concurrency": None,
                        "reason": f"no level met every SLO (lowest, {judged[0]['concurrency']}: "
                                  f"{'; '.join(judged[0]['misses'])})"}
    why = (f"{first_miss['concurrency']} missed: {'; '.join(first_miss['misses'])}" if first_miss
           else "every level measured met the SLOs (the capacity may lie beyond the highest)")
    return judged, {"concurrency": max(below), "reason": why}


def met_below_first_miss(judged):
    """(the lowest level that missed, or None; the levels that met below it, lowest first)."""
    ordered = sorted(judged, key=lambda lv: lv["concurrency"])
    first_miss = next((lv for lv in ordered if not lv.get("met")), None)
    return first_miss, [lv["concurrency"] for lv in ordered if lv.get("met") and (
        first_miss is None or lv["concurrency"] < first_miss["concurrency"])]


def first_levels(levels, baseline_capacity=None):
    """The quick proof's first levels: the lowest (the floors), the capacity the release it
    replaces proved (the regression gate) or, with none, the highest (the production
    concurrency), and the level above it, so that a faster release can prove more."""
    top = baseline_capacity if baseline_capacity in levels else levels[-1]
    above = [c for c in levels if c > top][:1]
    return sorted({levels[0], top, *above})


def next_level(levels, judged):
    """The quick proof's next level, or None once the capacity is pinned: the highest level
    proven and the lowest that missed are neighbours in `levels` (bisected between them)."""
    first_miss, met = met_below_first_miss(judged)
    if first_miss is None or not met:
        return None
    between = [c for c in levels if met[-1] < c < first_miss["concurrency"]]
    return between[len(between) // 2] if between else None


def comparable(proof, baseline):
    """(the baseline's proof, None) when it measured the same workload (its seed included: every
    level's seed follows the workload's) with the same benchmark, else (None, why): like is
    compared with like only. Other SLOs do not change what a level measured, only what counts
    as met: the levels still compare, the capacity does not (gate)."""
    if not baseline:
        return None, "the release it replaces has no proof at a workload"
    for key, what in (("workload", "another workload"), ("measured_by", "another benchmark")):
        if baseline.get(key) != proof.get(key):
            return None, f"the release it replaces was proven at {what} ({baseline.get(key)!r})"
    return baseline, None


# Each level's figures compared with the same level of the baseline: higher is better, or lower.
COMPARED = (("output_tok_s", "higher"), ("tok_s_per_user", "higher"))


def gate(proof, baseline, tolerance=0.10):
    """{ok, failures, regressions, unknowns, compared}: the proof against its SLOs (a capacity)
    and against the baseline's proof, like with like: the capacity, and at every level both
    measured the total and per-user tok/s, within `tolerance`. Regressions are the caller's to
    refuse (a deploy) or to warn of (a rollback)."""
    failures = []
    cap = proof["capacity"]["concurrency"]
    if cap is None:
        failures.append(f"no proven capacity: {proof['capacity']['reason']}")
    base, why = comparable(proof, baseline)
    if base is None:
        return {"ok": not failures, "failures": failures, "regressions": [], "unknowns": [why],
                "compared": None}
    regressions, unknowns = [], []
    then = base["capacity"]["concurrency"]
    if base.get("slo") != proof.get("slo"):
        unknowns.append(f"the proven capacity: the release it replaces was proven against other "
                        f"SLOs ({base.get('slo')!r}); its tok/s level by level compares (the "
                        "same workload, seed and benchmark)")
    elif then and (cap or 0) < then * (1 - tolerance):
        regressions.append(f"proven capacity {cap or 'none'} against {then} concurrent requests "
                           f"({base['capacity']['reason']} there; here {proof['capacity']['reason']})")
    rows, slower = compare_levels(proof["levels"], base.get("levels") or [], tolerance)
    return {"ok": not failures, "failures": failures, "regressions": regressions + slower,
            "unknowns": unknowns, "compared": rows}


def compare_levels(levels, earlier, tolerance):
    """(rows, regressions): each level both measured, its tok/s against the baseline's. A
    figure the baseline has and this proof lacks (not read, not finite, zero) is a regression:
    nothing shows this release is not slower there."""
    earlier = {lv["concurrency"]: lv for lv in earlier}
    rows, regressions = [], []
    for lv in levels:
        old = earlier.get(lv["concurrency"])
        if old is None:
            continue
        rows.append({"concurrency": lv["concurrency"], "now": lv, "baseline": old})
        for key, better in COMPARED:
            now, was = _number(lv.get(key)), _number(old.get(key))
            if not was:
                continue
            if not now:
                regressions.append(f"{key} at concurrency {lv['concurrency']}: "
                                   f"{lv.get(key)!r} here against {was:g} (nothing measured)")
                continue
            change = now / was - 1
            if (-change if better == "higher" else change) > tolerance:
                regressions.append(f"{key} at concurrency {lv['concurrency']}: {now:g} against "
                                   f"{was:g} ({change:+.1%}, tolerance {tolerance:.0%})")
    return rows, regressions


def record(result):
    """What a release keeps of its proof (the next release's baseline): no table; how the
    benchmark was sandboxed, null for a proof recorded before it was said."""
    kept = {key: result[key] for key in ("measured_by", "own_bench_reason", "workload", "slo",
                                         "mode", "levels", "capacity", "elapsed_s")}
    return dict(kept, sandbox=result.get("sandbox"))


def prompts(workload, count, seed_offset=0):
    """The own bench's prompts where SGLang's cannot run: `count` texts of random words, lengths
    drawn as SGLang's random datasets draw them ([floor(L * ratio), L]), from the workload's
    seed: no two share a prefix, so they miss the prefix cache as SGLang's random-ids do."""
    rng = random.Random(level_seed(workload, seed_offset))
    low = max(1, int(workload["input_len"] * workload["range_ratio"]))
    out = []
    for _unused in range(count):
        length = rng.randint(low, workload["input_len"])
        out.append(" ".join(f"w{rng.randrange(50000)}" for _word in range(length)))
    return out


def output_len(workload, rng):
    low = max(1, int(workload["output_len"] * workload["range_ratio"]))
    return rng.randint(low, workload["output_len"])


def _cell(value, digits=1):
    return "-" if value is None else f"{value:.{digits}f}"


def table(result):
    """The proof, a line each: how it was measured, one row per level, the capacity."""
    w = result["workload"]
    how = result["measured_by"] + (f" (SGLang's could not run: {result['own_bench_reason']})"
                                   if result["own_bench_reason"] else "")
    lines = [f"measured by {how}; workload {w['dataset']}, input {w['input_len']}, output "
             f"{w['output_len']} tokens (range ratio {w['range_ratio']:g}), seed {w['seed']}",
             "  conc  ok/sent  TTFT p50/p90/p99 ms      ITL p50/p99 ms  E2E p99 ms  tok/s/user"
             "  tok/s  accept  goodput  SLOs"]
    for lv in result["levels"]:
        ttft, itl = lv["ttft_ms"], lv["itl_ms"]
        lines.append(
            f"  {lv['concurrency']:>4}  {lv['completed']:>3}/{_or_unknown(lv['requests']):<3}  "
            f"{_cell(ttft['p50']):>6}/{_cell(ttft['p90']):>6}/{_cell(ttft['p99']):>6}  "
            f"{_cell(itl['p50']):>6}/{_cell(itl['p99']):>6}  {_cell(lv['e2e_ms'].get('p99')):>10}  "
            f"{_cell(lv['tok_s_per_user']):>10}  {_cell(lv['output_tok_s']):>5}  "
            f"{_cell(lv['accept_length'], 2):>6}  {_cell(lv['goodput_rps'], 2):>7}  "
            f"{'met' if lv['met'] else '; '.join(lv['misses'])}")
    cap = result["capacity"]
    lines.append(f"proven capacity: {cap['concurrency'] if cap['concurrency'] else 'none'} "
                 f"concurrent requests ({cap['reason']})")
    return lines + sandbox_lines(result.get("sandbox"))


def sandbox_lines(sandbox):
    """The table's line on where the benchmark ran (none when the proof does not say)."""
    if not sandbox:
        return []
    line = f"ran {sandbox['how']}"
    seen = sandbox.get("seen")
    if seen:
        line += (f"; seen: uid {seen['uid']}, NoNewPrivs {'on' if seen['no_new_privs'] else 'off'}, "
                 f"{'its own cgroup' if seen['own_cgroup'] else 'no cgroup of its own'}")
        if seen["unenforced"]:
            line += (f"; not applied by this systemd (nor to the server): "
                     f"{', '.join(seen['unenforced'])}")
    if sandbox.get("stopped_leftovers"):
        line += f"; stopped first, left by a cut run: {', '.join(sandbox['stopped_leftovers'])}"
    return [line]


def _or_unknown(count):
    return "?" if count is None else count
