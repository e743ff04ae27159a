"""What dynamo spends while it traces for TpuBackend, beyond the trace itself.

Dynamo names the function around each traced line for its trace logs by
tokenizing the whole source file, even while those logs are off
(``torch_tpu.compile._name_traced_lines_only_when_logged``): off, no file is
tokenized; on, the names are dynamo's own."""

from __future__ import annotations

import importlib.util
import pathlib
from typing import Any

import torch
import torch._dynamo.funcname_cache as funcname_cache

import torch_tpu

SOURCE = """
import torch

def scaled(x):
    y = torch.sin(x) * 3
    return y + x.sum()
"""


def load(tmp_path: pathlib.Path, name: str) -> tuple[str, Any]:
    """A function from a source file of its own (no other test traces it)."""
    path = tmp_path / f"{name}.py"
    path.write_text(SOURCE)
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return str(path), module.scaled


def compiled_matches(fn: Any) -> None:
    x = torch.linspace(-1, 1, 12).reshape(3, 4)
    out = torch.compile(fn, backend=torch_tpu.TpuBackend(), dynamic=False)(x.to("tpu"))
    torch.testing.assert_close(out.cpu(), fn(x))


def test_logs_off_tokenize_no_source(tmp_path, no_fallback):
    path, fn = load(tmp_path, "traced_quietly")
    compiled_matches(fn)
    assert path not in funcname_cache.cache


def test_trace_call_log_still_names_the_function(tmp_path, no_fallback):
    path, fn = load(tmp_path, "traced_loudly")
    torch._logging.set_logs(trace_call=True)
    try:
        compiled_matches(fn)
    finally:
        torch._logging.set_logs()
    assert "scaled" in funcname_cache.cache[path].values()
