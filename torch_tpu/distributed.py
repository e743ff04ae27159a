"""Tensors split over several "tpu" devices: one program, partitioned by XLA.

A :class:`Mesh` arranges device indices in a grid with named axes;
:func:`mark_sharding` splits a tpu tensor over it by a partition spec (per
tensor dim: an axis name, or ``None`` for whole), in place. Every op that
touches a sharded tensor runs as one SPMD program across the mesh (one launch);
XLA's partitioner inserts the collectives. :func:`parallelize_module` applies a
diffusers-style ``_tp_plan`` ("colwise" / "rowwise" per submodule).

The naming follows PyTorch/XLA's SPMD API (``mark_sharding(t, mesh, spec)``):
a per-tensor-dim spec is what an HLO sharding encodes; see
docs/architecture.md, "Multi-device SPMD and multi-host".
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import torch

__all__ = ["Mesh", "mark_sharding", "is_sharded", "parallelize_module", "target_sharding"]

PartitionSpec = Sequence["str | int | None"]


class Mesh:
    """Device indices laid out row-major over ``shape``, one name per axis."""

    def __init__(
        self, device_ids: Sequence[int], shape: Sequence[int], axis_names: Sequence[str] | None = None
    ) -> None:
        ids = [int(d) for d in device_ids]
        dims = tuple(int(s) for s in shape)
        names = tuple(axis_names) if axis_names is not None else tuple(f"axis{i}" for i in range(len(dims)))
        if not ids:
            raise ValueError("Mesh: no devices given")
        if not dims or any(s < 1 for s in dims):
            raise ValueError(f"Mesh: shape {dims} must have at least one axis, each of size >= 1")
        if math.prod(dims) != len(ids):
            raise ValueError(
                f"Mesh: shape {dims} holds {math.prod(dims)} devices, but {len(ids)} ids were given"
            )
        if len(set(ids)) != len(ids):
            raise ValueError(f"Mesh: device ids {ids} repeat a device")
        count = torch.tpu.device_count()
        missing = [d for d in ids if d < 0 or d >= count]
        if missing:
            raise ValueError(
                f"Mesh: device {missing[0]} does not exist: there are {count} tpu device(s) "
                "(TORCH_TPU_NUM_DEVICES sets the CPU plugin's count)"
            )
        if len(names) != len(dims) or len(set(names)) != len(names):
            raise ValueError(f"Mesh: axis names {names} must be {len(dims)} distinct names")
        self.device_ids: tuple[int, ...] = tuple(ids)
        self.shape: tuple[int, ...] = dims
        self.axis_names: tuple[str, ...] = names

    @property
    def size(self) -> int:
        return len(self.device_ids)

    def axis_index(self, axis: str | int) -> int:
        if isinstance(axis, int) and not isinstance(axis, bool):
            if not 0 <= axis < len(self.shape):
                raise ValueError(f"mesh axis {axis} does not exist (the mesh has {len(self.shape)} axes)")
            return axis
        if axis not in self.axis_names:
            raise ValueError(f"mesh axis {axis!r} does not exist (the mesh's axes are {self.axis_names})")
        return self.axis_names.index(axis)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Mesh) and (self.device_ids, self.shape, self.axis_names) == (
            other.device_ids,
            other.shape,
            other.axis_names,
        )

    def __hash__(self) -> int:
        return hash((self.device_ids, self.shape, self.axis_names))

    def __repr__(self) -> str:
        return f"Mesh(device_ids={list(self.device_ids)}, shape={self.shape}, axis_names={self.axis_names})"


def mark_sharding(tensor: torch.Tensor, mesh: Mesh, partition_spec: PartitionSpec) -> torch.Tensor:
    """Splits ``tensor`` (a whole tpu tensor) over ``mesh`` in place and returns it.

    ``partition_spec[d]`` names the mesh axis that splits dim ``d``, or is
    ``None`` to keep it whole; mesh axes no dim names hold replicas.

    A ``meta`` tensor (a model made from shapes alone) has no value to split:
    its split is recorded, and a ``TpuBackend(target_only=True)`` trace
    declares it, so the target compiles one program over the mesh's chips.
    """
    from torch_tpu import _C

    if not isinstance(tensor, torch.Tensor) or tensor.device.type not in ("tpu", "meta"):
        raise ValueError(
            f"mark_sharding: expected a tpu or meta tensor, got {type(tensor).__name__} on "
            f"{getattr(tensor, 'device', None)}"
        )
    spec = list(partition_spec)
    if len(spec) != tensor.dim():
        raise ValueError(
            f"mark_sharding: the partition spec {tuple(spec)} has {len(spec)} entries for a "
            f"{tensor.dim()}-d tensor"
        )
    axes: list[int] = []
    for d, entry in enumerate(spec):
        if entry is None:
            axes.append(-1)
            continue
        a = mesh.axis_index(entry)
        if a in axes:
            raise ValueError(f"mark_sharding: mesh axis {mesh.axis_names[a]!r} splits two dims")
        if tensor.shape[d] % mesh.shape[a] != 0:
            raise ValueError(
                f"mark_sharding: dim {d} of size {tensor.shape[d]} is not divisible by mesh axis "
                f"{mesh.axis_names[a]!r} of size {mesh.shape[a]}"
            )
        axes.append(a)
    if tensor.device.type == "meta":
        # on the tensor object itself: dynamo hands the backend the same parameter objects
        tensor._tpu_target_sharding = (tuple(mesh.shape), tuple(axes))  # type: ignore[attr-defined]
        return tensor
    _C._mark_sharding(tensor.detach(), list(mesh.device_ids), list(mesh.shape), axes)
    return tensor


def target_sharding(tensor: torch.Tensor) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
    """The split :func:`mark_sharding` recorded on a meta tensor: (mesh shape, mesh axis per
    dim, -1 for whole), or None."""
    return getattr(tensor, "_tpu_target_sharding", None)


def is_sharded(tensor: torch.Tensor) -> bool:
    """True if ``tensor``'s value is spread over several devices (a meta tensor: if a split is
    recorded for it)."""
    from torch_tpu import _C

    if tensor.device.type == "meta":
        sharding = target_sharding(tensor)
        return sharding is not None and math.prod(sharding[0]) > 1
    return bool(_C._num_shards(tensor))


def _style_dim(style: Any, name: str) -> int:
    """The weight dim a tensor-parallel style splits: colwise 0, rowwise 1.

    diffusers' packed styles (fused blocks such as Flux's proj_out) split the
    same dim; XLA's partitioner keeps any split correct, so the packing only
    changes which collectives run, never the result.
    """
    kind = style if isinstance(style, str) else type(style).__name__
    kind = kind.lower()
    if "colwise" in kind:
        return 0
    if "rowwise" in kind:
        return 1
    raise ValueError(
        f"parallelize_module: unsupported style {style!r} for {name!r} (expected 'colwise' or 'rowwise')"
    )


def _expand(module: torch.nn.Module, pattern: str) -> list[tuple[str, torch.nn.Module]]:
    if pattern.count("*") > 1:
        raise ValueError(f"parallelize_module: {pattern!r} uses '*' more than once")
    modules = dict(module.named_modules())
    if "*" not in pattern:
        if pattern not in modules:
            raise ValueError(
                f"parallelize_module: the plan names {pattern!r}, which {type(module).__name__} does not have"
            )
        return [(pattern, modules[pattern])]
    prefix, _, suffix = pattern.partition("*")
    prefix, suffix = prefix.rstrip("."), suffix.lstrip(".")
    container = modules.get(prefix)
    if not isinstance(container, torch.nn.ModuleList):
        raise ValueError(
            f"parallelize_module: {pattern!r}: {prefix!r} is not a ModuleList of {type(module).__name__}"
        )
    found = []
    for i in range(len(container)):
        name = f"{prefix}.{i}.{suffix}" if suffix else f"{prefix}.{i}"
        if name not in modules:
            raise ValueError(
                f"parallelize_module: the plan names {name!r} (from {pattern!r}), which "
                f"{type(module).__name__} does not have"
            )
        found.append((name, modules[name]))
    return found


def tp_split_dims(
    module: torch.nn.Module, parts: int, plan: Mapping[str, Any] | None = None
) -> dict[int, tuple[str, int | None]]:
    """id(tensor) -> (name, the dim split ``parts`` ways) for each tensor ``plan`` (None: the
    module's ``_tp_plan``) splits or replicates by name; tensors it does not name are absent
    (replicated). The plan is checked whole here, before :func:`parallelize_module` moves anything."""
    if plan is None:
        plan = getattr(module, "_tp_plan", None)
        if not plan:
            raise ValueError(f"parallelize_module: {type(module).__name__} has no _tp_plan; pass a plan")
    spec_of: dict[int, tuple[str, int | None]] = {}
    for pattern, style in plan.items():
        for name, sub in _expand(module, pattern):
            dim = _style_dim(style, name)
            weight = getattr(sub, "weight", None)
            if not isinstance(weight, torch.Tensor):
                raise ValueError(f"parallelize_module: {name!r} has no weight to split")
            if weight.dim() <= dim or weight.shape[dim] % parts:
                raise ValueError(
                    f"parallelize_module: {name}.weight of shape {tuple(weight.shape)} cannot be "
                    f"split {parts} ways along dim {dim}"
                )
            spec_of[id(weight)] = (f"{name}.weight", dim)
            bias = getattr(sub, "bias", None)
            if isinstance(bias, torch.Tensor):
                spec_of[id(bias)] = (f"{name}.bias", 0 if dim == 0 else None)
    return spec_of


def parallelize_module(
    module: torch.nn.Module, mesh: Mesh, plan: Mapping[str, Any] | None = None, axis: str | int = 0
) -> torch.nn.Module:
    """Shards ``module``'s parameters over ``mesh`` by a diffusers ``_tp_plan``.

    ``plan`` maps submodule names (one ``*`` may stand for every block of a
    ModuleList) to "colwise" (weight dim 0 and bias split) or "rowwise"
    (weight dim 1 split, bias replicated); ``None`` takes the module's own
    ``_tp_plan``. Parameters are split in place over mesh axis ``axis``; every
    other parameter and buffer is replicated on the mesh. The whole plan is
    checked before any parameter moves. A module on the ``meta`` device (built
    from shapes alone, for ``TpuBackend(target_only=True)``) gets each split
    recorded instead (see :func:`mark_sharding`).
    """
    a = mesh.axis_index(axis)
    spec_of = tp_split_dims(module, mesh.shape[a], plan)
    tensors = list(module.parameters()) + list(module.buffers())
    kinds = {t.device.type for t in tensors}
    if not kinds <= {"tpu"} and kinds != {"meta"}:
        raise ValueError(
            "parallelize_module: move the module to 'tpu' first (or build it on 'meta' to compile for a "
            f"target from shapes); its tensors are on {sorted(kinds)}"
        )
    for tensor in tensors:
        _, dim = spec_of.get(id(tensor), ("", None))
        spec: list[str | int | None] = [None] * tensor.dim()
        if dim is not None:
            spec[dim] = a
        mark_sharding(tensor, mesh, spec)
    return module
