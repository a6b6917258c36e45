"""Reinforcement learning with verifiable rewards (GRPO), one job per module:

- `algorithms`: group-relative advantages, the clipped policy-gradient loss, the KL penalty and
  the token-mean aggregation (verl's core_algos names); the per-token log-probabilities they take
  come from the model's head (training.model.loss.token_log_probs);
- `sampling`: a completion's random draws from (seed, sample id, generation index, step[, turn]) only;
- `rollout`: completions from the trainer's own sharded model, group by group with a KV cache;
- `reward_pool`: the reward functions called in a process of their own, each call with a timeout;
- `vllm_rollout`: completions from vLLM engines inside the trainer's processes, fed the policy's
  weights at every rollout (the two vLLM builds it runs on: training.contract.vllm_builds);
- `learning_signals`: when a run cannot learn, said while it runs;
- `agent_rollout`: an agent's multi-turn rollouts with tools, token in and token out, on the trainer's
  sampler; `environment_pool`: its environments, one per trajectory, in the reward process.

The reward functions themselves (built-in and the user's: loaded and checked) are in
training.contract.rewards: the launcher's dry run checks them too.
"""
