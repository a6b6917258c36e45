"""Llama 4's mixture of experts, computed only for the tokens each expert receives.

transformers' `Llama4TextMoe` feeds every token through every expert (the hidden states repeated
once per expert, masked by router scores that are zero for the experts not chosen): 16x the expert
FLOPs and activations of top-1 routing for Llama 4 Scout. `routed_forward` gives the same output and
gradients (an expert with no bias maps a zeroed input to zero) from the chosen experts alone, as
torchtitan does: tokens sorted by expert, one matmul per expert. On GPU in bf16 (and on the memory
trace's fake tensors) the experts run as one grouped matmul with no host sync; elsewhere as a loop.
"""

from __future__ import annotations

import types

import torch


def route(router_scores: torch.Tensor, router_logits: torch.Tensor, top_k: int):
    """(score, expert) of each token's chosen experts, flattened and sorted by expert, and each
    entry's token: the experts the router picked (its top-k logits) with the scores it gave them."""
    chosen = router_logits.topk(top_k, dim=1).indices  # the router's own choice (same call, same ties)
    scores = router_scores.gather(1, chosen).flatten()
    experts = chosen.flatten()
    order = experts.argsort(stable=True)
    return scores[order], experts[order], order // top_k


def _grouped(x: torch.Tensor) -> bool:
    from torch._subclasses.fake_tensor import FakeTensor

    return (x.is_cuda or isinstance(x, FakeTensor)) and x.dtype == torch.bfloat16


def expert_outputs(experts, x: torch.Tensor, expert_ids: torch.Tensor) -> torch.Tensor:
    """Each row of `x` (sorted by expert) through its expert's gated MLP."""
    counts = torch.zeros(experts.num_experts, dtype=torch.long, device=x.device).index_add_(
        0, expert_ids, torch.ones_like(expert_ids))
    if _grouped(x):
        offsets = counts.cumsum(0).to(torch.int32)
        gate, up = torch._grouped_mm(x, experts.gate_up_proj, offs=offsets).chunk(2, dim=-1)
        return torch._grouped_mm(up * experts.act_fn(gate), experts.down_proj, offs=offsets)
    return _looped(experts, x, counts)


@torch.compiler.disable  # eager inside a compiled layer: compiled, every new split of the rows would be a graph
def _looped(experts, x: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
    outputs = []
    for e, rows in enumerate(x.split(counts.tolist())):
        gate, up = (rows @ experts.gate_up_proj[e]).chunk(2, dim=-1)
        outputs.append((up * experts.act_fn(gate)) @ experts.down_proj[e])
    return torch.cat(outputs)


def routed_forward(self, hidden_states):
    """`Llama4TextMoe.forward` with the routed experts (same inputs, outputs and gradients)."""
    hidden_states = hidden_states.reshape(-1, self.hidden_dim)
    router_scores, router_logits = self.router(hidden_states)
    scores, expert_ids, tokens = route(router_scores, router_logits, self.top_k)
    routed = expert_outputs(self.experts, hidden_states[tokens] * scores.unsqueeze(1), expert_ids)
    out = self.shared_expert(hidden_states)
    return out.index_add(0, tokens, routed.to(out.dtype)), router_logits


def route_experts(model: torch.nn.Module) -> torch.nn.Module:
    """Give every Llama 4 MoE block of `model` the routed forward (parameters unchanged)."""
    for module in model.modules():
        if type(module).__name__ == "Llama4TextMoe":
            module.forward = types.MethodType(routed_forward, module)
    return model
