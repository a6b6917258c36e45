"""The LM head's token loss, never materializing the full (tokens x vocab) logits.

Two ways to the same sum of cross-entropies over the non-ignored tokens:
- chunked (`chunk_tokens` at a time, each chunk under activation checkpointing): one chunk's logits
  exist at once in forward and in backward, at the cost of recomputing each chunk's head matmul;
- fused (the GPU's default where the logits may be kept): forward computes each chunk's loss and its
  gradients at once, as liger-kernel's fused linear cross entropy does, and holds the head's
  gradient (fp32, vocab x hidden) and the hidden states' gradient until backward, which only scales
  them: no recompute. Unlike liger 0.6.4 it reads nothing back from the device (liger counts the
  label tokens with `.item()` in forward and compares the incoming gradient with 1.0 in backward:
  two host syncs per step), so the step never waits for the GPU.
"""

from __future__ import annotations

import torch

from training.batches import IGNORE_INDEX


class LossHead(torch.nn.Linear):
    """The LM head whose forward, given labels, is the token loss (`linear_cross_entropy`); without
    labels it is the plain linear layer. The loss runs through the head's own forward so that the
    head can be an FSDP unit of its own: FSDP gathers a unit's weight in its forward hooks."""

    loss_chunk_tokens = 0
    softcap: float | None = None  # Gemma's final_logit_softcapping: logits = cap x tanh(logits / cap)
    fused: bool | None = None  # None: on GPU

    @classmethod
    def replacing(cls, head: torch.nn.Linear, loss_chunk_tokens: int, softcap: float | None = None) -> "LossHead":
        with torch.device("meta"):
            loss_head = cls(head.in_features, head.out_features, bias=False)
        loss_head.weight = head.weight  # the same Parameter: a tied embedding stays tied
        loss_head.loss_chunk_tokens, loss_head.softcap = loss_chunk_tokens, softcap
        return loss_head

    def forward(self, hidden, labels=None, per_sequence: bool = False, per_token: bool = False):
        if labels is None:
            return capped(super().forward(hidden), self.softcap)
        if per_token:  # an ignored label's values are 0: the caller masks them
            return token_log_probs(hidden, self.weight, labels.clamp(min=0), self.softcap, self.loss_chunk_tokens)
        if per_sequence:
            return -torch.stack([linear_cross_entropy(hidden[i : i + 1], self.weight, labels[i : i + 1],
                                                      self.loss_chunk_tokens, keep_logits=False, softcap=self.softcap)
                                 for i in range(len(hidden))])
        return linear_cross_entropy(hidden, self.weight, labels, self.loss_chunk_tokens, fused=self.fused,
                                    softcap=self.softcap)


def capped(logits: torch.Tensor, softcap: float | None) -> torch.Tensor:
    return logits if not softcap else softcap * torch.tanh(logits / softcap)


def linear_cross_entropy(hidden, weight, labels, chunk_tokens: int, keep_logits: bool = True,
                         fused: bool | None = None, softcap: float | None = None) -> torch.Tensor:
    """sum_t CE(hidden[t] @ weight.T, labels[t]) over non-ignored tokens, `chunk_tokens` tokens at a
    time (0: all at once). `fused` (default: on GPU) where the logits may be kept computes the
    gradients in forward (`FusedLinearCrossEntropy`); otherwise each chunk runs under activation
    checkpointing, so only one chunk's logits exist at once (forward and backward). A single chunk
    keeps its logits for backward unless `keep_logits` is False (a caller that scores more rows
    before its backward, as DPO does row by row: it stays on the chunked path, where the fused one
    would hold the head's gradient once per row). `softcap` caps the logits first (Gemma)."""
    h, y = hidden.flatten(0, 1), labels.flatten()
    if (h.is_cuda if fused is None else fused) and chunk_tokens > 0 and keep_logits:
        return FusedLinearCrossEntropy.apply(h, weight, y, chunk_tokens, softcap)
    if chunk_tokens <= 0 or (h.shape[0] <= chunk_tokens and keep_logits):
        return _cross_entropy_sum(h, weight, y, softcap)
    from torch.utils.checkpoint import checkpoint

    return sum(checkpoint(_cross_entropy_sum, hc, weight, yc, softcap, use_reentrant=False)
               for hc, yc in zip(h.split(chunk_tokens), y.split(chunk_tokens)))


def _logits(hidden, weight, softcap):
    """The head's logits in (at least) fp32 for the softmax; the matmul in bf16 on GPU."""
    logits = hidden @ weight.t()
    return capped(logits.to(torch.promote_types(logits.dtype, torch.float32)), softcap)


def _cross_entropy_sum(hidden, weight, labels, softcap=None):
    return torch.nn.functional.cross_entropy(_logits(hidden, weight, softcap), labels, ignore_index=IGNORE_INDEX,
                                             reduction="sum")


def _chunk_loss_and_logit_grads(hidden, weight, labels, softcap=None):
    """One chunk's summed loss and d loss / d logits (softmax minus the one-hot target, zero on
    ignored tokens; through the cap's tanh where there is one), in the hidden states' dtype for the
    matmuls that follow. Few passes over the (tokens x vocab) logits, the step's largest tensor:
    log-softmax in fp32 straight from the matmul's output, its exponent in place, the mask written
    with the cast."""
    logits = hidden @ weight.t()
    exact = torch.promote_types(logits.dtype, torch.float32)
    if softcap:
        logits = capped(logits.to(exact), softcap)
    valid = labels != IGNORE_INDEX
    target = torch.where(valid, labels, 0).unsqueeze(1)
    log_probs = torch.log_softmax(logits, dim=1, dtype=exact)
    loss = -torch.where(valid, log_probs.gather(1, target).squeeze(1), 0).sum()
    grad = log_probs.exp_().scatter_add_(1, target, -torch.ones_like(target, dtype=exact))
    if softcap:  # d(cap x tanh(z / cap)) / dz = 1 - tanh^2 = 1 - (capped / cap)^2
        grad.mul_(1 - (logits / softcap) ** 2)
    return loss, torch.mul(grad, valid.unsqueeze(1), out=torch.empty_like(grad, dtype=hidden.dtype))


class FusedLinearCrossEntropy(torch.autograd.Function):
    """The summed token loss whose gradients are computed in forward, a chunk of tokens at a time;
    backward scales them by the incoming gradient (a device op: nothing is read on the host)."""

    @staticmethod
    def forward(ctx, hidden, weight, labels, chunk_tokens: int, softcap: float | None = None):
        grad_hidden = torch.empty_like(hidden) if hidden.requires_grad else None
        # Summed in fp32: in bf16 the later chunks' small contributions would be lost.
        accumulate = torch.promote_types(weight.dtype, torch.float32)
        grad_weight = torch.zeros(weight.shape, dtype=accumulate, device=weight.device) if weight.requires_grad else None
        loss = torch.zeros((), dtype=torch.promote_types(hidden.dtype, torch.float32), device=hidden.device)
        for start in range(0, hidden.shape[0], chunk_tokens):
            h, y = hidden[start : start + chunk_tokens], labels[start : start + chunk_tokens]
            chunk_loss, grad_logits = _chunk_loss_and_logit_grads(h, weight, y, softcap)
            loss += chunk_loss
            if grad_hidden is not None:
                grad_hidden[start : start + chunk_tokens] = grad_logits @ weight
            if grad_weight is not None:
                grad_weight.add_(grad_logits.t() @ h)  # into the fp32 sum from the bf16 product: no fp32 copy
        ctx.save_for_backward(grad_hidden, grad_weight)
        ctx.weight_dtype = weight.dtype
        return loss

    @staticmethod
    def backward(ctx, grad_loss):
        grad_hidden, grad_weight = ctx.saved_tensors
        return (None if grad_hidden is None else grad_hidden * grad_loss.to(grad_hidden.dtype),
                None if grad_weight is None else (grad_weight * grad_loss.to(grad_weight.dtype)).to(ctx.weight_dtype),
                None, None, None)


def token_log_probs(hidden: torch.Tensor, weight: torch.Tensor, tokens: torch.Tensor, softcap: float | None = None,
                    chunk_tokens: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """(log pi(token), entropy of pi) at each position: `hidden` [rows, positions, dim] are the
    states that predict `tokens` [rows, positions] through the LM head `weight`. The log-probabilities
    keep their gradient; the entropy (a metric) does not. `chunk_tokens` positions at a time under
    activation checkpointing, so that one chunk's logits exist at once."""
    h, y = hidden.flatten(0, 1), tokens.flatten()
    if not 0 < chunk_tokens < h.shape[0]:
        return _log_probs_and_entropy(hidden, weight, tokens, softcap)  # [rows, positions] as computed
    from torch.utils.checkpoint import checkpoint

    parts = [checkpoint(_log_probs_and_entropy, hc, weight, yc, softcap, use_reentrant=False)
             for hc, yc in zip(h.split(chunk_tokens), y.split(chunk_tokens))]
    log_probs, entropy = torch.cat([p[0] for p in parts]), torch.cat([p[1] for p in parts])
    # Not a view of the flat result: FSDP2 hooks the outputs of the modules it wraps for their
    # backward, which a view can defeat (it warns). A copy costs one float per token.
    return log_probs.view_as(tokens).clone(), entropy.view_as(tokens)


def _log_probs_and_entropy(hidden, weight, tokens, softcap):
    logits = _logits(hidden, weight, softcap)
    log_norm = torch.logsumexp(logits, dim=-1)
    log_probs = logits.gather(-1, tokens.unsqueeze(-1)).squeeze(-1) - log_norm
    with torch.no_grad():
        entropy = log_norm - (torch.softmax(logits, dim=-1) * logits).sum(dim=-1)
    return log_probs, entropy
