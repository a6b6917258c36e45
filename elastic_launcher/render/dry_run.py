"""Write the dry-run artifacts (all or nothing) and print the plan."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from elastic_launcher.planning.memory import FIT_SHARE, Allowance
from elastic_launcher.planning.node_memory import peer_copies_gib, with_peer_steps
from elastic_launcher.planning.plan import Plan
from elastic_launcher.planning.rollouts import judge_lines, rollout_lag, rollout_ranks, rollout_reproducibility
from elastic_launcher.render.configs import dump_yaml, write_files
from elastic_launcher.render.manifests import Rendered, render
from elastic_launcher.words import plural
from training.contract.methods import method_facts, sampling_options

MANIFEST_FILE = "manifest.yaml"


def write_job(job, plan: Plan | None = None, out_dir: Path | None = None) -> Path:
    """Render `plan` (default: the job's) and write it to `out_dir` (default <output_dir>/<job name>/)."""
    plan = plan or job.plan
    rendered = render(plan, job.settings.cluster, job.settings.target, job.namespace, job.recipe_name)
    return write_artifacts(out_dir or Path(job.settings.output_dir) / plan.job_name, rendered, job.recipe)


def write_artifacts(out_dir: Path, rendered: Rendered, recipe: dict) -> Path:
    """<out_dir>/manifest.yaml, configs/, recipe.yaml, all or nothing."""
    return write_files(out_dir, {MANIFEST_FILE: rendered.manifest, "recipe.yaml": dump_yaml(recipe),
                                 **{f"configs/{name}": text for name, text in rendered.configs.items()}})


def _memory_cell(plan: Plan, size) -> str:
    """Peak GiB per GPU against the instance's (`~`: estimated, not traced), marked where it is over
    the share a job may plan on (FIT_SHARE) or over the GPU."""
    if size.memory is None:
        return "-"
    used, has = size.memory.peak_gib, plan.instance.gpu_memory_gib
    mark = " over" if used > has else " tight" if used > FIT_SHARE * has else ""
    return f"{'' if size.memory.traced else '~'}{used:.0f}/{has:.0f}{mark}"


def _no_memory_figure(plan: Plan) -> str:
    """Why a GPU plan has no memory figure, and how to get one."""
    mc = plan.base.training_config.model_config
    if mc.architecture:
        return ("the inline architecture leaves keys to transformers' defaults, which the launcher cannot read: "
                "trace it (python scripts/trace_memory.py <recipe> --keep)")
    return (f"recipes.model_shape is not set and model_name_or_path={mc.model_name_or_path!r} is no local directory "
            f"whose config.json would fill it: add the model's shape to the recipe (python scripts/new_recipe.py "
            f"<model> writes a recipe with it; docs/your-model.md)")


def plan_table(plan: Plan) -> str:
    # GRPO: a step's samples are prompts, each sampled num_generations times
    sampling = sampling_options(plan.sizes[0].config.training_config)
    generations = sampling.num_generations if sampling else None
    header = ("nodes", "GPUs" if plan.instance.gpus else "devices", "DP", "sharding",
              "per-rank prompts" if generations else "per-rank batch", *(("completions",) if generations else ()),
              "micro", "grad-accum", "LR", "tokens/step", "GiB/GPU", "config")
    rows = [header]
    for s in plan.sizes:
        sharding = f"hsdp {s.devices // s.shard_degree}x{s.shard_degree}" if s.shard_degree < s.devices else "fsdp"
        completions = dataclasses.replace(s.batch, local_batches=tuple(b * generations for b in s.batch.local_batches)
                                          ).describe_local() if generations else None
        rows.append((str(s.nodes), str(s.devices), str(s.batch.dp_size), sharding, s.batch.describe_local(),
                     *((completions,) if generations else ()),
                     str(s.batch.micro_batch), str(s.batch.grad_accum_steps), f"{s.learning_rate:g}",
                     f"{s.tokens_per_step:,}", _memory_cell(plan, s),
                     "scale_config" if s.from_scale_config else "base (derived)"))
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    lines = ["  ".join(c.rjust(w) if i < len(header) - 1 else c for i, (c, w) in enumerate(zip(r, widths)))
             for r in rows]
    return "\n".join([lines[0], "  ".join("-" * w for w in widths), *lines[1:]])


def _shown(value) -> str:
    """A key's value as a person writes it: 0.1, [math_verify, format], {temperature 0.7, top_p 0.9}."""
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, (list, tuple)):
        return f"[{', '.join(map(_shown, value))}]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k} {_shown(v)}" for k, v in value.items()) + "}"
    return str(value)


def peer_copies_line(plan: Plan) -> str | None:
    """What the peer copies cost each node's host memory at every size (None: they are off)."""
    peer_steps = plan.base.training_config.checkpoint.peer_steps
    if not peer_steps:
        if not (plan.policy.is_elastic and plan.policy.max_nodes >= 2):
            return None
        need = peer_copies_gib(plan.hardware, with_peer_steps(plan, 1).base, plan.sizes[0].nodes)
        at = f" (at {plural(plan.sizes[0].nodes, 'node')} they need {need:,.0f} GiB of host memory per node)" if need else ""
        return (f"peer copies: off{at}: a node that dies costs the steps since the last checkpoint; "
                f"recipes.training_config.checkpoint.peer_steps=1 makes it one step where the pods' memory holds the copies "
                f"(docs/peer-copies.md)")
    every = "every step" if peer_steps == 1 else f"every {peer_steps} steps"
    sizes = [(s.nodes, peer_copies_gib(plan.hardware, s.config, s.nodes)) for s in plan.sizes]
    if any(gib is None for _, gib in sizes):
        return f"peer copies {every}: host memory per node unknown (the model's size is not)"
    return (f"peer copies {every}, in each pod's memory volume (own and a buddy node's shards, double-buffered): "
            + ", ".join(f"{plural(n, 'node')} {gib:,.1f} GiB/node" for n, gib in sizes))


def describe_method(tc) -> str:
    """One line on what the run trains and writes, e.g. for LoRA, DPO and epoch-based schedules."""
    ta, peft, ds = tc.training_args, tc.model_config.peft_config, tc.datasets
    facts = method_facts(ta.trainer_type)
    defaults = dataclasses.asdict(facts.build_args({}))
    # A few keys in full, e.g. DPO (beta 0.1, loss_type sigmoid); of GRPO's many, those the recipe changes.
    options = {k: v for k, v in dataclasses.asdict(facts.build_args(ta.method_args)).items()
               if (len(defaults) <= 4 or v != defaults[k]) and k != "judge"}  # the judge: a line of its own
    what = ta.trainer_type.upper()
    if options:
        what += f" ({', '.join(f'{k} {_shown(v)}' for k, v in options.items())})"
    what += f" with LoRA (r {peft.r}, alpha {peft.lora_alpha:g}, {peft.target_modules})" if peft else ", full parameters"
    steps = f"{ta.max_epochs:g} epoch(s), steps resolved from the data at start" if ta.max_epochs else f"{ta.max_steps} steps"
    parts = [what, steps]
    if ta.eval_steps:
        parts.append(f"validation on {1 - ds.train_val_split_ratio:.0%} of the rows every {ta.eval_steps} steps")
    if ta.save_hf_ckpt:
        parts.append("Hugging Face model written at the end" + (" (merged + adapter)" if peft and ta.merge_weights else ""))
    return "method: " + "; ".join(parts)


def summary(plan: Plan, target: str) -> str:
    p = plan.policy
    kind = "elastic" if p.is_elastic else "static"
    counts = [s.nodes for s in plan.sizes]
    if not p.is_elastic:
        nodes = plural(plan.initial_nodes, "node")
    elif counts == list(range(p.min_nodes, p.max_nodes + 1)):
        nodes = f"{p.min_nodes}..{p.max_nodes} nodes"
    else:
        nodes = f"{', '.join(map(str, counts))} nodes (within {p.min_nodes}..{p.max_nodes})"
    k = rollout_ranks(plan.base.training_config)
    processes = f"{plural(plan.nproc_per_node + k, 'process')} per node ({plan.nproc_per_node} training, {k} generating)" \
        if k else f"{plural(plan.nproc_per_node, 'process')} per node"
    lines = [f"{plan.job_name}: {kind}, {nodes} of {plan.instance.name}, {processes}, target {target}",
             describe_method(plan.sizes[0].config.training_config), plan_table(plan)]
    if any(s.memory for s in plan.sizes):
        lines.append(f"GiB/GPU: peak memory per GPU / the instance's: the trainer's step traced on fake tensors plus "
                     f"{Allowance().describe()} (~: estimated, not traced); 'tight' above {FIT_SHARE:.0%} "
                     f"(docs/recipes.md: Will it fit?)")
    elif plan.instance.gpu_memory_gib:
        lines.append(f"GiB/GPU -: {_no_memory_figure(plan)}")
    if phased := [s for s in plan.sizes if s.memory and s.memory.rollout_gib is not None]:  # GRPO: the larger shown above
        roles = "a rollout rank's / a training rank's" if k else "rollout / updates"
        lines.append(f"GRPO's phases, GiB/GPU {roles}: " + ", ".join(  # ~ as in the table: not traced
            f"{plural(s.nodes, 'node')} {'' if s.memory.traced else '~'}{s.memory.rollout_gib:.0f} / "
            f"{'' if s.memory.traced else '~'}{s.memory.total_gib:.0f}" for s in phased))
    if line := peer_copies_line(plan):
        lines.append(line)
    if reproducibility := rollout_reproducibility(plan.base.training_config, plan.instance):
        lines.append(f"rollouts: {reproducibility}")
    if lag := rollout_lag(plan.base.training_config):
        lines.append(f"rollouts behind: {lag}")
    lines += judge_lines(plan.base.training_config, max(s.nodes * k if k else s.devices for s in plan.sizes))
    if any(s.memory and not s.memory.traced for s in plan.sizes):
        lines.append("trace the ~ sizes: python scripts/trace_memory.py <recipe> <your recipes.* overrides> --keep")
    if any(s.shard_degree < s.devices for s in plan.sizes):
        lines.append("sharding: hsdp RxS holds the state sharded over S GPUs (one node's) in R replicas: each layer's "
                     "gathers stay on the node, gradients cross the network once per step; fsdp shards over every GPU")
    if plan.unused_scale_configs:
        lines.append(f"scale_config entries not used by this policy (outside the allowed sizes): "
                     f"{', '.join(f'n{n}' for n in plan.unused_scale_configs)}")
    lines += [f"note: {n}" for n in plan.notes] + [f"warning: {w}" for w in plan.warnings]
    return "\n".join(lines)
