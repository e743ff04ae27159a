"""Repeated blocks compile once: TpuBackend splits a graph of N equal blocks
at block boundaries, and the blocks share one program (their weights are its
inputs). Outputs and gradients match the whole-graph program."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import torch_tpu
from torch_tpu import TpuBackend


def assert_same(actual, expected, atol, rtol, msg=None):
    torch.testing.assert_close(actual, expected, atol=atol, rtol=rtol, msg=msg)


WIDTH = 32


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(WIDTH)
        self.up = nn.Linear(WIDTH, 2 * WIDTH)
        self.down = nn.Linear(2 * WIDTH, WIDTH)

    def forward(self, x: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
        return x + self.down(torch.nn.functional.gelu(self.up(self.norm(x)))) * scale


class Mixer(nn.Module):
    """A second block class, with two outputs (like FLUX's double blocks)."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(WIDTH, WIDTH)
        self.b = nn.Linear(WIDTH, WIDTH)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return y + self.a(x).tanh(), x + self.b(y).sigmoid()


class Stack(nn.Module):
    def __init__(self, blocks: int, mixers: int) -> None:
        super().__init__()
        self.embed = nn.Linear(8, WIDTH)
        self.mixers = nn.ModuleList([Mixer() for _ in range(mixers)])
        self.blocks = nn.ModuleList([Block() for _ in range(blocks)])
        self.head = nn.Sequential(nn.Linear(WIDTH, WIDTH), nn.ReLU(), nn.Linear(WIDTH, 4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.embed(x)
        g = h * 0.5
        for mixer in self.mixers:
            g, h = mixer(h, g)
        h = h + g
        scale = h.mean(dim=-1, keepdim=True).sigmoid()
        for block in self.blocks:
            h = block(h, scale)
        return self.head(h)


def make(blocks: int = 4, mixers: int = 3) -> Stack:
    torch.manual_seed(0)
    return Stack(blocks, mixers)


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def traced(run) -> tuple[dict[str, int], object]:
    torch_tpu.reset_metrics()
    out = run()
    return torch_tpu.metrics()["traced_programs"], out


def test_repeated_blocks_compile_one_program_each_and_match_whole_graph():
    x = torch.randn(6, 8)
    whole_model = make().to("tpu")
    whole = torch.compile(whole_model, backend=TpuBackend(blocks=False), dynamic=False)
    counts, expected = traced(lambda: whole(x.to("tpu")).cpu())
    assert counts == {"compiled graph": 1}

    model = make().to("tpu")
    backend = TpuBackend()
    compiled = torch.compile(model, backend=backend, dynamic=False)
    counts, out = traced(lambda: compiled(x.to("tpu")).cpu())
    # one program per distinct block (Block and Mixer), not 4 + 3; the code
    # before, between and after the runs of blocks is its own programs
    assert counts["block"] == 2, counts
    assert counts["compiled graph"] == 3, counts
    assert backend.block_splits == 1
    assert_same(out, expected, atol=1e-5, rtol=1e-5)
    assert_same(out, make()(x), atol=1e-4, rtol=1e-4)

    # later calls trace nothing, and another input shape traces each piece once more
    counts, again = traced(lambda: compiled(x.to("tpu")).cpu())
    assert counts == {}
    assert_same(again, out, atol=0, rtol=0)


def test_block_compile_gradients_match_whole_graph():
    x = torch.randn(5, 8)

    def grads(backend: TpuBackend) -> tuple[torch.Tensor, dict[str, torch.Tensor], dict[str, int]]:
        torch._dynamo.reset()
        model = make(blocks=3, mixers=2).to("tpu")
        compiled = torch.compile(model, backend=backend, dynamic=False)
        torch_tpu.reset_metrics()
        xt = x.to("tpu").requires_grad_(True)
        loss = compiled(xt).square().mean()
        loss.backward()
        counts = torch_tpu.metrics()["traced_programs"]
        return (
            xt.grad.cpu(),
            {name: p.grad.cpu() for name, p in model.named_parameters()},
            counts,
        )

    x_whole, p_whole, counts_whole = grads(TpuBackend(blocks=False))
    x_blocks, p_blocks, counts_blocks = grads(TpuBackend())
    assert counts_whole == {"compiled graph": 2}  # forward and backward
    # forward and backward once per distinct block, 2 block classes
    assert counts_blocks["block"] == 4, counts_blocks
    assert_same(x_blocks, x_whole, atol=1e-5, rtol=1e-4)
    assert p_blocks.keys() == p_whole.keys()
    for name in p_whole:
        assert_same(p_blocks[name], p_whole[name], atol=1e-5, rtol=1e-4, msg=name)
    # every block's weights got their own gradient (a shared program, not shared weights)
    assert not torch.equal(p_blocks["blocks.0.up.weight"], p_blocks["blocks.1.up.weight"])


def test_a_sequential_of_plain_layers_stays_one_program():
    torch.manual_seed(0)
    layers = [nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 4)]
    model = nn.Sequential(*layers).to("tpu")
    compiled = torch.compile(model, backend=TpuBackend(), dynamic=False)
    counts, _ = traced(lambda: compiled(torch.randn(3, 8, device="tpu")).cpu())
    assert counts == {"compiled graph": 1}


def test_blocks_of_other_shapes_do_not_split_the_graph():
    class Uneven(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.blocks = nn.ModuleList([nn.Sequential(nn.Linear(8, 8)) for _ in range(2)])
            self.custom = nn.ModuleList([Block(), Block()])
            self.custom[1].up = nn.Linear(WIDTH, 3 * WIDTH)
            self.custom[1].down = nn.Linear(3 * WIDTH, WIDTH)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            s = x[..., :1]
            for b in self.custom:
                x = b(x, s)
            return x

    torch.manual_seed(0)
    model = Uneven()
    x = torch.randn(4, WIDTH)
    expected = model(x)
    compiled = torch.compile(model.to("tpu"), backend=TpuBackend(), dynamic=False)
    counts, out = traced(lambda: compiled(x.to("tpu")).cpu())
    # same class, other weight shapes: nothing repeats, so one program for the whole graph
    assert counts == {"compiled graph": 1}, counts
    assert_same(out, expected, atol=1e-4, rtol=1e-4)
