"""Compile-only targets and shadow compilation.

A *target* is a PJRT plugin plus a topology name (``"v6e:1x1"``, ``"v5e:2x2"``): programs
compile for it with no client and no chip, so nothing compiled for it runs here. With a target
set (``TORCH_TPU_TARGET=v6e:1x1``, :func:`set_target` or the :func:`target` context manager),
every program the process compiles for its own plugin is also compiled for the target, and
:func:`target_report` says what the target's compiler made of them: which compiled and which it
refused (with the aten op), the compiler's cost analysis, its run-time *estimate*, and the chip
memory each program needs. The estimate is the compiler's model, never a measurement.

The default target plugin is libtpu (``pip install libtpu``); ``TORCH_TPU_TARGET_PLUGIN`` names
another.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
from collections import Counter
from collections.abc import Iterator, Sequence
from typing import Any

from torch_tpu import _discovery

ENV_TARGET = "TORCH_TPU_TARGET"
ENV_PLUGIN = "TORCH_TPU_TARGET_PLUGIN"

GiB = 1 << 30


@dataclasses.dataclass(frozen=True)
class Chip:
    """Public per-chip figures, for the report's arithmetic (not from the plugin)."""

    name: str
    hbm_bytes: int
    bf16_peak_flops: float  # dense bf16 FLOP/s


# Keyed by the device kind the plugin reports.
CHIPS: dict[str, Chip] = {
    "TPU v5 lite": Chip("v5e", 16 * GiB, 197e12),
    "TPU v6 lite": Chip("v6e", 32 * GiB, 918e12),
    "TPU v5": Chip("v5p", 95 * GiB, 459e12),
    "TPU v5p": Chip("v5p", 95 * GiB, 459e12),
    "TPU v4": Chip("v4", 32 * GiB, 275e12),
}

# Topology names known to compile with libtpu here (measured with libtpu 0.0.52).
KNOWN_TOPOLOGIES = ("v5e:1x1", "v5e:2x2", "v6e:1x1", "v6e:2x2", "v5p:2x2x1", "v4:2x2x1")


def chip_of(device_kind: str) -> Chip | None:
    return CHIPS.get(device_kind)


def target_plugin() -> str:
    """The plugin targets compile with: TORCH_TPU_TARGET_PLUGIN, else libtpu's .so."""
    path = os.environ.get(ENV_PLUGIN) or _discovery.libtpu_path()
    if not path:
        raise RuntimeError(
            "torch_tpu: no plugin to compile for a TPU target: `pip install libtpu` "
            f"(it compiles without a TPU attached) or set {ENV_PLUGIN}=/path/to/libtpu.so"
        )
    return path


class Target:
    """A compile-only target: ``Target("v6e:1x1").compile(mlir_text)`` -> the compiler's figures."""

    def __init__(self, topology: str, plugin: str | None = None) -> None:
        from torch_tpu import _C

        _discovery.prepare_plugin_env()
        self._handle = _C._target_create(plugin or target_plugin(), topology)
        self.info: dict[str, Any] = self._handle.info()

    @property
    def chip(self) -> Chip | None:
        return chip_of(self.info["device_kind"])

    def compile(self, mlir: str) -> dict[str, Any]:
        """Compiles StableHLO text; returns compile_seconds, flops, bytes_accessed,
        estimated_seconds (None: the compiler gives no estimate), memory (bytes per chip)."""
        return self._handle.compile(mlir)

    def __repr__(self) -> str:
        return f"Target({self.info['topology']!r}: {self.info['num_devices']} x {self.info['device_kind']})"


def set_target(topology: str | None, plugin: str | None = None) -> None:
    """Shadow-compile every program of this process for |topology| from now on (None: stop).
    Programs are then lowered for the target's platform. Records start empty."""
    from torch_tpu import _C

    if topology is None:
        _C._shadow_set(None)
        return
    _C._shadow_set(Target(topology, plugin)._handle)


def set_precompile(on: bool) -> None:
    """Precompile for the shadow target (set_target): from now on each one-device program compiled
    for the target is also written, serialised, into this process's executable cache directory
    (``TORCH_TPU_CACHE_DIR``) under the key that a process running on the target's plugin computes
    for it, and this plugin's own programs stay in memory: the directory then holds what a TPU host
    loads without compiling (``python -m torch_tpu precompile`` does this for a script). Once on,
    this plugin's programs stay out of the directory until the process ends, after ``False`` too.

    The key a TPU host computes, and so what must match, exactly: the plugin's path (libtpu
    installed at the same path), its PJRT API version, its platform name and version (taken here
    from the topology: that the TPU client reports the same version is assumed, not proven
    without a chip), torch_tpu's version, the compile options' bytes (``TORCH_TPU_XLA_OPTIONS``
    and ``TpuBackend(**options)``), and the program text byte for byte (programs are lowered for
    the target's platform here, as on the TPU host). The topology is not in the runtime's key:
    precompile for the chips the host has. SPMD programs are not precompiled (their device
    assignment names the target's device ids)."""
    from torch_tpu import _C

    _C._shadow_set_precompile(bool(on))


def get_target() -> dict[str, Any] | None:
    """The shadow target's facts (topology, device kind, chips), or None."""
    from torch_tpu import _C

    return _C._shadow_info()


@contextlib.contextmanager
def target(topology: str, plugin: str | None = None) -> Iterator[None]:
    """``with torch_tpu.target("v6e:1x1"): ...``: shadow compilation inside the block, then the
    previous target (by name) or none. Read :func:`target_report` inside the block."""
    before = get_target()
    set_target(topology, plugin)
    try:
        yield
    finally:
        if before is None:
            set_target(None)
        else:
            set_target(before["topology"], before["plugin_path"])


def hbm_need(record: dict[str, Any]) -> int | None:
    """Chip memory one program needs: arguments + outputs - aliased + temporaries + code."""
    m = record.get("memory")
    if not m:
        return None
    held = m["argument_bytes"] + m["output_bytes"] - m["alias_bytes"]
    return held + m["temp_bytes"] + m["generated_code_bytes"]


# TPU arrays are laid out in tiles, and a program's argument bytes count the padding, so a bound
# on them at small or odd widths must pad too. At most: a rank >= 2 array's two minor dims pad to
# (8, 128), a 1-d array to 1,024 elements (libtpu 0.0.52 on v5e; it may pick a layout that pads
# less, e.g. a short 1-d array pads only to 128 elements, or swap two minor dims).
_TILE_2D = (8, 128)
_TILE_1D = 1024


def tiled_bytes(shape: Sequence[int], itemsize: int) -> int:
    """At most the bytes an array of |shape| (|itemsize| bytes per element) takes on a TPU, tiles padded."""
    dims = list(shape) or [1]

    def up(n: int, m: int) -> int:
        return -(-n // m) * m

    if len(dims) == 1:
        return up(dims[0], _TILE_1D) * itemsize
    outer = math.prod(dims[:-2])
    return outer * up(dims[-2], _TILE_2D[0]) * up(dims[-1], _TILE_2D[1]) * itemsize


def tp_argument_bounds(module: Any, inputs: Any, parts: int, plan: Any = None) -> dict[str, int]:
    """Per-chip argument byte bounds for |module| split |parts| ways by its TP plan (see
    torch_tpu.distributed.tp_split_dims) and called on |inputs| (tensors, or a dict of them):
    ``dense`` = sharded/parts + replicated + inputs, in plain bytes; ``tiled`` = the same with each
    chip's piece of every tensor padded to TPU tiles (:func:`tiled_bytes`)."""
    from torch_tpu.distributed import tp_split_dims

    split = tp_split_dims(module, parts, plan)
    out = {"sharded": 0, "replicated": 0, "inputs": 0, "tiled": 0}
    for t in list(module.parameters()) + list(module.buffers()):
        dim = split.get(id(t), ("", None))[1]
        shape = list(t.shape)
        if dim is not None:
            shape[dim] //= parts
        out["sharded" if dim is not None else "replicated"] += t.numel() * t.element_size()
        out["tiled"] += tiled_bytes(shape, t.element_size())
    values = inputs.values() if isinstance(inputs, dict) else inputs
    for v in values:
        if hasattr(v, "shape"):
            out["inputs"] += v.numel() * v.element_size()
            out["tiled"] += tiled_bytes(v.shape, v.element_size())
    out["dense"] = out["sharded"] // parts + out["replicated"] + out["inputs"]
    return out


def _short_reason(error: str) -> str:
    """The compiler's words without our context prefixes, first line, for grouping."""
    text = error.splitlines()[0] if error else ""
    for marker in ("): ", ": "):
        if text.startswith("compiling for target") and marker in text:
            text = text.split(marker, 1)[1]
            break
    return text[:200]


@dataclasses.dataclass
class TargetReport:
    target: dict[str, Any] | None
    programs: list[dict[str, Any]]

    @property
    def compiled(self) -> list[dict[str, Any]]:
        return [p for p in self.programs if p["error"] is None]

    @property
    def failed(self) -> list[dict[str, Any]]:
        return [p for p in self.programs if p["error"] is not None]

    def failures_by_reason(self) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        for p in self.failed:
            out.setdefault(_short_reason(p["error"]), []).append(p["label"])
        return out

    @property
    def estimated_device_seconds(self) -> float:
        """Sum over programs with an estimate of runs x the compiler's estimate (an estimate)."""
        return sum(p["runs"] * p["estimated_seconds"] for p in self.compiled if p["estimated_seconds"])

    @property
    def runs_without_estimate(self) -> int:
        return sum(p["runs"] for p in self.compiled if p["estimated_seconds"] is None)

    @property
    def compile_seconds(self) -> float:
        return sum(p["compile_seconds"] for p in self.programs)

    @property
    def largest(self) -> dict[str, Any] | None:
        sized = [p for p in self.compiled if hbm_need(p) is not None]
        return max(sized, key=lambda p: hbm_need(p) or 0) if sized else None

    @property
    def chip(self) -> Chip | None:
        return chip_of(self.target["device_kind"]) if self.target else None

    def __str__(self) -> str:
        if not self.target:
            return "torch_tpu target report: no target set (TORCH_TPU_TARGET or torch_tpu.set_target)"
        t = self.target
        chip = self.chip
        major, minor = t["api_version"]
        cached = sum(1 for p in self.programs if p["from_cache"])
        lines = [
            f"target {t['topology']}: {t['num_devices']} x {t['device_kind']} "
            f"(compile only, via {os.path.basename(t['plugin_path'])} {major}.{minor})",
            f"  programs: {len(self.programs)} distinct, {len(self.compiled)} compile, "
            f"{len(self.failed)} refused ({cached} from the persistent cache)",
        ]
        for reason, labels in sorted(self.failures_by_reason().items(), key=lambda kv: -len(kv[1])):
            ops = Counter(labels).most_common(5)
            lines.append(f"    refused x{len(labels)}: {reason}  [{', '.join(f'{o} x{n}' for o, n in ops)}]")
        runs = sum(p["runs"] for p in self.compiled)
        no_est = self.runs_without_estimate
        est_ms = self.estimated_device_seconds * 1e3
        lines.append(
            f"  estimated device time (the compiler's estimate, not measured): {est_ms:.3f} ms"
            f" over {runs - no_est} runs" + (f"; {no_est} runs have no estimate" if no_est else "")
        )
        big = self.largest
        if big is not None:
            need = hbm_need(big) or 0
            cap = ""
            if chip:
                cap = f" of {chip.hbm_bytes / GiB:.0f} GiB HBM ({100 * need / chip.hbm_bytes:.1f}%)"
            lines.append(f"  largest program: {need / GiB:.3f} GiB per chip{cap}: {big['label'][:80]}")
        lines.append(f"  compile time for the target: {self.compile_seconds:.2f} s")
        return "\n".join(lines)


def target_report() -> TargetReport:
    """What the shadow target's compiler said about every distinct program since the target was set."""
    from torch_tpu import _C

    return TargetReport(target=get_target(), programs=list(_C._shadow_records()))


def reset_target_report() -> None:
    from torch_tpu import _C

    _C._shadow_reset()


def available_topologies(plugin: str | None = None) -> list[str]:
    """The known topology names this host's target plugin accepts (each made, then dropped)."""
    from torch_tpu import _C

    try:
        path = plugin or target_plugin()
    except RuntimeError:
        return []
    _discovery.prepare_plugin_env()
    ok = []
    for name in KNOWN_TOPOLOGIES:
        try:
            _C._target_create(path, name)
        except RuntimeError:
            continue
        ok.append(name)
    return ok
