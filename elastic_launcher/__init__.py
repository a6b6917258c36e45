"""Compose, validate, render and act on elastic training jobs. Never imports torch.

Subpackages, in the order a job flows through them: config (compose the recipe, the launcher's
settings) -> planning (per-size plan, instance types, memory) -> render (per-size configs,
manifests, dry run) -> cluster (submit, status, logs, list, delete) or local (runs and rehearsals
on this machine); capacity (traces and the operator's sizing policy) drives the rehearsal and the
simulator (simulate). `cli` parses the command line, `job` is what every action receives.
"""

from pathlib import Path


def _root() -> Path:
    """Where launcher.yaml, recipes/, scale_configs/, templates/, traces/ and data/ are: the
    repository (a checkout, or `pip install -e .`), or the copy a `pip install .` carries."""
    checkout = Path(__file__).resolve().parent.parent
    return checkout if (checkout / "launcher.yaml").exists() else Path(__file__).resolve().parent / "project"


ROOT = _root()
