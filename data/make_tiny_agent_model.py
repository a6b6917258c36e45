"""Regenerate data/tiny_agent_model, the tiny agent twin's warm start: SFT of the tiny Llama on the
secret-number tool's transcripts (recipes/llama/tiny_llama_agent_sft.yaml, 300 steps, about three
minutes on two cores), its exported model copied here.

    python data/make_tiny_agent_model.py
"""

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent

if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as run_dir:
        subprocess.run([sys.executable, str(HERE.parent / "launcher.py"), "recipes=llama/tiny_llama_agent_sft",
                        "action=local", f"local.run_dir={run_dir}"], cwd=HERE.parent, check=True)
        target = HERE / "tiny_agent_model"
        shutil.rmtree(target, ignore_errors=True)
        shutil.copytree(Path(run_dir) / "hf", target)
    print(f"wrote {target}")
