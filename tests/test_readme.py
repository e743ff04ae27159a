"""README.md's Python code blocks run, in order, in one process (as a reader
would paste them one after another)."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

README = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "README.md")


def python_blocks() -> list[str]:
    with open(README) as f:
        return re.findall(r"^```python\n(.*?)^```", f.read(), flags=re.S | re.M)


def test_readme_has_blocks() -> None:
    assert len(python_blocks()) >= 5


def run_blocks(blocks: list[str], tmp_path) -> None:
    # Each block is announced on stderr, so a failure names the block.
    script = "\n".join(
        f"import sys as _sys; print('--- README block {i}', file=_sys.stderr, flush=True)\n{block}"
        for i, block in enumerate(blocks, 1)
    )
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TORCH_TPU_CACHE_DIR": "0"}
    proc = subprocess.run(
        [sys.executable, "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=1800
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "EagerMode.DEFER_AND_FUSE" in proc.stdout  # a mode prints by name
    assert f"--- README block {len(blocks)}" in proc.stderr


def test_readme_python_blocks_run_in_order(tmp_path) -> None:
    """Every block but the diffusers pipeline (minutes: the slow test below)."""
    run_blocks([b for b in python_blocks() if "diffusers" not in b], tmp_path)


@pytest.mark.slow
def test_readme_all_python_blocks_run_in_order(tmp_path) -> None:
    pytest.importorskip("diffusers")
    pytest.importorskip("transformers")
    run_blocks(python_blocks(), tmp_path)
