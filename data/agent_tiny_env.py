"""The tiny agent twin's environment (recipes/llama/tiny_llama_agent.yaml), written as a TRL user writes
one for `environment_factory`: each word hides a number only the `lookup` tool knows; the model must
call it with the prompt's word and answer with the number it returns. `found` rewards that, reading
the finished environments. Deterministic: a trajectory is the same at any world size."""

SECRETS = {"apple": 17, "river": 42, "stone": 8, "cloud": 63, "bridge": 25, "garden": 91, "window": 34,
           "candle": 56, "forest": 70, "rocket": 12}


class SecretNumbers:
    def reset(self, word: str, **row) -> None:
        self.word, self.looked_up = word, []

    def lookup(self, word: str) -> str:
        """Look up the secret number of a word.

        Args:
            word: The word whose secret number to return.
        """
        self.looked_up.append(word)
        if word not in SECRETS:
            raise KeyError(f"no secret number for {word!r}")
        return str(SECRETS[word])


def found(completions, environments, **kwargs) -> list[float]:
    """Half for a lookup the tool answered, half for the episode's secret number in the final answer."""
    scores = []
    for completion, env in zip(completions, environments):
        answer = completion[-1]["content"] if completion[-1]["role"] == "assistant" else ""
        answered = any(word in SECRETS for word in env.looked_up)
        scores.append(0.5 * answered + 0.5 * (str(SECRETS[env.word]) in answer and len(completion) > 1))
    return scores
