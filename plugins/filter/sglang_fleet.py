"""Which host serves which release after a rollout: pure functions over the hosts' answers.

Unit-tested in tests/unit/test_sglang_fleet.py.
"""


from ansible.errors import AnsibleFilterError

from ansible_collections.sglang.deploy.plugins.plugin_utils.sglang_filter_errors import own_errors


def _aligned(hosts, **columns):
    """The columns as one dict per host, refused when a column is not one value per host."""
    if not isinstance(hosts, list):
        raise AnsibleFilterError("expected the rollout's hosts as a list")
    for name, column in columns.items():
        if not isinstance(column, list) or len(column) != len(hosts):
            raise AnsibleFilterError(f"{name}: expected one value per host ({len(hosts)}), "
                                     f"got {column!r:.80}")
    return {host: {name: column[i] for name, column in columns.items()}
            for i, host in enumerate(hosts)}


def sglang_fleet_outcomes(hosts, failed, unchanged, prepared):
    """{host: what this run did}: failed (and rolled back), deployed, or not reached.

    failed, unchanged, prepared: one value per host, in the order of hosts."""
    out = {}
    for host, run in _aligned(hosts, failed=failed, unchanged=unchanged, prepared=prepared).items():
        if run["failed"]:
            out[host] = "failed in this run"
        elif run["unchanged"]:
            out[host] = "unchanged, proven serving in this run"
        elif run["prepared"] is not None:
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


def sglang_fleet_unread(hosts, unchanged):
    """The hosts whose release this run does not know yet: the others need no read.

    Args:
        hosts (list of str): every host of the rollout, in order (ansible_play_hosts_all).
        unchanged (list of bool): one boolean per host: this run found it unchanged (and read its
            release).
    Returns:
        list of str: those of hosts not found unchanged, in order.
    """
    return [host for host, run in _aligned(hosts, unchanged=unchanged).items()
            if not run["unchanged"]]


def sglang_fleet_merge(read, hosts, planned):
    """The hosts' answers in host order: read ones as they are, unchanged ones from this run.

    A host found unchanged in this run was read in this run (its current release and manifest,
    one entry of planned), so its answer is built from that instead of read again."""
    by_host = {str(result.get("item")): result for result in read or []}
    out = []
    for host, run in _aligned(hosts, planned=planned).items():
        if host in by_host:
            out.append(by_host[host])
            continue
        planned = run["planned"] or {}
        manifest = planned.get("manifest") or {}
        out.append({"item": host, "current": planned.get("current") or "",
                    "releases": [{"id": planned.get("current"),
                                  "status": manifest.get("status", "-"),
                                  "sglang_version": manifest.get("sglang_version", "-")}]})
    return out


def sglang_fleet_report(read, hosts, failed, unchanged, prepared, planned):
    """Lines of the fleet's table: host, release it serves, status, sglang version, this run.

    Args:
        read (list of dict): the loop results of sglang_release state=info on the hosts
            sglang_fleet_unread named.
        hosts (list of str): every host of the rollout, in order (ansible_play_hosts_all).
        failed (list of bool): one boolean per host: its deploy failed in this run (and was rolled
            back).
        unchanged (list of bool): one boolean per host: this run found it unchanged.
        prepared (list): one value per host: the release this run prepared on it, none where it
            prepared none.
        planned (list of dict): one value per host: the current release and manifest this run read
            on it (sglang_release_plan's answer), or empty.
    Returns:
        list of str: a head line (hosts, release contents), the header, one row per host.
    """
    return sglang_fleet_table(sglang_fleet_merge(read, hosts, planned),
                              sglang_fleet_outcomes(hosts, failed, unchanged, prepared))


class FilterModule:
    def filters(self):
        return {"sglang_fleet_unread": own_errors(sglang_fleet_unread),
                "sglang_fleet_report": own_errors(sglang_fleet_report)}
