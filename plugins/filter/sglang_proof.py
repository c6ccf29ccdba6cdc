"""A release's proof at its workload judged: the SLOs (a proven capacity) and the release it
replaces, like with like. Pure functions over what sglang_serving_bench returned, tested in
tests/unit/test_sglang_proof_gate.py; the figures are read in module_utils/sglang_workload.py."""

from ansible.errors import AnsibleFilterError

from ansible_collections.sglang.deploy.plugins.module_utils import sglang_workload as workloads
from ansible_collections.sglang.deploy.plugins.plugin_utils.sglang_filter_errors import own_errors


def sglang_proof_gate(proof, baseline=None, tolerance=0.10, regressions="refuse",
                      own_bench=False):
    """{ok, failures, warnings, unknowns, table}: the proof at the workload against its SLOs and
    against the baseline's proof at the same workload (seed included) and benchmark.

    A release with no proven capacity (not even the lowest level met every SLO) is refused. With
    a baseline proven like with like, a capacity lower by more than the tolerance, or total or
    per-user tok/s at a level both measured, is a regression: refused on a deploy, a warning on a
    rollback. A baseline proven against other SLOs compares level by level, not its capacity
    (SLOs move what counts as met, not what was measured). A baseline proven at another workload
    or by another benchmark (or none) is not compared, and the verdict says so in `unknowns`: no
    figure stands in for one not measured the same way.

    Args:
        proof (dict): what sglang_serving_bench returned (or its record).
        baseline (dict): the record of the proof of the release to compare with (none or empty:
            none).
        tolerance (float): the fraction by which the capacity or a level's tok/s may fall behind.
        regressions (str): refuse (a deploy) or warn (a rollback): what a regression does.
        own_bench (bool): accept a proof the project's own bench measured where SGLang's
            benchmark could not run (sglang_workload_own_bench_ok); else such a proof fails,
            naming why SGLang's did not run.
    Returns:
        dict: {ok, failures, warnings, unknowns, table}; table is a list of lines.
    """
    if regressions not in ("refuse", "warn"):
        raise AnsibleFilterError(f"sglang_proof_gate: regressions is 'refuse' or 'warn', got "
                                 f"{regressions!r}")
    if not isinstance(tolerance, (int, float)) or not 0 <= tolerance <= 1:
        raise AnsibleFilterError(f"sglang_proof_gate: tolerance {tolerance!r} is a fraction in "
                                 "[0, 1] (sglang_smoke_regression_tolerance)")
    if not isinstance(proof, dict) or "capacity" not in proof or "levels" not in proof:
        raise AnsibleFilterError("sglang_proof_gate: the proof is what sglang_serving_bench "
                                 "returned (capacity, levels)")
    judged = workloads.gate(proof, baseline or None, float(tolerance))
    fallback = []
    if proof.get("measured_by") != "sglang.bench_serving" and not own_bench:
        fallback = [f"measured by the {proof.get('measured_by') or '?'}, not SGLang's benchmark "
                    f"({proof.get('own_bench_reason') or 'no reason recorded'}): install SGLang's "
                    "dependencies in the release's env, or accept the project's own bench with "
                    "sglang_workload_own_bench_ok: true"]
    refused = fallback + judged["failures"] + (judged["regressions"] if regressions == "refuse"
                                               else [])
    warned = judged["regressions"] if regressions == "warn" else []
    return {"ok": not refused, "failures": refused, "warnings": warned,
            "unknowns": judged["unknowns"], "table": _table(proof, judged)}


def _table(proof, judged):
    lines = list(proof.get("table") or workloads.table(proof))
    for row in judged["compared"] or []:
        now, was = row["now"], row["baseline"]
        lines.append(f"  against the release it replaces, concurrency {row['concurrency']}: "
                     f"{_n(now.get('output_tok_s'))} tok/s ({_n(was.get('output_tok_s'))} there), "
                     f"{_n(now.get('tok_s_per_user'))} per user ({_n(was.get('tok_s_per_user'))})")
    lines += [f"  not compared: {why}" for why in judged["unknowns"]]
    lines += [f"  regression: {what}" for what in judged["regressions"]]
    return lines


def _n(value):
    """A figure as read, "-" where the proof has none (a missing or malformed figure is the
    gate's to refuse, not the table's to crash on)."""
    ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    return f"{value:g}" if ok else "-"


class FilterModule:
    def filters(self):
        return {"sglang_proof_gate": own_errors(sglang_proof_gate)}
