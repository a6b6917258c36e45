"""GRPO's advantages and losses as small named functions, on per-token tensors of shape
[completions, completion tokens] with a 0/1 `mask` of the completion's real tokens.

The formulas are verl's (trainer/ppo/core_algos.py): `compute_grpo_outcome_advantage`, the
"vanilla" clipped policy loss with dual clip, the `low_var_kl` estimator and `token-mean`
aggregation; the names below say which. Beside PPO's loss, Tinker's `importance_sampling` and
MiniMax's CISPO, the losses the vendor's agentic recipes choose from (`loss_fn`).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

ADVANTAGE_EPS = 1e-6  # verl's epsilon under the group's standard deviation
LOG_RATIO_CLAMP = 20.0  # verl clamps log-ratios before exp(): a stale token's ratio cannot overflow
KL_CLAMP = 10.0  # low_var_kl's per-token bound


def group_advantages(rewards: torch.Tensor, group_size: int, scale_rewards: bool = True) -> torch.Tensor:
    """Each completion's reward minus its group's mean, divided by the group's (unbiased) standard
    deviation unless `scale_rewards` is off (verl's norm_adv_by_std_in_grpo). `rewards` holds the
    groups one after another, `group_size` completions each. A group whose completions all scored
    the same has advantage 0: it carries no signal. A NaN reward (a judge's verdict that failed and
    is dropped) is left out of its group's mean and deviation, and its completion's advantage is 0."""
    grouped = rewards.reshape(-1, group_size)
    dropped = grouped.isnan()
    if dropped.any():
        return _advantages_without(grouped, dropped, scale_rewards).reshape(-1)
    centered = grouped - grouped.mean(dim=1, keepdim=True)
    if scale_rewards:
        centered = centered / (grouped.std(dim=1, keepdim=True) + ADVANTAGE_EPS)
    return centered.reshape(-1)


def _advantages_without(grouped: torch.Tensor, dropped: torch.Tensor, scale_rewards: bool) -> torch.Tensor:
    kept = (~dropped).to(grouped.dtype)
    count = kept.sum(dim=1, keepdim=True)
    values = grouped.nan_to_num(0.0)
    mean = values.sum(dim=1, keepdim=True) / count.clamp(min=1)
    centered = (values - mean) * kept
    if scale_rewards:  # unbiased over the kept; a group with one kept completion has no spread: advantage 0
        std = ((centered ** 2).sum(dim=1, keepdim=True) / (count - 1).clamp(min=1)).sqrt()
        centered = torch.where(count > 1, centered / (std + ADVANTAGE_EPS), torch.zeros_like(centered))
    return centered


def leave_one_out_advantages(rewards: torch.Tensor, group_size: int) -> torch.Tensor:
    """Each completion's reward minus the mean of the others in its group (RLOO: REINFORCE leave-one-out,
    Ahmadian et al., 2024; verl's `rloo`): k / (k - 1) times the reward minus the group's mean over its k
    kept completions. A dropped (NaN) reward, or a group with one kept completion, has advantage 0."""
    grouped = rewards.reshape(-1, group_size)
    kept = (~grouped.isnan()).to(grouped.dtype)
    count = kept.sum(dim=1, keepdim=True)
    values = grouped.nan_to_num(0.0)
    centered = (values - values.sum(dim=1, keepdim=True) / count.clamp(min=1)) * kept
    return torch.where(count > 1, centered * count / (count - 1).clamp(min=1), torch.zeros_like(centered)).reshape(-1)


# The advantage estimators `adv_estimator` chooses from, one signature: (rewards of the step's groups one
# after another, group size, GRPO's options) -> per-completion advantages. A new one is a function and a line.
AdvantageEstimator = Callable[[torch.Tensor, int, object], torch.Tensor]
ADVANTAGE_ESTIMATORS: dict[str, AdvantageEstimator] = {
    "grpo": lambda rewards, group_size, o: group_advantages(rewards, group_size, o.scale_rewards),
    "rloo": lambda rewards, group_size, o: leave_one_out_advantages(rewards, group_size),
}


def clipped_policy_loss(log_probs: torch.Tensor, old_log_probs: torch.Tensor, advantages: torch.Tensor,
                        clip_low: float, clip_high: float, clip_ratio_c: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token PPO loss with the ratio pi / pi_old clipped to [1 - clip_low, 1 + clip_high], and for
    negative advantages bounded by `clip_ratio_c` x |advantage| (dual clip). `advantages` is per
    completion. Returns (per-token loss, per-token 1.0 where the clip decided the loss)."""
    adv = advantages.unsqueeze(1)
    ratio = torch.exp((log_probs - old_log_probs).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP))
    unclipped = -adv * ratio
    clipped = -adv * ratio.clamp(1 - clip_low, 1 + clip_high)
    loss = torch.maximum(unclipped, clipped)
    dual = torch.minimum(loss, -adv * clip_ratio_c)
    loss = torch.where(adv < 0, dual, loss)
    return loss, (clipped > unclipped).to(log_probs.dtype)


def importance_sampling_loss(log_probs: torch.Tensor, old_log_probs: torch.Tensor,
                             advantages: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token REINFORCE with importance weights, unclipped (Tinker's `importance_sampling`):
    -(pi / pi_old) x advantage; its gradient is -ratio x advantage x grad log pi. Nothing is clipped
    (the second value is zeros)."""
    ratio = torch.exp((log_probs - old_log_probs).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP))
    return -advantages.unsqueeze(1) * ratio, torch.zeros_like(log_probs)


def cispo_loss(log_probs: torch.Tensor, old_log_probs: torch.Tensor, advantages: torch.Tensor,
               clip_low: float, clip_high: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token CISPO (MiniMax-M1, 2025): REINFORCE whose importance weight is clipped to
    [1 - clip_low, 1 + clip_high] and held constant, -sg(clip(ratio)) x advantage x log pi: unlike
    PPO's clip, no token's gradient is dropped, only weighed less. Returns (per-token loss, 1.0 where
    the weight was clipped)."""
    ratio = torch.exp((log_probs - old_log_probs).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)).detach()
    weight = ratio.clamp(1 - clip_low, 1 + clip_high)
    return -weight * advantages.unsqueeze(1) * log_probs, (weight != ratio).to(log_probs.dtype)


# The policy losses `loss_fn` chooses from, one signature: (per-token log-probabilities of the policy, of
# the rollout's policy, per-completion advantages, GRPO's options) -> (per-token loss, per-token 1.0
# where a clip decided the token's loss). A new loss is one function and one line here.
PolicyLoss = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, object], tuple[torch.Tensor, torch.Tensor]]
POLICY_LOSSES: dict[str, PolicyLoss] = {
    "ppo": lambda log_probs, old, advantages, o: clipped_policy_loss(log_probs, old, advantages, o.clip_ratio_low,
                                                                   o.clip_ratio_high, o.clip_ratio_c),
    "importance_sampling": lambda log_probs, old, advantages, o: importance_sampling_loss(log_probs, old, advantages),
    "cispo": lambda log_probs, old, advantages, o: cispo_loss(log_probs, old, advantages, o.clip_ratio_low,
                                                             o.clip_ratio_high),
}


def rollout_correction_weights(old_log_probs: torch.Tensor, rollout_log_probs: torch.Tensor, mask: torch.Tensor,
                               level: str, threshold: float) -> torch.Tensor:
    """verl's decoupled rollout importance weights, per token (constants: no gradient flows through
    them): the ratio of the trainer's rollout policy pi_old to the sampler's own probabilities
    (vLLM's numerics differ from the trainer's), per token (`token`) or as the product over each
    completion's tokens (`sequence`), truncated at `threshold`. A token the sampler gave no
    log-probability for (NaN) counts as ratio 1."""
    rollout = torch.where(torch.isnan(rollout_log_probs), old_log_probs, rollout_log_probs)
    log_ratio = ((old_log_probs - rollout) * mask).detach()
    if level == "sequence":
        log_ratio = log_ratio.sum(dim=1, keepdim=True).expand_as(log_ratio)
    return torch.exp(log_ratio.clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)).clamp(max=threshold)


def correction_metrics(sums: dict, tokens: float) -> dict:
    """The rollout correction's weights over the step's completion tokens: their mean, the share truncated
    at the threshold, and the effective sample size (Kish's, as a share of the tokens: 1 when every
    weight is equal, toward 0 as a few tokens carry the loss)."""
    return {"rollout_correction_weight": sums["correction"] / tokens,
            "rollout_correction_truncated": sums["truncated"] / tokens,
            "rollout_correction_ess": sums["correction"] ** 2 / max(tokens * sums["correction_sq"], 1e-30)}


def low_var_kl(log_probs: torch.Tensor, ref_log_probs: torch.Tensor) -> torch.Tensor:
    """Per-token KL(pi || pi_ref) estimate k3 = r - log r - 1 with r = pi_ref / pi (Schulman's
    unbiased, low-variance estimator), clamped as verl does."""
    log_ratio = (ref_log_probs - log_probs).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
    return (torch.exp(log_ratio) - log_ratio - 1).clamp(-KL_CLAMP, KL_CLAMP)


def token_sum(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """The sum over real completion tokens; divided by the update's completion tokens over every
    rank it is verl's `token-mean` over the whole batch, the same at every world size."""
    return (values * mask).sum()


def pass_at_k(n: int, c: int, k: int) -> float:
    """The unbiased estimate of pass@k from n completions of which c passed (Chen et al., 2021):
    1 - C(n - c, k) / C(n, k)."""
    return 1.0 if n - c < k else 1.0 - math.comb(n - c, k) / math.comb(n, k)
