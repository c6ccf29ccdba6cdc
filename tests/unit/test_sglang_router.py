"""The router's command line and worker URLs from the inventory; the fleet report."""

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.sglang.deploy.plugins.filter.sglang_fleet import sglang_fleet_outcomes, sglang_fleet_table
from ansible_collections.sglang.deploy.plugins.filter.sglang_router import sglang_router_argv, sglang_router_worker_url

HOSTVARS = {"a": {"sglang_port": 30001}, "b": {"ansible_host": "10.0.0.2"},
            "c": {"sglang_advertise_host": "fd00::3", "ansible_host": "ignored"}}


def test_worker_urls_come_from_the_inventory():
    assert [sglang_router_worker_url(h, HOSTVARS) for h in "abc"] == [
        "http://a:30001", "http://10.0.0.2:30000", "http://[fd00::3]:30000"]


def test_argv_has_workers_and_no_key():
    argv = sglang_router_argv(["http://a:30000", "http://b:30000"], "0.0.0.0", 8000,
                              "round_robin", "127.0.0.1", 29000,
                              {"health_check_interval_secs": 5, "disable-retries": True,
                               "cors-allowed-origins": ["https://x.example", "https://y.example"],
                               "log-dir": None})
    assert argv == ["--host", "0.0.0.0", "--port", "8000", "--policy", "round_robin",
                    "--prometheus-host", "127.0.0.1", "--prometheus-port", "29000",
                    "--worker-urls", "http://a:30000", "http://b:30000",
                    "--health-check-interval-secs", "5", "--disable-retries",
                    "--cors-allowed-origins", "https://x.example", "https://y.example"]


@pytest.mark.parametrize("workers, extra, message", [
    ([], {}, "sglang_router_replica_group: no replica"),
    (["http://a:1"], {"api-key": "x"}, "sglang_router_api_key"),
    (["http://a:1"], {"worker_urls": ["http://b:1"]}, "the replica group's inventory"),
    (["http://a:1"], {"log-dir": "/var/log/my router"}, "one plain token"),
    (["http://a:1"], {"request-id-headers": "x$HOME"}, "one plain token"),
    (["http://a:1"], {"Bad Name": 1}, "not a router argument name"),
])
def test_bad_router_input_is_refused(workers, extra, message):
    with pytest.raises(AnsibleFilterError, match=message):
        sglang_router_argv(workers, extra=extra)


def test_fleet_table_says_which_host_serves_which_release():
    outcomes = sglang_fleet_outcomes(["a", "b", "c"], failed=[True, False, False],
                                     unchanged=[False, False, False],
                                     prepared=[{}, {"release": "r2"}, None])
    results = [
        {"item": "a", "current": "r1", "releases": [{"id": "r1", "status": "good",
                                                      "sglang_version": "0.5.23"}]},
        {"item": "b", "current": "r2", "releases": [{"id": "r2", "status": "good",
                                                      "sglang_version": "0.5.23"}]},
        {"item": "c", "failed": True, "msg": "unreachable"},
    ]
    lines = sglang_fleet_table(results, outcomes)
    assert lines[0] == "fleet: 3 hosts serving 2 release content(s)"
    assert lines[2].split() == ["a", "r1", "good", "0.5.23", "failed", "in", "this", "run"]
    assert lines[3].split()[:3] == ["b", "r2", "good"] and "deployed in this run" in lines[3]
    assert lines[4].startswith("c") and "unreadable" in lines[4]
