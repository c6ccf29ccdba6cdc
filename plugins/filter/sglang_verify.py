"""What the running server resolved, against the preflight prediction and the expectations;
smoke-test gates and the bandwidth ceiling. Pure functions, tested in tests/unit."""

from ansible.errors import AnsibleFilterError

from ansible_collections.sglang.deploy.plugins.plugin_utils.sglang_effective import sglang_effective
from ansible_collections.sglang.deploy.plugins.plugin_utils.sglang_expect import check_expect, speculative_diffs
from ansible_collections.sglang.deploy.plugins.plugin_utils.sglang_filter_errors import own_errors
from ansible_collections.sglang.deploy.plugins.plugin_utils.sglang_limits import sglang_smoke_limits
from ansible_collections.sglang.deploy.plugins.plugin_utils.sglang_values import positive


def _graph_check(setting, actual, level, predicted):
    """One CUDA graph: the server's answer against the operator's level and the prediction."""
    status, reason = "ok", f"server resolved {actual}"
    if actual is None:
        status, reason = "warn", "this version's /server_info does not say"
    elif level == "required" and actual != "on":
        status, reason = "fail", f"required by sglang_expect, but the server resolved {actual}"
    elif level == "off" and actual != "off":
        status, reason = "fail", f"sglang_expect says off, but the server resolved {actual}"
    elif predicted.get(setting) not in (None, "unknown") and predicted[setting] != actual:
        status = "warn"
        reason = f"preflight predicted {predicted[setting]}, the server resolved {actual}"
    return {"setting": setting, "expected": level, "predicted": predicted.get(setting),
            "actual": actual, "status": status, "reason": reason}


def _tp_check(effective, expect, predicted):
    expected = expect.get("tp_size", predicted.get("tp_size"))
    ok = expected is None or effective.get("tp_size") == expected
    return {"setting": "tp_size", "expected": expected, "predicted": predicted.get("tp_size"),
            "actual": effective.get("tp_size"), "status": "ok" if ok else "fail",
            "reason": "as expected" if ok else "the server runs another tp size"}


def _speculative_check(effective, expect, predicted):
    """None when speculative decoding is neither expected nor running."""
    wanted, actual = expect.get("speculative"), effective.get("speculative")
    if wanted is None and not actual:
        return None
    diffs = speculative_diffs(wanted, actual, "server resolved")
    return {"setting": "speculative", "expected": wanted,
            "predicted": predicted.get("speculative"), "actual": actual,
            "status": "fail" if diffs else "ok", "reason": "; ".join(diffs) or "as expected"}


def sglang_verify(effective, preflight, expect=None):
    """{ok, checks, failures, warnings}: a required setting that did not resolve fails; a
    resolved value that differs from the prediction is reported with both values.

    Args:
        effective (dict): what the live server resolved (sglang_effective of its /server_info).
        preflight (dict): what sglang_preflight predicted for the release.
        expect (dict): the operator's expectations (sglang_expect merged over the profile's).
    Returns:
        dict: {ok, checks, failures, warnings, effective}; checks are {setting, status, reason,
            ...}.
    """
    expect = check_expect(expect)
    predicted = {r["name"]: r["predicted"] for r in (preflight or {}).get("rows", [])}
    checks = [_graph_check(setting, effective.get(setting), expect.get(setting, "auto"), predicted)
              for setting in ("decode_cuda_graph", "prefill_cuda_graph")]
    checks.append(_tp_check(effective, expect, predicted))
    checks.append(_speculative_check(effective, expect, predicted))
    checks = [c for c in checks if c]
    failures = [f"{c['setting']}: {c['reason']}" for c in checks if c["status"] == "fail"]
    warnings = [f"{c['setting']}: {c['reason']}" for c in checks if c["status"] == "warn"]
    return {"ok": not failures, "checks": checks, "failures": failures, "warnings": warnings,
            "effective": effective}


# /server_info fields that are reports, not server arguments.
NOT_ARGS = {"internal_states", "version", "launch_command", "startup_time", "frontend",
            "kv_events", "stand_in"}


def sglang_args_from_server_info(info):
    """The arguments a running server was resolved with, dashed like a release's config.

    Args:
        info (dict): the JSON object /server_info (or /get_server_info) answered.
    Returns:
        dict: {argument: value}, dashed; unset, false and empty ones left out.
    """
    if not isinstance(info, dict):
        raise AnsibleFilterError("sglang_args_from_server_info: expected /server_info's JSON object")
    return {k.replace("_", "-"): val for k, val in info.items()
            if k not in NOT_ARGS and val not in (None, False, "", [], {})}


# The figures compared with the baseline, and which way is better.
REGRESSION_KEYS = {"decode_tok_s_per_user": "higher", "output_tok_s": "higher",
                   "ttft_ms_p50": "lower"}


def _level(smoke, concurrency):
    return next((lv for lv in (smoke or {}).get("levels", []) if lv["concurrency"] == concurrency),
                None)


def sglang_smoke_gate(smoke, min_decode_tok_s=None, max_ttft_ms=None, baseline=None,
                      tolerance=0.10, regressions="refuse", ceiling=None):
    """{ok, failures, warnings, unknowns, rows, lines, record}: floors, failed requests and
    regression against the baseline, the table to show and what the release keeps.

    `regressions` is what a regression beyond the tolerance does: `refuse` (a deploy: the
    baseline is the release it replaces) or `warn` (a rollback: the baseline is the release's
    own figures from when it was proven, and going back is not refused for being slower than
    then, on a host that may be loaded; the floors still refuse).

    Args:
        smoke (dict): what sglang_smoke measured.
        min_decode_tok_s (float): the floor of tok/s per user at the first concurrency level (none:
            no floor).
        max_ttft_ms (float): the cap of the p99 time to first token (none: no cap).
        baseline (dict): the smoke record of the release to compare with (none: no comparison).
        tolerance (float): the fraction by which a figure may fall behind the baseline.
        regressions (str): refuse (a deploy) or warn (a rollback): what a regression beyond the
            tolerance does.
        ceiling (dict): what sglang_ceiling returned: the bandwidth bound beside the figures, and
            kept in the record (none: no ceiling).
    Returns:
        dict: {ok, failures, warnings, unknowns, rows, lines, record}; rows are {concurrency,
            now, baseline}; lines the table (smoke_table: per level, the ceiling, the warnings,
            the verdict); record what the release keeps of its smoke test, the next one's
            baseline (smoke_record).
    """
    floor, ttft_cap, tolerance = sglang_smoke_limits(min_decode_tok_s, max_ttft_ms, tolerance)
    if regressions not in ("refuse", "warn"):
        raise AnsibleFilterError(f"sglang_smoke_gate: regressions is 'refuse' or 'warn', got "
                                 f"{regressions!r}")
    levels = (smoke or {}).get("levels") or []
    if not levels:
        raise AnsibleFilterError("sglang_smoke_gate: the smoke test returned no levels")
    failures = [*_failed_requests(levels), *_below_floors(levels[0], floor, ttft_cap)]
    slower, unmeasured, rows = [], [], []
    baseline_name = ("the previous good release" if regressions == "refuse"
                     else "its own figures when it was proven")
    for lv in levels:
        base = _level(baseline, lv["concurrency"])
        rows.append({"concurrency": lv["concurrency"], "now": lv, "baseline": base})
        slower += _regressions(lv, base, tolerance, baseline_name)
        unmeasured += _unmeasured(lv, base, baseline_name)
    measured = {lv["concurrency"] for lv in levels}
    unmeasured += [f"concurrency {b['concurrency']} was not measured; {baseline_name} has it"
                   for b in (baseline or {}).get("levels") or []
                   if isinstance(b, dict) and b.get("concurrency") not in measured]
    # Fail closed: a figure the baseline has and this run lacks is no evidence of "not slower".
    if regressions == "refuse":
        failures += slower + unmeasured
    gate = {"ok": not failures, "failures": failures, "unknowns": unmeasured,
            "warnings": slower + unmeasured if regressions == "warn" else [], "rows": rows}
    return dict(gate, lines=smoke_table(gate, ceiling), record=smoke_record(smoke, ceiling))


def _unmeasured(lv, base, baseline_name):
    """The figures of a level the baseline has and this run did not measure."""
    return [f"{key} at concurrency {lv['concurrency']} was not measured; {baseline_name} has "
            f"{base[key]}" for key in REGRESSION_KEYS
            if positive((base or {}).get(key)) is not None and positive(lv.get(key)) is None]


def _failed_requests(levels):
    return [f"concurrency {lv['concurrency']}: {lv['requests_failed']} requests "
            f"failed ({'; '.join(lv.get('errors') or [])})" for lv in levels if lv["requests_failed"]]


def _below_floors(first, floor, ttft_cap):
    """The single-stream level against the decode floor and the TTFT cap."""
    failures = []
    rate = first.get("decode_tok_s_per_user")
    if floor is not None and (rate is None or rate < floor):
        failures.append(f"decode {rate} tok/s per user at concurrency {first['concurrency']} is "
                        f"below the floor of {floor:g} (sglang_smoke_min_decode_tok_s)")
    ttft = first.get("ttft_ms_p50")
    if ttft_cap is not None and (ttft is None or ttft > ttft_cap):
        failures.append(f"TTFT p50 {ttft} ms at concurrency {first['concurrency']} is above "
                        f"{ttft_cap:g} ms (sglang_smoke_max_ttft_ms)")
    return failures


def _regressions(lv, base, tolerance, baseline_name):
    """One level against the same level of the baseline."""
    failures = []
    for key, better in REGRESSION_KEYS.items():
        now, then = positive(lv.get(key)), positive((base or {}).get(key))
        if now is None or then is None:
            continue  # nothing to compare: _unmeasured names what this run lacks
        change = now / then - 1
        worse = -change if better == "higher" else change
        if worse > tolerance:
            failures.append(
                f"{key} at concurrency {lv['concurrency']}: {now} vs {then} in "
                f"{baseline_name} ({change:+.1%}, tolerance {tolerance:.0%})")
    return failures


def _mapping(value):
    return value if isinstance(value, dict) else {}


def _bandwidth(bandwidth_gbs, name):
    """The GB/s of the longest key of sglang_gpu_bandwidth_gbs found in the GPU's name."""
    table = {str(k).lower(): positive(v) for k, v in _mapping(bandwidth_gbs).items()}
    return next((v for k, v in sorted(table.items(), key=lambda kv: -len(kv[0]))
                 if k in name.lower()), None)


def _first_level_tok_s(smoke):
    levels = smoke.get("levels") if isinstance(smoke.get("levels"), list) else []
    first = levels[0] if levels and isinstance(levels[0], dict) else {}
    return positive(first.get("decode_tok_s_per_user"))


def sglang_ceiling(facts, smoke, tp_size, bandwidth_gbs):
    """The bandwidth-bound decode ceiling and the measured fraction of it.

    Each decode step reads every weight once; with tensor parallel each GPU reads its share:
    steps/s <= bandwidth / (weight bytes / tp). Times the accept length gives tokens/s.

    Args:
        facts (dict): what sglang_facts read on the host (its GPUs and the checkpoint's weight
            bytes).
        smoke (dict): what sglang_smoke measured (its first level's tok/s per user, the accept
            length).
        tp_size (int): the tensor parallel size the server resolved: each GPU reads its share of
            the weights.
        bandwidth_gbs (dict): sglang_gpu_bandwidth_gbs, GB/s by a piece of the GPU's name (the
            longest piece found in it counts).
    Returns:
        dict: {known, gpu, bandwidth_gbs, weight_gb_per_gpu, steps_per_s, accept_length,
            ceiling_tok_s, measured_tok_s, fraction}, or {known: false, reason}.
    """
    facts, smoke = _mapping(facts), _mapping(smoke)
    weight_bytes = positive(_mapping(facts.get("model")).get("weight_bytes"))
    devices = _mapping(facts.get("gpus")).get("devices")
    names = [str(d.get("name", "")) for d in devices if isinstance(d, dict)] \
        if isinstance(devices, list) else []
    if not names:
        return {"known": False, "reason": "no GPU facts on this host"}
    if not weight_bytes:
        return {"known": False, "reason": "the checkpoint's weight files were not found"}
    name = names[0]
    bandwidth = _bandwidth(bandwidth_gbs, name)
    if not bandwidth:
        return {"known": False, "reason": f"no positive memory bandwidth known for {name}: add "
                                          "it (GB/s) to sglang_gpu_bandwidth_gbs"}
    tp = max(1, int(positive(tp_size) or 1))
    steps = bandwidth * 1e9 / (weight_bytes / tp)
    accept = positive(smoke.get("accept_length")) or 1.0
    ceiling = steps * accept
    measured = _first_level_tok_s(smoke)
    return {"known": True, "gpu": name, "bandwidth_gbs": bandwidth,
            "weight_gb_per_gpu": round(weight_bytes / tp / 1e9, 2),
            "steps_per_s": round(steps, 1), "accept_length": accept,
            "ceiling_tok_s": round(ceiling, 1), "measured_tok_s": measured,
            "fraction": round(measured / ceiling, 3) if measured else None}


def smoke_record(smoke, ceiling=None):
    """What a release keeps of its smoke test (smoke.json, manifest), the baseline of the next:
    {model, levels, accept_length, graph_passes, ceiling} of what sglang_smoke measured, the
    ceiling (sglang_ceiling's answer) kept as it is."""
    keep = ("concurrency", "requests_ok", "requests_failed", "ttft_ms_p50", "ttft_ms_p99",
            "tpot_ms_p50", "tpot_ms_p99", "decode_tok_s_per_user", "output_tok_s",
            "completion_tokens", "wall_s")
    return {
        "model": smoke.get("model"),
        "levels": [{k: lv.get(k) for k in keep} for lv in smoke.get("levels") or []],
        "accept_length": smoke.get("accept_length"),
        "graph_passes": (smoke.get("graph_passes") or {}).get("delta"),
        "ceiling": ceiling,
    }


def smoke_table(gate, ceiling=None):
    """Lines of the smoke test's table: per concurrency level TTFT, TPOT, tok/s and the baseline
    (the gate's rows), the bandwidth bound and the fraction of it measured (`ceiling`,
    sglang_ceiling's answer), the warnings and the verdict."""
    head = (f"{'conc':>4} {'ok/fail':>7} {'TTFT p50':>9} {'p99':>7} {'TPOT p50':>9} {'p99':>7} "
            f"{'tok/s/user':>10} {'out tok/s':>9}   baseline tok/s/user, out tok/s, TTFT p50")
    lines = [head]
    for row in gate["rows"]:
        lv, base = row["now"], row["baseline"]
        # A figure the measurement lacks is shown as missing, never as a number.
        line = (f"{lv['concurrency']:>4} {_n(lv.get('requests_ok')):>3}/"
                f"{_n(lv.get('requests_failed')):<3} "
                f"{_n(lv.get('ttft_ms_p50')):>9} {_n(lv.get('ttft_ms_p99')):>7} "
                f"{_n(lv.get('tpot_ms_p50')):>9} {_n(lv.get('tpot_ms_p99')):>7} "
                f"{_n(lv.get('decode_tok_s_per_user')):>10} {_n(lv.get('output_tok_s')):>9}   ")
        line += (f"{_n(base.get('decode_tok_s_per_user'))}, {_n(base.get('output_tok_s'))}, "
                 f"{_n(base.get('ttft_ms_p50'))}" if base else "no previous good release")
        lines.append(line)
    if ceiling:
        if ceiling.get("known"):
            lines.append(
                f"ceiling: {ceiling['gpu']} {ceiling['bandwidth_gbs']:g} GB/s / "
                f"{ceiling['weight_gb_per_gpu']} GB per GPU = {ceiling['steps_per_s']} steps/s x "
                f"accept length {ceiling['accept_length']} = {ceiling['ceiling_tok_s']} tok/s; "
                f"measured {ceiling['measured_tok_s']} = {ceiling['fraction']:.0%} of it")
        else:
            lines.append(f"ceiling: unknown ({ceiling['reason']})")
    lines += [f"warning: {warning}" for warning in gate.get("warnings") or []]
    lines.append("smoke: OK" if gate["ok"] else "smoke: FAILED: " + " | ".join(gate["failures"]))
    return lines


def sglang_verify_table(verification, evidence=None):
    """Lines saying what the server resolved, each check against the prediction, then failures.

    `verification` is what sglang_verify returned; `evidence` (sglang_journal's) adds the
    journal lines of this start that show capture or a setting SGLang turned off.

    Args:
        verification (dict): what sglang_verify returned.
        evidence (dict): sglang_journal's evidence: the lines of this start that show capture or a
            setting SGLang turned off; none when the journal was not read (the table says so, where
            an empty evidence says the journal held none of those lines).
    Returns:
        list of str: the table's lines, the verdict last.
    """
    eff = verification["effective"]
    lines = [f"server resolved (sglang {eff.get('version')}, /server_info shape: {eff['shape']}): "
             f"decode graph {eff['decode_cuda_graph']} ({eff['decode_backend']}, max bs "
             f"{eff['decode_max_bs']}), prefill graph {eff['prefill_cuda_graph']} "
             f"({eff['prefill_backend']}), tp {eff['tp_size']}, speculative "
             f"{eff['speculative']}, accept length {eff['accept_length']}"]
    for c in verification["checks"]:
        lines.append(f"{c['setting']:<22}{c['status'].upper():<6}{c['reason']}")
    for name, found in sorted((evidence or {}).items()):
        lines.append(f"journal {name} x{found['count']}: {found['lines'][0]}")
    if evidence is None:
        lines.append("journal: not read (sglang_verify_journal off, or the unit's journal unreadable)")
    elif not evidence:
        lines.append("journal: none of the capture / auto-disable lines since this start")
    lines.append("verification: OK" if verification["ok"] else
                 "verification: FAILED: " + " | ".join(verification["failures"]))
    return lines


def _n(value):
    return "-" if value is None else f"{value:g}" if isinstance(value, (int, float)) else str(value)


class FilterModule:
    def filters(self):
        return {
            "sglang_effective": own_errors(sglang_effective),
            "sglang_args_from_server_info": own_errors(sglang_args_from_server_info),
            "sglang_verify": own_errors(sglang_verify),
            "sglang_verify_table": own_errors(sglang_verify_table),
            "sglang_smoke_gate": own_errors(sglang_smoke_gate),
            "sglang_ceiling": own_errors(sglang_ceiling),
        }
