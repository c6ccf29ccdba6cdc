#!/usr/bin/env python3
"""Benchmark: what does a no-change re-run cost against a one-task ping play on the same host?

Run it against a host that `molecule converge` deployed (the molecule inventory is found by
the scenario name). Each round runs the ping play and the converge playbook one after the
other (paired, so both see the same load), checks that the re-run changed nothing, and prints
the median of each and their ratio. Exits 1 when a re-run changed something or the ratio is
above --max-ratio (5 unless told).

Usage (under the molecule lock, after `molecule converge -s default`):
  python tests/bench/bench_nochange.py [-s default] [-n 5] [--max-ratio 5]
"""

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

PING_PLAY = """---
- name: Ping
  hosts: all
  gather_facts: false
  tasks:
    - name: Ping
      ansible.builtin.ping:
"""


def molecule_inventory(scenario):
    """The scenario's inventory: MOLECULE_EPHEMERAL_DIRECTORY when set, else the newest of
    molecule's ephemeral directories for it (~/.ansible/tmp/molecule.*.<scenario> in
    molecule 25 and later, ~/.cache/molecule/<project>/<scenario> before)."""
    if os.environ.get("MOLECULE_EPHEMERAL_DIRECTORY"):
        bases = [Path(os.environ["MOLECULE_EPHEMERAL_DIRECTORY"])]
    else:
        bases = sorted((Path.home() / ".ansible" / "tmp").glob(f"molecule.*.{scenario}"),
                       key=lambda p: p.stat().st_mtime, reverse=True)
        bases.append(Path.home() / ".cache" / "molecule" / ROOT.name / scenario)
    for base in bases:
        if (base / "inventory").exists():
            return base / "inventory"
    sys.exit(f"no inventory for scenario {scenario} in {[str(b) for b in bases]}: run "
             f"`molecule converge -s {scenario}` first")


def run(argv, env):
    started = time.monotonic()
    proc = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    elapsed = time.monotonic() - started
    if proc.returncode != 0:
        sys.stdout.write(proc.stdout[-4000:])
        sys.exit(f"{' '.join(argv)} failed ({proc.returncode})")
    return elapsed, proc.stdout


def recap(stdout):
    """ok / changed / tasks figures summed over the PLAY RECAP lines."""
    totals = {}
    for line in stdout.splitlines():
        if re.match(r"^\S+\s+:\s+ok=", line):
            for key, value in re.findall(r"(\w+)=(\d+)", line):
                totals[key] = totals.get(key, 0) + int(value)
    return totals


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("-s", "--scenario", default="default")
    ap.add_argument("-n", "--rounds", type=int, default=5)
    ap.add_argument("--max-ratio", type=float, default=5.0)
    ap.add_argument("--playbook", default=None, help="defaults to molecule/<scenario>/converge.yml")
    args = ap.parse_args()

    inventory = molecule_inventory(args.scenario)
    playbook = args.playbook or str(ROOT / "molecule" / args.scenario / "converge.yml")
    env = dict(os.environ)
    # As molecule's provisioner has it (.config/molecule/config.yml): the pipelined podman
    # connection the inventory names, the roles and the collection of this tree.
    env.update({
        "ANSIBLE_CONNECTION_PLUGINS": str(ROOT / "tests" / "support" / "connection"),
        "ANSIBLE_PIPELINING": "true",
        "ANSIBLE_COLLECTIONS_PATH": str(ROOT / "collections"),
        "ANSIBLE_ROLES_PATH": str(ROOT / "roles"),
        "SGLANG_DEPLOY_WHEELHOUSE": str(ROOT / ".cache" / "wheelhouse"),
        "ANSIBLE_FORCE_COLOR": "0",
    })
    with tempfile.NamedTemporaryFile("w", suffix=".yml", delete=False) as f:
        f.write(PING_PLAY)
        ping = f.name
    pings, reruns = [], []
    try:
        for i in range(args.rounds):
            elapsed, _ = run(["ansible-playbook", "-i", str(inventory), ping], env)
            pings.append(elapsed)
            elapsed, out = run(["ansible-playbook", "-i", str(inventory), playbook], env)
            reruns.append(elapsed)
            totals = recap(out)
            print(f"round {i + 1}: ping {pings[-1]:.2f} s, no-change re-run {elapsed:.2f} s "
                  f"(ok={totals.get('ok')} changed={totals.get('changed')} "
                  f"skipped={totals.get('skipped')})", flush=True)
            if totals.get("changed", 0):
                sys.stdout.write(out[-6000:])
                sys.exit("the re-run changed something: not a no-change run")
    finally:
        os.unlink(ping)
    ping_median, rerun_median = statistics.median(pings), statistics.median(reruns)
    ratio = rerun_median / ping_median
    print(f"median of {args.rounds}: no-change re-run {rerun_median:.2f} s, "
          f"ping {ping_median:.2f} s, ratio {ratio:.1f}x (target <= {args.max_ratio}x)")
    return 0 if ratio <= args.max_ratio else 1


if __name__ == "__main__":
    sys.exit(main())
