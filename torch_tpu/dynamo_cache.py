"""Dynamo's compiled frames across processes: ``cached_compile``.

A warm process finds its programs in the executable cache (``TORCH_TPU_CACHE_DIR``),
yet dynamo still traces the model again: for the full FLUX transformer that is
most of a warm start (about 5 of 6 s on a 2-core host). torch's caching
precompile (``torch._dynamo.config.caching_precompile``) saves a compiled
frame, its guards and transformed bytecode, with one artifact per backend
graph, and installs them in a later process instead of tracing. This module
gives TpuBackend's graphs that artifact and keeps the entries next to the
executable cache, authenticated like its entries:

- the artifact is dynamo's graph (GraphPickler, fake tensors as meta tensors)
  with TpuBackend's label and input names; a later process hands it to its
  TpuBackend at the first call, whose programs then come from the executable
  cache;
- an entry is a pickle, which is code: it is written with the HMAC-SHA256 of
  the executable cache's own secret (``mac.key``), and one whose MAC does not
  match is not unpickled (the frame is traced as if there were no entry);
- the saved guards leave out those an entry cannot hold, as torch's caching
  precompile does for identity guards: here also guards on closure contents
  (fixed by the function's code, whose source torch hashes into the entry),
  which diffusers' decorated ``forward`` methods and marked blocks hold; the
  live frame keeps them all, and they are built once;
- torch installs an entry's globals into the module named by the function's
  ``__module__``; a decorated ``forward`` (``functools.wraps``) runs in its
  decorator's module, so they are installed there too.

What an entry does not check, as torch's caching precompile does not: identity
guards (which function object, which module object) and global dictionaries'
versions. A process that changes such state between runs (another attention
backend registered in a global table, say) must use another cache directory, or
``torch.compile`` itself.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import logging
import os
import pickle
import re
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import torch
from torch._dynamo.precompile_context import BackendCacheArtifact

if TYPE_CHECKING:
    from torch_tpu.compile import TpuBackend

log = logging.getLogger(__name__)

_MAC_SIZE = 32  # HMAC-SHA256


# the TpuBackend whose graphs an entry installed now runs: the one passed to
# cached_compile (torch installs an entry inside torch.compile)
_loading_backend: TpuBackend | None = None


def _secret() -> tuple[str, bytes] | None:
    """(dynamo's entry directory, the executable cache's secret), or None when
    the executable cache keeps nothing on disk."""
    from torch_tpu import _C

    info = _C._cache_info()
    if not info["enabled"] or not info["dir"]:
        return None
    try:
        with open(os.path.join(info["dir"], "mac.key"), "rb") as f:
            key = f.read()
    except OSError:
        return None
    return os.path.join(info["dir"], "dynamo"), key


# --- the backend's artifact ---------------------------------------------------


def _same(value: Any) -> Any:
    return value


def _meta_tensor(shape: tuple, stride: tuple, dtype: torch.dtype) -> torch.Tensor:
    return torch.empty_strided(shape, stride, dtype=dtype, device="meta")


def _graph_pickler() -> type:
    from torch.fx._graph_pickler import GraphPickler

    from torch_tpu.compile import _MARKED_BASE

    class _Pickler(GraphPickler):
        """GraphPickler, with fake tensors as meta tensors of their layout (no
        fake mode to restore) and marked block classes as the class they mark."""

        def reducer_override(self, obj: Any) -> Any:
            if isinstance(obj, type) and _MARKED_BASE in obj.__dict__:
                return _same, (obj.__dict__[_MARKED_BASE],)
            if isinstance(obj, torch._subclasses.fake_tensor.FakeTensor):
                return _meta_tensor, (tuple(obj.shape), tuple(obj.stride()), obj.dtype)
            return super().reducer_override(obj)

    return _Pickler


# what TpuBackend reads of a node's meta (_computations, _block_of)
_KEPT_META = ("example_value", "val", "nn_module_stack")


class _GraphArtifact(BackendCacheArtifact):
    """One dynamo graph for TpuBackend: (graph, label, input names), pickled."""

    def after_deserialization(self) -> Callable[..., Any]:
        return _LoadedGraph(self.content)


class _LoadedGraph:
    """A graph from an entry: compiled by the loading TpuBackend at its first
    call, with that call's arguments (grad mode and inputs decide, as they did
    when dynamo traced it)."""

    def __init__(self, content: bytes) -> None:
        from torch.fx._graph_pickler import GraphPickler

        self.gm, self.label, self.input_names = GraphPickler.loads(
            content, torch._subclasses.fake_tensor.FakeTensorMode()
        )
        for module in self.gm.modules():  # the loaded graphs have no code yet
            if isinstance(module, torch.fx.GraphModule):
                module.recompile()
        from torch_tpu.compile import TpuBackend

        self.backend = _loading_backend if _loading_backend is not None else TpuBackend()
        self.fn: Callable[..., Any] | None = None

    def __call__(self, *args: Any) -> Any:
        if self.fn is None:
            self.fn = self.backend._aot(self.gm, list(args), self.label, self.input_names, id(self.gm))
        return self.fn(*args)


def record_graph(gm: torch.fx.GraphModule, label: str | None, input_names: list[str]) -> None:
    """Records |gm| (before TpuBackend changes it) as the artifact of dynamo's
    graph, where the frame is being saved (cached_compile)."""
    backend_id = getattr(gm, "_backend_id", None)
    if not _saving or backend_id is None:
        return
    from torch._dynamo.precompile_context import PrecompileContext
    from torch.fx._graph_pickler import Options

    options = Options(ops_filter=None, node_metadata_key_filter=lambda key: key in _KEPT_META)
    try:
        content = _graph_pickler().dumps((gm, label, input_names), options)
    except Exception as e:  # the frame is then not saved (its backend is missing)
        log.warning("torch_tpu: %s cannot be saved for later processes: %s", label, e)
        return
    PrecompileContext.record_artifact(_GraphArtifact(key=backend_id, content=content))


# --- the store: entries under the executable cache, with their MAC -------------


def _store_type() -> type:
    from torch._dynamo.package import DiskDynamoCache

    class _Store(DiskDynamoCache):
        """torch's disk store of dynamo entries, under the executable cache's
        directory, each entry bound to its secret by a MAC."""

        def __init__(self, path: str, key: bytes) -> None:
            super().__init__(path)
            self._key = key
            self.unread = False  # set after an entry failed to install

        def path_prefix(self) -> str:
            return self._path_prefix

        def _mac(self, path: str, payload: bytes) -> bytes:
            # the entry's name is bound too: an entry copied under another
            # function's name is refused
            return hmac.new(self._key, path.encode() + b"\0" + payload, hashlib.sha256).digest()

        def write(self, cache_entry: Any, path: str) -> None:
            from torch._inductor.codecache import write_atomic

            payload = pickle.dumps(cache_entry)
            where = os.path.join(self.path_prefix(), path)
            os.makedirs(where, mode=0o700, exist_ok=True)
            write_atomic(os.path.join(where, "entry"), self._mac(path, payload) + payload)

        def read(self, path: str) -> Any:
            if self.unread:
                raise RuntimeError(f"dynamo cache entry {path}: not loaded (it failed to install)")
            with open(os.path.join(self.path_prefix(), path, "entry"), "rb") as f:
                data = f.read()
            mac, payload = data[:_MAC_SIZE], data[_MAC_SIZE:]
            if not hmac.compare_digest(mac, self._mac(path, payload)):
                # torch counts a failed read (dynamo_cache_error) and traces
                raise RuntimeError(f"dynamo cache entry {path}: its MAC does not match: not loaded")
            return pickle.loads(payload)

    return _Store


# --- where torch's install does not hold ---------------------------------------

_torch_patched = False


def _patch_torch() -> None:
    """Where torch's caching precompile does not hold here: an entry's globals
    are installed also in the module its function runs in (below), inlined
    sources are hashed by line range (_hash_inlined_sources_by_lines), and
    guards are built once (_patch_guards)."""
    global _torch_patched
    if _torch_patched:
        return
    import sys

    from torch._dynamo.package import CompilePackage

    plain_install = CompilePackage.install

    def install(self: Any, backends: Any) -> None:
        plain_install(self, backends)
        fn = self._innermost_fn
        home = sys.modules.get(fn.__globals__.get("__name__", "")) if fn is not None else None
        modules = set(self._installed_globals) | ({home} if home is not None else set())
        for module, names in list(self._installed_globals.items()):
            if home is None or module is home:
                continue
            for name in names:  # a decorated function: its decorator's module
                if name not in home.__dict__:
                    self._install_global(home, name, module.__dict__[name])
        _skip_installed_ids(modules)

    CompilePackage.install = install
    _hash_inlined_sources_by_lines()
    _patch_guards()
    _torch_patched = True


def _hash_inlined_sources_by_lines() -> None:
    """torch records each function dynamo inlined (its module's source, and a
    checksum of its lines that a later process compares) and finds the lines
    with inspect.getsourcelines, which tokenizes the module up to the function:
    about 0.1 s for the tiny FLUX pipeline, every compile. The line range is
    taken from the code object instead (its first line to its last); a later
    process checks the same range, so the check is the same."""
    import inspect

    from torch._dynamo import package

    def add_code(self: Any, code: Any) -> None:
        module = inspect.getmodule(code)
        if module is None:
            return
        lines = [line for _, _, line in code.co_lines() if line is not None]
        first = code.co_firstlineno
        last = max([first, *lines]) + 1
        source = "".join(package._get_sourcelines(module, first, last))
        self.inlined_sources.add(
            package.InlinedSource(
                module=module.__name__,
                firstlineno=first,
                lastlineno=last,
                checksum=package._hash_source(source),
                content=package._get_module_content(module),
            )
        )

    package.SourceInfo.add_code = add_code


_NUMBERED_GLOBAL = re.compile(r"^__\w*?_(\d+)(?:_[0-9a-f]{8}(?:_[0-9a-f]{4}){3}_[0-9a-f]{12})?$")


def _skip_installed_ids(modules: set[Any]) -> None:
    """Moves dynamo's name counter past the numbered globals an entry installed
    (``__builtins_dict___0``, ``__compiled_fn_1_<uuid>``): a new process starts
    it at 0, and a later trace in the same module would take those names."""
    import itertools

    from torch._dynamo import bytecode_transformation

    numbers = [
        int(match.group(1))
        for module in modules
        for name in list(vars(module))
        if (match := _NUMBERED_GLOBAL.match(name))
    ]
    if numbers:
        now = next(bytecode_transformation._unique_id_counter)
        bytecode_transformation._unique_id_counter = itertools.count(max(now, max(numbers) + 1))


# guard kinds an entry cannot hold (which object, which function, a dict's
# version): torch's caching precompile drops the same
_UNSAVED_GUARDS = frozenset(("DICT_VERSION", "NN_MODULE", "ID_MATCH", "FUNCTION_MATCH", "CLASS_MATCH"))
_UNSAVED_GUARDS |= frozenset(("MODULE_MATCH", "CLOSURE_MATCH", "WEAKREF_ALIVE"))
_ROOT_NAME = re.compile(r"(?:L\['([^']+)'\]|([A-Za-z_]\w*))")  # L['forward_fn'].x, forward_fn.x


def _savable(guard: Any, free: set[str]) -> bool:
    """Whether an entry keeps |guard|: not a kind above (nor derived from one),
    not on closure contents, nor on the frame's free variables (a decorator's
    wrapped function): those are fixed by the function's code, whose source
    torch hashes into the entry."""
    kinds = {guard.create_fn_name(), *(guard.guard_types or ())}
    if kinds & _UNSAVED_GUARDS or "__closure__" in guard.name:
        return False
    head = _ROOT_NAME.match(guard.name)
    return not (head and (head.group(1) or head.group(2)) in free)


def _patch_guards() -> None:
    """Dynamo builds a frame's guards once for the frame and saves those an
    entry can hold. torch's caching precompile instead filters the guards
    before building them (a guard filter), which builds them twice, and the
    live frame then lacks the identity guards too; here the live frame keeps
    every guard and only the saved copy leaves some out."""
    from torch._dynamo.guards import CheckFunctionManager

    plain_init = CheckFunctionManager.__init__
    plain_serialize = CheckFunctionManager.serialize_guards

    def init(self: Any, f_code: Any, *args: Any, **kwargs: Any) -> None:
        if not _saving:
            return plain_init(self, f_code, *args, **kwargs)
        self._tpu_free = set(f_code.co_freevars)
        with torch._dynamo.config.patch(caching_precompile=False):  # no guard filter
            return plain_init(self, f_code, *args, **kwargs)

    def serialize_guards(self: Any, builder: Any, sorted_guards: list, output_graph: Any) -> bytes:
        free = getattr(self, "_tpu_free", None)
        if free is not None:
            sorted_guards = [guard for guard in sorted_guards if _savable(guard, free)]
        return plain_serialize(self, builder, sorted_guards, output_graph)

    CheckFunctionManager.__init__ = init
    CheckFunctionManager.serialize_guards = serialize_guards


_saving = False


@contextlib.contextmanager
def _caching(store: Any, backend: TpuBackend) -> Iterator[None]:
    """torch's caching precompile, with this store, for one compile or call;
    saves the frames compiled meanwhile."""
    import torch._dynamo.package as package
    import torch._dynamo.precompile_context as precompile_context
    from torch._dynamo.precompile_context import PrecompileContext

    from torch_tpu import compile as tpu_compile

    global _saving, _loading_backend
    config = torch._dynamo.config
    # set and restored by hand: this runs at every call of a compiled module,
    # and config.patch costs four times as much
    saved = (package.DynamoCache, precompile_context.DynamoCache, _saving, _loading_backend)
    was_caching = config.caching_precompile
    package.DynamoCache = precompile_context.DynamoCache = store
    _saving, _loading_backend = True, backend
    tpu_compile._saving_guards = True
    config.caching_precompile = True
    try:
        yield
        if PrecompileContext._dynamo_cache_entries:
            try:
                PrecompileContext.save_to_dynamo_cache()
            except Exception as e:  # a frame that cannot be saved is traced next time
                log.warning("torch_tpu: a compiled frame was not saved for later processes: %s", e)
            # the backends' artifacts stay: a recompile saves the frame's
            # entry again, with every graph it holds
            PrecompileContext._dynamo_cache_entries.clear()
    finally:
        config.caching_precompile = was_caching
        package.DynamoCache, precompile_context.DynamoCache, _saving, _loading_backend = saved
        tpu_compile._saving_guards = _saving


def cached_compile(fn: Any, *, backend: TpuBackend, **torch_compile_kwargs: Any) -> Any:
    """``torch.compile(fn, backend=backend, ...)`` whose dynamo output persists.

    The first process traces and compiles as ``torch.compile`` does, and saves
    each compiled frame (dynamo's guards and transformed bytecode, and the
    graphs it hands TpuBackend) under the executable cache's directory
    (``TORCH_TPU_CACHE_DIR``, in ``dynamo/``). A later process with the same
    torch, Python and model source loads the frame at ``cached_compile`` and
    skips dynamo's trace; its guards still decide at each call, so other input
    shapes or grad modes trace as usual. Without a cache directory on disk
    this is ``torch.compile``. ``pipe.enable_tpu_compile()`` compiles with it.
    """
    located = _secret()
    if located is None:
        return torch.compile(fn, backend=backend, **torch_compile_kwargs)
    _patch_torch()
    store = _store_type()(*located)
    try:
        with _caching(store, backend):
            compiled = torch.compile(fn, backend=backend, **torch_compile_kwargs)
    except Exception as e:  # an entry torch could not install: traced, and saved anew
        log.warning("torch_tpu: dynamo's saved frame was not loaded (%s: %s); tracing", type(e).__name__, e)
        store.unread = True
        import sys

        from torch._dynamo.eval_frame import innermost_fn

        inner = innermost_fn(fn.forward if isinstance(fn, torch.nn.Module) else fn)
        names = {getattr(inner, "__module__", None), getattr(inner, "__globals__", {}).get("__name__")}
        _skip_installed_ids({sys.modules[n] for n in names if n in sys.modules})  # what it installed
        if hasattr(inner, "__code__"):  # and the frames it installed before it failed
            torch._C._dynamo.eval_frame._reset_precompile_entries(inner.__code__)
        with _caching(store, backend):
            compiled = torch.compile(fn, backend=backend, **torch_compile_kwargs)

    def call(inner: Callable[..., Any]) -> Callable[..., Any]:
        def run(*args: Any, **kwargs: Any) -> Any:
            with _caching(store, backend):
                return inner(*args, **kwargs)

        return run

    if isinstance(compiled, torch.nn.Module):
        compiled.forward = call(compiled.forward)
        return compiled
    import functools

    return functools.wraps(fn)(call(compiled))
