"""Will it fit? The peak memory of one training process per GPU.

Traced where it can be: `scripts/trace_memory.py` runs the trainer's own step on fake tensors
(training/memory_trace.py) at each catalogue recipe's real shape and sizes and keeps the peaks in
traced_memory.json beside this file (your own recipes' in your recipe directory: config/user_recipes.py),
keyed by everything the peak depends on (`trace_inputs`). A
size whose inputs were traced shows the traced peak plus the allowance for what the trace cannot
see (`with_allowance`); any other falls back to the analytic estimate below.

The launcher reads no model hub, so a recipe states its model's shape (`model_shape`: the
transformers config keys that size memory) or builds the model from an inline `architecture`.
The fallback estimate adds, per GPU at a given world size:
- sharded state: fp32 weights, gradients and AdamW moments (16 bytes per trained parameter; 32
  under fp64 master weights) over every rank; under LoRA the frozen base in bf16 (2 bytes per
  parameter) plus the adapters' 16 (or 32);
- FSDP's working set: one decoder layer gathered in bf16 (FSDP's all-gather output and its copy),
  the LM head gathered (its own unit), and a layer's gradient (bf16, then fp32 to reduce);
- activations of one micro-batch (DPO: chosen and rejected rows) at the recipe's activation
  checkpointing, and one loss chunk's logits (bf16, their fp32 log-softmax and its gradient);
- the same allowance as a trace (`Allowance`).
ACTIVATION_FACTOR is the one constant, fitted to the kept traces (tests/test_catalogue.py holds
the fallback against every one of them).
"""

from __future__ import annotations

import functools
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

from elastic_launcher.config.user_recipes import read_traces, trace_files
from training.contract.families import EXPERT_COUNT_KEYS
from training.contract.grpo_args import completion_budget, correction_level
from training.contract.methods import method_facts, sampling_options

GIB = 2**30
TRACE_FORMAT = 3  # bumped when the trainer's step changes what it holds: every kept trace is then stale
# What the trace cannot see (`Allowance`): the CUDA context with its libraries' workspaces, NCCL's
# buffers per communicator (FSDP uses the world's; HSDP the world's, its shard group's and its
# replicate group's), the GPU loss's fp32 head gradient (the trace runs the CPU's chunked loss), and
# the caching allocator's fragmentation (reserved above allocated; the manifests set
# expandable_segments, which keeps it low).
CUDA_CONTEXT_GIB = 0.5
# What a vLLM engine asleep at level 1 keeps on its GPU (weights moved to host memory, KV cache
# freed): its CUDA graphs and allocator pools. An allowance until a GPU run measures it.
VLLM_ASLEEP_GIB = 1.5
NCCL_COMMUNICATOR_GIB = 1.5
FRAGMENTATION = 0.05
FIT_SHARE = 0.9  # a size fits when its peak with the allowance is at most this share of the GPU
ACTIVATION_FACTOR = 1.2  # fitted to the kept traces: the median fallback is 1.08x the trace


@dataclass(frozen=True)
class ModelShape:
    """The transformers config keys that size a decoder-only model's memory, and each layer's kinds.

    A layer is a sequence mixer and an MLP (`mixers[i]`, `mlps[i]`): "attention" (sliding or
    global alike), "global_attention" (Gemma 4's full-attention layers: wider heads, their own KV
    heads), "linear_attention" (Qwen 3.5's Gated DeltaNet), "mamba" (Mamba-2), or "" for none; an
    MLP is "dense", "moe" or "". Nemotron-H's layers hold one block each: a mixer or an MLP.
    """

    hidden_size: int
    intermediate_size: int
    num_attention_heads: int
    num_key_value_heads: int
    vocab_size: int
    head_dim: int
    mixers: tuple[str, ...]
    mlps: tuple[str, ...]
    tie_word_embeddings: bool = False
    norms_per_layer: int = 2
    gated_mlp: bool = True  # gate, up and down projections (Nemotron-H's squared ReLU: up and down)
    experts: int = 0  # routed experts per MoE layer (0: dense)
    experts_per_token: int = 0
    expert_width: int = 0  # an expert's intermediate size (moe_intermediate_size; default intermediate_size)
    shared_width: int = 0  # the intermediate size of the expert every token passes through (0: none)
    attention_bias: bool = False  # Qwen2: biases on q/k/v
    attention_output_gate: bool = False  # Qwen 3.5: q_proj also yields a sigmoid gate per query channel
    # Gated DeltaNet (Qwen 3.5's `linear_attention` layers)
    linear_key_heads: int = 0
    linear_value_heads: int = 0
    linear_key_dim: int = 0  # per head
    linear_value_dim: int = 0  # per head
    linear_conv_kernel: int = 0
    # Mamba-2 (Nemotron-H's `mamba` layers)
    mamba_heads: int = 0
    mamba_head_dim: int = 0
    mamba_groups: int = 0
    ssm_state: int = 0
    mamba_conv_kernel: int = 0
    # Gemma 4: global layers' head width and KV heads (keys serve as values there under
    # attention_k_eq_v), the last layers reusing earlier layers' keys and values (no k/v projections;
    # a double-wide MLP under use_double_wide_mlp), and token embeddings per layer
    global_head_dim: int = 0
    global_kv_heads: int = 0
    keys_as_values: bool = False
    kv_shared_layers: int = 0
    double_wide_shared_mlp: bool = False
    per_layer_input: int = 0  # hidden_size_per_layer_input
    per_layer_vocab: int = 0

    @classmethod
    def from_config(cls, config: dict) -> "ModelShape":
        """From a transformers config's keys, under each family's names for its layers and experts."""
        heads = config["num_attention_heads"]
        kind = config.get("model_type", "")
        experts = next((config[k] for k in EXPERT_COUNT_KEYS if config.get(k)), 0)
        mixers, mlps = _layer_kinds(config, experts)
        width = config.get("moe_intermediate_size") or config["intermediate_size"]
        shared = (config.get("shared_expert_intermediate_size") or config.get("moe_shared_expert_intermediate_size")
                  or (config.get("n_shared_experts") or 0) * width or (width if kind.startswith("llama4") else 0))
        linear, mamba = "linear_attention" in mixers, "mamba" in mixers
        gemma4 = kind == "gemma4_text"
        norms = 2  # before attention and before the MLP; Gemma's four (and Gemma 4's per-layer input's), Nemotron-H's one
        if kind.startswith("gemma"):
            norms = 4 + bool(config.get("hidden_size_per_layer_input"))
        elif kind == "nemotron_h":
            norms = 1
        return cls(hidden_size=config["hidden_size"],
                   intermediate_size=config.get("intermediate_size") or 0, num_attention_heads=heads,
                   num_key_value_heads=config.get("num_key_value_heads") or heads,
                   vocab_size=config.get("vocab_size", 32000),
                   head_dim=config.get("head_dim") or config["hidden_size"] // heads, mixers=mixers, mlps=mlps,
                   tie_word_embeddings=bool(config.get("tie_word_embeddings", False)),
                   norms_per_layer=norms, gated_mlp=kind != "nemotron_h",
                   experts=experts, experts_per_token=config.get("num_experts_per_tok") or 0,
                   expert_width=width if experts else 0, shared_width=shared if experts else 0,
                   attention_bias=kind == "qwen2", attention_output_gate=linear,
                   linear_key_heads=config.get("linear_num_key_heads", 16) if linear else 0,
                   linear_value_heads=config.get("linear_num_value_heads", 32) if linear else 0,
                   linear_key_dim=config.get("linear_key_head_dim", 128) if linear else 0,
                   linear_value_dim=config.get("linear_value_head_dim", 128) if linear else 0,
                   linear_conv_kernel=config.get("linear_conv_kernel_dim", 4) if linear else 0,
                   mamba_heads=config.get("mamba_num_heads", 128) if mamba else 0,
                   mamba_head_dim=config.get("mamba_head_dim", 64) if mamba else 0,
                   mamba_groups=config.get("n_groups", 8) if mamba else 0,
                   ssm_state=config.get("ssm_state_size", 128) if mamba else 0,
                   mamba_conv_kernel=config.get("conv_kernel", 4) if mamba else 0,
                   global_head_dim=(config.get("global_head_dim") or 0) if gemma4 else 0,
                   global_kv_heads=(config.get("num_global_key_value_heads") or 0) if gemma4 else 0,
                   keys_as_values=bool(config.get("attention_k_eq_v")) if gemma4 else False,
                   kv_shared_layers=(config.get("num_kv_shared_layers") or 0) if gemma4 else 0,
                   double_wide_shared_mlp=bool(config.get("use_double_wide_mlp")) if gemma4 else False,
                   per_layer_input=(config.get("hidden_size_per_layer_input") or 0) if gemma4 else 0,
                   per_layer_vocab=(config.get("vocab_size_per_layer_input") or config.get("vocab_size", 0))
                   if gemma4 else 0)

    # --- layers ---------------------------------------------------------------------------------------
    @property
    def num_hidden_layers(self) -> int:
        return len(self.mixers)

    @property
    def linear_layers(self) -> int:
        return self.mixers.count("linear_attention")

    def kv_shared(self, layer: int) -> bool:
        return layer >= self.num_hidden_layers - self.kv_shared_layers

    def kv_bytes_per_token(self, dtype_bytes: int = 2) -> int:
        """One token's KV cache over every attention layer that keeps its own (sliding windows
        counted whole: a bound)."""
        total = 0
        for layer, mixer in enumerate(self.mixers):
            if mixer in ("attention", "global_attention") and not self.kv_shared(layer):
                _, key, value = self.attention_dims(mixer)
                total += key + (value or key)
        return total * dtype_bytes

    def attention_dims(self, mixer: str) -> tuple[int, int, int]:
        """(query width, key width, value width) of an attention layer: 0 where it has no projection."""
        if mixer == "global_attention" and self.global_head_dim:
            kv_heads = self.global_kv_heads if self.keys_as_values and self.global_kv_heads \
                else self.num_key_value_heads
            key = kv_heads * self.global_head_dim
            return self.num_attention_heads * self.global_head_dim, key, 0 if self.keys_as_values else key
        kv = self.num_key_value_heads * self.head_dim
        return self.num_attention_heads * self.head_dim, kv, kv

    def projections(self, layer: int) -> dict[str, tuple[int, int]]:
        """A layer's linear layers, (in, out), by name: what all-linear LoRA adapts and, with the
        experts, the router and the small vectors, what the layer holds."""
        h, mixer, mlp = self.hidden_size, self.mixers[layer], self.mlps[layer]
        found = {}
        if mixer in ("attention", "global_attention"):
            q, k, v = self.attention_dims(mixer)
            found["q_proj"] = (h, 2 * q if self.attention_output_gate else q)
            if not self.kv_shared(layer):
                found.update({"k_proj": (h, k)} | ({"v_proj": (h, v)} if v else {}))
            found["o_proj"] = (q, h)
        elif mixer == "linear_attention":
            k, v = self.linear_key_heads * self.linear_key_dim, self.linear_value_heads * self.linear_value_dim
            found.update({"in_proj_qkv": (h, 2 * k + v), "in_proj_z": (h, v), "in_proj_b": (h, self.linear_value_heads),
                          "in_proj_a": (h, self.linear_value_heads), "out_proj": (v, h)})
        elif mixer == "mamba":
            inner = self.mamba_heads * self.mamba_head_dim
            found.update({"in_proj": (h, 2 * inner + 2 * self.mamba_groups * self.ssm_state + self.mamba_heads),
                          "out_proj": (inner, h)})
        width = {"dense": self.intermediate_size * (2 if self.double_wide_shared_mlp and self.kv_shared(layer) else 1),
                 "moe": self.shared_width}.get(mlp, 0)
        if width:
            found.update(({"gate_proj": (h, width)} if self.gated_mlp else {}) | {"up_proj": (h, width),
                                                                                   "down_proj": (width, h)})
        if self.per_layer_input:
            found.update({"per_layer_input_gate": (h, self.per_layer_input),
                          "per_layer_projection": (self.per_layer_input, h)})
        return found

    def layer_param_count(self, layer: int) -> int:
        """One decoder layer: its linear layers, routed experts and router, the Gated DeltaNet's or
        Mamba's convolution, attention biases and its norms (per-head norms and decays: a few hundred)."""
        h, mixer, projections = self.hidden_size, self.mixers[layer], self.projections(layer)
        count = sum(i * o for i, o in projections.values()) + self.norms_per_layer * h
        if mixer == "linear_attention":
            count += projections["in_proj_qkv"][1] * self.linear_conv_kernel
        if mixer == "mamba":
            inner = self.mamba_heads * self.mamba_head_dim
            count += (inner + 2 * self.mamba_groups * self.ssm_state) * (self.mamba_conv_kernel + 1) + inner
        if self.attention_bias and mixer == "attention":
            count += sum(self.attention_dims(mixer))
        if self.mlps[layer] == "moe":
            count += (3 if self.gated_mlp else 2) * h * self.experts * self.expert_width + h * self.experts
        return count

    @property
    def layer_params(self) -> int:
        """The largest decoder layer: what FSDP gathers at once."""
        return max(self.layer_param_count(i) for i in range(self.num_hidden_layers))

    @property
    def params(self) -> int:
        embeddings = self.vocab_size * self.hidden_size * (1 if self.tie_word_embeddings else 2)
        per_layer_inputs = self.num_hidden_layers * self.per_layer_input  # Gemma 4's token embeddings per layer
        per_layer_embeddings = per_layer_inputs * (self.per_layer_vocab + self.hidden_size)
        return (sum(self.layer_param_count(i) for i in range(self.num_hidden_layers)) + embeddings
                + per_layer_embeddings + self.hidden_size)

    def lora_params(self, r: int) -> int:
        """Adapters (r x in + out x r) on every linear layer but the LM head: attention and Gated
        DeltaNet projections, Mamba's input projection, dense MLPs, the shared expert and Gemma 4's
        per-layer projections. Fused expert weights are 3-D parameters, not linear layers: they stay
        frozen, as do the routers; peft refuses a Mamba mixer's output projection
        (training.model.lora.linear_module_names)."""
        adapted = [(i, o) for layer in range(self.num_hidden_layers)
                   for name, (i, o) in self.projections(layer).items()
                   if not (name == "out_proj" and self.mixers[layer] == "mamba")]
        if self.per_layer_input:
            adapted.append((self.hidden_size, self.num_hidden_layers * self.per_layer_input))
        return r * sum(i + o for i, o in adapted)

    # --- activations --------------------------------------------------------------------------------
    def layer_activation_bytes(self, tokens: int) -> int:
        """Saved for backward by one decoder layer (bf16, fused attention kernels: no T x T scores):
        fp32 norm inputs, q/k/v, attention output, and the MLP's inputs and gated products for the
        experts each token visits."""
        h, q, kv = self.hidden_size, self.num_attention_heads * self.head_dim, self.num_key_value_heads * self.head_dim
        mlp = self.experts_per_token * self.expert_width + self.shared_width if self.experts else self.intermediate_size
        return tokens * (12 * h + 4 * q + 4 * kv + 8 * mlp)


def _layer_kinds(config: dict, experts: int) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """Each layer's (mixer, MLP) from transformers' config keys: Nemotron-H's one block per layer
    (layers_block_type or hybrid_override_pattern), Gemma 4's global layers, Qwen 3.5's Gated
    DeltaNet layers (every full_attention_interval-th attends, transformers' default), DeepSeek's
    leading dense layers."""
    kind = config.get("model_type", "")
    if kind == "nemotron_h":
        pattern = config.get("hybrid_override_pattern")
        blocks = [{"M": "mamba", "E": "moe", "*": "attention", "-": "mlp"}[c] for c in pattern] if pattern else \
            [{"linear_attention": "mamba", "full_attention": "attention"}.get(b, b) for b in
             config.get("layers_block_type") or config.get("layer_types") or ()]
        return (tuple(b if b in ("mamba", "attention") else "" for b in blocks),
                tuple({"moe": "moe", "mlp": "dense"}.get(b, "") for b in blocks))
    layers = config["num_hidden_layers"]  # a KeyError names the missing key (model_config.readable_shape)
    types = list(config.get("layer_types") or [])
    if kind.startswith(("qwen3_5", "qwen3_next")) and not types:
        interval = config.get("full_attention_interval", 4)
        types = ["full_attention" if (i + 1) % interval == 0 else "linear_attention" for i in range(layers)]
    if kind == "gemma4_text":  # five sliding layers to a global one, and the last layer global, as transformers
        types = (types or ["full_attention" if (i + 1) % 6 == 0 else "sliding_attention" for i in range(layers)])
        types[layers - 1] = "full_attention"
    types = types or ["attention"] * layers
    mixers = tuple("linear_attention" if t == "linear_attention" else
                   "global_attention" if kind == "gemma4_text" and t == "full_attention" else "attention"
                   for t in types[:layers])
    dense = min(config.get("first_k_dense_replace") or 0, layers) if experts else layers
    return mixers, tuple("dense" if i < dense else "moe" for i in range(layers))


@dataclass(frozen=True)
class MemoryEstimate:
    state_gib: float  # sharded weights, gradients and optimizer state
    working_gib: float  # gathered layers and their unsharded gradients
    activations_gib: float
    total_gib: float  # the training step's peak (GRPO: its updates)
    traced: bool = False  # from the trace of the trainer's step (else the analytic estimate)
    phase: str = ""  # traced: where the peak falls
    rollout_gib: float | None = None  # GRPO: the rollout's peak (planning.plan: rollout_phases)

    @property
    def peak_gib(self) -> float:
        """The larger phase: what must fit."""
        return max(self.total_gib, self.rollout_gib or 0.0)


@dataclass(frozen=True)
class Allowance:
    """What a GPU holds beside the traced step, by part (see the constants above)."""

    communicators: int = 1  # NCCL communicators of the mesh: 1 (FSDP) or 3 (HSDP)
    fused_loss_gib: float = 0.0  # the fused loss's gradients, held from forward to backward

    @classmethod
    def of(cls, model_shape: dict, training_config, hsdp: bool, micro_batch: int) -> "Allowance":
        """SFT's fused loss (training.model.loss) holds the hidden states' gradient (bf16) and, in
        full-parameter training, the head's gradient in fp32 (vocab x hidden: 2 GiB for Llama 3 8B);
        DPO scores row by row on the chunked path."""
        tc = training_config
        fused = 0.0
        if method_facts(tc.training_args.trainer_type).fused_loss and tc.model_config.loss_chunk_tokens > 0:
            hidden, vocab = model_shape.get("hidden_size", 0), model_shape.get("vocab_size", 32000)
            fused = 2 * micro_batch * tc.datasets.max_len * hidden + (0 if tc.model_config.lora else 4 * vocab * hidden)
        return cls(communicators=3 if hsdp else 1, fused_loss_gib=fused / GIB)

    def total_gib(self, traced_gib: float) -> float:
        return traced_gib * (1 + FRAGMENTATION) + CUDA_CONTEXT_GIB + self.communicators * NCCL_COMMUNICATOR_GIB + \
            self.fused_loss_gib

    def describe(self) -> str:
        return (f"CUDA context {CUDA_CONTEXT_GIB:g} GiB, NCCL {NCCL_COMMUNICATOR_GIB:g} GiB per communicator (1 under "
                f"FSDP, 3 under HSDP), the fused loss's gradients (SFT; fp32 head gradient in full-parameter "
                f"training) and {FRAGMENTATION:.0%} fragmentation")


def with_allowance(traced_gib: float, allowance: Allowance = Allowance()) -> float:
    """A traced peak with what the trace cannot see."""
    return allowance.total_gib(traced_gib)


def trace_inputs(model_shape: dict, training_config, shard_degree: int, micro_batch: int, grad_accum: int) -> dict:
    """Everything a traced peak depends on (training_config: a training.contract.config.TrainingConfig). A
    size that accumulates gradients is traced over two micro-batches (the second starts with the
    first one's gradients held): more add nothing to the peak. A rank of an HSDP job whose state is
    sharded over `shard_degree` GPUs holds, gathers and reduces what a rank of an FSDP job of that
    many GPUs does (the replicas' all-reduce works in place on the reduced shard), so both are the
    trace of FSDP at that world size (tests/test_memory_trace.py holds the two equal)."""
    mc, ta = training_config.model_config, training_config.training_args
    micro_steps = min(2, grad_accum)
    inputs = {"format": TRACE_FORMAT, "model_shape": dict(sorted(model_shape.items())), "world_size": shard_degree,
              "sharding": "fsdp", "micro_batch": micro_batch, "micro_steps": micro_steps,
              "seq_len": training_config.datasets.max_len, "method": ta.trainer_type,
              "lora": None if not mc.lora else {"r": mc.peft_config.r, "target_modules": mc.peft_config.target_modules},
              "mixed_precision": mc.mixed_precision, "activation_checkpointing": mc.activation_checkpointing,
              "loss_chunk_tokens": mc.loss_chunk_tokens}
    if mc.master_weights != "fp32":  # named only when set: the kept traces' keys stay as they were
        inputs["master_weights"] = mc.master_weights
    if o := sampling_options(training_config):  # GRPO: an update's rows are a prompt's completions
        inputs.update(seq_len=o.max_prompt_length + completion_budget(o),
                      completions={"per_prompt": o.num_generations, "prompt_len": o.max_prompt_length,
                                   "old_log_probs": o.mini_batches > 1, "reference": o.kl_coef > 0})
        if o.micro_completions:  # a micro-batch of that many completions, whatever the prompts per micro-batch
            inputs.update(micro_batch=1, micro_completions=o.micro_completions)
        if correction_level(o) != "none":  # the sampler's log-probabilities carried too
            inputs["completions"]["rollout_log_probs"] = True
        if o.max_steps_off_policy:  # the policies kept for the rollouts behind (training.rl.policy_versions)
            inputs["policy_versions"] = o.max_steps_off_policy
    return inputs


def trace_key(inputs: dict) -> str:
    return hashlib.sha256(json.dumps(inputs, sort_keys=True).encode()).hexdigest()[:16]


def kept_traces() -> dict:
    """Every kept trace: the catalogue's and those of the user's recipes ($LAUNCHER_RECIPES)."""
    files = trace_files()
    return _read_traces(tuple(files), tuple(f.stat().st_mtime_ns if f.exists() else 0 for f in files))


@functools.cache
def _read_traces(files: tuple[Path, ...], versions: tuple[int, ...]) -> dict:
    return {key: trace for path in files for key, trace in read_traces(path).items()}


def traced(inputs: dict, allowance: Allowance = Allowance()) -> MemoryEstimate | None:
    """The kept trace of these inputs, with the allowance, or None if they were never traced."""
    trace = kept_traces().get(trace_key(inputs))
    if trace is None:
        return None
    split = trace["split_gib"]
    return MemoryEstimate(state_gib=split["sharded state"] + split["optimizer"],
                          working_gib=split["gathered parameters"] + split["gradients"],
                          activations_gib=split["activations"] + split["temporaries"],
                          total_gib=with_allowance(trace["peak_gib"], allowance), traced=True, phase=trace["phase"])


def estimate(shape: ModelShape, world_size: int, micro_batch: int, seq_len: int, *, lora_r: int | None,
             activation_checkpointing: str, loss_chunk_tokens: int, sequences_per_sample: int = 1,
             master_weights: str = "fp32", kept_policies: int = 0, allowance: Allowance = Allowance()) -> MemoryEstimate:
    """Peak GiB per GPU, with the allowance (see the module docstring for what is counted)."""
    # FSDP pads fused experts it cannot split evenly (training.model.causal_lm.least_padding) to the rank count.
    padding = 0.0
    width, up = shape.expert_width, 2 if shape.gated_mlp else 1
    for dims, share in (((shape.hidden_size, up * width), up), ((width, shape.hidden_size), 1)):
        if shape.experts and shape.experts % world_size and all(d % world_size for d in dims):  # gate_up, down
            rows = -(-shape.experts // world_size) * world_size / shape.experts - 1
            padding += rows * shape.mlps.count("moe") * shape.experts * share * shape.hidden_size * width
    master = 8 if master_weights == "fp64" else 4
    trained = 4 * master + master * kept_policies  # weight, gradient, AdamW's two moments, GRPO's kept policies
    if lora_r is None:
        state = trained * (shape.params + padding)
        layer_grad = 6 * shape.layer_params
    else:
        adapters = shape.lora_params(lora_r)
        state = 2 * (shape.params + padding) + trained * adapters
        layer_grad = 6 * adapters // shape.num_hidden_layers
    head = 0 if shape.tie_word_embeddings else 2 * shape.vocab_size * shape.hidden_size
    working = 2 * 2 * (shape.layer_params + padding / shape.num_hidden_layers) + head + layer_grad
    tokens = micro_batch * seq_len * sequences_per_sample
    per_layer = shape.layer_activation_bytes(tokens)
    boundary = tokens * shape.hidden_size * 2  # a checkpointed layer keeps only its bf16 input
    layers = shape.num_hidden_layers
    kept = {"none": layers, "selective": (layers + 1) // 2, "full": 0}[activation_checkpointing]
    recompute = per_layer if kept < layers else 0  # one checkpointed layer's activations, rebuilt in backward
    chunk = min(loss_chunk_tokens or tokens, tokens)
    logits = chunk * shape.vocab_size * (2 + 4 + 4)
    activations = ACTIVATION_FACTOR * (kept * per_layer + (layers - kept) * boundary + recompute + logits)
    total = state / world_size + working + activations
    return MemoryEstimate(state / world_size / GIB, working / GIB, activations / GIB,
                          with_allowance(total / GIB, allowance))
