"""Reinforcement learning with verifiable rewards (GRPO), one job per module:

- `algorithms`: group-relative advantages, the clipped policy-gradient loss, the KL penalty and
  the token-mean aggregation (verl's core_algos names); the per-token log-probabilities they take
  come from the model's head (training.model.loss.token_log_probs);
- `sampling`: a completion's random draws from (seed, sample id, generation index, step) only;
- `rollout`: completions from the trainer's own sharded model, group by group with a KV cache;
- `rewards`: built-in and user reward functions, loaded, checked and run with a timeout.
"""
