"""The GPU conformance script's comparisons (tests/support/conformance.py, issue 54 part 6), fed
texts shaped as SGLang 0.5.23 writes them (prometheus_client's multiprocess exposition of
sglang/srt/observability/metrics_collector.py, build_server_info's /server_info, the benchmark's
--output-details record): each kind of difference is found, equal answers give none; the lists of
what the project reads are held to its readers; the script (scripts/gpu_conformance.py) says
"no GPU" with its own exit code, and runs end to end against a fake SGLang that is the stand-in."""

import copy
import importlib.util
import json
import re
import sys
from pathlib import Path

import pytest
from support import conformance as c

from ansible_collections.sglang.deploy.plugins.module_utils import sglang_effective
from ansible_collections.sglang.deploy.plugins.module_utils import sglang_workload

ROOT = Path(__file__).resolve().parents[2]
LABELS = 'engine_type="unified",model_name="conformance-tiny"'
RANKS = LABELS + ',moe_ep_rank="0",pp_rank="0",tp_rank="0"'
TTFT_BOUNDS = ("0.1", "0.2", "0.4", "0.6", "0.8", "1.0", "2.0", "4.0", "+Inf")


def ttft(count, total):
    """sglang:time_to_first_token_seconds after `count` requests, each 0.3 s."""
    lines = ["# HELP sglang:time_to_first_token_seconds Histogram of time to first token in "
             "seconds.", "# TYPE sglang:time_to_first_token_seconds histogram"]
    for bound in TTFT_BOUNDS:
        below = count if bound not in ("0.1", "0.2") else 0
        lines.append(f'sglang:time_to_first_token_seconds_bucket{{{LABELS},is_streaming="true",'
                     f'le="{bound}"}} {below:.1f}')
    lines += [f'sglang:time_to_first_token_seconds_sum{{{LABELS},is_streaming="true"}} {total}',
              f'sglang:time_to_first_token_seconds_count{{{LABELS},is_streaming="true"}} '
              f'{count:.1f}']
    return "\n".join(lines)


def metrics(requests=0, tokens=0, passes=0, running=0):
    """A /metrics text as SGLang 0.5.23 writes it, after `requests` requests."""
    return "\n".join([
        "# HELP sglang:num_running_reqs The number of running requests.",
        "# TYPE sglang:num_running_reqs gauge",
        f"sglang:num_running_reqs{{{RANKS}}} {running:.1f}",
        "# HELP sglang:generation_tokens_total Number of generation tokens processed.",
        "# TYPE sglang:generation_tokens_total counter",
        f'sglang:generation_tokens_total{{{LABELS},is_streaming="true"}} {tokens:.1f}',
        "# HELP sglang:num_requests_total The number of requests.",
        "# TYPE sglang:num_requests_total counter",
        f'sglang:num_requests_total{{{LABELS},is_streaming="true"}} {requests:.1f}',
        "# HELP sglang:cuda_graph_passes_total The number of forward passes.",
        "# TYPE sglang:cuda_graph_passes_total counter",
        f'sglang:cuda_graph_passes_total{{{RANKS},mode="decode_cuda_graph"}} {passes:.1f}',
        ttft(requests, round(0.3 * requests, 3)), ""])


BEFORE, AFTER = metrics(), metrics(requests=5, tokens=80, passes=40, running=0)
READ = {"sglang:num_running_reqs", "sglang:generation_tokens_total",
        "sglang:time_to_first_token_seconds", "sglang:num_requests_total",
        "sglang:cuda_graph_passes_total"}


def kinds(differences, matter=True):
    return sorted((d["kind"], d["where"]) for d in differences if d["matters"] == matter)


# --- the exposition text -------------------------------------------------------------------------

def test_the_text_is_read_into_families_with_label_text_as_written():
    parsed = c.parse(AFTER)
    assert sorted(parsed) == sorted(READ)
    assert parsed["sglang:generation_tokens_total"]["type"] == "counter"
    hist = parsed["sglang:time_to_first_token_seconds"]
    assert hist["type"] == "histogram" and len(hist["samples"]) == len(TTFT_BOUNDS) + 2
    les = [dict(labels)["le"] for name, labels, _ in hist["samples"] if name.endswith("_bucket")]
    assert les == list(TTFT_BOUNDS)  # "4.0", never "4": the text is kept
    assert c.parse('x{a="q\\"uote",b="2"} 1\n')["x"]["samples"] == [
        ("x", (("a", 'q\\"uote'), ("b", "2")), 1.0)]


@pytest.mark.parametrize("line", ["sglang:x{a=1} 2", "sglang:x 1 2 3", "sglang:x{a=\"1\"} one",
                                  "# TYPE sglang:x"])
def test_a_line_that_is_not_the_format_is_refused(line):
    with pytest.raises(ValueError, match="not an exposition line"):
        c.parse(line + "\n")


def test_the_names_a_rule_reads_map_to_their_families():
    names = c.read_names(['rate(sglang:inter_token_latency_seconds_count[5m])',
                          'sglang:generation_tokens_total{x="1"} and sglang:num_running_reqs',
                          'histogram_quantile(0.9, sglang:time_to_first_token_seconds_bucket)'])
    assert "sglang:inter_token_latency_seconds_count" in names
    assert c.families_read(names, c.parse(AFTER)) == {
        "sglang:generation_tokens_total", "sglang:num_running_reqs",
        "sglang:time_to_first_token_seconds"}
    # The project's own texts: the rules' and the drain's series are among them.
    project = c.read_names(c.project_texts())
    assert {"sglang:num_running_reqs", "sglang:inter_token_latency_seconds_count",
            "sglang:generation_tokens_total"} <= project


# --- /metrics: families, types, labels -----------------------------------------------------------

def test_equal_metrics_give_no_difference():
    assert c.compare_metrics(AFTER, AFTER, READ) == []
    assert c.compare_growth((BEFORE, AFTER), (BEFORE, AFTER)) == []


def _without(text, family):
    return "\n".join(line for line in text.splitlines()
                     if not re.search(rf"\b{re.escape(family)}(_bucket|_sum|_count)?[{{ ]", line))


def test_a_family_the_stand_in_lacks_matters_when_the_project_reads_it():
    standin = _without(AFTER, "sglang:generation_tokens_total")
    assert "generation_tokens" not in standin
    assert kinds(c.compare_metrics(AFTER, standin, READ)) == [
        ("family only in SGLang", "sglang:generation_tokens_total")]
    # Not read by the project: noted, not failed.
    found = c.compare_metrics(AFTER, standin, READ - {"sglang:generation_tokens_total"})
    assert kinds(found) == [] and kinds(found, matter=False) == [
        ("family only in SGLang", "sglang:generation_tokens_total")]


def test_a_family_only_the_stand_in_writes_matters():
    extra = AFTER + "# TYPE sglang:standin_only_total counter\nsglang:standin_only_total 1.0\n"
    assert kinds(c.compare_metrics(AFTER, extra, READ)) == [
        ("family only in the stand-in", "sglang:standin_only_total")]


def test_another_type_is_found():
    standin = AFTER.replace("# TYPE sglang:num_requests_total counter",
                            "# TYPE sglang:num_requests_total gauge")
    assert kinds(c.compare_metrics(AFTER, standin, READ)) == [
        ("type", "sglang:num_requests_total")]


def test_another_label_set_is_found():
    standin = AFTER.replace(f'sglang:num_requests_total{{{LABELS},is_streaming="true"}}',
                            f"sglang:num_requests_total{{{LABELS}}}")
    found = c.compare_metrics(AFTER, standin, READ)
    assert kinds(found) == [("label names", "sglang:num_requests_total")]
    assert found[0]["sglang"] == [["", ["engine_type", "is_streaming", "model_name"]]]
    # A gauge written per process (multiprocess_mode "all"): a pid label SGLang does not write.
    per_pid = AFTER.replace(f"sglang:num_running_reqs{{{RANKS}}}",
                            f'sglang:num_running_reqs{{{RANKS},pid="42"}}')
    assert kinds(c.compare_metrics(AFTER, per_pid, READ)) == [
        ("label names", "sglang:num_running_reqs")]


def test_another_le_text_is_found_whoever_reads_the_family():
    standin = AFTER.replace('le="4.0"', 'le="4"')
    found = c.compare_metrics(AFTER, standin, frozenset())
    assert kinds(found) == [("label text", "sglang:time_to_first_token_seconds{le}")]
    assert (found[0]["sglang"], found[0]["standin"]) == (["4.0"], ["4"])


def test_another_label_text_matters_when_the_project_reads_the_family():
    standin = AFTER.replace('mode="decode_cuda_graph"', 'mode="decode_graph"')
    assert kinds(c.compare_metrics(AFTER, standin, READ)) == [
        ("label text", "sglang:cuda_graph_passes_total{mode}")]
    assert kinds(c.compare_metrics(AFTER, standin, frozenset()), matter=False) == [
        ("label text", "sglang:cuda_graph_passes_total{mode}")]


def test_a_family_with_series_on_one_side_only_is_found():
    empty = re.sub(r"^sglang:generation_tokens_total\{.*\n", "", AFTER, flags=re.M)
    assert "# TYPE sglang:generation_tokens_total counter" in empty
    assert kinds(c.compare_metrics(AFTER, empty, READ)) == [
        ("series in one only", "sglang:generation_tokens_total")]


# --- /metrics: what grows ------------------------------------------------------------------------

def test_a_counter_that_grows_in_one_and_not_the_other_is_found():
    # The stand-in counts generated tokens while streaming, never at the finish: after the same
    # requests its counter stayed where it was.
    standin_after = metrics(requests=5, tokens=0, passes=40)
    found = c.compare_growth((BEFORE, AFTER), (BEFORE, standin_after))
    assert kinds(found) == [("grows in one only", "sglang:generation_tokens_total")]
    assert (found[0]["sglang"], found[0]["standin"]) == (True, False)


def test_a_histogram_that_does_not_count_is_found():
    standin_after = AFTER.replace(
        f'sglang:time_to_first_token_seconds_count{{{LABELS},is_streaming="true"}} 5.0',
        f'sglang:time_to_first_token_seconds_count{{{LABELS},is_streaming="true"}} 0.0')
    assert kinds(c.compare_growth((BEFORE, AFTER), (BEFORE, standin_after))) == [
        ("grows in one only", "sglang:time_to_first_token_seconds")]


def test_another_amount_matters_for_requests_and_tokens_only():
    standin_after = metrics(requests=5, tokens=75, passes=80)
    found = c.compare_growth((BEFORE, AFTER), (BEFORE, standin_after))
    assert kinds(found) == [("grows by another amount",
                             'sglang:generation_tokens_total{engine_type="unified",'
                             'is_streaming="true",model_name="conformance-tiny"}')]
    # CUDA graph passes are counted per batch on SGLang: another amount is noted.
    assert [d["where"].split("{")[0] for d in found if not d["matters"]] == [
        "sglang:cuda_graph_passes_total"]


def test_a_series_that_grows_on_one_side_only_is_found():
    # Both families grow, but the stand-in counts its requests as not streamed.
    standin_before = BEFORE + (f'sglang:num_requests_total{{{LABELS},is_streaming="false"}} 0.0\n')
    standin_after = AFTER.replace(
        f'sglang:num_requests_total{{{LABELS},is_streaming="true"}} 5.0',
        f'sglang:num_requests_total{{{LABELS},is_streaming="true"}} 0.0\n'
        f'sglang:num_requests_total{{{LABELS},is_streaming="false"}} 5.0')
    sglang_after = AFTER + f'sglang:num_requests_total{{{LABELS},is_streaming="false"}} 0.0\n'
    sglang_before = standin_before
    found = c.compare_growth((sglang_before, sglang_after), (standin_before, standin_after))
    assert [d["kind"] for d in found if d["matters"]] == ["series grows in one only"] * 2


# --- /server_info --------------------------------------------------------------------------------

SERVER_INFO = {
    "model_path": "/tmp/x/model", "tokenizer_path": "/tmp/x/model",
    "served_model_name": "conformance-tiny", "tp_size": 1, "port": 30000,
    "max_running_requests": 256, "attention_backend": "flashinfer", "api_key": None,
    "admin_api_key": None, "speculative_algorithm": None,
    "cuda_graph_config": {"decode": {"backend": "full", "max_bs": 256},
                          "prefill": {"backend": "breakable", "max_bs": 1}},
    "launch_command": "python3 -m sglang.launch_server --model-path /tmp/x/model",
    "internal_states": [{"last_gen_throughput": 0.0}], "version": "0.5.23",
}


def test_equal_server_info_gives_no_difference():
    assert c.compare_server_info(SERVER_INFO, copy.deepcopy(SERVER_INFO)) == []


def _changed(path, value):
    info = copy.deepcopy(SERVER_INFO)
    *parents, last = path.split(".")
    node = info
    for part in parents:
        node = node[part]
    if value is c.MISSING:
        del node[last]
    else:
        node[last] = value
    return info


@pytest.mark.parametrize("path, value, kind", [
    ("tp_size", c.MISSING, "missing key"),
    ("cuda_graph_config.decode.backend", c.MISSING, "missing key"),
    ("cuda_graph_config", c.MISSING, "missing key"),
    ("internal_states", c.MISSING, "missing key"),
    ("tp_size", "1", "type"),
    ("cuda_graph_config.decode.max_bs", None, "type"),
    ("internal_states", {}, "type"),
    ("max_running_requests", "256", "type"),
])
def test_a_key_the_project_reads_missing_or_of_another_type_matters(path, value, kind):
    standin = _changed(path, value)
    assert kinds(c.compare_server_info(SERVER_INFO, standin)) == [(kind, path)]
    # The other way round too: SGLang lacks what the stand-in writes.
    assert kinds(c.compare_server_info(standin, SERVER_INFO)) == [(kind, path)]


def test_a_key_only_the_stand_in_writes_matters_its_marker_aside():
    standin = dict(SERVER_INFO, stand_in=True, standin_knob=3)
    assert kinds(c.compare_server_info(SERVER_INFO, standin)) == [
        ("key only in the stand-in", "standin_knob")]


def test_what_only_sglang_writes_or_reads_alike_is_noted():
    sglang = dict(SERVER_INFO, speculative_num_steps=None, kv_events=None, startup_time=1.5)
    standin = dict(SERVER_INFO, attention_backend="fa3", port=30001)
    found = c.compare_server_info(sglang, standin)
    assert kinds(found) == []
    assert kinds(found, matter=False) == [
        ("keys only in SGLang", "2 keys"), ("missing key", "speculative_num_steps"),
        ("value", "attention_backend")]


def test_an_answer_that_is_not_an_object_matters():
    assert kinds(c.compare_server_info(SERVER_INFO, None)) == [("not an object", "/server_info")]


class Recording(dict):
    """A dict that records the keys read from it (nested dicts and lists recorded too)."""

    def __init__(self, data, path="", seen=None):
        super().__init__(data)
        self.path, self.seen = path, set() if seen is None else seen

    def _wrap(self, key, value):
        path = f"{self.path}{key}"
        if isinstance(value, dict):
            return Recording(value, path + ".", self.seen)
        if isinstance(value, list):
            return [Recording(v, f"{path}.{i}.", self.seen) if isinstance(v, dict) else v
                    for i, v in enumerate(value)]
        return value

    def __getitem__(self, key):
        self.seen.add(f"{self.path}{key}")
        return self._wrap(key, super().__getitem__(key))

    def get(self, key, default=None):
        self.seen.add(f"{self.path}{key}")
        return self._wrap(key, super().get(key, default))

    def __contains__(self, key):
        self.seen.add(f"{self.path}{key}")
        return super().__contains__(key)


def test_the_server_info_keys_compared_are_the_ones_the_project_reads():
    seen = set()
    legacy = {"disable_cuda_graph": False, "disable_piecewise_cuda_graph": True,
              "cuda_graph_max_bs": 8}
    for info in (SERVER_INFO, dict(SERVER_INFO, speculative_algorithm="EAGLE",
                                   internal_states=[{"avg_spec_accept_length": 2.5}]),
                 legacy, {"enable_piecewise_cuda_graph": True}):
        sglang_effective.effective(Recording(info, seen=seen))
    # The roles read `__sglang_server_answers.server_info.<key>`.
    for path in ROOT.glob("roles/**/*.yml"):
        seen.update(re.findall(r"server_answers\.server_info\.(\w+)", path.read_text()))
    unread = seen - set(c.SERVER_INFO_READS)
    assert not unread, f"read by the project, not compared by the conformance: {unread}"
    assert len(seen) >= 15


# --- /health_generate ----------------------------------------------------------------------------

def test_health_generate_status():
    assert c.compare_health(200, 200) == []
    assert kinds(c.compare_health(200, 503)) == [("status", "/health_generate")]
    assert kinds(c.compare_health(None, 200)) == [("status", "/health_generate")]
    assert kinds(c.compare_health(503, 503), matter=False) == [("status", "/health_generate")]


# --- the benchmark's record ----------------------------------------------------------------------

RECORD = {"backend": "sglang-oai", "dataset_name": "random-ids", "completed": 4,
          "errors": ["", "", "", ""], "output_throughput": 812.5, "mean_tpot_ms": 4.1,
          "accept_length": None, "request_goodput": 3.2, "slo_attainment": 1.0,
          "server_info": {"version": "0.5.23"}, "input_lens": [32] * 4,
          **{f"{s}_{n}_ms": 12.5 for n in ("ttft", "itl", "e2e_latency")
             for s in ("median", "p90", "p99")}}


def test_equal_records_give_no_difference():
    assert c.compare_bench(RECORD, copy.deepcopy(RECORD), 4) == []


@pytest.mark.parametrize("change, found", [
    ({"errors": None}, [("count", "errors"), ("count", "requests"), ("type", "errors")]),
    ({"errors": ["", "", "", "", "", "", "", ""]}, [("count", "requests")]),
    ({"errors": ["", "", "", "timeout"], "completed": 3},
     [("count", "completed"), ("count", "errors")]),
    ({"completed": 4.0}, []),
    ({"completed": "4"}, [("count", "completed"), ("type", "completed")]),
    ({"mean_tpot_ms": None}, [("figure in one only", "tok_s_per_user"),
                              ("type", "mean_tpot_ms")]),
    ({"p99_ttft_ms": "12.5"}, [("figure in one only", "ttft_ms.p99"), ("type", "p99_ttft_ms")]),
])
def test_a_record_read_differently_by_the_proof_is_found(change, found):
    standin = dict(RECORD, **change)
    assert kinds(c.compare_bench(RECORD, standin, 4)) == sorted(found)


def test_a_key_missing_from_the_record_matters_unless_it_reads_as_null():
    standin = {k: v for k, v in RECORD.items() if k not in ("output_throughput", "accept_length")}
    found = c.compare_bench(RECORD, standin, 4)
    assert kinds(found) == [("figure in one only", "output_tok_s"),
                            ("missing key", "output_throughput")]
    assert kinds(found, matter=False) == [("missing key", "accept_length")]


def test_no_record_on_one_side_matters():
    assert kinds(c.compare_bench(RECORD, None, 4)) == [("no record", "--output-file")]


def test_the_record_keys_compared_are_the_ones_the_proof_reads():
    seen = set()
    sglang_workload.level(Recording(RECORD, seen=seen), 2, 4)
    sglang_workload.counts(Recording(RECORD, seen=seen))
    unread = seen - set(c.BENCH_READS)
    assert not unread, f"read by the proof, not compared by the conformance: {unread}"
    assert {"errors", "completed", "p99_ttft_ms"} <= seen


# --- the script ----------------------------------------------------------------------------------

def _script():
    spec = importlib.util.spec_from_file_location("gpu_conformance",
                                                  ROOT / "scripts" / "gpu_conformance.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_no_nvidia_smi_is_no_gpu_with_its_own_exit_code(tmp_path, capsys):
    script = _script()
    found, why = script.find_gpu(which=lambda name: None)
    assert not found and "nvidia-smi is not on PATH" in why
    code = script.main(["--out", str(tmp_path / "out")], gpu=lambda: (False, why))
    assert code == script.EXIT_NO_GPU == 3
    assert "NO GPU: nvidia-smi is not on PATH" in capsys.readouterr().err
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert report["status"] == "no_gpu" and report["exit_code"] == 3
    assert report["version"] == "0.5.23"


def test_an_nvidia_smi_that_lists_no_gpu_is_no_gpu(tmp_path):
    script = _script()
    smi = tmp_path / "nvidia-smi"
    smi.write_text("#!/bin/sh\necho 'No devices were found'\nexit 6\n")
    smi.chmod(0o755)
    found, why = script.find_gpu(which=lambda name: str(smi))
    assert not found and "lists no GPU (exit 6: No devices were found)" in why
    smi.write_text("#!/bin/sh\necho 'GPU 0: NVIDIA RTX A6000 (UUID: GPU-1)'\n")
    assert script.find_gpu(which=lambda name: str(smi)) == (
        True, ["GPU 0: NVIDIA RTX A6000 (UUID: GPU-1)"])


def test_without_a_python_of_sglang_nothing_is_compared(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("SGLANG_PYTHON", raising=False)
    script = _script()
    code = script.main(["--out", str(tmp_path)], gpu=lambda: (True, ["GPU 0: x"]))
    assert code == script.EXIT_NOT_COMPARED == 2
    assert "set SGLANG_PYTHON" in capsys.readouterr().err
    assert json.loads((tmp_path / "report.json").read_text())["status"] == "not_compared"
    code = script.main(["--out", str(tmp_path), "--python", sys.executable],
                       gpu=lambda: (True, ["GPU 0: x"]))
    assert code == 2 and "has no sglang" in capsys.readouterr().err


def test_the_table_shows_what_matters_first():
    script = _script()
    differences = c.compare_metrics(AFTER, AFTER.replace('le="4.0"', 'le="4"'), READ)
    differences += c.compare_server_info(SERVER_INFO, dict(SERVER_INFO, attention_backend="x"))
    lines = script.table("standin-prometheus_client", differences)
    assert lines[0] == "standin-prometheus_client: 1 differences that matter, 1 noted"
    assert lines[2].startswith("  !! metrics") and 'le}' in lines[2] and '["4.0"]' in lines[2]
    assert lines[3].startswith("     server_info")


def _server(script, tmp_path, code):
    """A Server whose process runs `code` (python), its URL a port nothing listens on."""
    log = tmp_path / "server.log"
    return script.Server("a server", [sys.executable, "-c", code], {"PATH": "/usr/bin:/bin"},
                         log, f"http://127.0.0.1:{script.free_port()}")


@pytest.mark.parametrize("code, bound, said", [
    ("import sys; print('boom'); sys.exit(4)", 30, "a server exited with 4 before it generated"),
    ("import time; print('loading', flush=True); time.sleep(30)", 30,
     "its log did not grow for 0.6 s (no progress)"),
    ("import time\nwhile True:\n    print('capturing', flush=True); time.sleep(0.1)", 1.5,
     "waited 1.5 s (the bound) for a server to generate a token for POST"),
])
def test_the_wait_names_what_it_waited_for(tmp_path, monkeypatch, code, bound, said):
    script = _script()
    monkeypatch.setattr(script, "POLL_S", 0.1)
    server = _server(script, tmp_path, code)
    server.start()
    try:
        with pytest.raises(script.NotCompared, match=re.escape(said)):
            server.wait_ready(bound, 0.6)
    finally:
        server.stop()
    assert server.process.poll() is not None


FAKE_BENCH = r'''
"""A fake sglang.bench_serving: the requests, then a record of the keys the proof reads."""
import argparse, json, urllib.request
p = argparse.ArgumentParser()
for flag in ("--base-url", "--num-prompts", "--output-file", "--served-model-name",
             "--random-input-len", "--random-output-len", "--warmup-requests"):
    p.add_argument(flag)
a, _ = p.parse_known_args()
errors = []
for i in range(int(a.warmup_requests) + int(a.num_prompts)):
    body = {"model": a.served_model_name, "max_tokens": int(a.random_output_len),
            "prompt": " ".join(f"w{j + i}" for j in range(1, int(a.random_input_len) + 1))}
    req = urllib.request.Request(a.base_url + "/v1/completions", json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    urllib.request.urlopen(req, timeout=60).read()
    if i >= int(a.warmup_requests):
        errors.append("")
record = {"completed": len(errors), "errors": errors, "output_throughput": 100.0,
          "mean_tpot_ms": 5.0, "accept_length": None, "request_goodput": 1.0,
          "slo_attainment": 1.0, **{f"{s}_{n}_ms": 10.0 for n in ("ttft", "itl", "e2e_latency")
                                    for s in ("median", "p90", "p99")}}
open(a.output_file, "a").write(json.dumps(record) + "\n")
'''


def _fake_sglang(tmp_path):
    """A python whose env has an "sglang 0.5.23" that is the stand-in (launch_server) and a
    fake benchmark: the script's whole path without a GPU."""
    fake = tmp_path / "fake"
    (fake / "sglang").mkdir(parents=True)
    (fake / "sglang" / "__init__.py").write_text("")
    (fake / "sglang" / "launch_server.py").write_text(
        "import os, sys\n"
        "os.environ.update(SGLANG_STANDIN_TOKENS_PER_CHUNK='1', SGLANG_STANDIN_TOK_S='400',\n"
        "                  SGLANG_STANDIN_TTFT_MS='10',\n"
        "                  SGLANG_STANDIN_METRICS='prometheus_client')\n"
        "from sglang_standin.__main__ import main\nsys.exit(main())\n")
    (fake / "sglang" / "bench_serving.py").write_text(FAKE_BENCH)
    (fake / "sglang-0.5.23.dist-info").mkdir()
    (fake / "sglang-0.5.23.dist-info" / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: sglang\nVersion: 0.5.23\n")
    python = tmp_path / "python"
    python.write_text(f"#!/bin/sh\nPYTHONPATH={fake}:{ROOT / 'tests' / 'standin'} "
                      f"PYTHONDONTWRITEBYTECODE=1 exec {sys.executable} \"$@\"\n")
    python.chmod(0o755)
    return python


def test_the_script_end_to_end_against_a_fake_sglang_that_is_the_stand_in(
        tmp_path, monkeypatch, capsys):
    script = _script()
    monkeypatch.setattr(script, "POLL_S", 0.2)
    monkeypatch.setattr(script, "SETTLE_S", 0)
    out = tmp_path / "out"
    code = script.main(["--python", str(_fake_sglang(tmp_path)), "--out", str(out),
                        "--standin-metrics", "prometheus_client", "--requests", "3",
                        "--output-len", "4", "--input-len", "8", "--stall-timeout", "60",
                        "--ready-timeout", "120"], gpu=lambda: (True, ["GPU 0: fake"]))
    printed = capsys.readouterr().out
    assert code == script.EXIT_EQUAL, printed
    assert "no difference that matters between SGLang and the stand-in" in printed
    report = json.loads((out / "report.json").read_text())
    assert report["status"] == "equal" and report["exit_code"] == 0
    assert set(report["answers"]) == {"sglang", "standin-prometheus_client"}
    assert all(a["health_generate"] == 200 and a["bench_exit"] == 0
               for a in report["answers"].values())
    # What was compared is there to read: the same requests counted on both sides.
    after = (out / "sglang" / "metrics-after.txt").read_text()
    assert 'sglang:num_requests_total{engine_type="unified",is_streaming="false"' in after
    grown = c.growth((out / "sglang" / "metrics-before.txt").read_text(), after)
    assert grown[("sglang:num_requests_total", "sglang:num_requests_total",
                  (("engine_type", "unified"), ("is_streaming", "false"),
                   ("model_name", "conformance-tiny")))] == 4  # the warmup and 3
    # The same comparison fails once the stand-in's answer differs.
    standin = {name: (out / "standin-prometheus_client" / name).read_text()
               for name in ("metrics-before.txt", "metrics-after.txt")}
    bad = standin["metrics-after.txt"].replace('le="4.0"', 'le="4"')
    assert c.matters(c.compare_metrics(after, bad))
