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
  sandbox:
    description:
      - Where SGLang's benchmark runs, as the server it measures runs. The benchmark loads the
        tokenizer with C(trust_remote_code=True) (0.5.23 C(sglang/benchmark/utils.py):60-62), so
        code in the model directory, or in the one the server's C(/model_info) names, runs with
        no more than the server has.
      - Its keys are C(user) (the service user), C(group) (the service group) and
        C(properties) (the unit's sandbox lines, C(Key=value), the C(sandbox) of the
        C(sglang.deploy.sglang_unit) filter). Checked in the module, not by a sub-spec (a
        non-mapping there would stop Ansible before it hides O(api_key) in the failure).
      - Where systemd runs, each run is a transient unit of its own (C(sglang-bench-<hex>),
        its own cgroup) started by C(systemd-run) with C(user), C(group) and
        C(properties), its environment (the key in E(OPENAI_API_KEY)) from a 0600 file,
        never its command line, ended by systemd past O(timeout) and stopped when the module
        gives up on it; units a cut run left are stopped before the first. Its work directory
        is a 0700 directory in C(/run) the user owns. The first run says what it sees of itself
        (uid, NoNewPrivs, cgroup, a read-only C(/usr), a private C(/tmp)) into C(sandbox.seen).
      - Without systemd, it runs as C(user) by setuid (its primary group, no other), in
        a 0700 directory of the system's temporary directory it owns; with no user, as the
        connection user.
    type: dict
    default: {}
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
    sandbox:
      user: sglang
      group: sglang
      properties: [NoNewPrivileges=yes, PrivateTmp=yes, ProtectSystem=strict]
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
sandbox:
  description:
    - How SGLang's benchmark ran, C(used) (in a transient unit with the server's sandbox), C(how),
      C(unit_prefix), C(stopped_leftovers) (units a cut run left, stopped first) and C(seen), what
      the first run saw of itself (C(uid), C(gid), C(groups), C(no_new_privs), C(cgroups),
      C(own_cgroup), C(usr_read_only), C(host_tmp_hidden), and C(unenforced), the asked
      properties among NoNewPrivileges, ProtectSystem and PrivateTmp this systemd did not apply,
      as in a container without CAP_SYS_ADMIN, where the server has no more).
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

import contextlib
import os
import pwd
import random
import shutil
import subprocess
import tempfile
import time

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.sglang.deploy.plugins.module_utils import sglang_sandbox as sandboxes
from ansible_collections.sglang.deploy.plugins.module_utils import sglang_workload as workloads
from ansible_collections.sglang.deploy.plugins.module_utils.sglang_bench import percentile, run_requests, served_model
from ansible_collections.sglang.deploy.plugins.module_utils.sglang_http import HttpError
from ansible_collections.sglang.deploy.plugins.module_utils.sglang_read import read_text, text_of
from ansible_collections.sglang.deploy.plugins.module_utils.sglang_redact import excerpt

PROBE_TIMEOUT = 300
# The transient units SGLang's benchmark runs in: sglang-bench-<8 hex digits>.service.
UNIT_PREFIX = "sglang-bench"
# The sandboxed benchmark's work directory is made here: PrivateTmp hides the host's /tmp and
# /var/tmp from the unit, and /run is root's, so no other account can swap the directory
# between its making and its chown.
SANDBOX_WORK_PARENT = "/run"
# The run's variables the sandboxed benchmark keeps (the unit's own environment is systemd's):
# no proxy (the server is local), no PYTHON*, no hub token.
KEPT = ("LANG", "LC_ALL", "TZ")


def account(user):
    """The subprocess arguments that run the benchmark as `user` (its uid, its primary group, no
    supplementary group of the run's), {} for the connection user; KeyError for no such user."""
    if not user:
        return {}
    entry = pwd.getpwnam(user)
    return {"user": entry.pw_uid, "group": entry.pw_gid, "extra_groups": []}


class Runner:
    """Where and as whom SGLang's benchmark runs: in a transient unit of its own with the
    server's user, group and sandbox properties (systemd-run, sglang_sandbox) where systemd
    runs, else as the service user by setuid (its primary group only), else as the connection
    user. `report` says which ({used, how, unit_prefix, seen}) for the proof's record."""

    def __init__(self, sandbox, api_key, stack):
        self.sandbox = sandbox
        self.api_key = api_key
        refusal = sandboxes.refusal(sandbox) if sandbox.get("user") or sandbox.get("properties") \
            else "no sandbox asked for"
        self.systemd = refusal is None
        try:
            self.runs_as = {} if self.systemd else account(sandbox.get("user", ""))
        except KeyError:
            raise workloads.WorkloadError(
                f"sandbox user {sandbox.get('user')!r}: no such account on the host (the service "
                "user the benchmark runs as)") from None
        who = sandbox.get("user") or "the connection user"
        if self.systemd:
            stopped = sandboxes.stop_leftovers(UNIT_PREFIX)
            self.report = {"used": True, "unit_prefix": UNIT_PREFIX, "stopped_leftovers": stopped,
                           "how": f"systemd-run as {who} with the unit's sandbox properties"}
        else:
            self.report = {"used": False, "unit_prefix": None, "stopped_leftovers": [],
                           "how": f"as {who}" + (" by setuid" if self.runs_as else "")
                                  + f" ({refusal})"}
        self.work = self._work_dir(stack)
        self.env_file = self.last_unit = None
        if self.systemd:
            env = workloads.env({k: os.environ[k] for k in KEPT if k in os.environ}, api_key,
                                self.work)
            # In the host's /tmp, which a PrivateTmp unit cannot see: the probe's check of it.
            self.env_file = stack.enter_context(
                sandboxes.private_env_file(env, ".sglang-bench-env.", "/tmp"))

    def _work_dir(self, stack):
        """The benchmark's HOME and output directory, the account's own (0700): no other user
        reads or plants in it; removed with what it holds when the run ends."""
        parent = SANDBOX_WORK_PARENT if self.systemd else None
        work = tempfile.mkdtemp(prefix="sglang-bench-", dir=parent)
        stack.callback(shutil.rmtree, work, True)
        owner = account(self.sandbox.get("user", "")) if self.sandbox.get("user") else {}
        if owner:
            os.chown(work, owner["user"], owner["group"])
        return work

    def run(self, command, timeout):
        """subprocess.run of `command` (the benchmark's argv, from the env's Python) as this
        runner runs it, output captured; TimeoutExpired past `timeout` (a unit is stopped)."""
        if not self.systemd:
            return subprocess.run(command, capture_output=True, check=False, timeout=timeout,
                                  stdin=subprocess.DEVNULL, cwd=self.work,
                                  env=workloads.env(os.environ, self.api_key, self.work),
                                  **self.runs_as)
        unit = self.last_unit = sandboxes.unit_name(UNIT_PREFIX)
        argv = sandboxes.argv(self.sandbox, self.env_file, unit, timeout, self.work) + command
        return sandboxes.run(argv, unit, timeout, capture_output=True, stdin=subprocess.DEVNULL)

    def can_run(self, python):
        """(True, None) when the env runs SGLang's benchmark here, as the account and in the
        sandbox it will measure in, else (False, why). In a unit the same process first says
        what it sees of itself (sglang_sandbox.SELF_REPORT) into report["seen"]; a sandbox
        that runs it as another account than asked is refused (RuntimeError)."""
        # cwd is the work directory (empty, the account's): `-m` and `-c` put it first on the
        # import path.
        if self.systemd:
            command = [python, "-c", sandboxes.SELF_REPORT + "\nimport runpy\n"
                       "sys.argv = ['sglang.bench_serving', '--help']\n"
                       "runpy.run_module('sglang.bench_serving', run_name='__main__', alter_sys=True)",
                       self.env_file]
        else:
            command = [python, "-m", "sglang.bench_serving", "--help"]
        try:
            proc = self.run(command, PROBE_TIMEOUT)
        except (OSError, subprocess.SubprocessError) as exc:
            return False, f"{python} -m sglang.bench_serving: {exc}"
        out = text_of(proc.stdout)
        if self.systemd:
            first = (out.splitlines() or [""])[0]
            try:
                self.report["seen"] = sandboxes.seen(first, self.sandbox, self.last_unit)
            except ValueError as exc:
                if first.startswith("{"):
                    raise RuntimeError(f"the benchmark's sandbox: {exc}") from None
                return False, (f"{python} in the sandbox exited {proc.returncode} before it "
                               f"said who it runs as: {(text_of(proc.stderr) or out)[-300:]}")
        if proc.returncode != 0:
            last = (text_of(proc.stderr) or out).strip().splitlines()[-1:]
            return False, f"{python} -m sglang.bench_serving --help exited {proc.returncode}: " \
                          f"{(last or ['?'])[0][:300]}"
        return True, None


def sglang_level(p, w, concurrency, runner):
    """One level measured by SGLang's benchmark (as and where `runner` runs it): its figures,
    or raises RuntimeError."""
    output = os.path.join(runner.work, f"level-{concurrency}.jsonl")
    argv = workloads.argv(p["python"], p["url"], w, concurrency, output, p["tokenizer"],
                          p["model"], p["slo"])
    try:
        proc = runner.run(argv, p["timeout"])
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


def sandbox_problem(sandbox):
    """What is wrong with the `sandbox` option (None when nothing is)."""
    unknown = sorted(set(sandbox) - {"user", "group", "properties"})
    if unknown:
        return f"sandbox: unknown keys {unknown}; allowed: group, properties, user"
    for key in ("user", "group"):
        if not isinstance(sandbox.get(key, ""), str):
            return f"sandbox.{key}: an account name, got {type(sandbox[key]).__name__}"
    lines = sandbox.get("properties", [])
    if not isinstance(lines, list) or not all(
            isinstance(line, str) and "=" in line and "\n" not in line for line in lines):
        return "sandbox.properties: the unit's sandbox lines, a list of single-line Key=value"
    return None


def _checked(p):
    """The parameters with the workload and SLOs filled in, or WorkloadError naming every problem."""
    problems = []
    for name, checked in (("workload", workloads.check), ("slo", workloads.check_slo)):
        try:
            p = dict(p, **{name: checked(p[name])})
        except workloads.WorkloadError as exc:
            problems.append(str(exc))
    problem = sandbox_problem(p.get("sandbox") or {})
    if problem:
        problems.append(problem)
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
    with contextlib.ExitStack() as stack:
        runner = Runner(p.get("sandbox") or {}, p["api_key"], stack) if not p["own_bench"] \
            else None
        return _measured(p, w, url, runner)


def _measured(p, w, url, runner):
    """run()'s result, measured by `runner` (None: the own bench, asked for)."""
    runs, why = (False, "asked for the own bench (own_bench)") if runner is None \
        else runner.can_run(p["python"])
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
        measured = measure_levels(p, lambda c: sglang_level(p, w, c, runner), measured_by)
        sandbox = runner.report
    else:
        model = p["model"] or served_model(url, p["api_key"])
        measured = measure_levels(
            p, lambda c: own_level(p, w, c, url + "/v1/completions", model), measured_by)
        sandbox = {"used": False, "unit_prefix": None, "stopped_leftovers": [],
                   "how": "the own bench, in the module: no model code runs"}
    judged, capacity = workloads.judge(measured, p["slo"])
    result = {"changed": False, "measured_by": measured_by, "own_bench_reason": why,
              "workload": w, "slo": p["slo"], "mode": p["mode"], "levels": judged,
              "capacity": capacity, "sandbox": sandbox,
              "elapsed_s": round(time.monotonic() - started, 2)}
    return dict(result, record=workloads.record(result), table=workloads.table(result))


def main():
    module = AnsibleModule(
        argument_spec={
            "url": {"type": "str", "required": True},
            "api_key": {"type": "str", "default": "", "no_log": True},
            "python": {"type": "path", "required": True},
            "tokenizer": {"type": "str", "default": "", "no_log": False},
            "model": {"type": "str", "default": ""},
            "sandbox": {"type": "dict", "default": {}},
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
