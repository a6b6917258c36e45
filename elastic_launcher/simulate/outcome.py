"""What a simulation yields: one policy's run on one trace (`Outcome`), and its timeline of points
(elastic_launcher.simulate.simulator makes them; elastic_launcher.simulate.chart draws them)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Point:
    """The job from time `t` on, until the next point."""
    t: float
    capacity: int  # free nodes
    held: int  # nodes the job holds (productive or not)
    steps: float  # progress so far
    phase: str  # down | starting | running | stopping | failing


@dataclass
class Outcome:
    """One policy on one trace."""

    policy: str
    sizes: list[int]
    finished: bool
    hours: float  # to finish (or the horizon)
    gpu_hours_used: float  # held by the job, productive or not
    gpu_hours_productive: float
    gpu_hours_idle: float  # free capacity the job did not hold
    lost: dict[str, float]  # GPU-hours held without progress: starts, resizes, stops, failures (incl. redone steps)
    resizes: int
    failures: int
    steps: float
    steps_by_nodes: dict[int, float]  # committed steps per node count (redone steps count once)
    redone_steps: float
    tokens_per_gpu_hour: float
    timeline: list[Point] = field(default_factory=list)

    @property
    def idle_per_day(self) -> float:
        return self.gpu_hours_idle / max(self.hours / 24, 1e-9)
