"""Your own recipes, beside the catalogue: $LAUNCHER_RECIPES names one or more directories
(separated by ':') laid out as the project is, `recipes/<family>/<name>.yaml` and optionally
`scale_configs/<name>.yaml`. The launcher composes from them as from its own (Hydra search path),
lists them in --help and suggestions, and keeps their memory traces in `traced_memory.json` in
that directory, never in the package.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from elastic_launcher import ROOT
from training.contract.config import deep_merge
from training.contract.errors import ConfigError

USER_RECIPES_ENV = "LAUNCHER_RECIPES"
TRACES_NAME = "traced_memory.json"
PACKAGE_TRACES = ROOT / "elastic_launcher" / "planning" / TRACES_NAME


def user_dirs() -> list[Path]:
    """The directories $LAUNCHER_RECIPES names, each checked to exist."""
    dirs = []
    for entry in filter(None, os.environ.get(USER_RECIPES_ENV, "").split(os.pathsep)):
        path = Path(entry).expanduser().resolve()
        if not path.is_dir():
            raise ConfigError(f"{USER_RECIPES_ENV}={entry}: no such directory: point it at a directory holding "
                              f"recipes/<family>/<name>.yaml, or unset it")
        dirs.append(path)
    return dirs


def config_roots() -> list[Path]:
    """Where config groups are found: the project first, then the user's directories."""
    return [ROOT, *user_dirs()]


EVALUATION = "evaluation"  # recipes/evaluation/: evaluation recipes, listed apart from the training recipes


def _options_in(roots: list[Path], group: str, folders: tuple[str, ...] | None = None) -> list[str]:
    """The group's options under `roots`: all but common/ and evaluation/, or those in `folders`."""
    def wanted(first: str) -> bool:
        return first in folders if folders else first not in ("common", EVALUATION)

    return sorted({str(p.relative_to(root / group).with_suffix("")) for root in roots
                   for p in (root / group).rglob("*.yaml") if wanted(p.relative_to(root / group).parts[0])})


def evaluation_recipes() -> list[str]:
    return _options_in(config_roots(), "recipes", (EVALUATION,))


def options(group: str) -> list[str]:
    """The options of a config group, e.g. recipes -> ['gpt_oss/gpt_oss_120b_sft', ...], the user's included."""
    return _options_in(config_roots(), group)


def catalogue(group: str) -> list[str]:
    """The project's own options of a group (the catalogue), without the user's."""
    return _options_in([ROOT], group)


def user_options(group: str) -> list[str]:
    """The options of a group that come from the user's directories."""
    return _options_in(user_dirs(), group)


def traces_file(recipe: str) -> Path:
    """Where a recipe's memory traces are kept: beside the user's recipe, or in the package for the catalogue's."""
    home = next((d for d in user_dirs() if (d / "recipes" / f"{recipe}.yaml").is_file()), None)
    return home / TRACES_NAME if home else PACKAGE_TRACES


def trace_files() -> list[Path]:
    return [PACKAGE_TRACES, *(d / TRACES_NAME for d in user_dirs())]


def read_traces(path: Path) -> dict:
    return json.loads(path.read_text())["traces"] if path.exists() else {}


def recipe_facts(recipe: str, files: dict | None = None) -> str:
    """What --help says of a recipe beside its name: its method, LoRA or full parameters, and its
    elastic range, read from its file and the recipes it builds on (`defaults: - /recipes/...@_here_`)
    without composing it: --help lists every recipe at once. `files`: the recipes read so far."""
    import yaml

    files = {} if files is None else files

    def merged(name: str) -> dict:
        if name not in files:
            path = next((root / "recipes" / f"{name}.yaml" for root in config_roots()
                         if (root / "recipes" / f"{name}.yaml").is_file()), None)
            data = yaml.load(path.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)) if path else {}
            out: dict = {}
            for entry in data.get("defaults") or []:
                if isinstance(entry, str) and entry.startswith("/recipes/") and entry.endswith("@_here_"):
                    out = deep_merge(out, merged(entry[len("/recipes/"):-len("@_here_")]))
            files[name] = deep_merge(out, {k: v for k, v in data.items() if k != "defaults"})
        return files[name]

    recipe_data = merged(recipe)
    if isinstance(recipe_data.get("llm_as_judge"), dict):
        return f"evaluation, LLM as judge ({recipe_data['llm_as_judge'].get('metrics')}), 1 node, resumable"
    if isinstance(recipe_data.get("evaluation"), dict) and "training_config" not in recipe_data:
        ev = recipe_data["evaluation"]
        nodes = (recipe_data.get("run") or {}).get("replicas", 1)
        return (f"evaluation, {ev.get('task')} ({ev.get('strategy')}), {nodes} node{'s' * (nodes != 1)}, "
                "resumable at any size")
    training = recipe_data.get("training_config") or {}
    args = training.get("training_args") or {}
    method_args = args.get("method_args") or {}
    method = args.get("trainer_type", "sft") + (" with an LLM judge" if "judge" in (method_args.get("rewards") or ())
                                                else "") + (", an agent with tools" if method_args.get("environment") else "")
    lora = bool((training.get("model_config") or {}).get("peft_config"))
    policy = recipe_data.get("elastic_policy") or {}
    span = f"{policy.get('min_nodes', '?')}-{policy.get('max_nodes', '?')} nodes"
    if not policy.get("is_elastic"):  # the range is what is_elastic=true would allow
        nodes = (recipe_data.get("trainer") or {}).get("num_nodes", "?")
        span = f"{nodes} node{'' if nodes == 1 else 's'}, elastic {span}"
    return f"{method}, {'LoRA' if lora else 'full'}, {span}"
