"""The trainer's output stream, in one place: what it writes and how every consumer reads it.

Rank 0 writes one JSON object per line to `<run dir>/metrics.jsonl` and the same line to stdout
(so a pod's log carries it too, behind whatever prefix the agent adds). Two kinds of records:
- a step or evaluation: `step` and numbers (`loss`, `lr`, `tokens_per_s`, `world_size`, ... or
  `eval_loss`, `eval_rewards_*`);
- an event: `event` (start, data, resume, checkpoint, stop, export, exit) with its fields.
Every record carries `time` (Unix seconds) and `launch` (one id per process start).
`samples.jsonl` (with logging.audit_samples) holds `{step, world_size, launch, sample_ids}` per step
(GRPO: and `completions`, `[sample_id, index, token_ids]` each).
Torch-free: the launcher, the simulator, the benches and the tests read through these functions.
"""

from __future__ import annotations

import json
from pathlib import Path

METRICS, SAMPLES = "metrics.jsonl", "samples.jsonl"


def parse_line(line: str) -> dict | None:
    """The record in one line of a log or file (after any prefix such as `[default0]:`), or None."""
    start = line.find("{")
    if start < 0:
        return None
    try:
        record = json.loads(line[start:])
    except json.JSONDecodeError:  # not ours, or a line being written right now
        return None
    return record if isinstance(record, dict) and ("step" in record or "event" in record) else None


def read_records(run_dir: Path, name: str = METRICS) -> list[dict]:
    """The records the trainer wrote to `run_dir/name` (metrics.jsonl or samples.jsonl)."""
    path = Path(run_dir) / name
    if not path.exists():
        return []
    return [r for r in map(parse_line, path.read_text().splitlines()) if r is not None]


def committed(run_dir: Path, name: str, key: str) -> dict[int, object]:
    """Per step, the value of its last record: a step recomputed after a failure counts once."""
    return {r["step"]: r[key] for r in read_records(run_dir, name) if key in r}


def human(record: dict) -> str:
    """A record as a person reads it in a terminal: `step=12 loss=2.301 ...`; a warning as one."""
    if record.get("event") == "warning":
        return f"warning (step {record.get('step')}): {record.get('message')}"
    return " ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in record.items()
                    if k not in ("time", "launch"))
