# Copyright: sglang-deploy contributors
# SPDX-License-Identifier: Apache-2.0
"""Numeric versions (an NVIDIA driver, a CUDA release) as every check compares them: one parser
for the host's prerequisites (sglang_host_prereqs) and the upgrade plan (sglang_upgrade)."""

import re

NUMERIC = re.compile(r"[0-9]{1,5}(\.[0-9]{1,5}){0,3}")


def numeric(value):
    """'580.95.05' -> (580, 95, 5); None when `value` is not such a version (not a string,
    `[N/A]`, a local label)."""
    if not isinstance(value, str) or not NUMERIC.fullmatch(value.strip()):
        return None
    return tuple(int(x) for x in value.strip().split("."))


def older(version, than):
    """Whether `version` is older than `than`; None when either is not a numeric version."""
    mine, theirs = numeric(version), numeric(than)
    if mine is None or theirs is None:
        return None
    return mine < theirs
