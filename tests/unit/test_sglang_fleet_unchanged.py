"""The fleet report reads again only the hosts whose release this run does not know."""

from ansible_collections.sglang.deploy.plugins.filter.sglang_fleet import (
    sglang_fleet_merge, sglang_fleet_outcomes, sglang_fleet_report, sglang_fleet_table,
    sglang_fleet_unread)

HOSTVARS = {
    "a": {"__sglang_unchanged": True, "__sglang_release_planned": {
        "current": "r1", "manifest": {"status": "good", "sglang_version": "0.5.23"}}},
    "b": {"__sglang_unchanged": False, "__sglang_release_prepared": {"release": "r2"}},
}


def test_only_hosts_not_found_unchanged_are_read():
    assert sglang_fleet_unread(["a", "b"], HOSTVARS) == ["b"]


def test_an_unchanged_host_is_reported_from_this_run_in_host_order():
    read = [{"item": "b", "current": "r2", "releases": [
        {"id": "r2", "status": "good", "sglang_version": "0.5.23"}]}]
    merged = sglang_fleet_merge(read, ["a", "b"], HOSTVARS)
    assert [m["item"] for m in merged] == ["a", "b"]
    lines = sglang_fleet_table(merged, sglang_fleet_outcomes(["a", "b"], HOSTVARS))
    assert lines[0] == "fleet: 2 hosts serving 2 release content(s)"
    assert lines[2].split() == ["a", "r1", "good", "0.5.23", "unchanged,", "proven", "serving",
                                "in", "this", "run"]
    assert lines[3].split()[:4] == ["b", "r2", "good", "0.5.23"]
    # The one filter the role calls: the table of the merged answers and this run's outcomes.
    assert sglang_fleet_report(read, ["a", "b"], HOSTVARS) == lines
