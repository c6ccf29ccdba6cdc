"""What an upgrade changes: the serving SGLang's resolution of a release beside the candidate's.

Both sides are SGLang's own answers (sglang_resolve in each venv, judged by sglang_preflight);
this file only sets them side by side. Unit-tested in tests/unit/test_sglang_upgrade.py.
"""

import fnmatch

from ansible.errors import AnsibleFilterError

from ansible_collections.sglang.deploy.plugins.module_utils.sglang_packages import canonical
from ansible_collections.sglang.deploy.plugins.module_utils.sglang_versions import numeric, older
from ansible_collections.sglang.deploy.plugins.plugin_utils import sglang_evidence as evidence
from ansible_collections.sglang.deploy.plugins.plugin_utils.sglang_filter_errors import own_errors

# Distributions whose change an operator must see (GPU kernels, the model code, the
# collectives); every other change is counted. Patterns over PEP 503 names.
MATTERS = ("sglang", "torch", "flashinfer-*", "sgl-kernel", "sglang-kernel", "transformers",
           "triton", "xgrammar", "nvidia-nccl-*", "nvidia-cuda-runtime-*")


def _flat(value, prefix=""):
    """{dotted field: value} of a resolved record: nested records (cuda_graph_config) opened."""
    if isinstance(value, dict) and (value or not prefix):
        out = {}
        for key, item in value.items():
            out.update(_flat(item, f"{prefix}.{key}" if prefix else str(key)))
        return out
    return {prefix: value}


def _resolved(resolution):
    """The side's resolved record, or None when SGLang did not resolve the release there (it
    did not run, or raised)."""
    resolution = resolution or {}
    resolved = resolution.get("resolved")
    ok = resolution.get("ran") is True and not resolution.get("error")
    return resolved if ok and isinstance(resolved, dict) and resolved else None


def _sites(resolution):
    """{field: {file, line, function}} of the fields SGLang's resolution wrote."""
    return {c["field"]: {k: c.get(k) for k in ("file", "line", "function")}
            for c in (resolution or {}).get("changes") or [] if c.get("field")}


def volatile(old, new):
    """Fields either side's SGLang sets otherwise on each resolution (a random seed)."""
    return sorted({str(f) for side in (old, new) for f in (side or {}).get("volatile") or []})


def differences(old, new):
    """Every field both sides resolved to different values, each with the line that set it
    (null: the field's default or the value asked); plus the fields only one side has.
    A field SGLang sets otherwise on each run (volatile) is no difference."""
    if _resolved(old) is None or _resolved(new) is None:
        return [], [], []
    before, after = _flat(_resolved(old)), _flat(_resolved(new))
    per_run = set(volatile(old, new))
    old_sites, new_sites = _sites(old), _sites(new)
    diffs = [{"field": f, "from": before[f], "to": after[f], "from_site": old_sites.get(f),
              "to_site": new_sites.get(f)}
             for f in sorted(set(before) & set(after) - per_run) if before[f] != after[f]]
    return diffs, sorted(set(after) - set(before)), sorted(set(before) - set(after))


def refused_flags(new):
    """The release's flags the candidate's parser does not know, with SGLang's own message
    (when it stopped at them) and the nearest names it knows."""
    error = (new or {}).get("error") or {}
    message = error.get("message") if error.get("stage") in ("parse", None) else None
    return [{"flag": f"--{item['name']}", "message": message or "unknown to the parser",
             "nearest": [f"--{s}" for s in item.get("suggestions") or []]}
            for item in (new or {}).get("unknown_flags") or []]


def rows_changed(old_verdict, new_verdict):
    """The verdict's rows whose status changes (OK -> FAIL), by name."""
    before = {r["name"]: r for r in (old_verdict or {}).get("rows") or []}
    out = []
    for row in (new_verdict or {}).get("rows") or []:
        then = before.get(row["name"])
        if then is None or then["status"] != row["status"]:
            out.append({"name": row["name"],
                        "from": then["status"].upper() if then else "absent",
                        "to": row["status"].upper(), "evidence": row["evidence"]})
    return out


def _packages(resolution, verdict):
    """{name: version} the side's venv holds; where SGLang's probe did not run (no GPU to
    describe, an import that failed early), the sglang version its sources gave the verdict."""
    found = {canonical(str(k)): v for k, v in ((resolution or {}).get("packages") or {}).items()}
    version = (verdict or {}).get("sglang_version")
    if not found and version not in (None, "unknown"):
        found = {"sglang": version}
    return found


def _torch_cuda(resolution):
    return ((resolution or {}).get("torch") or {}).get("cuda")


def package_changes(old, new, old_verdict=None, new_verdict=None):
    """([{name, from, to}] of the distributions that matter, number of other changes)."""
    before, after = _packages(old, old_verdict), _packages(new, new_verdict)
    changed = sorted(n for n in set(before) | set(after) if before.get(n) != after.get(n))
    matters = [n for n in changed if any(fnmatch.fnmatchcase(n, p) for p in MATTERS)]
    rows = [{"name": n, "from": before.get(n), "to": after.get(n)} for n in matters]
    if _torch_cuda(old) != _torch_cuda(new):
        rows.append({"name": "torch CUDA", "from": _torch_cuda(old), "to": _torch_cuda(new)})
    return rows, len(changed) - len(matters)


def prerequisites(prereqs):
    """[{what, needed, found}] of the candidate's host prerequisites (sglang_host_prereqs run
    on the candidate's venv), and the failures it reported, each with what to do."""
    if not prereqs:
        return [], []
    facts = prereqs.get("facts") or {}
    rows = []
    if facts.get("torch_cuda"):
        rows.append({"what": f"NVIDIA driver for torch's CUDA {facts['torch_cuda']}",
                     "needed": facts.get("driver_needed"), "found": facts.get("driver")})
    for what, needed, key in (("C compiler", "cc or gcc", "cc"),
                              ("Python headers", "Python.h", "python_h"),
                              ("nvcc", "for kernels built at run time", "nvcc")):
        found = facts.get(key)
        rows.append({"what": what, "needed": needed,
                     "found": ("Python.h" if found is True else found) or None})
    return rows, list(prereqs.get("failures") or [])


def _unresolved(side, resolution):
    """Why a side has no resolution to compare (None when it has one, or SGLang refused the
    release there: a refusal is evidence, and a change needed)."""
    if _resolved(resolution) is not None:
        return None
    if resolution is None:
        return f"the {side} SGLang was not asked (sglang_preflight_resolve is off)"
    error = resolution.get("error") if isinstance(resolution.get("error"), dict) else None
    if resolution.get("ran") and error:
        return None if side == "candidate" else (
            f"the {side} SGLang raised {error.get('type')} at {error.get('file')}:"
            f"{error.get('line')} while it resolved the release")
    return f"the {side} SGLang did not resolve the release: " + str(
        resolution.get("reason") or "its report holds no resolved record")


def _driver_unknown(facts, new_resolution):
    """Why the driver is no evidence for the candidate's torch (None when it is)."""
    cuda = facts.get("torch_cuda")
    torch = (new_resolution or {}).get("torch") or {}
    if cuda is None and isinstance(torch.get("version"), str) and torch.get("cuda") is None \
            and "torch_cuda" in facts:
        return None  # a CPU build of torch, as SGLang's own import of it said: no driver
    if numeric(cuda) is None:
        return ("the CUDA version the candidate's torch is built for cannot be read (no "
                "torch/version.py in its env): the driver was not checked")
    if numeric(facts.get("driver_needed")) is None:
        return (f"torch is built for CUDA {cuda}, which sglang_cuda_min_driver does not list: "
                "the driver was not checked")
    if numeric(facts.get("driver")) is None:
        return (f"no NVIDIA driver answers (nvidia-smi): whether this host runs CUDA {cuda} "
                f"(driver >= {facts['driver_needed']}) is unknown")
    return None


def _prerequisites_unknown(prereqs, new_resolution):
    """Why the candidate's host prerequisites are no evidence of a start: not read, read
    before its env existed, no driver answering, a CUDA the table does not list, a toolchain
    not read."""
    if prereqs is None:
        return ["the candidate's host prerequisites were not read"]
    facts = prereqs["facts"]
    if prereqs["packages"].get("venv_exists") is not True:
        return ["the candidate's prerequisites were read before its env existed: its torch's "
                "CUDA was not checked"]
    out = [_driver_unknown(facts, new_resolution)]
    if not (isinstance(facts.get("cc"), str) and facts["cc"].startswith("/")) \
            or facts.get("python_h") is not True:
        if not any(f.startswith("toolchain:") for f in prereqs["failures"]):
            out.append("the C compiler and the Python headers were not read")
    return [why for why in out if why]


def _driver_too_old(prereqs):
    """The driver check, made here from the facts (the module's failure is not trusted alone)."""
    facts = (prereqs or {}).get("facts") or {}
    if not older(facts.get("driver"), facts.get("driver_needed")) or any(
            f.startswith("driver:") for f in prereqs["failures"]):
        return []
    return [f"driver: NVIDIA driver {facts['driver']} is older than {facts['driver_needed']}, "
            f"which CUDA {facts.get('torch_cuda')} needs: upgrade the driver"]


def unknowns(old_resolution, new_resolution, old_verdict, new_verdict, prereqs):
    """What the plan lacks to say `ready`: each side's resolution and rows with evidence (the
    rows compared), the candidate's prerequisites read after its env was built."""
    out = [why for why in (_unresolved("serving", old_resolution),
                           _unresolved("candidate", new_resolution)) if why]
    for side, judged in (("serving", old_verdict), ("candidate", new_verdict)):
        out += [f"{side} {u}" for u in judged.get("unknowns") or []]
    return out + _prerequisites_unknown(prereqs, new_resolution)


def _changes_needed(report, new_verdict, prereq_failures):
    out = [f"{f['flag']}: rename or drop it (nearest: {', '.join(f['nearest']) or 'none'})"
           for f in report["refused_flags"]]
    error = (new_verdict or {}).get("startup_error")
    if error and not report["refused_flags"]:
        out.append(f"SGLang {report['to_version']} refuses the release at start: {error['type']} "
                   f"at {error.get('file')}:{error.get('line')}: {error.get('message')}")
    failed = {r["name"] for r in report["rows_changed"] if r["to"] == "FAIL"}
    out += [f for f in (new_verdict or {}).get("failures") or []
            if f.split(":", 1)[0] in failed - {"resolution", "flags"}]
    return out + prereq_failures


def sglang_upgrade_report(old_verdict, new_verdict, old_resolution, new_resolution, prereqs=None):
    """{from, to, refused_flags, differences, rows_changed, packages, prerequisites, verdict,
    changes_needed, unknowns, lines}: the plan of moving a release from one SGLang to another,
    with its lines for the play output (table()).

    `old_verdict`/`new_verdict`: sglang_preflight of the release in each venv;
    `old_resolution`/`new_resolution`: what sglang_resolve returned there; `prereqs`:
    sglang_host_prereqs run on the candidate's venv after it was built. The verdict fails
    closed: `changes needed` when something must change (refused flags, a refusal at start, a
    failing row, a prerequisite), else `unknown` when evidence is missing (a side that did not
    resolve, crashed or timed out, a candidate row without evidence, prerequisites not read or
    read before the env existed, no driver answering), each reason in `unknowns`; `ready`
    only from evidence on both sides.

    Args:
        old_verdict (dict): sglang_preflight's verdict on the release in the serving venv.
        new_verdict (dict): sglang_preflight's verdict on the release in the candidate's venv.
        old_resolution (dict): what sglang_resolve returned in the serving venv (none: not asked).
        new_resolution (dict): what sglang_resolve returned in the candidate's venv (none: not
            asked).
        prereqs (dict): what sglang_host_prereqs read in the candidate's venv once it was built
            (none: not read).
    Returns:
        dict: the plan; its verdict is ready, unknown or changes needed; `lines` shows it, the
            verdict first.
    """
    for name, value in (("old_verdict", old_verdict), ("new_verdict", new_verdict)):
        if not isinstance(value, dict) or "rows" not in value:
            raise AnsibleFilterError(f"sglang_upgrade_report: {name} must be a preflight verdict "
                                     "(sglang_preflight's answer)")
    old_resolution = evidence.resolution(old_resolution)
    new_resolution = evidence.resolution(new_resolution)
    prereqs = evidence.prereqs(prereqs)
    diffs, added, removed = differences(old_resolution, new_resolution)
    packages, others = package_changes(old_resolution, new_resolution, old_verdict, new_verdict)
    rows, prereq_failures = prerequisites(prereqs)
    prereq_failures += _driver_too_old(prereqs)
    report = {
        "from": old_verdict, "to": new_verdict,
        "from_version": old_verdict.get("sglang_version"),
        "to_version": new_verdict.get("sglang_version"),
        "refused_flags": refused_flags(new_resolution),
        "compared": _resolved(old_resolution) is not None and _resolved(new_resolution) is not None,
        "differences": diffs, "fields_added": added, "fields_removed": removed,
        "volatile": volatile(old_resolution, new_resolution),
        "rows_changed": rows_changed(old_verdict, new_verdict),
        "packages": packages, "packages_other_changes": others,
        "prerequisites": rows,
    }
    report["changes_needed"] = _changes_needed(report, new_verdict, prereq_failures)
    report["unknowns"] = unknowns(old_resolution, new_resolution, old_verdict, new_verdict,
                                  prereqs)
    # `ok` checked too: a candidate verdict that does not say ok (not one) is no evidence.
    report["verdict"] = ("changes needed" if report["changes_needed"] or new_verdict.get("failures")
                         else "unknown" if report["unknowns"] or not new_verdict.get("ok")
                         else "ready")
    report["lines"] = table(report)
    return report


def _site(site):
    if not site:
        return "default or asked"
    return f"{site.get('file')}:{site.get('line')} {site.get('function')}"


def _short(value, limit=48):
    text = "null" if value is None else str(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def table(report):
    """The plan (sglang_upgrade_report's answer) as lines for the play output, the verdict
    first: refused flags, rows, fields, packages, prerequisites, what to do, unknowns."""
    lines = [f"upgrade sglang {report['from_version']} -> {report['to_version']}: "
             f"{report['verdict'].upper()}"]
    lines += [f"  refused: {f['flag']}: {f['message']} (nearest: {', '.join(f['nearest']) or 'none'})"
              for f in report["refused_flags"]]
    lines += [f"  row {r['name']}: {r['from']} -> {r['to']}  ({_short(r['evidence'], 160)})"
              for r in report["rows_changed"]]
    if not report.get("compared", True):
        lines.append("  resolved fields not compared: SGLang did not resolve the release on both "
                     "sides (see the rows and what to do)")
    else:
        lines.append(f"  {len(report['differences'])} resolved fields differ "
                     f"({len(report['fields_added'])} new fields, "
                     f"{len(report['fields_removed'])} gone):")
    for d in report["differences"]:
        lines.append(f"    {d['field']}: {_short(d['from'])} -> {_short(d['to'])}")
        lines.append(f"        from {_site(d['from_site'])}; to {_site(d['to_site'])}")
    lines += [f"  package {p['name']}: {p['from']} -> {p['to']}" for p in report["packages"]]
    if report["packages_other_changes"]:
        lines.append(f"  and {report['packages_other_changes']} other packages change")
    lines += [f"  prerequisite {p['what']}: needs {p['needed']}, found {p['found'] or 'none here'}"
              for p in report["prerequisites"]]
    lines += [f"  to do: {c}" for c in report["changes_needed"]]
    lines += [f"  unknown: {u}" for u in report.get("unknowns") or []]
    return lines


def sglang_upgrade_summary(hosts, plans):
    """One line per host of a fleet's plans (hosts that made none say why), side by side.

    Args:
        hosts (list of str): the hosts that were to plan, in order.
        plans (list of dict): one upgrade report per host (sglang_upgrade_report's answer), empty
            for a host that made none.
    Returns:
        list of str: one line per host.
    """
    if not isinstance(plans, list) or len(plans) != len(hosts):
        raise AnsibleFilterError(f"plans: expected one per host ({len(hosts)}), got {plans!r:.80}")
    lines = []
    for host, report in zip(hosts, plans):
        if not report:
            lines.append(f"{host}: no plan (it failed before the plan; see its tasks above)")
            continue
        head = (f"{host}: sglang {report['from_version']} -> {report['to_version']}: "
                f"{report['verdict']}, {len(report['differences'])} resolved fields differ")
        first = (report["changes_needed"] or report.get("unknowns") or [])[:1]
        lines.append(head + (f"; first: {_short(first[0], 160)}" if first else ""))
    return lines


class FilterModule:
    def filters(self):
        return {"sglang_upgrade_report": own_errors(sglang_upgrade_report),
                "sglang_upgrade_summary": own_errors(sglang_upgrade_summary)}
