"""Capacity traces: how many nodes are free for the job, and when. Read by the rehearsal
(`local.trace`) and the simulator (`simulate.capacity`).

An event fires at a `time` or when the job reaches a `step`, and either sets the free capacity
(`nodes`: a drop is a graceful scale-down) or kills nodes without notice (`kill: true` one node,
`kill: N` N nodes at once: they die with their workers, the job fails and restarts from its peers'
copies or its last checkpoint; a preemption burst is several kills). Times
are seconds, durations (`90s`, `15m`, `6h`, `1d12h`) or clock times (`22:00`, with
`repeat_daily`). A trace is a YAML list, a YAML or CSV file (columns time|step, nodes[, kill]), or
the name of a file under traces/.
"""

from __future__ import annotations

import csv
import difflib
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import yaml

from elastic_launcher import ROOT
from training.contract.errors import ConfigError

DAY = 86400.0
UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": DAY}
_CLOCK = re.compile(r"(\d{1,2}):(\d{2})(?::(\d{2}))?")
_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)\s*([a-zA-Z]+)")


@dataclass(frozen=True)
class TraceEvent:
    step: int | None = None
    time: float | None = None
    nodes: int | None = None
    kill: int = 0  # nodes killed at once

    def due(self, step: float, elapsed: float) -> bool:
        return (self.step is not None and step >= self.step) or (self.time is not None and elapsed >= self.time)


def parse_time(value, where: str) -> tuple[float, bool]:
    """(seconds, whether it was a clock time) of `value`: a number, a duration or HH:MM[:SS]."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value), False
    text = str(value).strip()
    clock = _CLOCK.fullmatch(text)
    if clock:
        h, m, s = int(clock[1]), int(clock[2]), int(clock[3] or 0)
        if h > 23 or m > 59 or s > 59:
            raise ConfigError(f"{where}={text!r} is not a clock time: use HH:MM between 00:00 and 23:59")
        return h * 3600.0 + m * 60 + s, True
    parts = _DURATION_PART.findall(text)
    if not parts or _DURATION_PART.sub("", text).strip():
        raise ConfigError(f"{where}={text!r} is not a time: use seconds, a duration such as 90s, 15m, 6h, 1d12h, "
                          f"or a clock time HH:MM")
    for _, unit in parts:
        if unit not in UNITS:
            raise ConfigError(f"{where}={text!r} has an unknown unit '{unit}': use s, m, h or d (or HH:MM)")
    return sum(float(n) * UNITS[u] for n, u in parts), False


# Every scalar as text (libyaml when available), typed below as CSV cells are: twice as fast on long
# traces, and an unquoted clock time such as 20:00 stays a clock time (YAML 1.1 would read 1200).
_YAML_LOADER = getattr(yaml, "CBaseLoader", yaml.BaseLoader)


def _trace_file(value: str, key: str) -> Path:
    """A path (from here, or from the project: `traces/demo.yaml` works from any directory and in an
    installed copy), or a name under traces/ (with or without .yaml), or a one-line error with the near names."""
    for path in (Path(value), ROOT / value, ROOT / "traces" / value, ROOT / "traces" / f"{value}.yaml"):
        if path.is_file():
            return path
    shipped = sorted(p.name if p.suffix != ".yaml" else p.stem for p in (ROOT / "traces").glob("*.*"))
    near = difflib.get_close_matches(value, shipped, n=1) or difflib.get_close_matches(Path(value).name, shipped, n=1)
    hint = f"did you mean {key}={near[0]}? " if near else ""
    if "/" in value or Path(value).suffix:
        raise ConfigError(f"{key}={value!r}: no such file; {hint}shipped traces: {', '.join(shipped)}")
    raise ConfigError(f"{key}={value!r} is neither a list of events nor a trace file (YAML or CSV, or a name under "
                      f"traces/): {hint}shipped traces: {', '.join(shipped)}")


def _rows(value, key: str) -> list:
    if not isinstance(value, str):
        return value
    path = _trace_file(value, key)
    if path.suffix == ".csv":
        with open(path, newline="") as f:
            rows = []
            for row in csv.DictReader(f):
                if None in row or None in row.values():
                    raise ConfigError(f"{key}={value!r}: {path} line {len(rows) + 2} has "
                                      f"{'more' if None in row else 'fewer'} columns than its header "
                                      f"({', '.join(k for k in row if k)}): fix that row")
                rows.append({k.strip(): _scalar(v) for k, v in row.items() if v != ""})
            return rows
    try:
        rows = yaml.load(path.read_text(), Loader=_YAML_LOADER)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"{path} line {mark.line + 1}" if mark else str(path)
        raise ConfigError(f"{key}={value!r}: {where} is not valid YAML ({getattr(e, 'problem', None) or e}): "
                          f"a trace is a list of {{time|step: T, nodes: N}} or {{time|step: T, kill: true}}") from None
    if isinstance(rows, list):
        return [{k: _scalar(v) for k, v in row.items()} if isinstance(row, dict) else row for row in rows]
    return rows


def _scalar(text):
    """A trace cell (CSV, or YAML read as text) as a bool, int, float or string."""
    if not isinstance(text, str):
        return text
    text = text.strip()
    if text.isdigit():
        return int(text)
    if text.lower() in ("true", "false"):
        return text.lower() == "true"
    try:
        return int(text)
    except ValueError:
        try:
            return float(text)
        except ValueError:
            return text


def parse_trace(value, max_nodes: int, key: str = "local.trace", repeat_daily: bool = False,
                horizon: float = 0.0) -> list[TraceEvent]:
    """Validated events in firing order. Without an event at the start, the job begins with
    `max_nodes` free. `repeat_daily` repeats a trace of one day (clock times or durations < 1 day)
    up to `horizon` seconds."""
    value = _rows(value, key)
    if value is None:
        raise ConfigError(f"{key} is not set: give capacity events, e.g. [{{time: 0, nodes: 2}}, {{time: 6h, nodes: 3}}]")
    if not isinstance(value, list) or not value:
        raise ConfigError(f"{key}={value!r} must be a non-empty list of events")
    events, last_time, clocks = [], None, set()
    for i, raw in enumerate(value):
        where = f"{key}[{i}]"
        if not isinstance(raw, dict) or set(raw) - {"step", "time", "nodes", "kill"}:
            raise ConfigError(f"{where}={raw!r}: use {{time|step: T, nodes: N}} or {{time|step: T, kill: true}}")
        if ("step" in raw) == ("time" in raw):
            raise ConfigError(f"{where}={raw!r} needs exactly one of step or time")
        nodes, kill = raw.get("nodes"), raw.get("kill", 0)
        if kill is not True and (not isinstance(kill, int) or kill < 0):
            raise ConfigError(f"{where}.kill={kill!r} must be true (one node) or a number of nodes >= 1")
        kill = int(kill)
        if (nodes is None) == (not kill):
            raise ConfigError(f"{where}={raw!r} needs either nodes (the free capacity) or kill: true (or kill: N)")
        if nodes is not None and (not isinstance(nodes, int) or isinstance(nodes, bool) or nodes < 0):
            raise ConfigError(f"{where}.nodes={nodes!r} must be a whole number >= 0")
        step = raw.get("step")
        if step is not None and (not isinstance(step, int) or step < 0):
            raise ConfigError(f"{where}.step={step!r} must be a whole number >= 0")
        time = None
        if "time" in raw:
            time, clock = parse_time(raw["time"], f"{where}.time")
            clocks.add(clock)
            if last_time is not None and time < last_time:
                raise ConfigError(f"{where}.time={raw['time']!r} comes before the previous event's time: sort the "
                                  f"trace by time")
            last_time = time
        events.append(TraceEvent(step, time, nodes, kill))
    if len(clocks) > 1:
        raise ConfigError(f"{key} mixes clock times (HH:MM) and durations: use one kind")
    if repeat_daily:
        events = _repeat(events, key, horizon)
    elif True in clocks and horizon > DAY:
        print(f"warning: {key} uses clock times but repeat_daily is off: the trace plays once, from 00:00 of "
              f"day 1, and its last capacity holds after that; set {key.split('.')[0]}.repeat_daily=true to "
              f"repeat it every day", file=sys.stderr)
    if not any(e.nodes is not None and not e.kill and (e.step == 0 or e.time == 0) for e in events):
        events.insert(0, TraceEvent(step=0, nodes=max_nodes))  # full capacity unless the trace says otherwise
    return events


def _repeat(events: list[TraceEvent], key: str, horizon: float) -> list[TraceEvent]:
    if any(e.time is None or e.time >= DAY for e in events):
        raise ConfigError(f"{key}: repeat_daily needs time-based events within one day (00:00 to 23:59)")
    days = max(1, int(horizon // DAY) + 1)
    # The state at midnight is the day's last event: it carries over from the day before.
    first = [TraceEvent(time=0.0, nodes=events[-1].nodes)] if events[0].time > 0 and events[-1].nodes is not None else []
    day = first + events
    return [TraceEvent(e.step, e.time + d * DAY, e.nodes, e.kill) for d in range(days) for e in day]
