"""Crash points between tasks (tests/support/task_cuts.py): a deploy, a deploy whose release
fails and rolls back by itself, a rollback by hand and an upgrade move (a deploy to the other
SGLang version), each cut (the playbook process killed) right after each task that changed the
host, then run again; the invariants checked after the cut and after the next run. `make
crash-tasks` (SGLANG_TASK_CUTS=all) cuts the four at every such boundary; CI, to keep its time,
the rollback by hand at its first and last and after its stop, and a failing deploy after its
switch. Runs after test_rollback.py (A serves, both versions' envs
built)."""

import json
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.environ["MOLECULE_PROJECT_DIRECTORY"], "tests"))
from support import task_cuts  # noqa: E402
from support.runner import ANY_SPEED, play  # noqa: E402

KNOBS = {"SGLANG_STANDIN_TOK_S": "55", "SGLANG_STANDIN_TTFT_MS": "250",
         "SGLANG_STANDIN_TOKENS_PER_CHUNK": "3", "SGLANG_STANDIN_KNEE": "8"}
BASE = task_cuts.BASE
# The scenario's pin and test_rollback.py's OTHER_VERSION, whose env its upgrade built.
VERSIONS = ("0.5.23", "0.5.22")


def release_with(host, mark):
    """The newest release whose environment carries CUT_MARK=<mark> (the one a deploy meant: a
    run cut before its switch leaves one that never went live, and the next run makes another
    of the same content, which the cleanup later removes)."""
    found = host.run(f"grep -l 'CUT_MARK=\"{mark}\"' {BASE}/releases/*/sglang.env").stdout.split()
    return sorted(found)[-1].rsplit("/", 2)[-2] if found else None


def good_release(host):
    """The release a failing deploy must come back to: current when it is good, else the newest
    good one (what the automatic rollback restores)."""
    seen = task_cuts.state(host)
    if seen["status"] == "good":
        return seen["current"]
    good = host.run(
        "python3 -c 'import glob, json, os; print(\" \".join(sorted(os.path.basename(os.path.dirname(p)) "
        f"for p in glob.glob(\"{BASE}/releases/*/manifest.json\") "
        "if json.load(open(p)).get(\"status\") == \"good\")))'").stdout.split()
    return good[-1] if good else None


class Deploy:
    """A deploy of a new release (each run its own mark); again: the same deploy. With
    `versions`, an upgrade move: each run to the SGLang version `current` does not run
    (test_rollback.py built both envs)."""

    def __init__(self, host, failing=False, versions=None):
        self.host, self.failing, self.mark, self.good = host, failing, 0, None
        self.versions, self.version = versions, {}

    def __call__(self, k, again=False):
        if not again:
            self.mark += 1
            self.good = good_release(self.host)
            if self.versions:
                now = json.loads(self.host.check_output(
                    f"cat {BASE}/releases/{self.good}/manifest.json"))["sglang_version"]
                self.version = {"sglang_version": next(v for v in self.versions if v != now)}
        tag = "f" if self.failing else "u" if self.versions else "d"
        env = {**KNOBS, "CUT_MARK": f"{tag}{self.mark}"}
        if self.failing:
            env["SGLANG_STANDIN_REFUSE_FLAG"] = "enable-metrics"
        out = play("deploy.yml", {"sglang_env": env, **ANY_SPEED, **self.version,
                                  **(task_cuts.BREAK_LOCK if again else {})}, cut_at_changed=k)
        # A failing release rolls back to the good one that served; a good one is the target.
        target = self.good if self.failing else release_with(self.host, env["CUT_MARK"])
        return out, target, "failed" if self.failing else "successful"


class Rollback:
    """A rollback by hand between two good releases, each run to the other one."""

    def __init__(self, host, pair):
        self.host, self.pair, self.target = host, pair, None

    def __call__(self, k, again=False):
        if not again:
            now = task_cuts.state(self.host)["current"]
            self.target = self.pair[1] if now == self.pair[0] else self.pair[0]
        out = play("playbooks/rollback.yml", {"sglang_rollback_to": self.target,
                                              **(task_cuts.BREAK_LOCK if again else {})},
                   cut_at_changed=k)
        return out, self.target, "successful"


# Boundaries make crash-tasks found broken, cut in CI as well: a rollback by hand cut after its
# stop (its re-run refused: "it is current, and the unit runs no release"), and a failing deploy
# cut after its switch (its re-run failed without rolling back: the host stayed stopped on it).
STOP = "Stop the release that served"
SWITCH = "Point current at the release and the ml-env link"


@pytest.fixture(scope="module")
def reports(host):
    every = task_cuts.every_boundary()
    seen = {}
    before = task_cuts.state(host)["current"]
    if every:
        deploy = Deploy(host)
        seen["deploy"] = task_cuts.enumerate_cuts(host, play, deploy, every, "deploy")
        pair = (task_cuts.state(host)["current"], release_with(host, f"d{deploy.mark - 1}"))
    else:
        out, other, _ends = Deploy(host)(None)  # a second good release to go back and forth
        assert out["status"] == "successful", out["msg"]
        pair = (before, other)
    seen["rollback by hand"] = task_cuts.enumerate_cuts(host, play, Rollback(host, pair), every,
                                                        "rollback by hand", at=(STOP,))
    seen["automatic rollback"] = task_cuts.enumerate_cuts(
        host, play, Deploy(host, failing=True), every, "automatic rollback", at=(SWITCH,),
        ends=False)
    if every:
        seen["upgrade move"] = task_cuts.enumerate_cuts(
            host, play, Deploy(host, versions=VERSIONS), every, "upgrade move")
    return seen


def test_every_cut_between_tasks_ends_on_a_proven_release(reports):
    lines = []
    for op, r in reports.items():
        lines.append(f"{op}: {r['boundaries']} task boundaries, {r['states']} distinct host states "
                     f"(after a changed task), {r['cut']} cut, {r['runs']} runs, "
                     f"{len(r['violations'])} violations")
        lines += [f"  not reached: {u}" for u in r["unreached"]]
        lines += [f"  {v}" for v in r["violations"]]
    total = sum(r["cut"] for r in reports.values())
    print("\n" + "\n".join(lines) + f"\n{total} cuts between tasks, "
          f"{sum(len(r['violations']) for r in reports.values())} violations")
    assert all(r["cut"] >= min(1, r["states"]) for r in reports.values()), reports
    assert not [v for r in reports.values() for v in r["violations"]]
