"""Compile metrics by program kind (issue 26 item 4): each compile is counted
under the kind of program it made: a strict-eager op, a fused-eager graph, a
torch.compile graph, or a kind the caller forces (``compile_kind("block")``)."""

from __future__ import annotations

import pytest
import torch

import torch_tpu
from torch_tpu import EagerMode, eager_mode
from torch_tpu.metrics import COMPILE_KINDS, compile_kind


def kinds() -> dict[str, int]:
    m = torch_tpu.metrics()
    return {k: m[f"compiles_{k}"] for k in COMPILE_KINDS}


def test_each_site_counts_its_kind(no_fallback):
    torch_tpu.reset_metrics()
    # shapes no other test uses: a program another test compiled would be a cache hit here
    x = torch.arange(123.0).reshape(3, 41).to("tpu")
    (x * 3 - 1).cpu()  # strict eager: one program per op
    after_strict = kinds()
    assert after_strict["eager_op"] >= 2
    assert after_strict["fused_graph"] == after_strict["compiled_graph"] == after_strict["block"] == 0

    with eager_mode(EagerMode.DEFER_AND_FUSE):
        y = (torch.tanh(x) * 5 + x.sum()).cpu()
    after_fused = kinds()
    assert after_fused["fused_graph"] >= 1
    assert after_fused["compiled_graph"] == 0

    compiled = torch.compile(
        lambda t: torch.sin(t) @ t.t() + 0.25, backend=torch_tpu.TpuBackend(), dynamic=False
    )
    z = compiled(x).cpu()
    after_compiled = kinds()
    assert after_compiled["compiled_graph"] >= 1
    assert after_compiled["block"] == 0

    m = torch_tpu.metrics()
    assert m["compiles"] == sum(after_compiled.values())
    assert m["compile_seconds_eager_op"] > 0 and m["compile_seconds_compiled_graph"] > 0
    torch.testing.assert_close(y, torch.tanh(x.cpu()) * 5 + x.cpu().sum())
    torch.testing.assert_close(z, torch.sin(x.cpu()) @ x.cpu().t() + 0.25)
    report = torch_tpu.metrics_report()
    assert "compiles by kind:" in report and "compiled graph" in report


def test_a_forced_kind_wins_and_nests(no_fallback):
    torch_tpu.reset_metrics()
    x = torch.arange(43.0).to("tpu")  # a shape no other test uses
    with compile_kind("block"):
        (x * 7).cpu()
        with compile_kind("compiled_graph"):
            (x - 7).cpu()
        (x + 7).cpu()
    (x / 7).cpu()
    got = kinds()
    assert got == {"eager_op": 1, "fused_graph": 0, "compiled_graph": 1, "block": 2}


def test_an_unknown_kind_is_refused():
    with pytest.raises(ValueError, match="compile_kind: unknown kind 'layer'"), compile_kind("layer"):
        pass
