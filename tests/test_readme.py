"""README.md's Python code blocks run: each alone in a fresh process (a reader
copies one block), and all in order in one process (a reader pastes them one
after another)."""

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


def _env() -> dict[str, str]:
    return {**os.environ, "HF_HUB_OFFLINE": "1", "TORCH_TPU_CACHE_DIR": "0"}


def run_blocks(blocks: list[str], tmp_path) -> None:
    # Each block is announced on stderr, so a failure names the block.
    script = "\n".join(
        f"import sys as _sys; print('--- README block {i}', file=_sys.stderr, flush=True)\n{block}"
        for i, block in enumerate(blocks, 1)
    )
    proc = subprocess.run(
        [sys.executable, "-c", script], cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=1800
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "EagerMode.DEFER_AND_FUSE" in proc.stdout  # a mode prints by name
    assert f"--- README block {len(blocks)}" in proc.stderr


@pytest.mark.slow  # test_readme_python_blocks_run_alone runs every one of these blocks, each afresh
def test_readme_python_blocks_run_in_order(tmp_path) -> None:
    """Every block but the diffusers pipeline (minutes: the slow test below)."""
    run_blocks([b for b in python_blocks() if "diffusers" not in b], tmp_path)


@pytest.mark.slow
def test_readme_all_python_blocks_run_in_order(tmp_path) -> None:
    pytest.importorskip("diffusers")
    pytest.importorskip("transformers")
    run_blocks(python_blocks(), tmp_path)


def _run_alone(blocks: list[str], tmp_path) -> None:
    """Each block in a fresh process of its own, all started at once (a block
    mostly waits on its imports and compiles); failures name their blocks."""
    procs = []
    for i, block in blocks:
        cwd = tmp_path / f"block{i}"
        cwd.mkdir()
        procs.append(
            (
                i,
                block,
                subprocess.Popen(
                    [sys.executable, "-c", block],
                    cwd=cwd,
                    env=_env(),
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.PIPE,
                    text=True,
                ),
            )
        )
    failures = []
    for i, block, proc in procs:
        _, err = proc.communicate(timeout=1800)
        if proc.returncode != 0:
            failures.append(f"--- README block {i} failed alone:\n{block}\nstderr:\n{err[-3000:]}")
    assert not failures, "\n".join(failures)


def _imports_diffusers(block: str) -> bool:
    return "from diffusers" in block or "import diffusers" in block


def test_readme_python_blocks_run_alone(tmp_path) -> None:
    """A block copied on its own runs in a fresh process: it imports and
    defines what it uses (no NameError from an earlier block). The diffusers
    pipeline block is the slow test below."""
    _run_alone([(i, b) for i, b in enumerate(python_blocks(), 1) if not _imports_diffusers(b)], tmp_path)


@pytest.mark.slow
def test_readme_diffusers_blocks_run_alone(tmp_path) -> None:
    pytest.importorskip("diffusers")
    pytest.importorskip("transformers")
    _run_alone([(i, b) for i, b in enumerate(python_blocks(), 1) if _imports_diffusers(b)], tmp_path)
