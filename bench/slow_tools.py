"""The tiny agent twin's environment with a tool that answers after a fixed latency
(BENCH_TOOL_LATENCY_S seconds, as a sandbox or a service would): bench/async_grpo.py's."""

import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "data"))

from agent_tiny_env import SecretNumbers  # noqa: E402


class SlowSecretNumbers(SecretNumbers):
    def lookup(self, word: str) -> str:
        """Look up the secret number of a word.

        Args:
            word: The word whose secret number to return.
        """
        time.sleep(float(os.environ.get("BENCH_TOOL_LATENCY_S", 0)))
        return super().lookup(word)
