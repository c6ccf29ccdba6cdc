# Copyright: sglang-deploy contributors
# SPDX-License-Identifier: Apache-2.0
"""The one check of a GPU description (sglang_gpus, or what nvidia-smi lists) and the reading
of nvidia-smi's --query-gpu rows: numbers finite and in range, bytes decoded leniently.

A description stands in for the host's GPUs in the resolution's probe, which builds one row
per GPU: a count of 10^9 would build 10^9 rows beside a serving server. Standard library only
(the module and the preflight filter both use it).
"""

import re
import subprocess

from ansible_collections.sglang.deploy.plugins.module_utils.sglang_read import number, text_of

# What the modules ask nvidia-smi, in these orders (nvidia-smi --help-query-gpu,
# --help-query-compute-apps).
GPUS_QUERY = "--query-gpu=index,name,memory.total,pci.bus_id"
APPS_QUERY = "--query-compute-apps=pid,process_name,used_memory,gpu_bus_id"
CSV = "--format=csv,noheader,nounits"

KEYS = ("count", "name", "memory_mib", "compute_capability", "sm_count", "link")
# One host: NVL72 trays hold 4, the largest PCIe hosts 16; a what-if may describe more.
LIMITS = {"count": 256, "memory_mib": 10 ** 7, "sm_count": 10 ** 5}
CAPABILITY = re.compile(r"[0-9]{1,2}\.[0-9]{1,2}")


def check_gpus(gpus, complete=True, name="sglang_gpus"):
    """A description's problems, as the message a caller can act on (None when it is fine).

    `complete`: count, memory_mib and compute_capability are all required (the resolution's
    probe needs them); otherwise only count is, and the others are checked when given."""
    if not isinstance(gpus, dict):
        return f"{name} must be a mapping {{count, name, memory_mib, compute_capability}}"
    unknown = sorted(set(gpus) - set(KEYS))
    if unknown:
        return f"{name}: unknown keys {unknown}; allowed: {', '.join(KEYS)}"
    problem = _counts_problem(gpus, complete, name)
    if problem:
        return problem
    capability = gpus.get("compute_capability")
    if (complete or capability is not None) and not CAPABILITY.fullmatch(str(capability)):
        return f"{name}.compute_capability: like \"8.6\", got {_short(capability)}"
    if gpus.get("name") is not None and (not isinstance(gpus["name"], str)
                                         or len(gpus["name"]) > 200):
        return f"{name}.name: a GPU model name, got {_short(gpus['name'])}"
    return None


def _counts_problem(gpus, complete, name):
    """The first of count, memory_mib, sm_count that is not an integer in its range."""
    for key, most in LIMITS.items():
        value = gpus.get(key)
        if value is None and (key == "sm_count" or (not complete and key != "count")):
            continue
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= most:
            return f"{name}.{key}: an integer from 1 to {most}, got {_short(value)}"
    return None


def _short(value):
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def smi_rows(output, columns):
    """Rows of `nvidia-smi --query-gpu=... --format=csv,noheader,nounits` output (bytes or
    text), as lists of at least `columns` stripped fields whose first is a GPU index."""
    rows = []
    for line in text_of(output).replace("\0", " ").splitlines()[:1024]:
        parts = [part.strip() for part in line.split(",")]
        if len(parts) >= columns and number(parts[0], 0, 1023) is not None \
                and parts[0].isdigit():
            rows.append(parts)
    return rows


def memory_mib(field):
    """nvidia-smi's memory.total (MiB) when a sane number, else None (`inf`, `[N/A]`)."""
    return number(field, 1, LIMITS["memory_mib"])


def run_tool(cmd, timeout=60):
    """(exit code, stdout, stderr) of a host tool (nvidia-smi); a command that hangs is killed
    and reported, not raised; bytes that are not UTF-8 are replaced, not raised."""
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, errors="replace", check=False,
                              timeout=timeout)
    except subprocess.TimeoutExpired:
        return 124, "", f"{' '.join(cmd)} did not answer within {timeout} s (killed)"
    except OSError as exc:
        return 127, "", f"{' '.join(cmd)}: {exc}"
    return proc.returncode, proc.stdout, proc.stderr.strip()
