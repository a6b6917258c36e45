"""Downtime of a resize against a fresh start of the same trainer at the same size, both measured in
the same run: a ~58M-parameter Llama (698 MB checkpoint with AdamW) in local rehearsals, 2 -> 1 and
1 -> 2 nodes. Downtime: the end of the last step at the old size to the start of the first step at
the new one (stop, save, exit, relaunch, load, first step). Fresh start: launch to the start of the
first step with no checkpoint. Goal: downtime <= 1.2x the fresh start at the new size, both ways
(median of --repeats, with the range).

    python bench/resize_downtime.py
"""

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from elastic_launcher.cli import main as launcher  # noqa: E402
from training.contract.records import read_records  # noqa: E402

ARCH = "recipes.training_config.model_config.architecture"
MODEL = [f"{ARCH}.hidden_size=512", f"{ARCH}.intermediate_size=1376", f"{ARCH}.num_hidden_layers=8",
         f"{ARCH}.num_attention_heads=8", f"{ARCH}.num_key_value_heads=8", f"+{ARCH}.vocab_size=32000"]
GOAL = 1.2


def rehearse(start: int, then: int) -> dict:
    """One rehearsal start -> then nodes: the fresh start at `start`, and the resize's parts."""
    with tempfile.TemporaryDirectory(dir=Path(__file__).resolve().parent.parent) as tmp:
        tmp = Path(tmp)
        code = launcher(["recipes=llama/tiny_llama_sft", "recipes.elastic_policy.is_elastic=true", "action=rehearse",
                         *MODEL, "recipes.training_config.training_args.max_steps=5",
                         "recipes.training_config.checkpoint.save_steps=1000", "local.compare=false",
                         f"local.trace=[{{step:0,nodes:{start}}},{{step:2,nodes:{then}}}]",
                         f"local.run_dir={tmp / 'run'}", f"output_dir={tmp / 'out'}", "local.timeout=600"])
        assert code == 0
        report = json.loads((tmp / "run" / "rehearsal_report.json").read_text())
        resume = next(r for r in read_records(tmp / "run") if r.get("event") == "resume")
    (t,) = report["transitions"]
    return {"fresh": report["first_start_s"], "downtime": t["downtime_s"], "stop": t["signal_to_exit_s"],
            "save": t["checkpoint_save_s"], "relaunch": t["relaunch_to_first_step_s"], "mb": t["checkpoint_bytes"] / 1e6,
            "load": {k.removeprefix("load_").removesuffix("_s"): v for k, v in resume.items() if k.startswith("load_")}}


def spread(values: list[float], unit: str = "") -> str:
    values = sorted(values)
    return f"{statistics.median(values):.2f}{unit} ({values[0]:.2f}-{values[-1]:.2f})"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=3)
    repeats = parser.parse_args().repeats
    runs = [{"2->1": rehearse(2, 1), "1->2": rehearse(1, 2)} for _ in range(repeats)]
    fresh = {2: [r["2->1"]["fresh"] for r in runs], 1: [r["1->2"]["fresh"] for r in runs]}
    print(f"resize of a {runs[0]['2->1']['mb']:.0f} MB checkpoint (model + AdamW), median of {repeats} (range)")
    for name, to in (("2->1", 1), ("1->2", 2)):
        parts = [r[name] for r in runs]
        ratios = [p["downtime"] / f for p, f in zip(parts, fresh[to])]
        load = {k: [p["load"][k] for p in parts] for k in parts[0]["load"]}
        print(f"  {name}: downtime {spread([p['downtime'] for p in parts], ' s')} vs fresh start at {to} node(s) "
              f"{spread(fresh[to], ' s')}: {spread(ratios, 'x')} -> {'meets' if statistics.median(ratios) <= GOAL else 'MISSES'} "
              f"the goal <= {GOAL}x")
        print(f"    stop (signal -> exit) {spread([p['stop'] for p in parts], ' s')}, of it the save "
              f"{spread([p['save'] for p in parts], ' s')}; relaunch -> first step {spread([p['relaunch'] for p in parts], ' s')}, "
              f"of it the load: " + ", ".join(f"{k} {spread(v, ' s')}" for k, v in load.items()))


if __name__ == "__main__":
    main()
