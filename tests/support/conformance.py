"""Compare what real SGLang answers with what the stand-in answers to the same calls (issue 54,
part 6): `/metrics` (families, their types, label names, label texts such as `le="4.0"`, which
counters grow after the same requests and by how much), `/server_info` (the keys the project
reads and their JSON types), `/health_generate`'s status and one `sglang.bench_serving` record
(the keys the project reads, the counts it takes from them).

scripts/gpu_conformance.py captures the answers on a GPU host and calls these functions; the
unit tests (tests/unit/test_gpu_conformance.py) feed them texts. Each function returns a list of
differences, each a dict:

    {"part": "metrics" | "growth" | "server_info" | "health_generate" | "bench",
     "kind": what differs, "where": the family, key or series,
     "sglang": what real SGLang answered, "standin": what the stand-in answered,
     "matters": True when the project, a rule or a test would read the two differently,
     "why": one sentence}

Standard library only, plus the project's own reader of the benchmark's record
(plugins/module_utils/sglang_workload.py), so that the counts compared are the ones the proof
takes.
"""

import math
import re
from pathlib import Path

from ansible_collections.sglang.deploy.plugins.module_utils import sglang_workload as workload

ROOT = Path(__file__).resolve().parents[2]

# --- the exposition text -------------------------------------------------------------------------

SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)(?:\s+-?\d+)?\s*$")
LABEL = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*(?:,|$)')
# The sample suffixes of a family (prometheus_client's text format: a counter's family is named
# with its _total; _created beside it where created series are on).
SUFFIXES = ("_total", "_created", "_bucket", "_count", "_sum", "_gcount", "_gsum")
# Which sample of a family counts what happened: a counter's value, a histogram's count.
COUNTING = {"counter": ("_total", ""), "histogram": ("_count",), "summary": ("_count",)}
# Labels whose text a rule selects by: a difference in them matters for any family.
SELECTED_BY_TEXT = ("le", "quantile")
# Families whose growth after the same requests counts requests or tokens: the same requests
# must make them grow by the same amount. Others (CUDA graph passes: per batch on SGLang) may
# grow by another amount; that they grow at all is compared for every family.
EXACT_GROWTH = frozenset({
    "sglang:num_requests_total", "sglang:num_aborted_requests_total",
    "sglang:prompt_tokens_total", "sglang:generation_tokens_total",
    "sglang:time_to_first_token_seconds", "sglang:e2e_request_latency_seconds",
    "sglang:inter_token_latency_seconds"})


def difference(part, kind, where, sglang, standin, matters, why):
    """One difference (the shape the module's docstring gives)."""
    return {"part": part, "kind": kind, "where": where, "sglang": sglang, "standin": standin,
            "matters": bool(matters), "why": why}


def _labels(text, line):
    """((name, text as written), ...) of a sample's label block; ValueError when it does not
    read whole."""
    labels, at = [], 0
    text = text or ""
    while at < len(text.rstrip()):
        match = LABEL.match(text, at)
        if not match:
            raise ValueError(f"not an exposition line (labels): {line!r}")
        labels.append((match.group(1), match.group(2)))
        at = match.end()
    return tuple(labels)


def family_of(sample, families):
    """The family a sample (or a name a rule reads) belongs to among `families`: its own name,
    else its name without a sample suffix (a counter's _created: the family with _total)."""
    if sample in families:
        return sample
    for suffix in SUFFIXES:
        if sample.endswith(suffix):
            base = sample[:-len(suffix)]
            for name in (base, base + "_total"):
                if name in families:
                    return name
    return None


def parse(text):
    """{family: {"type": type, "samples": [(sample name, labels, value)]}} of an exposition
    text (Prometheus' text format), labels as ((name, text as written), ...). A sample with no
    `# TYPE` line is a family of its own, typed "untyped". ValueError on a line that is not
    the format."""
    families = {}
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            parts = line.split()
            if len(parts) != 4:
                raise ValueError(f"not an exposition line (TYPE): {line!r}")
            families.setdefault(parts[2], {"type": parts[3], "samples": []})["type"] = parts[3]
            continue
        if not line.strip() or line.startswith("#"):
            continue
        match = SAMPLE.match(line)
        if not match:
            raise ValueError(f"not an exposition line: {line!r}")
        name, labels, value = match.group(1), _labels(match.group(2), line), match.group(3)
        try:
            number = float(value)
        except ValueError:
            raise ValueError(f"not an exposition line (value): {line!r}") from None
        family = family_of(name, families) or name
        families.setdefault(family, {"type": "untyped", "samples": []})["samples"].append(
            (name, labels, number))
    return families


def read_names(texts):
    """The `sglang:` series names that occur in `texts` (rules, dashboards, plugins)."""
    names = set()
    for text in texts:
        names.update(re.findall(r"sglang:[A-Za-z0-9_:]*[A-Za-z0-9]", text))
    return names


def project_texts(root=ROOT):
    """What the project reads /metrics with: its plugins (the rules it writes, the drain, the
    smoke test's graph check), its roles and the monitoring pack (rules, dashboards)."""
    paths = [*root.glob("plugins/**/*.py"), *root.glob("roles/**/*.yml"),
             *root.glob("roles/**/*.j2"), *root.glob("docs/monitoring/**/*.yml"),
             *root.glob("docs/monitoring/**/*.json")]
    return [p.read_text(encoding="utf-8", errors="replace") for p in sorted(paths)]


def families_read(names, *parsed):
    """The families of the parsed texts that the project reads by one of `names`."""
    known = {}
    for families in parsed:
        known.update(families)
    return {family_of(name, known) for name in names} - {None}


# --- /metrics: what each writes ----------------------------------------------------------------

def _suffix(sample, family):
    return sample[len(family):] if sample.startswith(family) else sample


def _label_sets(entry, family):
    """{(sample suffix, label names)} of a family's samples."""
    return {(_suffix(name, family), tuple(sorted(k for k, _v in labels)))
            for name, labels, _value in entry["samples"]}


def _label_texts(entry):
    """{label name: {texts written}} of a family's samples."""
    texts = {}
    for _name, labels, _value in entry["samples"]:
        for key, value in labels:
            texts.setdefault(key, set()).add(value)
    return texts


def _only_in_one(family, sglang, standin, read):
    if family not in sglang:
        return difference(
            "metrics", "family only in the stand-in", family, None, standin[family]["type"], True,
            "the stand-in writes a family SGLang does not: what reads it holds on the stand-in "
            "only")
    matters = family in read
    return difference(
        "metrics", "family only in SGLang", family, sglang[family]["type"], None, matters,
        "the project reads it and the stand-in does not write it" if matters else
        "the stand-in does not write it; the project does not read it")


def _family_differences(family, ours, theirs, read):
    """Type, label names and label texts of a family both write."""
    found = []
    if theirs["type"] != ours["type"]:
        found.append(difference("metrics", "type", family, theirs["type"], ours["type"], True,
                                "the same family is of another type"))
    if not theirs["samples"] or not ours["samples"]:
        if theirs["samples"] or ours["samples"]:
            found.append(difference(
                "metrics", "series in one only", family, len(theirs["samples"]),
                len(ours["samples"]), family in read,
                "after the same requests one writes series of this family, the other none"))
        return found
    sets_theirs, sets_ours = _label_sets(theirs, family), _label_sets(ours, family)
    if sets_theirs != sets_ours:
        found.append(difference(
            "metrics", "label names", family,
            sorted([suffix, list(names)] for suffix, names in sets_theirs - sets_ours),
            sorted([suffix, list(names)] for suffix, names in sets_ours - sets_theirs), True,
            "a selector or a sum by these labels reads the two differently"))
    texts_theirs, texts_ours = _label_texts(theirs), _label_texts(ours)
    for label in sorted(set(texts_theirs) & set(texts_ours)):
        if texts_theirs[label] != texts_ours[label]:
            found.append(difference(
                "metrics", "label text", f'{family}{{{label}}}',
                sorted(texts_theirs[label] - texts_ours[label]),
                sorted(texts_ours[label] - texts_theirs[label]),
                label in SELECTED_BY_TEXT or family in read,
                f"a selector on {label}= matches the text one writes and not the other's"))
    return found


def compare_metrics(sglang_text, standin_text, read=frozenset()):
    """The differences between two /metrics texts: families in one only (a family only SGLang
    writes matters when it is in `read`, the families the project reads), the type, the label
    names and the label texts of each family both write."""
    sglang, standin = parse(sglang_text), parse(standin_text)
    found = []
    for family in sorted(set(sglang) | set(standin)):
        if family not in sglang or family not in standin:
            found.append(_only_in_one(family, sglang, standin, read))
        else:
            found += _family_differences(family, standin[family], sglang[family], read)
    return found


# --- /metrics: what grows ----------------------------------------------------------------------

def counted(text):
    """{(family, sample, labels without le, sorted): value} of the samples that count:
    counters' values, histograms' and summaries' counts."""
    values = {}
    for family, entry in parse(text).items():
        suffixes = COUNTING.get(entry["type"])
        if not suffixes:
            continue
        for name, labels, value in entry["samples"]:
            if _suffix(name, family) in suffixes:
                key = (family, name, tuple(sorted(kv for kv in labels if kv[0] != "le")))
                values[key] = values.get(key, 0.0) + value
    return values


def growth(before, after):
    """{(family, sample, labels): after - before} of the counting samples in `after` (a series
    new in `after` grew from 0)."""
    was = counted(before)
    return {key: value - was.get(key, 0.0) for key, value in counted(after).items()}


def _series(key):
    family, name, labels = key
    return name + ("{" + ",".join(f'{k}="{v}"' for k, v in labels) + "}" if labels else "")


def _grew(deltas):
    return {key[0] for key, delta in deltas.items() if delta > 0}


def compare_growth(sglang, standin, exact=EXACT_GROWTH):
    """What grew after the same requests: `sglang` and `standin` are (/metrics before, after).
    A family both write that grows in one and not the other matters, so does a series both write
    that grows in one only; an amount that differs matters for the families in `exact`."""
    ours, theirs = growth(*standin), growth(*sglang)
    both = {key[0] for key in ours} & {key[0] for key in theirs}
    found = []
    for family in sorted(both & (_grew(ours) ^ _grew(theirs))):
        found.append(difference(
            "growth", "grows in one only", family, family in _grew(theirs),
            family in _grew(ours), True,
            "after the same requests one counter grows and the other does not: a rate or an "
            "alert on it reads the two differently"))
    for key in sorted(set(ours) & set(theirs)):
        grew_ours, grew_theirs = ours[key] > 0, theirs[key] > 0
        if grew_ours != grew_theirs and key[0] not in {d["where"] for d in found}:
            found.append(difference("growth", "series grows in one only", _series(key),
                                    theirs[key], ours[key], True,
                                    "the same series grows in one and not the other"))
        elif grew_ours and not math.isclose(ours[key], theirs[key], abs_tol=1e-9):
            found.append(difference(
                "growth", "grows by another amount", _series(key), theirs[key], ours[key],
                key[0] in exact,
                "the same requests count another number of requests or tokens"
                if key[0] in exact else "counted per batch or per step: may differ"))
    return found


# --- /server_info ------------------------------------------------------------------------------

# The keys of /server_info the project reads, and where. 0.5.16+ servers write
# cuda_graph_config; the four legacy flags are read only from a server without it (<= 0.5.12),
# so on 0.5.23 both sides should lack them. Held to the readers by the unit test.
SERVER_INFO_READS = {
    "version": "sglang_effective.effective (verification, the drift check)",
    "tp_size": "sglang_effective.effective",
    "cuda_graph_config": "sglang_effective.effective (0.5.16+ shape)",
    "cuda_graph_config.decode": "sglang_effective._graphs",
    "cuda_graph_config.decode.backend": "sglang_effective._graphs",
    "cuda_graph_config.decode.max_bs": "sglang_effective._graphs",
    "cuda_graph_config.prefill": "sglang_effective._graphs",
    "cuda_graph_config.prefill.backend": "sglang_effective._graphs",
    "disable_cuda_graph": "sglang_effective._legacy_graphs (<= 0.5.12)",
    "cuda_graph_max_bs": "sglang_effective._legacy_graphs (<= 0.5.12)",
    "disable_piecewise_cuda_graph": "sglang_effective._legacy_graphs (<= 0.5.12)",
    "enable_piecewise_cuda_graph": "sglang_effective._legacy_graphs (0.5.4 - 0.5.9)",
    "speculative_algorithm": "sglang_effective._speculative",
    "speculative_num_steps": "sglang_effective._speculative",
    "speculative_eagle_topk": "sglang_effective._speculative",
    "speculative_num_draft_tokens": "sglang_effective._speculative",
    "attention_backend": "sglang_effective.effective",
    "launch_command": "sglang_effective.effective",
    "internal_states": "sglang_effective._accept_length, sglang_smoke",
    "internal_states.0.avg_spec_accept_length": "sglang_effective._accept_length, sglang_smoke, "
                                                "SGLang's benchmark (accept_length)",
    "model_path": "roles/sglang/tasks/smoke.yml, proof/release.yml (the proof's tokenizer)",
    "tokenizer_path": "roles/sglang/tasks/smoke.yml, proof/release.yml (the proof's tokenizer)",
    "max_running_requests": "roles/sglang/tasks/smoke.yml, proof/release.yml (the top level)",
    "api_key": "roles/sglang/tasks/doctor.yml, sglang_preflight (a key the server holds)",
    "admin_api_key": "sglang_redact (redacted before it is kept)",
}
# Keys of the stand-in's own: never an argument (sglang_verify's NOT_ARGS).
STANDIN_ONLY = ("stand_in",)
MISSING = object()


def json_type(value):
    """The JSON type of a value: null, bool, number (int and float alike), string, array,
    object."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object" if isinstance(value, dict) \
        else type(value).__name__


def lookup(obj, path):
    """The value at a dotted path (a number indexes a list), or MISSING."""
    for part in path.split("."):
        if isinstance(obj, dict) and part in obj:
            obj = obj[part]
        elif isinstance(obj, list) and part.isdigit() and int(part) < len(obj):
            obj = obj[int(part)]
        else:
            return MISSING
    return obj


def _read_key(path, where, sglang, standin):
    """The difference at one key the project reads, or None."""
    theirs, ours = lookup(sglang, path), lookup(standin, path)
    if theirs is MISSING and ours is MISSING:
        return None
    if MISSING in (theirs, ours):
        present = theirs if ours is MISSING else ours
        # The project reads with .get(): an absent key reads as null.
        return difference(
            "server_info", "missing key", path,
            "absent" if theirs is MISSING else json_type(theirs),
            "absent" if ours is MISSING else json_type(ours), present is not None,
            f"read by {where}" + ("; null on the side that has it, read alike"
                                  if present is None else ""))
    if json_type(theirs) != json_type(ours):
        return difference("server_info", "type", path, json_type(theirs), json_type(ours), True,
                          f"read by {where}")
    if theirs != ours and not isinstance(theirs, (dict, list)):
        return difference("server_info", "value", path, theirs, ours, False,
                          f"read by {where}; resolved for this GPU by SGLang, said by the "
                          "stand-in's arguments")
    return None


def compare_server_info(sglang, standin, reads=None):
    """The differences between two /server_info answers: at each key the project reads (`reads`,
    SERVER_INFO_READS by default) a key one lacks (matters unless the other's is null), another
    JSON type (matters), another value (noted); top-level keys only the stand-in writes matter
    (sglang_args_from_server_info turns every key into an argument), keys only SGLang writes
    are noted."""
    reads = SERVER_INFO_READS if reads is None else reads
    if not isinstance(sglang, dict) or not isinstance(standin, dict):
        return [difference("server_info", "not an object", "/server_info", json_type(sglang),
                           json_type(standin), True, "the project reads a JSON object")]
    found = []
    for path, where in reads.items():
        # A key under one that already differs is that difference.
        if not any(path.startswith(d["where"] + ".") for d in found):
            found += [d for d in [_read_key(path, where, sglang, standin)] if d]
    for key in sorted(set(standin) - set(sglang) - set(STANDIN_ONLY) - set(reads)):
        found.append(difference("server_info", "key only in the stand-in", key, "absent",
                                json_type(standin[key]), True,
                                "sglang_args_from_server_info would make it an argument SGLang "
                                "does not have"))
    only_sglang = sorted(set(sglang) - set(standin) - set(reads))
    if only_sglang:
        found.append(difference("server_info", "keys only in SGLang", f"{len(only_sglang)} keys",
                                only_sglang, None, False,
                                "the stand-in reports a subset; the project does not read these"))
    return found


# --- /health_generate --------------------------------------------------------------------------

def compare_health(sglang_status, standin_status):
    """/health_generate's status on each side (an int, or None when it did not answer)."""
    if sglang_status != standin_status:
        return [difference("health_generate", "status", "/health_generate", sglang_status,
                           standin_status, True,
                           "a readiness or drain check reads the two differently")]
    if sglang_status != 200:
        return [difference("health_generate", "status", "/health_generate", sglang_status,
                           standin_status, False, "equal, but neither answered 200")]
    return []


# --- the benchmark's record --------------------------------------------------------------------

# The keys of SGLang's benchmark record the proof reads (sglang_workload.level and counts),
# each with the JSON types it takes. Held to those functions by the unit test.
BENCH_READS = {
    "errors": ("array",),
    "completed": ("number",),
    **{f"{stat}_{name}_ms": ("number", "null") for name in ("ttft", "itl", "e2e_latency")
       for stat in ("median", "p90", "p99")},
    "mean_tpot_ms": ("number", "null"),
    "output_throughput": ("number", "null"),
    "accept_length": ("number", "null"),
    "request_goodput": ("number", "null"),
    "slo_attainment": ("number", "null"),
}


def _record_key(key, types, sglang, standin):
    theirs, ours = sglang.get(key, MISSING), standin.get(key, MISSING)
    if theirs is MISSING and ours is MISSING:
        return None
    kinds = ["absent" if v is MISSING else json_type(v) for v in (theirs, ours)]
    if kinds[0] != kinds[1]:
        # An absent key and a null read alike where null is a value the proof takes.
        alike = set(kinds) == {"absent", "null"}
        return difference("bench", "missing key" if "absent" in kinds else "type", key,
                          kinds[0], kinds[1], not alike,
                          "read alike (the proof reads .get)" if alike else
                          f"the proof reads it as {' or '.join(types)}")
    if kinds[0] not in types and kinds[0] != "absent":
        return difference("bench", "type", key, kinds[0], kinds[1], True,
                          f"the proof reads it as {' or '.join(types)}, both wrote {kinds[0]}")
    return None


def _level_figures(lv):
    """{figure: value} of sglang_workload.level's answer, the quantiles flattened."""
    flat = {}
    for key, value in lv.items():
        if isinstance(value, dict):
            flat.update({f"{key}.{q}": v for q, v in value.items()})
        else:
            flat[key] = value
    return flat


def compare_bench(sglang, standin, planned, reads=None):
    """The differences between two records of SGLang's benchmark (one level, `planned`
    requests), each None when the benchmark wrote none: the keys the proof reads (`reads`,
    BENCH_READS), the requests sent, completed and failed as the proof counts them, and each
    figure of the proof's level that one side has and the other not."""
    reads = BENCH_READS if reads is None else reads
    if not isinstance(sglang, dict) or not isinstance(standin, dict):
        return [difference("bench", "no record", "--output-file", json_type(sglang),
                           json_type(standin), True,
                           "the benchmark wrote no record on one side at least")]
    found = [d for d in (_record_key(k, t, sglang, standin) for k, t in reads.items()) if d]
    theirs = _level_figures(workload.level(sglang, 1, planned))
    ours = _level_figures(workload.level(standin, 1, planned))
    for key in ("requests", "completed", "errors"):
        if theirs[key] != ours[key]:
            found.append(difference("bench", "count", key, theirs[key], ours[key], True,
                                    "the proof counts the same run's requests differently"))
    for key in sorted(set(theirs) - {"requests", "completed", "errors", "planned"}):
        if (theirs[key] is None) != (ours[key] is None):
            found.append(difference("bench", "figure in one only", key, theirs[key], ours[key],
                                    True, "the proof has this figure on one side only"))
    return found


def matters(differences):
    """The differences that matter."""
    return [d for d in differences if d["matters"]]
