"""Speed of the capacity simulator on a week-long trace at one-minute resolution (10,080 capacity
changes), against the floor of composing and planning the same recipe. Goal: the simulation itself
well under a second; the whole `action=simulate` (with the chart) about a second more than a dry run.

    python bench/simulate_speed.py
"""

import random
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import python, time_process  # noqa: E402

JOB = ["launcher.py", "recipes=llama/llama3_3_70b_sft", "recipes.elastic_policy.is_elastic=true",
       "recipes.elastic_policy.min_nodes=4", "recipes.elastic_policy.max_nodes=16"]


def main() -> None:
    from elastic_launcher.cli import main as launcher

    with tempfile.TemporaryDirectory() as tmp:
        trace = Path(tmp) / "week.csv"
        rng = random.Random(0)
        trace.write_text("time,nodes\n" + "".join(f"{minute}m,{rng.randint(2, 16)}\n" for minute in range(7 * 24 * 60)))
        common = ["recipes.training_config.training_args.max_steps=100000", f"simulate.capacity={trace}",
                  "simulate.horizon_days=7", f"output_dir={tmp}"]
        assert launcher([*JOB[1:], "action=simulate", *common]) == 0
        import json

        report = json.loads((Path(tmp) / "llama3-3-70b-sft" / "simulation" / "simulation.json").read_text())
        whole = time_process(python(*JOB, "action=simulate", *common), runs=3)
        floor = time_process(python(*JOB, f"output_dir={tmp}"), runs=3)
    print(f"week at 1-minute resolution, 3 policies: simulation {report['simulated_in_s']:.3f} s (goal < 1 s); "
          f"action=simulate {whole:.2f} s as a process vs a dry run {floor:.2f} s (+{whole - floor:.2f} s)")


if __name__ == "__main__":
    main()
