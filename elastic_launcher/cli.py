"""The launcher's command line: compose -> plan -> render -> act (dry run, cluster, local)."""

from __future__ import annotations

import os
import sys
import textwrap
from pathlib import Path

from omegaconf import OmegaConf

from elastic_launcher.config.compose import compose, options
from elastic_launcher.config.settings import ACTIONS, TARGETS
from elastic_launcher.config.user_recipes import (USER_RECIPES_ENV, catalogue, evaluation_recipes, recipe_facts,
                                                  user_dirs, user_options)
from elastic_launcher.errors import USER_ERRORS, report
from elastic_launcher.job import Job, load_job
from elastic_launcher.words import plural
from training.contract.errors import ConfigError
from training.contract.evaluation import check_training_evaluation, is_evaluation
from training.contract.judge_evaluation import is_judge_evaluation

HELP = """\
usage: python launcher.py [--help] [--cfg job [--resolve]] [OVERRIDE ...]

Compose a recipe with its elastic policy and scale configs, validate it for every allowed node
count, and render HyperPodPyTorchJob / Kubeflow PyTorchJob manifests. Overrides use Hydra's
grammar: key=value, group=option, +new_key=value, ++key=value, ~key.

  recipes=<recipe>                          one of the recipes below
  scale_configs@recipes.scale_config=<set>  {sets}
  recipes.elastic_policy.is_elastic=true recipes.elastic_policy.min_nodes=2 recipes.elastic_policy.max_nodes=8
  recipes.scale_config.n4.training_config.training_args.learning_rate=1e-5
  action={actions}
  target={targets}
  cluster.image=<image> cluster.namespace=<ns> cluster.queue_name=<kueue queue> ...
                 (every setting with its default: elastic_launcher/config/settings.py)

  --cfg job      print the composed config and exit (--resolve: with interpolations resolved)
  HYDRA_FULL_ERROR=1 shows the full traceback of an error.

recipes (recipes/<family>/<name>.yaml; your own: $LAUNCHER_RECIPES, docs/your-model.md):
{recipes}
"""


def by_family(recipes: list[str]) -> str:
    """One recipe per line under its family with its method, LoRA or full, and elastic range, e.g.
    `  llama/` then `    llama/llama3_1_8b_sft               sft, full, 1-16 nodes`."""
    lines, family, files = [], None, {}
    width = max(map(len, recipes), default=0)
    for recipe in recipes:
        if recipe.split("/")[0] != family:
            family = recipe.split("/")[0]
            lines.append(f"  {family}/")
        lines.append(f"    {recipe:<{width}}  {recipe_facts(recipe, files)}")
    return "\n".join(lines)


def checked_data(job: Job) -> str:
    """The checks made before anything is written or started (the dry run's, a local run's and a
    rehearsal's): the training data read and checked where it is on this machine (a local path that
    does not exist is one line), and for a method that samples, each reward function imported and its
    signature checked against the data's columns. Returns the line on the data."""
    from elastic_launcher.local.run import localized
    from elastic_launcher.planning.data_preview import preview
    from training.contract.data_files import is_local
    from training.contract.methods import method_facts
    from training.contract.environments import check_environment
    from training.contract.rewards import DEFAULT_REWARDS, RewardOptions, check_rewards

    tc = localized(job.plan.base).training_config  # relative paths from here, else from the project (as run)
    check_training_evaluation(tc.evaluation)
    ds, method = tc.datasets, method_facts(tc.training_args.trainer_type)
    options = method.build_args(tc.training_args.method_args)
    limit = getattr(options, "max_prompt_length", ds.max_len)
    try:
        here = is_local(ds.train_data)
    except ConfigError:  # an absolute path the pods may mount; a run on this machine needs it here
        if job.settings.action in ("local", "rehearse") or not Path(ds.train_data).is_absolute():
            raise
        here = False
    environment = getattr(options, "environment", None)  # an agent's: its prompts offer its tools
    tools = check_environment(environment, options.rewards or DEFAULT_REWARDS) if method.data_format == "prompts" else []
    data = preview(ds, tc.model_config, method.data_format, limit, [t.schema for t in tools]) if here else None
    if method.data_format == "prompts":  # their files found as the run finds them (localized)
        given = set(data.columns) | ({"environments"} if environment else set()) if data else None
        asked = check_rewards(options.rewards or DEFAULT_REWARDS, options.reward_weights, given,
                              options.judge, data.examples if data else (), RewardOptions(options.answer_key))
        if environment:
            check_agent(options, tools, tc)
        if options.judge and job.settings.action in ("local", "rehearse"):  # its processes take this environment
            from training.contract.judge import api_key, check_client, judge_settings
            from training.contract.judge_client import probe

            settings = judge_settings(options.judge)
            check_client(settings)
            api_key(settings)
            if asked:
                probe(settings, asked[0])
    if data:
        return data.describe(limit)
    what = "a path this machine does not have" if Path(ds.train_data).is_absolute() else "a hub dataset or a URL"
    return f"data: {ds.train_data} is {what}: read by the trainer, not checked here"


def check_agent(options, tools: list, tc) -> None:
    """An agent's rollouts: on the trainer's sampler, through a chat template that renders its tools
    and their replies (checked where the tokenizer is on this machine; the trainer checks it too)."""
    from elastic_launcher.planning.data_preview import agent_tokenizer
    from training.contract.environments import AGENT_ON_VLLM, KEY
    from training.contract.tool_template import check_tool_template

    if options.rollout_engine == "vllm":
        raise ConfigError(AGENT_ON_VLLM)
    tokenizer = agent_tokenizer(tc.model_config, tc.datasets)
    if tokenizer is not None:
        check_tool_template(tokenizer, [t.schema for t in tools], KEY, **tc.datasets.template_kwargs)


def dry_run(job: Job) -> int:
    from elastic_launcher.render.dry_run import summary, write_job
    from elastic_launcher.render.manifests import node_local_size
    from training.contract.config_files import NODE_LOCAL_MOUNT

    data = checked_data(job)
    out = write_job(job)
    print(summary(job.plan, job.settings.target))
    print(data)
    if gib := node_local_size(job.plan, job.settings.cluster):
        peers = " and the peer copies" if job.plan.base.training_config.checkpoint.peer_steps else ""
        print(f"node-local tier: a {gib:.0f} GiB memory volume per pod at {NODE_LOCAL_MOUNT} (twice a node's share of "
              f"the checkpoint at {plural(job.plan.sizes[0].nodes, 'node')}{peers}), of the {job.plan.instance.memory_gib} "
              f"GiB of {job.plan.instance.name}: restarts in a pod that stayed read its checkpoint there")
    uri, cluster = job.plan.base.training_config.checkpoint.uri, job.settings.cluster
    if uri:  # read and written by the trainer, which checks the bucket before its first step (as it does hub ids)
        role = f"cluster.service_account={cluster.service_account}'s role" if cluster.service_account else "their role"
        print(f"checkpoints: {uri} (checked by the trainer; the pods reach it with {role}, no volume needed)")
        if not cluster.service_account:
            print(f"warning: no cluster.service_account: the pods need a role that may read, write and delete under "
                  f"{uri} (EKS IRSA or Pod Identity); set cluster.service_account=<name>")
    elif job.plan.policy.is_elastic and not cluster.checkpoint_pvc:
        print("warning: no cluster.checkpoint_pvc: checkpoints on pod-local storage do not survive a resize; give a "
              "PersistentVolumeClaim or recipes.training_config.checkpoint.uri=s3://<bucket>/<prefix>")
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
        from elastic_launcher.cluster import actions

        return actions.run(job)
    if action == "simulate":
        from elastic_launcher.simulate import simulator

        return simulator.run(job)
    if action == "samples":
        from elastic_launcher.local import samples

        return samples.run(job)
    print(checked_data(job), flush=True)  # before any process starts
    if action == "rehearse":
        from elastic_launcher.local import rehearse

        return rehearse.run(job)
    from elastic_launcher.local import run

    return run.run(job)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    overrides, show_cfg, resolve = [], None, False
    args = iter(argv)
    try:
        for arg in args:
            if arg in ("-h", "--help"):
                sets = textwrap.fill(" | ".join(options("scale_configs")), 118, initial_indent=" " * 44,
                                     subsequent_indent=" " * 44).lstrip()
                recipes = by_family(catalogue("recipes"))
                recipes += "\n\nevaluation recipes (a trained model on benchmarks: docs/evaluation.md):\n" + \
                    by_family(evaluation_recipes())
                if user_dirs():
                    recipes += (f"\n\nyour recipes ({USER_RECIPES_ENV}={os.environ[USER_RECIPES_ENV]}):\n"
                                + by_family(user_options("recipes")))
                print(HELP.format(recipes=recipes, sets=sets, actions=" | ".join(ACTIONS), targets=" | ".join(TARGETS)))
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
        if is_evaluation(recipe := OmegaConf.to_container(cfg.recipes)) or is_judge_evaluation(recipe):
            from elastic_launcher import evaluation

            return evaluation.run(cfg, recipe_name)
        return run_action(load_job(cfg, recipe_name, overrides))
    except USER_ERRORS as e:
        return report(e)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # the reader left (`| head`): nothing more to say, and no traceback for it
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
