"""The tiny GRPO recipe's own reward (recipes/llama/tiny_llama_grpo.yaml), an example of a user's
reward function: TRL's signature, the data's columns as keyword lists."""


def digits(prompts, completions, **columns) -> list[float]:
    """The share of a completion's characters that are digits: a dense signal that an answer is a
    number at all, which math_verify's right-or-wrong score lacks while a model starts from nothing."""
    texts = [c if isinstance(c, str) else "".join(m["content"] for m in c) for c in completions]
    return [sum(ch.isdigit() for ch in t) / len(t) if t.strip() else 0.0 for t in texts]
