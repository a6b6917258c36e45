"""Read the facts of the vendor's GRPO recipes (aws/sagemaker-hyperpod-recipes,
`hyperpod_recipes/recipes_src/fine-tuning/*/verl-grpo-{rlvr,rlaif}-*.yaml`) into the fixtures the GRPO
catalogue is held to:

    python scripts/vendor_grpo_facts.py <a checkout of sagemaker-hyperpod-recipes> > tests/fixtures/vendor_grpo_recipes.json
    python scripts/vendor_grpo_facts.py <checkout> rlaif > tests/fixtures/vendor_grpo_rlaif_recipes.json
    python scripts/vendor_grpo_facts.py <checkout> mtrl > tests/fixtures/vendor_mtrl_recipes.json

Each recipe is composed with Hydra as the vendor's launcher composes it (verl's defaults under
`hydra_config/verl*/`, then the recipe's own overrides), and the keys a user of our twin would copy
are read from the result. The agentic RFT recipes (`mtrl-*.yaml`, the agent twins') stand alone:
their keys are read as written.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from omegaconf import OmegaConf

ACTOR, ROLLOUT, MODEL = ("training_config.actor_rollout_ref." + k for k in ("actor", "rollout", "model"))
REWARD = "training_config.reward_model.reward_kwargs"


def composed(root: Path, name: str):
    """The recipe as the vendor's launcher sees it: the `recipes` package with the recipe's own body
    (which Hydra places under its directory's name) merged over it."""
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(root), version_base=None):
        cfg = compose(name)
    plain = lambda node: OmegaConf.create(OmegaConf.to_container(node))  # noqa: E731 - without struct flags
    return OmegaConf.merge(plain(cfg.recipes), *(plain(cfg[k]) for k in cfg if k != "recipes"))


def facts(root: Path, path: Path) -> dict:
    recipe = composed(root, f"{path.parent.name}/{path.stem}")
    get = lambda key: OmegaConf.select(recipe, key, throw_on_resolution_failure=False)  # noqa: E731
    rank = get(f"{MODEL}.lora_rank") or get(f"{MODEL}.lora.rank") or 0  # FSDP's key, or Megatron's
    alpha = get(f"{MODEL}.lora_alpha") if get(f"{MODEL}.lora_rank") else get(f"{MODEL}.lora.alpha")
    batch, mini = get("training_config.data.train_batch_size"), get(f"{ACTOR}.ppo_mini_batch_size")
    return {
        "vendor_file": f"{path.parent.name}/{path.name}",
        "model": get(f"{MODEL}.path"),
        "method": "grpo_lora" if rank else "grpo",
        "instance_types": sorted(get("instance_types")),
        "nodes": get("trainer.num_nodes"),
        "actor_strategy": "megatron" if get(f"{ACTOR}.megatron") is not None else get(f"{ACTOR}.strategy"),
        "learning_rate": get(f"{ACTOR}.optim.lr"),
        "num_generations": get(f"{ROLLOUT}.n"),
        "temperature": get(f"{ROLLOUT}.temperature"),
        "top_p": get(f"{ROLLOUT}.top_p"),
        "top_k": get(f"{ROLLOUT}.top_k"),
        "max_prompt_length": get("training_config.data.max_prompt_length"),
        "max_new_tokens": get("training_config.data.max_response_length"),
        "train_batch_size": batch,
        "ppo_mini_batch_size": mini,
        "mini_batches": batch // mini,
        "kl_coef": float(get(f"{ACTOR}.kl_loss_coef")) if get(f"{ACTOR}.use_kl_loss") else 0.0,
        "kl_type": get(f"{ACTOR}.kl_loss_type"),
        "clip_ratio_low": get(f"{ACTOR}.clip_ratio_low"),
        "clip_ratio_high": get(f"{ACTOR}.clip_ratio_high"),
        "clip_ratio_c": get(f"{ACTOR}.clip_ratio_c"),
        "loss_agg_mode": get(f"{ACTOR}.loss_agg_mode"),
        "advantage": get("training_config.algorithm.adv_estimator"),
        "scale_rewards": get("training_config.algorithm.norm_adv_by_std_in_grpo"),
        "rollout_correction": get("training_config.algorithm.rollout_correction.rollout_is"),
        "rollout_correction_threshold": get("training_config.algorithm.rollout_correction.rollout_is_threshold"),
        "lora": {"r": rank, "lora_alpha": alpha, "target_modules": get(f"{MODEL}.target_modules")} if rank else None,
        "tensor_parallel_size": get(f"{ROLLOUT}.tensor_model_parallel_size"),
        "gpu_memory_utilization": get(f"{ROLLOUT}.gpu_memory_utilization"),
        "total_epochs": get("training_config.trainer.total_epochs"),
        **({"judge": judge(get)} if get(f"{REWARD}.reward_fn_name") == "llmj" else {}),
    }


def judge(get) -> dict:
    """An RLAIF recipe's LLM judge (its reward_kwargs), the template by its file's name."""
    kwargs = OmegaConf.to_container(get(f"{REWARD}.kwargs"))
    kwargs["prompt_template"] = Path(kwargs.pop("llmj_prompt_template_path")).name
    return kwargs


def agentic_facts(path: Path) -> dict:
    """An agentic RFT recipe's settings, as its file writes them."""
    recipe = OmegaConf.load(path)
    get = lambda key: OmegaConf.select(recipe, key)  # noqa: E731
    return {"file": f"{path.parent.name}/{path.name}", "model": get("model.model_name"),
            **{key.rsplit(".", 1)[-1]: get(key) for key in (
                "batch.training_batch_size", "batch.group_size", "rl.loss_fn", "rl.clip_low_threshold",
                "rl.clip_high_threshold", "sampling_params.temperature", "sampling_params.max_tokens",
                "model.lora_rank", "model.lora_alpha", "model.learning_rate", "model.grad_clip_norm",
                "schedule.max_steps", "schedule.val_every", "rollout.max_concurrency",
                "async_config.max_steps_off_policy")},
            "pass_k_values": list(get("val_metrics_config.pass_k_values")),
            "success_threshold": get("val_metrics_config.success_threshold")}


def main(checkout: str, kind: str = "rlvr") -> None:
    root = Path(checkout) / "hyperpod_recipes" / "recipes_src" / "fine-tuning"
    if kind == "mtrl":  # the open models' (Nova's run on the vendor's own service)
        recipes = sorted(p for p in root.glob("*/mtrl-*.yaml"))
        print(json.dumps([agentic_facts(path) for path in recipes], indent=1))
        return
    recipes = sorted(root.glob(f"*/verl-grpo-{kind}-*.yaml"))
    if not recipes:
        sys.exit(f"error: no verl-grpo-{kind}-*.yaml under {root}: pass a checkout of aws/sagemaker-hyperpod-recipes "
                 f"(and rlvr or rlaif)")
    print(json.dumps([facts(root, path) for path in recipes], indent=1))


if __name__ == "__main__":
    main(*sys.argv[1:3] or sys.exit(__doc__))
