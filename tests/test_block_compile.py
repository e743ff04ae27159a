"""Repeated blocks compile once: TpuBackend splits a graph of N equal blocks
at block boundaries, and the blocks share one program (their weights are its
inputs). Outputs and gradients match the whole-graph program."""

from __future__ import annotations

import copy
from pathlib import Path

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


class Joint(nn.Module):
    """Like FLUX's single block: joins the two sequences, returns slices of the result."""

    def __init__(self) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(WIDTH)
        self.mlp = nn.Linear(WIDTH, WIDTH)

    def forward(self, x: torch.Tensor, ctx: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        n = ctx.shape[1]
        h = torch.cat([ctx, x], dim=1)
        h = h + self.mlp(self.norm(h)).tanh()
        return h[:, n:], h[:, :n]


class JointStack(nn.Module):
    def __init__(self, blocks: int = 4, use_ctx: bool = True) -> None:
        super().__init__()
        self.blocks = nn.ModuleList([Joint() for _ in range(blocks)])
        self.out = nn.Linear(WIDTH, 4)
        self.use_ctx = use_ctx

    def forward(self, x: torch.Tensor, ctx: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x, ctx = block(x, ctx)
        if not self.use_ctx:  # as FLUX: dynamo drops the last block's unused slice
            return self.out(x)
        return self.out(x + ctx.mean(dim=1, keepdim=True))


@pytest.mark.parametrize("use_ctx", [True, False], ids=["all-outputs-used", "last-output-unused"])
def test_blocks_fed_slices_share_one_program(use_ctx):
    """The first block gets slices of a joint sequence (contiguous, other strides and offset),
    the others the previous block's outputs; the last block's second output may be unused
    (dynamo then drops it from that block): one program for all of them."""
    torch.manual_seed(0)
    model = JointStack(use_ctx=use_ctx)
    joint = torch.randn(1, 8, WIDTH)
    expected = model(joint[:, 2:], joint[:, :2])
    joint_t = joint.to("tpu")
    compiled = torch.compile(model.to("tpu"), backend=TpuBackend(), dynamic=False)
    with torch.no_grad():
        counts, out = traced(lambda: compiled(joint_t[:, 2:], joint_t[:, :2]).cpu())
    assert counts["block"] == 1, counts
    assert_same(out, expected, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("blocks", [True, False], ids=["blocks", "whole"])
def test_marked_blocks_are_traced_once_and_match(blocks):
    """mark_repeated_blocks: dynamo traces the block once (one region subgraph) and stamps out
    the other calls; TpuBackend compiles the region once. Outputs and gradients match the
    unmarked whole-graph program; blocks=False compiles a marked model whole."""
    torch.manual_seed(0)
    joint = torch.randn(1, 8, WIDTH)

    def run(mark: bool, backend: TpuBackend):
        torch._dynamo.reset()
        torch.manual_seed(0)
        model = JointStack(blocks=5).to("tpu")
        marked = torch_tpu.mark_repeated_blocks(model) if mark else []
        compiled = torch.compile(model, backend=backend, dynamic=False)
        torch_tpu.reset_metrics()
        # both inputs require gradients, as the blocks' outputs do: one region for all calls
        x = joint.to("tpu")[:, 2:].clone().requires_grad_(True)
        ctx = joint.to("tpu")[:, :2].clone().requires_grad_(True)
        out = compiled(x, ctx)
        out.square().mean().backward()
        grads = {name: p.grad.cpu() for name, p in model.named_parameters()}
        grads["ctx"] = ctx.grad.cpu()
        return marked, out.detach().cpu(), x.grad.cpu(), grads, torch_tpu.metrics()["traced_programs"], model

    _, out_whole, dx_whole, grads_whole, counts_whole, _ = run(False, TpuBackend(blocks=False))
    assert counts_whole == {"compiled graph": 2}
    backend = TpuBackend(blocks=blocks)
    marked, out, dx, grads, counts, model = run(True, backend)
    assert marked == ["blocks"]
    assert type(model.blocks[0]) is not Joint and isinstance(model.blocks[0], Joint)
    assert model.blocks[0]._get_name() == "Joint"  # the model's repr names the block's class
    if blocks:
        # one region subgraph in dynamo's graph, called 5 times: one program each way
        assert backend.region_calls == 5 and backend.region_bodies == 1
        assert counts["block"] == 2, counts  # forward and backward
    else:
        assert counts == {"compiled graph": 2}, counts
    assert_same(out, out_whole, atol=1e-5, rtol=1e-4)
    assert_same(dx, dx_whole, atol=1e-5, rtol=1e-4)
    for name in grads_whole:
        assert_same(grads[name], grads_whole[name], atol=1e-5, rtol=1e-4, msg=name)
    # outside torch.compile a marked block is the plain block
    plain = JointStack(blocks=5)
    plain.load_state_dict({k: v.cpu() for k, v in model.state_dict().items()})
    x = joint[:, 2:]
    assert_same(model.cpu()(x, joint[:, :2]), plain(x, joint[:, :2]), atol=0, rtol=0)
    # a copy (deepcopy, pickle, torch.save of the whole model) is of the plain class
    assert type(copy.deepcopy(model).blocks[0]) is Joint


class Widen(nn.Module):
    """A residual block of a given width, holding a list of its own sub-blocks."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.parts = nn.ModuleList([nn.Linear(width, width) for _ in range(2)])
        self.inner = nn.ModuleList([Gate(width) for _ in range(2)])  # inside a block: never marked

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for part, gate in zip(self.parts, self.inner, strict=True):
            x = x + gate(part(x))
        return x


class Gate(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.proj = nn.Linear(width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.silu(self.proj(x))


class Stage(nn.Module):
    """A VAE decoder's up block: its own width, a list of equal blocks, then a resize."""

    def __init__(self, width: int, out: int) -> None:
        super().__init__()
        self.resnets = nn.ModuleList([Widen(width) for _ in range(2)])
        self.resize = nn.Linear(width, out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.resnets:
            x = block(x)
        return self.resize(x)


class Decoder(nn.Module):
    """Stages of different widths: the outer list does not repeat, the lists inside do."""

    def __init__(self) -> None:
        super().__init__()
        self.up_blocks = nn.ModuleList([Stage(32, 16), Stage(16, 8)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for stage in self.up_blocks:
            x = stage(x)
        return x


def test_lists_inside_unequal_stages_are_marked():
    """Where an outer list's children differ (a VAE decoder's up blocks), each child's own list
    of equal blocks is marked; a list inside a marked block is not. One block program per width,
    and the output matches the unmarked whole-graph program."""
    x = torch.randn(4, 32, generator=torch.Generator().manual_seed(1))
    torch.manual_seed(0)
    whole = torch.compile(Decoder().to("tpu"), backend=TpuBackend(blocks=False), dynamic=False)
    with torch.no_grad():
        counts, expected = traced(lambda: whole(x.to("tpu")).cpu())
    assert counts == {"compiled graph": 1}

    torch._dynamo.reset()
    torch.manual_seed(0)
    model = Decoder().to("tpu")
    assert torch_tpu.mark_repeated_blocks(model) == ["up_blocks.0.resnets", "up_blocks.1.resnets"]
    assert type(model.up_blocks[0].resnets[1].inner[0]) is Gate  # inside a marked block
    # a model that is itself the list: its blocks are the unit, the lists inside them are not marked
    assert torch_tpu.mark_repeated_blocks(nn.Sequential(Widen(8), Widen(8))) == [""]
    compiled = torch.compile(model, backend=TpuBackend(), dynamic=False)
    with torch.no_grad():
        counts, out = traced(lambda: compiled(x.to("tpu")).cpu())
    assert counts["block"] == 2, counts  # one per width, each called twice
    assert torch_tpu.metrics()["recompiles"] == []  # each width's block is its own function
    assert_same(out, expected, atol=1e-5, rtol=1e-4)


FAKE = Path(__file__).resolve().parent.parent / "build" / "tests" / "fake_pjrt_plugin.so"


@pytest.mark.skipif(not FAKE.exists(), reason=f"{FAKE} is built by `make ctest`")
def test_target_only_blocks_fed_slices_share_one_program():
    """From shapes alone, for a target: a block's meta outputs have the layout a run returns
    (dense), not the traced slices', so the next block reuses the program."""
    torch_tpu.set_target("fake:1x1", plugin=str(FAKE))
    try:
        torch.manual_seed(0)
        with torch.device("meta"):
            model = JointStack(blocks=4)
        compiled = torch.compile(model, backend=TpuBackend(target_only=True), dynamic=False)
        joint = torch.empty(1, 8, WIDTH, device="meta")
        with torch.no_grad():
            counts, out = traced(lambda: compiled(joint[:, 2:], joint[:, :2]))
        assert out.device.type == "meta" and out.shape == (1, 6, 4)
        assert counts["block (target only)"] == 1, counts
        report = torch_tpu.target_report()  # waits for the compiles in flight
        assert not report.failed and sum("block" in p["label"] for p in report.programs) == 1
    finally:
        torch_tpu.set_target(None)


def test_fused_eager_compiles_repeated_blocks_once(no_fallback):
    """Fused eager cuts its graph where the op sequence repeats (graph.c's loop detection):
    a model of N equal blocks runs as a first graph, one repeated step graph (the blocks) run
    many times, and a last graph, so its compiles do not grow with N."""
    from torch_tpu import EagerMode, eager_mode

    def run(blocks: int, rows: int) -> tuple[int, dict[str, int]]:
        x = torch.randn(rows, 8)  # a batch of its own: nothing cached from another run
        torch.manual_seed(0)
        model = Stack(blocks, mixers=0)
        expected = model(x)
        model.to("tpu")
        torch_tpu.reset_metrics()
        with torch.no_grad(), eager_mode(EagerMode.DEFER_AND_FUSE):
            out = model(x.to("tpu")).cpu()
        assert_same(out, expected, atol=1e-5, rtol=1e-5)
        m = torch_tpu.metrics()
        return m["compiles"], m["flushes"]

    for blocks, rows in ((8, 7), (32, 9)):
        compiled, flushes = run(blocks, rows)
        graphs = sum(flushes.values())
        assert 1 <= compiled <= 3, f"{blocks} blocks: {compiled} compiles ({graphs} graphs ran)"
    assert graphs >= 8, flushes  # 32 blocks: the step graph (two blocks here) ran many times
