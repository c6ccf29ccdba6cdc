"""sglang_prometheus_files: a host's target, rules and dashboard written in one call, whole or not
at all, the rules checked by promtool before they replace the old ones, never through a symlink."""

import os

import pytest
from support import load_module

files = load_module("sglang_prometheus_files")
PACK = {"targets/gpu1.json": '[{"targets": ["10.0.0.1:30000"]}]\n',
        "rules/gpu1.rules.yml": "groups: []\n", "dashboards/sglang.json": "{}\n"}


def args(pack_dir, promtool="", host="gpu1", **content):
    """The module's arguments for PACK (or `content` over it: target, rules, dashboard)."""
    given = {"target": PACK["targets/gpu1.json"], "rules": PACK["rules/gpu1.rules.yml"],
             "dashboard": PACK["dashboards/sglang.json"], **content}
    return {"dir": str(pack_dir), "host": host, "promtool": promtool, **given}


def promtool(tmp_path, rc=0, says=""):
    """A promtool that exits `rc` saying `says`, and records what it checked."""
    tool = tmp_path / "promtool"
    tool.write_text(f"#!/bin/sh\necho \"$@\" >> {tmp_path}/checked\necho '{says}' >&2\nexit {rc}\n")
    tool.chmod(0o755)
    return str(tool)


runner = files.run_argv

def test_the_pack_is_written_once_and_a_second_call_changes_nothing(tmp_path):
    pack = tmp_path / "pack"
    tool = promtool(tmp_path)
    first = files.run(args(pack, tool), False, runner)
    assert first["changed"] and first["rules_changed"] and first["promtool"] == tool
    assert sorted(first["written"]) == sorted(PACK)
    for name, content in PACK.items():
        assert (pack / name).read_text() == content
        assert (pack / name).stat().st_mode & 0o777 == 0o644
    assert (pack / "rules").stat().st_mode & 0o777 == 0o755
    assert "check rules" in (tmp_path / "checked").read_text()
    again = files.run(args(pack, tool), False, runner)
    assert not again["changed"] and not again["rules_changed"] and again["written"] == []
    # Only the target changes: the rules are not checked nor reloaded again.
    third = files.run(args(pack, tool, target="[]\n"), False, runner)
    assert third["written"] == ["targets/gpu1.json"] and not third["rules_changed"]


def test_prometheus_is_reloaded_when_and_only_when_its_rules_changed(tmp_path):
    pack, calls, systemd = tmp_path / "pack", [], {"rc": 0}

    def systemctl(argv, timeout):
        calls.append(argv)
        return systemd["rc"], "", "Unit prometheus.service not loaded."

    reload = {"reload": "prometheus.service"}
    assert files.run(dict(args(pack), **reload), True, systemctl)["reloaded"] is None
    assert files.run(dict(args(pack), **reload), False, systemctl)["reloaded"] == "prometheus.service"
    assert calls == [["systemctl", "reload", "--", "prometheus.service"]]
    again = files.run(dict(args(pack, target="[]\n"), **reload), False, systemctl)
    assert again["written"] == ["targets/gpu1.json"] and again["reloaded"] is None
    assert len(calls) == 1
    systemd["rc"] = 1
    with pytest.raises(files.MonitoringFileError, match="rules are written, but systemctl reload "
                       "prometheus.service failed: Unit prometheus.service not loaded"):
        files.run(dict(args(pack, rules="groups: [b]\n"), **reload), False, systemctl)


def test_rules_promtool_refuses_never_replace_the_old_ones(tmp_path):
    pack = tmp_path / "pack"
    files.run(args(pack), False, runner)
    with pytest.raises(files.MonitoringFileError, match="promtool refused rules/gpu1.rules.yml.*bad yaml"):
        files.run(args(pack, promtool(tmp_path, 1, "bad yaml"), rules="groups: [oops\n"),
                  False, runner)
    assert (pack / "rules/gpu1.rules.yml").read_text() == "groups: []\n"
    assert sorted(os.listdir(pack / "rules")) == ["gpu1.rules.yml"]  # no temp file left


def test_check_mode_writes_nothing_and_shows_the_diff(tmp_path):
    pack = tmp_path / "pack"
    out = files.run(args(pack, "auto"), True, runner)
    assert out["changed"] and not pack.exists()
    assert {d["after"] for d in out["diff"]} == set(PACK.values())


@pytest.mark.parametrize("where", ["pack", "pack/rules", "pack/rules/gpu1.rules.yml"])
def test_a_symlink_is_refused_never_followed(tmp_path, where):
    (tmp_path / "pack/rules").mkdir(parents=True)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    link = tmp_path / where
    if link.is_dir():
        os.rename(link, tmp_path / "moved")
    link.symlink_to(elsewhere if where != "pack/rules/gpu1.rules.yml" else elsewhere / "x")
    with pytest.raises(files.MonitoringFileError, match="is a symlink"):
        files.run(args(tmp_path / "pack"), False, runner)
    assert os.listdir(elsewhere) == []


@pytest.mark.parametrize("host", ["", "..", "../etc/x", "a/b", "x\ny"])
def test_a_host_name_that_would_climb_out_of_the_pack_is_refused(tmp_path, host):
    with pytest.raises(files.MonitoringFileError, match="the pack's file names are made from it"):
        files.run(args(tmp_path / "pack", host=host), False, runner)
    assert not (tmp_path / "pack").exists()
