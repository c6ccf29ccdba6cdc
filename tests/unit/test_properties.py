"""Property tests: whatever the input, the pure parts answer or raise their own error with a
message, never a bare traceback (TypeError, KeyError, AttributeError...)."""

import string

from ansible.errors import AnsibleFilterError
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support import examples

from ansible_collections.sglang.deploy.plugins.filter import sglang_preflight
from ansible_collections.sglang.deploy.plugins.filter import sglang_render
from ansible_collections.sglang.deploy.plugins.filter import sglang_verify
from ansible_collections.sglang.deploy.plugins.plugin_utils.sglang_filter_errors import own_errors


class Filters:
    """The filters as Ansible calls them (through FilterModule, with the error wrapper)."""

    def __init__(self, module):
        for name, func in module.FilterModule().filters().items():
            setattr(self, name, func)


pf, render, verify = (Filters(m) for m in (sglang_preflight, sglang_render, sglang_verify))
# Not a filter of its own: sglang_preflight reads the facts' nvidia-smi matrices with it.
nvidia_topology = own_errors(sglang_preflight.nvidia_topology)

SETTINGS = settings(max_examples=examples(300), deadline=None, suppress_health_check=[HealthCheck.too_slow])
scalars = st.one_of(st.none(), st.booleans(), st.integers(-10, 10**6), st.floats(allow_nan=False),
                    st.text(max_size=12))
json_like = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)),
    max_leaves=12)
cells = st.sampled_from(["X", "NV4", "NV12", "PIX", "PXB", "PHB", "NODE", "SYS", "OK", "CNS", ""])


@st.composite
def topology_texts(draw):
    n = draw(st.integers(1, 5))
    sep = draw(st.sampled_from(["\t", "  ", "   "]))
    indent = draw(st.sampled_from(["", " ", "    "]))
    header = indent + sep + sep.join(f"GPU{i}" for i in range(n)) + sep + "CPU Affinity"
    rows = [indent + f"GPU{i}" + sep + sep.join(draw(cells) or "X" for _ in range(n))
            + sep + "0-15" for i in range(n)]
    noise = draw(st.text(alphabet=string.printable, max_size=40))
    return "\n".join([header] + rows + ["", "Legend:", noise])


def expect_own_error(call):
    try:
        call()
    except AnsibleFilterError as exc:
        assert str(exc)


@SETTINGS
@given(topology_texts())
def test_topology_parses_generated_matrices(text):
    topo = nvidia_topology(text, text)
    assert topo["gpus"] >= 1
    assert all(int(a) < int(b) for a, b in (p.split("-") for p in topo["links"]))


@SETTINGS
@given(st.one_of(st.text(alphabet=string.printable, max_size=200), json_like))
def test_topology_never_tracebacks(text):
    expect_own_error(lambda: nvidia_topology(text))


def keyed(keys, values=json_like):
    """Mappings that use the real keys, with any values: where a careless .get() breaks."""
    return st.fixed_dictionaries({}, optional={k: values for k in keys})


facts_like = keyed(["sglang_version", "piecewise_blacklist", "model", "gpus", "nccl_conf"])
server_info_like = keyed(["cuda_graph_config", "disable_cuda_graph", "cuda_graph_max_bs",
                          "disable_piecewise_cuda_graph", "enable_piecewise_cuda_graph",
                          "internal_states", "speculative_algorithm", "speculative_num_steps",
                          "tp_size", "version"])
expect_like = keyed(["decode_cuda_graph", "prefill_cuda_graph", "piecewise_cuda_graph",
                     "custom_all_reduce", "nccl_p2p", "speculative", "tp_size",
                     "max_running_requests", "attention_backend"])
resolution_like = keyed(["ran", "resolved", "changes", "error", "log", "stubbed", "reason",
                         "unknown_flags", "known_flags", "sglang_version"])


@SETTINGS
@given(st.one_of(facts_like, json_like), st.dictionaries(st.text(max_size=10), scalars, max_size=6),
       json_like, st.one_of(expect_like, json_like), st.one_of(resolution_like, json_like))
def test_verdict_never_tracebacks(facts, args, env, expect, resolution):
    expect_own_error(lambda: pf.sglang_preflight(facts, args, env if isinstance(env, dict) else {},
                                                 expect if isinstance(expect, dict) else None,
                                                 resolution=resolution))


@SETTINGS
@given(st.dictionaries(st.sampled_from(["tp-size", "disable-cuda-graph", "speculative-algorithm",
                                        "speculative-num-steps", "speculative-eagle-topk",
                                        "enable-p2p-check", "disable-custom-all-reduce"]),
                       scalars, max_size=7),
       st.dictionaries(st.sampled_from(["NCCL_P2P_DISABLE", "CUDA_VISIBLE_DEVICES"]),
                       st.text(max_size=6), max_size=2),
       topology_texts())
def test_verdict_over_realistic_facts(args, env, topo):
    facts = {"sglang_version": "0.5.23", "model": {"architectures": ["X"]},
             "piecewise_blacklist": {"archs": ["X"], "defined_in": "m.py:1", "consulted": True,
                                     "consulted_in": ["s.py:2 (f)"]},
             "gpus": {"present": True, "count": 2, "topology_text": topo,
                      "devices": [{"index": 0, "name": "A"}, {"index": 1, "name": "A"}]}}
    try:
        verdict = pf.sglang_preflight(facts, args, env)
    except AnsibleFilterError as exc:
        assert str(exc)
        return
    statuses = {r["status"] for r in verdict["rows"]}
    assert statuses <= {"ok", "warn", "fail", "unknown"}
    expected = "fail" if "fail" in statuses else "unknown" if "unknown" in statuses else "ok"
    assert verdict["verdict"] == expected and verdict["ok"] == (expected == "ok")
    pf.sglang_preflight_table(verdict)


@SETTINGS
@given(st.one_of(server_info_like, json_like))
def test_server_info_normaliser_never_tracebacks(info):
    def call():
        eff = verify.sglang_effective(info)
        verify.sglang_verify(eff, {}, {})
    expect_own_error(call)


@SETTINGS
@given(st.dictionaries(st.text(max_size=12), scalars, max_size=6),
       st.dictionaries(st.text(max_size=12), st.one_of(scalars, json_like), max_size=6),
       st.one_of(st.integers(-5, 70000), st.text(max_size=6)))
def test_config_rendering_never_tracebacks(profile_args, overrides, port):
    profile = {"model": {"path": "/m"}, "args": profile_args}

    def call():
        args = render.sglang_server_config(profile, overrides, "", "", "127.0.0.1", port)
        text = render.sglang_release_files(args, {}, "", "")[0]["content"]
        assert text.startswith("#")
    expect_own_error(call)


@SETTINGS
@given(st.one_of(keyed(["description", "model", "args", "env", "expect", "smoke"]), json_like))
def test_a_profile_of_any_shape_never_tracebacks(profile):
    """The profile check runs first in the render (and in sglang_input_violations)."""
    expect_own_error(lambda: render.sglang_server_config(profile, {}, "", "", "127.0.0.1", 30000))
