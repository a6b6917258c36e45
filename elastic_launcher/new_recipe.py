"""A recipe for your own model in one step: its shape from the model's config.json, the method's
defaults from the catalogue's common recipes, and the smallest node count and micro-batch whose
memory fits the GPUs, written into your recipe directory ($LAUNCHER_RECIPES).
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from pathlib import Path

import yaml

from elastic_launcher.config.compose import compose, to_plain
from elastic_launcher.config.user_recipes import USER_RECIPES_ENV, user_dirs
from elastic_launcher.planning.memory import FIT_SHARE
from elastic_launcher.planning.model_config import read_config, readable_shape, shape_of
from elastic_launcher.planning.plan import make_plan
from training.contract.errors import ConfigError
from training.contract.families import NO_FLEX_FAMILIES, recurrent
from training.contract.methods import method_facts

# method -> the common recipes it builds on, as the catalogue's recipes do
METHODS = {
    "sft": ["/recipes/common/sft@_here_"],
    "sft_lora": ["/recipes/common/sft@_here_", "/recipes/common/lora@_here_"],
    "dpo": ["/recipes/common/sft@_here_", "/recipes/common/dpo@_here_"],
    "grpo": ["/recipes/common/sft@_here_", "/recipes/common/grpo@_here_"],
    "grpo_lora": ["/recipes/common/sft@_here_", "/recipes/common/grpo_lora@_here_"],
    # GRPO with an LLM judge as the reward: the vendor's RLAIF settings (recipes/common/grpo_rlaif.yaml)
    "grpo_rlaif": ["/recipes/common/sft@_here_", "/recipes/common/grpo@_here_", "/recipes/common/grpo_rlaif@_here_"],
    "grpo_rlaif_lora": ["/recipes/common/sft@_here_", "/recipes/common/grpo_lora@_here_",
                        "/recipes/common/grpo_rlaif@_here_"],
    # an agent with tools: the vendor's agentic RFT settings, a calculator on GSM8K (recipes/common/agent_lora.yaml)
    "agent_lora": ["/recipes/common/sft@_here_", "/recipes/common/agent_lora@_here_"],
}
DATA_DOCS = {**{m: "docs/grpo.md" for m in METHODS if m.startswith("grpo")},  # else docs/your-data.md
             "agent_lora": "docs/agents.md"}
SCALE_CONFIG = "gpu8_sft"  # global batch 128 at every size; the micro-batch is the recipe's
# 8-GPU instance types, the most common first: the recipe lists those its model fits
INSTANCE_TYPES = ["ml.p5.48xlarge", "ml.p5en.48xlarge", "ml.p4de.24xlarge", "ml.g6e.48xlarge", "ml.p4d.24xlarge",
                  "ml.g5.48xlarge"]
NODE_COUNTS = (1, 2, 4, 8, 16, 32)
MICRO_BATCHES = (4, 2, 1)


@dataclass(frozen=True)
class NewRecipe:
    name: str  # family/name, as recipes=<name> takes it
    path: Path
    instance_type: str
    min_nodes: int
    max_nodes: int
    micro_batch: int


def _recipe_text(model: str, method: str, name: str, shape: dict, max_len: int, instance_types: list[str],
                 min_nodes: int, max_nodes: int, micro: int, method_args: dict) -> str:
    body = {
        "defaults": [*METHODS[method], {"/scale_configs@scale_config": SCALE_CONFIG}, "_self_"],
        "run": {"name": name.split("/")[-1].replace("_", "-")},
        "trainer": {"num_nodes": min_nodes},
        "instance_type": instance_types[0],
        "instance_types": instance_types,
        "model_shape": shape,
        "training_config": {
            "model_config": {"model_name_or_path": model,  # sdpa where transformers has no flex attention
                             **({"attn_implementation": "sdpa"} if shape.get("model_type") in NO_FLEX_FAMILIES else {})},
            "datasets": {"max_len": max_len,
                         # a recurrent model cannot pack (training.contract.families), where the method would
                         **({"packing": False} if recurrent(shape) and method_facts(method.split("_")[0]).packing
                            else {})},
            "training_args": {"micro_train_batch_size": micro, **({"method_args": method_args} if method_args else {})},
        },
        "elastic_policy": {"is_elastic": True, "min_nodes": min_nodes, "max_nodes": max_nodes},
    }
    header = (f"# {name}: {method} of {model}, written by scripts/new_recipe.py on {datetime.date.today()} from its "
              f"config.json.\n# Set your data with training_config.datasets.train_data "
              f"({DATA_DOCS.get(method, 'docs/your-data.md')}).\n")
    return header + yaml.safe_dump(body, sort_keys=False, default_flow_style=None, width=120)


def _misfit(name: str, instance: str, nodes: int, micro: int) -> str | None:
    """Why the recipe, so changed, does not fit (None when every size fits under FIT_SHARE of the GPUs' memory)."""
    overrides = [f"recipes={name}", f"recipes.instance_type={instance}", f"recipes.trainer.num_nodes={nodes}",
                 f"recipes.elastic_policy.min_nodes={nodes}", f"recipes.elastic_policy.max_nodes={nodes * 4}",
                 f"recipes.training_config.training_args.micro_train_batch_size={micro}"]
    try:
        plan = make_plan(to_plain(compose(overrides)[0])["recipes"])
    except ConfigError as e:  # e.g. the node-local tier too large for the node's memory: more nodes
        return str(e)
    worst = max((s.memory.total_gib if s.memory else float("inf")) for s in plan.sizes)
    limit = FIT_SHARE * plan.instance.gpu_memory_gib
    return None if worst <= limit else f"{worst:.0f} GiB per GPU, over {limit:.0f}"


def write_recipe(model: str, method: str, name: str, max_len: int = 4096, max_steps_off_policy: int = 0,
                 rollout_ranks_per_node: int = 0) -> NewRecipe:
    """The recipe written (and the size it fits best); `max_steps_off_policy`: GRPO's rollout that many steps
    behind its policy (its kept policies count in the memory every size must fit); `rollout_ranks_per_node`:
    that many of each node's GPUs only generate, each with an engine of its own (the sizes fit with the others training)."""
    if method not in METHODS:
        raise ConfigError(f"method={method!r} is not one of {', '.join(METHODS)}")
    grpo_only = {"max_steps_off_policy": max_steps_off_policy, "rollout_ranks_per_node": rollout_ranks_per_node}
    method_args = {key: value for key, value in grpo_only.items() if value}
    for key, value in method_args.items():
        if not method.startswith("grpo"):
            raise ConfigError(f"--{key.replace('_', '-')}={value} is GRPO's: pick a grpo method or leave it out")
    if name.count("/") != 1 or not all(part.replace("_", "").isalnum() for part in name.split("/")):
        raise ConfigError(f"name={name!r} must be <family>/<name> of letters, digits and _ (e.g. byo/my_model_sft)")
    dirs = user_dirs()
    if not dirs:
        raise ConfigError(f"{USER_RECIPES_ENV} is not set: set it to the directory your recipes live in "
                          f"(e.g. export {USER_RECIPES_ENV}=~/launcher-recipes)")
    path = dirs[0] / "recipes" / f"{name}.yaml"
    if path.exists():
        raise ConfigError(f"{path} exists: pick another name, or delete it first")
    shape = shape_of(read_config(model))
    if why := readable_shape(shape):
        raise ConfigError(f"model={model!r}: {why}, which the planner reads (model_type {shape.get('model_type')}): "
                          f"write the recipe by hand with a model_shape (docs/your-model.md)")
    max_len = min(max_len, shape.get("max_position_embeddings") or max_len)  # no longer than the model was made for
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        # first write with a placeholder size, then find the smallest one that fits
        path.write_text(_recipe_text(model, method, name, shape, max_len, INSTANCE_TYPES[:1], 1, 4, 1, method_args))
        fitting, why = {}, ""
        for instance in INSTANCE_TYPES:
            for nodes in NODE_COUNTS:  # the fewest nodes where micro-batch 1 fits, then the largest micro-batch there
                if why := _misfit(name, instance, nodes, 1):
                    continue
                micro = next(m for m in MICRO_BATCHES if m == 1 or not _misfit(name, instance, nodes, m))
                fitting[instance] = (nodes, micro)
                break
        usable = [t for t in INSTANCE_TYPES if t in fitting]
        if not usable:
            raise ConfigError(f"model={model!r} fits none of {', '.join(INSTANCE_TYPES)} at up to {NODE_COUNTS[-1]} nodes "
                              f"at max_len={max_len} ({why}): lower --max-len or use LoRA (--method sft_lora)")
        best = min(usable, key=lambda t: (fitting[t][0], -fitting[t][1], INSTANCE_TYPES.index(t)))
        nodes, micro = fitting[best]
        others = [t for t in usable if t != best]
        path.write_text(_recipe_text(model, method, name, shape, max_len, [best, *others], nodes, nodes * 4, micro,
                                     method_args))
    except BaseException:
        path.unlink(missing_ok=True)  # nothing half-written left behind
        raise
    return NewRecipe(name, path, best, nodes, nodes * 4, micro)
