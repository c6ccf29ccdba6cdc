"""The task-boundary crash harness (tests/support/task_cuts.py) on a scripted operation: a
boundary the cut run never reaches because its task changed nothing there is said, not counted
as cut or as a violation; a run that passes a boundary it should have been cut at is one."""

from support import task_cuts

CHANGED = ["Render the release", "Start SGLang", "Remove the oldest releases"]


def operation(changed_in_cut_run, cut):
    """An operation whose whole run changes CHANGED; a cut run changes `changed_in_cut_run` and
    is cut (or not) as `cut` says."""
    def run(k, again=False):
        if k is None:
            return ({"changed_tasks": CHANGED, "events": [], "status": "successful", "msg": "",
                     "cut": False}, "r1", "successful")
        return ({"changed_tasks": changed_in_cut_run, "events": [], "status": "successful",
                 "msg": "", "cut": cut}, "r1", "successful")
    return run


def test_a_boundary_whose_task_changed_nothing_in_the_cut_run_is_not_reached_not_a_violation():
    report = task_cuts.enumerate_cuts(None, None, operation(CHANGED[:2], cut=False), every=False,
                                      at=(), ends=False)
    assert report["violations"] == [] and report["cut"] == 0  # nothing was asked (ends=False)
    report = task_cuts.enumerate_cuts(None, None, operation(CHANGED[:2], cut=False), every=False,
                                      at=("Remove",), ends=False)
    assert report["cut"] == 0 and report["violations"] == []
    assert report["unreached"] == ["cut 3 (Remove the oldest releases): the task changed nothing "
                                   "in this run"]


def test_a_run_that_passes_a_boundary_it_changed_at_without_being_cut_is_a_violation():
    report = task_cuts.enumerate_cuts(None, None, operation(CHANGED, cut=False), every=False,
                                      at=("Remove",), ends=False)
    assert report["unreached"] == []
    assert report["violations"] == ["cut 3 (Remove the oldest releases): the run was not cut"]
