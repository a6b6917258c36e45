"""Will it fit, measured without a GPU: the trainer's own step traced on fake tensors.

Under `FakeTensorMode` every tensor has a shape, a dtype and a storage size but no memory, and a
fake process group (`fake_pg.FakeStore`) of the job's world size makes FSDP2 shard and gather as it
would on the cluster. `trace_step` builds the model the trainer's way (`build_sharded_model`: LoRA,
the bf16 frozen base, activation checkpointing, the FSDP units and mixed-precision policy), runs the
method's own `forward_backward` (the chunked loss; DPO's chosen and rejected rows and its reference
forward) on the recipe's micro-batch at its full sequence length, clips and steps the optimizer as
the trainer does, and reports the peak of live tensor bytes on one rank.

`LiveMemory` counts the bytes of every live tensor storage (FSDP's `resize_` of its gathered
buffers included) under the category of the code that made it: the sharded weights and optimizer
state, FSDP's gathered parameters (all-gather) and gradients (autograd's unsharded gradients, the
reduce-scatter and the sharded result), activations saved in forward, and temporaries (recompute
and activation gradients in backward, the optimizer's working lists).

What it cannot see, and the allowance the launcher adds for it (elastic_launcher/planning/memory.py): the
CUDA context, NCCL's buffers and the caching allocator's fragmentation. Attention is traced with
the CPU's SDPA kernel, whose saved tensors (output and log-sum-exp, no T x T scores) are those of
the GPU's flash and flex kernels; Gated DeltaNet layers (Qwen 3.5) with a stand-in holding what the
image's chunked kernel (flash-linear-attention) holds, where transformers' torch fallback would
take minutes a layer on fake tensors and hold more than the GPU does.
"""

from __future__ import annotations

import functools
import time
import weakref
from collections import Counter
from contextlib import contextmanager
from dataclasses import dataclass, replace

import torch
import torch.distributed as dist
from torch.distributed.tensor import DTensor
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from training.contract.config import JobConfig

GIB = 2**30
CATEGORIES = ("sharded state", "optimizer", "gathered parameters", "gradients", "activations", "temporaries")


@dataclass(frozen=True)
class StepMemory:
    """One rank's peak during a training step, in GiB, split by what held the bytes."""

    peak_gib: float
    split_gib: dict[str, float]  # category -> GiB live at the peak
    phase: str  # where the peak fell, e.g. "backward model.layers.0"
    seconds: float  # how long the trace took


def _storages(t: torch.Tensor):
    from torch.distributed._tools.common_utils import get_untyped_storages

    return get_untyped_storages(t)


class LiveMemory(TorchDispatchMode):
    """Live tensor bytes by category, with the peak and the phase it fell in.

    A storage is counted once, from the op that created it to its release (a weak reference's
    callback), under `self.category` at its creation (or `tag`'s). DTensor ops are seen as the
    local ops they become; the global-shape fake tensors DTensor makes to propagate shapes are no
    memory and are not counted."""

    def __init__(self):
        super().__init__()
        self.live: Counter = Counter()
        self.category = "activations"
        self.phase = "forward"
        self.peak, self.peak_split, self.peak_phase = 0, {}, ""
        self._entries: dict[int, list] = {}  # storage id -> [category, bytes, weak reference]
        self._paused = 0

    def tag(self, tensor: torch.Tensor, category: str) -> None:
        """Count `tensor`'s storages under `category` (moving them there if already counted)."""
        for st in _storages(tensor):
            entry = self._entries.get(st._cdata)
            if entry is None:
                self._add(st, category)
            elif entry[0] != category:
                self.live[entry[0]] -= entry[1]
                self.live[category] += entry[1]
                entry[0] = category

    @contextmanager
    def counting_as(self, category: str):
        before, self.category = self.category, category
        try:
            yield
        finally:
            self.category = before

    def _add(self, st, category: str) -> None:
        key = st._cdata
        entry = [category, st.nbytes(), None]
        entry[2] = weakref.ref(st, functools.partial(self._release, key))
        self._entries[key] = entry
        self.live[category] += entry[1]
        self._check_peak()

    def _release(self, key, _ref) -> None:
        entry = self._entries.pop(key, None)
        if entry is not None:
            self.live[entry[0]] -= entry[1]

    def _resized(self, st) -> None:
        entry = self._entries.get(st._cdata)
        if entry is None:
            self._add(st, self.category)
        elif entry[1] != st.nbytes():
            self.live[entry[0]] += st.nbytes() - entry[1]
            entry[1] = st.nbytes()
            self._check_peak()

    def _check_peak(self) -> None:
        total = sum(self.live.values())
        if total > self.peak:
            self.peak, self.peak_split = total, {k: v for k, v in self.live.items() if v}
            self.peak_phase = self.phase

    def __enter__(self):
        from torch.distributed.tensor._sharding_prop import ShardingPropagator

        tracker, resize, propagate = self, torch.UntypedStorage.resize_, ShardingPropagator._propagate_tensor_meta_non_cached

        def counted_resize(st, size):  # FSDP frees and re-gathers parameters by resizing storages
            resize(st, size)
            tracker._resized(st)

        def uncounted_propagation(prop, schema):  # global-shape fake tensors: shape inference only
            tracker._paused += 1
            try:
                return propagate(prop, schema)
            finally:
                tracker._paused -= 1

        self._restore = lambda: (setattr(torch.UntypedStorage, "resize_", resize),
                                 setattr(ShardingPropagator, "_propagate_tensor_meta_non_cached", propagate))
        torch.UntypedStorage.resize_ = counted_resize
        ShardingPropagator._propagate_tensor_meta_non_cached = uncounted_propagation
        return super().__enter__()

    def __exit__(self, *exc):
        self._restore()
        return super().__exit__(*exc)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if any(t is DTensor for t in types):
            return NotImplemented  # let DTensor turn into local ops, which come back here
        if func is torch.ops._c10d_functional.wait_tensor.default:
            return args[0]  # the fake kernel returns a new tensor; on a device the wait returns its input
        out = func(*args, **(kwargs or {}))
        if not self._paused:
            for t in tree_leaves(out):
                if isinstance(t, torch.Tensor):
                    for st in _storages(t):
                        if st._cdata not in self._entries:
                            self._add(st, self.category)
        return out


@contextmanager
def _following_fsdp(mem: LiveMemory):
    """Name the phase and the FSDP unit at work, and count what FSDP makes by what it is: its
    all-gathers as gathered parameters, its gradient reduction as gradients; otherwise what forward
    makes is activations and what backward makes is temporaries."""
    from torch.distributed.fsdp._fully_shard._fsdp_param_group import FSDPParamGroup

    originals = {name: getattr(FSDPParamGroup, name)
                 for name in ("pre_forward", "pre_backward", "unshard", "wait_for_unshard", "post_backward")}

    def entering(name, phase, category):
        def method(group, *args, **kwargs):
            mem.phase, mem.category = f"{phase} {group._module_fqn or 'root'}", category
            return originals[name](group, *args, **kwargs)
        return method

    def counted(name, category):
        def method(group, *args, **kwargs):
            if name == "post_backward":  # autograd's unsharded gradients, about to be reduced
                for fsdp_param in group.fsdp_params:
                    if fsdp_param.unsharded_param.grad is not None:
                        mem.tag(fsdp_param.unsharded_param.grad, "gradients")
            with mem.counting_as(category):
                return originals[name](group, *args, **kwargs)
        return method

    FSDPParamGroup.pre_forward = entering("pre_forward", "forward", "activations")
    FSDPParamGroup.pre_backward = entering("pre_backward", "backward", "temporaries")
    FSDPParamGroup.unshard = counted("unshard", "gathered parameters")
    FSDPParamGroup.wait_for_unshard = counted("wait_for_unshard", "gathered parameters")
    FSDPParamGroup.post_backward = counted("post_backward", "gradients")
    try:
        yield
    finally:
        for name, original in originals.items():
            setattr(FSDPParamGroup, name, original)


def _rows(data_format: str, micro_batch: int, seq_len: int, vocab: int) -> list[dict]:
    """A micro-batch's rows at the full sequence length, every token a label: the step's worst case."""
    ids = [i % vocab for i in range(seq_len)]
    if data_format == "pairs":
        return [{"chosen_input_ids": ids, "chosen_labels": ids, "rejected_input_ids": ids, "rejected_labels": ids,
                 "sample_ids": [n]} for n in range(micro_batch)]
    return [{"input_ids": ids, "labels": ids, "sample_ids": [n], "lengths": [seq_len]} for n in range(micro_batch)]


def _kernel_attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
    """Attention holding what the GPU's flash and flex kernels hold (the output and its log-sum-exp,
    never T x T scores): the CPU's flash kernel. Masks, sliding windows and GPT-OSS's sinks change
    values, not memory."""
    out = torch.nn.functional.scaled_dot_product_attention(query, key, value, is_causal=True, scale=scaling,
                                                           enable_gqa=True)
    return out.transpose(1, 2).contiguous(), None


def _register_kernel_attention() -> str:
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface

    AttentionInterface.register("memory_trace", _kernel_attention)
    AttentionMaskInterface.register("memory_trace", lambda *args, **kwargs: None)  # causal in the kernel
    return "memory_trace"


class _ChunkedGatedDeltaRule(torch.autograd.Function):
    """The memory of flash-linear-attention's chunked gated delta rule (fla.ops.gated_delta_rule.chunk,
    the GPU's kernel for Qwen 3.5's linear attention), without its arithmetic. Forward builds the WY
    factors w and u, the per-chunk states h and the updated values (dropped when it returns), and keeps
    for backward the l2-normalised q and k with their inverse norms, v, the chunk-cumulated gates
    (fp32), beta and the chunk-local matrix A; backward rebuilds w, u, h and the values, adds the
    states' gradients (fp32), then the inputs' gradients. q and k have the key heads, v, g and beta
    the value heads (the kernel broadcasts; no repeated copies)."""

    @staticmethod
    def forward(ctx, q, k, v, g, beta, chunk: int):
        ctx.chunk, ctx.g_dtype = chunk, g.dtype
        working = _gated_delta_working(k, v, chunk)
        batch, tokens, heads = q.shape[:3]
        q_rstd, k_rstd = (q.new_empty(batch, tokens, heads, dtype=torch.float32) for _ in range(2))
        matrix = k.new_empty(*v.shape[:3], chunk)
        ctx.save_for_backward(torch.empty_like(q), q_rstd, torch.empty_like(k), k_rstd, v,
                              torch.empty_like(g, dtype=torch.float32), beta, matrix)
        out = torch.empty_like(v)
        del working
        return out

    @staticmethod
    def backward(ctx, grad_out):
        q, _, k, _, v, g, beta, _ = ctx.saved_tensors
        working = _gated_delta_working(k, v, ctx.chunk)
        state_grads = torch.empty_like(working[2], dtype=torch.float32)
        grads = (torch.empty_like(q), torch.empty_like(k), torch.empty_like(v),
                 torch.empty_like(g, dtype=ctx.g_dtype), torch.empty_like(beta), None)
        del working, state_grads
        return grads


def _gated_delta_working(k, v, chunk: int):
    batch, tokens, heads, value_dim = v.shape
    chunks = -(-tokens // chunk)
    return (k.new_empty(batch, tokens, heads, k.shape[-1]), torch.empty_like(v),
            k.new_empty(batch, chunks, heads, k.shape[-1], value_dim), torch.empty_like(v))


def _kernel_gated_delta_rule(query, key, value, g, beta, chunk_size=64, initial_state=None,
                             output_final_state=False, **kwargs):
    return _ChunkedGatedDeltaRule.apply(query, key, value, g, beta, chunk_size), None


@contextmanager
def _kernel_linear_attention(model):
    """Trace the model's Gated DeltaNet layers with the kernel's memory (`_ChunkedGatedDeltaRule`)."""
    import sys

    modules = {sys.modules[type(m).__module__] for m in model.modules()}
    patched = [m for m in modules if hasattr(m, "torch_chunk_gated_delta_rule")]
    originals = [m.torch_chunk_gated_delta_rule for m in patched]
    for m in patched:
        m.torch_chunk_gated_delta_rule = _kernel_gated_delta_rule
    try:
        yield
    finally:
        for m, original in zip(patched, originals):
            m.torch_chunk_gated_delta_rule = original


def _traceable(cfg: JobConfig, model_shape: dict | None) -> JobConfig:
    """The job's config with its model built from `model_shape` (no hub), the kernel-like attention
    and no compilation: the same parameters, activations and FSDP units, at no cost to trace."""
    mc = cfg.training_config.model_config
    architecture = dict(model_shape or mc.architecture or {})
    if not architecture:
        raise ValueError("the memory trace needs the model's shape: recipes.model_shape or an inline architecture")
    mc = replace(mc, architecture=architecture, model_name_or_path=None,
                 attn_implementation=_register_kernel_attention(), compile=False)
    return replace(cfg, training_config=replace(cfg.training_config, model_config=mc))


def trace_step(cfg: JobConfig, world_size: int, micro_batch: int, micro_steps: int = 1,
               model_shape: dict | None = None) -> StepMemory:
    """One rank's peak memory over a training step of `micro_steps` micro-batches (the second one
    starts with the first one's gradients held) at `world_size`. Needs no process group; starts and
    ends a fake one."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.distributed.device_mesh import init_device_mesh
    from torch.testing._internal.distributed.fake_pg import FakeStore

    from training.methods import load_method
    from training.model.causal_lm import sharded_skeleton
    from training.model.optimizer import build_optimizer

    started = time.perf_counter()
    cfg = _traceable(cfg, model_shape)
    mc, ds, ta = cfg.training_config.model_config, cfg.training_config.datasets, cfg.training_config.training_args
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=world_size)
    try:
        degree = min(world_size, mc.shard_degree(world_size, cfg.trainer.num_nodes))  # as the trainer's mesh
        mesh = (init_device_mesh("cpu", (world_size // degree, degree), mesh_dim_names=("replicate", "shard"))
                if degree < world_size else init_device_mesh("cpu", (world_size,)))
        device = torch.device("cpu")
        method = load_method(ta, device, micro_batch, ds.max_len)
        vocab = int(mc.architecture.get("vocab_size", 32000))
        if method.data_format == "prompts":  # GRPO: an update's micro-batches of completions
            micro = [method.traced_micro_batch(vocab) for _ in range(micro_steps)]
        else:
            micro = [method.collate(_rows(method.data_format, micro_batch, ds.max_len, vocab)) for _ in range(micro_steps)]
        model = sharded_skeleton(mc, mesh, on_gpu=False)  # built on meta: peft cannot build under fake tensors
        with FakeTensorMode(allow_non_fake_inputs=True):
            model.to_empty(device=device)  # this rank's own shards, as fake tensors
            optimizer = build_optimizer(model, ta)
            _initial_optimizer_state(optimizer)
            method.prepare(model, lambda: sharded_skeleton(mc, mesh, on_gpu=False).to_empty(device=device)
                           .requires_grad_(False).eval())
            mem = LiveMemory()
            with mem, _following_fsdp(mem), _kernel_linear_attention(model):
                for p in _held_parameters(model, method):
                    mem.tag(p, "sharded state")
                for state in optimizer.state.values():
                    for value in state.values():
                        if isinstance(value, torch.Tensor):
                            mem.tag(value, "optimizer")
                model.train()
                label_tokens = torch.tensor(float(sum(m["label_tokens"] for m in micro)) * world_size)
                method.forward_backward(model, micro, label_tokens, ta.train_batch_size)
                mem.phase, mem.category = "optimizer step", "temporaries"
                torch.nn.utils.clip_grad_norm_(model.parameters(), ta.max_grad_norm, foreach=True)
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)
    finally:
        dist.destroy_process_group()
    split = {k: round(mem.peak_split.get(k, 0) / GIB, 3) for k in CATEGORIES}
    return StepMemory(round(mem.peak / GIB, 3), split, mem.peak_phase, round(time.perf_counter() - started, 1))


def _held_parameters(model, method):
    yield from model.parameters()
    reference = getattr(method, "reference", None)  # DPO's frozen copy for full-parameter training
    if reference is not None:
        yield from reference.parameters()
    versions = getattr(method, "versions", None)  # GRPO's policies kept for a rollout running behind
    if versions is not None:
        yield from (t for version in versions.kept for t in version.values())


def _initial_optimizer_state(optimizer) -> None:
    """AdamW's moments exist after the first step: make them with one step on zero gradients."""
    params = [p for group in optimizer.param_groups for p in group["params"]]
    for p in params:
        p.grad = torch.zeros_like(p)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
