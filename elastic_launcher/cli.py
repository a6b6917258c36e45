"""The launcher's command line: compose -> plan -> render -> act (dry run, cluster, local)."""

from __future__ import annotations

import difflib
import sys
from dataclasses import dataclass

from omegaconf import DictConfig, OmegaConf

from elastic_launcher.compose import compose, options, to_plain
from elastic_launcher.errors import USER_ERRORS, report
from elastic_launcher.plan import Plan, TypedKeys, make_plan
from elastic_launcher.settings import ACTIONS, TARGETS, LauncherSettings
from training.config import ConfigError, build

HELP = """\
usage: python launcher.py [--help] [--cfg job [--resolve]] [OVERRIDE ...]

Compose a recipe with its elastic policy and scale configs, validate it for every allowed node
count, and render HyperPodPyTorchJob / Kubeflow PyTorchJob manifests. Overrides use Hydra's
grammar: key=value, group=option, +new_key=value, ++key=value, ~key.

  recipes=<recipe>                          {recipes}
  scale_configs@recipes.scale_config=<set>  {sets}
  recipes.elastic_policy.is_elastic=true recipes.elastic_policy.min_nodes=2 recipes.elastic_policy.max_nodes=8
  recipes.scale_config.n4.training_config.training_args.learning_rate=1e-5
  action={actions}
  target={targets}
  cluster.image=<image> cluster.namespace=<ns> cluster.queue_name=<kueue queue> ...   (see launcher.yaml)

  --cfg job      print the composed config and exit (--resolve: with interpolations resolved)
  HYDRA_FULL_ERROR=1 shows the full traceback of an error.
"""


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
    plan = make_plan(recipe, settings.cluster.job_name, every_size=settings.target == "kubeflow", typed=typed)
    return Job(settings, recipe_name, recipe, plan, typed)


def dry_run(job: Job) -> int:
    from elastic_launcher.dry_run import summary, write_job

    out = write_job(job)
    print(summary(job.plan, job.settings.target))
    if job.plan.policy.is_elastic and not job.settings.cluster.checkpoint_pvc:
        print("warning: no cluster.checkpoint_pvc: checkpoints on pod-local storage do not survive a resize")
    if not job.settings.cluster.image:
        print("warning: cluster.image is not set: the manifest names a placeholder image; set cluster.image=<image> "
              "before applying it")
    apply = " (kubectl apply -f)" if job.settings.cluster.image else ""
    print(f"wrote {out / 'manifest.yaml'}{apply}, {out / 'configs'}/, {out / 'recipe.yaml'}")
    return 0


def run_action(job: Job) -> int:
    action = job.settings.action
    if action == "dry_run":
        return dry_run(job)
    if action in ("submit", "server_dry_run", "status", "logs", "list", "delete"):
        from elastic_launcher import cluster

        return cluster.run(job)
    if action == "simulate":
        from elastic_launcher import simulate

        return simulate.run(job)
    from elastic_launcher import local

    return local.run(job)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    overrides, show_cfg, resolve = [], None, False
    args = iter(argv)
    try:
        for arg in args:
            if arg in ("-h", "--help"):
                print(HELP.format(recipes=" | ".join(options("recipes")), sets=" | ".join(options("scale_configs")),
                                  actions=" | ".join(ACTIONS), targets=" | ".join(TARGETS)))
                return 0
            if arg in ("-c", "--cfg") or arg.startswith("--cfg="):
                show_cfg = arg.split("=", 1)[1] if "=" in arg else next(args, None)
                if show_cfg != "job":
                    raise ConfigError(f"--cfg {show_cfg}: only '--cfg job' is supported (the launcher composes "
                                      f"with Hydra's Compose API and has no hydra config section)")
            elif arg == "--resolve":
                resolve = True
            elif arg.startswith("-"):
                raise ConfigError(f"unknown flag {arg}: see python launcher.py --help")
            else:
                overrides.append(arg)
        cfg, recipe_name = compose(overrides)
        if show_cfg:
            print(OmegaConf.to_yaml(cfg, resolve=resolve), end="")
            return 0
        return run_action(load_job(cfg, recipe_name, overrides))
    except USER_ERRORS as e:
        return report(e)
    except KeyboardInterrupt:
        return 130
