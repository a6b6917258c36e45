"""The job every action works on: the launcher's settings, the resolved recipe, its plan (made once
per command, from the recipe and the keys typed on the command line) and those typed keys."""

from __future__ import annotations

import dataclasses
import difflib
from dataclasses import dataclass

from omegaconf import DictConfig

from elastic_launcher.config.compose import UNDER_RECIPES, to_plain
from elastic_launcher.config.settings import ACTIONS, TARGETS, LauncherSettings
from elastic_launcher.planning.node_memory import default_peer_steps, with_peer_steps
from elastic_launcher.planning.plan import Plan, TypedKeys, make_plan
from training.contract.errors import ConfigError
from training.contract.typed import build, suggest


@dataclass(frozen=True)
class Job:
    """Everything an action needs: the launcher settings, the resolved recipe and its plan."""

    settings: LauncherSettings
    recipe_name: str
    recipe: dict
    plan: Plan
    typed: TypedKeys = TypedKeys()  # the recipe keys typed on the command line: a re-plan must honour them too

    @property
    def namespace(self) -> str:
        return self.settings.cluster.namespace or "default"


def load_job(cfg: DictConfig, recipe_name: str, overrides: list[str] = ()) -> Job:
    data = to_plain(cfg)
    recipe = data.pop("recipes")
    known = [f.name for f in dataclasses.fields(LauncherSettings)] + ["recipes"]
    for key in sorted(set(data) - set(known)):  # added with +: Hydra takes any new key
        if key in recipe:  # +training_config...=...: a recipe's key typed without its recipes. prefix
            typed_keys = (o.split("=", 1)[0].lstrip("+~") for o in overrides)
            typed = next((k for k in typed_keys if k.split(".")[0] == key), key)
            raise ConfigError(f"unknown key '{key}' in override of '{typed}': did you mean 'recipes.{typed}'? "
                              f"{UNDER_RECIPES}")
        raise ConfigError(f"unknown key '{key}': {suggest(key, known)}")
    settings = build(LauncherSettings, data)
    for key, value, choices in (("action", settings.action, ACTIONS), ("target", settings.target, TARGETS)):
        if value not in choices:
            close = difflib.get_close_matches(value, choices, n=1)
            hint = f"did you mean {key}={close[0]}?" if close else f"use one of {', '.join(choices)}"
            raise ConfigError(f"{key}={value!r} is not one of {', '.join(choices)}: {hint}")
    if settings.action in ("submit", "server_dry_run") and not settings.cluster.image:
        raise ConfigError("cluster.image is not set: submitting needs the training image, "
                          "e.g. cluster.image=<account>.dkr.ecr.<region>.amazonaws.com/train:latest")
    # Kubeflow's torchrun rendezvous admits any node count in [min, max]: plan them all.
    typed = TypedKeys.from_overrides(list(overrides))
    plan = make_plan(recipe, settings.cluster.job_name, every_size=settings.target == "kubeflow", typed=typed,
                     write_gb_per_s=settings.simulate.write_gb_per_s)
    if plan.base.training_config.checkpoint.peer_steps is None:  # unset: on where they serve and fit
        peer_steps = default_peer_steps(plan, settings.cluster.node_local)
        recipe.setdefault("training_config", {}).setdefault("checkpoint", {})["peer_steps"] = peer_steps  # re-plans
        plan = with_peer_steps(plan, peer_steps)
    return Job(settings, recipe_name, recipe, plan, typed)
