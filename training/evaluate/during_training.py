"""Benchmarks while training (`training_config.evaluation`): rank 0 starts an evaluation of a durable checkpoint
as a process of its own and trains on; its scores enter metrics.jsonl (and so MLflow) at the checkpoint's step
when it ends. The other ranks never wait for it; at the end of training rank 0 waits for its last one.

An evaluation outlives a stop (an elastic event): its scores are logged by the next start, once each (a marker
beside them). Torch-free and lm-eval-free: the trainer imports this module, the evaluation runs in
`python -m training.evaluate`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import yaml

from training.contract.checkpoint_dirs import step_name
from training.contract.evaluation import TrainingEvaluation, training_recipes

SCORES, LOGGED = "scores.json", "scores.logged"


class CheckpointEvaluations:
    def __init__(self, config: TrainingEvaluation, run_dir: Path, enabled: bool, max_steps: int):
        self.config, self.root, self.max_steps, self.rank0 = config, run_dir / "evaluation", max_steps, enabled
        self.enabled = enabled and bool(config.tasks)
        self.running: list[subprocess.Popen] = []

    def saved(self, step: int, checkpoint: str, log) -> None:
        """A durable checkpoint: evaluated when due, and whatever finished since is logged."""
        if self.enabled and (self.config.every_checkpoint or step == self.max_steps):
            self._start(step, checkpoint)
        self.log_finished(log)

    def _start(self, step: int, checkpoint: str) -> None:
        folder = self.root / step_name(step)
        if (folder / SCORES).exists():
            return
        folder.mkdir(parents=True, exist_ok=True)
        run_config = self.root.parent / "job_config.yaml"  # what exports a checkpoint kept in S3
        args = []
        for i, recipe in enumerate(training_recipes(self.config, checkpoint, str(run_config))):
            (folder / f"recipe-{i}.yaml").write_text(yaml.safe_dump(recipe))
            args.append(f"--recipe={folder / f'recipe-{i}.yaml'}")
        env = {**os.environ, "RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0"}
        if self.config.device == "cpu":  # the training GPUs stay the training's
            env["CUDA_VISIBLE_DEVICES"] = ""
        with open(folder / "evaluation.log", "ab") as out:
            self.running.append(subprocess.Popen(
                [sys.executable, "-m", "training.evaluate", *args, f"--out={self.root}", f"--scores={folder / SCORES}"],
                stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True))  # a stop to the job is not its

    def log_finished(self, log) -> None:
        if not self.rank0:
            return
        for scores in sorted(self.root.glob(f"*/{SCORES}")):
            if not (scores.parent / LOGGED).exists():
                log.log(json.loads(scores.read_text()))
                (scores.parent / LOGGED).touch()

    def finish(self, log) -> None:
        """The end of training: the last evaluation's scores, waited for."""
        for proc in self.running:
            proc.wait()
        self.log_finished(log)
