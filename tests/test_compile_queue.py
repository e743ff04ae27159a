"""Strict eager's launch queue (csrc/engine/queue.c): an op whose program is new is queued and
its compile goes to the compile pool, so the thread goes on and independent programs compile
side by side. Each check counts (compiles, launches from the queue, compiles in flight at once),
never times. Each runs in a child process: the pool's size is read when its first job starts."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
FAKE = ROOT / "build" / "tests" / "fake_pjrt_plugin.so"


def child(script: str, **env: str) -> subprocess.CompletedProcess:
    out = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)],
        env={**os.environ, "TORCH_TPU_CACHE_DIR": "0", "TORCH_TPU_COMPILE_NOTICE_MS": "0", **env},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return out


NEW_PROGRAMS = """
    import torch, torch_tpu
    xs = [torch.randn(3, 50 + k) for k in range(12)]
    on_tpu = [x.to("tpu") for x in xs]
    torch.tpu.synchronize()
    torch_tpu.reset_metrics()
    ys = [(x * 2 + 1).exp() for x in on_tpu]  # 3 new programs per shape, no read in between
    for x, y in zip(xs, ys):
        assert torch.allclose(y.cpu(), (x * 2 + 1).exp(), rtol=1e-5), "wrong value"
    m = torch_tpu.metrics()
    print(m["compiles"], m["queued_launches"], m["max_concurrent_compiles"])
"""


def test_new_programs_of_one_thread_compile_side_by_side():
    compiles, queued, most = map(int, child(NEW_PROGRAMS, TORCH_TPU_COMPILE_THREADS="2").stdout.split())
    assert compiles == 36
    assert queued == 36  # every op queued: the first behind its own compile, the rest behind it
    assert most >= 2  # one thread issuing, two programs compiling at once: only the queue does that


def test_no_compile_threads_compiles_at_the_op():
    compiles, queued, most = map(int, child(NEW_PROGRAMS, TORCH_TPU_COMPILE_THREADS="0").stdout.split())
    assert (compiles, queued, most) == (36, 0, 1)


def test_debug_eager_never_queues():
    script = NEW_PROGRAMS.replace(
        "ys = [", "torch_tpu.set_eager_mode(torch_tpu.EagerMode.DEFER_NEVER_AND_LAUNCH_BLOCKING)\n    ys = ["
    )
    compiles, queued, most = map(int, child(script, TORCH_TPU_COMPILE_THREADS="2").stdout.split())
    assert (compiles, queued, most) == (36, 0, 1)


@pytest.mark.skipif(not FAKE.exists(), reason=f"{FAKE} is built by `make ctest`")
def test_a_failed_compile_loses_only_what_depends_on_it():
    """The fake target refuses FFT (TORCH_TPU_TARGET_REFUSE=1), so rfft's queued compile fails.
    What does not depend on it is computed and kept; what does names the op that failed; the next
    synchronize reports it once; the device stays usable."""
    script = """
        import torch, torch_tpu
        x = torch.randn(64)
        t = x.to("tpu")
        a = t * 3             # queued: a new program
        f = torch.fft.rfft(t)  # queued: its compile is refused
        g = f.abs()           # reads the lost value
        b = a + 1             # independent, queued behind the failure
        assert torch.allclose(b.cpu(), x * 3 + 1), "an independent value was lost"
        for name, lost in (("f", f), ("g", g)):
            try:
                lost.cpu()
                raise SystemExit(f"{name} read without an error")
            except RuntimeError as e:
                print(name, str(e).splitlines()[0])
        try:
            torch.tpu.synchronize()
            raise SystemExit("synchronize did not report the failure")
        except RuntimeError as e:
            print("sync", str(e).splitlines()[0])
        torch.tpu.synchronize()  # reported once
        assert torch.allclose((t - 1).cpu(), x - 1)
        print("ok", torch_tpu.metrics()["queued_launches"])
    """
    out = child(
        script,
        TORCH_TPU_COMPILE_THREADS="2",
        TORCH_TPU_TARGET="fake:1x1",
        TORCH_TPU_TARGET_PLUGIN=str(FAKE),
        TORCH_TPU_TARGET_REFUSE="1",
    )
    lines = dict(line.split(" ", 1) for line in out.stdout.splitlines())
    for name in ("f", "g", "sync"):
        assert "aten::_fft_r2c" in lines[name] and "refused before it runs" in lines[name], lines[name]
    assert "an input's value was lost" in lines["g"], lines["g"]
    assert int(lines["ok"]) >= 1


@pytest.mark.slow  # keeps make test under 25 minutes; `pytest -m slow` runs it
def test_a_cold_first_image_compiles_its_programs_side_by_side():
    """The tiny FLUX pipeline's first image in strict eager: its independent programs compile two
    at once, and the image equals the one made compiling at the op."""
    script = """
        import torch, torch_tpu, torch_tpu.testing.tiny
        pipe = torch_tpu.testing.tiny.flux_pipeline("tiny")
        pipe.transformer.to("tpu")
        pipe.vae.to("tpu")
        torch_tpu.reset_metrics()
        out = pipe("a cat", height=64, width=64, num_inference_steps=2, guidance_scale=0.0,
                   generator=torch.Generator().manual_seed(0), output_type="pt").images
        torch.save(out, OUT)
        m = torch_tpu.metrics()
        print(m["compiles"], m["queued_launches"], m["max_concurrent_compiles"])
    """
    results = {}
    for threads in ("2", "0"):
        path = Path(os.environ.get("TMPDIR", "/tmp")) / f"tpu_first_image_{os.getpid()}_{threads}.pt"
        out = child(script.replace("OUT", repr(str(path))), TORCH_TPU_COMPILE_THREADS=threads)
        results[threads] = [int(v) for v in out.stdout.split()[-3:]]
        results[threads + "image"] = torch.load(path)
        path.unlink()
    compiles, queued, most = results["2"]
    assert compiles > 50 and queued >= compiles and most >= 2, results["2"]
    assert results["0"][0] == compiles and results["0"][1:] == [0, 1], results["0"]
    assert torch.equal(results["2image"], results["0image"])


def test_the_pieces_of_a_split_graph_compile_side_by_side():
    """A compiled graph split at its marked blocks: each piece is traced at its first call and
    its program queued; the next piece's trace goes on while it compiles (a trace waits for no
    queued launch), so pieces compile two at once. The output matches eager CPU."""
    script = """
        import torch, torch_tpu
        from torch.nn import functional as F

        class Block(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.a, self.b = torch.nn.Linear(48, 48), torch.nn.Linear(48, 48)

            def forward(self, x):
                return x + self.b(F.gelu(self.a(F.layer_norm(x, (48,)))))

        class Net(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.pre, self.post = torch.nn.Linear(16, 48), torch.nn.Linear(48, 8)
                self.blocks = torch.nn.ModuleList([Block() for _ in range(3)])

            def forward(self, x):
                x = F.silu(self.pre(x)).softmax(-1) * 3
                for block in self.blocks:
                    x = block(x)
                return self.post(F.layer_norm(x, (48,))).sigmoid()

        torch.manual_seed(0)
        model, x = Net(), torch.randn(4, 16)
        expected = model(x)
        torch_tpu.mark_repeated_blocks(model.to("tpu"))
        compiled = torch.compile(model, backend=torch_tpu.TpuBackend(), dynamic=False)
        torch.tpu.synchronize()
        torch_tpu.reset_metrics()
        with torch.no_grad():
            out = compiled(x.to("tpu")).cpu()
        assert torch.allclose(out, expected, atol=1e-5), "wrong value"
        m = torch_tpu.metrics()
        counts = m["traced_programs"]
        print(counts["compiled graph"], counts["block"], m["max_concurrent_compiles"])
    """
    pieces, blocks, most = map(int, child(script, TORCH_TPU_COMPILE_THREADS="2").stdout.split())
    assert (pieces, blocks) == (2, 1)  # before and after the blocks; one block program
    assert most >= 2  # were a trace to wait for the queue, each piece would compile alone
