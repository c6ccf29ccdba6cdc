"""The one numeric version parser the prerequisites and the upgrade plan compare with."""

import pytest

from ansible_collections.sglang.deploy.plugins.module_utils.sglang_versions import numeric, older


@pytest.mark.parametrize("text, parsed", [
    ("580.95.05", (580, 95, 5)), ("12.8", (12, 8)), (" 535 ", (535,)), ("[N/A]", None),
    ("2.8.0+cu128", None), ("", None), (None, None), (580, None), ("1.2.3.4.5", None),
    ("123456", None)])
def test_numeric(text, parsed):
    assert numeric(text) == parsed


@pytest.mark.parametrize("version, than, answer", [
    ("535.104.05", "570.26", True), ("580.95.05", "580.65.06", False), ("580", "580.0", True),
    ("570.26", "570.26", False), (None, "570", None), ("570", "garbage", None)])
def test_older(version, than, answer):
    assert older(version, than) is answer
