"""The trainer's command line (`python -m training`), parsed before torch is imported: `--help` and
a mistyped flag answer at once."""

from __future__ import annotations

import argparse
import os

from training.contract.config_files import CONFIG_DIR_ENV

DESCRIPTION = """The training entrypoint: restart -> this size's config -> resume -> steps -> (elastic event)
save, exit 0. Run under torchrun or hyperpodrun; every (re)start reads the live world size, so the
same command serves every size the job is resized to."""


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m training", description=DESCRIPTION)
    parser.add_argument("--config-dir", default=os.environ.get(CONFIG_DIR_ENV, "/config"),
                        help=f"directory of config.yaml and config-n<N>.yaml (env {CONFIG_DIR_ENV})")
    parser.add_argument("--run-dir", help="override run.output_dir (checkpoints/, metrics.jsonl)")
    parser.add_argument("--stop-at-step", type=int, help="checkpoint and exit after this step (schedule unchanged)")
    parser.add_argument("--pause-at-steps", default="",
                        help="comma-separated steps after which to wait for <run-dir>/release-<step> or a stop "
                             "signal (the rehearsal applies its capacity events there)")
    return parser.parse_args(argv)
