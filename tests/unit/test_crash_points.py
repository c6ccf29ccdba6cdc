"""The crash-point harness (tests/support/crash_points.py) can fail: each scenario holds with
the code as it is, and a switch or a cleanup written the way the versions before wrote them is
caught at the crash points that break them. `make crash` runs every scenario and prints the
summary; here, one scenario and the two versions before."""

import os
import shutil

import pytest
from support import crash_points as cp

from ansible_collections.sglang.deploy.plugins.module_utils import sglang_envs as envs


@pytest.mark.slow
def test_a_scenario_holds_every_invariant_at_every_crash_point(tmp_path):
    result = cp.run_scenario("deploy: switch from the layout before", str(tmp_path))
    assert result["points"] > 5 and result["runs"] == 3 * result["points"]
    assert result["violations"] == []


def _switch_of_the_version_before(base_dir, release, env_link, rolled_back_reason=None):
    """current first, then the ml-env link straight at envs/<id>: two pointers, two renames."""
    manifest = cp.store.require(base_dir, release)
    env = manifest["env"]
    current = cp.read_current(base_dir)
    manifest = cp.switch._point_current(base_dir, release, current, rolled_back_reason)
    envs.switch_link(env_link, envs.env_path(base_dir, env))
    return manifest


@pytest.mark.slow
def test_a_switch_of_two_pointers_is_caught(tmp_path, monkeypatch):
    monkeypatch.setattr(cp.switch, "_switch", _switch_of_the_version_before)
    result = cp.run_scenario("rollback: switch back", str(tmp_path))
    assert any(": S2 " in v for v in result["violations"]), result["violations"]


@pytest.mark.slow
def test_a_cleanup_that_removes_in_place_is_caught(tmp_path, monkeypatch):
    def in_place(path, _trash):
        if os.path.lexists(path):
            shutil.rmtree(path)
    monkeypatch.setattr(cp.clean, "discard", in_place)
    result = cp.run_scenario("cleanup: releases, envs and cache", str(tmp_path), faults=["kill"])
    assert any(": N2 " in v and "half releases" in v for v in result["violations"])


@pytest.mark.slow
def test_a_drift_check_file_written_in_place_is_caught(tmp_path, monkeypatch):
    """The monitoring step replaces its files whole: one written in place, cut after the open
    emptied it, is what the timer or node_exporter would read half of."""
    def in_place(path, data, mode=None, prefix=None, move=None):
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(data)
    monkeypatch.setattr(cp.driftmod.sglang_files, "write_atomic", in_place)
    monkeypatch.setattr(cp.driftmod.sglang_drift, "write_atomic", in_place)  # the textfile
    result = cp.run_scenario("monitoring: the drift check and its textfile", str(tmp_path),
                             faults=["kill"])
    assert any(": M2 " in v for v in result["violations"]), result["violations"]
    assert any(": M1 " in v for v in result["violations"]), result["violations"]
