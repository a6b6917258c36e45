"""Compose, validate, render and act on elastic training jobs. Never imports torch.

Subpackages, in the order a job flows through them: config (compose the recipe, the launcher's
settings) -> planning (per-size plan, instance types, memory) -> render (per-size configs,
manifests, dry run) -> cluster (submit, status, logs, list, delete) or local (runs and rehearsals
on this machine); capacity (traces and the operator's sizing policy) drives the rehearsal and the
simulator (simulate). `cli` parses the command line, `job` is what every action receives.
"""

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent  # recipes/, scale_configs/, templates/, traces/, data/
