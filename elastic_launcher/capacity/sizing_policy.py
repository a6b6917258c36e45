"""The HyperPod operator's sizing decisions for one elastic job, as a function of time and events.

Both the local rehearsal (which executes the decisions with real processes and wall-clock time) and
the capacity simulator (virtual time, modelled costs) drive this one class, so they cannot disagree
about when a job starts, shrinks or grows:
- the job runs at the largest allowed size that fits the free capacity;
- it shrinks as soon as the capacity drops below its size;
- it grows only after the larger capacity has been stable for `scaling_timeout`, at least
  `scale_up_snooze_time` after its last (re)start, and at least `min_stable_period` after its last
  resize (anti-thrashing);
- after a failure it waits `faulty_timeout` before it is started again.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class Decision:
    action: str  # "launch" (the job is down: start it), "resize" (stop, then relaunch at `nodes`), "stop"
    nodes: int
    reason: str


class Operator:
    def __init__(self, allowed: list[int], policy, min_stable_period: float = 0.0, now: float = 0.0):
        self.allowed, self.policy, self.min_stable = sorted(allowed), policy, min_stable_period
        self.available, self.capacity_since = 0, now
        self.size = 0  # nodes the job runs on; 0 while it is down
        self.last_restart = self.last_resize = -math.inf
        self.failed_at: float | None = None

    def target(self) -> int:
        """The largest allowed size that fits the free capacity (0: none fits)."""
        return max((n for n in self.allowed if n <= self.available), default=0)

    def set_capacity(self, nodes: int, now: float) -> bool:
        """The free capacity changed; returns whether it did."""
        if nodes == self.available:
            return False
        self.available, self.capacity_since = nodes, now
        return True

    def lose_node(self) -> None:
        """A node died with its worker: it leaves the capacity (the job fails; see `failed`)."""
        self.available = max(0, self.available - 1)

    def scale_up_at(self) -> float:
        p = self.policy
        return max(self.capacity_since + p.scaling_timeout, self.last_restart + p.scale_up_snooze_time,
                   self.last_resize + self.min_stable)

    def restart_at(self) -> float:
        return -math.inf if self.failed_at is None else self.failed_at + self.policy.faulty_timeout

    def decide(self, now: float) -> Decision | None:
        """What the operator does now, if anything."""
        target = self.target()
        if self.size == 0:
            if target and now >= self.restart_at():
                return Decision("launch", target, "failure recovery" if self.failed_at is not None else "start")
        elif target < self.size:
            return Decision("resize" if target else "stop", target, f"capacity {self.available} < {self.size} nodes")
        elif target > self.size and now >= self.scale_up_at():
            return Decision("resize", target, f"capacity for {target} nodes")
        return None

    def next_decision_at(self, now: float) -> float | None:
        """When a decision becomes due if nothing else happens (for event-driven simulation)."""
        target = self.target()
        if self.size == 0 and target:
            return max(now, self.restart_at())
        if target > self.size > 0:
            return max(now, self.scale_up_at())
        return None

    # --- what the job did -------------------------------------------------------------------------
    def launched(self, nodes: int, now: float) -> None:
        self.size, self.last_restart, self.failed_at = nodes, now, None

    def stopped(self, now: float) -> None:
        self.size, self.last_resize = 0, now

    def failed(self, now: float) -> None:
        self.size, self.failed_at = 0, now
