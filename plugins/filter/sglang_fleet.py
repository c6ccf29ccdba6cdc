"""Which host serves which release after a rollout: pure functions over the hosts' answers.

Unit-tested in tests/unit/test_sglang_fleet.py.
"""


from ansible.errors import AnsibleFilterError

from ansible_collections.sglang.deploy.plugins.plugin_utils.sglang_filter_errors import own_errors


def sglang_fleet_outcomes(hosts, hostvars):
    """{host: what this run did}: failed (and rolled back), deployed, or not reached."""
    out = {}
    for host in hosts:
        facts = hostvars[host]
        if facts.get("__sglang_rollout_failed"):
            out[host] = "failed in this run"
        elif facts.get("__sglang_unchanged"):
            out[host] = "unchanged, proven serving in this run"
        elif facts.get("__sglang_release_prepared") is not None:
            out[host] = "deployed in this run"
        else:
            out[host] = "not reached: unchanged"
    return out


def _fleet_row(result, outcomes):
    """host, release it serves, status, sglang version, this run: one host's loop result."""
    host = str(result.get("item"))
    if result.get("failed") or result.get("unreachable"):
        return (host, "?", "unknown", "?", f"unreadable: {result.get('msg', '')}"[:80])
    current = result.get("current") or ""
    release = next((r for r in result.get("releases") or [] if r.get("id") == current), {})
    return (host, current or "(none)", release.get("status", "-"),
            release.get("sglang_version", "-"), outcomes.get(host, "-"))


def sglang_fleet_table(results, outcomes):
    """Lines of a table: host, release it serves, status, sglang version, this run."""
    if not isinstance(results, list) or not isinstance(outcomes, dict):
        raise AnsibleFilterError("sglang_fleet_table: expected the loop results and outcomes")
    rows = [("host", "serves release", "status", "sglang", "this run")]
    rows += [_fleet_row(result, outcomes) for result in results]
    widths = [max(len(str(row[i])) for row in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(str(cell).ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows]
    # Ids are a per-host timestamp plus the content hash: hosts deployed in different batches
    # serve the same release content under different ids.
    contents = {row[1].rsplit("-", 1)[-1] for row in rows[1:] if row[1] not in ("?", "(none)")}
    lines.insert(0, f"fleet: {len(rows) - 1} hosts serving {len(contents)} release content(s)")
    return lines


def sglang_fleet_unread(hosts, hostvars):
    """The hosts whose release this run does not know yet: the others need no read."""
    return [host for host in hosts if not hostvars[host].get("__sglang_unchanged")]


def sglang_fleet_merge(read, hosts, hostvars):
    """The hosts' answers in host order: read ones as they are, unchanged ones from this run.

    A host found unchanged in this run was read in this run (its current release and manifest,
    `__sglang_release_planned`), so its answer is built from that instead of read again."""
    by_host = {str(result.get("item")): result for result in read or []}
    out = []
    for host in hosts:
        if host in by_host:
            out.append(by_host[host])
            continue
        planned = hostvars[host].get("__sglang_release_planned") or {}
        manifest = planned.get("manifest") or {}
        out.append({"item": host, "current": planned.get("current") or "",
                    "releases": [{"id": planned.get("current"),
                                  "status": manifest.get("status", "-"),
                                  "sglang_version": manifest.get("sglang_version", "-")}]})
    return out


def sglang_fleet_report(read, hosts, hostvars):
    """Lines of the fleet's table: host, release it serves, status, sglang version, this run.

    Args:
        read: the loop results of sglang_release state=info on the hosts sglang_fleet_unread
            named.
        hosts: every host of the rollout, in order (ansible_play_hosts_all).
        hostvars: Ansible's hostvars, for what this run did on each host (failed, unchanged,
            deployed) and the release an unchanged host was found serving.
    """
    return sglang_fleet_table(sglang_fleet_merge(read, hosts, hostvars),
                              sglang_fleet_outcomes(hosts, hostvars))


class FilterModule:
    def filters(self):
        return {"sglang_fleet_unread": own_errors(sglang_fleet_unread),
                "sglang_fleet_report": own_errors(sglang_fleet_report)}
