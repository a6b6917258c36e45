"""Composing recipes, overriding and swapping scale configs, and the dry-run artifacts."""

import yaml
import pytest

from conftest import MAIN_COMMAND, ROOT, method_of, run_launcher_process
from elastic_launcher.config.compose import options
from k8s_schema import hyperpod_sdk_model, validate_crd
from elastic_launcher.planning.plan import make_plan
from training.contract.config import load_job_config
from training.contract.config_files import select_config_file

# The tiny vLLM twin samples with vLLM's CPU build on this machine (action=local, action=rehearse): a
# cluster job of it is refused, the image's vLLM being its CUDA build.
LOCAL_ONLY = ["llama/tiny_llama_vllm_grpo"]
RECIPES = [r for r in options("recipes") if r not in LOCAL_ONLY]
# One recipe of each family, method and kind (a tiny CPU twin or not): the fixed-size path is the elastic one at one size.
FIXED = sorted({(r.split("/")[0], method_of(r), "tiny" in r): r for r in RECIPES}.values())


def read_configs(tmp_path, job):
    configs = tmp_path / "out" / job / "configs"
    return {p.name: yaml.safe_load(p.read_text()) for p in configs.iterdir()}


def training_args(config):
    return config["training_config"]["training_args"]


def test_every_shipped_recipe_is_listed():
    assert {"llama/llama3_1_8b_sft", "llama/llama3_2_1b_sft", "llama/llama3_3_70b_sft", "gpt_oss/gpt_oss_20b_sft",
            "gpt_oss/gpt_oss_120b_sft", "llama/tiny_llama_sft", "llama/llama3_2_1b_sft_lora", "llama/llama3_1_8b_sft_lora",
            "llama/llama3_3_70b_sft_lora", "llama/llama3_1_8b_dpo", "gpt_oss/gpt_oss_20b_sft_lora",
            "gpt_oss/gpt_oss_120b_sft_lora", "gpt_oss/gpt_oss_20b_dpo", "llama/tiny_llama_sft_lora",
            "llama/tiny_llama_dpo"} <= set(RECIPES)


# The elastic plan validates every allowed size of every recipe; the fixed one (one size, the same path) for
# FIXED, in the full suite.
@pytest.mark.parametrize("recipe, elastic", [*((r, True) for r in RECIPES),
                                             *(pytest.param(r, False, marks=pytest.mark.slow) for r in FIXED)])
def test_every_recipe_composes_and_renders(launch, tmp_path, recipe, elastic):
    code, out, err = launch(f"recipes={recipe}", f"recipes.elastic_policy.is_elastic={str(elastic).lower()}")
    assert code == 0, err
    job_dir = next((tmp_path / "out").iterdir())
    docs = list(yaml.safe_load_all((job_dir / "manifest.yaml").read_text()))
    assert [d["kind"] for d in docs if d] == ["ConfigMap", "HyperPodPyTorchJob"]
    configs = read_configs(tmp_path, job_dir.name)
    # Every per-size file is a complete training config the trainer loads, for its own node count,
    # with the global batch of the base config (the data stream is the same at every size).
    base = load_job_config(job_dir / "configs" / "config.yaml").training_config.training_args.train_batch_size
    for name in configs:
        cfg = load_job_config(job_dir / "configs" / name)
        assert cfg.training_config.training_args.train_batch_size == base
        if name != "config.yaml":
            assert cfg.trainer.num_nodes == int(name.removeprefix("config-n").removesuffix(".yaml"))
    assert ("elasticPolicy" in docs[1]["spec"]) == elastic
    if elastic:  # the independent validators: the CRD's schema, and the HyperPod SDK's model
        validate_crd(docs[1], "hyperpodpytorchjob.schema.yaml")
        hyperpod_sdk_model().model_validate(docs[1]["spec"], by_name=True, by_alias=False)


@pytest.mark.parametrize("recipe", LOCAL_ONLY)
def test_a_recipe_that_samples_with_vllms_cpu_build_is_refused_as_a_cluster_job(launch, tmp_path, recipe):
    code, _, err = launch(f"recipes={recipe}")
    assert code == 2 and "needs GPUs, and ml.m5.2xlarge has none (the image's vLLM is its CUDA build; action=local " \
                          "runs vLLM's CPU build)" in err
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


def test_main_command_plans_every_allowed_size(launch, tmp_path):
    code, out, _ = launch(*MAIN_COMMAND)
    assert code == 0
    configs = read_configs(tmp_path, "llama3-1-8b-sft")
    assert set(configs) == {"config.yaml", "config-n2.yaml", "config-n3.yaml", "config-n4.yaml", "config-n6.yaml",
                            "config-n8.yaml"}
    # The printed table has one row per allowed size, with the uneven split at 3 nodes.
    rows = [line.split() for line in out.splitlines() if line.strip()[:1].isdigit()]
    assert [r[0] for r in rows] == ["2", "3", "4", "6", "8"]
    assert rows[1][:6] == ["3", "24", "24", "hsdp", "3x8", "16x5+8x6"]
    assert "n1, n16" in out  # scale_config entries outside [2, 8]: reported, not an error
    uneven = training_args(configs["config-n3.yaml"])["uneven_batch"]
    assert (uneven["num_dp_groups_with_small_batch_size"], uneven["small_local_batch_size"],
            uneven["large_local_batch_size"]) == (16, 5, 6)
    assert configs["config-n3.yaml"]["trainer"]["num_nodes"] == 3


def sharding(config) -> tuple[str, int]:
    mc = config["training_config"]["model_config"]
    return mc["sharding"], mc["sharding_degree"]


def test_the_planner_shards_within_a_node_wherever_it_fits(launch, tmp_path):
    """sharding: auto (the default) picks HSDP over one node's 8 GPUs at every multi-node size where
    the step fits so (Llama 3.1 8B), FSDP over every GPU where only that fits (Llama 3.3 70B, whose
    state alone is 140 GB per GPU over 8), and writes the choice into each size's config."""
    code, _, err = launch(*MAIN_COMMAND)
    assert code == 0, err
    small = read_configs(tmp_path, "llama3-1-8b-sft")
    assert {name: sharding(c) for name, c in small.items() if name != "config.yaml"} == \
        {f"config-n{n}.yaml": ("hsdp", 8) for n in (2, 3, 4, 6, 8)}
    code, out, err = launch("recipes=llama/llama3_3_70b_sft", "recipes.elastic_policy.is_elastic=true")
    assert code == 0, err
    large = read_configs(tmp_path, "llama3-3-70b-sft")
    nodes = [int(name[8:-5]) for name in large if name != "config.yaml"]
    assert all(sharding(large[f"config-n{n}.yaml"]) == ("fsdp", 8 * n) for n in nodes), nodes
    code, out, err = launch(*MAIN_COMMAND, "recipes.training_config.model_config.sharding=fsdp")
    assert code == 0 and "hsdp" not in out
    assert {sharding(c)[0] for c in read_configs(tmp_path, "llama3-1-8b-sft").values()} == {"fsdp"}


def test_a_sharding_degree_that_does_not_divide_a_size_is_refused_in_one_line(launch, tmp_path):
    code, _, err = launch(*MAIN_COMMAND, "recipes.training_config.model_config.sharding_degree=16")
    assert code != 0 and len(err.strip().splitlines()) == 1, err
    assert "sharding_degree=16 does not divide the 24 GPUs at 3 nodes" in err and "Traceback" not in err
    code, _, err = launch(*MAIN_COMMAND, "recipes.elastic_policy.replica_discrete_values=[2,4,8]",
                          "recipes.training_config.model_config.sharding_degree=16")
    assert code == 0, err
    fixed = {n: sharding(c) for n, c in read_configs(tmp_path, "llama3-1-8b-sft").items() if n != "config.yaml"}
    assert fixed == {"config-n2.yaml": ("fsdp", 16), "config-n4.yaml": ("hsdp", 16), "config-n8.yaml": ("hsdp", 16)}


def test_scale_config_entry_overridden_from_command_line(launch, tmp_path):
    code, _, err = launch(*MAIN_COMMAND, "recipes.scale_config.n4.training_config.training_args.micro_train_batch_size=2",
                          "++recipes.scale_config.n4.training_config.training_args.learning_rate=1e-5")
    assert code == 0, err
    configs = read_configs(tmp_path, "llama3-1-8b-sft")
    assert training_args(configs["config-n4.yaml"])["micro_train_batch_size"] == 2
    assert training_args(configs["config-n4.yaml"])["learning_rate"] == 1e-5
    assert training_args(configs["config-n2.yaml"])["learning_rate"] == 2e-5


def test_new_scale_config_entry_added_with_plus(launch, tmp_path):
    code, out, err = launch(*MAIN_COMMAND, "recipes.elastic_policy.replica_discrete_values=[2,5]",
                            "+recipes.scale_config.n5.training_config.training_args.micro_train_batch_size=4")
    assert code == 0, err
    configs = read_configs(tmp_path, "llama3-1-8b-sft")
    assert training_args(configs["config-n5.yaml"])["micro_train_batch_size"] == 4
    assert set(configs) == {"config.yaml", "config-n2.yaml", "config-n5.yaml"}


def test_scale_config_set_swapped_from_command_line(launch, tmp_path):
    code, out, err = launch(*MAIN_COMMAND, "scale_configs@recipes.scale_config=llama3_8b_p4d",
                            "recipes.instance_type=ml.p4d.24xlarge")
    assert code == 0, err
    configs = read_configs(tmp_path, "llama3-1-8b-sft")
    assert training_args(configs["config-n2.yaml"])["micro_train_batch_size"] == 2  # p4d set, not p5's 8
    manifest = (tmp_path / "out" / "llama3-1-8b-sft" / "manifest.yaml").read_text()
    assert "ml.p4d.24xlarge" in manifest and "vpc.amazonaws.com/efa: '4'" in manifest


UPSTREAM_BLOCK = """\
# scale_config copied unchanged from a sagemaker-hyperpod-recipes recipe
2:
  trainer:
    num_nodes: 2
  training_config:
    training_args:
      train_batch_size: 128
      micro_train_batch_size: 8
      learning_rate: 0.0004
3:
  trainer:
    num_nodes: 3
  training_config:
    training_args:
      train_batch_size: 128
      learning_rate: 0.0004
      uneven_batch:
        use_uneven_batch: true
        num_dp_groups_with_small_batch_size: 16
        small_local_batch_size: 5
        large_local_batch_size: 6
"""


def test_upstream_scale_config_block_accepted(launch, tmp_path):
    (tmp_path / "extra" / "scale_configs").mkdir(parents=True)
    (tmp_path / "extra" / "scale_configs" / "upstream.yaml").write_text(UPSTREAM_BLOCK)
    code, out, err = launch("recipes=llama/llama3_1_8b_sft", "recipes.elastic_policy.is_elastic=true",
                            "recipes.elastic_policy.min_nodes=2", "recipes.elastic_policy.max_nodes=3",
                            f"hydra.searchpath=[file://{tmp_path / 'extra'}]",
                            "scale_configs@recipes.scale_config=upstream",
                            # an integer-keyed entry is overridden through its n<nodes> twin
                            "+recipes.scale_config.n2.training_config.training_args.learning_rate=1e-4")
    assert code == 0, err
    configs = read_configs(tmp_path, "llama3-1-8b-sft")
    assert set(configs) == {"config.yaml", "config-n2.yaml", "config-n3.yaml"}
    assert training_args(configs["config-n2.yaml"])["learning_rate"] == 1e-4
    assert training_args(configs["config-n2.yaml"])["micro_train_batch_size"] == 8
    assert training_args(configs["config-n3.yaml"])["learning_rate"] == 4e-4
    assert "16x5+8x6" in out


def test_step_policy_sizes_without_entries_get_derived_batch_math():
    from elastic_launcher.config.compose import compose, to_plain

    cfg = to_plain(compose(["recipes=llama/llama3_1_8b_sft", "recipes.elastic_policy.is_elastic=true",
                            "recipes.elastic_policy.min_nodes=1", "recipes.elastic_policy.max_nodes=9",
                            "recipes.elastic_policy.replica_increment_step=2"])[0])
    plan = make_plan(cfg["recipes"])
    assert [s.nodes for s in plan.sizes] == [1, 3, 5, 7, 9]
    five = plan.size(5)
    assert not five.from_scale_config and five.batch.dp_size == 40
    assert sum(five.batch.local_batches) == 128 and five.batch.describe_local() == "32x3+8x4"
    assert plan.size(3).from_scale_config


def test_trainer_picks_the_file_for_its_size_and_falls_back_to_base(launch, tmp_path):
    assert launch(*MAIN_COMMAND)[0] == 0
    configs = tmp_path / "out" / "llama3-1-8b-sft" / "configs"
    assert select_config_file(configs, 3) == (configs / "config-n3.yaml", True)
    assert select_config_file(configs, 5) == (configs / "config.yaml", False)


def test_hydra_cfg_job_help_and_plus_plus_overrides(launch):
    code, out, _ = launch("--cfg", "job", "++recipes.run.name=renamed")
    assert code == 0 and yaml.safe_load(out)["recipes"]["run"]["name"] == "renamed"
    code, out, _ = launch("--help")
    assert code == 0 and "scale_configs@recipes.scale_config" in out
    lines = out.splitlines()
    listed = {line.split()[0]: line.split("  ", 3)[-1].strip() for line in lines if line.startswith("    ")}
    assert set(options("recipes")) <= set(listed)  # one per line, under its family, with its facts
    assert listed["qwen/qwen3_8b_grpo_lora"] == "grpo, LoRA, 1 node, elastic 1-4 nodes"  # static unless is_elastic=true
    assert listed["qwen/qwen3_8b_grpo_rlaif_lora"] == "grpo with an LLM judge, LoRA, 1 node, elastic 1-4 nodes"
    assert listed["llama/tiny_llama_sft"] == "sft, full, 2 nodes, elastic 1-3 nodes"
    assert "  llama/" in lines and max(map(len, lines)) <= 120


@pytest.mark.slow  # composes every recipe
def test_the_help_says_of_each_recipe_what_composing_it_gives():
    """--help reads each recipe's method, LoRA, node count and elastic range from its files without
    composing it (all of them at once): the same as the composed recipe's."""
    from elastic_launcher.config.compose import compose, to_plain
    from elastic_launcher.config.user_recipes import recipe_facts

    for recipe in options("recipes"):
        composed = to_plain(compose([f"recipes={recipe}"])[0])["recipes"]
        tc, policy = composed["training_config"], composed["elastic_policy"]
        lora = "LoRA" if tc["model_config"].get("peft_config") else "full"
        method_args = tc["training_args"].get("method_args") or {}
        judged = " with an LLM judge" if "judge" in method_args.get("rewards", []) else ""
        agent = ", an agent with tools" if method_args.get("environment") else ""
        span = f"{policy['min_nodes']}-{policy['max_nodes']} nodes"
        if not policy["is_elastic"]:  # the nodes it runs at, and the range is_elastic=true allows
            nodes = composed["trainer"]["num_nodes"]
            span = f"{nodes} node{'s' * (nodes != 1)}, elastic {span}"
        assert recipe_facts(recipe) == f"{tc['training_args']['trainer_type']}{judged}{agent}, {lora}, {span}", recipe


def test_dry_run_as_typed_in_a_fresh_process_never_imports_torch_or_kubernetes(tmp_path):
    probe = ("import sys; from elastic_launcher.cli import main; code = main(sys.argv[1:]); "
             "assert code == 0; bad = {'torch', 'kubernetes'} & set(sys.modules); assert not bad, bad")
    import subprocess
    import sys

    result = subprocess.run([sys.executable, "-c", probe, *MAIN_COMMAND, f"output_dir={tmp_path}"], cwd=ROOT,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert "llama3-1-8b-sft: elastic, 2, 3, 4, 6, 8 nodes (within 2..8)" in result.stdout


def test_main_command_works_exactly_as_typed(tmp_path):
    result = run_launcher_process(*MAIN_COMMAND, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "results" / "llama3-1-8b-sft" / "manifest.yaml").is_file()


def test_the_memory_allowance_names_its_parts(launch):
    """What the trace cannot see, by part: the CUDA context; NCCL per communicator (FSDP's one,
    HSDP's three); the fused loss's gradients (full-parameter SFT: the LM head's in fp32, 2 GiB for
    Llama 3.1 8B; LoRA: only the hidden states'; DPO: none); fragmentation. The dry run says so."""
    from elastic_launcher.planning.memory import (CUDA_CONTEXT_GIB, FRAGMENTATION, NCCL_COMMUNICATOR_GIB, Allowance,
                                                  ModelShape)
    from elastic_launcher.planning.plan import make_plan
    from elastic_launcher.config.compose import compose, to_plain

    def allowance(recipe, hsdp):
        plan = make_plan(to_plain(compose([f"recipes={recipe}"])[0])["recipes"])
        return Allowance.of(plan.hardware.model_shape, plan.base.training_config, hsdp, micro_batch=2)

    shape = ModelShape.from_config(make_plan(to_plain(compose(["recipes=llama/llama3_1_8b_sft"])[0])["recipes"])
                                   .hardware.model_shape)
    hidden_grads = 2 * 2 * 4096 * shape.hidden_size / 2**30  # micro-batch 2 x 4096 tokens, bf16
    full, lora, dpo = (allowance(r, hsdp=False) for r in ("llama/llama3_1_8b_sft", "llama/llama3_1_8b_sft_lora",
                                                          "llama/llama3_1_8b_dpo"))
    assert full.fused_loss_gib == pytest.approx(4 * shape.vocab_size * shape.hidden_size / 2**30 + hidden_grads)
    assert 1.9 < full.fused_loss_gib - hidden_grads < 2.0
    assert lora.fused_loss_gib == pytest.approx(hidden_grads) and dpo.fused_loss_gib == 0
    assert (full.communicators, allowance("llama/llama3_1_8b_sft", hsdp=True).communicators) == (1, 3)
    assert full.total_gib(10) == pytest.approx(10 * (1 + FRAGMENTATION) + CUDA_CONTEXT_GIB + NCCL_COMMUNICATOR_GIB +
                                               full.fused_loss_gib)
    code, out, _ = launch(*MAIN_COMMAND)
    assert code == 0 and "NCCL 1.5 GiB per communicator (1 under FSDP, 3 under HSDP)" in out
    assert "the fused loss's gradients" in out and "CUDA context 0.5 GiB" in out
