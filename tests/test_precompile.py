"""Precompile for a TPU target (`python -m torch_tpu precompile`) and compile-only traces
(`TpuBackend(target_only=True)`): programs compiled for the target, never for this host's
plugin, and written serialised into a cache directory under the key of the target's runtime.
The fake-plugin tests need `make ctest`'s build/tests/fake_pjrt_plugin.so (whose executables
serialise as "FAKEEXE1..."); the C test Precompile_RoundTripThroughThePluginsDeserialize reads
such an entry back and hands it to the plugin's deserialize. The libtpu test is slow."""

from __future__ import annotations

import os
import struct
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

import torch_tpu
from torch_tpu import TpuBackend

ROOT = Path(__file__).resolve().parent.parent
FAKE = ROOT / "build" / "tests" / "fake_pjrt_plugin.so"
needs_fake = pytest.mark.skipif(not FAKE.exists(), reason=f"{FAKE} is built by `make ctest`")

SCRIPT = """
import torch
import torch_tpu
from torch import nn

x = torch.arange(8.0, device="tpu")
y = (x * 3 + 1).exp().sum()
print("RESULT", y.item())


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(8, 8)

    def forward(self, h):
        return h + self.lin(h).tanh()


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList(Block() for _ in range(3))

    def forward(self, h):
        for block in self.blocks:
            h = block(h)
        return h.sum(-1)


model = Model().to("tpu")
torch_tpu.mark_repeated_blocks(model)
backend = torch_tpu.TpuBackend()
compiled = torch.compile(model, backend=backend, dynamic=False)
with torch.no_grad():
    out = compiled(torch.ones(2, 8, device="tpu"))
print("COMPILED", out.shape, backend.region_calls, backend.region_bodies)
"""


def entries(d: Path) -> list[tuple[bytes, bytes]]:
    """(header magic, payload) of each executable entry in |d| (the 128-byte header of disk_cache.c)."""
    out = []
    for f in sorted(d.glob("*.tpuexe")):
        data = f.read_bytes()
        (payload_size,) = struct.unpack_from("<Q", data, 32)
        out.append((data[:8], data[128 : 128 + payload_size]))
    return out


def precompile(tmp_path: Path, target: str, script: str, plugin: str | None, timeout: int) -> str:
    path = tmp_path / "script.py"
    path.write_text(script)
    env = {**os.environ, "TPU_SKIP_MDS_QUERY": "1"}
    env.pop("TORCH_TPU_TARGET", None)
    if plugin:
        env["TORCH_TPU_TARGET_PLUGIN"] = plugin
    cmd = [sys.executable, "-m", "torch_tpu", "precompile", "--target", target]
    cmd += ["--cache-dir", str(tmp_path / "d"), str(path)]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
    return out.stdout


@needs_fake
def test_precompile_fills_the_cache_dir_with_the_targets_executables_only(tmp_path):
    out = precompile(tmp_path, "fake:1x1", SCRIPT, str(FAKE), 120)
    assert "RESULT" in out  # the script ran here, on this host's plugin
    # the compiled model's 3 marked blocks: one region traced, one block program
    assert "COMPILED torch.Size([2]) 3 1" in out
    line = next(ln for ln in out.splitlines() if ln.startswith("precompiled "))
    count = int(line.split()[1])
    assert count >= 4, out  # the eager ops, the block's program and the graphs around it
    found = entries(tmp_path / "d")
    # every entry is the target's (the fake plugin's serialised executable), none is this
    # plugin's own: a TPU host imports the directory whole
    assert len(found) == count, out
    assert all(magic == b"TPURTEXE" and payload.startswith(b"FAKEEXE1") for magic, payload in found)
    assert "cache import" in out
    # a second run compiles nothing for the target: figures and executables are there
    again = precompile(tmp_path, "fake:1x1", SCRIPT, str(FAKE), 120)
    line = next(ln for ln in again.splitlines() if ln.startswith("precompiled "))
    assert f"({count} were there already" in line
    assert len(entries(tmp_path / "d")) == count


def test_precompile_without_a_writable_cache_dir_says_so(tmp_path):
    script = tmp_path / "s.py"
    script.write_text("pass\n")
    env = {**os.environ, "TORCH_TPU_CACHE_DIR": "0"}
    out = subprocess.run(
        [sys.executable, "-m", "torch_tpu", "precompile", "--target", "v6e:1x1", str(script)],
        env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert out.returncode != 0
    assert "precompile needs a cache directory" in out.stderr


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(16, 32)
        self.b = nn.Linear(32, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.b(self.a(x).relu())


class Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.blocks = nn.ModuleList([Block() for _ in range(3)])
        self.out = nn.Linear(16, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for b in self.blocks:
            x = b(x)
        return self.out(x)


@pytest.fixture
def fake_target():
    torch_tpu.set_target("fake:1x1", plugin=str(FAKE))
    yield
    torch_tpu.set_target(None)
    torch._dynamo.reset()


@needs_fake
def test_target_only_compiles_from_shapes_alone_for_the_target(fake_target):
    """A model on the meta device (no weights) compiles for the target; nothing is compiled
    for this host's plugin, and outputs are meta tensors of the traced shapes."""
    torch._dynamo.reset()
    with torch.device("meta"):
        model = Model()
    backend = TpuBackend(target_only=True)
    compiled = torch.compile(model, backend=backend, dynamic=False)
    torch_tpu.reset_metrics()
    with torch.no_grad():
        out = compiled(torch.empty(2, 16, device="meta"))
    assert out.device.type == "meta" and out.shape == (2, 4)
    m = torch_tpu.metrics()
    assert m["compiles"] == 0  # this plugin compiled nothing
    assert m["traced_programs"] == {"block (target only)": 1, "compiled graph (target only)": 1}
    report = torch_tpu.target_report()
    assert len(report.compiled) == 2 and not report.failed
    labels = {p["label"] for p in report.programs}
    assert any("block" in label for label in labels), labels
    # the block's program serves all three blocks: counted as three calls
    block = next(label for label in labels if "block" in label)
    assert backend.target_runs[block] == 3


@needs_fake
def test_a_target_only_program_cannot_run_here(fake_target):
    torch._dynamo.reset()
    model = Block().to("tpu")
    compiled = torch.compile(model, backend=TpuBackend(target_only=True), dynamic=False)
    with torch.no_grad():
        out = compiled(torch.randn(2, 16, device="tpu"))
    assert out.device.type == "meta"  # never ran: shapes only


@pytest.mark.slow
def test_precompile_the_tiny_flux_pipeline_for_v6e(tmp_path):
    from torch_tpu import _discovery

    if not _discovery.libtpu_path():
        pytest.skip("libtpu is not installed (pip install libtpu)")
    script = (
        "import torch, torch_tpu\n"
        "from torch_tpu.testing.tiny import flux_pipeline\n"
        "pipe = flux_pipeline('tiny')\n"
        "pipe.transformer.to('tpu'); pipe.vae.to('tpu')\n"
        "pipe.enable_tpu_compile()\n"
        "pipe.tpu_warmup(prompt='a cat', height=64, width=64, num_inference_steps=2, guidance_scale=0.0)\n"
    )
    out = precompile(tmp_path, "v6e:1x1", script, None, 900)
    line = next(ln for ln in out.splitlines() if ln.startswith("precompiled "))
    count = int(line.split()[1])
    assert count >= 2, out
    found = entries(tmp_path / "d")
    assert len(found) == count and all(magic == b"TPURTEXE" and payload for magic, payload in found)
