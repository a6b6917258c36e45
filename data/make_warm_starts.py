"""Regenerate the tiny twins' warm starts: each an SFT run of the tiny Llama whose exported model is
shipped here, as a real RL run starts from an instruct model.

    python data/make_warm_starts.py                 # both
    python data/make_warm_starts.py tiny_grpo_model # one

data/tiny_agent_model: the agent twin's, SFT on the secret-number tool's transcripts
(recipes/llama/tiny_llama_agent_sft.yaml, 300 steps, about three minutes on two cores).
data/tiny_grpo_model: the GRPO twin's, SFT on answered sums (recipes/llama/tiny_llama_grpo_sft.yaml,
1500 steps, about a minute).
"""

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
WARM_STARTS = {"tiny_agent_model": "llama/tiny_llama_agent_sft", "tiny_grpo_model": "llama/tiny_llama_grpo_sft"}

if __name__ == "__main__":
    for name in sys.argv[1:] or WARM_STARTS:
        with tempfile.TemporaryDirectory() as run_dir:
            subprocess.run([sys.executable, str(HERE.parent / "launcher.py"), f"recipes={WARM_STARTS[name]}",
                            "action=local", f"local.run_dir={run_dir}"], cwd=HERE.parent, check=True)
            target = HERE / name
            shutil.rmtree(target, ignore_errors=True)
            shutil.copytree(Path(run_dir) / "hf", target)
        print(f"wrote {target}")
