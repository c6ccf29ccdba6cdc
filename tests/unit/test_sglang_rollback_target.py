"""Issue 56, part 2: one function decides the release a rollback returns to, for the automatic
rollback after a failed deploy and the rollback by hand (module_utils/sglang_releases.py:
rollback_target, the filter sglang_rollback_target both task files call). Property tests over
release histories (good, failed, active, rolled back; a current link or none; a process that
runs another release or none; a target asked for or not): the rule is the one the two task
files held before, expression for expression, and it never picks a failed release unasked."""

import jinja2
from hypothesis import given, settings
from hypothesis import strategies as st

from ansible_collections.sglang.deploy.plugins.filter.sglang_releases import sglang_rollback_target
from ansible_collections.sglang.deploy.plugins.module_utils.sglang_releases import previous_good

STATUSES = ["good", "failed", "active", "rolled-back"]

# The two rules as the task files held them before (roles/sglang/tasks/rollback.yml's block
# vars, rollback/automatic.yml's set_fact), rendered by Jinja as Ansible renders them.
BY_HAND = """{% set unfinished = (serving is not none and serving != current
    and (releases | selectattr('id', 'equalto', serving) | map(attribute='status') | first
         | default('')) == 'rolled-back')
   or (serving is none and (asked | default('', true)) == current) %}
{{- {'unfinished': unfinished, 'target': releases | selectattr('id', 'equalto', asked
   | default(current if unfinished else previous_good, true)) | first | default({})} | tojson }}"""
AUTOMATIC = """{{ ((releases | selectattr('status', 'equalto', 'good')
    | selectattr('id', 'equalto', replaced) | first)
   | default(releases | selectattr('id', 'equalto', previous_good) | first, true)
   | default({}, true)) | tojson }}"""
ENV = jinja2.Environment()


def old_rule(template, **values):
    import json

    return json.loads(ENV.from_string(template).render(**values))


@st.composite
def histories(draw):
    statuses = draw(st.lists(st.sampled_from(STATUSES), min_size=0, max_size=7))
    releases = [{"id": f"2026120{i}T000000Z-{i:06x}", "status": s} for i, s in enumerate(statuses)]
    ids = [m["id"] for m in releases]
    maybe = st.sampled_from([None, *ids]) if ids else st.just(None)
    return releases, draw(maybe), draw(maybe), draw(maybe)


@settings(max_examples=400, deadline=None)
@given(histories())
def test_the_rollback_by_hand_picks_what_its_old_rule_picked(history):
    releases, current, serving, asked = history
    got = sglang_rollback_target(releases, current, serving, asked or "")
    want = old_rule(BY_HAND, releases=releases, current=current, serving=serving,
                    asked=asked or "", previous_good=previous_good(releases, current))
    assert (got["target"], got["unfinished"]) == (want["target"], bool(want["unfinished"]))
    if not asked and not got["unfinished"]:
        # Unasked and not finishing a cut rollback: a good release, never current.
        assert got["target"] == {} or (got["target"]["status"] == "good"
                                       and got["target"]["id"] != current)


@settings(max_examples=400, deadline=None)
@given(histories())
def test_the_automatic_rollback_picks_what_its_old_rule_picked(history):
    releases, current, replaced, _asked = history
    got = sglang_rollback_target(releases, current, replaced=replaced or "")
    want = old_rule(AUTOMATIC, releases=releases, replaced=replaced or "",
                    previous_good=previous_good(releases, current))
    assert got["target"] == want
    assert got["unfinished"] is False
    # Never a release that is not good: a failed deploy is never rolled back onto another.
    assert got["target"] == {} or got["target"]["status"] == "good"


def test_each_path_says_why():
    releases = [{"id": "a", "status": "good"}, {"id": "b", "status": "good"},
                {"id": "c", "status": "failed"}]
    assert sglang_rollback_target(releases, "c", replaced="b")["why"] == \
        "the release the deploy replaced"
    assert sglang_rollback_target(releases, "c", replaced="c")["target"]["id"] == "b"
    assert sglang_rollback_target(releases, "b", "b")["target"]["id"] == "a"
    cut = [{"id": "a", "status": "rolled-back"}, {"id": "b", "status": "good"}]
    finished = sglang_rollback_target(cut, "b", serving="a")
    assert finished["unfinished"] and finished["target"]["id"] == "b"
    assert sglang_rollback_target([], None, replaced="")["why"] == "no good release to restore"
