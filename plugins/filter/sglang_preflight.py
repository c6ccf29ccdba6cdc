"""Predict what SGLang will resolve on this host, say why, and judge it against expectations.

Pure functions over the facts `sglang_facts` gathers and the release's rendered arguments;
unit-tested in tests/unit/test_sglang_preflight.py. Evidence (file:line) comes from the facts:
nothing SGLang can tell us about itself is written down here.
"""

import ipaddress
import json
import re

from ansible.errors import AnsibleFilterError

from ansible_collections.sglang.deploy.plugins.module_utils.sglang_effective import effective_backend
from ansible_collections.sglang.deploy.plugins.plugin_utils.sglang_effective import sglang_effective
from ansible_collections.sglang.deploy.plugins.plugin_utils.sglang_expect import check_expect, speculative_diffs
from ansible_collections.sglang.deploy.plugins.module_utils.sglang_gpus import check_gpus
from ansible_collections.sglang.deploy.plugins.plugin_utils.sglang_filter_errors import own_errors
from ansible_collections.sglang.deploy.plugins.plugin_utils.sglang_memory import memory
from ansible_collections.sglang.deploy.plugins.plugin_utils import sglang_evidence as evidence
from ansible_collections.sglang.deploy.plugins.plugin_utils.sglang_tp import local_tp, tp_gpus
from ansible_collections.sglang.deploy.plugins.plugin_utils.sglang_values import int_arg, truthy

MODEL_CONFIG = "sglang/srt/configs/model_config.py"
CHANGE_KEYS = ("field", "asked", "resolved", "file", "line", "function")
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
        _unused, p2p = _pairs(p2p_text)
        result["p2p"] = p2p
    return result


def _judge(level, on, what):
    """ok/warn/fail for a setting predicted `on` against the operator's level; `unknown` when
    it could not be predicted (no evidence is never ok)."""
    if on is None:
        return "unknown", f"{what} could not be predicted" + (
            f" (sglang_expect: {level})" if level != "auto" else "")
    if level == "required" and not on:
        return "fail", f"{what} is required by sglang_expect but will be off"
    if level == "off" and on:
        return "fail", f"sglang_expect says {what} off but it will be on"
    if level == "auto" and not on:
        return "warn", ""
    return "ok", ""


def _row(name, expect, predicted, status, evidence, **extra):
    return {"name": name, "expect": expect, "predicted": predicted, "status": status,
            "evidence": evidence, **extra}


def _onoff(value):
    return "unknown" if value is None else ("on" if value else "off")


def _architectures(facts):
    archs = (facts.get("model") or {}).get("architectures")
    if archs is None:
        return []
    if not isinstance(archs, list) or not all(isinstance(a, str) for a in archs):
        raise AnsibleFilterError(
            f"the model's config.json: architectures must be a list of names, got {archs!r}")
    return archs


# ---- what SGLang resolved, or what the sources let us read --------------------------------
def _site(change):
    where = f"{change.get('file')}:{change.get('line')}" if change.get("file") else "no write traced"
    return f"{where} {change.get('function') or ''}".strip()


def _changed(resolution, *fields):
    """The traced changes of these fields (dotted names), as evidence text."""
    out = []
    for change in resolution.get("changes") or []:
        if change.get("field") in fields:
            out.append(f"{change['field']} {change.get('asked')!r} -> {change.get('resolved')!r} "
                       f"({_site(change)})")
    return out


def _logged(resolution, *words):
    """SGLang's own log lines that mention any of `words`, with file:line."""
    out = []
    for record in resolution.get("log") or []:
        message = record.get("message") or ""
        if any(w.lower() in message.lower() for w in words):
            out.append(f"SGLang logged \"{message}\" ({record.get('file')}:{record.get('line')})")
    return out


def resolved_view(resolved):
    """The rows' values from SGLang's resolved fields (any 0.5.x shape)."""
    effective = sglang_effective(resolved)
    decode, prefill = effective.get("decode_cuda_graph"), effective.get("prefill_cuda_graph")
    disabled = resolved.get("disable_custom_all_reduce")
    return {
        "decode_cuda_graph": None if decode is None else decode == "on",
        "prefill_cuda_graph": None if prefill is None else prefill == "on",
        "speculative": effective.get("speculative"),
        "tp_size": resolved.get("tp_size"),
        "max_running_requests": resolved.get("max_running_requests"),
        "attention_backend": resolved.get("attention_backend"),
        "cuda_graph_max_bs_decode": effective.get("decode_max_bs"),
        "custom_all_reduce": None if not isinstance(disabled, bool) else not disabled,
    }


def _graph_config(args):
    config = args.get("cuda-graph-config")
    if isinstance(config, str):
        try:
            config = json.loads(config)
        except ValueError:
            config = None
    return config if isinstance(config, dict) else {}


def _phase_off(args, phase):
    """The release's own switches that turn a phase's graph off (any 0.5.x spelling)."""
    flags = ["disable-cuda-graph", f"disable-{phase}-cuda-graph"]
    if phase == "prefill":
        flags.append("disable-piecewise-cuda-graph")
    for flag in flags:
        if truthy(args.get(flag)):
            return f"--{flag} is set in the release"
    if str(args.get(f"cuda-graph-backend-{phase}", "")).lower() == "disabled":
        return f"--cuda-graph-backend-{phase} disabled is set in the release"
    backend = (_graph_config(args).get(phase) or {}).get("backend")
    if str(backend).lower() == "disabled":
        return f"--cuda-graph-config sets {phase}.backend disabled"
    return None


def source_view(args):
    """What the arguments alone say (SGLang did not resolve): None where only SGLang knows."""
    decode_off = _phase_off(args, "decode")
    prefill_off = _phase_off(args, "prefill")
    algo = args.get("speculative-algorithm")
    spec = None
    if algo:
        spec = {"algorithm": str(algo).upper(), "num_steps": int_arg(args, "speculative-num-steps"),
                "eagle_topk": int_arg(args, "speculative-eagle-topk"),
                "num_draft_tokens": int_arg(args, "speculative-num-draft-tokens")}
    return {
        # Off where a switch says so; otherwise SGLang decides (other rules may turn it off).
        "decode_cuda_graph": False if decode_off else None,
        "prefill_cuda_graph": False if prefill_off else None,
        "speculative": spec,
        "tp_size": int_arg(args, "tp-size", 1) or 1,
        "max_running_requests": int_arg(args, "max-running-requests"),
        "attention_backend": args.get("attention-backend"),
        "cuda_graph_max_bs_decode": int_arg(args, "cuda-graph-max-bs-decode",
                                            args.get("cuda-graph-max-bs")),
        # Off where the switch says so; otherwise SGLang's resolution decides.
        "custom_all_reduce": False if truthy(args.get("disable-custom-all-reduce")) else None,
    }


# ---- the verdict --------------------------------------------------------------------------
class Verdict:
    """One run of the checks: the inputs, and one method per row."""

    def __init__(self, facts, args, env, expect, resolution, import_must_work):
        self.facts, self.args, self.env, self.expect = facts, args, env, expect
        self.version = facts.get("sglang_version") or "unknown"
        self.gpus = facts.get("gpus") or {}
        self.archs = _architectures(facts)
        self.resolution = resolution if isinstance(resolution, dict) else {}
        self.error = self.resolution.get("error") if self.resolution.get("ran") else None
        self.by_sglang = bool(self.resolution.get("ran")) and not self.error and \
            isinstance(self.resolution.get("resolved"), dict)
        if self.resolution.get("sglang_version"):
            self.version = self.resolution["sglang_version"]
        self.view = resolved_view(self.resolution["resolved"]) if self.by_sglang \
            else source_view(args)
        self.import_must_work = import_must_work
        self.total_tp = self.view["tp_size"] or int_arg(args, "tp-size", 1) or 1
        self.tp = local_tp({**args, "tp-size": self.total_tp})
        self.tp_gpus, self.tp_why = tp_gpus(facts, env, self.tp) if self.gpus.get("present") \
            else (None, None)

    @property
    def how(self):
        if self.by_sglang:
            return f"resolved by sglang {self.version}"
        return "read from the arguments (SGLang did not resolve)"

    def resolution_row(self):
        res = self.resolution
        if self.by_sglang:
            sandbox = (res.get("sandbox") or {}).get("how") or "unsandboxed"
            stubbed = "; ".join(f"{name} replaced by an inert module ({why[:120]})"
                                for name, why in (res.get("stubbed") or {}).items())
            return _row("resolution", "sglang", "sglang", "ok",
                        f"{res.get('entry')} in {res.get('elapsed_s')} s, {sandbox}"
                        + (f"; no NVIDIA driver here: {stubbed}" if stubbed else ""))
        if self.error:
            err = self.error
            return _row("resolution", "sglang", "startup error", "fail",
                        f"SGLang raised {err.get('type')} at {err.get('file')}:{err.get('line')} "
                        f"({err.get('function')}) while it {err.get('stage') or 'resolve'}d "
                        f"the release: {err.get('message')}. The server would not start: change "
                        "the arguments it names (sglang_server_args or the profile)")
        reason = res.get("reason") or "sglang_resolve did not run"
        if self.import_must_work and (res.get("import_error") or "could not be imported" in reason):
            return _row("resolution", "sglang", "import error", "fail",
                        f"{reason}: the server would fail the same way; repair the ml-env "
                        "(sglang_version, sglang_pip_extra_packages)")
        return _row("resolution", "sglang", "source", "unknown",
                    f"SGLang did not resolve the release ({reason}); predictions below come "
                    "from the arguments and the sources, and rules only SGLang can evaluate "
                    "are marked unknown")

    def tp_row(self):
        total, expect = self.total_tp, self.expect.get("tp_size")
        if self.by_sglang and not isinstance(self.view["tp_size"], int):
            return _row("tp_size", expect or total, "unknown", "unknown",
                        "SGLang's resolved record has no tp_size")
        per_node = "" if self.tp == total else f" ({self.tp} on this node)"
        if expect and expect != total:
            return _row("tp_size", expect, total, "fail", f"the release resolves to tp size {total}")
        if not self.gpus.get("present"):
            return _row("tp_size", expect or total, total, "unknown",
                        f"no GPU to check it against: {self.gpus.get('reason') or 'no GPU facts'}")
        if self.tp_why:
            return _row("tp_size", total, total, "fail", self.tp_why)
        if self.tp > len(self.tp_gpus):
            return _row("tp_size", total, total, "fail",
                        f"--tp-size {total} needs {self.tp} GPUs{per_node}; this release sees "
                        f"{len(self.tp_gpus)} (CUDA_VISIBLE_DEVICES="
                        f"{self.env.get('CUDA_VISIBLE_DEVICES', 'unset')}): "
                        "lower tp-size or make more GPUs visible")
        return _row("tp_size", expect or total, total, "ok",
                    f"GPUs {self.tp_gpus[:self.tp]} of {self.gpus.get('count')}{per_node}")

    def memory_row(self):
        """The weights per GPU (tp x pp ranks) against the GPU and mem_fraction_static."""
        resolved = self.resolution["resolved"] if self.by_sglang else {}
        pp = resolved.get("pp_size") if self.by_sglang else int_arg(self.args, "pp-size", 1)
        fraction = resolved.get("mem_fraction_static") if self.by_sglang \
            else self.args.get("mem-fraction-static")
        used = self.tp_gpus[:self.tp] if self.tp_gpus else None
        weights = self.resolution.get("weights") if self.by_sglang else None
        predicted, status, evidence = memory(self.facts, weights, self.total_tp, pp, used,
                                             fraction)
        return _row("memory", "fits", predicted, status, evidence)

    def decode_row(self):
        on, level = self.view["decode_cuda_graph"], self.expect["decode_cuda_graph"]
        status, why = _judge(level, on, "the decode CUDA graph")
        max_bs = self.view["cuda_graph_max_bs_decode"]
        if self.by_sglang:
            evidence = _changed(self.resolution, "cuda_graph_config.decode.backend",
                                "cuda_graph_config.decode.max_bs", "disable_cuda_graph",
                                "cuda_graph_max_bs") + _logged(self.resolution, "decode cuda graph")
            detail = (f"{self.how}: decode graph {_onoff(on)}, max batch size {max_bs}"
                      + (f"; {'; '.join(evidence)}" if evidence else ""))
        else:
            off = _phase_off(self.args, "decode")
            detail = off or ("no switch in the release turns it off; whether SGLang's other "
                             "rules do is decided by its resolution, which did not run here")
        return _row("decode_cuda_graph", level, _onoff(on), status,
                    "; ".join(filter(None, [why, detail])))

    def prefill_row(self):
        on, level = self.view["prefill_cuda_graph"], self.expect["prefill_cuda_graph"]
        status, why = _judge(level, on, "the prefill (piecewise) CUDA graph")
        arch = self._arch_evidence()
        if self.by_sglang:
            evidence = _changed(self.resolution, "cuda_graph_config.prefill.backend",
                                "disable_piecewise_cuda_graph", "enable_piecewise_cuda_graph") \
                + _logged(self.resolution, "prefill cuda graph", "piecewise cuda graph",
                          "breakable cuda graph")
            backend = effective_backend(self.resolution["resolved"], "prefill")
            detail = (f"{self.how}: prefill graph {_onoff(on)}"
                      + (f" (backend {backend})" if backend else "")
                      + (f"; {'; '.join(evidence)}" if evidence else "")
                      + (f"; source evidence: {arch}" if arch else ""))
        else:
            off = _phase_off(self.args, "prefill")
            if off:
                detail = off
            else:
                on, detail = self._prefill_from_source(arch)
                status, why = _judge(level, on, "the prefill (piecewise) CUDA graph")
        return _row("prefill_cuda_graph", level, _onoff(on), status,
                    "; ".join(filter(None, [why, detail])))

    def _arch_evidence(self):
        bl = self.facts.get("piecewise_blacklist") or {}
        if not bl.get("defined_in") or not self.archs:
            return ""
        hits = [a for a in self.archs if a in bl.get("archs", [])]
        where = f"sglang {self.version}, {bl['defined_in']}"
        if not hits:
            return f"{', '.join(self.archs)} is not in piecewise_cuda_graph_disabled_model_archs ({where})"
        if not bl.get("consulted"):
            return (f"{', '.join(hits)} is in piecewise_cuda_graph_disabled_model_archs ({where}) "
                    f"but the list is dead code in sglang {self.version}: nothing outside its "
                    "definition reads it")
        return (f"{', '.join(hits)} is in piecewise_cuda_graph_disabled_model_archs ({where}), "
                f"read by {'; '.join(bl.get('consulted_in') or [])}")

    def _prefill_from_source(self, arch):
        """(on or None, evidence) from the sources alone: only a consulted hit is certain."""
        bl = self.facts.get("piecewise_blacklist") or {}
        if not self.archs:
            return None, ("could not read: the model's architectures are unknown (no "
                          "config.json found), so the architecture list cannot be checked")
        if not bl.get("defined_in"):
            return None, (f"could not read: no piecewise_cuda_graph_disabled_model_archs found "
                          f"in sglang {self.version}'s {MODEL_CONFIG} (renamed, moved or built "
                          "dynamically); only SGLang's resolution can say")
        rules = [f"{r['condition']} ({r['where']})" for r in bl.get("sibling_rules") or []
                 if "piecewise_cuda_graph_disabled_model" not in r["condition"]]
        unread = (f"; rules beside it that only SGLang can evaluate: {'; '.join(rules)}"
                  if rules else "")
        if bl.get("consulted") and any(a in bl.get("archs", []) for a in self.archs):
            return False, f"{arch}: the prefill graph will be disabled"
        return None, (f"could not read every rule: {arch}; whether other rules (multimodal "
                      f"models, backends, parallelism) disable it is decided by SGLang's "
                      f"resolution{unread}")

    def speculative_row(self):
        predicted, wanted = self.view["speculative"], self.expect.get("speculative")
        asked = self.args.get("speculative-algorithm")
        if wanted is None and not predicted and not (asked and self.by_sglang):
            return None
        malformed = self._malformed_speculative(predicted, asked)
        if malformed:
            return _row("speculative", wanted, predicted or "unknown", "unknown", malformed)
        diffs = speculative_diffs(wanted, predicted, "resolved" if self.by_sglang else "release has")
        if self.by_sglang:
            detail = "; ".join(_changed(self.resolution, "speculative_algorithm",
                                        "speculative_num_steps", "speculative_eagle_topk",
                                        "speculative_num_draft_tokens")) or self.how
            return _row("speculative", wanted, predicted, "fail" if diffs else "ok",
                        "; ".join(diffs) or detail)
        return self._unresolved_speculative_row(wanted, predicted, diffs)

    def _malformed_speculative(self, predicted, asked):
        """Why SGLang's resolved speculative settings are no evidence (None when they are)."""
        if not self.by_sglang:
            return None
        if not predicted or not isinstance(
                self.resolution["resolved"].get("speculative_algorithm"), str):
            return (f"the release asks speculative-algorithm {asked}; SGLang's resolved record "
                    "names none")
        counts = {k: predicted.get(k) for k in ("num_steps", "eagle_topk", "num_draft_tokens")}
        wrong = [k for k, v in counts.items()
                 if (v is not None or k == "num_steps") and not _at_least_one(v)]
        if wrong:
            return f"SGLang's resolved record has no count for {', '.join(wrong)}"
        return None

    @staticmethod
    def _unresolved_speculative_row(wanted, predicted, diffs):
        # Unresolved, an algorithm may be an alias SGLang maps (NEXTN is EAGLE in 0.5.x):
        # only SGLang can say, so a different name is unknown, not wrong.
        named = [d for d in diffs if d.startswith("algorithm:")]
        wrong = [d for d in diffs if d not in named]
        if wrong:
            return _row("speculative", wanted, predicted, "fail", "; ".join(wrong))
        if named:
            return _row("speculative", wanted, predicted, "unknown",
                        f"{named[0]}: could not resolve the name here (SGLang maps aliases when "
                        "it resolves); verification checks what the server reports")
        return _row("speculative", wanted, predicted, "unknown",
                    "as rendered; SGLang did not resolve it here (verification checks what the "
                    "server reports)")

    def value_row(self, name, flag, what):
        """max_running_requests / attention_backend: the resolved value and who set it."""
        value, wanted = self.view[name], self.expect.get(name)
        if wanted is not None and self.by_sglang and value != wanted:
            return _row(name, wanted, value, "fail",
                        f"sglang_expect.{name} is {wanted!r}, SGLang resolves {value!r}: set "
                        f"{flag} in sglang_server_args or change the expectation; "
                        + "; ".join(_changed(self.resolution, name)))
        if self.by_sglang:
            kind = int if name == "max_running_requests" else str
            if not (_at_least_one(value) if kind is int else isinstance(value, str)):
                return _row(name, wanted, "unknown", "unknown",
                            f"SGLang's resolved record has no {name} ({kind.__name__})")
            changed = _changed(self.resolution, name)
            detail = "; ".join(changed) if changed else f"{what} as asked ({self.how})"
            return _row(name, wanted, value, "ok", detail)
        status = "warn" if wanted is not None and value is not None and value != wanted \
            else "unknown"
        return _row(name, wanted, value if value is not None else "unknown", status,
                    f"{flag} {value} asked; SGLang did not resolve it here" if value is not None
                    else f"{flag} unset: SGLang decides at start, and did not resolve here")

    def flags_row(self, args_check):
        unknown, counted = None, None
        if self.resolution.get("known_flags") and (self.by_sglang or self.error):
            unknown, counted = self.resolution.get("unknown_flags") or [], self.resolution["known_flags"]
        elif args_check and args_check.get("checked"):
            unknown, counted = args_check.get("unknown") or [], args_check.get("known_count")
        elif args_check:
            return _row("flags", "known", "unchecked", "unknown",
                        f"the installed parser could not run: {args_check.get('reason')}")
        else:
            return None
        if not unknown:
            return _row("flags", "known", "known", "ok",
                        f"all known to sglang {self.version}'s parser ({counted} options)")
        parts = []
        for item in unknown:
            near = ", ".join(f"--{s}" for s in item.get("suggestions") or []) or "no close match"
            parts.append(f"--{item['name']} (nearest: {near})")
        return _row("flags", "known", "unknown", "fail",
                    f"sglang {self.version}'s parser does not know {'; '.join(parts)}: rename or "
                    "remove them in sglang_server_args or the profile")


def _at_least_one(value):
    """A whole number of at least 1 (not a bool)."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


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
        return _row("exposure", "loopback or key", f"bound to {host}", "ok",
                    "only clients on this host can reach it")
    if api_key_set:
        return _row("exposure", "loopback or key", f"bound to {host}", "ok",
                    "reachable from the network; every request needs the API key")
    return _row("exposure", "loopback or key", f"bound to {host}", "warn",
                f"sglang_host {host} serves the network without an API key: set "
                "sglang_api_key or bind sglang_host to 127.0.0.1")


def sglang_preflight(facts, args, env=None, expect=None, strict=False, resolution=None,
                     api_key_set=False, args_check=None, import_must_work=False, gpus=None):
    """The verdict: {sglang_version, resolved_by, startup_error, resolved, changes, rows,
    verdict, ok, failures, warnings, unknowns}; rows are {name, expect, predicted, status,
    evidence}, a row's status one of ok, warn, fail, unknown.

    Fail closed: a row is ok or warn only from evidence in this report; a check whose evidence
    is missing (no GPU facts, no resolution, weights that cannot be read) is `unknown` with the
    reason. `verdict` is `fail` when a row fails, else `unknown` when a row has no evidence,
    else `ok`; `ok` is `verdict == "ok"`. A deploy refuses `failures` (and, strict, every
    warning and unknown); the live server's verification proves what stayed unknown here.

    `resolution` is what sglang_resolve returned: when SGLang resolved the release, every row
    comes from its resolved values, with the traced changes and its log lines as evidence;
    otherwise from the arguments and the sources (`facts`), and what only SGLang can decide is
    "unknown". `args_check` (sglang_args_check) is the flag check when resolution could not
    run. `import_must_work`: the release runs sglang.launch_server, so an ml-env that cannot
    import sglang fails (the server would fail the same way). `gpus` (sglang_gpus) describes
    GPUs that stand in for the host's: a what-if, or a test host.

    Args:
        facts (dict): what sglang_facts read on the host (SGLang's sources, the model, the GPUs,
            NCCL).
        args (dict): the server arguments (SGLang's option names without --) the release runs with.
        env (dict): the server's environment variables.
        expect (dict): the operator's expectations (sglang_expect merged over the profile's).
        strict (bool): refuse every warning and unknown too, not only failures.
        resolution (dict): what sglang_resolve returned (SGLang's own resolution), none when it did
            not run.
        api_key_set (bool): whether the server gets an API key (its row, without the key).
        args_check (dict): what sglang_args_check returned, the flag check when resolution could
            not run.
        import_must_work (bool): the release runs sglang.launch_server: an ml-env that cannot
            import sglang fails.
        gpus (dict): sglang_gpus, GPUs that stand in for the host's ({count, name, memory_mib,
            compute_capability, link}); empty: the host's.
    Returns:
        dict: the verdict, {sglang_version, resolved_by, rows, verdict, ok, failures, warnings,
            unknowns, ...}.
    """
    if not isinstance(facts, dict) or not isinstance(args, dict):
        raise AnsibleFilterError("sglang_preflight: facts and args must be mappings")
    env = dict(env or {})
    expect = check_expect(expect)
    facts = {**facts, "gpus": evidence.gpus(described_gpus(gpus) if gpus else facts.get("gpus"))}
    v = Verdict(facts, args, env, expect, evidence.resolution(resolution), import_must_work)
    rows = [v.resolution_row(), v.tp_row(), v.memory_row(), v.decode_row(), v.prefill_row(),
            *_topology_checks(facts, args, env, expect, v.tp, v.tp_gpus,
                              v.view["custom_all_reduce"]),
            v.speculative_row(),
            v.value_row("max_running_requests", "--max-running-requests", "the cap"),
            v.value_row("attention_backend", "--attention-backend", "the backend"),
            v.flags_row(args_check), _exposure(args, bool(api_key_set))]
    rows = _strict([r for r in rows if r]) if strict else [r for r in rows if r]
    return _verdict(v, rows)


def _strict(rows):
    """Every warning and every row without evidence a failure (sglang_expect_strict)."""
    for row in rows:
        if row["status"] in ("warn", "unknown"):
            row["evidence"] += f" (strict: {row['status']} fails)"
            row["status"] = "fail"
    return rows


# What a row's prediction says of custom all-reduce at run time (unknown: None).
RUNTIME_VALUES = {"on": True, "crash": True, "off": False, "unused": False}


def _resolved(v):
    """What SGLang's resolution produced, one value per field (the sources' reading when it did
    not run); after SGLang raised nothing was resolved: every field null."""
    return dict.fromkeys(v.view) if v.error else dict(v.view)


def _runtime(v, rows):
    """What will differ from `resolved` at run time, each with the rule that decides it and
    where the installed SGLang has it: custom all-reduce (no all-reduce at tp 1, sizes it does
    not support, more than two PCIe-only GPUs, no peer access)."""
    row = next((r for r in rows if r["name"] == "custom_all_reduce"), None)
    if v.error or row is None:
        return {}
    value = RUNTIME_VALUES.get(row["predicted"])
    return {"custom_all_reduce": {
        "value": value, "resolved": v.view["custom_all_reduce"],
        "differs": None if value is None or v.view["custom_all_reduce"] is None
        else value != v.view["custom_all_reduce"],
        "rule": row["evidence"], "where": row.get("where")}}


def _with_status(rows, status):
    """The rows of one status; `unknown` also takes any status that is not a verdict."""
    if status == "unknown":
        return [r for r in rows if r["status"] not in ("ok", "warn", "fail")]
    return [r for r in rows if r["status"] == status]


def _verdict(v, rows):
    """The filter's answer from the checks (`v`) and their rows."""
    failures, warnings, unknowns = (_with_status(rows, s) for s in ("fail", "warn", "unknown"))
    error = v.error
    verdict = "fail" if failures else "unknown" if unknowns else "ok"
    return {
        "sglang_version": v.version,
        "resolved_by": "sglang" if v.by_sglang else "source",
        "startup_error": ({k: error.get(k) for k in ("type", "message", "file", "line")}
                          if error else None),
        "resolved": _resolved(v),
        "runtime": _runtime(v, rows),
        "changes": [{k: c.get(k) for k in CHANGE_KEYS}
                    for c in (v.resolution.get("changes") or []) if v.by_sglang],
        "rows": rows,
        "verdict": verdict,
        "ok": verdict == "ok",
        "failures": [f"{r['name']}: {r['evidence']}" for r in failures],
        "warnings": [f"{r['name']}: {r['evidence']}" for r in warnings],
        "unknowns": [f"{r['name']}: {r['evidence']}" for r in unknowns],
    }


def _topology(gpus):
    """{links, p2p} from nvidia-smi's matrices, or from a description's `links` (what-if)."""
    if gpus.get("topology_text"):
        return nvidia_topology(gpus["topology_text"], gpus.get("p2p_text"))
    if isinstance(gpus.get("links"), dict):
        return {"links": gpus["links"], "p2p": gpus.get("p2p") or {}}
    return None


def _topology_checks(facts, args, env, expect, tp, tp_gpus, car_on):
    """Custom all-reduce (as SGLang resolved it, then its run-time rules over these links) and
    NCCL P2P."""
    gpus = facts.get("gpus") or {}
    rules = evidence.runtime_rules(facts.get("custom_all_reduce_rules"))
    if tp < 2:
        where = (rules or {}).get("single_gpu", {}).get("where")
        return [_row("custom_all_reduce", expect["custom_all_reduce"], "unused", "ok",
                     "tp-size 1: no all-reduce" + (f" (SGLang: {where})" if where else ""),
                     where=where)]
    topo = _topology(gpus) if gpus.get("present") else None
    if topo is None:
        reason = f"no topology to check: {gpus.get('reason') or 'nvidia-smi topo printed nothing'}"
        return [_row("custom_all_reduce", expect["custom_all_reduce"], "unknown", "unknown",
                     reason),
                _row("nccl_p2p", expect["nccl_p2p"], "unknown", "unknown", reason)]
    paths = _tp_paths(topo, (tp_gpus or [])[:tp], facts, env)
    return [_custom_all_reduce_row(expect["custom_all_reduce"],
                                   _car_decision(tp, paths, car_on,
                                                 truthy(args.get("enable-p2p-check")), rules)),
            _nccl_p2p_row(expect["nccl_p2p"], paths)]


def _tp_paths(topo, used, facts, env):
    """What joins the TP GPUs: {used, links, p2p, nvlink, no_peer, link_text, p2p_disabled}."""
    pairs = [f"{a}-{b}" for i, a in enumerate(sorted(used)) for b in sorted(used)[i + 1:]]
    links = {p: topo["links"].get(p, "?") for p in pairs}
    p2p = {p: topo.get("p2p", {}).get(p) for p in pairs}
    disabled = env.get("NCCL_P2P_DISABLE", facts.get("nccl_conf", {}).get("NCCL_P2P_DISABLE", ""))
    return {
        "used": used, "links": links, "p2p": p2p,
        "nvlink": all(NVLINK.match(v) for v in links.values()),
        "no_peer": [p for p, v in p2p.items() if v is not None and v != "OK"],
        "link_text": ", ".join(f"GPU{p.replace('-', '<->GPU')} {v}" for p, v in links.items()),
        "p2p_disabled": str(disabled).strip() == "1",
    }


def _car_decision(tp, paths, car_on, p2p_check, rules):
    """(predicted, reason, where): custom all-reduce at run time, SGLang's rules in SGLang's
    order (can_use_custom_all_reduce_with_nvlink), each cited from the installed sources."""
    if car_on is False:
        return "off", "--disable-custom-all-reduce (SGLang's resolution)", None
    if rules is None:
        return "unknown", ("the run-time rules (can_use_custom_all_reduce_with_nvlink) were not "
                           "read from the installed sources"), None
    sizes = rules.get("world_sizes")
    if sizes and tp not in sizes["sizes"]:
        return "off", (f"tp {tp} is not a size custom all-reduce supports "
                       f"({sizes['sizes']}, {sizes.get('sizes_defined_in')})"), sizes["where"]
    if "pcie_only" in rules and not paths["nvlink"] and len(paths["used"]) > 2:
        return "off", (f"{len(paths['used'])} GPUs joined only by PCIe ({paths['link_text']}): "
                       "SGLang keeps custom all-reduce for at most two PCIe GPUs"), \
            rules["pcie_only"]["where"]
    no_peer = paths["no_peer"]
    if no_peer and not p2p_check and "p2p_check_skipped" in rules:
        return "crash", (
            f"GPU pairs {', '.join(no_peer)} have no peer access (nvidia-smi topo -p2p r: "
            f"{', '.join(paths['p2p'][p] for p in no_peer)}) and custom all-reduce is on "
            "without --enable-p2p-check: SGLang trusts peer access and crashes (sglang#4814). "
            "Set enable-p2p-check: true (it then falls back) or disable-custom-all-reduce: true"
        ), rules["p2p_check_skipped"]["where"]
    if no_peer and "p2p" in rules:
        return "off", ("no peer access between the TP GPUs: SGLang's peer-access test falls "
                       "back to NCCL"), rules["p2p"]["where"]
    if car_on is None:
        return "unknown", "SGLang did not resolve disable_custom_all_reduce", None
    return "on", paths["link_text"], rules["gate"]["where"]


def _custom_all_reduce_row(expect, decision):
    """The row of a run-time decision: a crash fails, unknown stays unknown, on/off judged."""
    predicted, reason, where = decision
    cited = f"{reason} (SGLang: {where})" if where else reason
    if predicted in ("crash", "unknown"):
        return _row("custom_all_reduce", expect, predicted,
                    "fail" if predicted == "crash" else "unknown", cited, where=where)
    status, why = _judge(expect, predicted == "on", "custom all-reduce")
    return _row("custom_all_reduce", expect, predicted, status, why or cited, where=where)


def _nccl_p2p_row(expect, paths):
    """NCCL peer-to-peer: a failure when it is switched off over NVLink, else on or off."""
    if paths["p2p_disabled"] and paths["nvlink"]:
        return _row("nccl_p2p", expect, "off", "fail",
                    f"NCCL_P2P_DISABLE=1 while the TP GPUs are joined by NVLink "
                    f"({paths['link_text']}): all-reduce goes through host memory and leaves "
                    "NVLink idle. Remove NCCL_P2P_DISABLE from sglang_env / /etc/nccl.conf")
    on = not paths["p2p_disabled"] and not paths["no_peer"]
    status, why = _judge(expect, on, "NCCL P2P")
    if paths["p2p_disabled"]:
        reason = "NCCL_P2P_DISABLE=1"
    elif paths["no_peer"]:
        reason = f"no peer access on {', '.join(paths['no_peer'])}"
    else:
        reason = paths["link_text"]
    return _row("nccl_p2p", expect, "on" if on else "off", status, why or reason)


def sglang_preflight_table(verdict):
    """The verdict as a fixed-width table for the play output.

    Args:
        verdict (dict): preflight's verdict (sglang_preflight's answer: its rows, failures,
            unknowns).
    Returns:
        list of str: a head line, one line per row, then what SGLang changed.
    """
    def cell(value):
        if isinstance(value, dict):  # speculative: "EAGLE 3/1/4" (steps/topk/draft tokens)
            return (f"{value.get('algorithm', '-')} {value.get('num_steps', '-')}/"
                    f"{value.get('eagle_topk', '-')}/{value.get('num_draft_tokens', '-')}")
        return str(value)

    rows = [("row", "expected", "predicted", "status", "evidence")]
    for r in verdict["rows"]:
        rows.append((r["name"], cell(r["expect"]), cell(r["predicted"]), r["status"].upper(),
                     r["evidence"]))
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    lines = ["  ".join(r[i].ljust(widths[i]) for i in range(4)) + "  " + r[4] for r in rows]
    how = ("resolved by sglang" if verdict.get("resolved_by") == "sglang"
           else "read from the sources (not resolved by sglang)")
    unknowns = verdict.get("unknowns") or []
    head = f"preflight for sglang {verdict['sglang_version']}, {how}: " + (
        f"{len(verdict['failures'])} FAILED" if verdict["failures"]
        else f"UNKNOWN ({len(unknowns)} rows without evidence)" if unknowns or not verdict["ok"]
        else "OK")
    return [head] + lines + sglang_changes_table(verdict)


def _short(value, limit=60):
    text = json.dumps(value) if not isinstance(value, str) else value
    return text if len(text) <= limit else text[:limit - 3] + "..."


def sglang_changes_table(verdict):
    """What SGLang changed silently, with file:line (bookkeeping fields left out)."""
    changes = [c for c in verdict.get("changes") or [] if not c["field"].startswith("_")]
    if not changes:
        return []
    lines = [f"SGLang changed {len(changes)} fields from what was asked:"]
    width = max(len(c["field"]) for c in changes)
    for c in changes:
        where = f"{c['file']}:{c['line']} {c['function']}" if c.get("file") else "no write traced"
        lines.append(f"  {c['field'].ljust(width)}  {_short(c['asked'])} -> "
                     f"{_short(c['resolved'])}  ({where})")
    return lines


def described_gpus(description):
    """GPU facts from a description of GPUs that are not here (sglang_gpus): {count, name,
    memory_mib, compute_capability, link (nvidia-smi's code for every pair, default PHB)}.

    Args:
        description (dict): sglang_gpus, a mapping with count, name, memory_mib, compute_capability
            and optionally link.
    Returns:
        dict: GPU facts shaped like sglang_facts' gpus: {present, described, count, devices, links,
            p2p}.
    """
    # The same check as the resolution's (one validator): count in range before any row.
    problem = check_gpus(description, complete=False)
    if problem:
        raise AnsibleFilterError(problem)
    count = description["count"]
    link = str(description.get("link") or "PHB")
    if not (NVLINK.match(link) or link in PCIE):
        raise AnsibleFilterError(
            f"sglang_gpus.link: an nvidia-smi topology code (NV4, PIX, PXB, PHB, NODE, SYS), "
            f"got {link!r}")
    pairs = [f"{a}-{b}" for a in range(count) for b in range(a + 1, count)]
    return {
        "present": True, "described": True, "count": count, "reason": None,
        "devices": [{"index": i, "name": description.get("name"),
                     "memory_mib": description.get("memory_mib")} for i in range(count)],
        "links": {p: link for p in pairs}, "p2p": {},
    }


class FilterModule:
    def filters(self):
        return {
            "sglang_preflight": own_errors(sglang_preflight),
            "sglang_preflight_table": own_errors(sglang_preflight_table),
        }
