"""Where a whole run of the suite spends its training processes' time: every launch the tests made,
read from the run directories they left under pytest's temporary directory (pytest keeps the last
three sessions' `/tmp/pytest-of-<user>/pytest-<N>/`).

A launch is one process start of a job (one `launch` id in a metrics.jsonl: a fresh start, a restart
after a resize, a rehearsal's fixed-size run). For each: its world size, the seconds from the
processes' start to the end of the first step (start-up: imports, process group, model, resume) and
from there to its last step. Summed as rank-seconds (seconds x world size), since every rank pays them.

    python bench/suite_launches.py /tmp/pytest-of-root/pytest-0 [--top 10]
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from training.contract.records import read_records  # noqa: E402


@dataclass(frozen=True)
class Launch:
    run_dir: Path
    world_size: int
    start_s: float  # process start -> the end of the first step it ran (or its exit, if it ran none)
    steps_s: float  # the end of its first step -> its last record


def launches(run_dir: Path) -> list[Launch]:
    by_launch: dict[str, list[dict]] = {}
    for record in read_records(run_dir):
        by_launch.setdefault(record.get("launch"), []).append(record)
    found = []
    for records in by_launch.values():
        start = next((r for r in records if r.get("event") == "start"), None)
        if start is None or "world_size" not in start:  # none, or a record a test wrote by hand
            continue
        first = next((r for r in records if "loss" in r or "reward" in r), records[-1])
        found.append(Launch(run_dir, start["world_size"], first["time"] - start["process_start"],
                            records[-1]["time"] - first["time"]))
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("basetemp", type=Path, help="a pytest session's temporary directory")
    parser.add_argument("--top", type=int, default=10, help="the test directories with the most start-up to list")
    args = parser.parse_args()
    found = [launch for metrics in sorted(args.basetemp.rglob("metrics.jsonl")) for launch in launches(metrics.parent)]
    start = sum(l.start_s * l.world_size for l in found)
    steps = sum(l.steps_s * l.world_size for l in found)
    sizes = sorted({l.world_size for l in found})
    print(f"{len(found)} launches ({', '.join(f'{sum(l.world_size == n for l in found)} at {n}' for n in sizes)} "
          f"process(es)); rank-seconds: {start:,.0f} from process start to the first step, {steps:,.0f} after it; "
          f"median start-up {sorted(l.start_s for l in found)[len(found) // 2]:.1f} s" if found else "no launches found")
    by_test: dict[str, float] = {}
    for l in found:
        test = l.run_dir.relative_to(args.basetemp).parts[1]  # popen-gw<N>/<test's directory>/...
        by_test[test] = by_test.get(test, 0) + l.start_s * l.world_size
    for test, seconds in sorted(by_test.items(), key=lambda item: -item[1])[:args.top]:
        print(f"  {seconds:7.0f} rank-s of start-up  {test}")


if __name__ == "__main__":
    main()
