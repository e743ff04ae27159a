"""Which PJRT plugin to load: TORCH_TPU_PJRT_PLUGIN, then libtpu on a TPU VM, a CUDA
PJRT plugin on an NVIDIA machine, else the OpenXLA CPU plugin (xla-cpu-pjrt).

``python -m torch_tpu._discovery`` prints the path and nothing else.
"""

from __future__ import annotations

import glob
import importlib.metadata
import importlib.util
import os

ENV = "TORCH_TPU_PJRT_PLUGIN"

NOT_FOUND = (
    "torch_tpu: no PJRT plugin found. Install one: `pip install xla-cpu-pjrt` (CPU, works anywhere), "
    "`pip install libtpu` (on a Cloud TPU VM), or set TORCH_TPU_PJRT_PLUGIN=/path/to/pjrt_plugin.so"
)

_CUDA_NAMES = ("*cuda*.so", "xla_gpu_pjrt.so", "xla_cuda_plugin.so")


def _plugin_dirs(group: str) -> list[tuple[str, str]]:
    """(entry point name, package directory) for each plugin registered under |group|."""
    found = []
    for ep in importlib.metadata.entry_points(group=group):
        try:
            spec = importlib.util.find_spec(ep.value.split(":")[0])
        except (ImportError, ValueError):
            continue
        if spec is not None and spec.submodule_search_locations:
            found.extend((ep.name, d) for d in spec.submodule_search_locations)
    return found


def _has_tpu_chips() -> bool:
    return bool(glob.glob("/dev/accel*") or glob.glob("/dev/vfio/[0-9]*"))


def has_tpu_chips() -> bool:
    """Whether a TPU chip is attached to this host (its device nodes exist), as JAX checks."""
    return _has_tpu_chips()


def prepare_plugin_env() -> None:
    """Off a TPU VM, libtpu queries the cloud metadata server (30 tries per key, minutes) unless
    TPU_SKIP_MDS_QUERY is set, as JAX sets it; without a worker list and host bounds it also
    warns on stderr, and a second process loading it fails on its lockfile. Only libtpu reads
    these variables; we set them (never overriding the
    user's) whenever no chip is attached: one host, nothing to query."""
    if not _has_tpu_chips():
        os.environ.setdefault("TPU_SKIP_MDS_QUERY", "1")
        os.environ.setdefault("TPU_WORKER_HOSTNAMES", "localhost")
        os.environ.setdefault("TPU_HOST_BOUNDS", "1,1,1")
        # with no chip to guard, libtpu's one-process lockfile only stops a second compiler
        os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")


def libtpu_path() -> str | None:
    """libtpu's .so if the package is installed (whether or not a chip is attached)."""
    return _libtpu()


def _libtpu() -> str | None:
    try:
        import libtpu  # type: ignore[import-not-found]

        path = libtpu.get_library_path()
    except Exception:
        return None
    return path if path and os.path.exists(path) else None


def _cuda_plugin() -> str | None:
    for group in ("xla_plugins", "jax_plugins"):
        for _, directory in _plugin_dirs(group):
            for pattern in _CUDA_NAMES:
                hits = sorted(glob.glob(os.path.join(directory, pattern)))
                if hits:
                    return hits[0]
    return None


def _cpu_plugin() -> str | None:
    for name, directory in _plugin_dirs("xla_plugins"):
        path = os.path.join(directory, "xla_cpu_pjrt.so")
        if name == "xla_cpu_pjrt" and os.path.exists(path):
            return path
    return None


def find_plugin() -> str:
    """The path of the PJRT plugin to load; raises RuntimeError saying what to install."""
    path = os.environ.get(ENV)
    if path:
        return path  # taken as given: a wrong path is reported, with the path, at first use
    if _has_tpu_chips() and (path := _libtpu()):
        return path
    if os.path.exists("/dev/nvidia0") and (path := _cuda_plugin()):
        return path
    if path := _cpu_plugin():
        return path
    raise RuntimeError(NOT_FOUND)


if __name__ == "__main__":
    print(find_plugin())
