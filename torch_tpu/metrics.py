"""Counters of the runtime: compiles, cache hits, transfers, memory, CPU fallbacks."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from torch_tpu import _C

# The core's metrics in report order, name -> label: the one list of them is
# TPURT_METRICS in csrc/include/tpurt.h.
_LABELS: dict[str, str] = dict(_C._metric_labels())


# Causes of torch.compile recompiles, appended by torch_tpu.compile.
_recompiles: list[str] = []
# Programs torch.compile traced, by kind ("compiled graph", "block"; "target
# only" for compile-only traces), counted by torch_tpu.compile. Tagged in
# Python until the core counts compiles per kind.
_traced_programs: dict[str, int] = {}


# Program kinds of the per-kind compile metrics, in the order of
# tpurt_compile_kind_t (csrc/include/tpurt.h); index 0 is "auto".
COMPILE_KINDS: tuple[str, ...] = ("eager_op", "fused_graph", "compiled_graph", "block")


@contextlib.contextmanager
def compile_kind(kind: str) -> Iterator[None]:
    """Counts the programs this thread compiles inside the block under
    ``kind`` (one of ``COMPILE_KINDS``) in ``compiles_<kind>`` and
    ``compile_seconds_<kind>``, whatever compiles them (e.g. ``"block"``
    around a torch.compile of one repeated block); nests."""
    if kind not in COMPILE_KINDS:
        raise ValueError(f"compile_kind: unknown kind {kind!r}; expected one of {', '.join(COMPILE_KINDS)}")
    previous = _C._set_compile_kind(COMPILE_KINDS.index(kind) + 1)
    try:
        yield
    finally:
        _C._set_compile_kind(previous)


def metrics() -> dict[str, Any]:
    """A snapshot: the keys of ``_LABELS``, plus ``cpu_fallbacks`` (op name ->
    count), ``flushes`` (reason -> count of fused-eager graph runs) and
    ``recompiles`` (the causes of torch.compile recompiles, in order),
    ``traced_programs`` (kind -> programs torch.compile traced: "compiled
    graph", "block" for a repeated block's one program),
    ``execute_seconds`` (device time of completed launches) and ``programs``
    (name -> runs and device seconds), ``bytes_per_device`` (live buffer
    bytes on each device)."""
    m = dict(_C._metrics())
    programs, _device_ns, _runs = _C._program_stats()
    m["programs"] = {name: {"runs": runs, "seconds": ns / 1e9} for name, runs, ns in programs}
    m["flushes"] = dict(_C._flush_counts())
    m["recompiles"] = list(_recompiles)
    m["traced_programs"] = dict(_traced_programs)
    # Bytes of live buffers on each device (a sharded tensor counts its shards
    # on their own devices).
    m["bytes_per_device"] = [_C._memory_allocated(i) for i in range(_C._device_count())]
    return m


def reset_metrics() -> None:
    """Zeroes the counters (and the CPU-fallback counts); live objects stay counted."""
    _C._reset_metrics()
    _recompiles.clear()
    _traced_programs.clear()


def cache_info() -> dict[str, Any]:
    """The executable cache: ``dir`` (tier-2 directory or None), ``enabled``,
    ``refused`` (why tier 2 is off, or None), ``entries`` and ``bytes`` on
    disk, ``memory_entries``, ``memory_bytes`` and ``memory_limit_bytes``."""
    return dict(_C._cache_info())


def metrics_report() -> str:
    """The metrics as readable text, one item per line."""
    m = metrics()
    lines = ["torch_tpu metrics"]
    # Values start in one column, at least one blank after the longest label.
    width = max(24, *(len(label) + 2 for label in _LABELS.values()))

    def row(label: str, text: str) -> str:
        return f"  {label + ':':<{width}}{text}"

    per_kind = {f"compiles_{k}" for k in COMPILE_KINDS} | {f"compile_seconds_{k}" for k in COMPILE_KINDS}
    for key, label in _LABELS.items():
        if key in per_kind:  # one line for them all, below
            continue
        value = m.get(key, 0)
        text = f"{value:.3f}" if isinstance(value, float) else f"{value:,}"
        lines.append(row(label, text))
    kinds = [
        f"{k.replace('_', ' ')} {m.get(f'compiles_{k}', 0):,} ({m.get(f'compile_seconds_{k}', 0.0):.3f} s)"
        for k in COMPILE_KINDS
    ]
    lines.append(row("compiles by kind", ", ".join(kinds)))
    flushes: dict[str, int] = m.get("flushes", {})
    if flushes:
        text = ", ".join(f"{k} {v:,}" for k, v in sorted(flushes.items()))
        lines.append(row("fused graph flushes", text))
    programs: dict[str, dict[str, Any]] = m.get("programs", {})
    if programs:
        lines.append("  top programs by device time:")
        top = sorted(programs.items(), key=lambda kv: -kv[1]["seconds"])[:10]
        for name, p in top:
            lines.append(f"    {p['seconds'] * 1e3:>10.3f} ms {p['runs']:>7} runs  {name[:90]}")
    per_device: list[int] = m.get("bytes_per_device", [])
    if len(per_device) > 1:
        lines.append(row("bytes per device", ", ".join(f"{b:,}" for b in per_device)))
    traced: dict[str, int] = m.get("traced_programs", {})
    if traced:
        text = ", ".join(f"{k} {v:,}" for k, v in sorted(traced.items()))
        lines.append(row("torch.compile programs", text))
    for cause in m.get("recompiles", []):
        lines.append(f"  recompile: {cause}")
    fallbacks: dict[str, int] = m.get("cpu_fallbacks", {})
    if fallbacks:
        lines.append(f"  CPU fallbacks ({sum(fallbacks.values())} calls, {len(fallbacks)} ops):")
        for op, count in sorted(fallbacks.items(), key=lambda kv: (-kv[1], kv[0])):
            lines.append(f"    {op:<40}{count:>8}")
    else:
        lines.append(row("CPU fallbacks", "none"))
    return "\n".join(lines)
