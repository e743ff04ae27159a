"""A diffusers and PyTorch user's first hour on "tpu" (issue 23): the common
paths work, and the device says what it is doing.

Each test names the item of the issue it covers. The pipelines are the tiny
offline ones of torch_tpu.testing.tiny."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import time
import warnings

import pytest
import torch

import torch_tpu
from torch_tpu import EagerMode

from conftest import devices_env

# ---- 2. torch.tpu.Event times ------------------------------------------------------------


def test_tpu_event_elapsed_time(no_fallback):
    start, end = torch.tpu.Event(enable_timing=True), torch.tpu.Event(enable_timing=True)
    assert isinstance(start, torch.tpu.Event) and isinstance(start, torch.Event)
    a = torch.randn(256, 256, device="tpu")
    start.record()
    b = a @ a
    end.record()
    end.synchronize()
    ms = start.elapsed_time(end)
    assert isinstance(ms, float) and ms >= 0.0
    assert b.cpu().shape == (256, 256)
    # A plain torch.Event on "tpu" pairs with it too, either way round it is an Event.
    plain = torch.Event(device="tpu", enable_timing=True)
    plain.record()
    plain.synchronize()
    assert start.elapsed_time(plain) >= 0.0
    with pytest.raises(TypeError, match="expected a torch.Event"):
        start.elapsed_time(object())


# ---- 3. a long compile says so, once ---------------------------------------------------------

NOTICE = "torch_tpu: compiling"


def test_long_compile_burst_says_so_once(tpu_env, capfd):
    tpu_env("TORCH_TPU_COMPILE_NOTICE_MS", "1")  # any burst is "long"
    torch_tpu.reset_metrics()  # a new burst: none of an earlier test's compiles
    x = torch.randn(3, 5, device="tpu")
    for k in range(6):  # new programs: each op at a new shape
        y = (x[: k % 3 + 1] * 2 + k).exp().sum(0)
    y.cpu()
    err = capfd.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith(NOTICE)]
    assert len(lines) == 1, err
    assert " s" in lines[0] and "aten::" in lines[0], lines[0]  # how long, and what


def test_short_compiles_say_nothing(tpu_env, capfd):
    tpu_env("TORCH_TPU_COMPILE_NOTICE_MS", "600000")
    torch_tpu.reset_metrics()  # a new burst: none of an earlier test's compiles
    x = torch.randn(7, 3, device="tpu")
    (x.sin() * 3).cpu()
    assert NOTICE not in capfd.readouterr().err


def test_compiled_graph_is_named_in_the_notice(tpu_env, capfd):
    torch._dynamo.reset()
    model = torch.nn.Linear(6, 6).to("tpu")
    x = torch.randn(2, 6, device="tpu")
    torch.tpu.synchronize()
    tpu_env("TORCH_TPU_COMPILE_NOTICE_MS", "1")
    torch_tpu.reset_metrics()  # a new burst: none of an earlier test's compiles
    time.sleep(2.1)  # a new burst: one that already said so stays quiet
    compiled = torch.compile(model, backend=torch_tpu.TpuBackend(name="block"), dynamic=False)
    compiled(x).cpu()
    err = capfd.readouterr().err
    assert "block.forward (forward graph)" in err, err


# ---- 4. recompiles are logged and counted whichever way the backend is named ------------------


@pytest.mark.parametrize("backend", ["tpu", "object"])
def test_recompiles_logged_and_counted_for_any_backend_spelling(backend, caplog):
    torch._dynamo.reset()
    torch_tpu.reset_metrics()
    model = torch.nn.Linear(16, 16).to("tpu")
    compiled = torch.compile(
        model, backend="tpu" if backend == "tpu" else torch_tpu.TpuBackend(), dynamic=False
    )
    with caplog.at_level(logging.WARNING, logger="torch_tpu.compile"):
        compiled(torch.randn(2, 16, device="tpu")).cpu()
        compiled(torch.randn(5, 16, device="tpu")).cpu()
    recompiles = torch_tpu.metrics()["recompiles"]
    assert len(recompiles) == 1 and "[2, 16] -> float32[5, 16]" in recompiles[0], recompiles
    assert any("recompiling" in r.getMessage() for r in caplog.records)


# ---- 6. noise: the report's spacing, the recompile cause of a host tensor --------------------


def test_metrics_report_keeps_a_blank_after_every_label():
    for line in torch_tpu.metrics_report().splitlines()[1:]:
        if ":" in line and not line.startswith("    ") and not line.endswith(":"):
            label, _, value = line.partition(":")
            assert value.startswith(" "), line


def test_recompile_cause_of_a_host_tensor_says_it_is_one(caplog):
    torch._dynamo.reset()
    torch_tpu.reset_metrics()

    def f(x, t):
        return x * t.to(x.device)

    compiled = torch.compile(f, backend="tpu", dynamic=False)
    with caplog.at_level(logging.WARNING, logger="torch_tpu.compile"):
        compiled(torch.randn(1, 4, device="tpu"), torch.ones(1)).cpu()
        compiled(torch.randn(2, 4, device="tpu"), torch.ones(2, 1)).cpu()
    causes = torch_tpu.metrics()["recompiles"]
    assert causes, causes
    text = causes[-1]
    assert "@cpu" not in text, text
    assert "host tensor" in text and "x: float32[1, 4] -> float32[2, 4]" in text, text


# ---- 8. the device names its platform and chip ------------------------------------------------


def test_device_name_platform_and_capability():
    info = torch_tpu._C._runtime_info()
    name = torch.tpu.get_device_name()
    props = torch.tpu.get_device_properties()
    assert props.name == name and props.platform == info["platform_name"]
    kind = torch_tpu._C._device_kind(0)
    if kind.casefold() == info["platform_name"].casefold():  # the kind says no more than the platform
        upper = info["platform_name"].upper()
        assert name == f"XLA:{upper} (PJRT {upper} plugin)"
    else:
        assert name == kind
    assert name != "cpu"
    capability = torch.tpu.get_device_capability()
    assert capability == (0, 0) and capability == torch.tpu.get_device_capability(0)


def test_profiler_self_device_column_carries_device_time(no_fallback):
    a = torch.randn(384, 384, device="tpu")
    (a @ a).cpu()  # compiled outside the trace
    acts = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.PrivateUse1]
    with torch.profiler.profile(activities=acts) as prof:
        for _ in range(3):
            b = a @ a
        b.cpu()
    rows = {e.key: e for e in prof.key_averages()}
    assert "aten::mm" in rows, sorted(rows)
    assert rows["aten::mm"].self_device_time_total > 0, rows["aten::mm"]
    assert "Self TPU" in prof.key_averages().table(row_limit=5)


# ---- 9. error texts as PyTorch's --------------------------------------------------------------

BF, F = torch.bfloat16, torch.float32


def _r(*shape, dtype=F):
    return torch.randn(*shape, dtype=dtype)


ERROR_CASES = {
    "linear": lambda: torch.nn.functional.linear(_r(2, 3, dtype=BF), _r(4, 3), _r(4)),
    "linear_3d": lambda: torch.nn.functional.linear(_r(1, 2, 3, dtype=BF), _r(4, 3), _r(4)),
    "mm": lambda: torch.mm(_r(2, 3, dtype=BF), _r(3, 4)),
    "addmm_mat1": lambda: torch.addmm(_r(2, 4), _r(2, 3, dtype=BF), _r(3, 4)),
    "addmm_self": lambda: torch.addmm(_r(2, 4, dtype=BF), _r(2, 3), _r(3, 4)),
    "addmm_rank": lambda: torch.addmm(_r(2, 4), _r(3), _r(3, 4)),
    "addmm_shape": lambda: torch.addmm(_r(2, 4), _r(2, 5), _r(3, 4)),
    "bmm": lambda: torch.bmm(_r(1, 2, 3, dtype=BF), _r(1, 3, 4)),
    "bmm_shape": lambda: torch.bmm(_r(1, 3, 4), _r(1, 3, 4)),
    "matmul_3d": lambda: torch.matmul(_r(1, 2, 3, dtype=BF), _r(1, 3, 4)),
    "baddbmm": lambda: torch.baddbmm(_r(1, 2, 4), _r(1, 2, 3, dtype=BF), _r(1, 3, 4)),
    "baddbmm_self": lambda: torch.baddbmm(_r(1, 2, 4, dtype=BF), _r(1, 2, 3), _r(1, 3, 4)),
    "addbmm": lambda: torch.addbmm(_r(2, 4), _r(1, 2, 3, dtype=BF), _r(1, 3, 4)),
    "addbmm_self": lambda: torch.addbmm(_r(2, 4, dtype=BF), _r(1, 2, 3), _r(1, 3, 4)),
    "addmv": lambda: torch.addmv(_r(2), _r(2, 3, dtype=BF), _r(3)),
    "addmv_self": lambda: torch.addmv(_r(2, dtype=BF), _r(2, 3), _r(3)),
    "dot": lambda: torch.dot(_r(3, dtype=BF), _r(3)),
}


def _on_tpu(fn):
    """Runs |fn| with every CPU tensor it makes created on tpu instead."""

    def run():
        with torch.device("tpu"):
            return fn()

    return run


@pytest.mark.parametrize("case", sorted(ERROR_CASES))
def test_error_text_is_pytorchs(case):
    fn = ERROR_CASES[case]
    with pytest.raises(RuntimeError) as cpu:
        fn()
    expected = str(cpu.value).splitlines()[0]
    with torch_tpu.cpu_fallback_mode(False), pytest.raises(RuntimeError) as tpu:
        _on_tpu(fn)()
        torch.tpu.synchronize()
    assert expected in str(tpu.value), f"cpu: {expected!r}\ntpu: {tpu.value}"


# ---- 1. model CPU offload with our hooks and accelerate's --------------------------------------

diffusers = pytest.importorskip("diffusers")
pytest.importorskip("transformers")
pytest.importorskip("accelerate")

from torch_tpu.testing.tiny import flux_pipeline  # noqa: E402

OFFLOAD_CALL = dict(
    prompt="a cat", height=32, width=32, num_inference_steps=3, guidance_scale=0.0, max_sequence_length=32
)


def _image(pipe) -> torch.Tensor:
    return pipe(**OFFLOAD_CALL, generator=torch.Generator().manual_seed(0), output_type="pt").images.cpu()


@pytest.fixture(scope="module")
def cpu_image():
    return _image(flux_pipeline("tiny"))


@pytest.mark.parametrize("mode", ["strict", pytest.param("fused", marks=pytest.mark.slow), "compiled"])
def test_model_cpu_offload_matches_cpu(mode, cpu_image, no_fallback):
    torch._dynamo.reset()
    pipe = flux_pipeline("tiny")
    pipe.enable_model_cpu_offload(device="tpu")
    if mode == "compiled":
        assert set(pipe.enable_tpu_compile()) >= {"transformer", "vae"}
        pipe.tpu_warmup(**OFFLOAD_CALL)
    if mode == "fused":
        with torch_tpu.eager_mode(EagerMode.DEFER_AND_FUSE):
            image = _image(pipe)
    else:
        image = _image(pipe)
    assert (image - cpu_image).abs().max().item() <= 1e-4
    # offloaded again after the call, as accelerate does
    assert pipe.transformer.device.type == "cpu" or next(pipe.transformer.parameters()).device.type == "cpu"
    if mode == "compiled":
        before = torch_tpu.metrics()["compiles"]
        _image(pipe)
        assert torch_tpu.metrics()["compiles"] == before  # warmed up: the programs are reused


# ---- 5. default torch.compile at a new resolution compiles static programs --------------------


def test_default_compile_new_resolution_compiles_static_programs(caplog):
    from torch_tpu.testing.tiny import flux_transformer, flux_transformer_inputs

    torch._dynamo.reset()
    torch_tpu.reset_metrics()
    model = flux_transformer("tiny").to("tpu")
    compiled = torch.compile(model)  # no backend, dynamic=None: routed to TpuBackend
    base = flux_transformer_inputs("tiny", device="tpu")

    def run(tokens: int) -> int:
        """One forward at |tokens| image tokens (a new resolution); returns its compiles."""
        inputs = dict(base)
        inputs["hidden_states"] = torch.randn(1, tokens, base["hidden_states"].shape[-1], device="tpu")
        inputs["img_ids"] = torch.zeros(tokens, 3, device="tpu")
        torch.tpu.synchronize()
        before = torch_tpu.metrics()["compiles"]
        with torch.no_grad(), caplog.at_level(logging.WARNING, logger="torch_tpu.compile"):
            compiled(**inputs).sample.cpu()
        return torch_tpu.metrics()["compiles"] - before

    run(16)
    assert run(16) == 0
    new_size = run(64)  # dynamo now marks the changed sizes symbolic
    assert not any("eagerly" in r.getMessage() for r in caplog.records), caplog.text
    # one static program, not one per op as the eager fallback compiled
    assert 1 <= new_size <= 3, new_size
    assert run(64) == 0
    assert torch_tpu.metrics()["recompiles"], "a new resolution is a recompile"


# ---- 6. no dynamo lru_cache warning at a VAE compile ------------------------------------------


def test_vae_compile_has_no_lru_cache_warning():
    from torch_tpu.testing.tiny import autoencoder_kl

    torch._dynamo.reset()
    torch._dynamo.utils.warn_once_cache.clear()
    vae = autoencoder_kl("tiny").to("tpu", torch.bfloat16)  # upsampling.py checks the torch version for bf16
    decode = torch.compile(vae.decode, backend="tpu", dynamic=False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with torch.no_grad():
            latents = torch.randn(1, vae.config.latent_channels, 8, 8, device="tpu", dtype=torch.bfloat16)
            decode(latents).sample.cpu()
    assert not [w for w in caught if "lru_cache" in str(w.message)]


# ---- 7. device_map="balanced" over "tpu" devices --------------------------------------------

BALANCED = r"""
import json, sys, torch, torch_tpu
from diffusers import FluxPipeline
from torch_tpu.testing.tiny import flux_pipeline
flux_pipeline("tiny").save_pretrained(sys.argv[1])
def image(pipe):
    return pipe("a cat", height=32, width=32, num_inference_steps=1, guidance_scale=0.0,
                generator=torch.Generator().manual_seed(0), output_type="pt").images.cpu()
pipe = FluxPipeline.from_pretrained(sys.argv[1], device_map="balanced")
out = image(pipe)
diff = (out - image(FluxPipeline.from_pretrained(sys.argv[1]))).abs().max().item()
print(json.dumps({"map": {k: str(v) for k, v in (pipe.hf_device_map or {}).items()},
                  "transformer": str(pipe.transformer.device), "diff": diff}))
"""


@pytest.mark.slow  # a fresh process compiles a whole image's ops: about 20 s here
def test_device_map_balanced_spreads_over_tpu_devices(tmp_path):
    env = {**os.environ, **devices_env(4), "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run(
        [sys.executable, "-c", BALANCED, str(tmp_path / "pipe")],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    devices = set(result["map"].values())
    assert result["map"] and all(d.startswith("tpu") for d in devices), result
    assert len(devices) > 1, result  # spread, not all on one
    assert result["transformer"].startswith("tpu"), result
    assert result["diff"] <= 1e-4, result  # the same image as the pipeline on CPU
