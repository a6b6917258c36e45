"""transformers causal LMs (Llama 3.x and 4, Qwen2/2.5 and 3, GPT-OSS) sharded with FSDP2.

Weights come from the model's files (`model_name_or_path`: a local directory, or a hub id whose
snapshot each node fetches once: training.runtime.snapshot) or, for tiny test models, from an inline
architecture config with seeded random init. From files, every rank builds the model's skeleton on
the meta device, shards it, allocates only its own shards and reads them from the safetensors files
(DCP's HuggingFaceStorageReader; GPT-OSS's MXFP4 experts dequantized for the experts the rank
holds): no process ever holds the full model, on the first start or any restart. Under LoRA the
frozen base is allocated in bf16 before it is read. A vision+text checkpoint (Llama 4) trains its
language model: transformers builds the causal LM from the text config, and the weights are read
from under the checkpoint's `language_model.` prefix.
"""

from __future__ import annotations

import functools

import torch
from torch.distributed.fsdp import FSDPModule, MixedPrecisionPolicy, fully_shard

from training.contract.config import ModelConfig
from training.contract.errors import ConfigError
from training.contract.families import EAGER_FAMILIES, SUPPORTED, recurrent
from training.model.attention import CAUSAL_SDPA, use_causal_sdpa, use_trainer_flex_attention
from training.model.dtensors import local_part
from training.model.lora import file_name, init_adapters, is_adapter, with_adapters
from training.model.loss import LossHead
from training.model.router_balance import RouterLogits, document_balance_losses
from training.model.stored_layout import ExpertPieces, file_layout, read_expert_pieces
from training.model.structure import (check_causal_lm, check_trainable, decoder_layers, decoder_stack,
                                      embedding_lookups, layer_kinds)


def _hf_config(cfg: ModelConfig, source: str | None = None):
    """The transformers config of the model, without quantization (training needs real weights).
    `source`: the local directory of the model's files (default: model_name_or_path)."""
    from transformers import AutoConfig

    if cfg.architecture:
        arch = dict(cfg.architecture)
        model_type = arch.pop("model_type", None)
        if not model_type:
            raise ConfigError("training_config.model_config.architecture needs a model_type (e.g. llama, gpt_oss)")
        return AutoConfig.for_model(model_type, **arch)
    if not cfg.model_name_or_path:
        raise ConfigError("training_config.model_config: set model_name_or_path or architecture")
    config = AutoConfig.from_pretrained(source or cfg.model_name_or_path)
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    return config


def import_model_code(cfg: ModelConfig) -> None:
    """Import the transformers modules the model's classes live in (its config and modeling code: a
    skeleton built on the meta device, no memory), without reading its weights."""
    from transformers import AutoModelForCausalLM

    with torch.device("meta"):
        AutoModelForCausalLM.from_config(_hf_config(cfg), **_attention(cfg))


def check_model(cfg: ModelConfig, packing: bool, source: str | None = None) -> None:
    """Refuse, before anything is built, a model the trainer cannot train (training.model.structure)."""
    check_trainable(_hf_config(cfg, source), packing)


def _attention(cfg: ModelConfig) -> dict:
    """transformers' `attn_implementation` keyword for the model (none: its default); `causal_sdpa`
    is asked of it once built (_without_masks)."""
    if cfg.attn_implementation == "flex_attention":
        use_trainer_flex_attention()  # GQA without K/V copies, GPT-OSS's sinks in fp32
    return {"attn_implementation": cfg.attn_implementation} \
        if cfg.attn_implementation and cfg.attn_implementation != CAUSAL_SDPA else {}


def _without_masks(model: torch.nn.Module, cfg: ModelConfig) -> torch.nn.Module:
    """`causal_sdpa` where the config as run asks for it (rows of one sample each), the model runs
    transformers' SDPA (not every family supports it: GPT-OSS's sinks) and every layer attends to
    its whole row (a window or chunk needs its mask)."""
    if cfg.attn_implementation == CAUSAL_SDPA and model.config._attn_implementation == "sdpa" \
            and set(layer_kinds(model.config)) == {"full_attention"}:
        use_causal_sdpa()
        model.set_attn_implementation(CAUSAL_SDPA)
    return model


LANGUAGE_MODEL = "language_model."  # where a vision+text checkpoint (Llama 4) keeps the causal LM's weights
MXFP4_PARTS = ("_blocks", "_scales")  # GPT-OSS stores an expert weight `w` as w_blocks and w_scales


def _stored(key: str, whole: dict[str, str], fused: dict[str, ExpertPieces]):
    """Where the files hold the model's tensor `key`: a file key, the per-expert pieces, or (GPT-OSS)
    the MXFP4 base name; None if nowhere."""
    plain = file_name(key)
    for name in (plain, LANGUAGE_MODEL + plain):
        if name in whole:
            return whole[name]
        if name in fused:
            return fused[name]
        if all(name + part in whole for part in MXFP4_PARTS):
            return ("mxfp4", name)
    return None


def _load_mxfp4(local: torch.Tensor, where: tuple[slice, ...], name: str, files: dict[str, str]) -> None:
    """Fill this rank's part of a GPT-OSS expert weight from its MXFP4 blocks and scales, reading
    and dequantizing (transformers' own function) only the experts the part spans."""
    from safetensors import safe_open
    from transformers.integrations.mxfp4 import convert_moe_packed_tensors

    if local.numel() == 0:
        return

    def read(part: str) -> torch.Tensor:
        with safe_open(files[name + part], "pt") as f:
            return f.get_slice(name + part)[where[0]]  # [experts, out, in/32, ...] of this rank's experts
    values = convert_moe_packed_tensors(*(read(part) for part in MXFP4_PARTS), dtype=torch.float32)
    local.copy_(values[(slice(None), *where[1:])])  # [experts, in, out], as the model holds it


def _load_pretrained_shards(model: torch.nn.Module, path: str) -> None:
    """Fill the sharded model's weights from the safetensors files in `path`, each rank reading only
    the slices it owns (converted to the parameters' dtype), in whatever layout the family's files
    use (training.model.stored_layout: per-expert tensors, renamed prefixes). A tied LM head is filled
    through its embedding; LoRA adapters are in no file (init_adapters); any other weight missing from
    the files is an error, not a silent random init."""
    from pathlib import Path

    import torch.distributed.checkpoint as dcp
    from safetensors import safe_open

    files = {}
    for file in sorted(Path(path).glob("*.safetensors")):
        with safe_open(str(file), "pt") as f:
            files.update(dict.fromkeys(f.keys(), str(file)))
    whole, fused = file_layout(model.config.model_type, files)
    state = {k: v for k, v in model.state_dict().items() if not is_adapter(k)}
    stored = {k: _stored(k, whole, fused) for k in state}
    owner = {k: id(p) for k, p in model.named_parameters(remove_duplicate=False)}  # tied names share one
    filled = {owner.get(k) for k, where in stored.items() if where}
    missing = [k for k, where in stored.items() if not where and owner.get(k, k) not in filled]
    if missing:
        raise ConfigError(f"model_name_or_path={path!r} lacks weights the model needs ({', '.join(missing[:3])}"
                          f"{', ...' if len(missing) > 3 else ''}): is it a checkpoint of this architecture?")
    dcp.load({where: state[k] for k, where in stored.items() if isinstance(where, str)},
             storage_reader=dcp.HuggingFaceStorageReader(path))
    with torch.no_grad():
        for k, where in stored.items():
            if isinstance(where, ExpertPieces):
                read_expert_pieces(*local_part(state[k]), where, files)
            elif isinstance(where, tuple):
                _load_mxfp4(*local_part(state[k]), where[1], files)


def _from_config(cfg: ModelConfig, init: bool, source: str | None = None) -> torch.nn.Module:
    from contextlib import nullcontext

    from transformers import AutoModelForCausalLM
    from transformers.initialization import no_init_weights

    config = _hf_config(cfg, source)
    with nullcontext() if init else no_init_weights():
        try:
            model = AutoModelForCausalLM.from_config(config, dtype=torch.float32, **_attention(cfg))
        except ValueError as e:
            if "Unrecognized configuration class" not in str(e):
                raise
            raise ConfigError(f"model_type {config.model_type} has no causal LM in transformers: the trainer fine-tunes "
                              f"{SUPPORTED}") from None
    return _without_masks(model, cfg)


def build_model(cfg: ModelConfig, seed: int) -> torch.nn.Module:
    """The model of an inline architecture, seeded random init, on CPU in fp32 (FSDP's sharded
    master weights stay fp32; bf16 is a compute dtype)."""
    if not cfg.architecture:
        raise ConfigError("build_model builds inline architectures; a model's files load shard by shard "
                          "(build_sharded_model)")
    torch.manual_seed(seed)
    return _prepare(_from_config(cfg, init=True))


def _prepare(model: torch.nn.Module) -> torch.nn.Module:
    from training.model.moe import route_experts

    route_experts(model)  # Llama 4: each token through its chosen experts only
    model.tie_weights()  # no_init_weights also skips tying (e.g. Llama 3.2's embeddings and LM head)
    model.config.use_cache = False
    return model


def _skeleton(cfg: ModelConfig, source: str | None = None) -> torch.nn.Module:
    """The same modules as build_model, with parameters and buffers on the meta device (no memory)."""
    with torch.device("meta"):
        return _prepare(_from_config(cfg, init=False, source=source))


def _recompute_buffers(model: "CausalLM") -> None:
    """After `to_empty` buffers hold garbage. Non-persistent ones (rotary frequencies, Gemma's
    embedding scale) are in no checkpoint: transformers' own `_init_weights` computes them for every
    module owning buffers, as its from_pretrained does after a meta-device build. Parameters are
    marked as initialized (transformers' flag) so that it leaves them alone: the weights read next
    fill them, and a random init of a sharded parameter would be a collective the other ranks
    (receiving from rank 0) never join."""
    from transformers import initialization

    params = list(model.parameters())
    for p in params:
        p._is_hf_initialized = True
    try:
        with torch.no_grad(), initialization.guard_torch_init_functions():
            for module in model.modules():
                if next(module.buffers(recurse=False), None) is not None:
                    model.model._init_weights(module)
    finally:
        for p in params:
            del p._is_hf_initialized


class CausalLM(torch.nn.Module):
    """A transformers causal LM whose forward returns the summed token loss instead of logits.

    It holds the model's own `model` (decoder) and `lm_head` modules, so parameter names and
    checkpoints are those of the transformers model. The loss never materializes the full
    (tokens x vocab) logits (training.model.loss). A mixture of experts whose routers train also
    leaves its routers' load-balancing loss in `balance_loss` after a training forward
    (training.model.router_balance)."""

    def __init__(self, hf_model: torch.nn.Module, loss_chunk_tokens: int):
        super().__init__()
        check_causal_lm(hf_model)
        hf_model.set_output_embeddings(LossHead.replacing(hf_model.get_output_embeddings(), loss_chunk_tokens,
                                                          getattr(hf_model.config, "final_logit_softcapping", None)))
        self.model, self.lm_head, self.config = decoder_stack(hf_model), hf_model.get_output_embeddings(), hf_model.config
        self.hf_architecture = type(hf_model).__name__  # e.g. LlamaForCausalLM, for exported configs
        routers = RouterLogits(self.model)
        self.routers = routers if routers.trained() and getattr(self.config, "router_aux_loss_coef", 0) else None
        self.balance_coef = getattr(self.config, "router_aux_loss_coef", 0.0) if self.routers else 0.0
        self.balance_loss: torch.Tensor | None = None
        self.compute_dtype: torch.dtype | None = None  # set by apply_fsdp: bf16 under mixed precision
        # Whether rows that continue one prompt can share its prefill (`rows`): one row's forward, its
        # cache repeated for the rows; transformers repeats attention caches, not a recurrent layer's state.
        self.prefills_once = not recurrent({"model_type": self.config.model_type, "layer_types": layer_kinds(self.config)})

    def forward(self, input_ids, position_ids, labels=None, document_ids=None, per_sequence: bool = False,
                document_index=None, documents: int = 0, per_token: bool = False, cache=None, rows: int = 1):
        """The summed token loss; with `per_sequence`, each row's summed token log-probability (DPO);
        with `per_token`, each label's log-probability and the entropy there (GRPO). `document_ids`
        (packed rows: which sample each token belongs to) keep packed samples apart; `document_index`
        and `documents` (each token's sample in the micro-batch, and their count) let a training
        forward sum its samples' router load-balancing losses into `balance_loss`.
        Without labels, a sampling step: (the last position's logits, the KV cache extended by
        `input_ids`), from `cache` (None: a fresh one, of the kind the model's layers need); with
        `rows` > 1, one prompt's prefill shared by that many rows (`prefills_once`)."""
        from training.model.masks import attention_masks

        if labels is None:  # rows without padding: transformers' own causal mask, over the cache too
            out = self.model(input_ids=input_ids, position_ids=position_ids, past_key_values=cache, use_cache=True)
            last, cache = out.last_hidden_state[:, -1], out.past_key_values
            if rows > 1:  # repeated before the head: the head runs on as many rows as without sharing
                last = last.expand(rows, -1)
                cache.batch_repeat_interleave(rows)
            return self.lm_head(last), cache

        # Recorded in every training forward (an empty micro-batch too: compiled layers see one state).
        recording = self.routers is not None and not per_sequence and self.training and torch.is_grad_enabled()
        if recording:
            self.routers.start()
        # The model embeds its own tokens (Gemma 4 also feeds them to every layer); the masks need
        # only the hidden states' shape, dtype and device.
        masks = attention_masks(self.config, self.hidden_like(input_ids), position_ids, document_ids)
        hidden = self.model(input_ids=input_ids, position_ids=position_ids, use_cache=False,
                            attention_mask=masks).last_hidden_state
        router_logits = self.routers.take() if recording else []
        self.balance_loss = document_balance_losses(router_logits, document_index, documents,
                                                    self.config.num_experts_per_tok) if documents and router_logits else None
        return self.lm_head(hidden, labels, per_sequence, per_token)

    def hidden_like(self, input_ids: torch.Tensor) -> torch.Tensor:
        """A stand-in of the hidden states (no memory): their dtype at the tokens' shape and device."""
        dtype = self.compute_dtype or self.get_input_embeddings().weight.dtype
        return torch.empty((), dtype=dtype, device=input_ids.device).expand(*input_ids.shape, 1)

    def get_input_embeddings(self) -> torch.nn.Module:
        return self.model.get_input_embeddings()


COMPILE_BACKEND_ENV = "ELASTIC_COMPILE_BACKEND"  # e.g. aot_eager: tells a compiler bug from a model bug


def graph_kinds(model: torch.nn.Module) -> int:
    """How many kinds of decoder layer the model has (layer kind, modules, checkpointing): each
    kind compiles to a graph of its own (GPT-OSS: sliding and full attention)."""
    return len({(kind, getattr(layer, "gradient_checkpointing", False), tuple(type(m).__name__ for m in layer.modules()))
                for kind, layer in zip(layer_kinds(model.config), decoder_layers(model))})


def _optimize_layers(model: torch.nn.Module, cfg: ModelConfig, compile_layers: bool) -> None:
    """Activation checkpointing, then per-layer compilation, as torchtitan orders them (before FSDP).
    selective = every other decoder layer: half the recompute of `full` for half its memory savings."""
    if cfg.activation_checkpointing != "none":
        every = 2 if cfg.activation_checkpointing == "selective" else 1
        model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False},
                                              every_n_layers=every)
        # With it transformers makes the embeddings' output require grad; non-reentrant checkpointing
        # does not need that, and trained embeddings give it anyway. Under LoRA (frozen embeddings) it
        # is kept: every layer's input then requires grad, so layer 0 compiles to the others' graph.
        if not cfg.lora:
            model.disable_input_require_grads()
    if compile_layers:
        # Every micro-batch has one shape (training.batches.BatchShape) but for the unpacked rows' bucketed
        # width: per layer kind, one graph, and one more with a dynamic width after the first change.
        limit = 2 * graph_kinds(model)
        for layer in decoder_layers(model):
            _compile_for_training(layer, limit)


def _compile_for_training(layer: torch.nn.Module, limit: int) -> None:
    """Compile the layer's training pass (gradients on, train mode) in place, parameter names
    unchanged; all layers of a kind share one graph. Passes without gradients (evaluation, DPO's
    reference forward, with LoRA's adapters switched off) run eager: as compiled variants of their
    own they would double the graphs, and they are the cheap third of the work. Past `limit`
    variants the run fails loudly rather than going on eager without a word; the limit is the
    layers' alone (transformers' compiled mask builder and flex kernel keep torch's own)."""
    import os

    import torch._dynamo

    backend = os.environ.get(COMPILE_BACKEND_ENV, "inductor")
    compiled, eager = torch.compile(layer._call_impl, backend=backend), layer._call_impl

    def call(*args, **kwargs):
        if not (torch.is_grad_enabled() and layer.training):
            return eager(*args, **kwargs)
        try:
            with torch._dynamo.config.patch(recompile_limit=limit, fail_on_recompile_limit_hit=True):
                return compiled(*args, **kwargs)
        except torch._dynamo.exc.FailOnRecompileLimitHit as e:
            raise RuntimeError(f"the compiled decoder layers needed more than {limit} graphs (2 per layer kind): a "
                               f"micro-batch of an unexpected shape; set model_config.compile=false to train eager, "
                               f"and report the guard failures TORCH_LOGS=recompiles prints") from e

    layer._compiled_call_impl = call  # where nn.Module.compile puts its compiled function


def _sharded(hf_model: torch.nn.Module, cfg: ModelConfig, mesh, on_gpu: bool) -> CausalLM:
    default = on_gpu and hf_model.config.model_type not in EAGER_FAMILIES
    _optimize_layers(hf_model, cfg, cfg.compile if cfg.compile is not None else default)
    return apply_fsdp(CausalLM(hf_model, cfg.loss_chunk_tokens), mesh, cfg.mixed_precision, cfg.master_weights)


def sharded_skeleton(cfg: ModelConfig, mesh, on_gpu: bool, source: str | None = None) -> CausalLM:
    """The sharded model on the meta device: every module, parameter and FSDP unit, no memory."""
    return _sharded(with_adapters(_skeleton(cfg, source), cfg), cfg, mesh, on_gpu)


def plain_model(cfg: ModelConfig, source: str | None, device: torch.device) -> CausalLM:
    """The model unsharded, for sampling only (a rollout process's: training.rl.rollout_ranks): the
    training model's modules and buffers, its parameters in the dtype the trained one computes in
    (under bf16, as FSDP's mixed precision casts them), to be filled with a policy's weights."""
    model = CausalLM(with_adapters(_skeleton(cfg, source), cfg), cfg.loss_chunk_tokens)
    model.to_empty(device=device)
    _recompute_buffers(model)
    if cfg.mixed_precision == "bf16":
        for p in model.parameters():
            p.data = p.data.to(torch.bfloat16)
    model.compute_dtype = next(model.parameters()).dtype
    return model.requires_grad_(False).eval()


def weights_from(cfg: ModelConfig, resuming: bool, source: str | None) -> str:
    """Where build_sharded_model takes the weights from: "checkpoint" (a full-parameter resume),
    "files" (the model's files, every rank its own shards) or "rank 0" (an inline architecture)."""
    if resuming and not cfg.lora:  # a LoRA checkpoint holds only the adapters
        return "checkpoint"
    return "files" if source is not None else "rank 0"


def build_sharded_model(cfg: ModelConfig, seed: int, mesh, on_gpu: bool, resuming: bool,
                        source: str | None = None) -> CausalLM:
    """The FSDP2-sharded model, its weights from one of three places:
    - a full-parameter checkpoint (`resuming`, not LoRA): the skeleton's shards are allocated and
      the checkpoint fills them (by the caller); the buffers are recomputed;
    - the model's files (`source`, a local directory): every rank reads its own shards from them;
    - an inline architecture (test models): rank 0 builds the model with seeded init and the other
      ranks receive their shards from it.
    LoRA checkpoints hold only the adapters: the base always comes from the files (or rank 0), and
    the adapters start from init_adapters until the checkpoint fills them."""
    import torch.distributed as dist
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict

    rank0, single = dist.get_rank() == 0, mesh.size() == 1
    weights = weights_from(cfg, resuming, source)
    from_rank0 = weights == "rank 0"
    device = torch.device(mesh.device_type, torch.cuda.current_device()) if on_gpu else torch.device("cpu")
    if from_rank0 and (rank0 or single):
        hf_model = with_adapters(build_model(cfg, seed), cfg)
        full = hf_model.state_dict() if not single else {}
        model = _sharded(hf_model, cfg, mesh, on_gpu)
    else:
        model = sharded_skeleton(cfg, mesh, on_gpu, source)
        model.to_empty(device=device)
        _recompute_buffers(model)
        if weights == "files":
            _load_pretrained_shards(model, source)
    if from_rank0 and not single:
        set_model_state_dict(model, full if rank0 else {},
                             options=StateDictOptions(full_state_dict=True, broadcast_from_rank0=True))
        for buffer in model.buffers():
            dist.broadcast(buffer, src=0)
    if cfg.lora:
        init_adapters(model, seed)
    return model


def mixed_precision_policy(mixed_precision: str, master_weights: str = "fp32") -> MixedPrecisionPolicy:
    """bf16 compute with fp32 gradient reduction (and fp32 master weights), or plain fp32; fp64 master
    weights gather in the compute dtype and reduce in fp64. Gated on the settings alone, so the CPU
    suite runs the GPU's policy where a recipe asks for it."""
    reduce = torch.float64 if master_weights == "fp64" else torch.float32
    if mixed_precision == "bf16":
        return MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=reduce)
    if master_weights == "fp64":
        return MixedPrecisionPolicy(param_dtype=torch.float32, reduce_dtype=reduce)
    return MixedPrecisionPolicy()


def least_padding(shards: int):
    """FSDP's placement for each parameter: dimension 0, unless it would be padded and another
    dimension splits evenly over `shards` (FSDP pads only dimension 0). A tensor of 32 or 128 fused
    experts (GPT-OSS; Llama 4 has 16) over 64 ranks would be held at 2-4x its size on dimension 0."""
    from torch.distributed.tensor import Shard

    def placement(param: torch.nn.Parameter):
        if param.dim() == 0 or param.shape[0] % shards == 0:
            return Shard(0)
        even = [d for d in range(1, param.dim()) if param.shape[d] % shards == 0]
        return Shard(even[0]) if even else Shard(0)
    return placement


def apply_fsdp(model: CausalLM, mesh, mixed_precision: str, master_weights: str = "fp32") -> CausalLM:
    """fully_shard the embeddings, each decoder layer and the LM head as units of their own, then
    the root (final norm, rotary buffers), as torchtitan does: a unit is gathered only around its
    own forward and backward, so no GPU holds the embeddings or the head whole for the whole step
    (the root is never resharded between forward and backward). A tied embedding and head are one
    weight used at both ends of the model: they stay in the root. Each parameter is split along
    a dimension that needs no padding where one does (`least_padding`).
    A 2-D mesh (replicate x shard) gives HSDP: shards within a node, replicas across nodes, so the
    per-layer all-gathers stay on the node's NVLink and only gradients cross the network.
    Gradients are summed over the ranks, not averaged: the methods scale their losses by the step's
    global counts, so a micro-batch's gradient is the same number at every world size."""
    policy = mixed_precision_policy(mixed_precision, master_weights)
    model.compute_dtype = policy.param_dtype or torch.float32
    if master_weights == "fp64":  # the trained weights only: a frozen LoRA base stays in its compute dtype
        for param in model.parameters():
            if param.requires_grad:
                param.data = param.data.to(torch.float64)
    shard = functools.partial(fully_shard, mesh=mesh, mp_policy=policy, shard_placement_fn=least_padding(mesh.shape[-1]))
    tied = model.lm_head.weight is model.get_input_embeddings().weight
    for lookup in embedding_lookups(model):  # the token embeddings; Gemma 4's per-layer embeddings too
        if not (tied and lookup is model.get_input_embeddings()):
            shard(lookup)
    if not tied:
        shard(model.lm_head)
    for layer in decoder_layers(model):
        shard(layer)
        _one_checkpointing_wrapper(type(layer))
    shard(model)
    for unit in model.modules():
        if isinstance(unit, FSDPModule):
            unit.set_gradient_divide_factor(1.0)
            unit.set_force_sum_reduction_for_comms(True)  # a plain sum on every backend (gloo has no premultiplied sum)
    reshard_after_forward(model)
    return model


def _one_checkpointing_wrapper(cls: type) -> None:
    """FSDP's subclass of a decoder layer (FSDP<Layer>) is wrapped again by transformers'
    GradientCheckpointingLayer, so its forward passes through `forward_with_checkpointing` twice,
    and a compiled layer guards on which of the two closures it is in: two graphs where one does.
    The subclass keeps its parent's wrapper, which checkpoints as the outermost one."""
    parent = next((c.forward for c in cls.__mro__[1:] if "forward" in vars(c)), None)
    if "forward" in vars(cls) and parent is not None and getattr(cls.forward, "__wrapped__", None) is parent:
        cls.forward = parent


def reshard_after_forward(model: CausalLM) -> None:
    """Training's layout: each FSDP unit frees its gathered parameters after its forward, except
    those backward needs right away: the head's and the last decoder layer's (backward starts with
    them) and the root's (never resharded between forward and backward). Also what a rollout, which
    keeps every unit gathered across its forwards, restores (training.rl.rollout)."""
    keep = {id(model), id(model.lm_head), id(decoder_layers(model)[-1])}
    for unit in model.modules():
        if isinstance(unit, FSDPModule):
            unit.set_reshard_after_forward(id(unit) not in keep, recurse=False)
