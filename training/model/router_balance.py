"""Load balancing for mixture-of-experts routers in full-parameter training.

transformers' MoE models define an auxiliary loss (Switch Transformer's: E * sum_i f_i * P_i, with f_i
the share of top-k assignments expert i received and P_i its mean router probability) and a
coefficient (`router_aux_loss_coef`), but add it only in their own causal-LM forward, over whatever
batch that forward saw; the trainer calls the base model, so without this module no router is ever
balanced and routers can collapse over a long run.

Over "the batch one forward saw" the loss would change with every resize: which samples share a
micro-batch depends on the world size. Here it is computed per sample (per packed document) with
the architecture's formula, over every MoE layer, and averaged over the step's samples: the same
number and gradient at every size and split (DeepSeek-V3's sequence-wise balance loss takes the
same view). Padding tokens take no part. Routers frozen (LoRA) or absent: nothing is computed.
"""

from __future__ import annotations

import torch


class RouterLogits:
    """Collects each MoE layer's router logits during a training forward (forward hooks on the
    router modules transformers names in `_can_record_outputs["router_logits"]`); nothing is kept
    outside `recording`, so activation checkpointing's recompute in backward adds nothing."""

    LOGITS = "_recorded_router_logits"  # where each router holds its forward's logits until `take`

    def __init__(self, model: torch.nn.Module):
        recorder = getattr(model, "_can_record_outputs", None) or {}
        spec = recorder.get("router_logits")
        self.routers = [m for m in model.modules() if spec is not None and isinstance(m, spec.target_class)]
        self.index = spec.index if spec is not None else 0
        self.recording = False
        for router in self.routers:
            router.register_forward_hook(self._record)

    def _record(self, module, args, output) -> None:
        # On the router, not appended to one list: the hook runs inside the compiled decoder layer,
        # where a list's length is a guard and every layer would compile a graph of its own.
        if self.recording:
            setattr(module, self.LOGITS, output[self.index])

    def trained(self) -> bool:
        return any(p.requires_grad for router in self.routers for p in router.parameters())

    def start(self) -> None:
        self.recording = True

    def take(self) -> list[torch.Tensor]:
        """The recorded logits, layer by layer, and recording ends."""
        self.recording = False
        return [vars(router).pop(self.LOGITS) for router in self.routers if self.LOGITS in vars(router)]


def document_balance_losses(router_logits: list[torch.Tensor], document_index: torch.Tensor, documents: int,
                            top_k: int) -> torch.Tensor:
    """The summed load-balancing loss of a micro-batch's `documents` samples, each over its own
    tokens in every MoE layer: E * sum_i f_i * P_i per document, as transformers'
    `load_balancing_loss_func` computes it for a batch. `document_index` ([rows, width]) gives each
    token's document, -1 for padding; the router logits are [rows * width, E] per layer."""
    experts = router_logits[0].shape[-1]
    dtype = torch.promote_types(router_logits[0].dtype, torch.float32)
    doc = document_index.flatten().to(router_logits[0].device)
    doc = torch.where(doc >= 0, doc, documents)  # padding into one more bucket, dropped below
    counts = torch.zeros((documents + 1) * experts, dtype=dtype, device=doc.device)
    probs = torch.zeros(documents + 1, experts, dtype=dtype, device=doc.device)
    tokens = torch.zeros(documents + 1, dtype=dtype, device=doc.device).index_add_(
        0, doc, torch.ones_like(doc, dtype=dtype)) * len(router_logits)
    for logits in router_logits:
        p = torch.softmax(logits.to(dtype), dim=-1)
        chosen = p.topk(top_k, dim=-1).indices  # no gradient through the choice, as upstream
        counts = counts.scatter_add(0, (doc.unsqueeze(1) * experts + chosen).flatten(),
                                    torch.ones(chosen.numel(), dtype=dtype, device=doc.device))
        probs = probs.index_add(0, doc, p)
    share = counts.view(documents + 1, experts)[:documents] / tokens[:documents, None]
    mean_prob = probs[:documents] / tokens[:documents, None]
    return experts * (share * mean_prob).sum()
