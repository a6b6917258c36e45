"""The recipe catalogue: every vendor elastic recipe (sagemaker-hyperpod-recipes, read into
tests/fixtures/vendor_elastic_recipes.json) has a twin here that agrees on the facts a user copies, and
so does every vendor GRPO-RLVR and GRPO-RLAIF recipe of a catalogue model (tests/fixtures/
vendor_grpo_recipes.json, vendor_grpo_rlaif_recipes.json);
every recipe at every allowed size has a kept memory trace, fits within 90% of its GPU and lists
only instance types where it fits; the analytic fallback counts what transformers builds; the dry
run warns outside a recipe's instance types and where a size would not fit; the table in docs/recipes.md is
the recipes on disk."""

import copy
import functools
import json
import re
import sys

import pytest

from conftest import ROOT, VENDOR_GRPO, VENDOR_GRPO_KEYS, method_of
from elastic_launcher.config.compose import compose, to_plain
from elastic_launcher.config.user_recipes import catalogue
from elastic_launcher.planning.memory import FIT_SHARE, Allowance, ModelShape
from elastic_launcher.planning.plan import fallback_estimate, make_plan, scale_config_key
from elastic_launcher.planning.rollouts import rollout_phases
from training.contract.errors import ConfigError
from training.contract.grpo_args import correction_level
from training.contract.methods import sampling_options

pytestmark = pytest.mark.slow  # composes and plans every recipe of the catalogue: the full suite only
FALLBACK_BAND = (0.7, 1.35)  # a guide: it may understate a traced peak by 30% or overstate it by 35%
VENDOR = json.loads((ROOT / "tests" / "fixtures" / "vendor_elastic_recipes.json").read_text())


@functools.cache
def composed(recipe: str) -> dict:
    """The recipe as composed with no overrides (composed once per test session)."""
    return to_plain(compose([f"recipes={recipe}"])[0])["recipes"]


@functools.cache
def elastic_recipe(recipe: str, *overrides) -> dict:
    """The recipe as composed elastic (composed once per test session)."""
    return to_plain(compose([f"recipes={recipe}", "recipes.elastic_policy.is_elastic=true", *overrides])[0])["recipes"]


@functools.cache
def plan_of(recipe, *overrides):
    """The recipe's plan at its elastic sizes (planned once per test session: plans are frozen)."""
    return make_plan(copy.deepcopy(elastic_recipe(recipe, *overrides)))


def plan_on(recipe: str, instance_type: str):
    """The recipe's plan on another instance type: composition never reads `instance_type`, so the
    composed recipe with it replaced is what `recipes.instance_type=...` composes."""
    return make_plan({**copy.deepcopy(elastic_recipe(recipe)), "instance_type": instance_type})


def twin_of(vendor: dict) -> str:
    """Our recipe for the vendor's model and method (LoRA SFT or DPO)."""
    found = []
    for recipe in catalogue("recipes"):
        if not recipe.endswith(("_sft_lora", "_dpo")):
            continue
        plain = composed(recipe)["training_config"]
        method = "dpo" if plain["training_args"]["trainer_type"] == "dpo" else "sft_lora"
        if plain["model_config"]["model_name_or_path"] == vendor["model"] and method == vendor["method"]:
            found.append(recipe)
    assert len(found) == 1, (vendor["vendor_file"], found)
    return found[0]


@pytest.mark.parametrize("vendor", VENDOR, ids=[v["vendor_file"] for v in VENDOR])
def test_every_vendor_recipe_has_a_twin_that_agrees(vendor):
    plan = plan_of(twin_of(vendor))
    tc = plan.base.training_config
    peft = tc.model_config.peft_config
    assert {"r": peft.r, "lora_alpha": peft.lora_alpha, "lora_dropout": peft.lora_dropout,
            "target_modules": peft.target_modules} == vendor["lora"]
    assert tc.datasets.max_len == vendor["algorithm_defaults"]["max_len"]
    if vendor["method"] == "dpo":
        args = tc.training_args.method_args
        assert (args["beta"], args["loss_type"]) == (vendor["algorithm_defaults"]["beta"],
                                                     vendor["algorithm_defaults"]["loss_type"])
    assert tc.training_args.max_epochs == vendor["algorithm_defaults"]["max_epochs"]
    assert tc.training_args.lr_warmup_ratio == vendor["algorithm_defaults"]["lr_warmup_ratio"]
    assert tc.training_args.merge_weights == vendor["recipe_overrides"].get("merge_weights", False)
    assert [s.nodes for s in plan.sizes] == sorted(int(n) for n in vendor["scale_config"])
    assert (plan.policy.min_nodes, plan.policy.max_nodes) == (vendor["elastic_policy"]["min_nodes"],
                                                              vendor["elastic_policy"]["max_nodes"])
    assert plan.policy.graceful_shutdown_timeout == vendor["elastic_policy"]["graceful_shutdown_timeout"]
    assert sorted(plan.hardware.instance_types) == sorted(vendor["instance_types"])
    for size in plan.sizes:
        entry, args = vendor["scale_config"][str(size.nodes)], size.config.training_config.training_args
        assert args.train_batch_size == entry["train_batch_size"], size.nodes
        assert args.learning_rate == entry["learning_rate"], size.nodes
        if "micro_train_batch_size" in entry:
            assert args.micro_train_batch_size == entry["micro_train_batch_size"], size.nodes
        if "uneven_batch" in entry:
            ub = entry["uneven_batch"]
            small, large = ub["small_local_batch_size"], ub["large_local_batch_size"]
            n_small = ub["num_dp_groups_with_small_batch_size"]
            assert size.batch.local_batches == (small,) * n_small + (large,) * (size.batch.dp_size - n_small)


def test_every_model_has_full_sft_lora_sft_and_dpo():
    models = {v["model"] for v in VENDOR}
    assert len(models) == 23
    by_model = {}
    for recipe in catalogue("recipes"):
        plain = composed(recipe)["training_config"]
        by_model.setdefault(plain["model_config"]["model_name_or_path"], set()).add(method_of(recipe))
    for model in models:
        assert {"sft", "sft_lora", "dpo"} <= by_model.get(model, set()), model


CATALOGUE = [r for r in catalogue("recipes") if "tiny" not in r]
NEWER_VENDOR = json.loads((ROOT / "tests" / "fixtures" / "vendor_0_7_0_recipes.json").read_text())


@pytest.mark.parametrize("vendor", NEWER_VENDOR, ids=[v["vendor_file"] for v in NEWER_VENDOR])
def test_the_newer_families_carry_the_vendor_s_model_sequence_length_and_learning_rate(vendor):
    """Gemma 4 and Nemotron 3 Nano: the facts of the vendor's (non-elastic) verl recipes, read from
    its files (sagemaker-hyperpod-recipes, recipes_collection/recipes/fine-tuning/*-0_7_0/)."""
    tc = plan_of(vendor["recipe"]).base.training_config
    assert tc.model_config.model_name_or_path == vendor["model"]
    assert (tc.datasets.max_len, tc.training_args.learning_rate) == (vendor["max_len"], vendor["learning_rate"])
    if "r" in vendor:
        assert (tc.model_config.peft_config.r, tc.model_config.peft_config.lora_alpha) == (vendor["r"],
                                                                                          vendor["lora_alpha"])
    if "beta" in vendor:
        assert tc.training_args.method_args["beta"] == vendor["beta"]


@pytest.mark.parametrize("recipe", sorted({r for r in CATALOGUE if r.endswith("_sft")}))
def test_the_attention_implementation_is_one_the_model_has(recipe):
    """transformers builds each recipe's model with its attn_implementation: Qwen 3.5 has no flex
    attention (its recipes use sdpa), and the launcher refuses flex for it before anything starts."""
    from transformers import AutoConfig
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING

    from training.contract.families import family_refusal

    shape = dict(composed(recipe)["model_shape"])
    model_class = MODEL_FOR_CAUSAL_LM_MAPPING[type(AutoConfig.for_model(shape["model_type"]))]
    implementation = plan_of(recipe).base.training_config.model_config.attn_implementation
    assert getattr(model_class, f"_supports_{implementation.replace('_attention', '_attn')}"), (recipe, implementation)
    assert (family_refusal(shape, packing=False, attn_implementation="flex_attention") is None) == \
        model_class._supports_flex_attn


def fits(memory, instance) -> bool:
    return memory.total_gib <= FIT_SHARE * instance.gpu_memory_gib


@pytest.mark.parametrize("recipe", CATALOGUE)
def test_every_size_is_traced_and_fits_within_90_percent(recipe):
    """The dry run's GiB/GPU is the trace of the trainer's step (plus the allowance) at every allowed
    size, and that is at most 90% of the GPU: a changed recipe without a fresh trace fails here."""
    plan = plan_of(recipe)
    for size in plan.sizes:
        assert size.memory.traced, (f"{recipe} at {size.nodes} nodes has no kept trace: run "
                                    f"python scripts/trace_memory.py --stale --keep")
        assert fits(size.memory, plan.instance), (recipe, size.nodes, size.memory.total_gib)
    assert plan.instance.name in plan.hardware.instance_types


@pytest.mark.parametrize("recipe", CATALOGUE)
def test_instance_types_are_those_where_the_model_fits(recipe):
    """Each listed instance type with the recipe's GPUs per node fits the model at some allowed size
    (the same world sizes, so the same traces, against that type's GPU memory). A 4-GPU type needs
    scale configs of its own (docs/recipes.md: Instance types), traced with them."""
    from elastic_launcher.planning.instances import lookup

    plan = plan_of(recipe)
    for instance_type in plan.hardware.instance_types:
        if lookup(instance_type).gpus != plan.instance.gpus:
            continue
        other = plan_on(recipe, instance_type)
        assert any(fits(s.memory, other.instance) for s in other.sizes if s.memory.traced), (recipe, instance_type)


FULL_SFT = [r for r in CATALOGUE if r.endswith("_sft")]


@pytest.mark.parametrize("recipe", FULL_SFT)
def test_full_parameter_recipes_start_where_the_model_first_fits(recipe):
    """The first size fits (above) and the scale config's size just below it does not, by its kept
    trace (scripts/trace_memory.py traces that size too)."""
    sys.path.insert(0, str(ROOT / "scripts"))
    from trace_memory import size_below

    below = size_below(recipe)
    if below is None:
        assert plan_of(recipe).policy.min_nodes == 1
        return
    overrides, size = below
    plan = plan_of(recipe, *overrides)
    memory = next(s.memory for s in plan.sizes if s.nodes == size.nodes)
    assert memory.traced and not fits(memory, plan.instance), (recipe, size.nodes, memory.total_gib)


# --- the GRPO twins of the vendor's verl-grpo-rlvr recipes (tests/fixtures/vendor_grpo_recipes.json) ---

# Where the vendor ships two files for one model and method, the newer release's (-0_7_0) is the one followed.
NEWEST_GRPO = list({(v["model"], v["method"]): v for v in sorted(VENDOR_GRPO, key=lambda v: "-0_7_0/" in v["vendor_file"])}
                   .values())


def grpo_twin_of(vendor: dict) -> str | None:
    found = [r for r in CATALOGUE if method_of(r) == vendor["method"]
             and composed(r)["training_config"]["model_config"]["model_name_or_path"] == vendor["model"]]
    assert len(found) <= 1, (vendor["vendor_file"], found)
    return found[0] if found else None


def test_every_catalogue_model_with_a_vendor_rlvr_recipe_has_its_grpo_twins():
    """All but Nemotron 3 Super, which the catalogue has no recipe of (the vendor has no SFT or DPO
    recipe of it either); the gpt-oss twins train the bf16 copy the vendor's load, as vLLM needs."""
    models = {composed(r)["training_config"]["model_config"]["model_name_or_path"].removesuffix("-bf16")
              for r in CATALOGUE}
    missing = {v["model"] for v in NEWEST_GRPO if grpo_twin_of(v) is None}
    assert missing == {"nvidia/NVIDIA-Nemotron-3-Super-120B-A12B-BF16"}
    assert not missing & models


def agreeing_plan(vendor: dict, twin: str | None):
    """The twin's plan, held to what every GRPO twin shares with its vendor recipe: the algorithm's
    keys, vLLM's parallelism, the epochs, LoRA, the batch and LR at every size, instance types among
    the vendor's, and elastic sizes where every rank holds a prompt of every update."""
    if twin is None:
        pytest.skip(f"{vendor['model']}: no recipe of the model in the catalogue")
    plan = plan_of(twin)
    tc = plan.base.training_config
    args, sampling = tc.training_args, sampling_options(tc)
    assert {key: getattr(sampling, key) for key in VENDOR_GRPO_KEYS} == {key: vendor[key] for key in VENDOR_GRPO_KEYS}
    assert (vendor["advantage"], vendor["loss_agg_mode"], vendor["kl_type"]) == ("grpo", "token-mean", "low_var_kl")
    assert (sampling.rollout_engine, sampling.rollout_tensor_parallel_size) == ("vllm", vendor["tensor_parallel_size"])
    assert (args.trainer_type, args.max_epochs) == ("grpo", vendor["total_epochs"])
    lora = vendor["lora"]
    assert tc.model_config.lora == (lora is not None)
    if lora:
        peft = tc.model_config.peft_config
        assert (peft.r, peft.lora_alpha, peft.lora_dropout) == (lora["r"], lora["lora_alpha"], 0.0)
        # the vendor's regular expression '.*q_proj.*|.*k_proj.*|...' names the modules a list here names
        named = re.findall(r"\.\*(\w+)\.\*", lora["target_modules"]) or lora["target_modules"]
        assert peft.target_modules == named
    for size in plan.sizes:
        size_args = size.config.training_config.training_args
        assert (size_args.train_batch_size, size_args.learning_rate) == (vendor["train_batch_size"],
                                                                         vendor["learning_rate"]), size.nodes
    assert set(plan.hardware.instance_types) <= set(vendor["instance_types"]), plan.hardware.instance_types
    # Every rank holds a prompt of every update at every size, unless the model first fits where it cannot.
    per_update = vendor["train_batch_size"] // vendor["mini_batches"]
    gpus = plan.instance.gpus
    assert plan.policy.max_nodes * gpus <= per_update or plan.sizes[0].nodes * gpus > per_update, plan.policy
    assert len(plan.sizes) >= 2  # elastic
    return plan


@pytest.mark.parametrize("vendor", NEWEST_GRPO, ids=[v["vendor_file"] for v in NEWEST_GRPO])
def test_every_grpo_twin_agrees_with_the_vendors_rlvr_recipe(vendor):
    tc = agreeing_plan(vendor, grpo_twin_of(vendor)).base.training_config
    sampling = sampling_options(tc)
    assert (sampling.rewards, tc.datasets.train_data) == (["math_verify"], "openai/gsm8k")
    if vendor["rollout_correction"]:
        assert (sampling.rollout_correction, sampling.rollout_correction_threshold) == \
            (vendor["rollout_correction"], vendor["rollout_correction_threshold"])
    else:
        assert correction_level(sampling) == "none"


# --- the twins of the vendor's verl-grpo-rlaif recipes (tests/fixtures/vendor_grpo_rlaif_recipes.json) ----

VENDOR_RLAIF = json.loads((ROOT / "tests" / "fixtures" / "vendor_grpo_rlaif_recipes.json").read_text())
TEMPLATE_TWINS = {"summarize.jinja": "summary", "grader.jinja": "rubric"}  # the vendor's judge prompts: ours


def rlaif_twin_of(vendor: dict) -> str | None:
    return grpo_twin_of({**vendor, "method": vendor["method"].replace("grpo", "grpo_rlaif")})


def test_every_catalogue_model_with_a_vendor_rlaif_recipe_has_its_twin():
    missing = {v["model"] for v in VENDOR_RLAIF if rlaif_twin_of(v) is None}
    assert missing == {"nvidia/NVIDIA-Nemotron-3-Super-120B-A12B-BF16"}  # no recipe of the model here
    assert len(VENDOR_RLAIF) - len(missing) == 53


@pytest.mark.parametrize("vendor", VENDOR_RLAIF, ids=[v["vendor_file"] for v in VENDOR_RLAIF])
def test_every_rlaif_twin_agrees_with_the_vendors_recipe_and_its_judge(vendor):
    from training.contract.judge import judge_settings

    tc = agreeing_plan(vendor, rlaif_twin_of(vendor)).base.training_config
    sampling = sampling_options(tc)
    assert (sampling.rewards, tc.datasets.train_data) == (["judge"], "trl-lib/tldr")
    assert sampling.rollout_gpu_memory_utilization == vendor["gpu_memory_utilization"]
    judge, theirs = judge_settings(sampling.judge), vendor["judge"]
    assert (judge.model_id, judge.prompt_template, judge.range, judge.num_retries, judge.max_workers) == \
        (theirs["model_id"], TEMPLATE_TWINS[theirs["prompt_template"]], theirs["range"], theirs["num_retries"],
         theirs["max_workers"])
    assert (judge.aws_region_name, judge.service_tier) == (theirs["aws_region_name"], theirs.get("service_tier"))
    assert {k: v for k, v in judge.sampling_params.__dict__.items() if v is not None} == \
        {k: v for k, v in theirs["sampling_params"].items() if v is not None}


# --- the twins of the vendor's agentic RFT recipes (tests/fixtures/vendor_mtrl_recipes.json) ----------------

VENDOR_AGENTS = json.loads((ROOT / "tests" / "fixtures" / "vendor_mtrl_recipes.json").read_text())
AGENT_TWINS = {"Qwen/Qwen3.6-27B": "qwen/qwen3_6_27b_agent_lora", "openai/gpt-oss-20b": "gpt_oss/gpt_oss_20b_agent_lora",
               "google/gemma-4-31B-it": "gemma/gemma4_31b_agent_lora"}


@pytest.mark.parametrize("vendor", VENDOR_AGENTS, ids=[v["file"] for v in VENDOR_AGENTS])
def test_every_agent_twin_agrees_with_the_vendors_agentic_recipe(vendor):
    """The group, batch, loss and its clip (the vendor's ratio bounds), tokens per turn, LoRA, LR at
    every size, gradient clipping, steps, validation as pass@k; elastic; rollouts as far behind the
    policy as the vendor's, on the trainer's own sampler on ranks of their own and weighed per token
    toward the policy that drew them, with a calculator on GSM8K."""
    plan = plan_of(AGENT_TWINS[vendor["model"]])
    tc = plan.base.training_config
    args, o = tc.training_args, sampling_options(tc)
    assert tc.model_config.model_name_or_path.removesuffix("-bf16") == vendor["model"]
    assert (o.num_generations, o.loss_fn, 1 - o.clip_ratio_low, 1 + o.clip_ratio_high, o.temperature,
            o.max_new_tokens) == pytest.approx((vendor["group_size"], vendor["loss_fn"], vendor["clip_low_threshold"],
                                                vendor["clip_high_threshold"], vendor["temperature"],
                                                vendor["max_tokens"]))
    assert (o.mini_batches, o.kl_coef, o.rollout_engine, o.max_concurrency) == (1, 0.0, "trainer",
                                                                               vendor["max_concurrency"])
    assert (o.max_steps_off_policy, correction_level(o)) == (vendor["max_steps_off_policy"], "token")
    # half of each node's GPUs generate while the others train, each role's memory traced where it fits
    assert o.rollout_ranks_per_node == 4 and {s.nproc_per_node for s in plan.sizes} == {4}
    assert all(s.memory.traced and s.memory.rollout_gib is not None for s in plan.sizes)
    assert (o.eval_pass_k, o.eval_group_size, o.eval_success_threshold) == \
        (vendor["pass_k_values"], max(vendor["pass_k_values"]), vendor["success_threshold"])
    peft = tc.model_config.peft_config
    assert (peft.r, peft.lora_alpha) == (vendor["lora_rank"], vendor["lora_alpha"])
    assert (args.max_steps, args.max_epochs, args.eval_steps, args.max_grad_norm) == \
        (vendor["max_steps"], None, vendor["val_every"], vendor["grad_clip_norm"])
    for size in plan.sizes:
        size_args = size.config.training_config.training_args
        assert (size_args.train_batch_size, size_args.learning_rate) == (vendor["training_batch_size"],
                                                                         vendor["learning_rate"]), size.nodes
    assert (o.environment, o.rewards, tc.datasets.train_data) == ("data/calculator_env.py:Calculator",
                                                                  ["math_verify"], "openai/gsm8k")
    assert len(plan.sizes) >= 2  # elastic


@pytest.mark.parametrize("recipe", [r for r in CATALOGUE if r.endswith("_grpo")])
def test_full_parameter_grpo_recipes_start_where_both_phases_first_fit(recipe):
    """The dry run refuses the scale config's size just below the first, naming the phase that does
    not fit there (the rollout: vLLM's share awake beside the sharded state; or the updates)."""
    plan = plan_of(recipe)
    below = [n for n in map(scale_config_key, composed(recipe)["scale_config"]) if n < plan.policy.min_nodes]
    if not below:
        assert plan.policy.min_nodes == 1
        return
    n = max(below)
    with pytest.raises(ConfigError, match=f"at {n} node{'s' * (n != 1)} GRPO's (rollouts|updates) need"):
        plan_of(recipe, f"recipes.elastic_policy.min_nodes={n}", f"recipes.elastic_policy.max_nodes={n}",
                f"recipes.trainer.num_nodes={n}")


@pytest.mark.parametrize("recipe", FULL_SFT)
def test_full_parameter_recipes_of_32b_and_up_train_at_1e_5(recipe):
    plan = plan_of(recipe)
    if ModelShape.from_config(plan.hardware.model_shape).params >= 32e9:
        assert plan.base.training_config.training_args.learning_rate == 1e-5, recipe


def shape_of(recipe):
    return composed(recipe)["model_shape"]


@pytest.mark.parametrize("recipe", sorted({r for r in catalogue("recipes") if r.endswith("_sft") and "tiny" not in r}))
def test_the_parameter_count_is_what_transformers_builds(recipe):
    """The estimate's parameter count from a recipe's model_shape equals the parameters of the
    transformers model built from the same keys (on the meta device) within 0.5%: the terms it
    leaves out are biases and norms."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    shape = dict(shape_of(recipe))
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(AutoConfig.for_model(shape.pop("model_type"), **shape))
    built = sum(p.numel() for p in model.parameters())
    assert abs(ModelShape.from_config(shape_of(recipe)).params - built) <= 0.005 * built


@pytest.mark.parametrize("recipe", ["llama/llama3_1_8b_sft", "qwen/qwen3_8b_sft", "llama/llama4_scout_17b_16e_sft",
                                    "gpt_oss/gpt_oss_20b_sft", "gemma/gemma4_31b_sft", "gemma/gemma4_e4b_sft",
                                    "nemotron/nemotron3_nano_30b_sft"])
def test_the_lora_count_is_what_peft_injects(recipe):
    """Adapters on plain linear layers only: Llama 4's router and every fused expert stay frozen, as
    does Nemotron-H's Mamba output projection; Gemma 4's per-layer input projections are adapted."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    from training.contract.config import PeftConfig
    from training.model.lora import apply_lora

    small = shape_of(recipe)  # Gemma 4's and Nemotron-H's layer patterns: as published (meta tensors: no memory)
    if small["model_type"] not in ("gemma4_text", "nemotron_h"):
        small = {**small, "num_hidden_layers": 2}  # per-layer counts: two layers suffice
    args = {k: v for k, v in small.items() if k != "model_type"}
    with torch.device("meta"):
        model = apply_lora(AutoModelForCausalLM.from_config(AutoConfig.for_model(small["model_type"], **args)),
                           PeftConfig(r=16))
    injected = sum(p.numel() for n, p in model.named_parameters() if "lora_" in n)
    assert ModelShape.from_config(small).lora_params(16) == injected


def test_the_fallback_estimate_stays_near_every_trace():
    """Where no trace was kept (a changed micro-batch, say), the dry run shows the analytic fallback,
    marked `~`. Held against the trace at every allowed size of every recipe (its one constant
    fitted to them), it stays within FALLBACK_BAND of the traced figure (GRPO: of its updates, with
    what a sleeping vLLM engine keeps beside them, as the dry run adds it to either)."""
    ratios = []
    for recipe in CATALOGUE:
        plan = plan_of(recipe)
        for size in plan.sizes:
            allowance = Allowance.of(plan.hardware.model_shape, size.config.training_config,
                                     size.shard_degree < size.devices, size.batch.micro_batch)
            got = rollout_phases(fallback_estimate(plan.hardware.model_shape, size.config, size.shard_degree,
                                                   size.batch.micro_batch, allowance),
                                 plan.hardware.model_shape, size.config.training_config, plan.instance)  # as the dry run
            ratios.append((got.total_gib / size.memory.total_gib, recipe, size.nodes))
    low, high = FALLBACK_BAND
    assert all(low <= ratio <= high for ratio, _, _ in ratios), (min(ratios), max(ratios))


def test_fp64_master_weights_are_planned_at_twice_the_state():
    """fp64 master weights hold 32 bytes per trained parameter instead of 16 (weights, gradients and
    AdamW's moments) and write checkpoints twice the size; the fp32 runs' traced peaks are not theirs."""
    from elastic_launcher.planning.plan import checkpoint_gb

    fp32, fp64 = (plan_of("llama/llama3_1_8b_sft", *o)
                  for o in ([], ["recipes.training_config.model_config.master_weights=fp64"]))
    for a, b in zip(fp32.sizes, fp64.sizes):
        assert a.memory.traced and not b.memory.traced
        estimates = [fallback_estimate(p.hardware.model_shape, s.config, s.shard_degree, s.batch.micro_batch)
                     for p, s in ((fp32, a), (fp64, b))]
        assert estimates[1].state_gib == pytest.approx(2 * estimates[0].state_gib)
    gb = [checkpoint_gb(p.hardware.model_shape, p.sizes[0].config.training_config.model_config) for p in (fp32, fp64)]
    assert gb[1] == pytest.approx(2 * gb[0])


def test_the_dry_run_warns_outside_the_instance_types_and_where_it_does_not_fit(launch):
    code, out, err = launch("recipes=qwen/qwen3_8b_sft_lora", "recipes.elastic_policy.is_elastic=true",
                            "recipes.instance_type=ml.g6e.48xlarge")
    assert code == 0
    assert "warning: recipes.instance_type=ml.g6e.48xlarge is not one this recipe's scale configs were sized for" in out + err
    code, out, err = launch("recipes=qwen/qwen3_8b_sft", "recipes.elastic_policy.is_elastic=true",
                            "recipes.training_config.model_config.activation_checkpointing=none",
                            "recipes.training_config.training_args.micro_train_batch_size=8")
    assert code == 0
    assert "GiB/GPU" in out and " over " in out
    assert "warning: peak memory per GPU is above 90% of the 79.6 GiB of ml.p5.48xlarge (1 node" in out + err
    assert "~" in out  # a changed micro-batch and checkpointing were never traced: estimated, and said so


def test_the_documented_table_is_the_recipes_on_disk():
    sys.path.insert(0, str(ROOT / "scripts"))
    from catalogue import HEADER, table

    readme = (ROOT / "docs" / "recipes.md").read_text()
    start = readme.index(HEADER)
    end = readme.index("\n\n", start)
    assert readme[start:end] == table(plan_of), "regenerate it with: python scripts/catalogue.py"


def test_the_dry_run_warns_when_a_stop_save_cannot_end_within_the_graceful_timeout(launch):
    """Llama 3.3 70B's weights and moments (12 bytes a parameter, 847 GB) at the simulator's 5 GB/s
    take minutes: more than a 60-second graceful timeout, within the default 600."""
    code, out, err = launch("recipes=llama/llama3_3_70b_sft", "recipes.elastic_policy.is_elastic=true",
                            "recipes.elastic_policy.graceful_shutdown_timeout=60")
    assert code == 0
    assert "a stop saves 847 GB: ~169 s at simulate.write_gb_per_s=5, more than elastic_policy.graceful_shutdown_timeout=60" in out + err
    code, out, err = launch("recipes=llama/llama3_3_70b_sft", "recipes.elastic_policy.is_elastic=true")
    assert "graceful_shutdown_timeout" not in out + err
