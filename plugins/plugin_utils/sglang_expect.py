"""sglang_expect read once, for the preflight and the verification filters."""

from ansible.errors import AnsibleFilterError

LEVELS = ("required", "auto", "off")
EXPECT_KEYS = {"decode_cuda_graph", "prefill_cuda_graph", "custom_all_reduce", "nccl_p2p",
               "speculative", "tp_size", "max_running_requests", "attention_backend"}
SPEC_KEYS = {"algorithm", "num_steps", "eagle_topk", "num_draft_tokens"}
GRAPH_KEYS = ("decode_cuda_graph", "prefill_cuda_graph", "custom_all_reduce", "nccl_p2p")
# Before SGLang split its graphs per phase the prefill graph was the "piecewise" one.
ALIASES = {"piecewise_cuda_graph": "prefill_cuda_graph"}


def check_expect(expect):
    """sglang_expect with old names renamed, levels defaulted, each value checked.

    Args:
        expect (dict): the expectations, the profile's merged with sglang_expect
            (sglang_expect_merge).
    Returns:
        dict: the expectations, every level (decode_cuda_graph, prefill_cuda_graph,
            custom_all_reduce, nccl_p2p) set: required, auto or off.
    """
    expect = _expect_renamed(dict(expect or {}))
    unknown = sorted(set(expect) - EXPECT_KEYS)
    if unknown:
        raise AnsibleFilterError(
            f"sglang_expect: unknown keys {unknown}; allowed: {sorted(EXPECT_KEYS)}")
    expect.update(_expect_levels(expect))
    _expect_speculative(expect.get("speculative"))
    for key in ("tp_size", "max_running_requests"):
        _expect_positive(key, expect.get(key))
    _expect_backend(expect.get("attention_backend"))
    return expect


def _expect_renamed(expect):
    for old, new in ALIASES.items():
        if old in expect:
            if new in expect and expect[new] != expect[old]:
                raise AnsibleFilterError(
                    f"sglang_expect: {old} is the old name of {new}; set only {new}")
            expect[new] = expect.pop(old)
    return expect


def _expect_levels(expect):
    levels = {key: expect.get(key, "auto") for key in GRAPH_KEYS}
    for key, value in levels.items():
        if value not in LEVELS:
            raise AnsibleFilterError(
                f"sglang_expect.{key}: {value!r} is not one of {', '.join(LEVELS)}")
    return levels


def _expect_speculative(spec):
    if spec is not None and (not isinstance(spec, dict) or set(spec) - SPEC_KEYS):
        raise AnsibleFilterError(
            f"sglang_expect.speculative: a mapping of {sorted(SPEC_KEYS)}, got {spec!r}")


def _expect_positive(key, value):
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
        raise AnsibleFilterError(f"sglang_expect.{key}: a positive integer, got {value!r}")


def _expect_backend(backend):
    if backend is not None and (not isinstance(backend, str) or not backend):
        raise AnsibleFilterError(
            f"sglang_expect.attention_backend: a backend name such as flashinfer, got {backend!r}")


def speculative_diffs(wanted, actual, said):
    """`key: expected X, <said> Y` for each speculative setting of `wanted` that `actual`
    (a mapping or None) does not match, names compared case-insensitively."""
    actual = actual or {}
    return [f"{k}: expected {wanted[k]}, {said} {actual.get(k)}" for k in sorted(wanted or {})
            if str(wanted[k]).upper() != str(actual.get(k)).upper()]
