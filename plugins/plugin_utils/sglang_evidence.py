"""The shapes verdicts read evidence from, checked once: what sglang_resolve, sglang_facts and
sglang_host_prereqs return, as the filters (sglang_preflight, sglang_upgrade_report) read it.

A field of the wrong type is no evidence: it is dropped (None, or empty where the readers
iterate), so the verdict that needed it says `unknown` with the reason instead of raising
or reading it as a value. Used by the filters; unit-tested in tests/unit/test_fail_closed.py.
"""

# sglang_resolve's fields: the type each must have to count.
RESOLUTION_FIELDS = {"ran": bool, "reason": str, "sglang_version": str, "entry": str,
                     "resolved": dict, "asked": dict, "error": dict, "weights": dict,
                     "torch": dict, "packages": dict, "sandbox": dict, "stubbed": dict,
                     "known_flags": int, "elapsed_s": (int, float), "import_error": dict}
MISSING = object()
LISTS_OF_RECORDS = ("changes", "log", "unknown_flags")
STRINGS = ("volatile",)


def _typed(value, kind):
    if kind is int and isinstance(value, bool):
        return None
    return value if isinstance(value, kind) else None


def resolution(value):
    """sglang_resolve's answer with every field of the wrong type dropped; None stays None (the
    resolution was not asked). An `error` that is not a record is kept as one that says so
    (SGLang's answer could not be read), never as no error."""
    if value is None:
        return None
    if not isinstance(value, dict):
        return {"ran": False, "reason": f"the resolution's answer is not a record: {value!r:.80}"}
    out = {k: _typed(value.get(k), kind) for k, kind in RESOLUTION_FIELDS.items()}
    for name in LISTS_OF_RECORDS:
        items = value.get(name)
        out[name] = [i for i in items if isinstance(i, dict)] if isinstance(items, list) else []
    for name in STRINGS:
        items = value.get(name)
        out[name] = [str(i) for i in items] if isinstance(items, list) else None
    raw = value.get("error", MISSING)
    if raw is MISSING:
        out["error"] = {"type": "unreadable",
                        "message": "the answer does not say whether SGLang raised"}
    elif raw is not None and out["error"] is None:
        out["error"] = {"type": "unreadable", "message": f"an error that is not a record: {raw!r:.80}"}
    if out["ran"] is None:
        out["ran"] = False
    return out


def gpus(value):
    """sglang_facts' `gpus` with the device list and texts of the right types."""
    if not isinstance(value, dict):
        return {"present": False, "reason": "no GPU facts (not a record)"}
    out = dict(value)
    out["present"] = value.get("present") is True
    devices = value.get("devices")
    out["devices"] = [d for d in devices if isinstance(d, dict)] if isinstance(devices, list) else []
    for name in ("topology_text", "p2p_text", "reason"):
        out[name] = value.get(name) if isinstance(value.get(name), str) else None
    for name in ("links", "p2p"):
        if name in value and not isinstance(value[name], dict):
            out.pop(name)
    return out


def prereqs(value):
    """sglang_host_prereqs' answer: {facts, failures, packages} with records where records must
    be; None when it is not a record (not read)."""
    if not isinstance(value, dict) or not isinstance(value.get("facts"), dict):
        return None
    packages = value.get("packages") if isinstance(value.get("packages"), dict) else {}
    failures = value.get("failures") if isinstance(value.get("failures"), list) else []
    return {"facts": value["facts"], "packages": packages, "failures": [str(f) for f in failures]}


def runtime_rules(value):
    """sglang_facts' `custom_all_reduce_rules`: {rule: {where, code, ...}} with only records
    that cite a place (`where` a string); None when it is not a record or names no gate (the
    sources were not read, so no run-time rule is known to hold or not)."""
    if not isinstance(value, dict) or not isinstance(value.get("gate"), dict):
        return None
    out = {name: rule for name, rule in value.items()
           if isinstance(rule, dict) and isinstance(rule.get("where"), str)}
    sizes = (out.get("world_sizes") or {}).get("sizes")
    # Sizes of a group (world size 1 returns before this rule): a non-empty list of ints >= 2.
    if "world_sizes" in out and not (isinstance(sizes, list) and sizes and all(
            isinstance(s, int) and not isinstance(s, bool) and s >= 2 for s in sizes)):
        return None  # the rule without readable sizes decides nothing
    return out if "gate" in out else None
