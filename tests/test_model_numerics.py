"""What the training step computes: packed rows equal their samples run one by one, the chunked
LM-head loss equals the full one, a compiled model equals the eager one, and packing fills rows."""

import random

import pytest
import torch

from conftest import tiny_causal_lm
from training.batches import IGNORE_INDEX, BatchShape, collate, pack
from training.methods.base import model_inputs
from training.model.loss import linear_cross_entropy


def sample(rng, length, vocab=97):
    ids = [rng.randrange(1, vocab) for _ in range(length)]
    prompt = rng.randrange(1, length - 1)
    return {"input_ids": ids, "labels": [IGNORE_INDEX] * prompt + ids[prompt:], "sample_ids": [length],
            "lengths": [length]}


def packed_row(samples):
    return {key: [v for s in samples for v in s[key]] for key in ("input_ids", "labels", "sample_ids", "lengths")}


def loss_and_grads(model, batch):
    model.zero_grad()
    loss = model(**model_inputs(batch, "cpu"))  # packed rows: their document ids keep samples apart
    loss.backward()
    return loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("model_type", ["llama", "gpt_oss", "llama4_text"])
def test_padding_rows_and_a_bucketed_width_add_no_loss_no_gradient_and_no_samples(model_type):
    """The trainer pads every micro-batch to the plan's rows and a bucketed width (one shape for
    compiled functions): the padded step is the unpadded one, in float64."""
    rng = random.Random(1)
    rows = [sample(rng, 11), sample(rng, 19)]
    shape = BatchShape(rows=4, max_len=64, packed=False)
    plain, padded = collate(rows), collate(rows, shape)
    assert padded["input_ids"].shape == (4, 32) and plain["input_ids"].shape == (2, 19)
    assert [plain[k] for k in ("sample_ids", "label_tokens", "tokens", "squared_lengths")] == \
        [padded[k] for k in ("sample_ids", "label_tokens", "tokens", "squared_lengths")]
    model = tiny_causal_lm(model_type, float64=True)
    loss, grads = loss_and_grads(model, plain)
    padded_loss, padded_grads = loss_and_grads(model, padded)
    assert grads.keys() == padded_grads.keys()
    if model_type == "llama4_text":
        # transformers runs Llama 4's norms, rotary embedding and router in float32 even in a float64
        # model, and a float32 reduction's order may follow the tensor's size on some CPUs (seen: 2
        # roundings apart): within 16 float32 roundings (unit roundoff 2^-24) of the gradient's scale.
        loss_rel, tolerance = 16 * 2**-24, lambda grad: {"rtol": 0, "atol": 16 * 2**-24 * grad.abs().max().item()}
    else:
        loss_rel, tolerance = 1e-12, lambda grad: {"rtol": 1e-10, "atol": 1e-12}
    assert padded_loss.item() == pytest.approx(loss.item(), rel=loss_rel)
    for name, grad in grads.items():
        torch.testing.assert_close(padded_grads[name], grad, msg=name, **tolerance(grad))
    empty = collate([], shape)  # a rank's empty micro-batch: padding rows alone
    assert empty["input_ids"].shape == (4, 16) and (empty["sample_ids"], empty["label_tokens"], empty["tokens"]) == ([], 0, 0)
    assert BatchShape(rows=4, max_len=48, packed=False).width(40) == 48 and shape.width(1) == 16
    assert BatchShape(rows=4, max_len=64, packed=True).width(3) == 64


@pytest.mark.parametrize("model_type", ["llama", "qwen3"])
def test_unpacked_rows_attend_by_is_causal_with_no_mask_and_train_as_with_the_mask(model_type, monkeypatch):
    """An unpacked run's attention (`causal_sdpa`, which the trainer sets where rows are one sample
    each): SDPA gets no mask and is_causal, so its flash kernels run, and no mask is built; the loss
    and gradients of right-padded rows and a padding row are those of SDPA with transformers' mask,
    in float64."""
    from training.model.attention import CAUSAL_SDPA, use_causal_sdpa

    use_causal_sdpa()
    rng = random.Random(2)
    batch = collate([sample(rng, 11), sample(rng, 19)], BatchShape(rows=3, max_len=64, packed=False))
    sdpa, calls = torch.nn.functional.scaled_dot_product_attention, []

    def recorded(*args, **kwargs):
        calls.append((kwargs["attn_mask"], kwargs["is_causal"]))
        return sdpa(*args, **kwargs)

    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", recorded)
    loss, grads = loss_and_grads(tiny_causal_lm(model_type, float64=True, attn_implementation="sdpa"), batch)
    assert calls and all(mask is not None and not causal for mask, causal in calls)
    calls.clear()
    causal_loss, causal_grads = loss_and_grads(tiny_causal_lm(model_type, float64=True, attn_implementation=CAUSAL_SDPA),
                                               batch)
    assert calls and all(mask is None and causal for mask, causal in calls)
    assert causal_loss.item() == pytest.approx(loss.item(), rel=1e-12)
    assert causal_grads.keys() == grads.keys()
    for name, grad in grads.items():
        torch.testing.assert_close(causal_grads[name], grad, rtol=1e-10, atol=1e-12, msg=name)


def test_the_trainer_drops_the_mask_only_for_unpacked_rows_and_layers_that_attend_whole_rows():
    """The config as run takes `causal_sdpa` for SDPA without packing (not with it), and off GPU for
    flex; a model with windowed or chunked layers (Llama 4, Gemma 4) keeps SDPA with its masks, one
    whose attention SDPA cannot run (GPT-OSS's sinks) transformers' choice (eager)."""
    from conftest import tiny_architecture
    from training.contract.config import DatasetConfig, JobConfig, ModelConfig, TrainingSection
    from training.model.causal_lm import _from_config
    from training.run_config import as_run

    def run(model_type, packing=False, attn=None):
        job = JobConfig(training_config=TrainingSection(
            model_config=ModelConfig(architecture=tiny_architecture(model_type), attn_implementation=attn),
            datasets=DatasetConfig(packing=packing)))
        return as_run(job, rows=64, vocab_size=97, special_tokens={}, on_gpu=False).training_config.model_config

    assert [run("llama", packing, attn).attn_implementation for packing, attn in
            [(False, None), (False, "sdpa"), (True, None), (False, "eager")]] == ["causal_sdpa", "causal_sdpa", None, "eager"]
    built = {t: _from_config(run(t), init=False).config._attn_implementation
             for t in ("llama", "qwen3", "gpt_oss", "llama4_text", "gemma4_text")}
    assert built == {"llama": "causal_sdpa", "qwen3": "causal_sdpa", "gpt_oss": "eager", "llama4_text": "sdpa",
                     "gemma4_text": "sdpa"}
    assert run("llama", attn="flex_attention").attn_implementation == "causal_sdpa"  # CPU: no flex backward


@pytest.mark.parametrize("model_type", ["llama", "gpt_oss", "qwen2", "qwen3", "llama4_text"])
def test_a_packed_row_equals_its_samples_one_by_one(model_type):
    torch.use_deterministic_algorithms(False)
    rng = random.Random(0)
    # 23 tokens: longer than GPT-OSS's sliding window and Llama 4's attention chunk (16 each), and
    # the second sample starts mid-chunk, so a chunk boundary counted from the row would show.
    samples = [sample(rng, n) for n in (11, 23, 7)]
    # In float64, so the only difference left is summation order (~1e-16 relative on any CPU): a
    # leak of attention across samples changes the loss and gradients at the 1e-3 level.
    model = tiny_causal_lm(model_type, float64=True)
    packed_loss, packed_grads = loss_and_grads(model, collate([packed_row(samples)]))
    separate_loss, separate_grads = 0.0, None
    for s in samples:
        loss, grads = loss_and_grads(model, collate([s]))
        separate_loss += loss
        separate_grads = grads if separate_grads is None else {n: separate_grads[n] + g for n, g in grads.items()}
    # Llama 4 casts q/k to float32 for its rotary embedding and q/k norm even in a float64 model:
    # there a 1e-16 difference can flip a float32 rounding, so its bound is float32's resolution.
    # Measured there: 7e-8 of each gradient's largest entry; a leak across samples moves them by 1.8x.
    if model_type == "llama4_text":
        assert torch.allclose(packed_loss, separate_loss, rtol=1e-7)
        for name, grad in separate_grads.items():
            assert (packed_grads[name] - grad).abs().max() <= 1e-6 * grad.abs().max(), name
        return
    assert torch.allclose(packed_loss, separate_loss, rtol=1e-10)
    for name, grad in separate_grads.items():
        assert torch.allclose(packed_grads[name], grad, rtol=1e-9, atol=1e-12), name


def test_right_padding_without_a_mask_changes_nothing():
    rng = random.Random(1)
    short, long = sample(rng, 9), sample(rng, 20)
    model = tiny_causal_lm("llama", float64=True)  # float64: summation order cannot matter
    together, _ = loss_and_grads(model, collate([short, long]))
    alone = sum(loss_and_grads(model, collate([s]))[0] for s in (short, long))
    assert torch.allclose(together, alone, rtol=1e-10)
    assert "attention_mask" not in collate([short, long])


def test_packing_boundaries_never_train_on_the_next_sample():
    rng = random.Random(2)
    first, second = sample(rng, 6), sample(rng, 5)
    batch = collate([packed_row([first, second])])
    assert batch["labels"][0, 5] == IGNORE_INDEX  # the last token of `first` predicts nothing
    assert batch["position_ids"][0].tolist() == [0, 1, 2, 3, 4, 5, 0, 1, 2, 3, 4]


@pytest.mark.parametrize("softcap", [None, 2.0])  # 2.0: Gemma's final-logit soft-capping, well inside tanh's bend
def test_chunked_and_fused_losses_equal_the_full_logits_loss(softcap):
    torch.manual_seed(0)
    hidden = torch.randn(3, 50, 16, dtype=torch.float64, requires_grad=True)
    weight = torch.randn(97, 16, dtype=torch.float64, requires_grad=True)
    labels = torch.randint(0, 97, (3, 50))
    labels[0, :10] = IGNORE_INDEX
    full = linear_cross_entropy(hidden, weight, labels, chunk_tokens=0, softcap=softcap)
    full_grads = torch.autograd.grad(full, (hidden, weight))
    for fused in (False, True):  # the fused one computes the gradients in forward, as on GPU
        chunked = linear_cross_entropy(hidden, weight, labels, chunk_tokens=16, fused=fused,  # 10 chunks, one ragged
                                       softcap=softcap)
        chunked_grads = torch.autograd.grad(chunked * 0.37, (hidden, weight))  # a scaled loss, as the trainer's
        assert torch.allclose(full, chunked, rtol=1e-12)
        for a, b in zip(full_grads, chunked_grads):
            assert torch.allclose(a * 0.37, b, rtol=1e-10)
    logits = hidden @ weight.t()
    logits = softcap * torch.tanh(logits / softcap) if softcap else logits
    reference = torch.nn.functional.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=IGNORE_INDEX,
                                                  reduction="sum")
    assert torch.allclose(full, reference)


@pytest.mark.slow  # compiles (inductor on CPU): the full suite
def test_compiled_layers_equal_eager():
    from training.contract.config import ModelConfig
    from training.model.causal_lm import _optimize_layers

    rng = random.Random(3)
    batch = collate([sample(rng, 12), sample(rng, 8)])
    eager = tiny_causal_lm("llama")
    compiled = tiny_causal_lm("llama")
    _optimize_layers(compiled, ModelConfig(), compile_layers=True)
    eager_loss, eager_grads = loss_and_grads(eager, batch)
    compiled_loss, compiled_grads = loss_and_grads(compiled, batch)
    assert torch.allclose(eager_loss, compiled_loss, rtol=1e-5)
    for name, grad in eager_grads.items():
        assert torch.allclose(compiled_grads[name], grad, rtol=1e-4, atol=1e-6), name


def test_packing_fills_rows_and_is_deterministic():
    rng = random.Random(4)
    lengths = [min(4096, int(rng.lognormvariate(6.5, 0.9)) + 20) for _ in range(3000)]  # long-tailed chats
    rows = pack(lengths, 4096)
    assert sorted(i for row in rows for i in row) == list(range(len(lengths)))
    assert all(sum(lengths[i] for i in row) <= 4096 for row in rows)
    fill = sum(lengths) / (len(rows) * 4096)
    assert fill >= 0.95, fill
    assert pack(lengths, 4096) == rows


def catalogue_head_counts() -> set[tuple[int, int]]:
    """(attention heads, K/V heads) of every model in the recipe catalogue."""
    from elastic_launcher.config.compose import compose, options, to_plain

    counts = set()
    for recipe in options("recipes"):
        shape = to_plain(compose([f"recipes={recipe}"])[0])["recipes"].get("model_shape")
        if shape:
            counts.add((shape["num_attention_heads"], shape.get("num_key_value_heads") or shape["num_attention_heads"]))
    return counts


@pytest.mark.slow  # compiles flex attention: the full suite
def test_flex_attention_keeps_kv_heads_for_every_catalogue_head_count(monkeypatch):
    """Grouped-query attention without copying K/V to every query head, equal to flex on K/V copied
    to every head (what transformers' flex path does where the head count is not a power of two),
    in float64."""
    import training.model.attention as attention
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention
    from transformers.models.llama.modeling_llama import repeat_kv

    counts = catalogue_head_counts()
    assert {(28, 4), (40, 8), (12, 2), (64, 8)} <= counts  # the non-powers of two are among them
    seen_kv_heads = []
    flex = attention.flex_attention
    monkeypatch.setattr(attention, "flex_attention", lambda q, k, v, **kw: seen_kv_heads.append(k.shape[1]) or flex(q, k, v, **kw))
    torch.manual_seed(0)
    tokens, head_dim = 20, 8
    causal = create_block_mask(lambda b, h, q, kv: kv <= q, None, None, tokens, tokens, device="cpu")
    module = torch.nn.Module().eval()
    for heads, kv_heads in sorted(counts):
        q = torch.randn(1, heads, tokens, head_dim, dtype=torch.float64)
        k, v = (torch.randn(1, kv_heads, tokens, head_dim, dtype=torch.float64) for _ in range(2))
        ours, _ = attention.flex_attention_forward(module, q, k, v, causal, scaling=head_dim ** -0.5)
        copied = flex_attention(q, repeat_kv(k, heads // kv_heads), repeat_kv(v, heads // kv_heads),
                                block_mask=causal, scale=head_dim ** -0.5).transpose(1, 2)
        assert torch.allclose(ours, copied, rtol=1e-12, atol=1e-14), (heads, kv_heads)
    assert seen_kv_heads == [kv for _, kv in sorted(counts)]


def test_gpt_oss_sinks_are_applied_in_fp32():
    """GPT-OSS's attention sinks under flex attention with bf16 inputs lose no more than one bf16
    rounding of the output beyond what flex itself loses (transformers rounds the log-sum-exp to
    bf16 first: at |lse| ~ 18 that is 2-3 roundings more). Against GPT-OSS's own eager attention
    in float64."""
    import types

    from torch.nn.attention.flex_attention import create_block_mask
    from transformers.models.gpt_oss.modeling_gpt_oss import eager_attention_forward

    from training.model.attention import flex_attention_forward

    torch.manual_seed(0)
    heads, kv_heads, tokens, head_dim = 8, 2, 64, 32
    q = torch.randn(2, heads, tokens, head_dim, dtype=torch.float64) * 2
    k = torch.randn(2, kv_heads, tokens, head_dim, dtype=torch.float64) * 2
    v = torch.randn(2, kv_heads, tokens, head_dim, dtype=torch.float64)
    causal = create_block_mask(lambda b, h, qi, kv: kv <= qi, None, None, tokens, tokens, device="cpu")
    dense = torch.full((tokens, tokens), float("-inf"), dtype=torch.float64).triu(1)[None, None]

    def error(sinks):
        module = types.SimpleNamespace(num_key_value_groups=heads // kv_heads, training=False, sinks=sinks)
        exact, _ = eager_attention_forward(module, q, k, v, dense, scaling=head_dim ** -0.5, dropout=0.0)
        got, _ = flex_attention_forward(module, q.bfloat16(), k.bfloat16(), v.bfloat16(), causal,
                                        scaling=head_dim ** -0.5, s_aux=sinks.bfloat16())
        return float((got.double() - exact).abs().max() / exact.abs().max())

    flex_alone = error(torch.full((heads,), -1e4, dtype=torch.float64))  # sinks that take nothing
    assert error(torch.randn(heads, dtype=torch.float64) * 2 + 4) <= flex_alone + 2**-8


@pytest.mark.slow  # compiles flex attention: the full suite
def test_a_gpt_oss_forward_with_flex_attention_equals_eager():
    """The trainer's flex attention inside the model (sliding and full layers, sinks, block masks
    from document ids): the same loss as GPT-OSS's eager attention, packed rows included, in float64."""
    from training.model.attention import use_trainer_flex_attention

    use_trainer_flex_attention()
    rng = random.Random(5)
    batch = collate([packed_row([sample(rng, n) for n in (11, 23, 7)]), sample(rng, 30)])
    eager = tiny_causal_lm("gpt_oss", float64=True)
    flex = tiny_causal_lm("gpt_oss", float64=True)
    flex.config._attn_implementation = "flex_attention"
    with torch.no_grad():
        assert torch.allclose(flex(**model_inputs(batch, "cpu")), eager(**model_inputs(batch, "cpu")), rtol=1e-12)


@pytest.mark.parametrize("model_type", ["gpt_oss", "llama4_text"])
def test_the_router_balance_loss_is_the_same_at_every_split_of_the_batch(model_type):
    """Full-parameter MoE training adds the architecture's load-balancing loss per sample: the step's
    samples in one micro-batch, packed two rows, or spread over three ranks' micro-batches with
    padding rows and an empty one, give one loss and one router gradient (float64); a lone sample's
    term is transformers' own `load_balancing_loss_func`."""
    from transformers.models.gpt_oss.modeling_gpt_oss import load_balancing_loss_func

    torch.use_deterministic_algorithms(False)
    model = tiny_causal_lm(model_type, float64=True)
    model.train()
    assert model.routers is not None and model.balance_coef > 0
    rng = random.Random(2)
    samples = [sample(rng, n) for n in (9, 14, 6, 11, 20, 7)]

    def balance(micro_batches, shape=None):
        model.zero_grad()
        total = 0
        for rows in micro_batches:
            batch = collate(rows, shape)
            model(**model_inputs(batch, "cpu"), document_index=batch["document_index"], documents=batch["documents"])
            total = total + (model.balance_loss if batch["documents"] else 0)
        total.backward()
        return total.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if "router" in n}

    whole, whole_grads = balance([samples])
    splits = [balance([samples[:1], samples[1:3], [], samples[3:5], samples[5:]], BatchShape(2, 32, False)),
              balance([[packed_row(samples[:3]), packed_row(samples[3:])]], BatchShape(2, 64, True))]
    for total, grads in splits:
        assert total.item() == pytest.approx(whole.item(), rel=1e-12)
        for name, grad in whole_grads.items():
            torch.testing.assert_close(grads[name], grad, rtol=1e-10, atol=1e-14, msg=name)
    lone = collate(samples[:1])
    model(**model_inputs(lone, "cpu"), document_index=lone["document_index"], documents=1)
    logits = model.model(input_ids=lone["input_ids"], output_router_logits=True).router_logits
    upstream = load_balancing_loss_func(logits, model.config.num_local_experts, model.config.num_experts_per_tok)
    assert model.balance_loss.item() == pytest.approx(upstream.item(), rel=1e-6)  # upstream sums in fp32


def test_compiled_layers_fail_loudly_past_their_own_limit_and_nothing_else_does(monkeypatch):
    """A decoder layer that needs more graphs than its limit stops the run with a one-line hint
    (not an eager fallback without a word); torch's global setting stays off, so other compiled
    functions (transformers' mask builder, the flex kernel) keep torch's own behaviour."""
    import torch._dynamo

    from training.model.causal_lm import _compile_for_training

    monkeypatch.setenv("ELASTIC_COMPILE_BACKEND", "eager")

    class Doubling(torch.nn.Module):
        def forward(self, x):
            return x * 2

    layer = Doubling()
    _compile_for_training(layer, limit=2)
    other = torch.compile(lambda x: x + 1, backend="eager")
    for dtype in (torch.float32, torch.float64):  # a dtype is a guard: each is a graph of its own
        assert torch.equal(layer(torch.ones(3, dtype=dtype)), torch.full((3,), 2, dtype=dtype))
        other(torch.ones(3, dtype=dtype))
    with pytest.raises(RuntimeError, match="needed more than 2 graphs"):
        layer(torch.ones(3, dtype=torch.float16))
    assert not torch._dynamo.config.fail_on_recompile_limit_hit
    with torch.no_grad():
        assert torch.equal(layer(torch.ones(3, dtype=torch.float16)), torch.full((3,), 2, dtype=torch.float16))  # eager
    other(torch.ones(3, dtype=torch.float16))  # the third graph of an ordinary compiled function is fine
