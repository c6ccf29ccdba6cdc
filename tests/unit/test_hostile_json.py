"""Hostile input, round five: every module's main() with each option, in turn, given JSON that
is deep (a list or a mapping nested 300 levels: ansible-core's own argument loading deep-copies
the arguments and stops near 450, before any module code runs) or large (a 2 MB string, a list
of 100,000 items), the other options as a playbook would leave them (absent, the required ones
present, a wait or a deadline 0.3 s). Each module answers with one JSON object and a message on
failure, in seconds: never a traceback, never a RecursionError or MemoryError of its own, never
minutes of work for input no playbook means (a 2 MB chart title was laid out glyph by glyph:
sglang_tune_chart now refuses what a chart cannot show)."""

import re
import tempfile

import pytest
from support import run_main
from test_hostile import MODULES, SECONDS, check_output, options_of

DEPTH = 300


def deep_list(depth=DEPTH):
    value = "x"
    for _ in range(depth):
        value = [value]
    return value


def deep_dict(depth=DEPTH):
    value = "x"
    for _ in range(depth):
        value = {"k": value}
    return value


SHAPES = {"deep list": deep_list(), "deep mapping": deep_dict(), "2 MB string": "x" * (2 << 20),
          "100,000 items": list(range(100_000))}
PLAIN = {"path": "{root}/missing", "str": "x", "int": 1, "float": 1.0, "bool": False,
         "list": [], "dict": {}, "raw": "x"}


def required(path, root):
    """The required options, with values of their type that lead nowhere."""
    args = {}
    for name, spec in options_of(path).items():
        spec = spec or {}
        if spec.get("required"):
            value = PLAIN.get(spec.get("type", "str"), "x")
            args[name] = value.format(root=root) if isinstance(value, str) else value
    return args


def secrets(path):
    """The options the module's argument_spec marks no_log (its DOCUMENTATION does not say)."""
    return set(re.findall(r'"(\w+)":\s*\{[^}]*"no_log":\s*True', path.read_text()))


# Not this project's: ansible-core's AnsibleModule takes every item of a list given to a
# no_log option as a secret and masks each in its own answer (remove_values, in
# AnsibleModule.__init__, before any module code runs): 100,000 items take it many minutes.
# A secret of 2 MB is this project's (it redacts, or refuses it).
SECRETS = {name: secrets(path) for name, path in MODULES}
CASES = [(name, path, option, shape) for name, path in MODULES
         for option in sorted(options_of(path)) for shape in SHAPES
         if not (option in SECRETS[name] and shape == "100,000 items")]


@pytest.mark.slow  # 481 cases, a minute on two cores: `make unit` and `make test` run them
@pytest.mark.parametrize("name, path, option, shape", CASES,
                         ids=[f"{c[0]}-{c[2]}-{c[3]}" for c in CASES])
def test_deep_and_large_json_in_each_option(name, path, option, shape):
    with tempfile.TemporaryDirectory() as tmp:
        args = {**required(path, tmp), option: SHAPES[shape]}
        for seconds in SECONDS & set(options_of(path)) - {option}:
            args[seconds] = 0.3  # what may wait (a poll, a deadline) ends at once
        text, code = run_main(path, args)
    assert "RecursionError" not in text, text[-2000:]
    check_output(text, code)  # one JSON object, no traceback, a message on failure
    assert len(text) < 8 << 20, f"{name} echoed {len(text)} bytes"
