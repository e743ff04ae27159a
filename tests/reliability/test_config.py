"""Validated configuration and clear messages (issue 14, defect 8), and the
debug-eager index checks (defect 4) against the CPU's own errors."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F

import torch_tpu
from torch_tpu import EagerMode


def child(code: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", code], env=dict(os.environ, **env), capture_output=True, text=True, timeout=180
    )


@pytest.mark.parametrize(
    "name, value, accepts",
    [
        ("TORCH_TPU_NUM_DEVICES", "abc", "expected an integer from 1 to 64"),
        ("TORCH_TPU_NUM_DEVICES", "0", "expected an integer from 1 to 64"),
        ("TORCH_TPU_FUSE_MAX_OPS", "-1", "expected an integer from 1 to"),
        ("TORCH_TPU_CACHE_MEMORY_BYTES", "abc", "expected a byte count"),
        ("TORCH_TPU_CACHE_MEMORY_BYTES", "-5", "expected a byte count"),
        ("TORCH_TPU_LAUNCH_BLOCKING", "maybe", "expected 1 or 0"),
        ("TORCH_TPU_CPU_FALLBACK", "2", "expected 1 or 0"),
    ],
)
def test_a_bad_variable_is_a_clear_error(name, value, accepts):
    # device_count() raises (it used to return 0), and so does the first op
    out = child(
        "import torch, torch_tpu\n"
        "try:\n    torch.tpu.device_count()\nexcept RuntimeError as e:\n    print('device_count:', e)\n"
        "torch.ones(2, device='tpu')\n",
        **{name: value},
    )
    assert out.returncode != 0
    want = f"{name}='{value}' is not valid: {accepts}"
    assert f"device_count: torch_tpu configuration: {want}" in out.stdout, out.stdout + out.stderr
    assert want in out.stderr.splitlines()[-1]
    assert "Segmentation" not in out.stderr


def test_good_values_are_taken():
    out = child(
        "import torch, torch_tpu\n"
        "print(torch.tpu.device_count(), torch.ones(2, device='tpu:1').cpu().tolist())",
        TORCH_TPU_NUM_DEVICES="2",
        TORCH_TPU_FUSE_MAX_OPS="16",
        TORCH_TPU_CACHE_MEMORY_BYTES="64M",
        TORCH_TPU_LAUNCH_BLOCKING="false",
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split("\n")[-2] == "2 [1.0, 1.0]"


def test_an_unknown_variable_is_reported_once():
    out = child("import torch, torch_tpu\ntorch.ones(2, device='tpu').cpu()", TORCH_TPU_FUSE_MAXOPS="8")
    assert out.returncode == 0
    assert out.stderr.count("unknown environment variable TORCH_TPU_FUSE_MAXOPS") == 1


def test_set_device_out_of_range_raises():
    with pytest.raises(RuntimeError, match=r"set_device: tpu:5 does not exist: 1 tpu device"):
        torch.tpu.set_device(5)
    torch.tpu.set_device(0)
    assert torch.tpu.current_device() == 0


def test_out_of_memory_message_names_the_op_once_and_gives_a_hint():
    with pytest.raises(torch.OutOfMemoryError) as info:  # 128 TiB, computed by the op
        (torch.ones(1, device="tpu").expand(2**45) + 1).cpu()
    msg = str(info.value).splitlines()[0]
    assert msg.count("aten::add.Tensor") == 1, msg
    assert "free the ones you no longer need" in msg and "smaller batch" in msg


def test_info_with_a_bad_plugin_prints_one_line():
    out = subprocess.run(
        [sys.executable, "-m", "torch_tpu", "info"],
        env=dict(os.environ, TORCH_TPU_PJRT_PLUGIN="/nonexistent/plugin.so"),
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert out.returncode == 1
    lines = [line for line in out.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in out.stderr, out.stderr
    assert lines[0].startswith("torch_tpu: tpu init: cannot open PJRT plugin '/nonexistent/plugin.so'")


# ---- defect 4: debug eager checks every index-taking op -----------------------------

INDEX_CASES = {
    "index_put_": lambda d: torch.zeros(4, device=d).index_put_(
        (torch.tensor([5], device=d),), torch.tensor([1.0], device=d)
    ),
    "setitem": lambda d: torch.zeros(4, device=d).__setitem__(torch.tensor([7], device=d), 1.0),
    "setitem_negative": lambda d: torch.zeros(4, device=d).__setitem__(torch.tensor([-5], device=d), 1.0),
    "index_put_accumulate": lambda d: torch.zeros(4, device=d).index_put_(
        (torch.tensor([5], device=d),), torch.tensor([1.0], device=d), accumulate=True
    ),
    "index_add_": lambda d: torch.zeros(4, device=d).index_add_(
        0, torch.tensor([4], device=d), torch.ones(1, device=d)
    ),
    "index_copy_": lambda d: torch.zeros(4, device=d).index_copy_(
        0, torch.tensor([4], device=d), torch.ones(1, device=d)
    ),
    "put_": lambda d: torch.zeros(4, device=d).put_(torch.tensor([-5], device=d), torch.ones(1, device=d)),
    "nll_loss": lambda d: F.nll_loss(torch.zeros(2, 3, device=d), torch.tensor([0, 3], device=d)),
    "nll_loss_negative": lambda d: F.nll_loss(torch.zeros(2, 3, device=d), torch.tensor([0, -1], device=d)),
    "cross_entropy": lambda d: F.cross_entropy(torch.zeros(2, 3, device=d), torch.tensor([3, 0], device=d)),
    "gather": lambda d: torch.zeros(4, device=d).gather(0, torch.tensor([4], device=d)),
    "index_select": lambda d: torch.zeros(4, device=d).index_select(0, torch.tensor([4], device=d)),
    # each fact of the rows' .index (csrc/lower): the family's words and exception type, negatives,
    # the dim named (wrapped; for x[..., idx] the index's place among the indices given), the bound
    "index_fill_": lambda d: torch.zeros(4, device=d).index_fill_(0, torch.tensor([-5], device=d), 1.0),
    "index_copy_negative_dim": lambda d: torch.zeros(2, 4, device=d).index_copy_(
        -1, torch.tensor([4], device=d), torch.ones(2, 1, device=d)
    ),
    "index_reduce_": lambda d: torch.zeros(4, device=d).index_reduce_(
        0, torch.tensor([4], device=d), torch.ones(1, device=d), "prod"
    ),
    "scatter_": lambda d: torch.zeros(2, 4, device=d).scatter_(-1, torch.tensor([[4]], device=d), 1.0),
    "scatter_reduce": lambda d: torch.zeros(4, device=d).scatter_reduce(
        0, torch.tensor([4], device=d), torch.ones(1, device=d), "sum"
    ),
    "take": lambda d: torch.zeros(4, device=d).take(torch.tensor([-5], device=d)),
    "getitem": lambda d: torch.zeros(4, device=d)[torch.tensor([4], device=d)],
    "getitem_second_dim": lambda d: torch.zeros(2, 4, 3, device=d)[:, torch.tensor([4], device=d)],
    "getitem_after_mask": lambda d: torch.zeros(2, 4, 3, device=d)[
        torch.ones(2, 4, dtype=torch.bool, device=d), torch.tensor([3], device=d)
    ],
    "nll_loss_1d": lambda d: F.nll_loss(torch.zeros(3, device=d), torch.tensor(3, device=d)),
    "nll_loss_backward": lambda d: torch.ops.aten.nll_loss_backward(
        torch.tensor(1.0, device=d),
        torch.zeros(2, 3, device=d),
        torch.tensor([0, 3], device=d),
        None,
        1,
        -100,
        torch.tensor(2.0, device=d),
    ),
}


@pytest.mark.parametrize("case", sorted(INDEX_CASES))
def test_debug_eager_raises_the_cpu_error_for_out_of_range_indices(case, no_fallback):
    fn = INDEX_CASES[case]
    with pytest.raises(Exception) as on_cpu:
        fn("cpu")
    with (
        torch_tpu.eager_mode(EagerMode.DEFER_NEVER_AND_LAUNCH_BLOCKING),
        pytest.raises(type(on_cpu.value)) as on_tpu,
    ):
        fn("tpu")
    cpu_words = str(on_cpu.value).splitlines()[0].removeprefix("index_copy_(): ")
    assert cpu_words in str(on_tpu.value), (str(on_cpu.value), str(on_tpu.value))


def test_debug_eager_accepts_in_range_and_ignored_indices():
    with torch_tpu.eager_mode(EagerMode.DEFER_NEVER_AND_LAUNCH_BLOCKING):
        x = torch.zeros(4, device="tpu")
        x[torch.tensor([-4, 3], device="tpu")] = 1.0
        loss = F.nll_loss(torch.zeros(2, 3, device="tpu"), torch.tensor([2, -100], device="tpu"))
    assert x.cpu().tolist() == [1.0, 0.0, 0.0, 1.0]
    assert loss.item() == 0.0


def test_debug_eager_takes_what_the_cpu_takes(no_fallback):
    # index_fill wraps negative indices on the CPU; int32 indices are indices
    def fill(d):
        return torch.zeros(4, device=d).index_fill_(0, torch.tensor([-1, 0], device=d), 1.0)

    def select(d):
        return torch.arange(4.0, device=d).index_select(0, torch.tensor([3, 0], dtype=torch.int32, device=d))

    with torch_tpu.eager_mode(EagerMode.DEFER_NEVER_AND_LAUNCH_BLOCKING):
        for fn in (fill, select):
            assert fn("tpu").cpu().tolist() == fn("cpu").tolist()


@pytest.mark.parametrize("mode", [EagerMode.DEFER_NEVER, EagerMode.DEFER_NEVER_AND_LAUNCH_BLOCKING])
def test_an_index_on_the_cpu_is_refused(mode):
    # a 0-d CPU tensor reaches the core as a number; as an index it crashed take, put_ and nll_loss
    cases = [
        lambda: torch.zeros(4, device="tpu").take(torch.tensor(1)),
        lambda: torch.zeros(4, device="tpu").put_(torch.tensor(1), torch.ones((), device="tpu")),
        lambda: F.nll_loss(torch.zeros(3, device="tpu"), torch.tensor(1)),
        lambda: torch.zeros(4, device="tpu").index_select(0, torch.tensor(1)),
    ]
    for fn in cases:
        with torch_tpu.eager_mode(mode), pytest.raises(RuntimeError, match="same device.*tpu:0 and cpu"):
            fn()


# ---- integer division by zero (the rows' .division) and mask shapes, in every mode --------

DIVISIONS = {
    "floor_divide": lambda a, b: a // b,
    "remainder": lambda a, b: a % b,
    "fmod": torch.fmod,
    "div_floor": lambda a, b: torch.div(a, b, rounding_mode="floor"),
    "div_trunc": lambda a, b: torch.div(a, b, rounding_mode="trunc"),
}


@pytest.mark.parametrize("op", sorted(DIVISIONS))
def test_integer_division_by_zero_raises_as_on_the_cpu(op, no_fallback):
    fn = DIVISIONS[op]
    a = torch.tensor([1, 2])
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        fn(a, torch.tensor([0, 1]))
    # a zero number, or a 0-d CPU tensor, is known without the device: every mode
    for divisor in (0, torch.tensor(0)):
        with pytest.raises(RuntimeError, match="ZeroDivisionError"):
            fn(a.to("tpu"), divisor)
    # a zero in a device tensor costs a read: debug eager only
    with (
        torch_tpu.eager_mode(EagerMode.DEFER_NEVER_AND_LAUNCH_BLOCKING),
        pytest.raises(RuntimeError, match="ZeroDivisionError"),
    ):
        fn(a.to("tpu"), torch.tensor([0, 1], device="tpu"))
    fn(a.to("tpu"), torch.tensor([0, 1], device="tpu")).cpu()  # strict eager: XLA's value, no error
    with torch_tpu.eager_mode(EagerMode.DEFER_NEVER_AND_LAUNCH_BLOCKING):
        ok = fn(a.to("tpu"), torch.tensor([2, 1], device="tpu")).cpu()
    assert ok.tolist() == fn(a, torch.tensor([2, 1])).tolist()


def test_division_without_integers_does_not_raise(no_fallback):
    with torch_tpu.eager_mode(EagerMode.DEFER_NEVER_AND_LAUNCH_BLOCKING):
        true_div = torch.div(torch.tensor([1, 2], device="tpu"), torch.tensor([0, 1], device="tpu")).cpu()
        floats = (torch.tensor([1.0, 2.0], device="tpu") // 0).cpu()
    assert true_div.tolist() == [float("inf"), 2.0]
    assert floats.tolist() == [float("inf"), float("inf")]


@pytest.mark.parametrize("mode", [EagerMode.DEFER_NEVER, EagerMode.DEFER_NEVER_AND_LAUNCH_BLOCKING])
def test_a_mask_of_another_shape_raises_the_cpu_error(mode, no_fallback):
    def cases(d):
        yield lambda: torch.ones(3, device=d)[torch.ones(4, dtype=torch.bool, device=d)]
        yield lambda: torch.zeros(2, 4, device=d).index_put_(
            (torch.ones(2, 3, dtype=torch.bool, device=d),), torch.tensor(1.0, device=d)
        )

    for on_cpu, on_tpu in zip(cases("cpu"), cases("tpu")):
        with pytest.raises(IndexError) as cpu_error:
            on_cpu()
        with torch_tpu.eager_mode(mode), pytest.raises(IndexError) as tpu_error:
            on_tpu()
        assert str(cpu_error.value).splitlines()[0] in str(tpu_error.value)


# ---- issue 24, defect 6: TORCH_TPU_PJRT_OPTIONS and the plugin path are checked -------


@pytest.mark.parametrize("value", ["100000", "0", "abc", "1.5", "true"])
def test_a_bad_cpu_device_count_option_is_a_clear_error(value):
    # 100000 made the CPU plugin build 100,000 devices (4.4 GB, minutes); a string, a
    # float or a bool made it abort (std::bad_variant_access in its Client_Create)
    out = subprocess.run(
        [sys.executable, "-c", "import torch, torch_tpu\ntorch.ones(2, device='tpu')\n"],
        env=dict(os.environ, TORCH_TPU_PJRT_OPTIONS=f"cpu_device_count={value}"),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 1, (out.returncode, out.stderr[-2000:])  # an exception, not a signal
    last = out.stderr.strip().splitlines()[-1]
    assert last.startswith("RuntimeError:"), last
    assert "cpu_device_count is the device count (as TORCH_TPU_NUM_DEVICES)" in last
    assert "expected an integer from 1 to 64" in last


def test_a_good_cpu_device_count_option_is_taken():
    out = child(
        "import torch, torch_tpu\nprint(torch.tpu.device_count())",
        TORCH_TPU_PJRT_OPTIONS="cpu_device_count=3",
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split("\n")[-2] == "3"


def test_a_fifo_as_the_plugin_is_refused_at_once(tmp_path):
    fifo = tmp_path / "plugin.so"
    os.mkfifo(fifo)  # dlopen would block until a writer came
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            "import torch, torch_tpu\nprint(torch.tpu.device_count())\ntorch.ones(2, device='tpu')",
        ],
        env=dict(os.environ, TORCH_TPU_PJRT_PLUGIN=str(fifo)),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 1, out.stderr[-2000:]
    assert f"cannot open PJRT plugin '{fifo}': not a regular file" in out.stderr
