"""bench/offline_packages.py: what a GPU node with no package index is sent, and the parts it is sent in
(no network: the resolution itself is pip's)."""

from __future__ import annotations

import json
import random
import subprocess
import sys

import pytest

from bench.offline_packages import DROP, NOT_NEEDED, Package, install, pack_folder, read_have, requirements, to_carry
from tests.conftest import ROOT


def test_the_requirements_are_the_images_pins_and_the_projects_own_without_what_no_bench_runs():
    reqs = requirements()
    assert "vllm==0.26.0" in reqs and "torch==2.11.0" in reqs  # the image's, not the project's CPU torch
    assert "torch==2.13.0" not in reqs
    assert "hydra-core==1.3.8" in reqs  # the project's own, which the image does not pin
    names = {req.split("==")[0].split("[")[0] for req in reqs}
    assert not names & NOT_NEEDED


def test_the_node_is_sent_what_it_lacks_and_what_it_holds_at_a_version_not_accepted():
    resolved = [Package("transformers", "5.23.0", "u1", ("huggingface-hub<3.0,>=1.31.0", "regex>=2025.10.22",
                                                          "numpy>=1.17", 'tokenizers<0.20; python_version < "3.10"',
                                                          'pytest; extra == "testing"')),
                Package("mistral-common", "1.13.1", "u2", ("numpy<2.4,>=1.25", "pydantic>=2.7")),
                Package("numba", "0.65.0", "u3", ("llvmlite<0.48", "numpy<2.5")),
                Package("numpy", "2.3.5", "u4"), Package("peft", "0.21.2", "u5"), Package("pydantic", "2.14.4", "u6"),
                Package("huggingface-hub", "2.4.0", "u7"), Package("regex", "2026.11.19", "u8"),
                Package("tokenizers", "0.23.3", "u9"), Package("pytest", "9.0.0", "u10"),
                Package("llvmlite", "0.47.0", "u11"), Package("torch", "2.11.0", "u12"),
                Package("flashinfer-python", "0.6.14", "u13", ("pydantic<2",)),
                Package("nvidia-cublas", "13.1.0.3", "u14"), Package("math-verify", "0.9.0", "u15")]
    have = read_have("transformers==5.17.0\nnumpy==2.5.2\nnumba\nllvmlite==0.50.0\npeft\nmath_verify==0.9.0\n"
                     "huggingface_hub==1.33.0\nregex==2024.11.6\ntokenizers==0.23.2\npytest==8.0.0\n"
                     "# a comment\nlocalthing @ file:///tmp/x\n")
    assert have["localthing"] is None and have["math-verify"] == "0.9.0"
    reqs = ["transformers==5.23.0", "peft==0.21.2", "math-verify==0.9.0", "torch==2.11.0", "jinja2>=3.1"]
    carried = [package.name for package in to_carry(resolved, have, reqs, "3.12")]
    # transformers: pinned, held at 5.17; regex: held below the carried transformers' floor; peft: pinned,
    # held at an unknown version; mistral-common, pydantic: lacking. Kept: the hub (1.33 is within
    # transformers' range), math-verify (held at the pin), tokenizers (the bound is for other Pythons),
    # pytest (an extra's), numba and llvmlite (the node's numba is not the resolved one: its own needs
    # hold), numpy (the node's own, though mistral-common caps it), torch, vLLM's optional kernels
    # (whose requirements count for nothing) and CUDA's wheels.
    assert carried == ["transformers", "mistral-common", "peft", "pydantic", "regex"]


def site_folder(tmp_path):
    folder = tmp_path / "site"
    (folder / "vllm" / "vllm_flash_attn").mkdir(parents=True)
    (folder / "vllm" / "__init__.py").write_text("VERSION = '0.26.0'\n")
    (folder / "vllm" / "vllm_flash_attn" / "_vllm_fa2_C.abi3.so").write_bytes(b"\0" * 1000)
    # As incompressible as compiled code.
    (folder / "vllm" / "vllm_flash_attn" / "_vllm_fa3_C.abi3.so").write_bytes(random.Random(1).randbytes(10_000))
    (folder / "pydantic").mkdir()
    (folder / "pydantic" / "__init__.py").write_text("\n".join(f"X{i} = {i * 7919 % 10007}" for i in range(2000)))
    return folder


def test_a_pack_travels_in_parts_and_unpacks_whole_without_the_dropped_files(tmp_path):
    assert "vllm/vllm_flash_attn/_vllm_fa2_C.abi3.so" in DROP
    folder = site_folder(tmp_path)
    kept = {path.relative_to(folder): path.read_bytes() for path in folder.rglob("*") if path.is_file()
            and path.name != "_vllm_fa2_C.abi3.so"}
    count = pack_folder(folder, tmp_path / "out", part_bytes=4096,
                        manifest={"packages": ["vllm==0.26.0"], "environment": {"VLLM_USE_FLASHINFER_SAMPLER": "0"}})
    assert count >= 2
    parts = sorted((tmp_path / "out").iterdir())
    assert [part.name for part in parts] == [f"{n:02d}" for n in range(1, count + 1)]
    assert all(len(list(part.iterdir())) == 2 for part in parts)  # the slice and the manifest
    # On the node (-S: the standard library alone), with the line to paste.
    done = subprocess.run([sys.executable, "-S", "bench/offline_packages.py", "install", "--parts",
                           str(tmp_path / "out"), "--target", str(tmp_path / "target")],
                          cwd=ROOT, capture_output=True, text=True, check=True)
    assert done.stdout.strip() == (f"1 packages in {tmp_path / 'target'}: "
                                   f"export PYTHONPATH={tmp_path / 'target'} VLLM_USE_FLASHINFER_SAMPLER=0")
    unpacked = {path.relative_to(tmp_path / "target"): path.read_bytes()
                for path in (tmp_path / "target").rglob("*") if path.is_file()}
    assert unpacked == kept


def test_a_missing_part_or_parts_of_two_packs_are_one_line_and_nothing_is_unpacked(tmp_path):
    count = pack_folder(site_folder(tmp_path), tmp_path / "out", part_bytes=4096, manifest={"packages": []})
    last = tmp_path / "out" / f"{count:02d}"
    moved = last.rename(tmp_path / "elsewhere")
    # `install` runs on the node, whose Python may hold nothing but the standard library (-S: no site-packages).
    command = [sys.executable, "-S", "bench/offline_packages.py", "install", "--parts", str(tmp_path / "out"),
               "--target", str(tmp_path / "target")]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert done.stderr.strip() == (f"error: parts {count:02d} of {count} are not under {tmp_path / 'out'}: "
                                   "bring them beside the others")
    assert not (tmp_path / "target").exists()

    # The same part number from another pack: the joined archive's checksum is not the manifest's.
    other = tmp_path / "other"
    (other / "pkg").mkdir(parents=True)
    (other / "pkg" / "data.bin").write_bytes(random.Random(2).randbytes(60_000))
    pack_folder(other, tmp_path / "out2", part_bytes=4096, manifest={"packages": []})
    (tmp_path / "out2" / f"{count:02d}").rename(last)
    manifest = json.loads((last / "manifest.json").read_text())
    assert manifest["sha256"] != json.loads((tmp_path / "out" / "01" / "manifest.json").read_text())["sha256"]
    with pytest.raises(SystemExit, match="not those of one pack"):
        install(tmp_path / "out", tmp_path / "target")
    assert moved.exists() and not (tmp_path / "target").exists()
