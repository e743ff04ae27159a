"""torch.compile on "tpu": ``TpuBackend`` (also ``backend="tpu"``).

Dynamo captures the model; ``aot_autograd`` turns it into functional aten
graphs (a forward, and a backward when gradients are needed); a graph that
is never differentiated is traced as dynamo captured it (_InferenceGraph).
Each graph is run ONCE over placeholder tpu tensors in ``INTERNAL_DEFER_ALL`` mode: the same
C lowering rules that serve eager record every op into one StableHLO module,
which is compiled through the executable cache (so the persistent cache
serves it to the next process). Every later call is a single program launch:
the Python work per call is one C++ call, never per op.

Parameters and buffers are graph inputs (dynamo lifts them), so they
are neither copied nor baked into the program. Shapes are static: a new input
shape compiles a new program and logs which input changed.
"""

from __future__ import annotations

import contextlib
import copy
import logging
import re
import time
from collections import Counter
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any

import torch

from torch_tpu import _C
from torch_tpu import metrics as _metrics
from torch_tpu._internal.import_hook import after_import
from torch_tpu.distributed import target_sharding
from torch_tpu.modes import EagerMode, eager_mode

__all__ = ["TpuBackend", "mark_repeated_blocks"]

log = logging.getLogger("torch_tpu.compile")

_DYNAMIC_ERROR = (
    "TpuBackend compiles static shapes only; this graph has symbolic sizes. "
    "Use torch.compile(model, backend=TpuBackend(), dynamic=False)."
)


def _is_symbolic(x: Any) -> bool:
    if isinstance(x, (torch.SymInt, torch.SymFloat, torch.SymBool)):
        return True
    if isinstance(x, torch.Tensor):
        return any(isinstance(s, torch.SymInt) for s in x.shape)
    return False


def _describe(x: Any) -> str:
    if isinstance(x, torch.Tensor):
        return f"{str(x.dtype).removeprefix('torch.')}{list(x.shape)}@{x.device}"
    return repr(x)


def _source_name(node: torch.fx.Node) -> str:
    """The user-facing name of a dynamo graph input: ``x``, ``proj.weight``."""
    grapharg = node.meta.get("grapharg")
    if grapharg is None or getattr(grapharg, "source", None) is None:
        return node.name
    name = grapharg.source.name
    return _tidy_source(name() if callable(name) else str(name))


def _tidy_source(name: str) -> str:
    """A dynamo source as a user writes it: L['self']._modules['proj']._parameters['weight']
    (or, while dynamo saves the frame, L['self'].__dict__['_modules']['proj']...) -> proj.weight."""
    name = re.sub(r"\.__dict__\['_(modules|parameters|buffers)'\]\['([^']*)'\]", r".\2", name)
    name = re.sub(r"\._(modules|parameters|buffers)\['([^']*)'\]", r".\2", name)
    name = re.sub(r"^[LG]\['([^']*)'\]", r"\1", name)
    name = re.sub(r"\['([^']*)'\]", r".\1", name)
    return name.removeprefix("self.")


def _frame_name() -> str | None:
    """The qualified name of the function dynamo is compiling (``Transformer.forward``)."""
    try:
        from torch._dynamo.symbolic_convert import InstructionTranslator

        tx = InstructionTranslator.current_tx()
    except Exception:  # noqa: BLE001 (dynamo internals vary: the name is only for messages)
        return None
    code = getattr(tx, "f_code", None)
    name = getattr(code, "co_qualname", None) or getattr(code, "co_name", None)
    if name and "<locals>" in name:
        # torch.compile(module) traces dynamo's wrapper around the module
        # (its |fn|): name the module's forward instead.
        fn = getattr(tx, "f_locals", {}).get("fn")
        if isinstance(fn, torch.nn.Module):
            return f"{type(fn).__name__}.forward"
    return name


def _name_traced_lines_only_when_logged(symbolic_convert: ModuleType) -> None:
    """Dynamo's trace logs name the function around each traced line, and it
    finds that name by tokenizing the line's whole source file
    (``torch._dynamo.funcname_cache``). It computes the name for every FX node
    it creates even while those logs are off: 17 files, 0.65 s of the tiny
    FLUX pipeline's 5.1 s compiled warm-up on this host, paid again by every
    process (diffusers' 5,000-line attention_processor.py is among them). The
    name is only ever printed in the ``trace_call`` and ``trace_source`` logs,
    so while both are off the lookup answers None (the header then names the
    code object alone) and no file is tokenized; with either on it is
    dynamo's own. Installed when dynamo's tracer is imported (``import
    torch_tpu`` does not import dynamo)."""
    lookup = symbolic_convert.get_funcname
    logs = [symbolic_convert.trace_call_log, symbolic_convert.trace_source_log]
    if getattr(lookup, "_torch_tpu_when_logged", False):
        return

    def get_funcname(filename: str, lineno: int) -> str | None:
        if any(log_.isEnabledFor(logging.DEBUG) for log_ in logs):
            return lookup(filename, lineno)
        return None

    get_funcname._torch_tpu_when_logged = True  # type: ignore[attr-defined]
    symbolic_convert.get_funcname = get_funcname


after_import(
    "torch._dynamo.symbolic_convert",
    lambda module: all(hasattr(module, n) for n in ("get_funcname", "trace_call_log", "trace_source_log")),
    _name_traced_lines_only_when_logged,
)


class _NotFunctional(Exception):
    """A graph traced without aot_autograd mutates an input or returns a view
    of one: aot_autograd's functionalization must handle it."""


class _CompiledGraph:
    """One graph (an aot graph, or a dynamo graph traced directly): traced and
    compiled per input signature, then launched."""

    def __init__(
        self,
        gm: torch.fx.GraphModule,
        kind: str,
        backend: TpuBackend,
        name: str | None = None,
        input_names: Sequence[str] | None = None,
        frame: Any = None,
        block: bool = False,
        direct: bool = False,
    ) -> None:
        self.gm = gm
        self.kind = kind
        self.block = block
        # a dynamo graph traced without aot_autograd (_InferenceGraph): the
        # trace raises _NotFunctional where aot_autograd is needed after all
        self.direct = direct
        # target_only: (shape, stride, dtype) of each program output
        self.output_meta: dict[tuple, list[tuple]] = {}
        self.backend = backend
        self.programs: dict[tuple, tuple[Any, list]] = {}
        # The fast path: the last program, when every argument is a tpu
        # tensor (then the C++ side checks them, and nothing else can differ).
        self.last: tuple[Any, list, int] | None = None
        compile_id = torch._guards.CompileContext.current_compile_id()
        if frame is None:
            frame = compile_id.frame_id if compile_id is not None else id(gm)
        # dynamo's first compile of its frame: never a recompile, whatever a
        # frame of the same id compiled before a torch._dynamo.reset()
        self.first_of_frame = compile_id is not None and compile_id.frame_compile_id == 0
        # the frame dynamo compiles: its recompiles share this id
        self.frame = frame
        self.name = name or getattr(gm, "_tpu_name", None) or f"frame {self.frame}"
        self.input_names = list(input_names) if input_names is not None else None
        self.label = f"{self.name} ({kind} {'block' if block else 'graph'})"
        if backend.debug:
            log.warning("TpuBackend %s graph:\n%s", kind, gm.code)

    def signature(self, args: Sequence[Any]) -> tuple:
        parts = []
        for a in args:
            if isinstance(a, torch.Tensor):
                parts.append((a.device.type, a.device.index, a.dtype, tuple(a.shape)))
                if not a.is_contiguous():
                    parts.append(("strides", tuple(a.stride())))
                if a.device.type == "cpu":  # baked into the program: its value is part of the key
                    parts.append(tuple(a.flatten().tolist()))
            else:
                parts.append(("value", repr(a)))
        return tuple(parts)

    def __call__(self, *args: Any) -> Any:
        last = self.last
        if last is not None and len(args) == last[2]:
            results = last[0].run_if_accepted(args)  # None unless the inputs are the traced ones
            if results is not None:
                return self.rebuild(last[1], results, args)
        if any(_is_symbolic(a) for a in args):
            raise RuntimeError(_DYNAMIC_ERROR)
        key = self.signature(args)
        entry = self.programs.get(key)
        if entry is None:
            entry = self.compile(args, key)
        program, layout = entry
        if self.backend.target_only:  # nothing runs: outputs of the traced shapes
            runs = self.backend.target_runs
            runs[self.label] = runs.get(self.label, 0) + 1
            results = [
                torch.empty_strided(shape, stride, dtype=dtype, device="meta")
                for shape, stride, dtype in self.output_meta[key]
            ]
            return self.rebuild(layout, results, args)
        inputs = [_program_input(a) for a in args if isinstance(a, torch.Tensor) and a.device.type == "tpu"]
        results = program(inputs) if program is not None else []
        every_arg_on_tpu = all(isinstance(a, torch.Tensor) and a.device.type == "tpu" for a in args)
        self.last = (program, layout, len(args)) if program is not None and every_arg_on_tpu else None
        return self.rebuild(layout, results, args)

    def compile(self, args: Sequence[Any], key: tuple) -> tuple[Any, list]:
        target_only = self.backend.target_only
        device = next(
            (a.device.index or 0 for a in args if isinstance(a, torch.Tensor) and a.device.type == "tpu"),
            torch.tpu.current_device(),
        )
        # from shapes alone, a meta tensor is a program input like a tpu one
        placed = ("tpu", "meta") if target_only else ("tpu",)
        where = torch.device("tpu", device)
        if target_only:
            _meta_factories_to(self.gm, where)
        start = time.perf_counter()
        trace_args: list[Any] = []
        placeholders = 0
        bases: list[torch.Tensor] = []  # what the program takes, per placeholder
        sources: list[torch.Tensor] = []  # the argument each placeholder stands for
        # A direct trace finds input mutations by the inputs' version counters,
        # which tensors made in inference mode lack: it traces outside it.
        normal = torch.inference_mode(False) if self.direct else contextlib.nullcontext()
        with normal:
            for a in args:
                if isinstance(a, torch.Tensor) and a.device.type in placed:
                    # The graph was captured with these strides (a view may
                    # depend on them): a strided input is traced as a strided
                    # view of a flat input that spans the same elements.
                    dense = a.is_contiguous()
                    base = torch.empty(a.shape if dense else (_span(a),), dtype=a.dtype, device=where)
                    if self.direct and a.requires_grad:
                        # dynamo's torch calls decompose as eager's do, and
                        # some choose by requires_grad (matmul folds a batch
                        # into rows when the weight requires grad): the trace
                        # input stands for |a| in that too
                        base.requires_grad_(True)
                    trace_args.append(base if dense else base.as_strided(a.shape, a.stride()))
                    bases.append(base)
                    sources.append(a)
                    placeholders += 1
                else:
                    trace_args.append(a)
        # Tracing runs the ops once; it must not consume random numbers: the
        # program draws from the generator at each run instead.
        rng_state = torch.tpu.get_rng_state(device)
        versions = [base._version for base in bases] if self.direct else []
        with normal, eager_mode(EagerMode.INTERNAL_DEFER_ALL):
            _C._trace_begin(device)
            try:
                for index, base in enumerate(bases):
                    # a meta parameter split by parallelize_module: one program over the
                    # target's chips (the split lives on the parameter object)
                    split = target_sharding(sources[index]) if target_only else None
                    if split is not None:
                        _C._trace_input_sharded(base, index, list(split[0]), list(split[1]))
                    else:
                        _C._trace_input(base, index)
                with torch.no_grad():
                    outputs = self.gm(*trace_args)
                flat = list(outputs) if isinstance(outputs, (list, tuple)) else [outputs]
                if self.direct:
                    _check_functional(bases, versions, trace_args, flat)
                # Outputs that are inputs come back as those inputs (aliases
                # kept); other tpu tensors come from the program.
                layout: list = []
                traced: list[torch.Tensor] = []
                for out in flat:
                    arg_pos = next((i for i, t in enumerate(trace_args) if t is out), None)
                    if arg_pos is not None:
                        layout.append(("arg", arg_pos))
                    elif isinstance(out, torch.Tensor) and out.device.type == "tpu":
                        layout.append(("program", len(traced), out.requires_grad))
                        traced.append(out)
                    else:
                        layout.append(("value", out))
                _C._set_compile_options(self.backend.xla_options or None)
                # the long-compile notice, and the target report's label
                _C._set_compile_label(self.label)
                if target_only:
                    _C._trace_set_compile_only(True)
                # a repeated block's program counts as a "block" compile in the metrics
                kind_scope = _metrics.compile_kind("block") if self.block else contextlib.nullcontext()
                try:
                    with kind_scope:
                        program = _C._trace_end(traced, placeholders, device)
                finally:
                    if target_only:
                        _C._trace_set_compile_only(False)
                    _C._set_compile_options(None)
                    _C._set_compile_label(None)
                if target_only:
                    self.output_meta[key] = [(*_result_layout(t), t.dtype) for t in traced]
            except BaseException:
                _C._trace_abort()
                raise
            finally:
                torch.tpu.set_rng_state(rng_state, device)
        seconds = time.perf_counter() - start
        self.backend.compiles += 1
        kind = ("block" if self.block else "compiled graph") + (" (target only)" if target_only else "")
        _metrics._traced_programs[kind] = _metrics._traced_programs.get(kind, 0) + 1
        self.backend.note_compile(self, self.describe_inputs(args), seconds)
        if self.backend.debug:
            log.warning("TpuBackend %s StableHLO:\n%s", self.kind, program.text)
        entry = (program, layout)
        self.programs[key] = entry
        return entry

    def describe_inputs(self, args: Sequence[Any]) -> dict[str, str]:
        """Each input by name (dynamo's source names for a forward graph, else
        its position): a recompile names the inputs that changed, never a
        positional diff that re-traced weights would shift."""
        names = self.input_names
        if names is not None and len(names) != len(args):
            names = None
        return {(names[i] if names else f"input {i}"): _describe_input(a) for i, a in enumerate(args)}

    @staticmethod
    def rebuild(layout: list, results: list[torch.Tensor], args: Sequence[Any]) -> Any:
        out: list[Any] = []
        for item in layout:
            if item[0] == "arg":
                out.append(args[item[1]])
            elif item[0] == "program":
                out.append(results[item[1]])
            else:
                out.append(item[1])
        return out


def _check_functional(
    bases: list[torch.Tensor], versions: list[int], trace_args: list[Any], outputs: list[Any]
) -> None:
    """Raises _NotFunctional where a directly traced graph needs aot_autograd:
    it wrote to an input (the program would not), returned a view of an input
    (the program would return a copy, not an alias), or returned a nested
    structure (a program returns flat tensors)."""
    for index, (base, version) in enumerate(zip(bases, versions, strict=True)):
        if base._version != version:
            raise _NotFunctional(f"it writes to input {index}")
    for out in outputs:
        if isinstance(out, (list, tuple, dict)):
            raise _NotFunctional("it returns a nested structure")
        if not isinstance(out, torch.Tensor) or any(out is t for t in trace_args):
            continue
        if any(out is b or out._base is b for b in bases):
            raise _NotFunctional("it returns a view of an input")


def _needs_aot(gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> bool:
    """Whether |gm| needs aot_autograd: it will be differentiated (grad mode on
    and an input that requires grad, aot_autograd's own test), it takes a
    tensor subclass (a DTensor) or it calls a collective."""
    tensors = [x for x in example_inputs if isinstance(x, torch.Tensor)]
    if torch.is_grad_enabled() and any(x.requires_grad for x in tensors):
        return True
    if any(type(x) not in (torch.Tensor, torch.nn.Parameter) for x in tensors):
        return True
    return any(_is_collective(n) for n in gm.graph.nodes)


class _InferenceGraph:
    """A dynamo graph that is never differentiated, traced directly.

    Tracing runs the graph once over placeholder tpu tensors: dynamo's torch
    calls reach the same lowering rules through the dispatcher as aot's aten
    graph would, so aot_autograd's two passes over the graph (metadata, then
    the functional aten graph) are skipped: about a fifth of the tiny FLUX
    pipeline's compiled warm-up. Where the trace finds that the graph writes
    to an input or returns a view of one (_NotFunctional), the graph goes
    through aot_autograd instead, whose functionalization handles both."""

    def __init__(
        self,
        backend: TpuBackend,
        gm: torch.fx.GraphModule,
        label: str | None,
        input_names: list[str],
        frame: Any,
        block: bool,
    ) -> None:
        self.graph = _CompiledGraph(
            gm, "forward", backend, name=label, input_names=input_names, frame=frame, block=block, direct=True
        )
        self.backend = backend
        self.gm = gm
        self.aot_args = (label, input_names, frame)
        self.block = block
        self.aot: Callable[..., Any] | None = None

    def start_compile(self, example_inputs: Sequence[Any]) -> None:
        """Traces the graph and queues its compile now, from dynamo's example
        inputs (their layouts are the first call's: shapes are static), while
        dynamo finishes the frame (its guards, its bytecode): the first call
        finds the program. On 2 cores the tiny FLUX transformer's compile
        started 0.2 s earlier, at a time one core was idle. A graph with
        inputs other than tpu tensors waits for that call."""
        if self.backend.target_only or not example_inputs:
            return
        if not all(isinstance(a, torch.Tensor) and a.device.type == "tpu" for a in example_inputs):
            return
        try:
            self.graph.compile(example_inputs, self.graph.signature(example_inputs))
        except Exception as e:  # noqa: BLE001 - the first call tries again, and raises there
            # (_NotFunctional: it goes through aot_autograd; an op the rules refuse: the user's
            # call reports it, as it would have)
            log.debug("torch_tpu: %s compiles at its first call: %s", self.graph.label, e)

    def __call__(self, *args: Any) -> Any:
        if self.aot is None:
            try:
                return self.graph(*args)
            except _NotFunctional as why:
                log.info("torch_tpu: %s goes through aot_autograd: %s", self.graph.label, why)
                self.backend.aot_after_direct.append(f"{self.graph.label}: {why}")
                self.aot = self.backend._aot(
                    self.gm, list(args), *self.aot_args, split=False, block=self.block, direct=False
                )
        return self.aot(*args)


def _dense_strides(shape: Sequence[int]) -> tuple[int, ...]:
    strides, step = [], 1
    for size in reversed(shape):
        strides.append(step)
        step *= size
    return tuple(reversed(strides))


def _result_layout(t: torch.Tensor) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(shape, strides) of what a traced program returns for its output |t|, as
    graph.c's tpurt_trace_end lays it out: dense, or dense in |t|'s own memory
    order where |t| is a dense permutation (kept for the graph that receives
    it). A view of a larger value (a slice) comes back dense, at offset 0: a
    target-only output is what a run would return, not the traced view."""
    shape = tuple(t.shape)
    dense = _dense_strides(shape)
    if len(shape) < 2 or t.is_contiguous():
        return shape, dense
    order = sorted(range(len(shape)), key=lambda d: -t.stride(d))  # stable: larger stride first
    step = 1
    for d in reversed(order):
        if shape[d] != 1 and t.stride(d) != step:
            return shape, dense  # not a dense permutation: read out dense
        step *= shape[d]
    physical = _dense_strides([shape[d] for d in order])
    strides = [0] * len(shape)
    for i, d in enumerate(order):
        strides[d] = physical[i]
    return shape, tuple(strides)


def _layout_key(t: torch.Tensor) -> tuple[int, ...] | None:
    """A tensor's strides as far as a program can tell: None for any contiguous
    layout (the strides of size-1 dims, and the offset, change nothing in the
    program), else the strides."""
    return None if t.is_contiguous() else tuple(t.stride())


def _meta_factories_to(gm: torch.fx.GraphModule, device: torch.device) -> None:
    """Tensors a graph of a meta model makes or moves itself (``arange(...,
    device=meta)`` in a timestep embedding; ``x.to(ids.device)`` in a dynamo
    graph, where the device is a constant) are made on |device| instead, where
    the graph is traced."""

    found = 0

    def placed(value: Any) -> Any:
        nonlocal found
        if isinstance(value, torch.device) and value.type == "meta":
            found += 1
            return device
        return value

    for node in gm.graph.nodes:
        if node.op in ("call_function", "call_method"):
            before = found
            args = torch.fx.node.map_aggregate(node.args, placed)
            kwargs = dict(torch.fx.node.map_aggregate(node.kwargs, placed))
            if kwargs.get("device") == "meta":  # a device by name
                kwargs["device"] = device
                found += 1
            if found != before:
                node.args, node.kwargs = args, kwargs
    if found:
        gm.recompile()


def _change(name: str, old: str, new: str) -> str:
    """One changed input in a recompile message. A host (CPU) tensor input,
    such as a scheduler's timestep, is part of the tpu program (its shape,
    and its values, which are baked in), so its change is a cause: said as
    ``t (host tensor): float32[1] -> float32[2]``."""
    old_host, new_host = old.endswith(_HOST), new.endswith(_HOST)
    old, new = old.removesuffix(_HOST), new.removesuffix(_HOST)
    if old_host and new_host:
        return f"{name} (host tensor): {old} -> {new}"
    if old_host or new_host:
        return f"{name}: {old}{' on the host' * old_host} -> {new}{' on the host' * new_host}"
    return f"{name}: {old} -> {new}"


_HOST = "@host"
# Collectives in a traced graph: DTensor's and the functional collectives'
# ops. On the host engine (gloo) a collective reads its buffers on the host,
# which a program being traced cannot do, so the graph is split at them.
_COLLECTIVE_NAMESPACES = ("_c10d_functional", "c10d", "_c10d_functional_autograd")


def _is_collective(node: torch.fx.Node) -> bool:
    return node.op == "call_function" and getattr(node.target, "namespace", None) in _COLLECTIVE_NAMESPACES


class _CompiledPart(torch.nn.Module):
    """A compiled piece of a split graph (at collectives or at blocks, where equal blocks
    share one compiled function), returning what its FX piece returned."""

    def __init__(
        self, fn: Callable[..., Any], single: bool, block: bool = False, select: list[int] | None = None
    ) -> None:
        super().__init__()
        self.fn = fn
        self.single = single
        self.block = block
        self.select = select  # the outputs of |fn| this piece returns (None: all)

    def forward(self, *args: Any) -> Any:
        if self.block:
            # A block's program takes dense inputs: a strided one (a user's
            # transposed input) is made dense first, so every block of the
            # class shares one program whatever layout reaches it.
            args = tuple(a.contiguous() if isinstance(a, torch.Tensor) else a for a in args)
        out = self.fn(*args)
        if self.select is not None:
            out = [out[i] for i in self.select]
        return out[0] if self.single else tuple(out)


def _split_at_collectives(
    gm: torch.fx.GraphModule, compile_part: Callable[[torch.fx.GraphModule], Any]
) -> Any:
    """The graph as compiled pieces with each run of collective ops between
    them, run eagerly (each collective is the c10d backend's own). Returns the
    split module (a callable over the graph's inputs) and the piece counts."""
    from torch.fx.passes.split_module import split_module

    part, last, eager = {}, None, set()
    index = 0
    for node in gm.graph.nodes:
        if node.op in ("placeholder", "output"):
            continue
        kind = _is_collective(node)
        if last is not None and kind != last:
            index += 1
        last = kind
        part[node] = index
        if kind:
            eager.add(index)
    split = split_module(gm, gm, lambda node: part[node], keep_original_order=True)
    compiled = 0
    for name, sub in list(split.named_children()):
        if not name.startswith("submod_") or int(name[len("submod_") :]) in eager:
            continue
        output = next(n for n in sub.graph.nodes if n.op == "output")
        single = not isinstance(output.args[0], (tuple, list))
        delattr(split, name)
        setattr(split, name, _CompiledPart(compile_part(sub), single))
        compiled += 1
    return split, compiled, len(eager)


def _describe_input(x: Any) -> str:
    """An input in a recompile message: ``float32[4, 32]`` (marked for host tensors: _change)."""
    if isinstance(x, torch.Tensor):
        where = "" if x.device.type == "tpu" else _HOST
        return f"{str(x.dtype).removeprefix('torch.')}{list(x.shape)}{where}"
    return repr(x)


def _span(t: torch.Tensor) -> int:
    """Elements from a strided tensor's first to its last element."""
    return 1 + sum((size - 1) * stride for size, stride in zip(t.shape, t.stride(), strict=True) if size > 0)


def _program_input(a: torch.Tensor) -> torch.Tensor:
    """The tensor the program takes for argument |a| (see _CompiledGraph.compile)."""
    if a.is_contiguous():
        return a
    return a.as_strided((_span(a),), (1,), a.storage_offset())


_OPTION_NAME = re.compile(r"[A-Za-z0-9_.-]+")


def xla_options_spec(options: dict[str, Any]) -> str:
    """``{"xla_dump_to": "/tmp/d", "xla_cpu_enable_fast_math": True}`` ->
    ``"xla_cpu_enable_fast_math=True xla_dump_to=/tmp/d"``: the text the core
    encodes into the compile options (XLA converts each value to its field's
    type). Raises ValueError/TypeError naming a bad name or value."""
    parts = []
    for name, value in sorted(options.items()):
        if not _OPTION_NAME.fullmatch(name):
            raise ValueError(f"TpuBackend: {name!r} is not an XLA option name")
        if isinstance(value, bool):
            text = "True" if value else "False"
        elif isinstance(value, (int, float, str)):
            text = str(value)
        else:
            raise TypeError(
                f"TpuBackend: XLA option {name}={value!r}: the value must be a bool, int, float or str"
            )
        if not text or any(c.isspace() for c in text):
            raise ValueError(
                f"TpuBackend: XLA option {name}={value!r}: the value must be non-empty, without blanks"
            )
        parts.append(f"{name}={text}")
    return " ".join(parts)


class TpuBackend:
    """The torch.compile backend for "tpu": whole static graphs through StableHLO.

    Args:
        debug: log the FX graphs and the StableHLO text of every compiled program.
        name: what recompile messages call the compiled code: ``"transformer"``
            (then the function's name is appended: ``transformer.forward``) or a
            full ``"vae.decode"``; by default the function's qualified name.
        fallback_dynamic: run graphs with symbolic sizes eagerly instead of
            raising.
        specialize_dynamic: compile a graph with symbolic sizes once per
            concrete input shape, as ``dynamic=False`` would, instead of
            raising (the default ``torch.compile`` route uses this: after a
            shape change dynamo makes sizes symbolic, and each new size then
            gets its own static program, logged as a recompile).
        enable_serialization: programs go through the executable cache, whose
            persistent tier (``TORCH_TPU_CACHE_DIR``) serves later processes.
        blocks: a graph whose modules hold repeated blocks (children of a
            ModuleList of one class, such as diffusers' ``transformer_blocks``)
            is compiled in pieces at block boundaries, and blocks of equal
            structure share one program (their weights are its inputs), so N
            blocks compile once. ``False``: one program for the whole graph.
        target_only: compile for the shadow target (``torch_tpu.set_target``)
            only, from shapes alone: inputs may be ``meta`` tensors (a model
            made on the meta device has no weights), nothing is compiled for
            or run on this process's plugin, and every output is a ``meta``
            tensor of the traced shape.
        direct_inference: a graph that is never differentiated (no input
            requires grad, or grad mode is off, as in a diffusers pipeline)
            is traced as dynamo captured it, without aot_autograd; a graph
            that writes to an input or returns a view of one still goes
            through aot_autograd. ``False``: every graph goes through it.
        **compile_options: XLA options by name (DebugOptions fields such as
            ``xla_dump_to="/tmp/dump"`` or ``xla_cpu_enable_fast_math=False``),
            on top of ``TORCH_TPU_XLA_OPTIONS``. They reach the plugin's XLA
            through the compile options' ``env_option_overrides`` and are part
            of the executable cache key; an unknown name is XLA's compile error,
            which names it.
    """

    def __init__(
        self,
        debug: bool = False,
        enable_serialization: bool = True,
        name: str | None = None,
        fallback_dynamic: bool = False,
        specialize_dynamic: bool = False,
        blocks: bool = True,
        target_only: bool = False,
        direct_inference: bool = True,
        **compile_options: Any,
    ) -> None:
        self.name = name
        self.direct_inference = direct_inference
        # graphs traced without aot_autograd, and why a graph went back to it
        self.direct_graphs = 0
        self.aot_after_direct: list[str] = []
        self.blocks = blocks
        self.target_only = target_only
        # compiled functions of repeated blocks, by block class and structure
        self._block_functions: dict[tuple, _Specialized] = {}
        self.block_splits = 0
        # marked blocks (mark_repeated_blocks): region calls in dynamo's graphs,
        # and the distinct region subgraphs dynamo traced for them
        self.region_calls = 0
        self.region_bodies = 0
        # target_only: calls per program label (nothing runs, so the target
        # report's run counts stay 0; these say how often each would run)
        self.target_runs: dict[str, int] = {}
        self.specialize_dynamic = specialize_dynamic
        # Graphs with symbolic sizes run eagerly on the tpu instead of raising
        # (the default torch.compile, whose dynamic=None turns dims symbolic
        # after a shape change).
        self.fallback_dynamic = fallback_dynamic
        self.debug = debug
        self.enable_serialization = enable_serialization
        self.compile_options = dict(compile_options)
        self.xla_options = xla_options_spec(self.compile_options)
        self.compiles = 0
        # graphs split at their collectives (torch.distributed on the host engine)
        self.collective_splits = 0
        self.recompiles: list[str] = []
        # Input signatures of the graphs compiled so far, by (dynamo frame,
        # graph kind): a second signature for the same frame is a recompile.
        self._signatures: dict[tuple, tuple] = {}

    @staticmethod
    def name_of(gm: torch.fx.GraphModule) -> str:
        return getattr(gm, "_tpu_name", type(gm).__name__)

    def note_compile(self, graph: _CompiledGraph, inputs: dict[str, str], seconds: float) -> None:
        """Logs a recompile: the same frame's graph compiled for other inputs, naming the
        component (``transformer.forward``) and the inputs that changed, by name."""
        frame = (graph.frame, graph.kind)
        previous = self._signatures.get(frame)
        self._signatures[frame] = inputs
        if previous is None or previous == inputs or graph.first_of_frame:
            return
        changed = [
            _change(name, previous[name], desc)
            for name, desc in inputs.items()
            if name in previous and previous[name] != desc
        ]
        added = [name for name in inputs if name not in previous]
        if added:
            changed.append("new inputs " + ", ".join(added))
        cause = f"{graph.kind} graph of {graph.name}: {'; '.join(changed) or 'the inputs changed'}"
        self.recompiles.append(cause)
        _metrics._recompiles.append(cause)
        log.warning("torch_tpu: recompiling %s (compile took %.3f s)", cause, seconds)

    def __call__(self, gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> Callable[..., Any]:
        symbolic = any(_is_symbolic(x) for x in example_inputs)
        if symbolic and not self.specialize_dynamic:
            if self.fallback_dynamic:
                log.warning(
                    "torch_tpu: a graph with symbolic sizes runs eagerly on tpu; "
                    "torch.compile(model, dynamic=False) compiles one program per shape instead"
                )
                return gm.forward
            raise RuntimeError(_DYNAMIC_ERROR)
        # "transformer.forward" as given, "transformer" + the compiled
        # function's name, or that function's qualified name.
        frame = _frame_name()
        method = frame.rsplit(".", 1)[-1] if frame else "forward"
        if self.name:
            label: str | None = self.name if "." in self.name else f"{self.name}.{method}"
        else:
            label = frame
        input_names = [_source_name(n) for n in gm.graph.nodes if n.op == "placeholder"]
        compile_id = torch._guards.CompileContext.current_compile_id()
        frame = compile_id.frame_id if compile_id is not None else id(gm)
        if symbolic:
            return _Specialized(self, gm, label, input_names, frame)
        if getattr(gm, "_backend_id", None) is not None:  # dynamo saves this frame (cached_compile)
            from torch_tpu.dynamo_cache import record_graph

            record_graph(gm, label, input_names)
        return self._aot(gm, example_inputs, label, input_names, frame)

    def _aot(
        self,
        gm: torch.fx.GraphModule,
        example_inputs: Sequence[Any],
        label: str | None,
        input_names: list[str],
        frame: Any,
        split: bool = True,
        block: bool = False,
        direct: bool = True,
    ) -> Callable[..., Any]:
        """aot_autograd over |gm| with static example inputs; each graph it
        produces becomes a _CompiledGraph of frame |frame|. With |split| (and
        blocks on), a graph of repeated blocks is compiled in pieces instead
        (_split_at_blocks), equal blocks sharing one compiled function. With
        |direct|, a graph that is never differentiated skips aot_autograd
        (_InferenceGraph)."""
        from functorch.compile import make_boxed_func
        from torch._dynamo.backends.common import aot_autograd

        if split and not self.blocks:
            _inline_regions(gm)  # a marked model compiled whole
        if split and self.blocks:
            found = _split_at_regions(self, gm, label, frame) or _split_at_blocks(self, gm, label, frame)
            if found is not None:
                module, blocks, distinct = found
                log.info(
                    "torch_tpu: %s compiled in pieces: %d repeated blocks share %d compiled block functions",
                    label, blocks, distinct,
                )  # fmt: skip
                self.block_splits += 1
                return module
        if direct and self.direct_inference and not _needs_aot(gm, example_inputs):
            self.direct_graphs += 1
            graph = _InferenceGraph(self, gm, label, input_names, frame, block)
            graph.start_compile(example_inputs)
            return graph

        def compiler(kind: str) -> Callable[..., Any]:
            def compile_graph(graph: torch.fx.GraphModule, inputs: Sequence[Any]) -> Callable[..., Any]:
                if any(_is_symbolic(x) for x in inputs):
                    raise RuntimeError(_DYNAMIC_ERROR)
                # The forward graph takes dynamo's inputs in order; the
                # backward's (saved values, gradients) have no user names.
                names = input_names if kind == "forward" else None
                if any(_is_collective(n) for n in graph.graph.nodes):
                    # each piece is its own frame to the recompile log: pieces
                    # of one graph have different inputs by construction
                    split, compiled_parts, eager_parts = _split_at_collectives(
                        graph,
                        lambda sub: _CompiledGraph(sub, kind, self, name=label, frame=id(sub), block=block),
                    )
                    log.info(
                        "torch_tpu: %s graph of %s split at its collectives: %d compiled pieces, "
                        "%d runs of collectives on the c10d backend",
                        kind, label, compiled_parts, eager_parts,
                    )  # fmt: skip
                    self.collective_splits += 1
                    return make_boxed_func(split)
                compiled = _CompiledGraph(
                    graph, kind, self, name=label, input_names=names, frame=frame, block=block
                )
                return make_boxed_func(compiled)

            return compile_graph

        backend = aot_autograd(fw_compiler=compiler("forward"), bw_compiler=compiler("backward"))
        return backend(gm, example_inputs)


# --- Repeated blocks: one program per distinct block ------------------------
#
# A dynamo graph of a model whose ModuleList children repeat (diffusers'
# transformer_blocks, a stack of identical layers) holds N copies of one block.
# Compiled whole, the plugin compiles all N copies. Split at block boundaries
# instead (nodes carry the module that emitted them in nn_module_stack), each
# piece is compiled on its own, and pieces of equal structure share one
# compiled function: the block's weights are its inputs, so one program serves
# every block. aot_autograd runs per piece, so backward works across pieces.

_BLOCK_PATH = re.compile(r"^(.*)\.(\d+)$")  # "L['self'].transformer_blocks.3"


def _block_of(node: torch.fx.Node, innermost: bool = False) -> tuple[str, str, type] | None:
    """(container, block path, block class) of the outermost indexed child
    module (a ModuleList/Sequential entry) that emitted |node|, or of the
    innermost (a region's call: its marked block may sit in an up block's
    list), or None."""
    stack = node.meta.get("nn_module_stack")
    if not stack:
        return None
    entries = list(stack.values())  # outermost first
    for path, cls in reversed(entries) if innermost else entries:
        match = _BLOCK_PATH.match(str(path))
        if match:
            return match.group(1), str(path), cls
    return None


def _is_block_class(cls: Any) -> bool:
    """A block is a model's own module: a run of bare torch.nn layers (a
    Sequential of Linears) stays in one program."""
    return isinstance(cls, type) and not (cls.__module__ or "").startswith("torch.nn.")


def _block_partition(gm: torch.fx.GraphModule) -> tuple[dict[torch.fx.Node, int], list] | None:
    """Each computing node's piece (consecutive nodes of one block form a
    piece; the nodes between blocks form pieces of their own), and per piece
    its block (None between blocks). None unless a container holds at least
    two blocks, all of one class."""
    nodes = [n for n in gm.graph.nodes if n.op not in ("placeholder", "output", "get_attr")]
    blocks = [_block_of(n) for n in nodes]
    classes: dict[str, set] = {}
    paths: dict[str, set] = {}
    for b in blocks:
        if b is not None:
            classes.setdefault(b[0], set()).add(b[2])
            paths.setdefault(b[0], set()).add(b[1])
    repeated = {
        c
        for c, kinds in classes.items()
        if len(kinds) == 1 and len(paths[c]) >= 2 and _is_block_class(next(iter(kinds)))
    }
    if not repeated:
        return None
    blocks = [b if b is not None and b[0] in repeated else None for b in blocks]
    # A node without a module (a getitem, an op dynamo added) between two
    # nodes of one block belongs to that block: it must not split it.
    for i, b in enumerate(blocks):
        if b is None:
            before = next((blocks[j] for j in range(i - 1, -1, -1) if blocks[j] is not None), None)
            after = next((blocks[j] for j in range(i + 1, len(blocks)) if blocks[j] is not None), None)
            if before is not None and after is not None and before[1] == after[1]:
                blocks[i] = before
    part: dict[torch.fx.Node, int] = {}
    pieces: list = []
    for node, b in zip(nodes, blocks, strict=True):
        key = b[1] if b else None
        if not pieces or key != (pieces[-1][1] if pieces[-1] else None):
            pieces.append(b)
        part[node] = len(pieces) - 1
    for node in gm.graph.nodes:  # a constant goes with its first user
        if node.op == "get_attr":
            user = next((u for u in node.users if u in part), None)
            part[node] = part[user] if user is not None else 0
    return part, pieces


def _target_name(target: Any) -> str:
    if isinstance(target, str):
        return target
    module = getattr(target, "__module__", None) or ""
    return f"{module}.{getattr(target, '__qualname__', None) or getattr(target, '__name__', repr(target))}"


def _computations(gm: torch.fx.GraphModule) -> tuple[tuple, tuple[str, ...]]:
    """(the inputs' shapes and dtypes, per output a digest of the computation
    that makes it from the inputs, by position). Two block pieces with equal
    inputs whose outputs' digests are a subset of the other's compute those
    outputs alike: the last block of a run, whose unused outputs dynamo dropped
    (FLUX's last single block's text slice), is the same block."""
    import hashlib

    digest: dict[torch.fx.Node, str] = {}
    inputs: list = []
    outputs: tuple[str, ...] = ()
    for node in gm.graph.nodes:
        if node.op == "placeholder":
            value = node.meta.get("example_value", node.meta.get("val"))
            shape = (tuple(value.shape), value.dtype) if isinstance(value, torch.Tensor) else None
            inputs.append(repr(shape))
            digest[node] = f"input{len(inputs) - 1}"
        elif node.op == "output":
            values = node.args[0] if isinstance(node.args[0], (tuple, list)) else (node.args[0],)
            outputs = tuple(digest[v] if isinstance(v, torch.fx.Node) else repr(v) for v in values)
        else:
            # get_attr/call_module name the block's own attribute: unique, never shared
            target = _target_name(node.target) if node.op in ("call_function", "call_method") else id(node)
            args = torch.fx.node.map_arg((node.args, node.kwargs), lambda n: digest[n])
            text = f"{node.op}|{target}|{args!r}"
            digest[node] = hashlib.sha1(text.encode()).hexdigest()
    return tuple(inputs), outputs


def _tuple_outputs(sub: torch.fx.GraphModule) -> bool:
    """Makes |sub| return a tuple (aot_autograd's graphs do); True if it returned one value."""
    output = next(n for n in sub.graph.nodes if n.op == "output")
    value = output.args[0]
    if isinstance(value, (tuple, list)):
        return False
    output.args = ((value,),)
    sub.recompile()
    return True


def _canonical_outputs(split: torch.fx.GraphModule, name: str, sub: torch.fx.GraphModule) -> None:
    """Orders |sub|'s outputs by where they are computed inside it, and its
    users in |split| to match: split_module orders them by first use outside,
    which differs for the last block of a run (its users are not a block)."""
    import operator

    output = next(n for n in sub.graph.nodes if n.op == "output")
    values = output.args[0]
    if not isinstance(values, (tuple, list)) or len(values) < 2:
        return
    position = {n: i for i, n in enumerate(sub.graph.nodes)}
    order = sorted(range(len(values)), key=lambda i: position.get(values[i], -1))
    if order == list(range(len(values))):
        return
    call = next(n for n in split.graph.nodes if n.op == "call_module" and n.target == name)
    users = list(call.users)
    if not all(u.op == "call_function" and u.target is operator.getitem for u in users):
        return  # used whole: keep split_module's order
    new_index = {old: new for new, old in enumerate(order)}
    output.args = (tuple(values[i] for i in order),)
    sub.recompile()
    for u in users:
        u.args = (call, new_index[u.args[1]])
    split.recompile()


def _split_at_blocks(
    backend: TpuBackend, gm: torch.fx.GraphModule, label: str | None, frame: int
) -> tuple[torch.fx.GraphModule, int, int] | None:
    """|gm| as a graph of compiled pieces, equal blocks sharing one compiled
    function; None when no block repeats. Returns the split module, the
    number of blocks and the number of distinct compiled block functions."""
    from torch.fx.passes.split_module import split_module

    found = _block_partition(gm)
    if found is None:
        return None
    part, pieces = found
    split = split_module(gm, gm, lambda node: part[node], keep_original_order=True)
    subs: list[tuple[str, torch.fx.GraphModule, Any, tuple | None]] = []
    for name, sub in list(split.named_children()):
        if not name.startswith("submod_"):
            continue
        block = pieces[int(name[len("submod_") :])]
        key = None
        if block is not None:
            _canonical_outputs(split, name, sub)
            cls = block[2]
            key = (f"{cls.__module__}.{cls.__qualname__}", *_computations(sub))
        subs.append((name, sub, block, key))
    # A piece computing a subset of another's outputs (the run's last block)
    # is served by that piece's function: keys map to the widest piece's key.
    widest: dict[tuple, tuple] = {}
    shared: dict[tuple, _Specialized] = backend._block_functions
    known = [k for k in shared] + [k for *_, k in subs if k is not None]
    for *_, key in subs:
        if key is not None and key not in widest:
            wider = [k for k in known if k[:2] == key[:2] and set(key[2]) <= set(k[2])]
            widest[key] = max(wider, key=lambda k: (k in shared, len(k[2])))
    # Split only where blocks repeat: blocks of one class but other shapes
    # (a VAE's up blocks) would only add launches.
    if max(Counter(widest[key] for *_, key in subs if key is not None).values(), default=0) < 2:
        return None
    blocks = 0
    distinct_before = len(shared)
    pieces_of = {key: sub for _, sub, _, key in subs if key is not None}
    singles = [_tuple_outputs(sub) for _, sub, *_ in subs]  # before any piece is shared
    for index, (name, sub, block, key) in enumerate(subs):
        single = singles[index]
        # dynamo's names for the graph's own inputs (args[0], kwargs.hidden_states)
        names = [_source_name(n) for n in sub.graph.nodes if n.op == "placeholder"]
        # A piece's frame is the dynamo frame's and its place in it, so that the
        # frame's recompile (another input shape) is logged as one by each piece.
        select = None
        if block is None:
            fn = _Specialized(backend, sub, label, names, (frame, index), split=False)
        else:
            blocks += 1
            full = widest[key]
            fn = shared.get(full)
            if fn is None:
                wide = pieces_of[full]
                wide_names = [_source_name(n) for n in wide.graph.nodes if n.op == "placeholder"]
                name_of = f"{label or 'graph'}: {block[0].split('.', 1)[-1]} block ({block[2].__name__})"
                where = (frame, block[0], block[2].__qualname__)
                fn = _Specialized(backend, wide, name_of, wide_names, where, split=False, block=True)
                shared[full] = fn
            if full != key:
                select = [full[2].index(d) for d in key[2]]
        delattr(split, name)
        setattr(split, name, _CompiledPart(fn, single, block=block is not None, select=select))
    return split, blocks, len(shared) - distinct_before


# --- Repeated blocks traced once: nested compile regions --------------------
#
# Split at blocks, XLA compiles each distinct block once, but dynamo still
# traces every block of the model (FLUX: 57, about 10 s at full size, in every
# process). torch.compiler.nested_compile_region makes dynamo trace a region
# once and stamp out later calls with equal inputs: the dynamo graph then
# calls one subgraph N times (invoke_subgraph), and TpuBackend compiles that
# subgraph as the block's program. mark_repeated_blocks marks the blocks of one
# model by giving each block object a subclass of its class whose forward is
# the region (other objects of the class are untouched; outside torch.compile
# the region is a plain call).

_MARKED_BASE = "_torch_tpu_block_base"  # on a marked subclass: the class it marks
_marked_classes: dict[type, type] = {}
# while dynamo saves a compiled frame's guards (dynamo_cache): a marked block
# pickles as its marked class, which its saved type guard must name
_saving_guards = False
# Equal blocks share one entry; blocks of one class at other widths (a UNet's
# transformer blocks per resolution) take one each, and dynamo raises past the cap.
_REGION_ENTRIES = 64


@torch._dynamo.assume_constant_result
def _has_dense_strides(shape: tuple, strides: tuple) -> bool:
    # run by dynamo on the (static) sizes, not traced: it is asked at every block call
    return tuple(strides) == _dense_strides(shape)


def _dense_for_region(x: Any) -> Any:
    """A tensor with other strides than the dense ones of its shape, dense: dynamo
    reuses a region only for inputs of equal strides (a slice of the joint sequence,
    FLUX's single blocks' outputs, has the strides of the whole)."""
    if isinstance(x, torch.Tensor) and not _has_dense_strides(tuple(x.shape), x.stride()):
        return _dense_copy(x)
    return x


def _dense_copy(t: torch.Tensor) -> torch.Tensor:
    return t.clone(memory_format=torch.contiguous_format)


def _own_code(fn: Callable[..., Any], base: type) -> Callable[..., Any]:
    """|fn| with a code object of its own, named for |base|: dynamo keeps a region's
    traced subgraphs by the function's code, and each marked class's must be apart
    (never tried for, or taken by, another class's calls)."""
    import types

    name = f"{fn.__name__}_{base.__name__}"
    code = fn.__code__.replace(co_name=name, co_qualname=f"{base.__qualname__}.{name}")
    return types.FunctionType(code, fn.__globals__, name, fn.__defaults__, fn.__closure__)


def _is_leaf(x: Any) -> bool:
    return x is None or isinstance(x, (torch.Tensor, bool, int, float, str))


_MARKED_PREFIX = "_marked:"


def _marked_name(base: type) -> str:
    """The marked subclass's name in this module: base's module and qualified
    name, with no dot (pickle splits a qualified name at dots)."""
    return f"{_MARKED_PREFIX}{base.__module__.replace('.', '$')}:{base.__qualname__.replace('.', '$')}"


def __getattr__(name: str) -> Any:
    """The marked subclass named |name| (_marked_name), made where missing."""
    if not name.startswith(_MARKED_PREFIX):
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    module_name, qualname = name[len(_MARKED_PREFIX) :].split(":")
    base: Any = importlib.import_module(module_name.replace("$", "."))
    for part in qualname.split("$"):
        base = getattr(base, part)
    return _marked_class(base)


def _marked_class(base: type) -> type:
    marked = _marked_classes.get(base)
    if marked is not None:
        return marked
    import inspect

    from torch.utils import _pytree

    # the function, not base.forward at call time: dynamo may see the class
    # itself as an allowed-in-graph callable (diffusers' maybe_allow_in_graph)
    base_forward = base.forward

    def block_call(module: torch.nn.Module, *args: Any, **kwargs: Any) -> Any:
        out = base_forward(module, *args, **kwargs)
        # a region's outputs may not alias each other or its inputs (FLUX's
        # single block returns two slices of one tensor): fresh dense values
        return _pytree.tree_map_only(torch.Tensor, _dense_copy, out)

    def region_of(fn: Callable[..., Any]) -> Callable[..., Any]:
        return torch.compiler.nested_compile_region(_own_code(fn, base), max_reuse_entries=_REGION_ENTRIES)

    region = region_of(block_call)

    # The fast calling convention: dynamo checks a region call's inputs for
    # reuse at every call, quickly when they are flat leaves (tensors,
    # constants) and slowly (tracing pytree's flatten) otherwise. FLUX calls
    # its blocks by keyword with a tuple (the rotary embedding), so the call
    # is passed flat: each forward parameter in order as a marker (-1: one
    # value follows, n >= 0: a tuple of n values follows) and its values.
    params = list(inspect.signature(base_forward).parameters.values())[1:]
    names = [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    defaults = {p.name: p.default for p in params if p.default is not p.empty}

    def block_flat(module: torch.nn.Module, *flat: Any) -> Any:
        values, i = [], 0
        while i < len(flat):
            n = flat[i]
            if n < 0:
                values.append(flat[i + 1])
                i += 2
            else:
                values.append(tuple(flat[i + 1 : i + 1 + n]))
                i += 1 + n
        return block_call(module, *values)

    flat_region = region_of(block_flat)

    def flatten(args: tuple, kwargs: dict) -> list | None:
        """The flat call of (args, kwargs), or None where it has no flat form."""
        if len(args) > len(names) or any(k not in names[len(args) :] for k in kwargs):
            return None
        flat: list = []
        for index, name in enumerate(names):
            if index < len(args):
                value = args[index]
            elif name in kwargs:
                value = kwargs[name]
            elif name in defaults:
                value = defaults[name]
            else:
                return None  # a missing argument: the plain call raises
            if isinstance(value, tuple) and all(_is_leaf(v) for v in value):
                flat.append(len(value))
                flat.extend(_dense_for_region(v) for v in value)
            elif _is_leaf(value):
                flat.append(-1)
                flat.append(_dense_for_region(value))
            else:
                return None
        return flat

    def forward(self: torch.nn.Module, *args: Any, **kwargs: Any) -> Any:
        if not torch.compiler.is_compiling():
            return base_forward(self, *args, **kwargs)
        flat = flatten(args, kwargs)
        if flat is not None:
            return flat_region(self, *flat)
        args, kwargs = _pytree.tree_map(_dense_for_region, (args, kwargs))
        return region(self, *args, **kwargs)

    def __reduce_ex__(self: torch.nn.Module, protocol: Any) -> Any:
        # pickled (torch.save of a whole model, deepcopy) as the plain class, which
        # pickle finds by name: the mark is for this process's torch.compile only
        import copyreg

        reduced = super(marked, self).__reduce_ex__(protocol)
        if _saving_guards:  # dynamo's saved guards check the marked class
            return reduced
        return (copyreg._reconstructor, (base, object, None), *reduced[2:])

    forward.__doc__ = base_forward.__doc__

    def _get_name(self: torch.nn.Module) -> str:
        return base.__name__  # the model's repr names the block's own class

    name = _marked_name(base)
    marked = type(
        name,  # dynamo saves a guard on a class only where its name is its qualname
        (base,),
        {
            "forward": forward,
            "__reduce_ex__": __reduce_ex__,
            # found by name (pickle, dynamo's saved guards) through this
            # module's __getattr__, which makes it in a process that has not
            # marked the class yet
            "__module__": __name__,
            "__qualname__": name,
            "_get_name": _get_name,
            _MARKED_BASE: base,
        },
    )
    _marked_classes[base] = marked
    return marked


def _param_shapes(module: torch.nn.Module) -> tuple:
    return tuple((name, tuple(p.shape), p.dtype) for name, p in module.named_parameters())


def _repeats(children: list[torch.nn.Module]) -> bool:
    """Two or more children of one class (a model's own, not a torch.nn layer)
    with equal parameter shapes: true repeats."""
    if len(children) < 2 or len({getattr(type(c), _MARKED_BASE, type(c)) for c in children}) != 1:
        return False
    if not _is_block_class(getattr(type(children[0]), _MARKED_BASE, type(children[0]))):
        return False
    first = _param_shapes(children[0])
    return all(_param_shapes(c) == first for c in children[1:])


def mark_repeated_blocks(model: torch.nn.Module) -> list[str]:
    """Marks |model|'s repeated blocks so that dynamo traces each distinct block
    once (``torch.compiler.nested_compile_region``) and ``TpuBackend`` compiles it
    once. Call it before the first call of ``torch.compile(model, ...)``;
    ``pipe.enable_tpu_compile()`` calls it for each component.

    Repeated blocks are the children of a ``ModuleList`` or ``Sequential`` that
    is not inside a block already marked: two or more, of one class of the
    model's own (not a ``torch.nn`` layer), with equal parameter shapes. Where
    the outer list's children differ (a VAE decoder's ``up_blocks``, whose
    widths change), the lists inside them are looked at (each up block's
    ``resnets``). Where a diffusers model names its repeated blocks
    (``_repeated_blocks``), only those classes. Each block
    object gets a subclass of its class (same behaviour, ``isinstance`` holds,
    the model's repr names the block's class; the subclass itself is named in
    ``torch_tpu.compile``, where dynamo's saved guards find it) whose
    ``forward``, under ``torch.compile``, is the region; other objects of the class are untouched, and outside
    ``torch.compile`` the call is the plain ``forward``. A block whose forward
    breaks dynamo's graph cannot be a region: dynamo then raises, naming it.

    Returns the paths of the containers whose blocks were marked
    (``["transformer_blocks", "single_transformer_blocks"]`` for FLUX).
    """
    named: set[str] = set()
    for module in model.modules():
        named.update(getattr(module, "_repeated_blocks", None) or ())
    marked: list[str] = []
    for path, module in model.named_modules():
        if not isinstance(module, (torch.nn.ModuleList, torch.nn.Sequential)):
            continue
        if any(outer == "" or path.startswith(outer + ".") for outer in marked):
            continue  # inside a marked block (the model itself may be the list): the outer block is the unit
        children = list(module.children())
        if not _repeats(children):
            continue
        base = getattr(type(children[0]), _MARKED_BASE, type(children[0]))
        if named and base.__name__ not in named:
            continue
        for block in children:
            block.__class__ = _marked_class(base)
        marked.append(path)
    return marked


_INVOKE_SUBGRAPH = getattr(torch.ops.higher_order, "invoke_subgraph", None)


def _is_region_call(node: torch.fx.Node) -> bool:
    return node.op == "call_function" and _INVOKE_SUBGRAPH is not None and node.target is _INVOKE_SUBGRAPH


def _inline_regions(gm: torch.fx.GraphModule) -> bool:
    """Replaces each region call of |gm| by the region's own nodes (a whole-graph
    compile of a marked model); True if there was one."""
    import operator

    calls = [n for n in gm.graph.nodes if _is_region_call(n)]
    for call in calls:
        body = getattr(gm, call.args[0].target)
        placeholders = [n for n in body.graph.nodes if n.op == "placeholder"]
        values = dict(zip(placeholders, call.args[2:], strict=True))
        with gm.graph.inserting_before(call):
            out = gm.graph.graph_copy(body.graph, values)
        outputs = list(out) if isinstance(out, (tuple, list)) else [out]
        for user in list(call.users):
            if user.op == "call_function" and user.target is operator.getitem:
                user.replace_all_uses_with(outputs[user.args[1]])
                gm.graph.erase_node(user)
        getter = call.args[0]
        gm.graph.erase_node(call)
        if not getter.users:
            gm.graph.erase_node(getter)
    if calls:
        gm.graph.lint()
        gm.recompile()
    return bool(calls)


def _split_at_regions(
    backend: TpuBackend, gm: torch.fx.GraphModule, label: str | None, frame: int
) -> tuple[torch.fx.GraphModule, int, int] | None:
    """|gm| as a graph of compiled pieces where dynamo traced repeated blocks as
    regions (mark_repeated_blocks): each region call runs its block's one
    compiled function (the region's subgraph, its weights as inputs), the code
    between them compiles as pieces. None without region calls. Returns the
    split module, the number of block calls and of new block functions."""
    import operator

    from torch.fx.passes.split_module import split_module

    calls = [n for n in gm.graph.nodes if _is_region_call(n)]
    if not calls:
        return None
    shared: dict[tuple, _Specialized] = backend._block_functions
    distinct_before = len(shared)
    by_identifier: dict[str, _Specialized] = {}
    block_nodes: list[torch.fx.Node] = []
    for index, call in enumerate(calls):
        getter, identifier = call.args[0], call.args[1]
        fn = by_identifier.get(identifier)
        if fn is None:
            body = getattr(gm, getter.target)
            block = _block_of(call, innermost=True)
            cls = getattr(block[2], _MARKED_BASE, block[2]) if block else None
            cls_name = f"{cls.__module__}.{cls.__qualname__}" if cls else "region"
            key = (cls_name, *_computations(body))
            fn = shared.get(key)
            if fn is None:
                where = _tidy_source(block[0]) if block else identifier
                name_of = f"{label or 'graph'}: {where} block ({cls.__name__ if cls else identifier})"
                names = [_source_name(n) for n in body.graph.nodes if n.op == "placeholder"]
                fn = _Specialized(backend, body, name_of, names, (frame, where), split=False, block=True)
                shared[key] = fn
            by_identifier[identifier] = fn
        name = f"tpu_block_{index}"
        gm.add_submodule(name, _CompiledPart(fn, single=False, block=True))
        with gm.graph.inserting_before(call):
            replaced = gm.graph.call_module(name, tuple(call.args[2:]))
        replaced.meta = dict(call.meta)
        call.replace_all_uses_with(replaced)
        gm.graph.erase_node(call)
        if not getter.users:
            gm.graph.erase_node(getter)
        block_nodes.append(replaced)
    backend.region_calls += len(block_nodes)
    backend.region_bodies += len(by_identifier)
    gm.graph.lint()
    gm.recompile()
    # pieces: each block call with the getitems of its outputs; the runs between
    part: dict[torch.fx.Node, int] = {}
    piece, in_run = 0, False
    blocks = set(block_nodes)
    for node in gm.graph.nodes:
        if node.op in ("placeholder", "output"):
            continue
        source = node.args[0] if node.op == "call_function" and node.target is operator.getitem else None
        if node in blocks:
            piece += 1
            part[node] = piece
            in_run = False
        elif source in blocks:
            part[node] = part[source]
        else:
            if not in_run:
                piece += 1
                in_run = True
            part[node] = piece
    block_pieces = {part[n] for n in block_nodes}
    split = split_module(gm, gm, lambda node: part[node], keep_original_order=True)
    for name, sub in list(split.named_children()):
        if not name.startswith("submod_") or int(name[len("submod_") :]) in block_pieces:
            continue
        single = _tuple_outputs(sub)
        names = [_source_name(n) for n in sub.graph.nodes if n.op == "placeholder"]
        fn = _Specialized(backend, sub, label, names, (frame, name), split=False)
        delattr(split, name)
        setattr(split, name, _CompiledPart(fn, single))
    return split, len(block_nodes), len(shared) - distinct_before


def _item_inputs(gm: torch.fx.GraphModule) -> list[int]:
    """The positions of |gm|'s inputs that the graph only reads with ``.item()``:
    dynamo passes an unspecialized Python float (a default argument such as a
    RoPE's ``theta``) as a 0-d CPU tensor and takes its value in the graph.
    The CPU ones among them are folded into the program (_fold_items)."""
    item_ops = (torch.ops.aten._local_scalar_dense.default, torch.ops.aten.item.default)
    positions = []
    for i, node in enumerate(n for n in gm.graph.nodes if n.op == "placeholder"):
        users = list(node.users)
        reads = [(u.op == "call_method" and u.target == "item") or u.target in item_ops for u in users]
        if reads and all(reads):
            positions.append(i)
    return positions


def _fold_items(gm: torch.fx.GraphModule, positions: list[int], args: Sequence[Any]) -> torch.fx.GraphModule:
    """|gm| with the ``.item()`` of each input at |positions| replaced by its
    value in |args|: a program is static, so such a number is part of it (as
    ``specialize_float`` would make it) instead of a data-dependent scalar that
    aot_autograd cannot trace."""
    folded = torch.fx.GraphModule(gm, copy.deepcopy(gm.graph))
    placeholders = [n for n in folded.graph.nodes if n.op == "placeholder"]
    for i in positions:
        value = args[i].item()
        for user in list(placeholders[i].users):
            user.replace_all_uses_with(value)
            folded.graph.erase_node(user)
    folded.recompile()
    return folded


class _Specialized:
    """A dynamo graph with symbolic sizes, compiled per concrete input shape.

    Dynamo's default (``dynamic=None``) marks a size symbolic once it changes.
    XLA programs are static, so each call's concrete inputs (their shapes, and
    the values of the symbolic ints) pick a static program: the first call
    with new ones compiles the graph for those inputs (``TpuBackend._aot``), exactly
    as ``dynamic=False`` would have (one program per shape, the change logged
    as a recompile), and later calls reuse it."""

    def __init__(
        self,
        backend: TpuBackend,
        gm: torch.fx.GraphModule,
        label: str | None,
        input_names: list[str],
        frame: Any,
        split: bool = True,
        block: bool = False,
    ) -> None:
        self.backend = backend
        self.gm = gm
        self.label = label
        self.input_names = input_names
        self.frame = frame
        self.split = split  # may split at repeated blocks (a whole dynamo graph)
        self.block = block  # the shared function of a repeated block
        self.compiled: dict[tuple, Callable[..., Any]] = {}
        self.item_inputs = _item_inputs(gm)  # numbers dynamo passes as 0-d tensors

    @staticmethod
    def key(args: Sequence[Any]) -> tuple:
        parts: list[Any] = []
        for a in args:
            if isinstance(a, torch.Tensor):
                # a contiguous input is one key whatever its size-1 strides and offset
                # (a slice of a joint sequence, like FLUX's single blocks' outputs)
                parts.append((a.device, a.dtype, tuple(a.shape), _layout_key(a), a.requires_grad))
            else:
                parts.append(("value", type(a), a if isinstance(a, (int, float, bool)) else repr(a)))
        return tuple(parts)

    def __call__(self, *args: Any) -> Any:
        numbers = [i for i in self.item_inputs if isinstance(args[i], torch.Tensor) and not args[i].is_tpu]
        key = self.key(args) + tuple(args[i].item() for i in numbers)
        fn = self.compiled.get(key)
        if fn is None:
            gm = _fold_items(self.gm, numbers, args) if numbers else self.gm
            fn = self.backend._aot(
                gm,
                list(args),
                self.label,
                self.input_names,
                self.frame,
                split=self.split,
                block=self.block,
            )
            self.compiled[key] = fn
        return fn(*args)


# backend="tpu" names one backend for the process (as a TpuBackend() object
# would be one), so a frame's recompiles are seen as such: logged and counted.
_named_backend: TpuBackend | None = None


def tpu_backend(gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> Callable[..., Any]:
    """``torch.compile(model, backend="tpu")``: a TpuBackend with default options."""
    global _named_backend
    if _named_backend is None:
        _named_backend = TpuBackend()
    return _named_backend(gm, example_inputs)
