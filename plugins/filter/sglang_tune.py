"""The search of playbooks/tune.yml: the space, its candidates, scores, noise, the budget and
the leaderboard. Pure functions over data (no host, no clock of their own), tested in
tests/unit/test_sglang_tune.py; the tasks of roles/sglang_tune only wire them.

The filters, in the order a sweep calls them: sglang_tune_plan (the checked space, objective,
budget), sglang_tune_candidates (the starting configuration, then each knob's values, each
with its key, skip and expectations), sglang_tune_budget, sglang_tune_resolved_key,
sglang_tune_score (capacity, score, and the noise of repeated runs), sglang_tune_best (the
incumbent after a knob), sglang_tune_finalists, sglang_tune_outcome (winner, leaderboard and
the inventory that makes it). The functions without the sglang_tune_ prefix are their parts.

The search: one knob at a time from the incumbent (the best release so far); a candidate
becomes the incumbent only when it beats it by more than the measured noise.

The measure: SGLang's serving benchmark (the sglang_serving_bench module) at the deploy's
workload and SLOs (sglang_workload, sglang_workload_slo), at the tuner's levels: the objective's
concurrency and the levels below it. A result counts with no failed request and a proven
capacity; it ranks by that capacity first (higher wins), then by its score: the objective's
figure at the objective's level from the requests within the SLOs (goodput).
"""

import hashlib
import json
import math

import yaml
from ansible.errors import AnsibleFilterError

from ansible_collections.sglang.deploy.plugins.module_utils import sglang_workload as workloads
from ansible_collections.sglang.deploy.plugins.plugin_utils.sglang_args import dashed, env_name, not_owned, single_line
from ansible_collections.sglang.deploy.plugins.plugin_utils.sglang_filter_errors import own_errors

METRICS = ("decode_tok_s_per_user", "output_tok_s")
SCALARS = (str, int, float, bool)


def _fail(msg):
    raise AnsibleFilterError(msg)


def _canon(value):
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)


BUDGET_MINIMUMS = (("max_restarts", 1), ("max_wall_s", 1), ("noise_repeats", 2), ("finalists", 1))


@own_errors
def sglang_tune_plan(spec, base_args, base_env=None):
    """Check the space, constraints, objective and budget; return the plan the tasks follow.

    spec: {space: {args: {name: [values]}, env: {NAME: [values]}}, constraints: [...],
           objective: {metric, concurrency, ttft_p99_ms_max}, max_restarts, max_wall_s,
           noise_repeats, min_gain, finalists, workload, slo, workload_levels}
    Every refusal names the variable and what to change, before anything restarts. The plan's
    `levels` are the tuner's: the objective's concurrency and the levels below it of
    workload_levels (else 1, 2, 4, ...); its `basis` (workload, SLOs, levels, objective) is part
    of every candidate's key, so that a result measured otherwise is never resumed.

    Args:
        spec (dict): the tuning settings, shaped as above: the space and constraints
            (sglang_tune_space, sglang_tune_constraints, else the profile's tune:),
            sglang_tune_objective, the sglang_tune_* budget, and the workload measured
            (sglang_workload, sglang_workload_slo, sglang_workload_levels).
        base_args (dict): the server arguments the sweep starts from (__sglang_server_config), for
            the grid size.
        base_env (dict): the server's environment the sweep starts from (__sglang_server_env), for
            the grid size.
    Returns:
        dict: the plan, {knobs, constraints, objective, min_gain, levels, basis, grid_size} and the
            budget.
    """
    if not isinstance(spec, dict):
        _fail("sglang_tune: the tuning settings must be a mapping")
    knobs = _plan_knobs(spec.get("space") or {})
    constraints = _plan_constraints(spec.get("constraints") or [], knobs)
    objective = _plan_objective(spec.get("objective") or {})
    budget = {name: _plan_count(name, spec.get(name), low) for name, low in BUDGET_MINIMUMS}
    min_gain = _plan_min_gain(spec.get("min_gain", 0.02))
    levels = _plan_levels(spec.get("workload_levels") or [], objective["concurrency"])
    base_env = {str(k): str(v) for k, v in (base_env or {}).items()}
    basis = {"workload": spec.get("workload") or {}, "slo": spec.get("slo") or {},
             "levels": levels, "objective": objective}
    return {
        "knobs": knobs,
        "constraints": constraints,
        "objective": objective,
        "min_gain": min_gain,
        "levels": levels,
        "basis": json.loads(_canon(basis)),
        "grid_size": sglang_tune_grid_size(knobs, dict(base_args or {}), base_env),
        **budget,
    }


# The tuner's levels below the objective's when sglang_workload_levels gives none.
DOUBLINGS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)


def _plan_levels(given, concurrency):
    """The levels every candidate is measured at: those of sglang_workload_levels below the
    objective's concurrency (else 1, 2, 4, ... below it), then the objective's own."""
    if not isinstance(given, list):
        _fail("sglang_workload_levels must be a list of concurrency levels")
    levels = []
    for level in given:
        if isinstance(level, str) and level.strip().isdigit():
            level = int(level)
        if not _is_int(level) or level < 1:
            _fail(f"sglang_workload_levels: {level!r} is not a concurrency level (an integer >= 1)")
        levels.append(level)
    below = sorted({lv for lv in levels or DOUBLINGS if lv < concurrency})
    return below + [concurrency]


def _plan_knobs(space):
    """The knobs of sglang_tune_space, args first, each {name, kind, values}; refuses an empty
    space."""
    if not isinstance(space, dict) or set(space) - {"args", "env"}:
        _fail("sglang_tune_space must be a mapping with 'args' (SGLang arguments, dashed names) "
              "and/or 'env' (environment variables), each mapping a name to a list of values")
    knobs = []
    for kind in ("args", "env"):
        section = space.get(kind) or {}
        if not isinstance(section, dict):
            _fail(f"sglang_tune_space.{kind} must map names to lists of values")
        knobs += [_plan_knob(kind, name, values) for name, values in section.items()]
    if not knobs:
        _fail("sglang_tune_space is empty: give the profile a 'tune: space:' or set "
              "sglang_tune_space, e.g. {args: {speculative-num-steps: [1, 2, 3, 4]}}")
    return knobs


def _plan_knob(kind, name, values):
    """One knob of the space, through the profile's own checks: an SGLang argument as SGLang
    spells it and not one the role owns (the model, the keys, the ranks), or an environment
    variable's name, whole; and a list of distinct scalars."""
    where = f"sglang_tune_space.{kind}"
    if kind == "args":
        if not_owned(dashed(name, where), where) != name:
            _fail(f"{where}: write '{name}' as SGLang spells it: '{dashed(name, where)}'")
    else:
        env_name(name, where)
    return {"name": name, "kind": kind, "values": _plan_values(kind, name, values)}


def _plan_values(kind, name, values):
    """A knob's values: a non-empty list of distinct scalars (strings for an environment
    variable)."""
    if not isinstance(values, list) or not values:
        _fail(f"sglang_tune_space.{kind}.{name} must be a non-empty list of values")
    for value in values:
        if not isinstance(value, SCALARS):
            _fail(f"sglang_tune_space.{kind}.{name}: {value!r} is not a scalar "
                  "(string, number or boolean)")
    if kind == "env":
        values = [single_line(v, f"sglang_tune_space.env.{name}") for v in values]
    if len({_canon(v) for v in values}) != len(values):
        _fail(f"sglang_tune_space.{kind}.{name} lists a value twice: {values}")
    return list(values)


def _plan_constraints(constraints, knobs):
    """sglang_tune_constraints, each {set, from, plus, when}, none deriving a tuned knob."""
    if not isinstance(constraints, list):
        _fail("sglang_tune_constraints must be a list")
    tuned = {k["name"] for k in knobs}
    for i, rule in enumerate(constraints):
        _plan_constraint(i, rule, tuned)
    return constraints


def _plan_constraint(i, rule, tuned):
    if not isinstance(rule, dict) or not {"set", "from"} <= set(rule) \
            or set(rule) - {"set", "from", "plus", "when"}:
        _fail(f"sglang_tune_constraints[{i}]: expected {{set: ARG, from: ARG, plus: N, "
              "when: {ARG: VALUE}}}, e.g. set speculative-num-draft-tokens from "
              "speculative-num-steps plus 1 when speculative-eagle-topk is 1")
    if rule["set"] in tuned:
        _fail(f"sglang_tune_constraints[{i}] derives '{rule['set']}', which the space also "
              "lists: remove it from one of them")
    if not _is_int(rule.get("plus", 0)):
        _fail(f"sglang_tune_constraints[{i}].plus must be an integer")
    if not isinstance(rule.get("when", {}), dict):
        _fail(f"sglang_tune_constraints[{i}].when must map arguments to values")


def _plan_objective(objective):
    """sglang_tune_objective with its defaults: {metric, concurrency, ttft_p99_ms_max}."""
    metric = objective.get("metric", "output_tok_s")
    if metric not in METRICS:
        _fail(f"sglang_tune_objective.metric '{metric}' is not one of {', '.join(METRICS)}")
    concurrency = objective.get("concurrency", 1)
    if not _is_int(concurrency) or concurrency < 1:
        _fail("sglang_tune_objective.concurrency must be an integer >= 1")
    ceiling = objective.get("ttft_p99_ms_max")
    if ceiling is not None and (not _is_number(ceiling) or ceiling <= 0):
        _fail("sglang_tune_objective.ttft_p99_ms_max must be a positive number of ms (or null)")
    return {"metric": metric, "concurrency": concurrency, "ttft_p99_ms_max": ceiling}


def _plan_count(name, value, minimum):
    """A budget count (sglang_tune_<name>) as an int >= minimum; -e name=N gives a string."""
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value)
    if not _is_int(value) or value < minimum:
        _fail(f"sglang_tune_{name} must be an integer >= {minimum} (got {value!r})")
    return value


def _plan_min_gain(value):
    """sglang_tune_min_gain as a float in [0, 1); -e gives a string."""
    if isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            pass
    if not _is_number(value) or not 0 <= value < 1:
        _fail("sglang_tune_min_gain must be a fraction between 0 and 1 (e.g. 0.02 for 2%)")
    return float(value)


def _is_int(value):
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value):
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _current(knob, args, env):
    source = args if knob["kind"] == "args" else env
    return source.get(knob["name"])


def sglang_tune_grid_size(knobs, base_args, base_env):
    """The number of configurations the full grid would try (the base's values included)."""
    total = 1
    for knob in knobs:
        values = {_canon(v) for v in knob["values"]}
        now = _current(knob, base_args, base_env)
        if now is not None:
            values.add(_canon(now))
        elif _canon(False) not in values:
            values.add("unset")  # the base leaves it to SGLang's default: one more setting
        total *= len(values)
    return total


def _apply_constraints(args, constraints):
    args = dict(args)
    for rule in constraints:
        if all(_canon(args.get(k)) == _canon(v) or str(args.get(k)) == str(v)
               for k, v in (rule.get("when") or {}).items()):
            source = args.get(rule["from"])
            if source is not None:
                args[rule["set"]] = int(source) + int(rule.get("plus", 0))
    return args


def _normal(args):
    """Arguments as SGLang sees them: a store_true flag at false is the flag left out."""
    return {k: v for k, v in args.items() if v is not False and v is not None}


@own_errors
def sglang_tune_key(candidate, sglang_version, host, basis=None):
    """What makes two measurements the same: the SGLang version, the host, args and env, and
    what they were measured at (the plan's basis: workload, SLOs, levels, objective)."""
    blob = _canon({"sglang": str(sglang_version), "host": str(host),
                   "args": _normal(candidate["args"]), "env": candidate["env"],
                   "basis": basis or {}})
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


# Fields SGLang's resolution fills with a fresh value on every run: not part of the identity.
VOLATILE_RESOLVED = ("random_seed", "nccl_port")


@own_errors
def sglang_tune_resolved_key(resolved):
    """The identity of a configuration as SGLang resolved it (its resolved_dict()), or '' when
    it did not resolve: two candidates with one key run the same server.

    Args:
        resolved (dict): what SGLang resolved for the candidate (preflight's resolution.resolved).
    Returns:
        str: 16 hex digits, or empty when nothing resolved.
    """
    if not isinstance(resolved, dict) or not resolved:
        return ""
    kept = {k: v for k, v in resolved.items() if k not in VOLATILE_RESOLVED}
    return hashlib.sha256(_canon(kept).encode()).hexdigest()[:16]


def make_candidate(plan, args, env, changes, sglang_version, host):
    """A configuration: the incumbent's args/env with `changes`, then the constraints.

    Args:
        plan (dict): what sglang_tune_plan returned (its knobs and constraints).
        args (dict): the server arguments to start from (the role: the sweep's starting ones).
        env (dict): the environment to start from (the role: the sweep's starting one).
        changes (dict): {knob: value}, each knob one of the plan's; the role passes {} for the
            starting configuration.
        sglang_version (str): the SGLang version (sglang_version), part of the candidate's key.
        host (str): the host's inventory name (inventory_hostname), part of the candidate's key.
    Returns:
        dict: the candidate, {id, changes, derived, args, env, key}.
    """
    args, env = dict(args), {str(k): str(v) for k, v in env.items()}
    for name, value in changes.items():
        knob = next(k for k in plan["knobs"] if k["name"] == name)
        if knob["kind"] == "args":
            args[name] = value
        else:
            env[name] = str(value)
    asked = dict(args)
    args = _apply_constraints(args, plan["constraints"])
    derived = {k: v for k, v in args.items() if _canon(asked.get(k)) != _canon(v)}
    label = ", ".join(f"{k}={_show(v)}" for k, v in changes.items()) or "starting configuration"
    candidate = {"id": label, "changes": dict(changes), "derived": derived,
                 "args": args, "env": env}
    candidate["key"] = sglang_tune_key(candidate, sglang_version, host, plan.get("basis"))
    return candidate


def _show(value):
    return str(value).lower() if isinstance(value, bool) else str(value)


@own_errors
def sglang_tune_candidates(plan, incumbent, knob_name=None, known_keys=None, sglang_version="",
                           host="", expect=None):
    """The candidates to try from the incumbent: one per value of a knob, each with why it needs
    no restart and the expectations it is held to; without a knob, the incumbent's own
    configuration (the sweep's starting one).

    `skip` is None (measure it), 'identical' (the same configuration as the incumbent or one
    already tried in this knob, once SGLang's defaults are applied) or 'measured' (a result on
    this SGLang version and host exists: resumed). `expect` is the operator's expectations with
    the speculative shape the candidate asks for (a tuned step count is not a broken one).

    Args:
        plan (dict): what sglang_tune_plan returned (its knobs, constraints and basis).
        incumbent (dict): where the candidates start: the best result so far (its args, env,
            changes, derived, key), or {args, env} of the starting configuration.
        knob_name (str): the knob to vary, one of the plan's knob names; none gives the
            incumbent's own configuration, a list of one.
        known_keys (list of str): the keys already measured: by earlier sweeps on this host and
            this one.
        sglang_version (str): the SGLang version (sglang_version), part of each candidate's key.
        host (str): the host's inventory name (inventory_hostname), part of each candidate's key.
        expect (dict): the operator's expectations, sglang_expect merged over the profile's.
    Returns:
        list of dict: the candidates, each {id, changes, derived, args, env, key, skip, expect}.
    """
    if not knob_name:
        start = make_candidate(plan, incumbent["args"], incumbent["env"], {}, sglang_version, host)
        return [dict(start, skip=None, expect=expectations(start, expect))]
    return [dict(cand, expect=expectations(cand, expect))
            for cand in _knob_candidates(plan, incumbent, knob_name, known_keys, sglang_version,
                                         host)]


def _knob_candidates(plan, incumbent, knob_name, known_keys, sglang_version, host):
    """One candidate per value of the knob from the incumbent, each with its skip."""
    knob = next((k for k in plan["knobs"] if k["name"] == knob_name), None)
    if knob is None:
        _fail(f"sglang_tune: no knob '{knob_name}' in the plan")
    seen = {incumbent["key"]}
    out = []
    for value in knob["values"]:
        changes = dict(incumbent.get("changes") or {})
        changes[knob_name] = value
        cand = make_candidate(plan, incumbent["args"], incumbent["env"], changes,
                              sglang_version, host)
        # What the constraints derived on the way from the start, still in force.
        cand["derived"] = {**{k: cand["args"][k] for k in incumbent.get("derived") or {}
                              if k in cand["args"]}, **cand["derived"]}
        if cand["key"] in seen:
            cand["skip"] = "identical"
        elif cand["key"] in (known_keys or []):
            cand["skip"] = "measured"
        else:
            cand["skip"] = None
        seen.add(cand["key"])
        out.append(cand)
    return out


# What the objective's metric reads in a level of the serving benchmark.
FIGURES = {"output_tok_s": "output_tok_s", "decode_tok_s_per_user": "tok_s_per_user"}


def _failed(levels):
    """The failed requests of a measurement, as a reason (empty when none failed), with what
    the benchmark said when it wrote no result."""
    said = []
    for lv in levels:
        if lv.get("errors"):
            why = f" ({str(lv['error'])[:200]})" if lv.get("error") else ""
            said.append(f"{lv['errors']} of {lv.get('requests', '?')} requests failed at "
                        f"concurrency {lv.get('concurrency')}{why}")
    return "; ".join(said)


def _capacity(levels, concurrency):
    """(the tuner's proven capacity, why not): the highest level up to the objective's that met
    every SLO with every level measured below it met, as the serving benchmark judges it."""
    first_miss, met = workloads.met_below_first_miss(
        [lv for lv in levels if lv.get("concurrency", 0) <= concurrency])
    if first_miss is not None:
        why = "; ".join(first_miss.get("misses") or []) or "its SLOs not met"
        return (met[-1] if met else None), f"concurrency {first_miss['concurrency']} missed: {why}"
    return (met[-1] if met else None), "" if met else "no level measured"


def _share(level):
    """The share of the level's requests within the SLOs: the benchmark's count (SGLang's
    --goodput), else every request when the level met every SLO and none when it did not (the
    own bench counts no request against them)."""
    counted = level.get("slo_attainment")
    if _is_number(counted):
        return max(0.0, min(1.0, float(counted)))
    return 1.0 if level.get("met") else 0.0


def _over_ceiling(level, objective):
    """Why the level's TTFT p99 does not meet the objective's ceiling (empty when it does or
    there is none): one not measured does not."""
    ceiling = objective.get("ttft_p99_ms_max")
    ttft = (level.get("ttft_ms") or {}).get("p99")
    if ceiling is None or (_is_number(ttft) and ttft <= ceiling):
        return ""
    return (f"TTFT p99 {_fmt(ttft)} ms at concurrency {objective['concurrency']} is above the "
            f"ceiling {ceiling}")


def _score_one(proof, objective):
    """sglang_tune_score of one measurement."""
    levels = [lv for lv in (proof or {}).get("levels") or [] if isinstance(lv, dict)]
    concurrency = objective["concurrency"]
    level = next((lv for lv in levels if lv.get("concurrency") == concurrency), None)
    out = {"score": None, "capacity": None, "level": level or {},
           "accept_length": (level or {}).get("accept_length")}
    if level is None:
        return dict(out, reason=f"no level at concurrency {concurrency}")
    failed = _failed(levels)
    if failed:
        return dict(out, reason=failed)
    capacity, why = _capacity(levels, concurrency)
    out["capacity"] = capacity
    if capacity is None:
        return dict(out, reason=f"no proven capacity ({why})")
    over = _over_ceiling(level, objective)
    if over:
        return dict(out, reason=over)
    value = level.get(FIGURES[objective["metric"]])
    if not _is_number(value) or value <= 0:
        return dict(out, reason=f"no {objective['metric']} measured at concurrency {concurrency}")
    # A counted result keeps why its capacity stops there (a level that missed), if one did.
    return dict(out, score=round(float(value) * _share(level), 2), reason=why)


@own_errors
def sglang_tune_score(proof, plan):
    """The proven capacity and the score of a measurement at the workload, or a score of None
    with the reason it does not count (a failed request, no proven capacity, TTFT p99 above the
    ceiling).

    The capacity is the highest of the tuner's levels (up to the objective's concurrency) that
    met every SLO with every one below it met; the score is the objective's figure at its level
    (output tok/s, or tok/s per user) times the share of its requests within the SLOs: goodput.
    Several measurements of one release (the noise's) give the best of them, with each one's
    score in `runs` and their relative spread in `noise` (never below the plan's min_gain; None
    unless two of them count).

    Args:
        proof (raw): a mapping or a list of mappings: what sglang_serving_bench measured for one
            release (its levels), or several such measurements of one release.
        plan (dict): what sglang_tune_plan returned: its objective (the metric, the concurrency
            level it is read at, the TTFT ceiling) and min_gain.
    Returns:
        dict: {score, capacity, level, accept_length, reason}: a score of none says why in
            reason; for a list, the best measurement, with `runs` (each one's score) and `noise`.
    """
    objective = plan["objective"]
    if isinstance(proof, list):
        scored = [_score_one(one, objective) for one in proof]
        counted = [one for one in scored if one["score"] is not None]
        best = max(counted, key=_rank) if counted else (scored or [_score_one({}, objective)])[-1]
        runs = [one["score"] for one in scored]
        spread = (measured_noise(runs, plan["min_gain"])
                  if len([r for r in runs if _is_number(r)]) >= 2 else None)
        return dict(best, runs=runs, noise=spread)
    return _score_one(proof, objective)


def measured_noise(scores, min_gain):
    """Relative noise from repeated measurements of one release (the `runs` of
    sglang_tune_score, at least two numbers, others dropped): the spread of their scores over
    the mean, never below min_gain (a gain smaller than that is not worth a change), a fraction
    rounded to 4 places."""
    values = [float(s) for s in scores if _is_number(s)]
    if len(values) < 2:
        _fail("sglang_tune: the incumbent must be measured at least twice "
              "(sglang_tune_noise_repeats >= 2) and every measurement must count")
    mean = sum(values) / len(values)
    if max(values) == min(values):
        spread = 0.0
    else:
        spread = (max(values) - min(values)) / mean if mean > 0 else math.inf
    return round(max(float(min_gain), spread), 4)


def _rank(result, final=False):
    """A result's place, higher first: (its proven capacity, its score); no score is last."""
    score = result.get("final_score" if final else "score")
    if not _is_number(score):
        return (-1, 0.0)
    return (result.get("final_capacity" if final else "capacity") or 0, float(score))


@own_errors
def sglang_tune_beats(result, incumbent, noise, final=False):
    """True only when the result ranks above the incumbent: a higher proven capacity, or the
    same capacity and a score above the incumbent's by more than the noise. `final` compares
    the finalists' second figures (final_capacity, final_score) where they have them."""
    mine, theirs = _rank(result, final), _rank(incumbent, final and "final_score" in incumbent)
    if mine[0] < 0 or theirs[0] < 0:
        return False
    if mine[0] != theirs[0]:
        return mine[0] > theirs[0]
    return mine[1] > theirs[1] * (1.0 + float(noise))


@own_errors
def sglang_tune_best(results, incumbent, noise):
    """The new incumbent among the results of one knob: the best one that beats the incumbent
    beyond noise (capacity first, then score), else the incumbent.

    Args:
        results (list of dict): the results of this knob's candidates (each with its verdict,
            capacity and score); only measured ones count.
        incumbent (dict): the incumbent before this knob, a result with its capacity and score.
        noise (float): the relative noise (the `noise` of sglang_tune_score's runs).
    Returns:
        dict: the new incumbent, one of results or incumbent itself.
    """
    best = incumbent
    for result in results:
        if result.get("verdict") != "measured":
            continue
        if sglang_tune_beats(result, incumbent, noise) and (
                best is incumbent or _rank(result) > _rank(best)):
            best = result
    return best


@own_errors
def sglang_tune_budget(restarts, started_at, now, max_restarts, max_wall_s, need=1):
    """Whether `need` more restarts fit: {ok, reason}.

    Args:
        restarts (int): the restarts the sweep spent so far.
        started_at (float): when the sweep started (seconds since the epoch).
        now (float): the time now (seconds since the epoch).
        max_restarts (int): sglang_tune_max_restarts.
        max_wall_s (float): sglang_tune_max_wall_s.
        need (int): the restarts the next step takes.
    Returns:
        dict: {ok, reason}: reason says which budget is spent (empty when ok).
    """
    if int(restarts) + int(need) > int(max_restarts):
        return {"ok": False, "reason": f"restart budget spent ({restarts} of {max_restarts})"}
    elapsed = float(now) - float(started_at)
    if elapsed >= float(max_wall_s):
        return {"ok": False, "reason": f"wall time budget spent ({elapsed:.0f} s of {max_wall_s} s)"}
    return {"ok": True, "reason": ""}


@own_errors
def sglang_tune_finalists(results, count):
    """The `count` best measured results (distinct configurations), best first: the highest
    proven capacity, then the highest score.

    Args:
        results (list of dict): every result of the sweep so far; those measured (or the incumbent)
            with a score and a release count.
        count (int): how many to keep: the plan's finalists (sglang_tune_finalists).
    Returns:
        list of dict: at most count results, best first.
    """
    good = [r for r in results if r.get("verdict") in ("measured", "incumbent")
            and _is_number(r.get("score")) and r.get("release")]
    good.sort(key=_rank, reverse=True)
    out, keys = [], set()
    for result in good:
        if result["key"] not in keys:
            keys.add(result["key"])
            out.append(result)
    return out[:int(count)]


def pick_winner(finalists, start, noise):
    """The finalist whose second measurement beats the starting release (a higher capacity, or
    the same and a score beyond noise), else the start. Among finalists of the best capacity
    within noise of the best score, the one with the fewest changes wins: a change must earn
    its place. Each finalist carries `final_capacity` and `final_score`.

    Args:
        finalists (list of dict): the finalists after their second measurement, each with its
            final_capacity and final_score.
        start (dict): the starting release's result (its key, capacity and score).
        noise (float): the relative noise (the `noise` of sglang_tune_score's runs).
    Returns:
        dict: the winning finalist, or the start.
    """
    start_final = next((f for f in finalists if f["key"] == start["key"]), start)
    better = [f for f in finalists if f["key"] != start["key"]
              and sglang_tune_beats(f, start_final, noise, final=True)]
    if not better:
        return start_final
    top = max(better, key=lambda f: _rank(f, True))
    close = [f for f in better if not sglang_tune_beats(top, f, noise, final=True)]
    return min(close, key=lambda f: (len(f.get("changes") or {}), -_rank(f, True)[1]))


def _fmt(value, digits=1):
    return "-" if value is None else (f"{value:.{digits}f}" if isinstance(value, float)
                                      else str(value))


def _verdict(result, winner_key):
    """The leaderboard's last column: the verdict, where it comes from, WINNER, the reason."""
    verdict = result.get("verdict", "?") + (" (earlier sweep)" if result.get("resumed") else "")
    if result.get("key") == winner_key and result.get("verdict") != "identical":
        verdict += " WINNER"
    if result.get("reason"):
        verdict += f": {result['reason']}"
    return verdict


def _leaderboard_row(result, winner_key):
    """One result as the leaderboard's columns: its figures at the objective's level."""
    level = result.get("level") or {}
    derived = result.get("derived") or {}
    ttft, itl = level.get("ttft_ms") or {}, level.get("itl_ms") or {}
    return (
        result.get("release") or "-",
        result.get("id", "?"),
        ", ".join(f"{k}={_show(v)}" for k, v in derived.items()) or "-",
        _fmt(result.get("capacity")),
        _fmt(ttft.get("p50")), _fmt(ttft.get("p99")), _fmt(itl.get("p50"), 2),
        _fmt(level.get("tok_s_per_user")), _fmt(level.get("output_tok_s")),
        _fmt(result.get("score")), _fmt(result.get("accept_length"), 2),
        _verdict(result, winner_key))


def leaderboard(results, objective, winner_key=None):
    """Lines of the leaderboard: the highest capacity and score first, then the ones without a
    score.

    Args:
        results (list of dict): every result of the sweep, whatever its verdict.
        objective (dict): the plan's objective {metric, concurrency, ttft_p99_ms_max}, the first
            line.
        winner_key (str): the key of the winner, whose row says WINNER (none: no row does).
    Returns:
        list of str: the objective, the header, one line per result.
    """
    rows = sorted(results, key=_rank, reverse=True)
    header = ("candidate", "changed", "resolved", "capacity", "TTFT p50", "TTFT p99", "ITL p50",
              "tok/s/user", "out tok/s", "score", "accept", "verdict")
    table = [header, *(_leaderboard_row(r, winner_key) for r in rows)]
    widths = [max(len(str(row[i])) for row in table) for i in range(len(header) - 1)]
    lines = [f"objective: the proven capacity up to concurrency {objective['concurrency']} at the "
             f"workload's SLOs, then the score: {objective['metric']} at concurrency "
             f"{objective['concurrency']} of the requests within the SLOs"
             + (f", TTFT p99 <= {objective['ttft_p99_ms_max']} ms"
                if objective.get("ttft_p99_ms_max") else "") + " (times in ms)"]
    for row in table:
        lines.append("  ".join(str(c).ljust(w) for c, w in zip(row, widths)) + "  " + row[-1])
    return lines


def server_args_yaml(winner, start_args, operator_args=None):
    """The inventory's sglang_server_args that make the winner: the operator's own, with what
    the winner changed from the starting configuration, as YAML.

    Args:
        winner (dict): the sweep's winner (its changes from the starting configuration).
        start_args (dict): the server arguments the sweep started from.
        operator_args (dict): the inventory's sglang_server_args before the sweep.
    Returns:
        str: YAML text, {sglang_server_args: {...}}.
    """
    merged = dict(operator_args or {})
    for key, value in winner["args"].items():
        if _canon(start_args.get(key)) != _canon(value):
            merged[key] = value
    # Plain types first: Ansible hands filters its own str and dict subclasses, which
    # yaml.safe_dump cannot represent.
    plain = json.loads(json.dumps({"sglang_server_args": merged}))
    return yaml.safe_dump(plain, default_flow_style=False, sort_keys=True)


SPEC_EXPECT = {"speculative-num-steps": "num_steps", "speculative-eagle-topk": "eagle_topk",
               "speculative-num-draft-tokens": "num_draft_tokens"}


def expectations(candidate, expect):
    """The expectations a candidate is held to: the operator's, with the speculative shape the
    candidate asks for (a tuned step count is not a broken expectation).

    Args:
        candidate (dict): the candidate about to be deployed (its args, changes and derived).
        expect (dict): the operator's expectations: sglang_expect merged over the profile's.
    Returns:
        dict: the expectations, speculative widened to the candidate's.
    """
    expect = dict(expect or {})
    spec = {field: int(candidate["args"][arg]) for arg, field in SPEC_EXPECT.items()
            if arg in candidate["args"] and arg in candidate.get("changes", {}) | candidate.get(
                "derived", {})}
    if spec:
        expect["speculative"] = {**(expect.get("speculative") or {}), **spec}
    return expect


def changed_env(winner, profile_env):
    """The winner's environment that differs from the profile's, for sglang_env.

    Args:
        winner (dict): the sweep's winner (its env).
        profile_env (dict): the environment to compare with: the role passes the one the sweep
            started from (the profile's env merged with sglang_env).
    Returns:
        dict: {NAME: value} of the winner's variables that differ.
    """
    return {k: v for k, v in winner["env"].items() if str(profile_env.get(k)) != str(v)}


@own_errors
def sglang_tune_outcome(sweep, operator_args=None, apply=False):
    """What a sweep ends with: its winner, the release left serving, the leaderboard, and the
    inventory that makes the winner (sglang_server_args and sglang_env).

    The winner is the finalist whose second measurement beats the starting release beyond the
    noise (see pick_winner); with no finalists, the incumbent (the start until a knob beat it).
    The starting release serves again unless the operator applies the winner.

    Args:
        sweep (dict): the sweep's state (__sglang_tune): its plan, base_config, base_env, start,
            noise, results, and the incumbent and finals where it got that far.
        operator_args (dict): the inventory's sglang_server_args before the sweep.
        apply (bool): sglang_tune_apply: leave the winner serving.
    Returns:
        dict: {winner, serving (str: the release to leave serving), leaderboard (list of str),
            server_args (dict), inventory (str: YAML of sglang_server_args), env (dict: the
            winner's variables that differ from the start)}.
    """
    finals = sweep.get("finals") or []
    best = (pick_winner(finals, sweep["start"], sweep["noise"]) if finals
            else sweep.get("incumbent") or sweep["start"])
    inventory = server_args_yaml(best, sweep["base_config"], operator_args)
    return {
        "winner": best,
        "serving": (best if apply else sweep["start"])["release"],
        "leaderboard": leaderboard(sweep.get("results") or [], sweep["plan"]["objective"],
                                   best["key"]),
        "server_args": yaml.safe_load(inventory)["sglang_server_args"],
        "inventory": inventory,
        "env": changed_env(best, sweep["base_env"]),
    }


class FilterModule:
    def filters(self):
        return {
            "sglang_tune_plan": sglang_tune_plan,
            "sglang_tune_candidates": sglang_tune_candidates,
            "sglang_tune_score": sglang_tune_score,
            "sglang_tune_best": sglang_tune_best,
            "sglang_tune_budget": sglang_tune_budget,
            "sglang_tune_finalists": sglang_tune_finalists,
            "sglang_tune_resolved_key": sglang_tune_resolved_key,
            "sglang_tune_outcome": sglang_tune_outcome,
        }
