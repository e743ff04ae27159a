"""diffusers on "tpu": the seed's examples (strict eager, fused eager, compiled)
on tiny offline pipelines, each image against the same pipeline on CPU, with
the denoiser and VAE on tpu and the text encoders on CPU; the methods that
``import torch_tpu`` adds to ``DiffusionPipeline``."""

from __future__ import annotations

import contextlib
import logging
import time

import numpy as np
import pytest
import torch

import torch_tpu
from torch_tpu import EagerMode

pytest.importorskip("diffusers")
pytest.importorskip("transformers")

from diffusers import DiffusionPipeline  # noqa: E402
from diffusers.models.attention_processor import Attention, AttnProcessor, AttnProcessor2_0  # noqa: E402
from diffusers.utils.torch_utils import randn_tensor  # noqa: E402

from torch_tpu.testing.tiny import flux_pipeline, sd_pipeline  # noqa: E402

PROMPT = "a photo of a cat"
SIZE = 32  # pixels: 16x16 latents with the tiny 2x VAE
STEPS = 2
KINDS = ("flux", "sd")
MODES = ("strict", "fused", "compiled")
PIXEL_TOL = 1e-3  # float32 pixels in [0, 1]


def build(kind: str, dtype: torch.dtype = torch.float32):
    return flux_pipeline("tiny", dtype) if kind == "flux" else sd_pipeline("tiny", dtype)


def split(pipe):
    """The seed's placement: denoiser and VAE on tpu, text encoders stay on CPU."""
    denoiser = pipe.transformer if hasattr(pipe, "transformer") else pipe.unet
    denoiser.to("tpu")
    pipe.vae.to("tpu")
    return pipe


def call_kwargs(kind: str, **overrides):
    kw = dict(prompt=PROMPT, height=SIZE, width=SIZE, num_inference_steps=STEPS)
    if kind == "flux":
        kw.update(guidance_scale=0.0, max_sequence_length=32)
    kw.update(overrides)
    return kw


def generate(pipe, kind: str, output_type: str, **overrides):
    kw = call_kwargs(kind, **overrides)
    return pipe(**kw, generator=torch.Generator().manual_seed(0), output_type=output_type).images


def pixels(images, output_type: str) -> torch.Tensor:
    """Images as float pixels in [0, 1], on CPU."""
    if output_type == "pt":
        return images.cpu()
    return torch.from_numpy(np.stack([np.asarray(im, dtype=np.float32) / 255.0 for im in images]))


def mode_context(mode: str):
    if mode == "fused":
        return torch_tpu.eager_mode(EagerMode.DEFER_AND_FUSE)
    return contextlib.nullcontext()


# One CPU reference, one eager tpu pipeline and one compiled tpu pipeline per
# kind, shared by the module's tests (compiling is what takes time).


@pytest.fixture(scope="module")
def references():
    cache: dict = {}

    def get(kind: str, output_type: str, **overrides):
        key = (kind, output_type, tuple(sorted(overrides.items())))
        if key not in cache:
            cache[key] = pixels(generate(build(kind), kind, output_type, **overrides), output_type)
        return cache[key]

    return get


@pytest.fixture(scope="module")
def pipelines():
    cache: dict = {}

    def get(kind: str, mode: str):
        key = (kind, mode == "compiled")
        if key not in cache:
            pipe = split(build(kind))
            if mode == "compiled":
                assert pipe.enable_tpu_compile()
                pipe.tpu_warmup(**call_kwargs(kind), generator=torch.Generator().manual_seed(0))
            cache[key] = pipe
        return cache[key]

    return get


@pytest.mark.parametrize("output_type", ["pt", "pil"])
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("kind", KINDS)
def test_pipeline_matches_cpu(kind, mode, output_type, pipelines, references):
    pipe = pipelines(kind, mode)
    expected = references(kind, output_type)
    assert pipe._execution_device.type == "tpu"
    torch_tpu.reset_metrics()
    with mode_context(mode):
        start = time.perf_counter()
        images = generate(pipe, kind, output_type)
        torch.tpu.synchronize()
        seconds = time.perf_counter() - start
    m = torch_tpu.metrics()
    assert m["cpu_fallbacks"] == {}, m["cpu_fallbacks"]
    if mode == "compiled":  # tpu_warmup ran at this height/width/steps: nothing left to compile
        assert m["compiles"] == 0, m
    if output_type == "pt":
        assert images.device.type == "tpu"
    actual = pixels(images, output_type)
    assert actual.shape == expected.shape
    # PIL rounds to 1/255 steps: a value on a rounding boundary may land one step away.
    tol = PIXEL_TOL if output_type == "pt" else 1 / 255 + 1e-6
    diff = (actual - expected).abs().max().item()
    assert diff <= tol, f"max abs diff {diff:.3e} ({kind}, {mode}, {output_type}, {seconds:.3f} s)"


@pytest.mark.parametrize("kind", KINDS)
def test_new_resolution_recompiles_and_logs_the_cause(kind, pipelines, references, caplog):
    pipe = pipelines(kind, "compiled")
    torch_tpu.reset_metrics()
    with caplog.at_level(logging.WARNING, logger="torch_tpu.compile"):
        images = generate(pipe, kind, "pt", height=2 * SIZE, width=SIZE)
    assert torch_tpu.metrics()["compiles"] > 0
    assert torch_tpu.metrics()["cpu_fallbacks"] == {}
    messages = [r.getMessage() for r in caplog.records if r.name == "torch_tpu.compile"]
    assert any("recompil" in msg and "->" in msg for msg in messages), messages
    # the component by its pipeline name, and the changed input by its name
    denoiser = "transformer" if kind == "flux" else "unet"
    assert any(f"{denoiser}.forward" in msg and "frame" not in msg for msg in messages), messages
    changed = "kwargs.hidden_states:" if kind == "flux" else "args[0]:"
    assert any(changed in msg for msg in messages), messages
    expected = references(kind, "pt", height=2 * SIZE, width=SIZE)
    assert (images.cpu() - expected).abs().max().item() <= PIXEL_TOL


def test_methods_are_on_every_pipeline():
    from diffusers import FluxPipeline, StableDiffusionPipeline

    for cls in (DiffusionPipeline, FluxPipeline, StableDiffusionPipeline):
        assert callable(cls.enable_tpu_compile) and callable(cls.tpu_warmup)


def test_execution_device_and_split_text_encoders(no_fallback):
    """diffusers 0.42.1 sends SD's token ids to the execution device: the
    encoders still receive them on CPU and the embeddings end up on tpu."""
    pipe = split(build("sd"))
    assert pipe._execution_device == torch.device("tpu:0")
    assert pipe.text_encoder.device.type == "cpu"
    embeds, _ = pipe.encode_prompt(PROMPT, pipe._execution_device, 1, False)
    assert embeds.device.type == "tpu"
    expected, _ = build("sd").encode_prompt(PROMPT, torch.device("cpu"), 1, False)
    assert torch.equal(embeds.cpu(), expected)


def test_cpu_generator_noise_is_bit_identical(no_fallback):
    shape = (1, 4, 16, 16)
    expected = randn_tensor(shape, generator=torch.Generator().manual_seed(7), device=torch.device("cpu"))
    actual = randn_tensor(shape, generator=torch.Generator().manual_seed(7), device=torch.device("tpu"))
    assert actual.device.type == "tpu"
    assert torch.equal(actual.cpu(), expected)


def test_on_device_generator(no_fallback):
    pipe = split(build("flux"))

    def run(seed):
        g = torch.Generator(device="tpu").manual_seed(seed)
        return pipe(**call_kwargs("flux"), generator=g, output_type="pt").images.cpu()

    a, b, c = run(0), run(0), run(1)
    assert torch.equal(a, b)
    assert not torch.equal(a, c)
    assert a.isfinite().all() and a.min() >= 0 and a.max() <= 1


def legacy_processors(module):
    return [type(m.processor) for m in module.modules() if type(m) is Attention]


def test_attention_processors_swapped_only_on_legacy_attention():
    from diffusers.models.transformers.transformer_flux import FluxAttention, FluxAttnProcessor

    sd = split(build("sd"))
    assert set(legacy_processors(sd.unet)) == {AttnProcessor2_0}
    assert set(legacy_processors(sd.vae)) == {AttnProcessor2_0}
    sd.enable_tpu_compile()
    assert set(legacy_processors(sd.unet)) == {AttnProcessor}  # every one swapped
    assert set(legacy_processors(sd.vae)) == {AttnProcessor}

    flux = split(build("flux"))
    flux.enable_tpu_compile()
    assert set(legacy_processors(flux.vae)) == {AttnProcessor}  # the VAE's mid-block
    flux_attention = [m for m in flux.transformer.modules() if isinstance(m, FluxAttention)]
    assert flux_attention and all(type(m.processor) is FluxAttnProcessor for m in flux_attention)
    assert not legacy_processors(flux.transformer)


def test_swap_can_be_turned_off():
    sd = split(build("sd"))
    sd.enable_tpu_compile(swap_attention_processors=False)
    assert set(legacy_processors(sd.unet)) == {AttnProcessor2_0}


def test_compiles_only_the_named_component_and_is_idempotent():
    pipe = split(build("flux"))
    assert pipe.enable_tpu_compile(model_names=["transformer"]) == ["transformer"]
    assert isinstance(pipe.transformer, torch._dynamo.eval_frame.OptimizedModule)
    assert not isinstance(pipe.vae, torch._dynamo.eval_frame.OptimizedModule)
    compiled = pipe.transformer
    assert pipe.enable_tpu_compile() == ["vae"]  # the transformer is skipped: already compiled
    assert pipe.transformer is compiled
    assert pipe.enable_tpu_compile() == []
    assert pipe.components["transformer"] is compiled


def test_unknown_component_name_raises():
    pipe = split(build("flux"))
    with pytest.raises(ValueError, match="unknown components.*'unet'"):
        pipe.enable_tpu_compile(model_names=["unet"])
    with pytest.raises(ValueError, match="not on 'tpu'"):
        pipe.enable_tpu_compile(model_names=["text_encoder"])


def test_nothing_on_tpu_warns_and_does_nothing():
    pipe = build("flux")
    before = dict(pipe.components)
    with pytest.warns(UserWarning, match="no component .* is on 'tpu'"):
        assert pipe.enable_tpu_compile() == []
    assert pipe.components == before


def test_warmup_with_invalid_arguments_raises_diffusers_error():
    pipe = split(build("flux"))
    with pytest.raises(ValueError, match="Provide either `prompt` or `prompt_embeds`"):
        pipe.tpu_warmup(prompt=None, height=SIZE, width=SIZE, num_inference_steps=STEPS)


def test_float32_text_encoders_with_bfloat16_denoiser_raise_a_clear_error():
    pipe = build("flux")
    pipe.transformer.to("tpu", torch.bfloat16)
    pipe.vae.to("tpu", torch.bfloat16)
    with pytest.raises(TypeError, match=r"bfloat16 weights but received torch.float32 latents.*text encoder"):
        generate(pipe, "flux", "pt")


@pytest.mark.slow
def test_bfloat16_text_encoders_on_cpu_with_bfloat16_denoiser(no_fallback):
    expected = pixels(generate(build("flux", torch.bfloat16), "flux", "pt"), "pt")
    pipe = split(build("flux", torch.bfloat16))
    images = generate(pipe, "flux", "pt")
    assert images.dtype == torch.bfloat16 and images.device.type == "tpu"
    # bfloat16 rounding differs per op between the two devices; the images agree
    # to a few bfloat16 steps.
    assert (images.cpu().float() - expected.float()).abs().max().item() <= 3e-2
