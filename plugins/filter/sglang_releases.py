"""The release a rollback returns to, one rule for the automatic rollback and the rollback by
hand (module_utils/sglang_releases.py: rollback_target), tested with property tests over release
histories in tests/unit/test_sglang_rollback_target.py."""

from ansible.errors import AnsibleFilterError

from ansible_collections.sglang.deploy.plugins.module_utils.sglang_releases import rollback_target
from ansible_collections.sglang.deploy.plugins.plugin_utils.sglang_filter_errors import own_errors
from ansible_collections.sglang.deploy.plugins.plugin_utils.sglang_values import plain


def sglang_rollback_target(releases, current, serving=None, asked="", replaced=None):
    """{target, unfinished, why}: the release a rollback returns to.

    After a failed deploy (`replaced` given), the release that deploy replaced when it is good,
    else the newest good release other than current. By hand, the release asked for; else, for
    a rollback cut after its switch (the unit runs the release rolled back from, or nothing
    runs and the release asked for is current), current, to finish it; else the newest good
    release other than current.

    Args:
        releases (list): the releases, oldest first (sglang_release state=info's releases).
        current (str): the release the current link names (none: none).
        serving (str): the release the unit's process started from (sglang_service_state's
            serving_release; none when nothing runs).
        asked (str): sglang_rollback_to, the release asked for (empty: none).
        replaced (str): for the automatic rollback, the release the failed deploy replaced (it
            was current before the switch); none for a rollback by hand.
    Returns:
        dict: {target: the release's manifest ({} when there is none), unfinished: whether a
        rollback cut after its switch is finished, why: how the target was chosen}.
    """
    releases = plain(releases)
    if not isinstance(releases, list) or not all(isinstance(m, dict) for m in releases):
        raise AnsibleFilterError("sglang_rollback_target takes the list of release manifests "
                                 "(sglang_release state=info's releases)")
    return rollback_target(releases, plain(current) or None, plain(serving) or None,
                           plain(asked) or "", None if replaced is None else plain(replaced) or "")


class FilterModule:
    def filters(self):
        return {"sglang_rollback_target": own_errors(sglang_rollback_target)}
