"""torch_tpu as a good citizen of PyTorch: autoload leaves other devices alone,
the default torch.compile, autocast and GradScaler, memory statistics,
streams and events, pinned memory and non_blocking copies, the profiler, and
every torch.cuda-style function of the README table."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import textwrap

import pytest
import torch

import torch_tpu
from torch_tpu import TpuBackend

from conftest import TOL, assert_same

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_child(code: str, **env: str) -> str:
    """Runs |code| in a fresh interpreter where only `import torch` happens first."""
    environ = {**os.environ, "PYTHONPATH": ROOT, **env}
    environ.pop("TORCH_DEVICE_BACKEND_AUTOLOAD", None)
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env=environ,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


# ---- autoload: no side effects on other devices ----------------------------------------


def test_bare_import_torch_then_dataloader_pin_memory_on_cpu():
    out = run_child(
        """
        import torch
        from torch.utils.data import DataLoader, TensorDataset
        assert torch.accelerator.current_accelerator().type == "tpu"   # autoload registered it
        loader = DataLoader(TensorDataset(torch.randn(8, 3)), batch_size=4, pin_memory=True)
        batches = [b[0] for b in loader]
        assert len(batches) == 2 and all(b.is_pinned() and b.device.type == "cpu" for b in batches)
        assert not torch.randn(3).is_pinned()
        print("ok")
        """
    )
    assert "ok" in out


def test_dataloader_pin_memory_with_tpu_as_the_accelerator():
    run_child(
        """
        import torch
        from torch.utils.data import DataLoader, TensorDataset
        loader = DataLoader(TensorDataset(torch.randn(8, 3)), batch_size=4, pin_memory=True,
                            pin_memory_device="tpu")
        for (x,) in loader:
            assert x.is_pinned()
            y = x.to("tpu", non_blocking=True) * 2
            assert torch.equal(y.cpu(), x * 2)
        """
    )


def test_pin_memory_and_non_blocking_copy_complete_at_the_event(no_fallback):
    x = torch.arange(12.0).reshape(3, 4)
    pinned = x.pin_memory()
    assert pinned.is_pinned() and torch.equal(pinned, x)
    y = (torch.arange(12.0, device="tpu").reshape(3, 4) + 1) * 3
    host = torch.empty(3, 4).pin_memory()
    host.copy_(y, non_blocking=True)
    done = torch.Event(device="tpu")
    done.record()
    done.synchronize()
    assert done.query()
    assert torch.equal(host, (x + 1) * 3)
    # PyTorch stages a non_blocking copy to the CPU in pinned memory: like
    # CUDA, it is complete after a synchronize
    moved = y.to("cpu", non_blocking=True)
    torch.tpu.synchronize()
    assert moved.is_pinned() and torch.equal(moved, (x + 1) * 3)
    unpinned = torch.empty(3, 4)
    unpinned.copy_(y, non_blocking=True)  # ordinary memory: the copy waits
    assert torch.equal(unpinned, (x + 1) * 3)


# ---- default torch.compile -------------------------------------------------------------------


def mlp() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 8))


def test_default_torch_compile_matches_backend_tpu(no_fallback, caplog, monkeypatch):
    torch._dynamo.reset()
    # the note is given once per process: another test in this process may have had it
    monkeypatch.setattr(torch_tpu, "_compile_note_given", False)
    x = torch.randn(4, 16)
    with torch.no_grad(), caplog.at_level(logging.WARNING, logger="torch_tpu.compile"):
        default = torch.compile(mlp().to("tpu"))(x.to("tpu"))
        explicit = torch.compile(mlp().to("tpu"), backend="tpu")(x.to("tpu"))
    assert "uses TpuBackend" in caplog.text
    assert torch.equal(default.cpu(), explicit.cpu())
    assert_same(default, mlp()(x).detach(), rtol=1e-5, atol=1e-5)


def test_default_torch_compile_survives_a_batch_change(no_fallback):
    torch._dynamo.reset()
    model = torch.compile(mlp().to("tpu"))
    with torch.no_grad():
        for batch in (4, 6, 3):  # dynamo marks the batch symbolic after the first change
            x = torch.randn(batch, 16)
            assert_same(model(x.to("tpu")), mlp()(x).detach(), rtol=1e-5, atol=1e-5)


def test_default_torch_compile_leaves_cpu_graphs_to_inductor(monkeypatch):
    import torch._inductor.compile_fx as inductor

    calls = []
    monkeypatch.setattr(inductor, "compile_fx", lambda gm, inputs, **kw: calls.append(gm) or gm.forward)

    class TupleOut(torch.nn.Module):  # dynamo's graphs return tuples
        def __init__(self) -> None:
            super().__init__()
            self.body = mlp()

        def forward(self, x: torch.Tensor) -> tuple[torch.Tensor]:
            return (self.body(x),)

    gm = torch.fx.symbolic_trace(TupleOut())
    wrapper = torch._TorchCompileInductorWrapper("default", None, False)
    wrapper(gm, [torch.randn(2, 16)])
    assert calls == [gm]  # CPU inputs: inductor, untouched
    x = torch.randn(2, 16)
    tpu_gm = torch.fx.symbolic_trace(TupleOut().to("tpu"))
    routed = wrapper(tpu_gm, [x.to("tpu")])
    assert calls == [gm]  # tpu inputs never reach inductor
    assert_same(routed(x.to("tpu"))[0], TupleOut()(x)[0].detach(), rtol=1e-5, atol=1e-5)


# ---- recompile log: component name and the input that changed ---------------------------


class Block(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(16, 16)
        self.out = torch.nn.Linear(16, 4)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.out(torch.relu(self.proj(hidden)))


def test_recompile_log_names_component_and_changed_input(no_fallback, caplog):
    torch._dynamo.reset()
    backend = TpuBackend(name="transformer")
    model = torch.compile(Block().to("tpu"), backend=backend, dynamic=False)
    with torch.no_grad(), caplog.at_level(logging.WARNING, logger="torch_tpu.compile"):
        model(torch.randn(2, 16, device="tpu"))
        model(torch.randn(5, 16, device="tpu"))  # a batch change
    assert len(backend.recompiles) == 1, backend.recompiles
    cause = backend.recompiles[0]
    assert "transformer.forward" in cause and "frame" not in cause, cause
    assert "hidden: float32[2, 16] -> float32[5, 16]" in cause, cause
    assert "weight" not in cause and "bias" not in cause, cause  # the weights did not change


def test_recompile_log_without_a_name_uses_the_function(no_fallback):
    torch._dynamo.reset()
    backend = TpuBackend()
    model = torch.compile(Block().to("tpu"), backend=backend, dynamic=False)
    with torch.no_grad():
        model(torch.randn(2, 16, device="tpu"))
        model(torch.randn(3, 16, device="tpu"))
    assert "Block.forward" in backend.recompiles[0], backend.recompiles


# ---- autocast and GradScaler -------------------------------------------------------------------


def test_autocast_defaults_to_bf16_and_casts_like_cuda(no_fallback):
    assert torch.get_autocast_dtype("tpu") == torch.bfloat16
    assert torch.tpu.get_amp_supported_dtype() and torch.tpu.is_bf16_supported()
    a, b = torch.randn(8, 8, device="tpu"), torch.randn(8, 8, device="tpu")
    with torch.autocast("tpu"):
        mm = a @ b  # lower precision list
        soft = torch.softmax(mm, -1)  # fp32 list
        assert torch.tpu.is_autocast_enabled()
    assert mm.dtype == torch.bfloat16 and soft.dtype == torch.float32
    with torch.tpu.amp.autocast(dtype=torch.float16):
        assert (a @ b).dtype == torch.float16
    with torch.autocast("cpu"):  # other devices are left alone
        assert (a.cpu() @ b.cpu()).dtype == torch.bfloat16
        assert (a @ b).dtype == torch.float32


def test_tiny_flux_transformer_under_autocast_matches_cpu_autocast(no_fallback):
    pytest.importorskip("diffusers")
    from torch_tpu.testing import tiny

    outs = {}
    for device in ("cpu", "tpu"):
        model = tiny.flux_transformer("tiny").to(device)
        with torch.no_grad(), torch.autocast(device, dtype=torch.bfloat16):
            outs[device] = model(**tiny.flux_transformer_inputs(device=device), return_dict=False)[0]
    assert outs["tpu"].dtype == outs["cpu"].dtype
    assert_same(outs["tpu"].float(), outs["cpu"].float(), **TOL[torch.bfloat16])


def test_grad_scaler_trains_an_mlp_with_no_fallback(no_fallback):
    model = mlp().to("tpu")
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    scaler = torch.amp.GradScaler("tpu", init_scale=2.0**10, growth_interval=3)
    x, target = torch.randn(16, 16, device="tpu"), torch.randn(16, 8, device="tpu")
    losses = []
    for _ in range(10):
        opt.zero_grad()
        with torch.autocast("tpu"):
            loss = torch.nn.functional.mse_loss(model(x).float(), target)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        losses.append(loss.item())
    assert losses[-1] < losses[0], losses
    assert scaler.get_scale() == 2.0**13  # grew after 3, 6 and 9 clean steps


def test_amp_ops_unscale_and_back_off_on_inf(no_fallback):
    grads = [torch.tensor([2.0, 4.0], device="tpu"), torch.tensor([float("inf")], device="tpu")]
    found = torch.zeros((), device="tpu")
    torch._amp_foreach_non_finite_check_and_unscale_(grads, found, torch.full((), 0.5, device="tpu"))
    assert found.item() == 1.0 and grads[0].cpu().tolist() == [1.0, 2.0]
    clean = [torch.tensor([2.0], device="tpu")]
    found2 = torch.zeros((), device="tpu")
    torch._amp_foreach_non_finite_check_and_unscale_(clean, found2, torch.full((), 0.5, device="tpu"))
    assert found2.item() == 0.0 and clean[0].item() == 1.0
    scale, tracker = torch.full((), 8.0, device="tpu"), torch.zeros((), dtype=torch.int32, device="tpu")
    torch._amp_update_scale_(scale, tracker, found, 2.0, 0.5, 2)
    assert scale.item() == 4.0 and tracker.item() == 0
    for expected_scale, expected_tracker in ((4.0, 1), (8.0, 0)):
        torch._amp_update_scale_(scale, tracker, found2, 2.0, 0.5, 2)
        assert (scale.item(), tracker.item()) == (expected_scale, expected_tracker)


# ---- memory ----------------------------------------------------------------------------------


def test_memory_through_torch_accelerator_and_torch_tpu(no_fallback):
    torch.tpu.synchronize()
    before = torch.tpu.memory_allocated()
    assert torch.accelerator.memory_allocated() == before
    x = torch.ones(1024, 256, device="tpu") + 1  # 1 MiB computed on the device
    torch.tpu.synchronize()
    assert torch.tpu.memory_allocated() >= before + x.nbytes
    assert torch.accelerator.memory_allocated() == torch.tpu.memory_allocated()
    assert torch.accelerator.max_memory_allocated() >= torch.tpu.memory_allocated()
    stats = torch.tpu.memory_stats()
    assert stats["allocated_bytes.all.current"] == torch.tpu.memory_allocated()
    assert torch.accelerator.memory_stats()["allocated_bytes.all.current"] == torch.tpu.memory_allocated()
    assert torch.tpu.memory_reserved() >= torch.tpu.memory_allocated()
    del x
    torch.tpu.empty_cache()
    torch.accelerator.empty_cache()
    assert torch.tpu.memory_allocated() == before
    torch.tpu.reset_peak_memory_stats()
    assert torch.tpu.max_memory_allocated() == before
    torch.accelerator.reset_peak_memory_stats()
    free, total = torch.tpu.mem_get_info()
    assert 0 < free <= total and torch.tpu.get_device_properties().total_memory == total
    assert torch.accelerator.get_memory_info()[1] == total  # free memory moves between the calls


# ---- streams and events ------------------------------------------------------------------------


def test_events_time_device_work(no_fallback):
    start, end = torch.Event(device="tpu", enable_timing=True), torch.Event(device="tpu", enable_timing=True)
    x = torch.randn(256, 256, device="tpu")
    start.record()
    for _ in range(5):
        x = torch.tanh(x @ x)
    end.record()
    end.synchronize()
    assert start.query() and end.query()
    assert start.elapsed_time(end) > 0
    e = torch.tpu.Event(enable_timing=True)
    e.record()
    e.wait()
    e.synchronize()
    assert e.device.type == "tpu" and e.query()


def test_streams(no_fallback):
    default = torch.tpu.default_stream()
    assert torch.tpu.current_stream() == default and default.device.type == "tpu"
    s = torch.tpu.Stream()
    assert s != default and s.device.type == "tpu"
    with torch.tpu.stream(s):
        assert torch.tpu.current_stream() == s
        y = torch.ones(4, device="tpu") * 3
        ev = s.record_event()
    assert torch.tpu.current_stream() == default
    default.wait_event(ev)
    default.wait_stream(s)
    s.synchronize()
    assert s.query() and y.sum().item() == 12.0


# ---- profiler --------------------------------------------------------------------------------


def test_profiler_trace_has_tpu_programs_with_device_time(no_fallback, tmp_path):
    x = torch.randn(128, 128, device="tpu")
    torch.tpu.synchronize()
    with torch.profiler.profile(
        activities=[torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.PrivateUse1]
    ) as prof:
        for _ in range(3):
            x = torch.tanh(x @ x)
        x.cpu()
    path = tmp_path / "trace.json"
    prof.export_chrome_trace(str(path))
    events = json.loads(path.read_text())["traceEvents"]
    programs = [e for e in events if str(e.get("name", "")).startswith("tpu: aten::")]
    assert programs, sorted({str(e.get("name")) for e in events})[:50]
    assert any(e.get("dur", 0) > 0 for e in programs)
    args = programs[0]["args"]
    assert args["kind"] in ("compile", "cache hit") and args["ops"] > 0
    report = torch_tpu.metrics_report()
    assert "device time (s)" in report and "top programs by device time" in report


# ---- the README table: the rows not exercised above ---------------------------------------


def test_readme_table_device_rng_and_stream_functions(no_fallback):
    tpu = torch.tpu
    assert tpu.is_available() and tpu.device_count() >= 1
    assert tpu.current_device() == 0
    tpu.set_device(0)
    with tpu.device(0):
        assert tpu.current_device() == 0
    tpu.synchronize()
    assert isinstance(tpu.get_device_name(), str) and tpu.get_device_name()
    props = tpu.get_device_properties(0)
    assert props.total_memory > 0 and props.platform
    assert tpu.max_memory_reserved() >= tpu.memory_reserved() >= 0
    tpu.manual_seed(3)
    assert tpu.initial_seed() == 3
    state = tpu.get_rng_state()
    a = torch.rand(4, device="tpu")
    tpu.set_rng_state(state)
    assert torch.equal(torch.rand(4, device="tpu").cpu(), a.cpu())
    tpu.manual_seed_all(5)
    assert tpu.initial_seed() == 5
    assert isinstance(tpu.seed(), int)
    s = tpu.Stream()
    tpu.set_stream(s)
    assert tpu.current_stream() == s
    tpu.set_stream(tpu.default_stream())
    assert tpu.current_stream() == tpu.default_stream()
    scaler = torch.tpu.amp.GradScaler()
    assert scaler.is_enabled() and scaler.get_scale() == 2.0**16
