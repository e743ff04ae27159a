"""Tiny diffusion models, tokenizers and pipelines, built offline.

Every builder makes its model from a config dict with seeded weights (the
global RNG is left as it was) and never touches the Hugging Face hub;
tokenizers are built in code. ``size`` picks the scale: ``"tiny"`` for tests
(each builds in well under a second), ``"small"`` for benchmarks (the same
architecture with realistic proportions: 8x VAE, 16 latent channels, wider
and deeper blocks).

The configs respect the constraints that tie a FLUX pipeline together:
``sum(axes_dims_rope) == attention_head_dim``, ``in_channels == 4 *
vae.latent_channels``, ``joint_attention_dim == T5 d_model`` and
``pooled_projection_dim == CLIP hidden_size``.

Requires ``diffusers`` and ``transformers`` (the ``diffusers`` extra).
"""

from __future__ import annotations

import string
from collections.abc import Callable
from typing import Any, Literal, TypeVar

import torch

Size = Literal["tiny", "small"]
_T = TypeVar("_T")

__all__ = [
    "Size",
    "autoencoder_kl",
    "clip_text_model",
    "clip_tokenizer",
    "euler_scheduler",
    "flow_match_scheduler",
    "flux_pipeline",
    "flux_transformer",
    "flux_transformer_inputs",
    "flux_transformer_tile_aligned",
    "flux_transformer_tile_aligned_inputs",
    "sd3_transformer",
    "sd_pipeline",
    "t5_encoder",
    "t5_tokenizer",
    "unet2d_condition",
]

# Text encoder widths: the transformers' conditioning dims must match them.
_CLIP_HIDDEN = {"tiny": 32, "small": 128}
_T5_D_MODEL = {"tiny": 32, "small": 128}
_TEXT_VOCAB = 1000  # above both tokenizers' sizes
# FLUX's latent channels (its transformer takes 2x2 packs of them).
_FLUX_LATENT = {"tiny": 4, "small": 16}


def _check_size(size: str) -> None:
    if size not in ("tiny", "small"):
        raise ValueError(f"size must be 'tiny' or 'small', got {size!r}")


def _seeded(seed: int, build: Callable[[], _T]) -> _T:
    """Runs ``build`` with the CPU RNG seeded, restoring the RNG afterwards."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return build()


def _eval(model: _T) -> _T:
    model.eval()  # type: ignore[attr-defined]
    return model


# ---------------------------------------------------------------------------
# Denoisers
# ---------------------------------------------------------------------------


def flux_transformer(size: Size = "tiny", *, latent_channels: int | None = None) -> Any:
    """A ``FluxTransformer2DModel`` (with guidance embedding, as FLUX.1-dev)."""
    from diffusers import FluxTransformer2DModel

    _check_size(size)
    if size == "tiny":
        cfg: dict[str, Any] = dict(
            patch_size=1,
            num_layers=1,
            num_single_layers=1,
            attention_head_dim=16,
            num_attention_heads=2,
            axes_dims_rope=(4, 4, 8),
        )
        latent = latent_channels or _FLUX_LATENT[size]
    else:
        cfg = dict(
            patch_size=1,
            num_layers=2,
            num_single_layers=4,
            attention_head_dim=64,
            num_attention_heads=4,
            axes_dims_rope=(16, 24, 24),
        )
        latent = latent_channels or _FLUX_LATENT[size]
    cfg.update(
        in_channels=4 * latent,  # 2x2 packed latents
        joint_attention_dim=_T5_D_MODEL[size],
        pooled_projection_dim=_CLIP_HIDDEN[size],
        guidance_embeds=True,
    )
    return _seeded(1, lambda: _eval(FluxTransformer2DModel(**cfg)))


def flux_transformer_inputs(
    size: Size = "tiny", *, device: str | torch.device = "cpu", seed: int = 0
) -> dict[str, torch.Tensor]:
    """Seeded keyword inputs for ``flux_transformer(size)`` on ``device``: 16
    image tokens (a 4x4 latent, packed), 8 text tokens, timestep 0.5 and
    guidance 3.5. The random tensors come from one generator seeded with
    ``seed``, in the order hidden, encoder, pooled."""
    _check_size(size)
    g = torch.Generator().manual_seed(seed)
    inputs = {
        "hidden_states": torch.randn(1, 16, 4 * _FLUX_LATENT[size], generator=g),
        "encoder_hidden_states": torch.randn(1, 8, _T5_D_MODEL[size], generator=g),
        "pooled_projections": torch.randn(1, _CLIP_HIDDEN[size], generator=g),
        "timestep": torch.tensor([0.5]),
        "img_ids": torch.zeros(16, 3),
        "txt_ids": torch.zeros(8, 3),
        "guidance": torch.tensor([3.5]),
    }
    return {k: v.to(device) for k, v in inputs.items()}


# A FLUX transformer whose widths keep TPU tiles full when tensor parallelism splits it 4 ways:
# each split dim is a multiple of 128 per shard (heads x head_dim = 512, so 128 per chip; the MLPs
# 2,048), and the unsplit widths are multiples of 128 too. With tiny widths the tile padding, not
# the sharding, sets a program's per-chip bytes; here they follow the sharded share.
_ALIGNED_FLUX = dict(
    patch_size=1,
    num_layers=1,
    num_single_layers=1,
    attention_head_dim=128,
    num_attention_heads=4,
    axes_dims_rope=(16, 56, 56),
    in_channels=128,
    joint_attention_dim=128,
    pooled_projection_dim=128,
    guidance_embeds=True,
)


def flux_transformer_tile_aligned() -> Any:
    """A one-block ``FluxTransformer2DModel`` at tile-aligned widths (for per-chip byte checks
    under TP over 4 TPU chips), seeded; not paired with the tiny text encoders."""
    from diffusers import FluxTransformer2DModel

    return _seeded(1, lambda: _eval(FluxTransformer2DModel(**_ALIGNED_FLUX)))


def flux_transformer_tile_aligned_inputs(
    *, device: str | torch.device = "cpu", seed: int = 0
) -> dict[str, torch.Tensor]:
    """Seeded inputs for ``flux_transformer_tile_aligned()``: 16 image and 8 text tokens."""
    g = torch.Generator().manual_seed(seed)
    width = _ALIGNED_FLUX["joint_attention_dim"]
    inputs = {
        "hidden_states": torch.randn(1, 16, _ALIGNED_FLUX["in_channels"], generator=g),
        "encoder_hidden_states": torch.randn(1, 8, width, generator=g),
        "pooled_projections": torch.randn(1, _ALIGNED_FLUX["pooled_projection_dim"], generator=g),
        "timestep": torch.tensor([0.5]),
        "img_ids": torch.zeros(16, 3),
        "txt_ids": torch.zeros(8, 3),
        "guidance": torch.tensor([3.5]),
    }
    return {k: v.to(device) for k, v in inputs.items()}


def sd3_transformer(size: Size = "tiny") -> Any:
    """An ``SD3Transformer2DModel`` (joint attention, patch embedding)."""
    from diffusers import SD3Transformer2DModel

    _check_size(size)
    if size == "tiny":
        cfg: dict[str, Any] = dict(
            sample_size=32,
            patch_size=1,
            in_channels=4,
            out_channels=4,
            num_layers=1,
            attention_head_dim=8,
            num_attention_heads=4,
            caption_projection_dim=32,
            joint_attention_dim=32,
            pooled_projection_dim=64,
        )
    else:
        cfg = dict(
            sample_size=64,
            patch_size=2,
            in_channels=16,
            out_channels=16,
            num_layers=4,
            attention_head_dim=64,
            num_attention_heads=4,
            caption_projection_dim=256,
            joint_attention_dim=256,
            pooled_projection_dim=256,
        )
    return _seeded(2, lambda: _eval(SD3Transformer2DModel(**cfg)))


def unet2d_condition(size: Size = "tiny") -> Any:
    """A ``UNet2DConditionModel`` (cross-attention down/up blocks, as SD 1.x)."""
    from diffusers import UNet2DConditionModel

    _check_size(size)
    if size == "tiny":
        cfg: dict[str, Any] = dict(
            block_out_channels=(4, 8),
            layers_per_block=1,
            sample_size=32,
            norm_num_groups=2,
            attention_head_dim=(2, 4),
            down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"),
            up_block_types=("UpBlock2D", "CrossAttnUpBlock2D"),
        )
    else:
        cfg = dict(
            block_out_channels=(64, 128, 256),
            layers_per_block=2,
            sample_size=64,
            norm_num_groups=32,
            attention_head_dim=8,
            down_block_types=("CrossAttnDownBlock2D", "CrossAttnDownBlock2D", "DownBlock2D"),
            up_block_types=("UpBlock2D", "CrossAttnUpBlock2D", "CrossAttnUpBlock2D"),
        )
    cfg.update(in_channels=4, out_channels=4, cross_attention_dim=_CLIP_HIDDEN[size])
    return _seeded(3, lambda: _eval(UNet2DConditionModel(**cfg)))


# ---------------------------------------------------------------------------
# VAE
# ---------------------------------------------------------------------------


def autoencoder_kl(
    size: Size = "tiny", *, latent_channels: int | None = None, quant_conv: bool = False
) -> Any:
    """An ``AutoencoderKL``. ``"tiny"`` has 2 blocks (the decoder upsamples
    once: 2x); ``"small"`` has 4 (8x, as FLUX's VAE). ``quant_conv=False`` is
    FLUX's layout, ``True`` SD's."""
    from diffusers import AutoencoderKL

    _check_size(size)
    if size == "tiny":
        channels: tuple[int, ...] = (8, 16)
        cfg: dict[str, Any] = dict(layers_per_block=1, norm_num_groups=4, sample_size=32)
        latent = latent_channels or 4
    else:
        channels = (32, 64, 128, 128)
        cfg = dict(layers_per_block=2, norm_num_groups=32, sample_size=128)
        latent = latent_channels or 16
    cfg.update(
        in_channels=3,
        out_channels=3,
        block_out_channels=channels,
        down_block_types=("DownEncoderBlock2D",) * len(channels),
        up_block_types=("UpDecoderBlock2D",) * len(channels),
        latent_channels=latent,
        use_quant_conv=quant_conv,
        use_post_quant_conv=quant_conv,
    )
    if not quant_conv:  # FLUX's latent normalisation
        cfg.update(shift_factor=0.0609, scaling_factor=1.5035)
    return _seeded(4, lambda: _eval(AutoencoderKL(**cfg)))


# ---------------------------------------------------------------------------
# Text encoders and tokenizers
# ---------------------------------------------------------------------------

# Characters the in-code tokenizers know; anything else is unknown.
_CHARS = string.ascii_lowercase + string.digits + ".,!?'-"


def clip_tokenizer() -> Any:
    """A character-level CLIP BPE tokenizer (no merges), padded to 77."""
    from transformers import CLIPTokenizer

    vocab: dict[str, int] = {"<|startoftext|>": 0, "<|endoftext|>": 1}
    for c in _CHARS:
        vocab.setdefault(c, len(vocab))
        vocab.setdefault(c + "</w>", len(vocab))
    return CLIPTokenizer(vocab=vocab, merges=[], model_max_length=77)


def t5_tokenizer() -> Any:
    """A character-level T5 (Unigram) tokenizer: pad 0, eos 1, unk 2."""
    from transformers import T5Tokenizer

    pieces: list[tuple[str, float]] = [("<pad>", 0.0), ("</s>", 0.0), ("<unk>", 0.0), ("\u2581", -2.0)]
    pieces += [(c, -3.0) for c in _CHARS] + [("\u2581" + c, -2.5) for c in _CHARS]
    return T5Tokenizer(vocab=pieces, extra_ids=0, model_max_length=512)


def clip_text_model(size: Size = "tiny") -> Any:
    """A ``CLIPTextModel``; it pools at the first end-of-text token (id 1)."""
    from transformers import CLIPTextConfig, CLIPTextModel

    _check_size(size)
    hidden = _CLIP_HIDDEN[size]
    cfg = CLIPTextConfig(
        bos_token_id=0,
        eos_token_id=1,
        pad_token_id=1,
        hidden_size=hidden,
        intermediate_size=37 if size == "tiny" else 4 * hidden,
        num_attention_heads=4,
        num_hidden_layers=2 if size == "tiny" else 4,
        vocab_size=_TEXT_VOCAB,
        hidden_act="gelu",
        projection_dim=hidden,
        layer_norm_eps=1e-5,
        max_position_embeddings=77,
    )
    return _seeded(5, lambda: _eval(CLIPTextModel(cfg)))


def t5_encoder(size: Size = "tiny") -> Any:
    """A ``T5EncoderModel`` with FLUX's gated-gelu feed-forward."""
    from transformers import T5Config, T5EncoderModel

    _check_size(size)
    d_model = _T5_D_MODEL[size]
    cfg = T5Config(
        d_model=d_model,
        d_kv=8 if size == "tiny" else 32,
        d_ff=37 if size == "tiny" else 4 * d_model,
        num_layers=2 if size == "tiny" else 4,
        num_heads=4,
        relative_attention_num_buckets=8 if size == "tiny" else 32,
        vocab_size=_TEXT_VOCAB,
        feed_forward_proj="gated-gelu",
        is_encoder_decoder=False,
        use_cache=False,
        pad_token_id=0,
        eos_token_id=1,
        decoder_start_token_id=0,
    )
    return _seeded(6, lambda: _eval(T5EncoderModel(cfg)))


# ---------------------------------------------------------------------------
# Schedulers and pipelines
# ---------------------------------------------------------------------------


def flow_match_scheduler() -> Any:
    """``FlowMatchEulerDiscreteScheduler()`` with its default config (FLUX, SD3)."""
    from diffusers import FlowMatchEulerDiscreteScheduler

    return FlowMatchEulerDiscreteScheduler()


def euler_scheduler(**overrides: Any) -> Any:
    """``EulerDiscreteScheduler`` with Stable Diffusion's training schedule."""
    from diffusers import EulerDiscreteScheduler

    cfg: dict[str, Any] = dict(
        num_train_timesteps=1000,
        beta_start=0.00085,
        beta_end=0.012,
        beta_schedule="scaled_linear",
        prediction_type="epsilon",
        steps_offset=1,
    )
    cfg.update(overrides)
    return EulerDiscreteScheduler(**cfg)


def flux_pipeline(size: Size = "tiny", dtype: torch.dtype = torch.float32) -> Any:
    """A ``FluxPipeline``: CLIP + T5 text encoders, FLUX transformer, a
    FLUX-layout ``AutoencoderKL`` and the flow-matching scheduler. Height and
    width must be multiples of 4 (tiny) or 16 (small)."""
    from diffusers import FluxPipeline

    _check_size(size)
    vae = autoencoder_kl(size)
    transformer = flux_transformer(size, latent_channels=vae.config.latent_channels)
    pipe = FluxPipeline(
        scheduler=flow_match_scheduler(),
        vae=vae,
        text_encoder=clip_text_model(size),
        tokenizer=clip_tokenizer(),
        text_encoder_2=t5_encoder(size),
        tokenizer_2=t5_tokenizer(),
        transformer=transformer,
    )
    if dtype != torch.float32:
        pipe.to(dtype=dtype)
    pipe.set_progress_bar_config(disable=True)
    return pipe


def sd_pipeline(size: Size = "tiny", dtype: torch.dtype = torch.float32) -> Any:
    """A ``StableDiffusionPipeline``: CLIP, ``UNet2DConditionModel``, an
    SD-layout ``AutoencoderKL`` (4 latent channels, quant convs) and the
    Euler scheduler; no safety checker."""
    from diffusers import StableDiffusionPipeline

    _check_size(size)
    pipe = StableDiffusionPipeline(
        vae=autoencoder_kl(size, latent_channels=4, quant_conv=True),
        text_encoder=clip_text_model(size),
        tokenizer=clip_tokenizer(),
        unet=unet2d_condition(size),
        scheduler=euler_scheduler(),
        safety_checker=None,
        feature_extractor=None,
        requires_safety_checker=False,
    )
    if dtype != torch.float32:
        pipe.to(dtype=dtype)
    pipe.set_progress_bar_config(disable=True)
    return pipe
