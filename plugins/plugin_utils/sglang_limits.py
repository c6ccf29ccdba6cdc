"""The smoke test's limits read once: for the smoke gate (sglang_verify) and for the one-pass
input check (sglang_input_violations), each refusal naming the variable and a value to give."""

import math

from ansible.errors import AnsibleFilterError


def _limit(value, variable, unit, optional=True):
    if optional and value in (None, ""):
        return None
    if isinstance(value, bool):
        value = "true" if value else "false"
    try:
        number = float(value)
    except (TypeError, ValueError):
        number = None
    if number is None or not math.isfinite(number) or number < 0:
        raise AnsibleFilterError(
            f"{variable}: {value!r} is not a number of {unit}; give one like "
            + ("45, or null for none" if optional else "0.10"))
    return number


def sglang_smoke_limits(min_decode_tok_s=None, max_ttft_ms=None, tolerance=0.10):
    """(floor, TTFT ceiling, tolerance) as numbers; a message naming the variable otherwise.

    Args:
        min_decode_tok_s (float): sglang_smoke_min_decode_tok_s, else the profile's
            smoke.min_decode_tok_s: tok/s per user (null or empty: no floor).
        max_ttft_ms (float): sglang_smoke_max_ttft_ms, else the profile's smoke.max_ttft_ms:
            milliseconds (null or empty: no cap).
        tolerance (float): sglang_smoke_regression_tolerance: a fraction, never null.
    Returns:
        list: [floor, TTFT cap, tolerance], each a number or none (no floor, no cap).
    """
    return (_limit(min_decode_tok_s, "sglang_smoke_min_decode_tok_s", "tokens/s"),
            _limit(max_ttft_ms, "sglang_smoke_max_ttft_ms", "milliseconds"),
            _limit(tolerance, "sglang_smoke_regression_tolerance", "a fraction", optional=False))
