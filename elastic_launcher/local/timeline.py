"""A rehearsal's timeline: every event the driver saw or caused, with wall-clock timestamps
(timeline.json), read back by the rehearsal report."""

from __future__ import annotations

import time
from dataclasses import dataclass, field


@dataclass
class Timeline:
    """Every event with wall-clock timestamps, written to timeline.json."""

    started: float = field(default_factory=time.time)
    events: list[dict] = field(default_factory=list)

    def add(self, kind: str, **details) -> dict:
        now = time.time()
        event = {"t": round(now - self.started, 3), "time": now, "event": kind, **details}
        self.events.append(event)
        print(f"[rehearse +{event['t']:7.2f}s] {kind} " + " ".join(f"{k}={v}" for k, v in details.items()), flush=True)
        return event
