import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
MAIN_COMMAND = ["recipes=llama/llama3_1_8b_sft", "recipes.elastic_policy.is_elastic=true",
                "recipes.elastic_policy.min_nodes=2", "recipes.elastic_policy.max_nodes=8"]


@pytest.fixture
def launch(tmp_path, capsys, monkeypatch):
    """Run the launcher in-process with output under tmp_path; returns (exit code, stdout, stderr)."""
    from elastic_launcher.cli import main

    monkeypatch.chdir(ROOT)
    monkeypatch.delenv("HYDRA_FULL_ERROR", raising=False)

    def run(*overrides):
        code = main([*overrides, f"output_dir={tmp_path / 'out'}"])
        out, err = capsys.readouterr()
        return code, out, err

    return run


def run_launcher_process(*args, env=None, cwd=ROOT, timeout=60):
    """The launcher as a user runs it: a fresh `python launcher.py` process."""
    return subprocess.run([sys.executable, str(ROOT / "launcher.py"), *args], cwd=cwd, capture_output=True,
                          text=True, timeout=timeout, env={**os.environ, **(env or {})})
