"""GRPO's parts, each against what it must equal: the advantages, the clipped loss and the KL
estimator against float64 references written from the formulas; the per-token log-probabilities
against a full softmax; sampling seeded by the completion alone; the rollout's KV cache against
full forwards; reward functions and each way they can fail."""

import collections
import dataclasses
import math
import os
import random
import subprocess
import sys
import time
from types import SimpleNamespace

import pytest
import torch

from conftest import ROOT, VENDOR_GRPO, VENDOR_GRPO_KEYS, tiny_architecture, tiny_causal_lm, wait_for
from elastic_launcher.local.run import child_pids
from training.contract.errors import ConfigError
from training.contract.methods import method_facts
from training.contract.rewards import RewardError, RewardOptions, check_rewards, metric_names
from training.model.loss import token_log_probs
from training.rl.algorithms import (cispo_loss, clipped_policy_loss, group_advantages, importance_sampling_loss,
                                     low_var_kl, rollout_correction_weights)
from training.rl.reward_pool import RewardPool
from training.rl.rollout import PromptGroup, ShardedModelRollout
from training.rl.sampling import SamplingParams, completion_seed, filtered_logits
from training.model.stored_layout import file_tensors
from training.rl.vllm_rollout import completions_from, sampling_requests


# --- advantages and losses, against the formulas -----------------------------------------------------

def test_group_advantages_are_the_groups_standardized_rewards():
    rng = random.Random(0)
    rewards = [rng.choice([0.0, 0.5, 1.0]) for _ in range(12)] + [1.0] * 4  # the last group: all the same
    got = group_advantages(torch.tensor(rewards, dtype=torch.float64), group_size=4)
    unscaled = group_advantages(torch.tensor(rewards, dtype=torch.float64), group_size=4, scale_rewards=False)
    for g in range(4):
        group = rewards[4 * g:4 * g + 4]
        mean = sum(group) / 4
        std = math.sqrt(sum((r - mean) ** 2 for r in group) / 3)  # unbiased, as torch.std and verl
        for i, r in enumerate(group):
            assert got[4 * g + i].item() == pytest.approx((r - mean) / (std + 1e-6), rel=1e-12, abs=1e-12)
            assert unscaled[4 * g + i].item() == pytest.approx(r - mean, abs=1e-15)
    assert got[12:].abs().max() == 0  # no signal in a group whose completions all scored the same


def test_rloo_advantages_are_each_reward_minus_the_mean_of_the_others_kept():
    """RLOO against its formula in float64, a dropped (NaN) reward left out of the others' mean, and a
    group with one kept reward carrying no signal; the config offers the registry's estimators, no other."""
    from training.contract.methods import method_facts
    from training.rl.algorithms import ADVANTAGE_ESTIMATORS

    rng = random.Random(1)
    rewards = [rng.random() for _ in range(8)] + [0.5, math.nan, 1.0, 0.0] + [math.nan, math.nan, 0.7, math.nan]
    options = method_facts("grpo").build_args({"adv_estimator": "rloo"})
    got = ADVANTAGE_ESTIMATORS[options.adv_estimator](torch.tensor(rewards, dtype=torch.float64), 4, options)
    for g in range(4):
        group = rewards[4 * g:4 * g + 4]
        kept = [r for r in group if not math.isnan(r)]
        for i, r in enumerate(group):
            others = [x for j, x in enumerate(group) if j != i and not math.isnan(x)]
            want = 0.0 if math.isnan(r) or not others else r - sum(others) / len(others)
            assert got[4 * g + i].item() == pytest.approx(want, rel=1e-12, abs=1e-15), (g, i, kept)
    assert got[12:].abs().max() == 0
    with pytest.raises(ConfigError, match=f"adv_estimator='gae' is not one of {', '.join(ADVANTAGE_ESTIMATORS)}:"):
        method_facts("grpo").build_args({"adv_estimator": "gae"})


def reference_policy_loss(logp, old, adv, low, high, c):
    ratio = math.exp(logp - old)
    unclipped, clipped = -adv * ratio, -adv * min(max(ratio, 1 - low), 1 + high)
    loss = max(unclipped, clipped)
    if adv < 0:
        loss = min(loss, -adv * c)
    return loss, float(clipped > unclipped)


def test_the_clipped_policy_loss_is_ppos_with_the_dual_clip():
    gen = torch.Generator().manual_seed(1)
    logp = -torch.rand(6, 5, generator=gen, dtype=torch.float64) * 3
    old = logp + (torch.rand(6, 5, generator=gen, dtype=torch.float64) - 0.5) * 3  # ratios far outside the clip too
    adv = torch.tensor([1.5, -2.0, 0.3, -0.1, 0.0, -4.0], dtype=torch.float64)
    loss, clipped = clipped_policy_loss(logp, old, adv, clip_low=0.2, clip_high=0.28, clip_ratio_c=3.0)
    for i in range(6):
        for t in range(5):
            want, want_clipped = reference_policy_loss(logp[i, t].item(), old[i, t].item(), adv[i].item(), 0.2, 0.28, 3.0)
            assert loss[i, t].item() == pytest.approx(want, rel=1e-12, abs=1e-15)
            assert clipped[i, t].item() == want_clipped
    assert 0 < clipped.mean() < 1 and (loss[5] <= 4.0 * 3.0).all()  # the dual clip bounds a negative advantage
    # One update per rollout: the ratio is 1 and the gradient is -advantage per token.
    logp.requires_grad_(True)
    clipped_policy_loss(logp, logp.detach(), adv, 0.2, 0.2, 3.0)[0].sum().backward()
    assert torch.equal(logp.grad, -adv.unsqueeze(1).expand(6, 5))


def loss_inputs(seed):
    gen = torch.Generator().manual_seed(seed)
    logp = -torch.rand(6, 5, generator=gen, dtype=torch.float64) * 3
    old = logp + (torch.rand(6, 5, generator=gen, dtype=torch.float64) - 0.5) * 3
    return logp.requires_grad_(True), old, torch.tensor([1.5, -2.0, 0.3, -0.1, 0.0, -4.0], dtype=torch.float64)


def test_the_importance_sampling_loss_is_reinforce_weighed_by_the_unclipped_ratio():
    """Tinker's importance_sampling: loss -(p/q) A per token, so its gradient is -(p/q) A per log p."""
    logp, old, adv = loss_inputs(3)
    loss, clipped = importance_sampling_loss(logp, old, adv)
    loss.sum().backward()
    for i in range(6):
        for t in range(5):
            ratio = math.exp(logp[i, t].item() - old[i, t].item())
            assert loss[i, t].item() == pytest.approx(-ratio * adv[i].item(), rel=1e-12, abs=1e-15)
            assert logp.grad[i, t].item() == pytest.approx(-ratio * adv[i].item(), rel=1e-12, abs=1e-15)
    assert not clipped.any()


def test_cispo_keeps_every_tokens_gradient_weighed_by_the_clipped_ratio():
    """MiniMax-M1's CISPO: loss -sg(clip(p/q, 1 - low, 1 + high)) A log p; the gradient of a token is
    -clip(ratio) A, never 0 (PPO's clip drops a clipped token's gradient)."""
    logp, old, adv = loss_inputs(4)
    loss, clipped = cispo_loss(logp, old, adv, clip_low=0.2, clip_high=0.28)
    loss.sum().backward()
    for i in range(6):
        for t in range(5):
            ratio = math.exp(logp[i, t].item() - old[i, t].item())
            weight = min(max(ratio, 0.8), 1.28)
            assert loss[i, t].item() == pytest.approx(-weight * adv[i].item() * logp[i, t].item(), rel=1e-12, abs=1e-15)
            assert logp.grad[i, t].item() == pytest.approx(-weight * adv[i].item(), rel=1e-12, abs=1e-15)
            assert clipped[i, t].item() == float(weight != ratio)
    assert 0 < clipped.mean() < 1
    ppo_logp = logp.detach().clone().requires_grad_(True)
    clipped_policy_loss(ppo_logp, old, adv, 0.2, 0.28, 3.0)[0].sum().backward()
    assert (ppo_logp.grad == 0).sum() > (logp.grad == 0).sum()  # tokens PPO's clip silences, CISPO does not


@pytest.mark.parametrize("loss_fn, fn", [("ppo", lambda l, o, a: clipped_policy_loss(l, o, a, 0.2, 0.28, 3.0)),
                                          ("importance_sampling", importance_sampling_loss),
                                          ("cispo", lambda l, o, a: cispo_loss(l, o, a, 0.2, 0.28))])
def test_loss_fn_chooses_the_policy_loss(loss_fn, fn):
    from training.contract.methods import method_facts
    from training.rl.algorithms import POLICY_LOSSES

    options = method_facts("grpo").build_args({"loss_fn": loss_fn, "clip_ratio_high": 0.28})
    logp, old, adv = loss_inputs(5)
    got = POLICY_LOSSES[options.loss_fn](logp, old, adv, options)
    assert all(torch.equal(a, b) for a, b in zip(got, fn(logp, old, adv)))
    # the config offers the registry's losses, no other
    with pytest.raises(ConfigError, match=f"loss_fn='grpo' is not one of {', '.join(POLICY_LOSSES)}:"):
        method_facts("grpo").build_args({"loss_fn": "grpo"})


def test_low_var_kl_is_the_k3_estimator_and_zero_at_the_reference():
    gen = torch.Generator().manual_seed(2)
    logp, ref = -torch.rand(3, 4, generator=gen, dtype=torch.float64), -torch.rand(3, 4, generator=gen, dtype=torch.float64)
    kl = low_var_kl(logp, ref)
    for (i, t), value in zip([(i, t) for i in range(3) for t in range(4)], kl.flatten().tolist()):
        r = math.exp(ref[i, t].item() - logp[i, t].item())
        assert value == pytest.approx(r - math.log(r) - 1, rel=1e-12, abs=1e-15)
    assert (kl >= 0).all() and low_var_kl(logp, logp).abs().max() == 0


def test_the_rollout_correction_weighs_by_pi_old_over_the_samplers_probability_truncated():
    """verl's decoupled rollout importance weights: per token exp(old - rollout), or per completion
    the product over its real tokens, at most the threshold; a token without the sampler's
    log-probability (NaN) counts as 1; no gradient flows through them."""
    old = torch.tensor([[-1.0, -2.0, -0.5, 0.0], [-1.0, -1.0, -3.0, -3.0]], dtype=torch.float64, requires_grad=True)
    rollout = torch.tensor([[-1.25, -1.5, float("nan"), -9.0], [-2.5, -1.0, -3.0, -3.0]], dtype=torch.float64)
    mask = torch.tensor([[1.0, 1.0, 1.0, 0.0], [1.0, 1.0, 1.0, 1.0]], dtype=torch.float64)  # row 0's last: padding
    token = rollout_correction_weights(old, rollout, mask, "token", threshold=3.0)
    assert token[0, :3].tolist() == pytest.approx([math.exp(0.25), math.exp(-0.5), 1.0], rel=1e-12)
    assert token[0, 3] == 1.0 and token[1].tolist() == pytest.approx([3.0, 1.0, 1.0, 1.0])  # exp(1.5) truncated
    sequence = rollout_correction_weights(old, rollout, mask, "sequence", threshold=3.0)
    assert sequence[0].tolist() == pytest.approx([math.exp(-0.25)] * 4, rel=1e-12) and (sequence[1] == 3.0).all()
    assert not token.requires_grad and not sequence.requires_grad


def test_the_corrections_effective_sample_size_is_kishs_share_of_the_tokens():
    """Equal weights: every token counts (1); one token carrying all the weight: one of n."""
    from training.rl.algorithms import correction_metrics

    def metrics(weights, threshold=2.0):
        w = torch.tensor(weights, dtype=torch.float64)
        return correction_metrics({"correction": w.sum().item(), "correction_sq": (w * w).sum().item(),
                                   "truncated": (w >= threshold).sum().item()}, len(weights))

    assert metrics([0.7] * 8) == {"rollout_correction_weight": pytest.approx(0.7), "rollout_correction_truncated": 0.0,
                                  "rollout_correction_ess": pytest.approx(1.0)}
    assert metrics([2.0, 0, 0, 0])["rollout_correction_ess"] == pytest.approx(0.25)
    assert metrics([2.0, 0, 0, 0])["rollout_correction_truncated"] == 0.25


@pytest.mark.parametrize("behind", [1, 3])
def test_a_rollout_behind_is_drawn_by_the_policy_after_step_t_minus_1_minus_s(behind):
    """Each step's update adds its step number to every weight, so a weight names the policy holding it.
    The rollout of step t sees the policy after step max(0, t-1-s); the update starts from the model's own
    policy; a checkpoint's state (after step t) holds the policies after steps t-s .. t-1, oldest first,
    and loaded into a fresh model's versions, the next steps draw as the uninterrupted run does."""
    from training.rl.policy_versions import PolicyVersions

    def policy_after(step):  # the weights' value after `step` updates: 1 + 2 + ... + step
        return step * (step + 1) / 2

    def run(model, versions, steps):
        drawn = {}
        for t in steps:
            with versions.in_the_model():
                drawn[t] = model.weight.flatten()[0].item()
            assert model.weight.flatten()[0].item() == policy_after(t - 1)  # the update's own policy
            versions.advance()
            with torch.no_grad():
                model.weight.add_(t)
        return drawn

    model = torch.nn.Linear(3, 2, bias=False)
    torch.nn.init.zeros_(model.weight)
    frozen = torch.nn.Linear(2, 2)
    frozen.requires_grad_(False)
    whole = torch.nn.Sequential(model, frozen)
    versions = PolicyVersions(whole, behind)
    assert [name for name, _ in versions.named] == ["0.weight"]  # the trainable parameters only (LoRA: adapters)
    drawn = run(model, versions, range(1, 9))
    assert drawn == {t: policy_after(max(0, t - 1 - behind)) for t in range(1, 9)}

    saved = {age: {k: v.clone() for k, v in version.items()} for age, version in versions.state_dict().items()}
    assert [v["0.weight"].flatten()[0].item() for v in saved.values()] == [policy_after(t) for t in range(8 - behind, 8)]
    resumed_model = torch.nn.Linear(3, 2, bias=False)
    with torch.no_grad():
        resumed_model.weight.copy_(model.weight)
    resumed = PolicyVersions(torch.nn.Sequential(resumed_model, frozen), behind)
    for age, version in resumed.state_dict().items():  # what a checkpoint load does: in place
        for name, tensor in version.items():
            tensor.copy_(saved[age][name])
    assert run(resumed_model, resumed, range(9, 12)) == {t: policy_after(t - 1 - behind) for t in range(9, 12)}


def test_token_log_probs_match_a_full_softmax_chunked_or_not():
    gen = torch.Generator().manual_seed(3)
    hidden = torch.randn(2, 7, 8, generator=gen, dtype=torch.float64, requires_grad=True)
    weight = torch.randn(11, 8, generator=gen, dtype=torch.float64)
    tokens = torch.randint(0, 11, (2, 7), generator=gen)
    full = torch.log_softmax(hidden @ weight.t(), dim=-1)
    want = full.gather(-1, tokens.unsqueeze(-1)).squeeze(-1)
    entropy = -(full.exp() * full).sum(-1)
    for chunk in (0, 3):
        logp, ent = token_log_probs(hidden, weight, tokens, chunk_tokens=chunk)
        torch.testing.assert_close(logp, want, rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(ent, entropy, rtol=1e-12, atol=1e-12)
        assert not ent.requires_grad
        (grad,) = torch.autograd.grad(logp.sum(), hidden)
        (want_grad,) = torch.autograd.grad(want.sum(), hidden, retain_graph=True)
        torch.testing.assert_close(grad, want_grad, rtol=1e-12, atol=1e-12)


# --- sampling --------------------------------------------------------------------------------------

def test_a_completions_seed_depends_on_its_own_coordinates_only():
    seeds = {completion_seed(42, s, g, step) for s in range(20) for g in range(8) for step in range(3)}
    assert len(seeds) == 20 * 8 * 3  # no two completions share a stream
    assert completion_seed(42, 7, 3, 2) == completion_seed(42, 7, 3, 2) != completion_seed(43, 7, 3, 2)


def test_top_k_and_top_p_keep_the_likeliest_tokens():
    logits = torch.log(torch.tensor([[0.5, 0.05, 0.3, 0.15]]))
    kept = lambda **p: torch.isfinite(filtered_logits(logits, SamplingParams(**p)))[0].tolist()  # noqa: E731
    assert kept(top_k=2) == [True, False, True, False]
    assert kept(top_p=0.8) == [True, False, True, False]  # 0.5 + 0.3 reaches 0.8
    assert kept(top_p=0.81) == [True, False, True, True]
    assert kept(top_p=0.1) == [True, False, False, False]  # the likeliest token always stays
    assert kept() == [True] * 4


# --- the rollout ------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def policy():
    return tiny_causal_lm("llama", seed=0).eval()


def test_a_groups_completions_do_not_depend_on_the_other_groups_or_their_order(policy):
    rollout = ShardedModelRollout(policy, torch.device("cpu"), seed=5)
    params = SamplingParams(temperature=1.0, max_new_tokens=12, stop_token_ids=(3,))
    a, b, c = PromptGroup(10, (5, 9, 14, 2)), PromptGroup(11, (7, 8)), PromptGroup(12, (21, 22, 23, 24, 25, 26))
    generate = lambda groups, step=3: list(rollout.generate(groups, n=4, params=params, step=step))  # noqa: E731
    together, alone, reordered = generate([a, b, c]), generate([b]), generate([c, a, b])
    assert together[1] == alone[0] and reordered == [together[2], together[0], together[1]]
    assert len({comp.token_ids for comp in together[0]}) > 1  # the group's completions differ from each other
    assert generate([b], step=4)[0] != alone[0]  # another step, other draws
    for comp in together[0]:  # a completion ends at its stop token or at max_new_tokens
        assert comp.stopped == (comp.token_ids[-1] == 3) and (comp.stopped or len(comp.token_ids) == 12)
        assert 3 not in comp.token_ids[:-1]


def test_greedy_decoding_with_the_kv_cache_matches_full_forwards(policy):
    prompt = (5, 9, 14, 2, 31)
    params = SamplingParams(temperature=0, max_new_tokens=8)
    (completions,) = ShardedModelRollout(policy, torch.device("cpu"), seed=0).generate([PromptGroup(0, prompt)], 2, params, 0)
    tokens = list(prompt)
    with torch.no_grad():
        for _ in range(8):  # no cache: the whole sequence each time
            ids = torch.tensor([tokens])
            logits, _ = policy(ids, torch.arange(len(tokens)).unsqueeze(0))
            tokens.append(int(logits.argmax()))
    assert completions[0].token_ids == completions[1].token_ids == tuple(tokens[len(prompt):])


def test_the_samplers_log_probabilities_sit_where_the_trainer_scores_its_tokens(policy):
    """With the rollout correction on, the sampler keeps each drawn token's log-probability; in an
    update's micro-batch they sit where the labels hold those tokens, and from the trainer's own
    sampler they equal the trainer's forward there (the correction's ratio is 1, up to float32
    rounding: the KV-cached decode sums in another order, ~1e-6 at these magnitudes)."""
    from training.contract.config import TrainingArgs
    from training.batches import IGNORE_INDEX, BatchShape
    from training.methods.grpo import GRPO, Args
    from training.rl.experience import Experience

    groups = [PromptGroup(0, (5, 9, 14)), PromptGroup(1, (7, 8, 21, 22, 23))]
    params = SamplingParams(max_new_tokens=6, log_probs=True)
    completions = list(ShardedModelRollout(policy, torch.device("cpu"), seed=1).generate(groups, 2, params, 0))
    assert all(len(c.log_probs) == len(c.token_ids) for group in completions for c in group)
    method = GRPO(TrainingArgs(train_batch_size=2, micro_train_batch_size=2),
                  Args(num_generations=2, max_prompt_length=5, max_new_tokens=6, mini_batches=1, kl_coef=0.0,
                       rollout_correction="sequence"), torch.device("cpu"))
    method.shape = BatchShape(4, 11, False)
    rows = [(p, i) for p in range(2) for i in range(2)]
    with torch.no_grad():
        batch = method._micro_batch(policy, Experience(groups, completions, [0.0] * 4, {}), torch.zeros(4), rows,
                                    old_log_probs=True)
    labelled = batch["labels"] != IGNORE_INDEX
    assert int(labelled.sum()) == sum(len(c.token_ids) for group in completions for c in group)
    assert (batch["rollout_log_probs"][~labelled] == 0).all()
    torch.testing.assert_close(batch["rollout_log_probs"][labelled], batch["old_log_probs"][labelled].float(),
                               rtol=0, atol=1e-4)
    method.close()


def test_a_sequence_correction_scales_each_completions_gradient_by_its_weight(policy, monkeypatch):
    """In an update whose policy is the rollout's (ratio 1), the corrected loss's gradient is the
    uncorrected one's with each completion's advantage times its weight exp(sum(old - rollout))."""
    from training.contract.config import TrainingArgs
    from training.batches import IGNORE_INDEX, BatchShape
    from training.methods.grpo import GRPO, Args
    from training.rl.experience import Experience

    monkeypatch.setattr(policy, "set_requires_all_reduce", lambda _: None, raising=False)  # no FSDP here
    groups = [PromptGroup(0, (5, 9, 14)), PromptGroup(1, (7, 8, 21))]
    params = SamplingParams(max_new_tokens=5, log_probs=True)
    completions = list(ShardedModelRollout(policy, torch.device("cpu"), seed=2).generate(groups, 2, params, 0))
    rows, advantages = [(p, i) for p in range(2) for i in range(2)], torch.tensor([1.0, -0.5, 0.25, -2.0])

    def gradient(correction: str, scale: torch.Tensor, shift: torch.Tensor | None = None) -> torch.Tensor:
        method = GRPO(TrainingArgs(train_batch_size=2, micro_train_batch_size=2),
                      Args(num_generations=2, max_prompt_length=3, max_new_tokens=5, mini_batches=1, kl_coef=0.0,
                           rollout_correction=correction, rollout_correction_threshold=10.0), torch.device("cpu"))
        method.shape = BatchShape(4, 8, False)
        with torch.no_grad():
            batch = method._micro_batch(policy, Experience(groups, completions, [0.0] * 4, {}), advantages * scale, rows,
                                        old_log_probs=True)
        labelled = (batch["labels"] != IGNORE_INDEX).float()
        if shift is not None:  # the sampler's log-probabilities: the trainer's minus shift / (completion tokens)
            batch["rollout_log_probs"] = batch["old_log_probs"] - labelled * (shift / labelled.sum(1)).unsqueeze(1)
        policy.zero_grad(set_to_none=True)
        method.forward_backward(policy, [batch], labelled.sum(), 2)
        method.close()
        return torch.cat([p.grad.flatten() for p in policy.parameters() if p.grad is not None])

    shift = torch.tensor([0.3, -0.2, 0.5, 1.0], dtype=torch.float64)
    corrected, reweighted = gradient("sequence", torch.ones(4), shift), gradient("none", torch.exp(shift))
    assert corrected.abs().max() > 0
    torch.testing.assert_close(corrected, reweighted, rtol=1e-4, atol=1e-6 * float(reweighted.abs().max()))
    policy.zero_grad(set_to_none=True)


def test_a_stop_ends_the_generation_between_two_tokens(policy):
    """The engine hands out each group as it is done and asks before every token whether to go on:
    a stop costs one forward, not the rest of the rollout."""
    params = SamplingParams(max_new_tokens=50)  # no stop token: every completion is 50 tokens long
    asked = []
    interrupted = lambda: asked.append(1) or len(asked) > 60  # noqa: E731 - after the first group's 50 tokens and 10 more
    groups = [PromptGroup(i, (5, 9, 14)) for i in range(3)]
    got = list(ShardedModelRollout(policy, torch.device("cpu"), seed=0).generate(groups, 2, params, 0, interrupted))
    assert len(got) == 1 and len(got[0][0].token_ids) == 50 and len(asked) == 61


# --- vLLM rollouts (training.rl.vllm_rollout): what runs without vLLM ------------------------------

def test_vllm_requests_are_one_per_completion_seeded_by_its_own_coordinates():
    params = SamplingParams(temperature=0.7, top_p=0.9, top_k=-1, max_new_tokens=16, stop_token_ids=(2, 9))
    groups = [PromptGroup(11, (5, 6)), PromptGroup(4, (7,))]
    requests = sampling_requests(groups, 3, params, step=5, seed=42)
    assert [ids for ids, _ in requests] == [[5, 6]] * 3 + [[7]] * 3
    seeds = [kw["seed"] for _, kw in requests]
    assert seeds == [completion_seed(42, s, i, 5) for s in (11, 4) for i in range(3)] and len(set(seeds)) == 6
    first = requests[0][1]
    assert (first["n"], first["temperature"], first["top_p"], first["top_k"], first["max_tokens"], first["stop_token_ids"]) == \
        (1, 0.7, 0.9, -1, 16, [2, 9])
    # the same completion, asked at another world size or in other company: the same request
    assert sampling_requests(groups[1:], 3, params, 5, 42) == requests[3:]
    # the sampled tokens' log-probabilities only where the rollout correction asks for them
    assert "logprobs" not in first
    assert sampling_requests(groups, 3, dataclasses.replace(params, log_probs=True), 5, 42)[0][1]["logprobs"] == 0


def test_vllm_outputs_become_the_trainers_completions_with_their_stop_token():
    out = lambda tokens, reason, stop=None, logprobs=None: SimpleNamespace(outputs=[SimpleNamespace(  # noqa: E731
        token_ids=tokens, finish_reason=reason, stop_reason=stop, logprobs=logprobs)])
    groups = [PromptGroup(3, (1,)), PromptGroup(8, (1,))]
    outputs = [out([5, 6, 2], "stop"), out([5, 7], "stop", 9), out([4, 4, 4], "length"), out([6, 2], "stop")]
    (a, b), (c, d) = completions_from(outputs, groups, 2, stop_token_ids=(2, 9))
    assert (a.sample_id, a.index, a.token_ids, a.stopped) == (3, 0, (5, 6, 2), True)
    assert (b.token_ids, b.stopped) == ((5, 7, 9), True)  # the stop token vLLM left out is the completion's end
    assert (c.sample_id, c.index, c.token_ids, c.stopped) == (8, 0, (4, 4, 4), False)  # cut at max_new_tokens
    assert d.token_ids == (6, 2) and d.stopped and d.log_probs == ()
    # with log-probabilities (the rollout correction): each sampled token's, NaN for a stop token vLLM left out
    step = lambda token, value: {token: SimpleNamespace(logprob=value), 0: SimpleNamespace(logprob=-9.0)}  # noqa: E731
    [(e, f)] = completions_from([out([5, 2], "stop", logprobs=[step(5, -0.5), step(2, -1.5)]),
                                 out([5, 7], "stop", 9, logprobs=[step(5, -0.25), step(7, -2.0)])], groups[:1], 2, (2, 9))
    assert e.log_probs == (-0.5, -1.5) and f.log_probs[:2] == (-0.25, -2.0) and math.isnan(f.log_probs[2])


def test_the_weights_streamed_to_vllm_are_the_model_files_names_and_values(process_group):
    """What the engine's load_weights reads is what the model's files hold: a transformers model
    built from the config takes the stream as its state dict (a tied LM head once, as the
    embedding) and then computes the trained model's logits."""
    from transformers import AutoModelForCausalLM

    model = tiny_causal_lm("llama", seed=3)
    hf = AutoModelForCausalLM.from_config(model.config)
    missing, unexpected = hf.load_state_dict(dict(file_tensors(model, merge_adapters=False)), strict=False)
    assert not unexpected and set(missing) <= ({"lm_head.weight"} if model.config.tie_word_embeddings else set())
    ids = torch.tensor([[5, 9, 14, 2, 31]])
    with torch.no_grad():
        ours, _ = model(ids, torch.arange(5).unsqueeze(0))
        theirs = hf(ids).logits[:, -1]
    torch.testing.assert_close(ours.reshape(theirs.shape), theirs, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("lora", [False, True])
def test_the_streams_expected_size_is_what_it_carries(process_group, lora):
    """The count every weight stream is checked against (a tensor left out of it fails the sync),
    counted without gathering: the stream's elements, with LoRA's adapters folded in (not carried)."""
    from transformers import AutoConfig, AutoModelForCausalLM

    from training.contract.config import PeftConfig
    from training.model.causal_lm import CausalLM
    from training.model.lora import apply_lora, merged_elements

    arch = tiny_architecture("llama")
    hf = AutoModelForCausalLM.from_config(AutoConfig.for_model(arch.pop("model_type"), vocab_size=97, **arch))
    model = CausalLM(apply_lora(hf, PeftConfig(r=4, lora_alpha=8)) if lora else hf, loss_chunk_tokens=0)
    assert merged_elements(model) == sum(t.numel() for _, t in file_tensors(model, merge_adapters=lora))


@pytest.mark.parametrize("chunk_tokens", [0, 7])
def test_the_sharded_models_log_probabilities_are_no_views_for_fsdp_to_warn_about(process_group, chunk_tokens):
    """GRPO's per-token forward through the FSDP2-sharded model: FSDP hooks the outputs of the modules
    it wraps for their backward and warns where one is a view (the hook may then fail or give wrong
    gradients); none is, chunked or not, and the gradient is the unchunked one."""
    import warnings

    from torch.distributed.device_mesh import init_device_mesh

    from training.contract.config import ModelConfig
    from training.model.causal_lm import build_sharded_model

    def gradient(chunk):
        cfg = ModelConfig(architecture={**tiny_architecture("llama"), "vocab_size": 97}, loss_chunk_tokens=chunk,
                          mixed_precision="fp32", activation_checkpointing="none", compile=False)
        model = build_sharded_model(cfg, seed=0, mesh=init_device_mesh("cpu", (1,)), on_gpu=False, resuming=False)
        ids = torch.tensor([[5, 9, 14, 2, 31, 8], [3, 1, 4, 1, 5, 9]])
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            log_probs, _ = model(ids, torch.arange(6).expand(2, -1), labels=ids.roll(-1, dims=1), per_token=True)
            log_probs.sum().backward()
        assert not [w for w in caught if "returned a view tensor" in str(w.message)], [str(w.message) for w in caught]
        return model.lm_head.weight.grad.full_tensor()

    torch.testing.assert_close(gradient(chunk_tokens), gradient(0))


def test_vllms_start_leaves_the_trainers_random_state_and_compile_caches_as_they_were(monkeypatch):
    """vLLM's in-process start reseeds the global generators and points the compile caches at its
    own directories: what the trainer had is back once it has started."""
    from training.rl.vllm_rollout import trainer_state_kept

    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", "/run/inductor_cache")
    monkeypatch.delenv("TRITON_CACHE_DIR", raising=False)
    torch.manual_seed(11)
    random.seed(11)
    expected = torch.rand(3), random.random()
    torch.manual_seed(11)
    random.seed(11)
    with trainer_state_kept():
        torch.manual_seed(0)
        random.seed(0)
        os.environ.update(TORCHINDUCTOR_CACHE_DIR="/root/.cache/vllm/inductor", TRITON_CACHE_DIR="/root/.cache/triton")
    assert torch.equal(torch.rand(3), expected[0]) and random.random() == expected[1]
    assert os.environ["TORCHINDUCTOR_CACHE_DIR"] == "/run/inductor_cache" and "TRITON_CACHE_DIR" not in os.environ


def test_vllms_caches_live_in_the_run_directory_unless_the_user_names_others(monkeypatch, tmp_path):
    """vLLM's cache (its model inspection) and inductor's (vLLM compiles its sampler's log-probability
    ops on every process's first draw) go to the run's directory, which a restart after a resize finds
    again; caches the user named stay theirs."""
    from training.rl import engines, vllm_rollout

    monkeypatch.setattr(vllm_rollout, "VLLMRollout", lambda *args, **kwargs: "engine")
    options = SimpleNamespace(rollout_tensor_parallel_size=1, rollout_gpu_memory_utilization=0.6,
                              rollout_max_num_seqs=8, max_prompt_length=8, max_new_tokens=8)

    def start_in(run_dir):
        return engines._vllm(torch.nn.Linear(2, 2), options, torch.device("cpu"), 0, "model", tmp_path / "files",
                             run_dir, torch.float32, standalone=False)

    monkeypatch.delenv("VLLM_CACHE_ROOT", raising=False)
    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR", raising=False)
    assert start_in(tmp_path / "run") == "engine"
    assert os.environ["VLLM_CACHE_ROOT"] == str(tmp_path / "run" / "vllm_cache")
    assert os.environ["TORCHINDUCTOR_CACHE_DIR"] == str(tmp_path / "run" / "inductor_cache")
    monkeypatch.setenv("VLLM_CACHE_ROOT", "/shared/vllm")
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", "/shared/inductor")
    start_in(tmp_path / "other")
    assert (os.environ["VLLM_CACHE_ROOT"], os.environ["TORCHINDUCTOR_CACHE_DIR"]) == ("/shared/vllm", "/shared/inductor")


def test_vllms_sleep_pool_sees_the_pods_allocator_settings_under_the_name_it_reads(monkeypatch):
    """The pods set PYTORCH_ALLOC_CONF; vLLM's sleep-mode pool reads PYTORCH_CUDA_ALLOC_CONF only, to
    turn expandable segments off around its allocations. One the user set is left alone."""
    from training.rl.vllm_rollout import allocator_settings_for_vllm

    monkeypatch.setenv("PYTORCH_ALLOC_CONF", "expandable_segments:True")
    monkeypatch.delenv("PYTORCH_CUDA_ALLOC_CONF", raising=False)
    allocator_settings_for_vllm()
    assert os.environ["PYTORCH_CUDA_ALLOC_CONF"] == "expandable_segments:True"
    monkeypatch.setenv("PYTORCH_CUDA_ALLOC_CONF", "max_split_size_mb:512")
    allocator_settings_for_vllm()
    assert os.environ["PYTORCH_CUDA_ALLOC_CONF"] == "max_split_size_mb:512"


def test_the_trainers_sampler_stops_on_the_generation_configs_eos_ids_as_vllm_does(tmp_path):
    """vLLM adds the generation config's EOS ids to a request's stop set: the trainer's sampler takes
    the same, from the model's generation_config.json where it has one, else from its config."""
    from transformers import GenerationConfig, LlamaConfig

    from training.rl.engines import generation_eos_ids

    config = LlamaConfig(eos_token_id=2)
    assert generation_eos_ids(config, None) == [2]
    GenerationConfig(eos_token_id=[2, 7, 9]).save_pretrained(tmp_path)
    assert generation_eos_ids(config, str(tmp_path)) == [2, 7, 9]
    assert generation_eos_ids(config, str(tmp_path / "no_generation_config")) == [2]


def test_the_dry_run_says_whether_a_recipes_completions_are_the_same_at_any_world_size():
    """By who samples: the trainer's sampler and vLLM's CPU build (locally) always, vLLM on GPUs only
    with its batch-invariant kernels."""
    from elastic_launcher.config.compose import compose, to_plain
    from elastic_launcher.planning.plan import make_plan
    from elastic_launcher.planning.rollouts import rollout_reproducibility

    def line(*overrides, recipe=None):
        plan = make_plan(to_plain(compose([*(recipe or GRPO_8B), *overrides])[0])["recipes"])
        return rollout_reproducibility(plan.base.training_config, plan.instance)

    assert line(recipe=["recipes=llama/tiny_llama_grpo"]).startswith("the trainer's own sampler: a completion is the "
                                                                      "same at any world size, bitwise")
    assert line(recipe=["recipes=llama/tiny_llama_vllm_grpo"]).startswith("vLLM's CPU build (action=local)")
    assert line(f"{METHOD_ARG}rollout_engine=vllm").startswith("vLLM without batch invariance: a completion depends on "
                                                               "the requests batched with it")
    assert line(f"{METHOD_ARG}rollout_engine=vllm", f"{METHOD_ARG}rollout_batch_invariant=true").startswith(
        "vLLM, batch invariant: a completion is the same at any world size")
    assert line(recipe=["recipes=llama/llama3_1_8b_sft"]) is None


def test_the_dry_run_says_what_a_rollout_behind_the_policy_trains_on_and_keeps(launch):
    """max_steps_off_policy: the schedule, the copies kept and the correction it defaults to, in one line."""
    code, out, err = launch("recipes=llama/tiny_llama_grpo", f"{METHOD_ARG}max_steps_off_policy=3")
    assert code == 0, err
    assert ("rollouts behind: step t trains on a batch drawn by the policy after step max(0, t-1-3) "
            "(max_steps_off_policy=3), on the training ranks; each rank keeps 3 older copies of its shard of the "
            "trainable weights, in memory and in every checkpoint, and the loss weighs each token by the correction "
            "(token, up to 2)") in out
    assert "rollouts behind" not in launch("recipes=llama/tiny_llama_grpo")[1]


def test_ranks_that_only_generate_split_each_node_and_a_split_that_cannot_run_is_one_line(launch, tmp_path):
    """rollout_ranks_per_node = k: of each node's processes k generate and the others train (torchrun
    starts those), said in the dry run; a split leaving no training rank, or one differing between sizes,
    is refused in one line naming the key (vLLM rollout processes, on a cluster, as vLLM anywhere: on
    GPUs); an LLM judge is asked by the rollout processes, and the dry run counts those."""
    code, out, err = launch("recipes=llama/tiny_llama_grpo_async")
    assert code == 0, err
    assert "2 nodes of ml.m5.2xlarge, 2 processes per node (1 training, 1 generating)" in out
    assert "by 1 rollout process per node beside the training ranks, 2 steps ahead of the updates" in out
    manifest = (tmp_path / "out" / "tiny-llama-grpo-async" / "manifest.yaml").read_text()
    assert "--nproc-per-node=1" in manifest  # the training processes; the rollout processes are their children
    key = "training_config.training_args.method_args.rollout_ranks_per_node"
    for overrides, said in [
            (["recipes.trainer.nproc_per_node=1"],
             f"{key}=1 leaves none of a node's 1 process to train: set it below 1, or raise trainer.nproc_per_node"),
            ([f"+recipes.scale_config.n2.{key}=0", "recipes.elastic_policy.is_elastic=true"],
             f"{key} leaves another count of training processes per node at each size (1 node: 1, 2 nodes: 2, "
             f"3 nodes: 1): torchrun starts one count at every size; set it in the recipe, not per scale_config entry"),
            ([f"{METHOD_ARG}rollout_engine=vllm"], "rollout_engine=vllm needs GPUs, and ml.m5.2xlarge has none"),
            ([f"{METHOD_ARG}rollout_engine=vllm", f"{METHOD_ARG}rollout_tensor_parallel_size=2"],
             "rollout_tensor_parallel_size=2 with rollout_ranks_per_node: each rollout process's engine runs on its "
             "own GPU; set it to 1")]:
        code, out, err = launch("recipes=llama/tiny_llama_grpo_async", *overrides)
        assert code != 0 and err.count("\n") == 1 and said in err, (overrides, err)
    # The judge is asked by the rollout processes (2 nodes x 1), not the training ranks (2 x 2)
    code, out, err = launch("recipes=llama/tiny_llama_grpo_async", "recipes.trainer.nproc_per_node=3",
                            f"{METHOD_ARG[1:]}rewards=[judge]", f"{METHOD_ARG}judge.model_id=openai/j",
                            f"{METHOD_ARG}judge.base_url=http://j:8000/v1", f"{METHOD_ARG}judge.prompt_template=rubric",
                            f"{METHOD_ARG}judge.max_workers=1")
    assert code == 0, err
    assert "3 processes per node (2 training, 1 generating)" in out
    assert "judge.max_workers=1 is below the 2 ranks of the largest size" in out


def _take_policies(address, announcements, results, go, steps):
    """A rollout process's end of the policy channel: its main thread busy until `go` (the sender must
    not wait for it), then each policy asked for in step order."""
    from training.rl.policy_channel import PolicyReceiver

    receiver = PolicyReceiver(address, 1, torch.device("cpu"), announcements)
    go.wait()
    with receiver.arrived:  # its thread took each policy as it came
        receiver.arrived.wait_for(lambda: len(receiver.policies) == 3, timeout=60)
    for step in steps:
        got = {name: (t.dtype, t.tolist()) for name, t in receiver.policy(step).items()}
        results.put((step, got, sorted(receiver.policies)))


def test_new_policies_reach_a_rollout_process_over_its_channel_exactly_and_in_order_without_the_sender_waiting():
    """The node's first training rank sends each new policy over a process group of its own with its
    rollout processes (gloo on CPU; NCCL on GPUs): sends return while the rollout process is busy
    (broadcasts queued, their tensors the sender's own copies), the rollout process gets every tensor
    bit for bit in every dtype, and drops the older policies once it draws with a newer one. A rollout
    process that dies before the group forms is named, not waited for."""
    from training.rl.policy_channel import PolicySender

    context = torch.multiprocessing.get_context("spawn")
    sender = PolicySender(1, on_gpu=False)
    announcements, results, go = context.Queue(), context.Queue(), context.Event()
    process = context.Process(target=_take_policies, args=(sender.address, announcements, results, go, [0, 2]))
    process.start()
    try:
        sender.wait_formed(lambda: None)
        generator = torch.Generator().manual_seed(0)
        sent = {step: {"w": torch.randn(3, 5, generator=generator),
                       "lora_B": torch.randn(7, generator=generator).to(torch.bfloat16)} for step in range(3)}
        for step, weights in sent.items():
            announcements.put((step, sender.send(weights)))
        go.set()  # the sends returned while the rollout process was busy
        for step, held in [(0, [0, 1, 2]), (2, [2])]:  # every policy taken as it came; the older dropped on use
            got_step, got, kept = results.get(timeout=60)
            assert (got_step, kept) == (step, held)
            assert got == {n: (t.dtype, t.tolist()) for n, t in sent[step].items()}
        process.join(timeout=30)
    finally:
        process.kill()
        sender.close()

    stillborn = PolicySender(1, on_gpu=False)
    dead = context.Process(target=os._exit, args=(3,))
    dead.start()
    dead.join()

    def alive():
        if not dead.is_alive():
            raise RuntimeError(f"a rollout process exited with code {dead.exitcode}")

    with pytest.raises(RuntimeError, match="exited with code 3"):
        stillborn.wait_formed(alive)


def test_training_ranks_beside_rollout_processes_start_no_vllm_engine():
    """rollout_engine=vllm with rollout_ranks_per_node: the rollout processes hold the engines; a training
    process samples (its evaluations) with the trainer's own sampler and never starts vLLM (this
    environment has none, which an engine of its own would refuse); without rollout processes it would."""
    from training.methods.grpo import Args
    from training.rl.engines import rollout_engine

    beside = Args(rollout_engine="vllm", rollout_ranks_per_node=1)
    assert isinstance(rollout_engine(None, None, beside, torch.device("cpu"), 0), ShardedModelRollout)
    with pytest.raises(ConfigError, match="rollout_engine=vllm on cpu needs vLLM's cpu build"):
        rollout_engine(None, SimpleNamespace(), Args(rollout_engine="vllm"), torch.device("cpu"), 0)


def test_a_run_that_cannot_learn_is_told_so_once_per_cause_naming_the_key():
    """Flat groups (no advantage), completions cut at max_new_tokens, a runaway KL and a collapsing effective
    sample size, each once it has held for three steps in a row, each once, each naming what to change."""
    from training.rl.learning_signals import SignalWatch

    watch = SignalWatch()
    fine = {"flat_groups": 0.2, "cut_fraction": 0.1, "kl": 0.01}
    assert [watch({**fine, "flat_groups": 1.0}) for _ in range(2)] == [[], []]
    assert watch(fine) == []  # not three in a row
    said = [watch({**fine, "flat_groups": 0.95, "cut_fraction": 1.0}) for _ in range(4)]
    assert said[:2] == [[], []] and said[3] == [] and len(said[2]) == 2
    assert said[2][0].startswith("no learning signal: 95% of the groups scored all their completions alike") and \
        "training_config.training_args.method_args.num_generations" in said[2][0]
    assert "100% of the completions were cut at max_new_tokens" in said[2][1] and \
        "training_config.training_args.method_args.max_new_tokens" in said[2][1]
    assert [watch({**fine, "kl": 0.9}) for _ in range(3)][2] == [
        "the policy's KL to the reference is 0.90 per token for 3 steps: it is drifting far from where it started (a "
        "reward being gamed?); raise training_config.training_args.method_args.kl_coef or lower "
        "training_config.training_args.learning_rate"]
    # A rollout running behind whose correction weights sit on a few tokens.
    behind = [watch({**fine, "policy_lag": 3.0, "rollout_correction_ess": 0.3}) for _ in range(3)]
    assert behind[2] == [
        "the rollout correction's effective sample size is 30% of the tokens for 3 steps: the policy has moved far from "
        "the one that drew its batches (3 steps behind), and a few tokens carry the loss; lower "
        "training_config.training_args.method_args.max_steps_off_policy or training_config.training_args.learning_rate"]
    assert len(watch.said) == 4



def test_a_failing_judge_is_said_each_step_it_fails_and_stops_the_run_once_it_is_dead():
    """A step where more than half the verdicts failed: one warning naming the judge, the kinds with
    counts and one failure; flat groups are blamed on the judge, not the reward's shape; every verdict
    failed for max_failed_steps steps in a row: the run must stop (a success in between resets it)."""
    from training.rl.learning_signals import FailureWatch, SignalWatch, judge_service

    watch, signals = FailureWatch(judge_service("openai/j at http://judge:8000/v1"), max_failed_steps=3), SignalWatch()
    ok = {"flat_groups": 0.2, "judge_calls": 32, "judge_cached": 0, "judge_failed_connection": 0}
    dead = {**ok, "flat_groups": 1.0, "judge_failed_connection": 32}
    assert watch({**ok, "step": 1, "judge_failed_timeout": 16}, "timeout: slow") == []  # half: flaky, not said
    assert watch({**dead, "step": 2}, "connection: Connection error.") == [
        "the judge openai/j at http://judge:8000/v1: 32 of 32 verdicts failed at step 2 (32 connection); one of them: "
        "connection: Connection error."]
    assert watch({**dead, "step": 3}, None) and watch.dead() is None
    assert watch({**ok, "step": 4}, None) == [] and watch.dead() is None  # the judge came back
    for step in (5, 6, 7):
        watch({**dead, "step": step}, None)
    assert watch.dead() == (
        "the judge openai/j at http://judge:8000/v1 failed every verdict for 3 steps in a row "
        "(training_config.training_args.method_args.judge.max_failed_steps=3): nothing judges the completions; fix "
        "the judge and restart, the run resumes from this step")
    said = [signals({**dead, "cut_fraction": 0, "kl": 0}) for _ in range(3)][2]
    assert said == ["no learning signal: 100% of the groups scored all their completions alike for 3 steps: the "
                    "judge's verdicts failed (32 connection of 32 calls), not the reward's shape: fix the judge (the "
                    "warnings above name it)"]


def test_an_environment_whose_tools_fail_is_said_and_stops_the_run_once_every_call_fails():
    """An agent's tools that raise or time out are the environment's failures (a call the model got
    wrong is not): said each step where more than half failed, with one of them; every call failed for
    tool_max_failed_steps steps in a row: the run must stop."""
    from training.rl.learning_signals import FailureWatch, SignalWatch, environment_service

    watch, signals = FailureWatch(environment_service("envs.py:Sandbox"), max_failed_steps=2), SignalWatch()
    model_erred = {"tool_calls": 16, "tool_errors": 16, "tool_raised": 0, "tool_timeouts": 0}
    assert watch({**model_erred, "step": 1}, None) == [] and watch.dead_steps == 0
    down = {"tool_calls": 20, "tool_errors": 16, "tool_raised": 12, "tool_timeouts": 4}  # 4 calls the model got wrong
    assert watch({**down, "step": 2}, "run: Error: ConnectionRefusedError: [Errno 111]") == [
        "the environment envs.py:Sandbox: 16 of 16 tool calls failed at step 2 (12 raised, 4 timeout); one of them: "
        "run: Error: ConnectionRefusedError: [Errno 111]"]
    assert watch.dead() is None
    watch({**down, "step": 3}, None)
    assert watch.dead() == (
        "the environment envs.py:Sandbox failed every tool call for 2 steps in a row (training_config.training_args."
        "method_args.tool_max_failed_steps=2): the model learns from error replies; fix the environment and restart, "
        "the run resumes from this step")
    assert watch({"tool_calls": 0, "step": 4}, None) == [] and watch.dead() is None  # no calls: nothing to say
    said = [signals({**down, "flat_groups": 1.0}) for _ in range(3)][2]
    assert said == ["no learning signal: 100% of the groups scored all their completions alike for 3 steps: the "
                    "environment's tools failed (12 raised, 4 timeout of 16 calls), not the reward's shape: fix the "
                    "environment (the warnings above name it)"]


# --- memory: the rollout's phase and the updates' -----------------------------------------------------

GRPO_8B = ["recipes=llama/llama3_1_8b_sft", "recipes.training_config.training_args.trainer_type=grpo",
           "recipes.training_config.datasets.packing=false"]
METHOD_ARG = "+recipes.training_config.training_args.method_args."


def grpo_memory(*overrides):
    from elastic_launcher.config.compose import compose, to_plain
    from elastic_launcher.planning.plan import make_plan

    plan = make_plan(to_plain(compose([*GRPO_8B, *overrides])[0])["recipes"])
    return plan.sizes[0].memory, plan.instance.gpu_memory_gib


def test_grpos_memory_has_a_rollout_phase_and_updates_shaped_by_its_completions():
    from elastic_launcher.planning.memory import CUDA_CONTEXT_GIB, VLLM_ASLEEP_GIB

    own, gpu = grpo_memory()
    vllm, _ = grpo_memory(f"{METHOD_ARG}rollout_engine=vllm")
    # The trainer's sampler: the sharded state plus the whole model gathered and one group's KV cache.
    assert own.state_gib + 15 < own.rollout_gib < own.state_gib + 17 + CUDA_CONTEXT_GIB  # 8B in bf16: 15 GiB
    # vLLM: its share of the GPU awake beside the sharded state; asleep beside the updates.
    assert vllm.rollout_gib == pytest.approx(vllm.state_gib + 0.6 * gpu + CUDA_CONTEXT_GIB)
    assert vllm.total_gib == pytest.approx(own.total_gib + VLLM_ASLEEP_GIB)
    assert vllm.peak_gib == max(vllm.rollout_gib, vllm.total_gib)
    # An update's rows are each prompt's completions, prompt + completion long; micro_completions
    # cuts a micro-batch (here 4 prompts' 8 completions) to that many rows.
    assert grpo_memory(f"{METHOD_ARG}num_generations=16")[0].total_gib > own.total_gib + 5
    assert grpo_memory(f"{METHOD_ARG}micro_completions=2")[0].total_gib < own.total_gib - 5


def test_a_size_where_grpos_rollout_would_not_fit_is_refused_naming_the_key():
    with pytest.raises(ConfigError) as e:
        grpo_memory(f"{METHOD_ARG}rollout_engine=vllm", f"{METHOD_ARG}rollout_gpu_memory_utilization=0.85")
    assert "GRPO's rollouts need ~" in str(e.value) and "lower training_config.training_args.method_args." \
        "rollout_gpu_memory_utilization" in str(e.value) and "\n" not in str(e.value)
    # A share too small for the model's weights: Llama 3.1 8B's 15 GiB in bf16 on one GPU.
    with pytest.raises(ConfigError) as e:
        grpo_memory(f"{METHOD_ARG}rollout_engine=vllm", f"{METHOD_ARG}rollout_gpu_memory_utilization=0.15")
    assert str(e.value) == ("training_config.training_args.method_args.rollout_gpu_memory_utilization=0.15 gives vLLM "
                            "12 GiB of each GPU, not enough for the model's bf16 weights over "
                            "rollout_tensor_parallel_size=1 GPUs (15 GiB) and a KV cache: raise either")


# --- rewards ------------------------------------------------------------------------------------------

GSM8K = {"answer": ["Natalia sold 48/2 = 24 clips in May.\n#### 72", "#### 1,000"]}


@pytest.fixture
def pool():
    pools = []

    def make(specs, weights=None, timeout=30.0, **options):
        pools.append(RewardPool(specs, weights, RewardOptions(**options), timeout))
        return pools[-1]

    yield make
    for p in pools:
        p.close(kill=True)


def test_built_in_rewards_read_gsm8k_answers_and_chat_completions(pool):
    rewards = pool(["math_verify", "exact_match", "format"], weights=[1.0, 0.5, 0.25])
    completions = ["<think>48 + 24</think> The answer is $\\boxed{72}$.", "1000"]
    totals, each = rewards.score(["q1", "q2"], completions, GSM8K, [0, 1])
    assert each == {"math_verify": [1.0, 1.0], "exact_match": [0.0, 1.0], "format": [1.0, 0.0]}
    assert totals == [1.25, 1.5]
    chat = [[{"role": "assistant", "content": "it is 71"}], [{"role": "assistant", "content": "1000"}]]
    assert pool(["math_verify"]).score([[], []], chat, GSM8K, [0, 1])[0] == [0.0, 1.0]


USER_REWARDS = '''
import math, time

def by_length(prompts, completions, target, **kwargs):
    return [-abs(len(c) - t) for c, t in zip(completions, target)]

def needs_level(prompts, completions, level):
    return [float(level[0])] * len(completions)

def raises_on_b(prompts, completions, **kwargs):
    return [1.0 if c != "b" else 1 / 0 for c in completions]

def too_few(prompts, completions, **kwargs):
    return [1.0]

def a_nan(prompts, completions, **kwargs):
    return [1.0, math.nan] + [1.0] * (len(completions) - 2)

def a_none(prompts, completions, **kwargs):
    return [None] * len(completions)

def not_for_b(prompts, completions, **kwargs):
    return [None if c == "b" else 0.5 for c in completions]

def only_completions(completions):
    return [float(len(c)) for c in completions]

def trl_style(completions, completion_ids, trainer_state, **kwargs):
    return [len(ids) + trainer_state.global_step + trainer_state.epoch for ids in completion_ids]

def sleeps(prompts, completions, **kwargs):
    time.sleep(60)
    return [0.0] * len(completions)

def no_completions(prompts):
    return []
'''


@pytest.fixture
def user_file(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "my_rewards.py").write_text(USER_REWARDS)
    return "my_rewards.py"


def test_a_users_reward_gets_the_columns_it_names(pool, user_file):
    columns = {"target": [1, 3], "other": ["x", "y"]}
    check_rewards([f"{user_file}:by_length"], None, set(columns))
    assert pool([f"{user_file}:by_length"]).score(["p", "q"], ["a", "a"], columns, [4, 5])[1] == \
        {f"{user_file}:by_length": [0.0, -2.0]}


@pytest.mark.parametrize("spec, columns, message", [
    ("nowhere.py:fn", set(), "the file nowhere.py of 'nowhere.py:fn' does not exist"),
    ("my_rewards.py:missing", set(), "my_rewards.py has no function 'missing'"),
    ("no_such_package.rewards:fn", set(), "cannot import the module no_such_package.rewards"),
    ("my_rewards.py:needs_level", {"target"}, "needs the parameter 'level', which is no column of the data"),
    ("my_rewards.py:no_completions", set(), "has no parameter 'completions'"),
    ("exact-match", set(), "is neither a built-in reward"),
])
def test_a_reward_that_cannot_be_called_is_one_line_at_the_dry_run(user_file, spec, columns, message):
    with pytest.raises(ConfigError, match=message) as e:
        check_rewards([spec], None, columns)
    assert "\n" not in str(e.value)


def test_a_file_loaded_by_many_threads_at_once_is_run_once_and_found_whole(tmp_path):
    """An agent's reward process starts several groups' environments at once, each on a thread: every
    thread gets the file's class, none a module still being run."""
    import threading

    from training.contract.rewards import load_reward

    (tmp_path / "slow_env.py").write_text("import time\ntime.sleep(0.5)\nRUNS = []\nRUNS.append(1)\n\n\n"
                                          "class Env:\n    pass\n")
    start, found, errors = threading.Barrier(8), [], []

    def load():
        start.wait()
        try:
            found.append(load_reward(f"{tmp_path / 'slow_env.py'}:Env"))
        except Exception as e:  # noqa: BLE001 - what a thread got instead of the class
            errors.append(str(e))

    threads = [threading.Thread(target=load) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == [] and len(found) == 8 and len(set(found)) == 1
    assert sys.modules[found[0].__module__].RUNS == [1]


def test_a_rewards_metric_is_named_by_its_function_wherever_its_file_lies():
    assert metric_names(["math_verify", "/job/data/r.py:digits", "pkg.mod:score"]) == ["math_verify", "digits", "score"]
    assert metric_names(["a.py:score", "b.py:score", "format"]) == ["a.py:score", "b.py:score", "format"]


def test_reward_weights_must_match_the_rewards():
    with pytest.raises(ConfigError, match="2 weights for 1 rewards"):
        check_rewards(["format"], [1.0, 2.0], set())


@pytest.mark.parametrize("fn, message", [
    ("raises_on_b", r"raised ZeroDivisionError: division by zero on sample 8$"),
    ("too_few", r"returned 1 scores for 3 completions \(samples 7, 8, 9\)"),
    ("a_nan", r"scored sample 8 \(completion 1 of the call\) nan"),
])
def test_a_failing_reward_ends_with_one_line_naming_it_and_the_row(pool, user_file, fn, message):
    with pytest.raises(RewardError, match=f"reward function {user_file}:{fn} " + message) as e:
        pool([f"{user_file}:{fn}"]).score(["p"] * 3, ["a", "b", "c"], {}, [7, 8, 9])
    assert "\n" not in str(e.value)


def test_a_trl_reward_gets_its_keywords_and_none_leaves_a_completion_to_the_others(pool, user_file):
    """TRL's keywords: `completions` alone is enough, `completion_ids` and `trainer_state` (the
    optimizer steps taken, the epochs) where named; a None score is left out of the weighted sum
    where another function scores the completion, and a completion that none scores is one line
    naming them all."""
    from training.contract.rewards import TrainerState

    extras = {"completion_ids": [[5, 6], [7], [8, 9, 10]], "trainer_state": TrainerState(4, 0.5)}
    check_rewards([f"{user_file}:{fn}" for fn in ("only_completions", "trl_style", "not_for_b")], None, set())
    rewards = pool([f"{user_file}:only_completions", f"{user_file}:trl_style", f"{user_file}:not_for_b"],
                   weights=[1.0, 1.0, 2.0])
    totals, each = rewards.score(["p"] * 3, ["a", "b", "cc"], {}, [7, 8, 9], extras)
    assert each == {f"{user_file}:only_completions": [1.0, 1.0, 2.0], f"{user_file}:trl_style": [6.5, 5.5, 7.5],
                    f"{user_file}:not_for_b": [0.5, None, 0.5]}
    assert totals == [8.5, 6.5, 10.5]
    with pytest.raises(RewardError, match=f"no reward function scored sample 8 \\(completion 1 of the call\\): "
                                          f"{user_file}:not_for_b, {user_file}:a_none each returned None for it"):
        pool([f"{user_file}:not_for_b", f"{user_file}:a_none"]).score(["p"] * 3, ["a", "b", "c"], {}, [7, 8, 9])


VERL_REWARD = '''
from scorer import extract  # a module beside this file


def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    hit = extract(solution_str) == ground_truth
    return {"score": float(hit) + (0.5 if data_source == "openai/gsm8k" else 0.0), "acc": hit}
'''


def test_a_verl_reward_file_runs_unchanged_beside_the_module_it_imports(pool, tmp_path, monkeypatch):
    """verl's compute_score, recognized by its signature, is called once per completion with the
    row's data source, its reference answer (verl's reward_model.ground_truth, or GSM8K's number) and
    extra info; its dict's `score` counts. Its file imports a module that sits beside it."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "verl").mkdir()
    (tmp_path / "verl" / "gsm8k.py").write_text(VERL_REWARD)
    (tmp_path / "verl" / "scorer.py").write_text("def extract(text):\n    return text.split()[-1]\n")
    spec = "verl/gsm8k.py:compute_score"
    check_rewards([spec], None, {"data_source", "reward_model", "extra_info"})
    columns = {"data_source": ["openai/gsm8k", "other"], "extra_info": [{"index": 0}, {"index": 1}],
               "reward_model": [{"ground_truth": "72", "style": "rule"}, {"ground_truth": "5", "style": "rule"}]}
    assert pool([spec]).score(["q1", "q2"], ["so 72", "so 6"], columns, [0, 1])[0] == [1.5, 0.0]
    assert pool([spec]).score(["q"], ["it is 1000"], {"answer": ["#### 1,000"]}, [0])[0] == [1.0]


def test_a_reward_that_cannot_be_loaded_in_the_pool_is_a_configuration_error_not_a_samples(pool, user_file):
    """Where the reward process cannot load a function (its file changed, a pod without the module),
    the run ends in one configuration line, never blaming a sample."""
    with pytest.raises(ConfigError, match=r"my_rewards.py has no function 'by_lenght': did you mean 'by_length'\?$"):
        pool([f"{user_file}:by_lenght"]).score(["p"], ["a"], {"target": [1]}, [53])


def test_a_reward_past_its_timeout_is_ended_with_its_process(pool, user_file):
    rewards = pool([f"{user_file}:sleeps"], timeout=1.0)
    started = time.monotonic()
    with pytest.raises(RewardError, match=r"took more than method_args.reward_timeout=1 s on samples 3"):
        rewards.score(["p"], ["a"], {}, [3])
    assert time.monotonic() - started < 20
    # The pool's processes are forked by multiprocessing's fork server (a child of this process):
    # none of them is left running.
    wait_for(lambda: not [p for server in child_pids(os.getpid(), running=True)
                          for p in child_pids(server, running=True)], timeout=10)


def test_a_stop_while_waiting_for_a_reward_drops_the_call_and_its_process(pool, user_file):
    rewards = pool([f"{user_file}:sleeps"])
    scoring = rewards.submit(["p"], ["a"], {}, [3])
    started = time.monotonic()
    assert rewards.collect(scoring, interrupted=lambda: time.monotonic() - started > 0.5) is None
    assert time.monotonic() - started < 10
    wait_for(lambda: not [p for server in child_pids(os.getpid(), running=True)
                          for p in child_pids(server, running=True)], timeout=10)


KEEPS_THE_MASK = """
import signal
from training.contract.rewards import RewardOptions
from training.rl.reward_pool import RewardPool

signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM, signal.SIGUSR1})  # as the trainer does
pool = RewardPool(["exact_match"], None, RewardOptions(), 30)
assert pool.score(["p"], ["1"], {"answer": ["1"]}, [0])[0] == [1.0]
pool.close()
assert signal.pthread_sigmask(signal.SIG_BLOCK, []) >= {signal.SIGTERM, signal.SIGUSR1}
"""


def test_starting_the_reward_process_keeps_the_trainers_stop_signals_blocked():
    """A fresh process (multiprocessing's resource tracker is started once per process, and starting
    it unblocks SIGTERM in the calling thread): a SIGTERM must still reach the trainer's handler."""
    done = subprocess.run([sys.executable, "-c", KEEPS_THE_MASK], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]


# --- the vendor's GRPO-RLVR recipes (tests/fixtures/vendor_grpo_recipes.json, scripts/vendor_grpo_facts.py) ---

def test_grpos_defaults_are_what_most_of_the_vendors_rlvr_recipes_set():
    defaults = method_facts("grpo").build_args({})
    for key in VENDOR_GRPO_KEYS:
        most = collections.Counter(recipe[key] for recipe in VENDOR_GRPO).most_common(1)[0][0]
        assert getattr(defaults, key) == most, key


@pytest.mark.parametrize("recipe", VENDOR_GRPO, ids=[r["vendor_file"] for r in VENDOR_GRPO])
def test_every_vendor_rlvr_recipes_algorithm_is_expressible_here(recipe):
    """verl's GRPO advantage, token-mean aggregation and low_var_kl, and every setting of the recipe
    within GRPO's key ranges here (the rollout correction of four Qwen 3.5/3.6 recipes too): a twin
    of it needs no key this trainer lacks."""
    assert (recipe["advantage"], recipe["loss_agg_mode"], recipe["kl_type"]) == ("grpo", "token-mean", "low_var_kl")
    correction = {"rollout_correction": recipe["rollout_correction"],
                  "rollout_correction_threshold": recipe["rollout_correction_threshold"]} if recipe["rollout_correction"] else {}
    args = method_facts("grpo").build_args({**{key: recipe[key] for key in VENDOR_GRPO_KEYS}, **correction})
    assert recipe["train_batch_size"] % args.mini_batches == 0


# --- the dry run -------------------------------------------------------------------------------------

def test_the_dry_run_refuses_a_reward_it_cannot_call_before_writing_anything(launch, tmp_path):
    code, out, err = launch("recipes=llama/tiny_llama_grpo",
                            "recipes.training_config.training_args.method_args.rewards=[math_verify,data/nowhere.py:score]")
    assert code != 0 and not (tmp_path / "out").exists()
    assert err.strip() == ("error: method_args.rewards[1]: the file data/nowhere.py of 'data/nowhere.py:score' does not "
                           "exist (paths are relative to the directory the job runs in)")


@pytest.mark.parametrize("key, value, message", [
    ("mini_batches", "3", "method_args.mini_batches=3 does not divide train_batch_size=8 (prompts per step)"),
    ("eval_pass_k", "[1,8]", "method_args.eval_pass_k=[1, 8] needs k from 1 to eval_group_size=1: raise eval_group_size to 8"),
])
def test_the_dry_run_refuses_grpo_keys_that_do_not_fit_together_in_one_line(launch, tmp_path, key, value, message):
    """What the trainer would refuse at its start, the dry run refuses first, before writing anything."""
    code, out, err = launch("recipes=llama/tiny_llama_grpo", f"++recipes.training_config.training_args.method_args.{key}={value}")
    assert code != 0 and not (tmp_path / "out").exists()
    assert message in err and len(err.strip().splitlines()) == 1, err


def test_the_dry_run_reads_prompt_rows_and_counts_those_too_long(launch):
    code, out, err = launch("recipes=llama/tiny_llama_grpo", "recipes.elastic_policy.is_elastic=true",
                            "recipes.training_config.training_args.method_args.max_prompt_length=10")
    assert code == 0, err
    # per size, each rank's prompts and completions (num_generations 4) per step
    table = [line.split()[:6] for line in out.splitlines()]
    assert ["nodes", "devices", "DP", "sharding", "per-rank", "prompts"] in table
    assert ["2", "2", "2", "fsdp", "4", "16"] in table and ["3", "3", "3", "fsdp", "1x2+2x3", "1x8+2x12"] in table
    # a step's tokens at most: 8 prompts x 4 completions x (10 + 8); the method's keys the recipe changes
    assert all(row[9] == "576" for row in (line.split() for line in out.splitlines()) if row[:1] in (["2"], ["3"]))
    method = next(line for line in out.splitlines() if line.startswith("method:"))
    assert method.startswith("method: GRPO (num_generations 4, max_prompt_length 10, max_new_tokens 8, mini_batches 2,")
    line = next(line for line in out.splitlines() if line.startswith("data:"))
    assert "read as prompt rows (64 sampled" in line
    assert "longer than method_args.max_prompt_length=10, which leaves them out" in line


def test_the_dry_run_counts_prompt_lengths_with_a_chat_template_given_as_a_file(launch, tmp_path):
    """A template that puts a long system preamble before every prompt (a file, as the trainer reads
    it): every prompt is then longer than the limit, where the tokenizer's own template keeps all."""
    template = tmp_path / "long_preamble.jinja"
    template.write_text("{{ 'You are a careful assistant. ' * 20 }}{% for m in messages %}{{ m['content'] }}{% endfor %}")
    counted = {}
    for name, extra in (("own", []), ("file", [f"+recipes.training_config.datasets.chat_template={template}"])):
        code, out, err = launch("recipes=llama/tiny_llama_grpo", "recipes.training_config.training_args.method_args.max_prompt_length=32",
                                *extra)
        assert code == 0, err
        counted[name] = next(line for line in out.splitlines() if line.startswith("data:"))
    assert "longer than" not in counted["own"]
    assert "64 of them longer than method_args.max_prompt_length=32" in counted["file"], counted["file"]


def test_the_dry_run_warns_where_a_rank_has_fewer_prompts_than_updates():
    """8 prompts a step in 4 updates: at 3 nodes a rank holds 2 (2+3+3) and pads through two updates;
    at 1 and 2 nodes every rank has a prompt in every update."""
    from elastic_launcher.config.compose import compose, to_plain
    from elastic_launcher.planning.plan import make_plan

    plan = make_plan(to_plain(compose(["recipes=llama/tiny_llama_grpo", "recipes.elastic_policy.is_elastic=true",
                                       "recipes.training_config.training_args.method_args.mini_batches=4"])[0])["recipes"])
    (warning,) = [w for w in plan.warnings if "mini_batches" in w]
    assert "method_args.mini_batches=4 (3 nodes: 2)" in warning
    assert not [w for w in make_plan(to_plain(compose(["recipes=llama/tiny_llama_grpo", "recipes.elastic_policy.is_elastic=true"])[0])
                                     ["recipes"]).warnings if "mini_batches" in w]


def test_the_dry_run_shows_both_phases_of_every_size_marking_the_untraced(launch):
    """A catalogue twin's updates are traced at every size (no `~`); a micro-batch no trace was kept
    for is estimated, and both of its phases say so, as the table's GiB/GPU column does."""
    from elastic_launcher.config.compose import compose, to_plain
    from elastic_launcher.planning.plan import make_plan

    def phases(*overrides):
        code, out, err = launch("recipes=qwen/qwen3_8b_grpo_lora", "recipes.elastic_policy.is_elastic=true", *overrides)
        assert code == 0, err
        line = next(line for line in out.splitlines() if line.startswith("GRPO's phases, GiB/GPU rollout / updates: "))
        return line.split(": ", 1)[1].split(", ")

    plan = make_plan(to_plain(compose(["recipes=qwen/qwen3_8b_grpo_lora", "recipes.elastic_policy.is_elastic=true"])[0])
                     ["recipes"])
    assert phases() == [f"{s.nodes} node{'s' * (s.nodes != 1)} {s.memory.rollout_gib:.0f} / {s.memory.total_gib:.0f}" for s in plan.sizes]
    assert all(s.memory.traced for s in plan.sizes)
    estimated = phases(f"{METHOD_ARG}micro_completions=3")
    assert len(estimated) == len(plan.sizes) and all(p.count("~") == 2 for p in estimated)


def test_pass_at_k_is_the_unbiased_estimator():
    """1 - C(n-c, k)/C(n, k): the chance that k of the n completions, drawn without replacement,
    hold at least one that passed; checked against enumerating every k-subset."""
    from itertools import combinations

    from training.rl.algorithms import pass_at_k

    for n, c, k in [(4, 0, 1), (4, 1, 1), (4, 1, 2), (8, 3, 4), (8, 8, 2), (5, 2, 5), (6, 1, 3)]:
        passed = [True] * c + [False] * (n - c)
        subsets = list(combinations(range(n), k))
        want = sum(any(passed[i] for i in s) for s in subsets) / len(subsets)
        assert pass_at_k(n, c, k) == pytest.approx(want, rel=1e-12, abs=1e-15), (n, c, k)


def test_evaluation_draws_a_group_per_prompt_and_logs_pass_at_each_k():
    """eval_group_size completions of each validation prompt (sampled; 1: greedy), the mean reward
    over them and pass@k per k of eval_pass_k, from the sums every rank adds up."""
    from types import SimpleNamespace

    from training.contract.grpo_args import check_sampling_options
    from training.contract.methods import method_facts
    from training.methods.grpo import GRPO
    from training.rl.algorithms import pass_at_k

    options = method_facts("grpo").build_args({"eval_group_size": 4, "eval_pass_k": [1, 2, 4],
                                               "eval_success_threshold": 1.0, "temperature": 0.7})
    drawn = []
    rewards = [1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 0.5, 0.0]  # prompt 0: 1 of 4 pass; prompt 1: 2 of 4

    def generate(groups, n, params, step):
        drawn.append((len(groups), n, params.temperature))
        return [[None] * n for _ in groups]

    method = SimpleNamespace(options=options, params=SimpleNamespace(temperature=0.7),
                             engine=SimpleNamespace(generate=generate), device=torch.device("cpu"),
                             rewards=SimpleNamespace(judge=None),
                             maker=SimpleNamespace(score=lambda prompts, completions, step: rewards))
    prompts = [{"sample_ids": [0], "prompt_ids": [5]}, {"sample_ids": [1], "prompt_ids": [6]}]
    sums = GRPO.eval_sums(method, None, {"prompts": prompts}, 3)
    assert drawn == [(2, 4, 0.7)]
    metrics = GRPO.eval_metrics(method, sums)
    assert metrics["eval_reward"] == pytest.approx(3.5 / 8)
    for k in (1, 2, 4):
        assert metrics[f"eval_pass@{k}"] == pytest.approx((pass_at_k(4, 1, k) + pass_at_k(4, 2, k)) / 2)
    assert metrics["eval_pass@1"] < metrics["eval_pass@2"] < metrics["eval_pass@4"] == 1.0
    with pytest.raises(ConfigError, match=r"eval_pass_k=\[1, 8\] needs k from 1 to eval_group_size=4"):
        check_sampling_options(8, method_facts("grpo").build_args({"eval_group_size": 4, "eval_pass_k": [1, 8]}))


def test_a_rehearsal_names_the_first_step_whose_completions_differ_from_the_fixed_runs(tmp_path):
    import json

    from elastic_launcher.local.report import first_difference

    def run(name, completions_by_step):
        (tmp_path / name).mkdir()
        (tmp_path / name / "samples.jsonl").write_text("".join(
            json.dumps({"step": s, "sample_ids": [s], "completions": c}) + "\n" for s, c in completions_by_step))
        return tmp_path / name

    fixed = run("fixed", [(1, [[1, 0, [5]]]), (2, [[2, 0, [6]]]), (3, [[3, 0, [7]]])])
    redone = run("redone", [(1, [[1, 0, [5]]]), (2, [[2, 0, [9]]]), (2, [[2, 0, [6]]]), (3, [[3, 0, [7]]])])
    drifted = run("drifted", [(1, [[1, 0, [5]]]), (2, [[2, 0, [6]]]), (3, [[3, 0, [8]]])])
    assert first_difference(redone, fixed) is None  # a step redone after a failure counts by its last attempt
    assert first_difference(drifted, fixed) == 3



def test_a_rehearsal_says_when_a_verdict_or_an_environments_reply_differed_before_the_completions(tmp_path):
    """The trainer does not make a judge's verdicts or an environment's replies: where one differs first
    (the same completion scored otherwise, the same turn answered otherwise), the report says so."""
    import json

    from elastic_launcher.local.report import first_input_difference

    def row(sample, judge, replies=("7",)):
        return {"sample_id": sample, "index": 0, "completion": "It is 7.", "rewards": {"judge": judge, "found": 1.0},
                "turns": [{"model": "<tool_call>lookup</tool_call>", "replies": [{"content": r} for r in replies]},
                          {"model": "It is 7."}]}

    def run(name, readable_by_step):
        (tmp_path / name).mkdir()
        (tmp_path / name / "samples.jsonl").write_text("".join(
            json.dumps({"step": s, "sample_ids": [1], "readable": r}) + "\n" for s, r in readable_by_step))
        return tmp_path / name

    fixed = run("fixed", [(1, [row(1, 0.5)]), (2, [row(2, 0.5)]), (3, [row(3, 0.5)])])
    judged = run("judged", [(1, [row(1, 0.5)]), (2, [row(2, None)]), (3, [row(3, 0.5)])])
    replied = run("replied", [(1, [row(1, 0.5, replies=("8",))]), (2, [row(2, 0.5)]), (3, [row(3, 0.5)])])
    assert first_input_difference(judged, fixed, until=3) == (
        "the judge's verdict on sample 2's completion 0 at step 2 (None here, 0.5 in the fixed-size run)")
    assert first_input_difference(replied, fixed, until=None) == (
        "the environment's reply in turn 1 of sample 1's completion 0 at step 1")
    assert first_input_difference(judged, fixed, until=1) is None  # the completions differed first
    assert first_input_difference(fixed, fixed, until=None) is None


def test_a_rehearsals_verdict_weighs_a_drift_against_what_float32s_reordering_alone_does():
    """A chaotic run (the warm-started GRPO twin: its KL climbs) amplifies float32's reordering at another
    size by ~1.3x a step: the resized run, reordered from its first resize on, stays within the drift a
    fixed-size run at another size shows by the same step (reordered from step 1), and is MATCHED; one
    completion of a step's 32 weighed wrong moves that step's mean by ~1/32, far past it, and DIFFERS,
    as does any step the strict bound alone would refuse before reordering has grown."""
    from elastic_launcher.local.report import STRICT, Report, within_reordering

    def reordered_from(first: int, steps=range(1, 31)) -> dict[int, float]:
        return {s: 0.0 if s < first else 1e-7 * 1.3 ** (s - first) for s in steps}

    other_size, resized = reordered_from(1), reordered_from(6)
    assert max(resized.values()) > STRICT  # the strict bound alone would call it DIFFERED
    assert within_reordering(resized, other_size)
    wrong_weight = {s: d + (1 / 32 if s >= 10 else 0.0) for s, d in resized.items()}
    assert not within_reordering(wrong_weight, other_size)
    early = {**resized, 2: 10 * STRICT}  # before reordering has grown: the strict bound holds
    assert not within_reordering(early, other_size)

    report = Report([], 1.0, 1.0, 1.0, 30, compared_metric="entropy", max_rel_diff=max(resized.values()),
                    samples_identical=True, matched=True, reordering_nodes=3,
                    reordering_rel_diff=max(other_size.values()))
    assert (f"vs fixed-size run: MATCHED: max relative entropy difference {max(resized.values()):.2e}, within "
            f"float32's reordering (a fixed-size run at 3 nodes drifts up to {max(other_size.values()):.2e} from it; "
            f"a step may differ up to 4x what it had by then), consumed sample ids and completions identical") \
        in report.summary()
