"""Downtime of one resize (2 -> 1 nodes) of a ~58M-parameter Llama in a local rehearsal, against its
floor measured in the same run: a bare `python -c "import torch, transformers"` start plus writing
and reading the checkpoint's bytes at the disk's raw sequential speed. Goal: downtime <= 1.5x floor.

    python bench/resize_downtime.py
"""

import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import python, raw_disk_mb_per_s, time_process  # noqa: E402
from elastic_launcher.cli import main as launcher  # noqa: E402
from training.contract.records import read_records  # noqa: E402

ARCH = "recipes.training_config.model_config.architecture"
MODEL = [f"{ARCH}.hidden_size=512", f"{ARCH}.intermediate_size=1376", f"{ARCH}.num_hidden_layers=8",
         f"{ARCH}.num_attention_heads=8", f"{ARCH}.num_key_value_heads=8", f"+{ARCH}.vocab_size=32000"]


def main() -> None:
    with tempfile.TemporaryDirectory(dir=Path(__file__).resolve().parent.parent) as tmp:
        tmp = Path(tmp)
        code = launcher(["recipes=llama/tiny_llama_sft", "recipes.elastic_policy.is_elastic=true", "action=rehearse",
                         *MODEL, "recipes.training_config.training_args.max_steps=5",
                         "recipes.training_config.checkpoint.save_steps=1000", "local.compare=false",
                         "local.trace=[{step:0,nodes:2},{step:2,nodes:1}]", f"local.run_dir={tmp / 'run'}",
                         f"output_dir={tmp / 'out'}", "local.timeout=600"])
        assert code == 0
        report = json.loads((tmp / "run" / "rehearsal_report.json").read_text())
        resumes = read_records(tmp / "run")
        resume = next(r for r in resumes if r.get("event") == "resume")
        (t,) = report["transitions"]
        write, read = raw_disk_mb_per_s(tmp, t["checkpoint_bytes"])
        start = time_process(python("-c", "import torch, transformers"), runs=3)
    mb = t["checkpoint_bytes"] / 1e6
    floor = start + mb / write + mb / read
    print(f"resize 2 -> 1 nodes, {mb:.0f} MB checkpoint (model + AdamW)")
    print(f"  signal -> exit {t['signal_to_exit_s']:.2f} s (checkpoint save {t['checkpoint_save_s']:.2f} s), "
          f"relaunch -> first step {t['relaunch_to_first_step_s']:.2f} s (checkpoint load "
          f"{sum(v for k, v in resume.items() if k.startswith('load_')):.2f} s)")
    print(f"  downtime {t['downtime_s']:.2f} s vs floor {floor:.2f} s (python+torch+transformers start {start:.2f} s, "
          f"raw write {mb / write:.2f} s, raw read {mb / read:.2f} s) = {t['downtime_s'] / floor:.2f}x (goal <= 1.5x)")


if __name__ == "__main__":
    main()
