"""Every current decoder family, on a tiny twin: the trainer's loss equals transformers' own forward
on the same weights, packed (where the family packs) and unpacked, in float64; a family the trainer
cannot train is refused in one line."""

import random

import pytest
import torch

from training.batches import IGNORE_INDEX, collate
from training.methods.base import model_inputs

SMALL = dict(hidden_size=64, intermediate_size=96, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
             max_position_embeddings=256, vocab_size=97, initializer_range=0.25, pad_token_id=0, bos_token_id=1, eos_token_id=2)
MOE = dict(num_experts_per_tok=2, moe_intermediate_size=32)
WINDOWED = ["sliding_attention", "full_attention", "sliding_attention", "full_attention"]
# Each family's tiny twin: its own layer kinds and quirks at a shape a CPU runs in a second.
FAMILIES = {
    "llama": {},
    "mistral": dict(sliding_window=8),  # a window on every layer, no layer_types
    "phi3": dict(sliding_window=8),
    "smollm3": dict(no_rope_layers=[1, 1, 0, 1]),
    "olmo3": dict(sliding_window=8, layer_types=WINDOWED),
    "gemma2": dict(head_dim=16, sliding_window=8, attn_logit_softcapping=0.5, final_logit_softcapping=2.0),
    "gemma3_text": dict(head_dim=16, sliding_window=8, layer_types=WINDOWED),
    "gemma4_text": dict(head_dim=16, global_head_dim=32, sliding_window=8, layer_types=WINDOWED, final_logit_softcapping=2.0,
                        vocab_size_per_layer_input=97, hidden_size_per_layer_input=8, num_kv_shared_layers=0),
    "qwen2_moe": dict(num_experts=4, shared_expert_intermediate_size=64, **MOE),
    "qwen3_moe": dict(num_experts=4, head_dim=16, **MOE),
    "glm4_moe": dict(n_routed_experts=4, first_k_dense_replace=1, n_group=1, topk_group=1, head_dim=16, **MOE),
    "deepseek_v3": dict(num_key_value_heads=4, n_routed_experts=4, first_k_dense_replace=1, n_group=1, topk_group=1, q_lora_rank=None,
                        kv_lora_rank=16, qk_rope_head_dim=8, qk_nope_head_dim=16, v_head_dim=8, **MOE),
    "qwen3_5_text": dict(head_dim=16, layer_types=["linear_attention"] * 3 + ["full_attention"],
                         linear_key_head_dim=16, linear_value_head_dim=16, linear_num_key_heads=2, linear_num_value_heads=4),
    "qwen3_5_moe_text": dict(head_dim=16, layer_types=["linear_attention", "full_attention"] * 2, num_experts=4,
                             shared_expert_intermediate_size=32, linear_key_head_dim=16, linear_value_head_dim=16,
                             linear_num_key_heads=2, linear_num_value_heads=4, **MOE),
    "nemotron_h": dict(layers_block_type=["mamba", "moe", "attention", "mamba"], head_dim=16, mamba_num_heads=4,
                       mamba_head_dim=16, ssm_state_size=16, n_groups=1, chunk_size=16, n_routed_experts=4,
                       moe_shared_expert_intermediate_size=32, n_group=1, topk_group=1, **MOE),
}
# The models run in float64, but some compute parts in float32 (DeepSeek's rotary, Nemotron-H's
# residual, flex's CPU kernel): measured up to 4e-8 apart, float32's resolution. A window, cap or
# mask left out moves the loss by 1e-3 and more.
RTOL = 1e-6
RECURRENT = {"qwen3_5_text", "qwen3_5_moe_text", "nemotron_h"}
# The families whose files hold their tensors in another layout than the model's (experts one tensor
# each, Nemotron-H's `backbone.` prefix): the reader converts them, a rank its own part. The others'
# files are the model's tensors by name, read at 2 and 3 processes as test_model_loading's hub snapshot is.
STORED_OTHERWISE = ["qwen2_moe", "qwen3_moe", "glm4_moe", "deepseek_v3", "qwen3_5_moe_text", "nemotron_h"]


def hf_config(model_type: str):
    from transformers import AutoConfig

    kwargs = {**SMALL, **FAMILIES[model_type]}
    if model_type == "nemotron_h":
        kwargs.pop("num_hidden_layers")  # the block types give the depth
    return AutoConfig.for_model(model_type, **kwargs)


def tiny_pair(model_type: str):
    """transformers' model in float64 with eager attention, and the trainer's CausalLM around a copy of
    its weights (the trainer's wrapper replaces the head, so the reference keeps its own)."""
    import copy

    from transformers import AutoModelForCausalLM

    from training.model.causal_lm import CausalLM

    torch.manual_seed(0)
    reference = AutoModelForCausalLM.from_config(hf_config(model_type), attn_implementation="eager",
                                                 experts_implementation="eager").double()
    reference.config.use_cache = False
    return reference, CausalLM(copy.deepcopy(reference), loss_chunk_tokens=0)


def sample(rng, length, vocab=97):
    ids = [rng.randrange(3, vocab) for _ in range(length)]
    prompt = rng.randrange(1, length - 1)
    return {"input_ids": ids, "labels": [IGNORE_INDEX] * prompt + ids[prompt:], "sample_ids": [length],
            "lengths": [length]}


def soft_capped(reference, logits: torch.Tensor) -> torch.Tensor:
    """The logits as the family's head gives them: soft-capped where it caps them (Gemma 2, Gemma 4)."""
    cap = getattr(reference.config, "final_logit_softcapping", None)
    return cap * torch.tanh(logits / cap) if cap else logits


def transformers_loss(reference, s) -> torch.Tensor:
    """The summed token loss of one sample from transformers' hidden states and head, each position
    predicting the next token (its own loss, and some families' logits, are cast to float32)."""
    hidden = reference.model(input_ids=torch.tensor([s["input_ids"]])).last_hidden_state
    logits = soft_capped(reference, reference.lm_head(hidden)[0, :-1])
    return torch.nn.functional.cross_entropy(logits, torch.tensor(s["labels"][1:]), ignore_index=IGNORE_INDEX,
                                             reduction="sum")


@pytest.mark.parametrize("model_type", FAMILIES)
def test_the_trainers_loss_is_transformers_loss_packed_and_unpacked(model_type):
    """Window lengths, soft-capping, per-layer embeddings, latent attention, linear attention and
    Mamba layers all computed as transformers computes them: 23- and 19-token samples reach past
    the 8-token windows, so a window left out shows. Packed rows (attention-only families) give
    each sample's loss as it alone gives it."""
    torch.use_deterministic_algorithms(False)
    reference, model = tiny_pair(model_type)
    rng = random.Random(0)
    samples = [sample(rng, n) for n in (11, 23, 19)]
    with torch.no_grad():
        want = torch.stack([transformers_loss(reference, s) for s in samples])
        unpacked = model(**model_inputs(collate(samples), "cpu"))
        torch.testing.assert_close(unpacked, want.sum(), rtol=RTOL, atol=0)
        if model_type not in RECURRENT:
            row = {k: [v for s in samples for v in s[k]] for k in ("input_ids", "labels", "sample_ids", "lengths")}
            packed = model(**model_inputs(collate([row]), "cpu"))
            torch.testing.assert_close(packed, want.sum(), rtol=RTOL, atol=0)


@pytest.mark.parametrize("model_type", sorted(RECURRENT))
def test_families_with_recurrent_layers_refuse_packing_in_one_line(model_type):
    from training.contract.errors import ConfigError
    from training.contract.families import family_refusal
    from training.model.structure import check_trainable

    with pytest.raises(ConfigError, match=f"model_type {model_type} has linear-attention or state-space layers.*"
                                          "packing=false"):
        check_trainable(hf_config(model_type), packing=True)
    check_trainable(hf_config(model_type), packing=False)
    assert "packing=false" in family_refusal({"model_type": model_type}, packing=True)
    assert family_refusal({"model_type": model_type}, packing=False) is None


def test_flex_attention_is_refused_in_one_line_for_qwen3_5(launch):
    """transformers has no flex attention for Qwen 3.5: asking for it is refused before anything is
    written, naming the fix (sdpa serves its unpacked rows)."""
    code, out, err = launch("recipes=qwen/qwen3_5_4b_sft",
                            "recipes.training_config.model_config.attn_implementation=flex_attention")
    assert code == 2 and "Traceback" not in err
    assert "model_type qwen3_5_text has no flex attention in transformers: set " \
           "training_config.model_config.attn_implementation=sdpa" in err


@pytest.mark.parametrize("model_type, what", [("bert", "an encoder-only model"), ("t5", "an encoder-decoder model")])
def test_models_that_are_not_decoders_are_refused_in_one_line(model_type, what):
    from transformers import AutoConfig

    from training.contract.errors import ConfigError
    from training.contract.families import family_refusal
    from training.model.structure import check_trainable

    assert family_refusal({"model_type": model_type}, packing=False).startswith(f"model_type {model_type} is {what}")
    with pytest.raises(ConfigError, match=f"model_type {model_type} is {what}: the trainer fine-tunes decoder-only"):
        check_trainable(AutoConfig.for_model(model_type), packing=False)


def decoded_logits(reference, prompt: list[int], tokens: list[int]) -> torch.Tensor:
    """transformers' own decode of one row: its prompt prefilled alone, then token by token from the
    cache; the logits before each of `tokens`."""
    out = reference.model(input_ids=torch.tensor([prompt]), use_cache=True)
    last = [out.last_hidden_state[0, -1]]
    for position, token in enumerate(tokens[:-1], start=len(prompt)):
        out = reference.model(input_ids=torch.tensor([[token]]), position_ids=torch.tensor([[position]]),
                              past_key_values=out.past_key_values, use_cache=True)
        last.append(out.last_hidden_state[0, -1])
    return soft_capped(reference, reference.lm_head(torch.stack(last)))


@pytest.mark.parametrize("model_type", FAMILIES)
def test_the_trainers_sampler_draws_each_row_as_the_row_alone_decodes(model_type):
    """A group's rows continue one prompt from its prefill, done once and its cache repeated for the
    rows (each row prefilled where a recurrent layer's state cannot be repeated): the log-probability
    the sampler gives each drawn token is what transformers' decode of that row alone gives, past the
    8-token windows, in rows that drew different tokens. A cache shared instead of repeated, or a
    row's state left out, moves them by 1e-2 and more; the sampler's float32 log-softmax of float64
    logits rounds by about 1e-6. (transformers keeps a recurrent state in float32, so its cached
    decode and a full forward differ by up to 2e-3 in Nemotron-H: the row's own decode is the reference.)"""
    from training.rl.rollout import ShardedModelRollout
    from training.rl.sampling import SamplingParams

    reference, model = tiny_pair(model_type)
    rng = random.Random(7)
    prompt = [rng.randrange(3, 97) for _ in range(11)]
    rollout = ShardedModelRollout(model, torch.device("cpu"), seed=0)
    generators = [torch.Generator().manual_seed(i) for i in range(4)]
    with rollout.session():
        rows = rollout.sample(torch.tensor(prompt), generators, SamplingParams(log_probs=True), max_new_tokens=6)
        assert len({tuple(tokens) for tokens, _, _ in rows}) > 1, "the rows drew alike: nothing tells them apart"
        for tokens, _, log_probs in rows:
            expected = torch.log_softmax(decoded_logits(reference, prompt, tokens), dim=-1)
            expected = expected.gather(-1, torch.tensor(tokens)[:, None]).squeeze(-1)
            torch.testing.assert_close(torch.tensor(log_probs, dtype=torch.float64), expected, rtol=0, atol=1e-5)


@pytest.mark.slow  # compiles flex attention for each family: the full suite
@pytest.mark.parametrize("model_type", FAMILIES)
def test_the_trainers_flex_attention_equals_eager_attention(model_type):
    """The recipes' attention (the trainer's flex kernel with block masks from document ids) gives the
    eager loss in every family: soft-capped scores (Gemma 2), value heads narrower than the query's
    (DeepSeek-V3), wider global heads (Gemma 4), windows, and the attention layers of hybrids."""
    from training.model.attention import use_trainer_flex_attention

    torch.use_deterministic_algorithms(False)
    use_trainer_flex_attention()
    _, eager = tiny_pair(model_type)
    _, flex = tiny_pair(model_type)
    flex.config._attn_implementation = "flex_attention"
    rng = random.Random(5)
    samples = [sample(rng, n) for n in (11, 23, 7)]
    if model_type not in RECURRENT:
        samples = [{k: [v for s in samples for v in s[k]] for k in ("input_ids", "labels", "sample_ids", "lengths")}]
    batch = model_inputs(collate([*samples, sample(rng, 30)]), "cpu")
    with torch.no_grad():
        torch.testing.assert_close(flex(**batch), eager(**batch), rtol=RTOL, atol=0)


def saved_twin(model_type: str, directory) -> None:
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(hf_config(model_type)).save_pretrained(directory)


@pytest.mark.parametrize("model_type", FAMILIES)
def test_a_model_saved_by_transformers_loads_as_transformers_loads_it(model_type, tmp_path, process_group):
    """The shard-by-shard reader takes the files in the layout save_pretrained writes (one tensor
    per expert, Nemotron-H's `backbone.` prefix) into the same tensors as transformers' own loading,
    persistent buffers included; the export writes that layout back, tensor for tensor."""
    from safetensors import safe_open
    from torch.distributed.device_mesh import init_device_mesh
    from transformers import AutoModelForCausalLM

    from training.contract.config import ModelConfig
    from training.model.causal_lm import build_sharded_model
    from training.model.stored_layout import to_file_layout

    saved_twin(model_type, tmp_path)
    want = AutoModelForCausalLM.from_pretrained(tmp_path).state_dict()
    model = build_sharded_model(ModelConfig(model_name_or_path=str(tmp_path)), seed=1, mesh=init_device_mesh("cpu", (1,)),
                                on_gpu=False, resuming=False, source=str(tmp_path))
    got = {k: v.full_tensor() if hasattr(v, "full_tensor") else v for k, v in model.state_dict().items()}
    assert got.keys() == want.keys()
    for name, tensor in got.items():
        assert torch.equal(tensor, want[name]), name
    with safe_open(str(tmp_path / "model.safetensors"), "pt") as f:
        stored = {k: f.get_tensor(k) for k in f.keys()}
    exported = dict(pair for name, tensor in got.items() if name != "lm_head.weight" or not model.config.tie_word_embeddings
                    for pair in to_file_layout(model.model, name, tensor))
    assert exported.keys() == stored.keys()
    assert all(torch.equal(exported[k], stored[k]) for k in stored)
    assert (not exported.keys() <= got.keys()) == (model_type in STORED_OTHERWISE)  # names of their own in the files


def test_the_text_model_of_a_published_qwen3_5_checkpoint_loads(tmp_path, process_group):
    """Qwen/Qwen3.5-* ship as vision + text models (`model.language_model.layers...`): the trainer
    reads the text model's weights from such files as transformers' own causal LM loads them."""
    from torch.distributed.device_mesh import init_device_mesh
    from transformers import AutoModelForCausalLM, Qwen3_5Config, Qwen3_5ForConditionalGeneration

    from training.contract.config import ModelConfig
    from training.model.causal_lm import build_sharded_model

    text = hf_config("qwen3_5_text").to_dict()
    vision = dict(depth=1, hidden_size=32, intermediate_size=32, num_heads=2, out_hidden_size=text["hidden_size"])
    torch.manual_seed(0)
    Qwen3_5ForConditionalGeneration(Qwen3_5Config(text_config=text, vision_config=vision)).save_pretrained(tmp_path)
    want = AutoModelForCausalLM.from_pretrained(tmp_path).state_dict()
    model = build_sharded_model(ModelConfig(model_name_or_path=str(tmp_path)), seed=1, mesh=init_device_mesh("cpu", (1,)),
                                on_gpu=False, resuming=False, source=str(tmp_path))
    got = {k: v.full_tensor() if hasattr(v, "full_tensor") else v for k, v in model.state_dict().items()}
    assert got.keys() == want.keys()
    assert all(torch.equal(got[k], want[k]) for k in want)


@pytest.mark.parametrize("experts, rows, columns", [(slice(0, 4), slice(0, 64), slice(0, 64)),  # a whole tensor
                                                    (slice(1, 3), slice(0, 64), slice(0, 64)),  # FSDP's experts split
                                                    (slice(0, 4), slice(24, 40), slice(0, 64)),  # across gate | up
                                                    (slice(2, 3), slice(40, 64), slice(16, 48))])
def test_each_rank_reads_its_own_slice_of_per_expert_files(experts, rows, columns, tmp_path):
    """A rank's shard of a fused [experts, gate + up rows, hidden] tensor, wherever FSDP cuts it,
    read from the per-expert files equals that slice of transformers' fused tensor."""
    from transformers import AutoModelForCausalLM

    from training.model.stored_layout import file_layout, read_expert_pieces

    saved_twin("qwen2_moe", tmp_path)
    fused = AutoModelForCausalLM.from_pretrained(tmp_path).state_dict()["model.layers.1.mlp.experts.gate_up_proj"]
    from safetensors import safe_open

    with safe_open(str(tmp_path / "model.safetensors"), "pt") as f:
        files = dict.fromkeys(f.keys(), str(tmp_path / "model.safetensors"))
    whole, pieces = file_layout("qwen2_moe", files)
    assert "model.layers.1.mlp.experts.gate_up_proj" not in whole and "model.embed_tokens.weight" in whole
    where = (experts, rows, columns)
    local = torch.full([s.stop - s.start for s in where], float("nan"))
    read_expert_pieces(local, where, pieces["model.layers.1.mlp.experts.gate_up_proj"], files)
    assert torch.equal(local, fused[where])


# Published shapes of mixture-of-experts families beyond the catalogue: each names its experts'
# width and count, shared experts and leading dense layers its own way.
MOE_SHAPES = {
    "Qwen3-30B-A3B": dict(model_type="qwen3_moe", hidden_size=2048, num_hidden_layers=48, num_attention_heads=32,
                          num_key_value_heads=4, head_dim=128, intermediate_size=6144, moe_intermediate_size=768,
                          num_experts=128, num_experts_per_tok=8, vocab_size=151936),
    "Qwen2-57B-A14B": dict(model_type="qwen2_moe", hidden_size=3584, num_hidden_layers=28, num_attention_heads=28,
                           num_key_value_heads=4, intermediate_size=18944, moe_intermediate_size=2560,
                           shared_expert_intermediate_size=20480, num_experts=64, num_experts_per_tok=8, vocab_size=151936),
    "GLM-4.5-Air": dict(model_type="glm4_moe", hidden_size=4096, num_hidden_layers=46, num_attention_heads=96,
                        num_key_value_heads=8, head_dim=128, intermediate_size=10944, moe_intermediate_size=1408,
                        n_routed_experts=128, n_shared_experts=1, first_k_dense_replace=1, num_experts_per_tok=8,
                        vocab_size=151552, n_group=1, topk_group=1),
}
# Hybrid shapes, from the published configs' text models: Gated DeltaNet layers, three to each gated attention layer
QWEN3_5_SHAPES = {
    "Qwen3.5-4B": dict(model_type="qwen3_5_text", hidden_size=2560, intermediate_size=9216, num_hidden_layers=32,
                       num_attention_heads=16, num_key_value_heads=4, head_dim=256, vocab_size=248320,
                       tie_word_embeddings=True, linear_num_key_heads=16, linear_num_value_heads=32,
                       linear_key_head_dim=128, linear_value_head_dim=128, linear_conv_kernel_dim=4),
    "Qwen3.5-27B": dict(model_type="qwen3_5_text", hidden_size=5120, intermediate_size=17408, num_hidden_layers=64,
                        num_attention_heads=24, num_key_value_heads=4, head_dim=256, vocab_size=248320,
                        linear_num_key_heads=16, linear_num_value_heads=48, linear_key_head_dim=128,
                        linear_value_head_dim=128, linear_conv_kernel_dim=4),
}


def catalogue_shapes() -> dict:
    import yaml

    from conftest import ROOT

    shapes = {}
    for path in sorted(ROOT.glob("recipes/*/*.yaml")):
        shape = (yaml.safe_load(path.read_text()) or {}).get("model_shape")
        if shape and shape not in shapes.values():
            shapes[path.stem] = shape
    return {**shapes, **MOE_SHAPES, **QWEN3_5_SHAPES}


@pytest.mark.parametrize("name, shape", catalogue_shapes().items())
def test_the_analytic_size_is_the_instantiated_models(name, shape):
    """The dry run's parameter count (checkpoint bytes, node-local tier, memory fallback) from a
    recipe's model_shape equals the model transformers builds from it (on the meta device: no memory)."""
    from transformers import AutoConfig, AutoModelForCausalLM

    from elastic_launcher.planning.memory import ModelShape

    config = {k: v for k, v in shape.items() if k != "model_type"}
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(AutoConfig.for_model(shape["model_type"], **config))
    built = sum(p.numel() for p in model.parameters())
    assert ModelShape.from_config(shape).params == pytest.approx(built, rel=1e-3)  # GPT-OSS: 3e-4 (expert biases)


@pytest.mark.parametrize("name", QWEN3_5_SHAPES)
def test_the_analytic_lora_count_reaches_the_gated_deltanet_projections(name):
    """All-linear LoRA on Qwen 3.5 adapts the attention layers' gated q_proj and every Gated DeltaNet
    projection: the dry run's adapter count is what peft injects (two layers of each kind suffice)."""
    from transformers import AutoConfig, AutoModelForCausalLM

    from elastic_launcher.planning.memory import ModelShape
    from training.contract.config import PeftConfig
    from training.model.lora import apply_lora

    small = {**QWEN3_5_SHAPES[name], "num_hidden_layers": 8}
    config = AutoConfig.for_model(small["model_type"], **{k: v for k, v in small.items() if k != "model_type"})
    with torch.device("meta"):
        model = apply_lora(AutoModelForCausalLM.from_config(config), PeftConfig(r=16))
    injected = sum(p.numel() for n, p in model.named_parameters() if "lora_" in n)
    assert ModelShape.from_config(small).lora_params(16) == injected
    assert ModelShape.from_config(small).linear_layers == config.layer_types.count("linear_attention") == 6


@pytest.mark.slow
@pytest.mark.timeout(900)
@pytest.mark.parametrize("model_type", STORED_OTHERWISE)
def test_a_family_stored_otherwise_trains_from_the_files_save_pretrained_writes(model_type, tmp_path):
    """A user's model directory written by transformers, in another layout than the model's: the
    trainer reads it shard by shard at 2 processes, trains 3 steps, and its first step's loss is
    transformers' own loss on the step's samples (fp32, from_pretrained on the same files). Every
    family's files load as transformers loads them above, in one process."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from conftest import ROOT, committed_samples, losses, render_configs, train
    from training.contract.config import load_job_config
    from training.data import load_or_build

    config = hf_config(model_type)
    config.vocab_size = 512  # the tiny tokenizer's
    if hasattr(config, "vocab_size_per_layer_input"):
        config.vocab_size_per_layer_input = 512
    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(config).save_pretrained(tmp_path / "model")
    model_config = "recipes.training_config.model_config"
    configs = render_configs(tmp_path / "configs", f"{model_config}.model_name_or_path={tmp_path / 'model'}",
                             f"{model_config}.architecture=null", f"{model_config}.tokenizer_name_or_path=data/tiny_tokenizer",
                             "recipes.training_config.training_args.max_steps=3",
                             "recipes.training_config.logging.audit_samples=true")
    train(configs, tmp_path / "run", nodes=2)
    got = losses(tmp_path / "run")
    assert sorted(got) == [1, 2, 3] and got[3] < got[1]

    cfg = load_job_config(next(configs.glob("config-n2.yaml")))
    tokenizer = AutoTokenizer.from_pretrained(ROOT / "data" / "tiny_tokenizer")
    rows, _, _ = load_or_build(cfg.training_config.datasets, tokenizer, "tiny", tmp_path / "cache", builder=True,
                               seed=cfg.training_config.training_args.seed)
    reference = AutoModelForCausalLM.from_pretrained(tmp_path / "model")
    loss_sum, tokens = 0.0, 0
    with torch.no_grad():
        for i in committed_samples(tmp_path / "run")[1]:
            labels = torch.tensor([rows[i]["labels"]])
            count = int((labels[:, 1:] != IGNORE_INDEX).sum())
            loss_sum += reference(input_ids=torch.tensor([rows[i]["input_ids"]]), labels=labels).loss.item() * count
            tokens += count
    assert got[1] == pytest.approx(loss_sum / tokens, rel=1e-4)


def test_the_dry_run_refuses_packing_a_recurrent_family_and_a_model_that_is_no_decoder(launch, tmp_path):
    """Before any process starts: one line naming the model_type and the fix, nothing written."""
    code, _, err = launch("recipes=qwen/tiny_qwen3_5_sft", "recipes.training_config.datasets.packing=true")
    assert code != 0 and len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert "model_type qwen3_5_text has linear-attention or state-space layers" in err and "packing=false" in err
    code, _, err = launch("recipes=llama/tiny_llama_sft", "recipes.training_config.model_config.architecture.model_type=bert")
    assert code != 0 and "model_type bert is an encoder-only model: the trainer fine-tunes decoder-only" in err, err
    assert not (tmp_path / "out").exists()
    assert launch("recipes=qwen/tiny_qwen3_5_sft")[0] == 0


def test_an_inline_architecture_takes_the_tokenizers_vocabulary_and_special_ids():
    """Phi-3's and SmolLM3's defaults name pad/bos/eos ids of their own 32K-128K vocabularies: an
    inline twin on a 512-token tokenizer takes the tokenizer's (what the recipe sets stays)."""
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    from conftest import ROOT
    from training.contract.config import JobConfig, ModelConfig, TrainingSection
    from training.run_config import as_run

    tokenizer = AutoTokenizer.from_pretrained(ROOT / "data" / "tiny_tokenizer")
    special = {f"{k}_token_id": getattr(tokenizer, f"{k}_token_id") for k in ("pad", "bos", "eos")}
    for model_type in ("phi3", "smollm3"):
        arch = {k: v for k, v in SMALL.items() if k not in special and k != "vocab_size"}
        job = JobConfig(training_config=TrainingSection(model_config=ModelConfig(
            architecture={"model_type": model_type, **arch, "eos_token_id": 5})))
        run = as_run(job, rows=64, vocab_size=len(tokenizer), special_tokens=special).training_config.model_config
        assert run.architecture == {"vocab_size": 512, **special, "model_type": model_type, **arch, "eos_token_id": 5}
        kwargs = {k: v for k, v in run.architecture.items() if k != "model_type"}
        AutoModelForCausalLM.from_config(AutoConfig.for_model(model_type, **kwargs))  # builds: ids inside the vocabulary
    assert job.training_config.model_config.architecture.get("vocab_size") is None  # the loaded config is unchanged
