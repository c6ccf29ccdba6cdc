"""How far an SGLang start got, read from the journal of the unit's current invocation.

A 27B model takes minutes to start: one deadline for everything cannot tell a slow weight load
from a hung CUDA graph capture. The milestones below are the lines SGLang 0.5.23 logs on its
way up (earlier releases log the same, or the alternative given); each has its own deadline,
counted from the milestone before it. A milestone SGLang skips (no CUDA graph when disabled)
counts as passed once a later one shows. The journal is read through sglang_systemd.
"""

import re

from ansible_collections.sglang.deploy.plugins.module_utils.sglang_systemd import COMMAND_TIMEOUT, invocation_journal

# The overall ceiling of a start, in seconds: the one source of the readiness deadline's default
# (sglang_ready's `timeout`, the role's sglang_ready_timeout; test_sglang_ready.py holds both to
# it). Each milestone below has its own deadline inside it.
READY_TIMEOUT_S = 7200

# (name, patterns): the first line matching a pattern marks the milestone as reached.
MILESTONES = [
    # sglang/srt/entrypoints/engine.py: every resolved argument, once imported and resolved.
    ("arguments resolved", (r"server_args=",)),
    # srt/distributed/bootstrap.py: the scheduler process starts its parallel runtime.
    ("scheduler started", (r"Init parallel begin",)),
    # srt/model_executor/model_runner.py (a hub id downloads the weights in this step).
    ("weights loading", (r"Load weight begin",)),
    ("weights loaded", (r"Load weight end",)),
    # srt/mem_cache/kv_cache_configurator.py (0.5.23), "KV Cache is allocated" before.
    ("KV cache allocated", (r"Memory pool end", r"KV Cache is allocated")),
    # srt/model_executor/model_runner_components/cuda_graph_setup.py and older runners.
    ("CUDA graph capture", (r"(?i)capture .*cuda graph begin",)),
    # srt/entrypoints/http_server.py: warm-up done, the first start's kernel compiles included.
    ("server up", (r"The server is fired up and ready to roll",)),
]
NAMES = [name for name, _unused in MILESTONES]
_COMPILED = [[re.compile(p) for p in patterns] for _unused, patterns in MILESTONES]


class StageOverdue(Exception):
    """A milestone did not show within its deadline."""


def reached_index(lines):
    """Index of the last milestone the lines show (-1 for none)."""
    last = -1
    for line in lines:
        for index in range(last + 1, len(MILESTONES)):
            if any(p.search(line) for p in _COMPILED[index]):
                last = index
    return last


def invocation_lines(unit, timeout=lambda: COMMAND_TIMEOUT):
    """A reader of the journal lines of `unit`'s current invocation (this start only); each
    read is bounded by `timeout()` seconds (what is left of the caller's deadline)."""
    def read():
        invocation, lines = invocation_journal(unit, timeout())
        return lines if invocation else []
    return read


class StageWatch:
    """Milestones reached, with seconds from the start of the wait; deadlines per milestone.

    `timeouts` maps a milestone name to the seconds allowed since the milestone before it
    (since the wait began for the first); a name without a number has no deadline of its own.
    """

    def __init__(self, timeouts, read_lines, clock):
        unknown = sorted(set(timeouts or {}) - set(NAMES))
        if unknown:
            raise ValueError(f"unknown readiness stages {unknown}; known: {NAMES}")
        self.timeouts = {k: v for k, v in (timeouts or {}).items() if v}
        self.read_lines = read_lines
        self.clock = clock
        self.started = self.since = clock()
        self.index = -1
        self.reached = []

    def check(self):
        now = self.clock()
        index = reached_index(self.read_lines())
        if index > self.index:
            at = round(now - self.started, 1)
            self.reached += [{"stage": NAMES[i], "after_s": at} for i in range(self.index + 1, index + 1)]
            self.index, self.since = index, now
        if self.index + 1 < len(NAMES):
            waiting = NAMES[self.index + 1]
            limit = self.timeouts.get(waiting)
            if limit and now - self.since > float(limit):
                raise StageOverdue(
                    f"'{waiting}' did not show within {limit} s of "
                    f"{self.current() or 'the start'} (sglang_ready_stage_timeouts.{waiting})")
        return self.current()

    def current(self):
        return NAMES[self.index] if self.index >= 0 else None

    def state(self):
        """What a later call needs to go on watching where this one stopped (JSON)."""
        return {"started": self.started, "since": self.since, "index": self.index,
                "reached": list(self.reached)}

    def restore(self, state):
        """Go on from `state()` of an earlier call (the clock must be the wall clock)."""
        if state:
            self.started, self.since = float(state["started"]), float(state["since"])
            self.index, self.reached = int(state["index"]), list(state["reached"])
        return self

    def waiting(self):
        """One line on where the start is, for a progress display."""
        now = self.clock()
        if self.index + 1 >= len(NAMES):
            return f"{NAMES[-1]} at {self.reached[-1]['after_s']} s"
        after = f"{self.current()} ({round(now - self.since)} s ago)" if self.current() \
            else "the start"
        return (f"waiting for '{NAMES[self.index + 1]}' after {after}, "
                f"{round(now - self.started)} s in all")

    def summary(self):
        if not self.reached:
            return "no start-up milestone in the journal yet"
        done = ", ".join(f"{r['stage']} at {r['after_s']} s" for r in self.reached)
        return f"reached: {done}"
