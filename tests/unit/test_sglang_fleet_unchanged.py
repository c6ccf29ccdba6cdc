"""The fleet report reads again only the hosts whose release this run does not know."""

from ansible_collections.sglang.deploy.plugins.filter.sglang_fleet import (
    sglang_fleet_merge, sglang_fleet_outcomes, sglang_fleet_report, sglang_fleet_table,
    sglang_fleet_unread)

import pytest
from ansible.errors import AnsibleFilterError

# This run on hosts a (found unchanged, its release read in this run) and b (deployed).
HOSTS = ["a", "b"]
FAILED = [False, False]
UNCHANGED = [True, False]
PREPARED = [None, {"release": "r2"}]
PLANNED = [{"current": "r1", "manifest": {"status": "good", "sglang_version": "0.5.23"}}, {}]


def test_only_hosts_not_found_unchanged_are_read():
    assert sglang_fleet_unread(HOSTS, UNCHANGED) == ["b"]


def test_an_unchanged_host_is_reported_from_this_run_in_host_order():
    read = [{"item": "b", "current": "r2", "releases": [
        {"id": "r2", "status": "good", "sglang_version": "0.5.23"}]}]
    merged = sglang_fleet_merge(read, HOSTS, PLANNED)
    assert [m["item"] for m in merged] == ["a", "b"]
    lines = sglang_fleet_table(merged, sglang_fleet_outcomes(HOSTS, FAILED, UNCHANGED, PREPARED))
    assert lines[0] == "fleet: 2 hosts serving 2 release content(s)"
    assert lines[2].split() == ["a", "r1", "good", "0.5.23", "unchanged,", "proven", "serving",
                                "in", "this", "run"]
    assert lines[3].split()[:4] == ["b", "r2", "good", "0.5.23"]
    # The one filter the role calls: the table of the merged answers and this run's outcomes.
    assert sglang_fleet_report(read, HOSTS, FAILED, UNCHANGED, PREPARED, PLANNED) == lines


def test_a_column_that_is_not_one_value_per_host_is_refused():
    with pytest.raises(AnsibleFilterError, match=r"unchanged: expected one value per host \(2\)"):
        sglang_fleet_unread(HOSTS, [True])
