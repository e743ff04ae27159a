"""Run code right after a module is imported, without importing it first.

torch_tpu extends diffusers' pipelines and safetensors' ``load_file``, but
``import torch_tpu`` must not import either (both are slow to import, and a
user may never need them). :func:`after_import` installs at once when the
module is already loaded, else a one-shot meta path finder that wraps the
module's loader and installs right after the module body runs.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import sys
from collections.abc import Callable
from types import ModuleType
from typing import Any


class _AfterImport(importlib.abc.MetaPathFinder):
    def __init__(self, target: str, install: Callable[[ModuleType], None]) -> None:
        self.target = target
        self.install = install

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname != self.target:
            return None
        sys.meta_path.remove(self)  # once; also keeps find_spec below from finding us
        spec = importlib.util.find_spec(fullname)
        loader = getattr(spec, "loader", None)
        if spec is None or loader is None or not hasattr(loader, "exec_module"):
            return spec
        run = loader.exec_module
        install = self.install

        def exec_module(module: Any) -> None:
            run(module)
            install(module)

        loader.exec_module = exec_module
        return spec


def after_import(
    target: str, ready: Callable[[ModuleType], bool], install: Callable[[ModuleType], None]
) -> None:
    """Calls ``install(module)`` for module ``target`` now if it is loaded and
    ``ready(module)``, else right after it is first imported (once)."""
    module = sys.modules.get(target)
    if module is not None and ready(module):
        install(module)
    elif not any(isinstance(f, _AfterImport) and f.target == target for f in sys.meta_path):
        sys.meta_path.insert(0, _AfterImport(target, install))
