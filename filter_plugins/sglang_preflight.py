"""Predict what SGLang will resolve on this host, say why, and judge it against expectations.

Pure functions over the facts `sglang_facts` gathers and the release's rendered arguments;
unit-tested in tests/unit/test_sglang_preflight.py. Evidence (file:line) comes from the facts:
nothing SGLang can tell us about itself is written down here.
"""

import ipaddress
import os
import re
import sys

from ansible.errors import AnsibleFilterError

# Ansible loads each filter file on its own: make the sibling helper importable.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sglang_filter_errors import own_errors  # noqa: E402

LEVELS = ("required", "auto", "off")
EXPECT_KEYS = {"decode_cuda_graph", "piecewise_cuda_graph", "custom_all_reduce", "nccl_p2p",
               "speculative", "tp_size"}
SPEC_KEYS = {"algorithm", "num_steps", "eagle_topk", "num_draft_tokens"}
# nvidia-smi's codes for a path between two devices.
NVLINK = re.compile(r"^NV\d+$")
PCIE = {"PIX", "PXB", "PHB", "NODE", "SYS", "SOC"}


# ---- nvidia-smi topology ------------------------------------------------------------------
def _matrix(text):
    """Rows of a `nvidia-smi topo` matrix as {row label: [cells]}, with the column labels."""
    if not isinstance(text, str):
        raise AnsibleFilterError("nvidia_topology: expected the text nvidia-smi printed")
    header, rows = None, {}
    # On a terminal nvidia-smi underlines the header with ANSI escapes; pasted logs keep them.
    text = re.sub(r"\x1b\[[0-9;]*m", "", text)
    for raw in text.splitlines():
        line = raw.strip()
        if not line:
            if header and rows:
                break  # the legend follows the matrix
            continue
        tokens = line.split()
        if header is None:
            if tokens[0].startswith("GPU"):
                columns = []
                for token in tokens:
                    if token in ("CPU", "NUMA", "GPU", "Affinity", "ID") and columns:
                        break
                    columns.append(token)
                header = columns
            continue
        if re.match(r"^(GPU\d+|NIC\d+|mlx\S+)$", tokens[0]):
            rows[tokens[0]] = tokens[1:1 + len(header)]
        elif rows:
            break
    if header is None:
        raise AnsibleFilterError("nvidia_topology: no GPU0 header found in the topology text")
    return header, rows


def _pairs(text):
    header, rows = _matrix(text)
    gpus = [c for c in header if re.match(r"^GPU\d+$", c)]
    out = {}
    for row, cells in rows.items():
        if not row.startswith("GPU"):
            continue
        i = int(row[3:])
        for column, cell in zip(header, cells):
            if column.startswith("GPU") and int(column[3:]) > i:
                out[f"{i}-{int(column[3:])}"] = cell
    return len(gpus), out


def nvidia_topology(topo_text, p2p_text=None):
    """{"gpus": N, "links": {"0-1": "NV4"}, "p2p": {"0-1": "OK"}} from nvidia-smi's matrices."""
    count, links = _pairs(topo_text)
    result = {"gpus": count, "links": links}
    if p2p_text:
        _, p2p = _pairs(p2p_text)
        result["p2p"] = p2p
    return result


# ---- expectations -------------------------------------------------------------------------
def _check_expect(expect):
    expect = dict(expect or {})
    unknown = sorted(set(expect) - EXPECT_KEYS)
    if unknown:
        raise AnsibleFilterError(
            f"sglang_expect: unknown keys {unknown}; allowed: {sorted(EXPECT_KEYS)}")
    for key in ("decode_cuda_graph", "piecewise_cuda_graph", "custom_all_reduce", "nccl_p2p"):
        value = expect.get(key, "auto")
        if value not in LEVELS:
            raise AnsibleFilterError(
                f"sglang_expect.{key}: {value!r} is not one of {', '.join(LEVELS)}")
        expect[key] = value
    spec = expect.get("speculative")
    if spec is not None:
        if not isinstance(spec, dict) or set(spec) - SPEC_KEYS:
            raise AnsibleFilterError(
                f"sglang_expect.speculative: a mapping of {sorted(SPEC_KEYS)}, got {spec!r}")
    tp = expect.get("tp_size")
    if tp is not None and (isinstance(tp, bool) or not isinstance(tp, int) or tp < 1):
        raise AnsibleFilterError(f"sglang_expect.tp_size: a positive integer, got {tp!r}")
    return expect


def _truthy(value):
    return value is True or str(value).lower() in ("1", "true", "yes")


def _int(args, name, default=None):
    value = args.get(name, default)
    if value is None:
        return None
    if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
        raise AnsibleFilterError(f"--{name}: {value!r} is not an integer")
    try:
        return int(value)
    except (TypeError, ValueError, OverflowError) as exc:
        raise AnsibleFilterError(f"--{name}: {value!r} is not an integer") from exc


def _judge(level, on, what):
    """ok/warn/fail for a setting predicted `on` against the operator's level."""
    if level == "required" and not on:
        return "fail", f"{what} is required by sglang_expect but will be off"
    if level == "off" and on:
        return "fail", f"sglang_expect says {what} off but it will be on"
    if level == "auto" and not on:
        return "warn", ""
    return "ok", ""


def _check(setting, expected, predicted, status, reason):
    return {"setting": setting, "expected": expected, "predicted": predicted,
            "status": status, "reason": reason}


# ---- the verdict --------------------------------------------------------------------------
def _tp_gpus(facts, env, tp):
    """nvidia-smi indices of the GPUs the TP ranks use (first tp of CUDA_VISIBLE_DEVICES)."""
    gpus = facts.get("gpus") or {}
    indices = [d["index"] for d in gpus.get("devices") or []]
    visible = env.get("CUDA_VISIBLE_DEVICES")
    if visible is not None and str(visible).strip() != "":
        chosen = []
        for item in str(visible).split(","):
            item = item.strip()
            if item.isdigit() and int(item) in indices:
                chosen.append(int(item))
            elif item.isdigit():
                return None, f"CUDA_VISIBLE_DEVICES names GPU {item}, which nvidia-smi does not list"
            else:
                return None, f"CUDA_VISIBLE_DEVICES entry {item!r} is not an index this check reads"
        indices = chosen
    return indices, None


def local_tp(args):
    """Tensor-parallel ranks on this node: --tp-size over --nnodes."""
    tp, nnodes = _int(args, "tp-size", 1) or 1, _int(args, "nnodes", 1) or 1
    if tp % nnodes:
        raise AnsibleFilterError(
            f"tp-size {tp} is not a multiple of nnodes {nnodes} (the hosts of sglang_nodes_group): "
            "each node runs tp-size / nnodes ranks")
    return tp // nnodes


def _speculative(args):
    algo = args.get("speculative-algorithm")
    if not algo:
        return None
    steps = _int(args, "speculative-num-steps")
    topk = _int(args, "speculative-eagle-topk")
    drafts = _int(args, "speculative-num-draft-tokens")
    return {
        # SGLang resolves the NEXTN alias to EAGLE and reports EAGLE in /server_info.
        "algorithm": "EAGLE" if str(algo).upper() == "NEXTN" else str(algo).upper(),
        "num_steps": steps,
        "eagle_topk": topk,
        "num_draft_tokens": drafts,
    }


def _prefill_graph(facts, args, version):
    """(on, reason) for the piecewise / prefill CUDA graph."""
    bl = facts.get("piecewise_blacklist") or {}
    archs = (facts.get("model") or {}).get("architectures") or []
    if _truthy(args.get("disable-piecewise-cuda-graph")) or _truthy(args.get("disable-cuda-graph")):
        flag = "disable-piecewise-cuda-graph" if args.get("disable-piecewise-cuda-graph") else \
            "disable-cuda-graph"
        return False, f"--{flag} is set in the release"
    if not archs:
        return True, ("the model's architectures are unknown (no config.json found): "
                      "the architecture blacklist cannot be checked")
    if not bl.get("defined_in"):
        return True, (f"sglang {version} has no piecewise_cuda_graph_disabled_model_archs: "
                      "no architecture rule applies")
    hits = [a for a in archs if a in bl.get("archs", [])]
    where = f"sglang {version}, {bl['defined_in']}"
    if not hits:
        return True, f"{', '.join(archs)} is not in piecewise_cuda_graph_disabled_model_archs ({where})"
    if not bl.get("consulted"):
        return True, (f"{', '.join(hits)} is in piecewise_cuda_graph_disabled_model_archs ({where}) "
                      f"but the list is dead code in sglang {version}: nothing outside its "
                      "definition reads it, so it disables nothing")
    readers = "; ".join(bl.get("consulted_in") or [])
    return False, (f"{', '.join(hits)} is in piecewise_cuda_graph_disabled_model_archs ({where}), "
                   f"read by {readers}: the prefill graph will be disabled")


def _sibling_notes(facts, args):
    """Other silent rules beside the architecture rule whose flag the release sets."""
    notes = []
    for rule in (facts.get("piecewise_blacklist") or {}).get("sibling_rules") or []:
        cond = rule["condition"]
        if "piecewise_cuda_graph_disabled_model" in cond:
            continue
        match = re.fullmatch(r"self\.(\w+)(?: is not None)?", cond)
        if match and args.get(match.group(1).replace("_", "-")) not in (None, False, "", 0):
            notes.append(f"{cond} ({rule['where']}) holds for this release")
    return notes


def _loopback(host):
    host = str(host or "").strip("[]").lower()
    if host in ("localhost", "::1"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _exposure(args, api_key_set):
    host = args.get("host", "127.0.0.1")
    if _loopback(host):
        return _check("exposure", "loopback or key", f"bound to {host}", "ok",
                      "only clients on this host can reach it")
    if api_key_set:
        return _check("exposure", "loopback or key", f"bound to {host}", "ok",
                      "reachable from the network; every request needs the API key")
    return _check("exposure", "loopback or key", f"bound to {host}", "warn",
                  f"sglang_host {host} serves the network without an API key: set "
                  "sglang_api_key or bind sglang_host to 127.0.0.1")


def sglang_preflight(facts, args, env=None, expect=None, strict=False, args_check=None,
                     api_key_set=False):
    """{ok, checks: [{setting, expected, predicted, status, reason}], failures, warnings}.

    `args_check` is what sglang_args_check returned (the installed parser's verdict on the
    release's arguments), when it ran. `api_key_set` says whether the server requires a key.
    """
    if not isinstance(facts, dict) or not isinstance(args, dict):
        raise AnsibleFilterError("sglang_preflight: facts and args must be mappings")
    env = dict(env or {})
    expect = _check_expect(expect)
    version = facts.get("sglang_version") or "unknown"
    gpus = facts.get("gpus") or {}
    checks = []

    # tp size against the GPUs this release can see (one model over several nodes: the
    # expectation is on the total, the GPUs hold this node's share of the ranks)
    total = _int(args, "tp-size", 1) or 1
    tp = local_tp(args)
    per_node = "" if tp == total else f" ({tp} on this node)"
    tp_gpus, why = _tp_gpus(facts, env, tp) if gpus.get("present") else (None, None)
    if expect.get("tp_size") and expect["tp_size"] != total:
        checks.append(_check("tp_size", expect["tp_size"], total, "fail",
                             f"the release sets --tp-size {total}"))
    elif not gpus.get("present"):
        checks.append(_check("tp_size", expect.get("tp_size", total), total, "warn",
                             f"no GPU to check it against: {gpus.get('reason') or 'no GPU facts'}"))
    elif why:
        checks.append(_check("tp_size", total, total, "fail", why))
    elif tp > len(tp_gpus):
        checks.append(_check("tp_size", total, total, "fail",
                             f"--tp-size {total} needs {tp} GPUs{per_node}; this release sees "
                             f"{len(tp_gpus)} (CUDA_VISIBLE_DEVICES="
                             f"{env.get('CUDA_VISIBLE_DEVICES', 'unset')}): "
                             "lower tp-size or make more GPUs visible"))
    else:
        checks.append(_check("tp_size", expect.get("tp_size", total), total, "ok",
                             f"GPUs {tp_gpus[:tp]} of {gpus.get('count')}{per_node}"))

    # decode CUDA graph
    decode_on = not _truthy(args.get("disable-cuda-graph"))
    max_bs = args.get("cuda-graph-max-bs-decode", args.get("cuda-graph-max-bs"))
    status, why = _judge(expect["decode_cuda_graph"], decode_on, "the decode CUDA graph")
    reason = why or ("--disable-cuda-graph is set in the release" if not decode_on else
                     f"captured up to batch size {max_bs}" if max_bs else
                     f"captured up to sglang {version}'s default batch size")
    checks.append(_check("decode_cuda_graph", expect["decode_cuda_graph"],
                         "on" if decode_on else "off", status, reason))

    # piecewise / prefill CUDA graph
    prefill_on, why_prefill = _prefill_graph(facts, args, version)
    status, why = _judge(expect["piecewise_cuda_graph"], prefill_on, "the piecewise/prefill CUDA graph")
    notes = _sibling_notes(facts, args)
    reason = "; ".join(filter(None, [why, why_prefill] + (
        [f"other rules in the same function may disable it too: {'; '.join(notes)}"] if notes else [])))
    if notes and status == "ok" and prefill_on:
        status = "warn"
    checks.append(_check("piecewise_cuda_graph", expect["piecewise_cuda_graph"],
                         "on" if prefill_on else "off", status, reason))

    # topology: custom all-reduce and NCCL P2P between the TP GPUs
    checks += _topology_checks(facts, args, env, expect, tp, tp_gpus)

    # speculative decoding
    predicted = _speculative(args)
    wanted = expect.get("speculative")
    if wanted is not None or predicted:
        diffs = [f"{k}: expected {wanted[k]}, release has {(predicted or {}).get(k)}"
                 for k in sorted(wanted or {})
                 if str(wanted[k]).upper() != str((predicted or {}).get(k)).upper()]
        status = "fail" if diffs else "ok"
        reason = "; ".join(diffs) if diffs else (
            "NEXTN resolves to EAGLE" if predicted and
            str(args.get("speculative-algorithm")).upper() == "NEXTN" else "as rendered")
        checks.append(_check("speculative", wanted, predicted, status, reason))

    if args_check:
        checks.append(_flags_check(args_check, version))
    checks.append(_exposure(args, bool(api_key_set)))

    if strict:
        for check in checks:
            if check["status"] == "warn":
                check["status"] = "fail"
                check["reason"] += " (strict: warnings fail)"
    failures = [c for c in checks if c["status"] == "fail"]
    warnings = [c for c in checks if c["status"] == "warn"]
    return {"ok": not failures, "sglang_version": version, "checks": checks,
            "failures": [f"{c['setting']}: {c['reason']}" for c in failures],
            "warnings": [f"{c['setting']}: {c['reason']}" for c in warnings]}


def _flags_check(result, version):
    if not result.get("checked"):
        return _check("flags", "known", "unchecked", "warn",
                      f"the installed parser could not run: {result.get('reason')}")
    unknown = result.get("unknown") or []
    if not unknown:
        return _check("flags", "known", "known", "ok",
                      f"all known to sglang {version}'s parser ({result.get('known_count')} options)")
    parts = []
    for item in unknown:
        near = ", ".join(f"--{s}" for s in item.get("suggestions") or []) or "no close match"
        parts.append(f"--{item['name']} (nearest: {near})")
    return _check("flags", "known", "unknown", "fail",
                  f"sglang {version}'s parser does not know {'; '.join(parts)}: rename or remove "
                  "them in sglang_server_args or the profile")


def _topology_checks(facts, args, env, expect, tp, tp_gpus):
    gpus = facts.get("gpus") or {}
    car_on = not _truthy(args.get("disable-custom-all-reduce"))
    if tp < 2:
        return [_check("custom_all_reduce", expect["custom_all_reduce"], "unused", "ok",
                       "tp-size 1: no all-reduce")]
    if not gpus.get("present") or not gpus.get("topology_text"):
        reason = f"no topology to check: {gpus.get('reason') or 'nvidia-smi topo printed nothing'}"
        return [_check("custom_all_reduce", expect["custom_all_reduce"],
                       "on" if car_on else "off", "warn", reason),
                _check("nccl_p2p", expect["nccl_p2p"], "unknown", "warn", reason)]
    topo = nvidia_topology(gpus["topology_text"], gpus.get("p2p_text"))
    used = (tp_gpus or [])[:tp]
    pairs = [f"{a}-{b}" for i, a in enumerate(sorted(used)) for b in sorted(used)[i + 1:]]
    links = {p: topo["links"].get(p, "?") for p in pairs}
    p2p = {p: topo.get("p2p", {}).get(p) for p in pairs}
    nvlink = all(NVLINK.match(v) for v in links.values())
    no_peer = [p for p, v in p2p.items() if v is not None and v != "OK"]
    link_text = ", ".join(f"GPU{p.replace('-', '<->GPU')} {v}" for p, v in links.items())
    p2p_disabled = str(env.get("NCCL_P2P_DISABLE", facts.get("nccl_conf", {}).get(
        "NCCL_P2P_DISABLE", ""))).strip() == "1"
    checks = []

    # custom all-reduce
    p2p_check = _truthy(args.get("enable-p2p-check"))
    if not car_on:
        status, why = _judge(expect["custom_all_reduce"], False, "custom all-reduce")
        checks.append(_check("custom_all_reduce", expect["custom_all_reduce"], "off",
                             status or "ok", why or "--disable-custom-all-reduce is set"))
    elif no_peer and not p2p_check:
        checks.append(_check(
            "custom_all_reduce", expect["custom_all_reduce"], "crash", "fail",
            f"GPU pairs {', '.join(no_peer)} have no peer access (nvidia-smi topo -p2p r: "
            f"{', '.join(p2p[p] for p in no_peer)}) and custom all-reduce is on without "
            "--enable-p2p-check: SGLang assumes P2P and crashes (sglang#4814). Set "
            "enable-p2p-check: true (it then falls back) or disable-custom-all-reduce: true"))
    elif no_peer:
        status, why = _judge(expect["custom_all_reduce"], False, "custom all-reduce")
        checks.append(_check("custom_all_reduce", expect["custom_all_reduce"], "off", status,
                             why or "no peer access between the TP GPUs: --enable-p2p-check "
                             "makes SGLang fall back to NCCL"))
    elif not nvlink and len(used) > 2:
        status, why = _judge(expect["custom_all_reduce"], False, "custom all-reduce")
        checks.append(_check("custom_all_reduce", expect["custom_all_reduce"], "off", status,
                             why or f"{len(used)} GPUs joined only by PCIe ({link_text}): "
                             "SGLang keeps custom all-reduce for at most two PCIe GPUs"))
    else:
        status, why = _judge(expect["custom_all_reduce"], True, "custom all-reduce")
        checks.append(_check("custom_all_reduce", expect["custom_all_reduce"], "on", status,
                             why or f"{link_text}"))

    # NCCL peer-to-peer
    if p2p_disabled and nvlink:
        checks.append(_check("nccl_p2p", expect["nccl_p2p"], "off", "fail",
                             f"NCCL_P2P_DISABLE=1 while the TP GPUs are joined by NVLink "
                             f"({link_text}): all-reduce goes through host memory and leaves "
                             "NVLink idle. Remove NCCL_P2P_DISABLE from sglang_env / /etc/nccl.conf"))
    else:
        on = not p2p_disabled and not no_peer
        status, why = _judge(expect["nccl_p2p"], on, "NCCL P2P")
        reason = why or ("NCCL_P2P_DISABLE=1" if p2p_disabled else
                         f"no peer access on {', '.join(no_peer)}" if no_peer else link_text)
        checks.append(_check("nccl_p2p", expect["nccl_p2p"], "on" if on else "off", status,
                             reason))
    return checks


def sglang_preflight_table(verdict):
    """The verdict as a fixed-width table for the play output."""
    def cell(value):
        if isinstance(value, dict):  # speculative: "EAGLE 3/1/4" (steps/topk/draft tokens)
            return (f"{value.get('algorithm', '-')} {value.get('num_steps', '-')}/"
                    f"{value.get('eagle_topk', '-')}/{value.get('num_draft_tokens', '-')}")
        return str(value)

    rows = [("setting", "expected", "predicted", "status", "reason")]
    for c in verdict["checks"]:
        rows.append((c["setting"], cell(c["expected"]), cell(c["predicted"]), c["status"].upper(),
                     c["reason"]))
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    lines = ["  ".join(r[i].ljust(widths[i]) for i in range(4)) + "  " + r[4] for r in rows]
    head = f"preflight for sglang {verdict['sglang_version']}: " + (
        "OK" if verdict["ok"] else f"{len(verdict['failures'])} FAILED")
    return [head] + lines


class FilterModule:
    def filters(self):
        return {
            "nvidia_topology": own_errors(nvidia_topology),
            "sglang_preflight": own_errors(sglang_preflight),
            "sglang_expect_check": own_errors(_check_expect),
            "sglang_preflight_table": own_errors(sglang_preflight_table),
        }
