"""Your own recipes ($LAUNCHER_RECIPES): composed, listed and suggested as the catalogue is, and their
memory traces kept in your directory, never in the package."""

import subprocess
import sys
import textwrap

import pytest

from conftest import ROOT, run_launcher_process
from elastic_launcher.config.user_recipes import PACKAGE_TRACES

SHORT_1B = """\
# Llama 3.2 1B SFT on short rows.
defaults:
  - /recipes/llama/llama3_2_1b_sft@_here_
  - _self_
run:
  name: llama1b-short-sft
training_config:
  datasets:
    max_len: 1024
elastic_policy:
  min_nodes: 1
  max_nodes: 2
"""


@pytest.fixture
def mine(tmp_path):
    home = tmp_path / "mine"
    (home / "recipes" / "byo").mkdir(parents=True)
    (home / "recipes" / "byo" / "llama1b_short_sft.yaml").write_text(SHORT_1B)
    return home


def test_your_recipes_are_listed_suggested_and_dry_run(mine, tmp_path):
    env = {"LAUNCHER_RECIPES": str(mine)}
    help_text = run_launcher_process("--help", env=env).stdout
    assert help_text.rstrip().endswith(textwrap.dedent(f"""\
        your recipes (LAUNCHER_RECIPES={mine}):
          byo/
            byo/llama1b_short_sft  sft, full, 1 node, elastic 1-2 nodes"""))  # its facts read from its files
    typo = run_launcher_process("recipes=byo/llama1b_shrt_sft", env=env)
    assert typo.returncode == 2
    assert typo.stderr.startswith("error: unknown recipes option recipes=byo/llama1b_shrt_sft: did you mean "
                                  "byo/llama1b_short_sft or ")
    done = run_launcher_process("recipes=byo/llama1b_short_sft", "recipes.elastic_policy.is_elastic=true",
                                f"output_dir={tmp_path / 'out'}", env=env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("llama1b-short-sft: elastic, 1..2 nodes")
    missing = run_launcher_process("--help", env={"LAUNCHER_RECIPES": str(tmp_path / "nope")})
    assert missing.returncode == 2 and missing.stderr == (f"error: LAUNCHER_RECIPES={tmp_path / 'nope'}: no such "
                                                          f"directory: point it at a directory holding "
                                                          f"recipes/<family>/<name>.yaml, or unset it\n")


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_your_recipes_traces_go_to_your_directory_and_the_dry_run_reads_them(mine, tmp_path):
    env = {"LAUNCHER_RECIPES": str(mine)}
    package_before = PACKAGE_TRACES.read_bytes()
    dry = ["recipes=byo/llama1b_short_sft", "recipes.elastic_policy.is_elastic=true", f"output_dir={tmp_path / 'out'}"]

    def gib_column() -> list[str]:
        out = run_launcher_process(*dry, env=env).stdout.splitlines()
        return [line.split()[-2] for line in out if line.strip()[:1].isdigit()]

    assert all(cell.startswith("~") for cell in gib_column())  # the analytic estimate: never traced
    traced = subprocess.run([sys.executable, str(ROOT / "scripts" / "trace_memory.py"), "byo/llama1b_short_sft",
                             "--keep"], cwd=ROOT, capture_output=True, text=True, timeout=280,
                            env={**__import__("os").environ, **env, "OMP_NUM_THREADS": "1"})
    assert traced.returncode == 0, traced.stderr[-2000:]
    assert PACKAGE_TRACES.read_bytes() == package_before
    assert '"recipe": "byo/llama1b_short_sft"' in (mine / "traced_memory.json").read_text()
    assert not any(cell.startswith("~") for cell in gib_column())


@pytest.fixture
def saved_model(tmp_path):
    """A tiny Llama as transformers' save_pretrained writes it, with its tokenizer."""
    from transformers import AutoConfig, AutoModelForCausalLM

    from conftest import tiny_architecture, tiny_tokenizer

    tokenizer = tiny_tokenizer()
    arch = tiny_architecture("llama")
    arch.pop("model_type")
    model = AutoModelForCausalLM.from_config(AutoConfig.for_model("llama", vocab_size=len(tokenizer), **arch))
    model.save_pretrained(tmp_path / "my_model")
    tokenizer.save_pretrained(tmp_path / "my_model")
    return tmp_path / "my_model"


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_the_your_model_page_runs_as_written_on_a_saved_model(tmp_path, saved_model):
    """docs/your-model.md's commands, as written (the page's paths swapped for this test's): the new
    recipe has the model's shape, its traces go to $LAUNCHER_RECIPES, the dry run shows them, the
    recipe is listed in --help and trains locally."""
    import json
    import os
    import re

    import yaml

    page = (ROOT / "docs" / "your-model.md").read_text()
    write, run = re.findall(r"```bash\n(.*?)```", page, re.S)[:2]
    home = tmp_path / "launcher-recipes"
    paths = {"~/launcher-recipes": str(home), "/models/my-mistral": str(saved_model),
             "/data/chats.jsonl": str(ROOT / "data" / "sft_tiny.jsonl"),  # and run from tmp_path, so that
             "python scripts/": f"python {ROOT}/scripts/", "python launcher.py": f"python {ROOT}/launcher.py"}  # results/ lands there
    script = write + run
    for shown, here in paths.items():
        script = script.replace(shown, here)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run(["bash", "-euc", script], cwd=tmp_path, capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    path = home / "recipes" / "byo" / "my_mistral_lora.yaml"
    recipe = yaml.safe_load(path.read_text())
    config = json.loads((saved_model / "config.json").read_text())
    keys = ("model_type", "hidden_size", "num_hidden_layers", "vocab_size")
    assert {k: recipe["model_shape"][k] for k in keys} == {k: config[k] for k in keys}
    assert recipe["training_config"]["datasets"]["max_len"] == config["max_position_embeddings"]  # no longer than the model
    assert done.stdout.startswith(f"wrote {path}: ml.p5.48xlarge, 1..4 nodes")
    assert '"recipe": "byo/my_mistral_lora"' in (home / "traced_memory.json").read_text()
    tables = [line for line in done.stdout.splitlines() if re.match(r"\s+\d+\s+\d+\s", line)]
    assert len(tables) == 2 * 4 and not any("~" in line for line in tables)  # both dry runs, every size traced
    env["LAUNCHER_RECIPES"] = str(home)
    assert "byo/my_mistral_lora" in run_launcher_process("--help", env=env).stdout
    trained = subprocess.run([sys.executable, str(ROOT / "launcher.py"), "recipes=byo/my_mistral_lora", "action=local",
                              "recipes.training_config.datasets.train_data=data/sft_tiny.jsonl",
                              "recipes.training_config.training_args.max_steps=2", f"local.run_dir={tmp_path / 'run'}",
                              f"output_dir={tmp_path / 'out'}"], cwd=ROOT, capture_output=True, text=True, timeout=240,
                             env=env)
    assert trained.returncode == 0, trained.stderr[-2000:]
    assert "done: 2 steps" in trained.stdout


def test_a_model_shape_that_is_not_the_local_models_is_one_line(tmp_path, saved_model):
    home = tmp_path / "mine"
    (home / "recipes" / "byo").mkdir(parents=True)
    (home / "recipes" / "byo" / "wrong.yaml").write_text(textwrap.dedent(f"""\
        defaults:
          - /recipes/llama/llama3_1_8b_sft@_here_
          - _self_
        training_config:
          model_config:
            model_name_or_path: {saved_model}
        """))
    done = run_launcher_process("recipes=byo/wrong", f"output_dir={tmp_path / 'out'}", env={"LAUNCHER_RECIPES": str(home)})
    assert done.returncode == 2 and done.stderr == (
        f"error: recipes.model_shape.hidden_size=4096 but the model at {saved_model} has hidden_size=64: the plan and "
        f"its memory figures would be another model's; fix model_shape or drop it (a local model fills it from its "
        f"config.json)\n")
    assert not (tmp_path / "out").exists()


def test_a_new_recipe_needs_your_recipe_directory(tmp_path, saved_model):
    import os

    env = {k: v for k, v in os.environ.items() if k != "LAUNCHER_RECIPES"}
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "new_recipe.py"), str(saved_model), "--name", "byo/x"],
                          cwd=ROOT, capture_output=True, text=True, timeout=60, env=env)
    assert done.returncode == 2 and done.stderr == ("error: LAUNCHER_RECIPES is not set: set it to the directory your "
                                                    "recipes live in (e.g. export LAUNCHER_RECIPES=~/launcher-recipes)\n")


def test_a_missing_memory_figure_says_why_and_how_to_get_one(launch):
    code, out, _ = launch("recipes=llama/llama3_1_8b_sft", "~recipes.model_shape")
    assert code == 0
    assert ("GiB/GPU -: recipes.model_shape is not set and model_name_or_path='meta-llama/Llama-3.1-8B-Instruct' is no "
            "local directory whose config.json would fill it: add the model's shape to the recipe (python "
            "scripts/new_recipe.py <model> writes a recipe with it; docs/your-model.md)") in out.splitlines()


def test_a_new_recipe_for_qwen3_5_plans_with_sdpa_and_unpacked_rows(tmp_path, monkeypatch):
    """A Qwen 3.5 model's new recipe trains as its catalogue twins do: transformers has no flex attention
    for it and its Gated DeltaNet state runs along the row, so the recipe asks for sdpa and unpacked rows,
    and the dry run plans it (the launcher would refuse flex or packing)."""
    import json

    import yaml

    from elastic_launcher.config.compose import compose, to_plain
    from elastic_launcher.new_recipe import write_recipe
    from elastic_launcher.planning.plan import make_plan

    model = tmp_path / "qwen3_5"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({
        "model_type": "qwen3_5_text", "hidden_size": 1024, "intermediate_size": 3584, "num_hidden_layers": 8,
        "num_attention_heads": 8, "num_key_value_heads": 2, "head_dim": 256, "vocab_size": 248320,
        "linear_num_key_heads": 16, "linear_num_value_heads": 16, "linear_key_head_dim": 128,
        "linear_value_head_dim": 128, "max_position_embeddings": 4096}))
    (tmp_path / "mine").mkdir()
    monkeypatch.setenv("LAUNCHER_RECIPES", str(tmp_path / "mine"))
    made = write_recipe(str(model), "sft", "byo/qwen3_5_small_sft")
    mc = yaml.safe_load(made.path.read_text())["training_config"]
    assert mc["model_config"]["attn_implementation"] == "sdpa" and mc["datasets"]["packing"] is False
    plan = make_plan(to_plain(compose(["recipes=byo/qwen3_5_small_sft"])[0])["recipes"])
    assert plan.base.training_config.model_config.attn_implementation == "sdpa"


def llama_config(tmp_path, monkeypatch, name: str, **shape):
    """A Llama's config.json in tmp_path/<name> (its shape given, its attention and vocabulary Llama 3's),
    and LAUNCHER_RECIPES pointed at tmp_path/mine: the model directory."""
    import json

    model = tmp_path / name
    model.mkdir()
    (model / "config.json").write_text(json.dumps({
        "model_type": "llama", **shape, "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 128256,
        "max_position_embeddings": 131072}))
    (tmp_path / "mine").mkdir()
    monkeypatch.setenv("LAUNCHER_RECIPES", str(tmp_path / "mine"))
    return model


def test_a_new_grpo_recipe_has_the_vendors_rlvr_settings_and_fits_both_phases(tmp_path, monkeypatch):
    """scripts/new_recipe.py --method grpo_lora: the vendor's LoRA RLVR values (8 completions of 128
    prompts a step in 4 updates, LR 1e-5, rank 32 / alpha 64, KL 0.001), GSM8K with math_verify,
    vLLM rollouts; at every allowed size both of GRPO's phases fit the GPU, and the recipe starts
    where its updates (micro-batches of 8 completions per prompt) first fit."""
    import yaml

    from elastic_launcher.config.compose import compose, to_plain
    from elastic_launcher.new_recipe import write_recipe
    from elastic_launcher.planning.memory import FIT_SHARE
    from elastic_launcher.planning.plan import make_plan

    model = llama_config(tmp_path, monkeypatch, "llama_8b", hidden_size=4096, intermediate_size=14336,
                         num_hidden_layers=32)
    made = write_recipe(str(model), "grpo_lora", "byo/llama_8b_grpo_lora")
    assert "docs/grpo.md" in made.path.read_text() and yaml.safe_load(made.path.read_text())
    plan = make_plan(to_plain(compose(["recipes=byo/llama_8b_grpo_lora"])[0])["recipes"])
    tc = plan.base.training_config
    args, peft = tc.training_args, tc.model_config.peft_config
    assert (args.trainer_type, args.train_batch_size, args.learning_rate, args.max_epochs) == ("grpo", 128, 1e-5, 2)
    assert (peft.r, peft.lora_alpha, peft.lora_dropout) == (32, 64, 0.0)
    o = args.method_args
    assert (o["num_generations"], o["mini_batches"], o["kl_coef"], o["rewards"], o["rollout_engine"]) == \
        (8, 4, 0.001, ["math_verify"], "vllm")
    assert (tc.datasets.train_data, tc.datasets.subset) == ("openai/gsm8k", "main")
    limit = FIT_SHARE * plan.instance.gpu_memory_gib
    assert all(s.memory.rollout_gib and s.memory.peak_gib <= limit for s in plan.sizes)
    assert made.micro_batch > 1  # the largest micro-batch whose updates fit, not the first try


def test_a_new_grpo_recipe_behind_the_policy_keeps_its_policies_in_its_memory(tmp_path, monkeypatch):
    """scripts/new_recipe.py --method grpo --max-steps-off-policy 3: the recipe carries the key, and each
    size's memory counts the three older copies of the rank's shard of the weights kept for the rollout
    behind (4 bytes a parameter each, over the shard degree): more per GPU than on policy. With
    --rollout-ranks-per-node 4 the sizes are planned over each node's other 4 GPUs. A key of GRPO's for
    another method is one line."""
    from elastic_launcher.config.compose import compose, to_plain
    from elastic_launcher.new_recipe import write_recipe
    from elastic_launcher.planning.memory import ModelShape
    from elastic_launcher.planning.plan import make_plan
    from training.contract.errors import ConfigError

    model = llama_config(tmp_path, monkeypatch, "llama_1b", hidden_size=2048, intermediate_size=8192,
                         num_hidden_layers=16)
    write_recipe(str(model), "grpo", "byo/llama_1b_grpo_behind", max_steps_off_policy=3)
    behind = make_plan(to_plain(compose(["recipes=byo/llama_1b_grpo_behind"])[0])["recipes"])
    on_policy = make_plan(to_plain(compose(["recipes=byo/llama_1b_grpo_behind",
                                            "recipes.training_config.training_args.method_args.max_steps_off_policy=0"]
                                           )[0])["recipes"])
    assert behind.base.training_config.training_args.method_args["max_steps_off_policy"] == 3
    params = ModelShape.from_config(behind.hardware.model_shape).params
    for b, o in zip(behind.sizes, on_policy.sizes, strict=True):
        assert not b.memory.traced and b.memory.state_gib - o.memory.state_gib == pytest.approx(
            3 * 4 * params / b.shard_degree / 2**30)
    with pytest.raises(ConfigError, match=r"^--max-steps-off-policy=2 is GRPO's: pick a grpo method or leave it out$"):
        write_recipe(str(model), "sft", "byo/llama_1b_sft", max_steps_off_policy=2)
    # Half of each node's GPUs generating: the sizes are planned over the training half.
    write_recipe(str(model), "grpo", "byo/llama_1b_grpo_split", max_steps_off_policy=3, rollout_ranks_per_node=4)
    split = make_plan(to_plain(compose(["recipes=byo/llama_1b_grpo_split"])[0])["recipes"])
    assert split.base.training_config.training_args.method_args["rollout_ranks_per_node"] == 4
    assert {s.nproc_per_node for s in split.sizes} == {4} and all(s.memory.rollout_gib for s in split.sizes)
    with pytest.raises(ConfigError, match=r"^--rollout-ranks-per-node=1 is GRPO's"):
        write_recipe(str(model), "sft", "byo/llama_1b_sft", rollout_ranks_per_node=1)


def test_a_new_rlaif_recipe_has_the_vendors_judge_and_fits_its_long_completions(tmp_path, monkeypatch):
    """scripts/new_recipe.py --method grpo_rlaif_lora: the vendor's RLAIF judge (a Bedrock model, the
    summary template, 5 retries, 100 calls in flight), 4k-token prompts and completions, both phases
    fitting at every allowed size."""
    import json

    from elastic_launcher.config.compose import compose, to_plain
    from elastic_launcher.new_recipe import write_recipe
    from elastic_launcher.planning.memory import FIT_SHARE
    from elastic_launcher.planning.plan import make_plan

    model = tmp_path / "qwen_4b"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({
        "model_type": "qwen3", "hidden_size": 2560, "intermediate_size": 9728, "num_hidden_layers": 36,
        "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 151936,
        "max_position_embeddings": 40960}))
    (tmp_path / "mine").mkdir()
    monkeypatch.setenv("LAUNCHER_RECIPES", str(tmp_path / "mine"))
    made = write_recipe(str(model), "grpo_rlaif_lora", "byo/qwen_4b_grpo_rlaif_lora")
    plan = make_plan(to_plain(compose(["recipes=byo/qwen_4b_grpo_rlaif_lora"])[0])["recipes"])
    o = plan.base.training_config.training_args.method_args
    assert (o["rewards"], o["max_prompt_length"], o["max_new_tokens"]) == (["judge"], 4000, 4096)
    judge = o["judge"]
    assert (judge["model_id"], judge["prompt_template"], judge["num_retries"], judge["max_workers"]) == \
        ("bedrock/openai.gpt-oss-120b-1:0", "summary", 5, 100)
    assert plan.base.training_config.model_config.lora and "docs/grpo.md" in made.path.read_text()
    limit = FIT_SHARE * plan.instance.gpu_memory_gib
    assert all(s.memory.rollout_gib and s.memory.peak_gib <= limit for s in plan.sizes)


def test_a_new_recipe_for_a_config_the_planner_cannot_size_is_one_line(tmp_path, monkeypatch):
    """A config.json without a key the planner reads is refused naming the key, and no recipe is written."""
    import json

    from elastic_launcher.new_recipe import write_recipe
    from training.contract.errors import ConfigError

    model = tmp_path / "odd"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"model_type": "llama", "hidden_size": 64, "intermediate_size": 128,
                                                   "num_attention_heads": 4, "vocab_size": 512}))
    (tmp_path / "mine").mkdir()
    monkeypatch.setenv("LAUNCHER_RECIPES", str(tmp_path / "mine"))
    with pytest.raises(ConfigError, match=r"model='.*odd': its config has no num_hidden_layers, which the planner "
                                          r"reads \(model_type llama\): write the recipe by hand"):
        write_recipe(str(model), "sft", "byo/odd_sft")
    assert not list((tmp_path / "mine").rglob("*.yaml"))
