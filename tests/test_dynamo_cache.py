"""cached_compile: a second process loads dynamo's compiled frame from the cache
directory instead of tracing, runs the same programs with the same results, and
traces as usual where the guards fail or the entry was tampered with. Each case
runs fresh processes over one TORCH_TPU_CACHE_DIR."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

# A model of repeated (marked) blocks whose forward is decorated the way
# diffusers decorates FluxTransformer2DModel.forward (functools.wraps, the
# wrapped function a closure variable): torch installs such a frame's globals
# in the wrong module unless dynamo_cache does it too.
SCRIPT = """
import functools, json, sys
import torch
import torch_tpu
from torch import nn
from torch._dynamo.utils import counters


def scaled(fn):
    @functools.wraps(fn)
    def wrapper(self, *args, **kwargs):
        return fn(self, *args, **kwargs) * 2
    return wrapper


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(16, 16)

    def forward(self, h, scale=(1.0, 0.5)):
        return h + self.lin(h).tanh() * scale[1]


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList(Block() for _ in range(4))

    @scaled
    def forward(self, h, half=0.5):  # a default: dynamo guards the wrapped function's defaults
        for block in self.blocks:
            h = block(h, scale=(1.0, half))
        return h.sum(-1)


torch.manual_seed(0)
model = Model().eval()
rows = int(sys.argv[1])
x = torch.randn(rows, 16)
with torch.no_grad():
    expected = model(x)
model = model.to("tpu")
torch_tpu.mark_repeated_blocks(model)
backend = torch_tpu.TpuBackend()
if sys.argv[2:] == ["broken"]:  # an entry that fails halfway through its install
    import torch_tpu.dynamo_cache
    from torch._dynamo.package import CompilePackage

    torch_tpu.dynamo_cache._patch_torch()
    installed = CompilePackage.install

    def install(self, backends):
        installed(self, backends)
        raise AttributeError("a guard's value is missing")

    CompilePackage.install = install
compiled = torch_tpu.cached_compile(model, backend=backend, dynamic=False)
with torch.no_grad():
    out = compiled(x.to("tpu")).cpu()
    again = compiled(x.to("tpu")).cpu()
print("RESULT " + json.dumps({
    "hit": counters["dynamo_cache"]["dynamo_cache_hit"],
    "error": counters["dynamo_cache"]["dynamo_cache_error"],
    "traced": counters["stats"]["unique_graphs"],
    "compiles": backend.compiles,
    "region_calls": backend.region_calls,
    "max_diff": (out - expected).abs().max().item(),
    "equal_runs": bool(torch.equal(out, again)),
    "out": out.tolist(),
}))
"""


def run(cache: Path, rows: int = 3, *extra: str) -> dict:
    env = dict(os.environ, TORCH_TPU_CACHE_DIR=str(cache))
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(rows), *extra],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    line = next(ln for ln in done.stdout.splitlines() if ln.startswith("RESULT "))
    return json.loads(line[len("RESULT ") :])


@pytest.fixture(scope="module")
def warm(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict, dict]:
    cache = tmp_path_factory.mktemp("cache")
    cache.chmod(0o700)
    first = run(cache)
    second = run(cache)
    return cache, first, second


def test_first_process_traces_and_saves_the_frame(warm: tuple[Path, dict, dict]) -> None:
    cache, first, _ = warm
    assert first["hit"] == 0 and first["traced"] == 1
    assert first["region_calls"] == 4  # the marked blocks, as without the cache
    assert first["max_diff"] < 1e-5 and first["equal_runs"]
    assert len(list((cache / "dynamo").glob("*/entry"))) == 1


def test_second_process_loads_it_without_tracing(warm: tuple[Path, dict, dict]) -> None:
    _, first, second = warm
    assert second["hit"] == 1 and second["error"] == 0
    assert second["traced"] == 0  # dynamo traced nothing: the saved frame ran
    assert second["out"] == first["out"]  # the same programs, bit for bit
    assert second["max_diff"] < 1e-5 and second["equal_runs"]
    assert second["region_calls"] == 4  # the loaded graph is split at its blocks as before


def test_other_shapes_fail_the_guards_and_trace(warm: tuple[Path, dict, dict]) -> None:
    cache, _, _ = warm
    other = run(cache, rows=5)
    assert other["hit"] == 1  # loaded, but its guards refuse 5 rows
    assert other["traced"] == 1 and other["max_diff"] < 1e-5


def test_a_tampered_entry_is_not_loaded(tmp_path: Path) -> None:
    tmp_path.chmod(0o700)
    run(tmp_path)
    (entry,) = (tmp_path / "dynamo").glob("*/entry")
    data = bytearray(entry.read_bytes())
    data[-40] ^= 1  # inside the pickle: the MAC no longer matches
    entry.write_bytes(bytes(data))
    again = run(tmp_path)
    assert again["hit"] == 0 and again["error"] == 1  # refused before unpickling
    assert again["traced"] == 1 and again["max_diff"] < 1e-5


def test_an_entry_that_fails_to_install_is_traced_and_saved_anew(warm: tuple[Path, dict, dict]) -> None:
    cache, first, _ = warm
    broken = run(cache, 3, "broken")
    assert broken["traced"] == 1 and broken["out"] == first["out"]  # traced, never half-loaded
    again = run(cache)
    assert again["hit"] == 1 and again["traced"] == 0 and again["out"] == first["out"]


def test_without_a_cache_directory_it_is_torch_compile(tmp_path: Path) -> None:
    result = run(Path("0"))  # TORCH_TPU_CACHE_DIR=0: in memory only
    assert result["hit"] == 0 and result["traced"] == 1 and result["max_diff"] < 1e-5


def test_a_marked_block_class_is_found_by_its_name() -> None:
    """Dynamo saves a type guard only on a class whose qualified name finds it:
    a marked class pickles by reference (made on first use in a process that has
    not marked it), while the model's repr still names the block's own class."""
    import pickle

    from torch import nn

    import torch_tpu
    from torch_tpu import compile as tpu_compile

    class Block(nn.Module):  # a model's own class, where pickle finds it
        def forward(self, h):
            return h

    tpu_compile.Block = Block  # type: ignore[attr-defined]
    Block.__module__, Block.__qualname__ = tpu_compile.__name__, "Block"
    try:
        holder = nn.Module()
        holder.blocks = nn.ModuleList(Block() for _ in range(2))
        assert torch_tpu.mark_repeated_blocks(holder) == ["blocks"]
        marked = type(holder.blocks[0])
        assert marked.__qualname__ == marked.__name__  # dynamo's condition
        assert pickle.loads(pickle.dumps(marked)) is marked
        assert getattr(tpu_compile, marked.__name__) is marked
        assert repr(holder.blocks[0]) == "Block()"
    finally:
        del tpu_compile.Block
