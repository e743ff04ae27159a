"""The bad-input catalogue: hostile inputs as data.

Each case is ``(name, code, difference)``. ``code`` runs with ``d`` bound to the
device ("cpu" or "tpu"), ``torch`` and ``F`` (``torch.nn.functional``) in scope;
it may leave its result in ``r``, which is read back to the host (so fused eager
runs it); the tpu's value must then equal the CPU's. ``tpu_only(fn, ok=False)``
runs tpu-only API (sharding): the CPU reference raises (or, with ``ok``,
succeeds), so the tpu must too; ``shard(t, spec)`` shards over all devices on
one mesh axis ``"x"``. ``difference`` is ``None`` when the tpu must behave as the CPU does
(both raise, or both succeed), else the key of the row of the README's
"Differences from CPU" table that documents how it differs, and in which modes
(``DEBUG_CHECKED``: the tpu raises in debug eager only).
"""

from __future__ import annotations

# Differences from CPU (README "Differences from CPU"): key -> modes where the
# tpu does not raise where the CPU does, or raises where the CPU computes.
ALL_MODES = ("strict", "debug", "fused", "compiled")
DEBUG_CHECKED = "debug-checked"  # raises in debug eager; strict and fused eager do not check
DIFFERENCES: dict[str, tuple[str, ...]] = {
    DEBUG_CHECKED: ("strict", "fused", "compiled"),
    "complex": ALL_MODES,  # the tpu raises, the CPU computes
    "nan-to-int": (),  # both succeed, with different values: never raises anywhere
    # issue 24
    "float8-arith": ALL_MODES,  # the CPU has no kernel (or refuses the promotion); the tpu computes
    "fill-expanded": ALL_MODES,  # fill_ through an expanded view: the CPU writes, the tpu raises
    "bernoulli-p": ALL_MODES,  # p outside [0, 1]: the CPU raises, the tpu draws (a check would sync)
    "multinomial-p": ALL_MODES,  # a negative weight: the CPU raises, the tpu draws (a check would sync)
    "compiled-functional": ("compiled",),  # torch.compile's functional graph: no eager overlap checks
    "compiled-data-dependent": ("compiled",),  # a data-dependent size or host value asks for a graph break
}
# Keys whose rows say that both compute but the values differ -> in which modes.
VALUE_DIFFERENCES: dict[str, tuple[str, ...]] = {
    "nan-to-int": ALL_MODES,
    # torch.compile writes each expanded element back into the one it views (PyTorch's inductor
    # on the CPU does the same: zeros(1).expand(3).fill_(1) reads [3, 3, 3])
    "fill-expanded": ("compiled",),
}

CASES: list[tuple[str, str, str | None]] = [
    # --- shapes and dims ---
    ("add_shape_mismatch", "r = torch.ones(3, device=d) + torch.ones(4, device=d)", None),
    ("matmul_mismatch", "r = torch.ones(2, 3, device=d) @ torch.ones(4, 5, device=d)", None),
    ("mm_1d", "r = torch.mm(torch.ones(3, device=d), torch.ones(3, device=d))", None),
    (
        "bmm_batch_mismatch",
        "r = torch.bmm(torch.ones(2, 3, 4, device=d), torch.ones(3, 4, 5, device=d))",
        None,
    ),
    ("linear_mismatch", "r = F.linear(torch.ones(2, 3, device=d), torch.ones(4, 5, device=d))", None),
    ("cat_mismatch", "r = torch.cat([torch.ones(2, 3, device=d), torch.ones(2, 4, device=d)], 0)", None),
    ("cat_empty_list", "r = torch.cat([], 0)", None),
    ("stack_mismatch", "r = torch.stack([torch.ones(2, device=d), torch.ones(3, device=d)])", None),
    ("view_bad_numel", "r = torch.ones(6, device=d).view(4)", None),
    ("view_noncontiguous", "r = torch.ones(2, 3, device=d).t().view(6)", None),
    ("reshape_bad_numel", "r = torch.ones(6, device=d).reshape(5)", None),
    ("permute_too_few", "r = torch.ones(2, 3, device=d).permute(0)", None),
    ("transpose_dim_oob", "r = torch.ones(2, 3, device=d).transpose(0, 5)", None),
    ("sum_dim_oob", "r = torch.ones(2, 3, device=d).sum(dim=3)", None),
    ("softmax_dim_oob", "r = torch.ones(2, 3, device=d).softmax(dim=-3)", None),
    ("squeeze_dim_oob", "r = torch.ones(2, 3, device=d).squeeze(4)", None),
    ("expand_bad", "r = torch.ones(3, device=d).expand(4)", None),
    ("narrow_oob", "r = torch.ones(4, device=d).narrow(0, 2, 5)", None),
    ("select_oob", "r = torch.ones(4, device=d).select(0, 4)", None),
    ("getitem_int_oob", "r = torch.ones(4, device=d)[4]", None),
    ("getitem_float_index", "r = torch.ones(4, device=d)[torch.tensor([1.0], device=d)]", None),
    ("getitem_mask_shape", "r = torch.ones(3, device=d)[torch.ones(4, dtype=torch.bool, device=d)]", None),
    ("setitem_shape_mismatch", "x = torch.ones(4, device=d); x[0:2] = torch.ones(3, device=d); r = x", None),
    ("split_size_zero", "r = torch.ones(4, device=d).split(0)", None),
    ("chunk_zero", "r = torch.ones(4, device=d).chunk(0)", None),
    ("repeat_too_few", "r = torch.ones(2, 3, device=d).repeat(2)", None),
    ("unfold_too_big", "r = torch.ones(4, device=d).unfold(0, 5, 1)", None),
    (
        "where_shape",
        "r = torch.where(torch.ones(3, dtype=torch.bool, device=d), torch.ones(4, device=d), 0.0)",
        None,
    ),
    ("flatten_bad_dims", "r = torch.ones(2, 3, device=d).flatten(1, 0)", None),
    # --- layers ---
    (
        "conv_channels",
        "r = F.conv2d(torch.ones(1, 3, 8, 8, device=d), torch.ones(4, 2, 3, 3, device=d))",
        None,
    ),
    (
        "conv_kernel_too_big",
        "r = F.conv2d(torch.ones(1, 1, 2, 2, device=d), torch.ones(1, 1, 3, 3, device=d))",
        None,
    ),
    ("layer_norm_shape", "r = F.layer_norm(torch.ones(2, 3, device=d), (4,))", None),
    ("group_norm_groups", "r = F.group_norm(torch.ones(2, 6, 4, device=d), 4)", None),
    ("pad_negative_too_much", "r = F.pad(torch.ones(1, 2, device=d), (-3, 0))", None),
    ("interpolate_size_zero", "r = F.interpolate(torch.ones(1, 1, 4, device=d), size=0)", None),
    (
        "sdpa_head_dim_mismatch",
        "r = F.scaled_dot_product_attention(torch.ones(1, 2, 4, 8, device=d), "
        "torch.ones(1, 2, 4, 6, device=d), torch.ones(1, 2, 4, 8, device=d))",
        None,
    ),
    ("dropout_p_bad", "r = F.dropout(torch.ones(3, device=d), p=1.5)", None),
    # --- dtypes ---
    ("softmax_int", "r = torch.ones(3, dtype=torch.long, device=d).softmax(0)", None),
    ("mean_int", "r = torch.ones(3, dtype=torch.long, device=d).mean()", None),
    ("inplace_promotion", "r = torch.ones(3, dtype=torch.long, device=d).add_(0.5)", None),
    (
        "out_wrong_dtype",
        "r = torch.add(torch.ones(3, device=d), 1, out=torch.empty(3, dtype=torch.long, device=d))",
        None,
    ),
    ("int_requires_grad", "r = torch.ones(3, dtype=torch.long, device=d, requires_grad=True)", None),
    ("masked_fill_float_mask", "r = torch.ones(3, device=d).masked_fill(torch.ones(3, device=d), 0.0)", None),
    ("complex_tensor", "r = torch.ones(3, dtype=torch.complex64, device=d)", "complex"),
    (
        "nan_inf_to_int",
        "r = torch.tensor([float('nan'), float('inf'), -float('inf')], device=d).to(torch.int32)",
        "nan-to-int",
    ),
    # --- factories ---
    ("empty_negative", "r = torch.empty(-1, device=d)", None),
    ("randn_negative", "r = torch.randn(-2, device=d)", None),
    ("arange_step_zero", "r = torch.arange(0, 10, 0, device=d)", None),
    ("arange_wrong_sign", "r = torch.arange(0, 10, -1, device=d)", None),
    ("linspace_negative_steps", "r = torch.linspace(0, 1, -1, device=d)", None),
    (
        "multinomial_negative",
        "r = torch.multinomial(torch.tensor([-1.0, 1.0], device=d), 1)",
        "multinomial-p",
    ),
    # --- devices and host reads ---
    ("to_missing_device", "r = torch.ones(3, device=d).to(d + ':7' if d != 'cpu' else 'meta:x')", None),
    (
        "mixed_device_add",
        "r = torch.ones(3, device=d) + torch.ones(3, device='cpu' if d != 'cpu' else 'meta')",
        None,
    ),
    ("item_of_many", "r = torch.ones(3, device=d).item()", None),
    ("bool_ambiguous", "r = bool(torch.ones(3, device=d))", None),
    ("max_of_empty", "r = torch.ones(0, device=d).max()", None),
    ("argmax_of_empty", "r = torch.ones(0, device=d).argmax()", None),
    ("topk_too_big", "r = torch.ones(3, device=d).topk(5)", None),
    # --- in place and aliasing ---
    ("inplace_broadcast_self", "r = torch.ones(3, device=d).add_(torch.ones(2, 3, device=d))", None),
    ("inplace_expanded", "r = torch.zeros(1, device=d).expand(3).add_(1)", "compiled-functional"),
    (
        "inplace_overlap_copy",
        "x = torch.arange(4.0, device=d); x[1:].copy_(x[:-1]); r = x",
        "compiled-functional",
    ),
    (
        "out_expanded",
        "r = torch.add(torch.zeros(3, device=d), 1, out=torch.zeros(3, device=d).expand(2, 3))",
        "compiled-functional",
    ),
    # --- autograd ---
    ("leaf_inplace_grad", "r = torch.ones(3, device=d, requires_grad=True).add_(1)", None),
    (
        "backward_twice",
        "x = torch.ones(3, device=d, requires_grad=True); y = (x * x).sum(); y.backward(); y.backward()",
        None,
    ),
    ("backward_non_scalar", "x = torch.ones(3, device=d, requires_grad=True); (x * 2).backward()", None),
    # --- out-of-range indices (the device clamps gathers and drops scatters) ---
    (
        "index_select_oob",
        "r = torch.ones(4, device=d).index_select(0, torch.tensor([4], device=d))",
        DEBUG_CHECKED,
    ),
    (
        "embedding_oob",
        "r = F.embedding(torch.tensor([4], device=d), torch.ones(4, 2, device=d))",
        DEBUG_CHECKED,
    ),
    ("gather_oob", "r = torch.ones(4, device=d).gather(0, torch.tensor([4], device=d))", DEBUG_CHECKED),
    (
        "scatter_add_oob",
        "r = torch.zeros(4, device=d).scatter_add_(0, torch.tensor([4], device=d), torch.ones(1, device=d))",
        DEBUG_CHECKED,
    ),
    ("getitem_tensor_oob", "r = torch.ones(4, device=d)[torch.tensor([5], device=d)]", DEBUG_CHECKED),
    (
        "index_put_oob",
        "r = torch.zeros(4, device=d).index_put_((torch.tensor([5], device=d),), torch.tensor([1.0], device=d))",
        DEBUG_CHECKED,
    ),
    (
        "setitem_tensor_oob",
        "x = torch.zeros(4, device=d); x[torch.tensor([7], device=d)] = 1.0; r = x",
        DEBUG_CHECKED,
    ),
    (
        "setitem_negative_oob",
        "x = torch.zeros(4, device=d); x[torch.tensor([-5], device=d)] = 1.0; r = x",
        DEBUG_CHECKED,
    ),
    (
        "index_add_oob",
        "r = torch.zeros(4, device=d).index_add_(0, torch.tensor([4], device=d), torch.ones(1, device=d))",
        DEBUG_CHECKED,
    ),
    (
        "index_copy_oob",
        "r = torch.zeros(4, device=d).index_copy_(0, torch.tensor([4], device=d), torch.ones(1, device=d))",
        DEBUG_CHECKED,
    ),
    (
        "put_oob",
        "r = torch.zeros(4, device=d).put_(torch.tensor([4], device=d), torch.ones(1, device=d))",
        DEBUG_CHECKED,
    ),
    ("take_oob", "r = torch.zeros(4, device=d).take(torch.tensor([-5], device=d))", DEBUG_CHECKED),
    (
        "nll_loss_target_oob",
        "r = F.nll_loss(torch.zeros(2, 3, device=d), torch.tensor([0, 3], device=d))",
        DEBUG_CHECKED,
    ),
    (
        "nll_loss_negative_target",
        "r = F.nll_loss(torch.zeros(2, 3, device=d), torch.tensor([0, -1], device=d))",
        DEBUG_CHECKED,
    ),
    (
        "cross_entropy_target_oob",
        "r = F.cross_entropy(torch.zeros(2, 3, device=d), torch.tensor([0, 3], device=d))",
        DEBUG_CHECKED,
    ),
    (
        "nll_loss_ignore_index",
        "r = F.nll_loss(torch.zeros(2, 3, device=d), torch.tensor([0, -100], device=d))",
        None,
    ),
    # --- integer division by zero ---
    (
        "int_floordiv_zero_tensor",
        "r = torch.tensor([1, 2], device=d) // torch.tensor([0, 1], device=d)",
        DEBUG_CHECKED,
    ),
    (
        "int_remainder_zero_tensor",
        "r = torch.tensor([1, 2], device=d) % torch.tensor([0, 1], device=d)",
        DEBUG_CHECKED,
    ),
    (
        "int_fmod_zero_tensor",
        "r = torch.fmod(torch.tensor([1, 2], device=d), torch.tensor([0, 1], device=d))",
        DEBUG_CHECKED,
    ),
    ("int_floordiv_zero_number", "r = torch.tensor([1, 2], device=d) // 0", None),
    ("int_remainder_zero_number", "r = torch.tensor([1, 2], device=d) % 0", None),
    ("int_true_div_zero", "r = torch.tensor([1, 2], device=d) / torch.tensor([0, 1], device=d)", None),
    ("float_div_zero", "r = torch.tensor([1.0, -1.0, 0.0], device=d) / 0.0", None),
    # --- memory ---
    ("huge_allocation", "r = torch.ones(2**45, device=d)", None),
]

# The second attack (issue 24): dtypes' edge values (float8, complex, bool,
# integers), huge and negative sizes, empty tensors, out= misuse, in-place ops
# on views and aliases, index edge cases, generators, devices, sharding.
E4 = "torch.float8_e4m3fn"
E5 = "torch.float8_e5m2"
CASES += [
    (
        "f8_e4m3_cast_inf",
        f"r = torch.tensor([float('inf'), -float('inf'), 1e6, -1e6], device=d).to({E4})",
        None,
    ),
    ("f8_e4m3_cast_nan", f"r = torch.tensor([float('nan'), -float('nan')], device=d).to({E4})", None),
    ("f8_e5m2_cast_inf", f"r = torch.tensor([float('inf'), 1e6, -1e6, 1e-9], device=d).to({E5})", None),
    (
        "f8_e4m3_mul_saturates",
        f"a = torch.tensor([1.0, 300, -448, 20, 30], device=d).to({E4}); r = a * a",
        None,
    ),
    (
        "f8_e4m3_add_saturates",
        f"a = torch.tensor([1.0, 300, -448, 20, 30], device=d).to({E4}); r = a + a + a",
        "float8-arith",
    ),
    (
        "f8_e4m3_sub_saturates",
        f"a = torch.tensor([448.0, -448], device=d).to({E4}); r = a - (-a)",
        "float8-arith",
    ),
    (
        "f8_e4m3_div_zero",
        f"a = torch.tensor([1.0, -1, 0], device=d).to({E4}); r = a / torch.zeros(3, device=d).to({E4})",
        "float8-arith",
    ),
    ("f8_e5m2_mul_overflow", f"a = torch.tensor([50000.0, -50000], device=d).to({E5}); r = a * a", None),
    ("f8_e4m3_to_int", f"r = torch.tensor([448.0, -448, 0.5], device=d).to({E4}).to(torch.int32)", None),
    (
        "f8_e4m3_mixed_promotion",
        f"r = torch.tensor([2.0], device=d).to({E4}) + torch.tensor([2.0], device=d).to({E5})",
        "float8-arith",
    ),
    (
        "f8_e4m3_mul_float",
        f"r = torch.tensor([200.0], device=d).to({E4}) * torch.tensor([4.0], device=d)",
        "float8-arith",
    ),
    ("f8_e4m3_mul_number", f"r = torch.tensor([200.0, 1.0], device=d).to({E4}) * 4", "float8-arith"),
    ("f8_e4m3_view_uint8", f"r = torch.tensor([1.0, -2.0], device=d).to({E4}).view(torch.uint8)", None),
    ("f8_e4m3_requires_grad", f"r = torch.ones(2, device=d, dtype={E4}, requires_grad=True)", None),
    ("f8_e4m3_sum", f"r = torch.ones(4, device=d, dtype={E4}).sum()", "float8-arith"),
    # --- complex edge values ---
    (
        "c64_div_zero",
        "r = torch.tensor([1 + 1j], device=d) / torch.zeros(1, dtype=torch.complex64, device=d)",
        None,
    ),
    (
        "c64_div_zero_fused_zeros",
        "z = torch.zeros(2, dtype=torch.complex64, device=d); r = torch.tensor([1 + 1j, 0j], device=d) / z",
        None,
    ),
    (
        "c64_div_inf",
        "r = torch.tensor([1 + 1j], device=d) / torch.tensor([complex(float('inf'), 0)], device=d)",
        None,
    ),
    (
        "c64_div_large",
        "r = torch.tensor([1e30 + 1e30j], device=d) / torch.tensor([1e30 + 1e30j], device=d)",
        None,
    ),
    (
        "c64_div_mixed_parts",
        "r = torch.tensor([3 + 4j, -1 - 2j], device=d) / torch.tensor([1e-20 + 2j, 5 - 1e-25j], device=d)",
        None,
    ),
    ("c64_abs_inf", "r = torch.tensor([complex(float('inf'), float('nan'))], device=d).abs()", None),
    (
        "c64_mul_nan",
        "r = torch.tensor([complex(float('nan'), 1)], device=d) * torch.tensor([1 + 1j], device=d)",
        None,
    ),
    ("c64_lt_raises", "r = torch.tensor([1 + 1j], device=d) < torch.tensor([1 + 1j], device=d)", None),
    ("c64_max_raises", "r = torch.tensor([1 + 1j, 2j], device=d).max()", None),
    ("c64_to_float", "r = torch.tensor([1.5 + 2j], device=d).to(torch.float32)", None),
    ("c64_sum_empty", "r = torch.zeros(0, dtype=torch.complex64, device=d).sum()", None),
    ("c64_view_as_real_bad", "r = torch.view_as_real(torch.ones(3, device=d))", None),
    ("c64_view_as_complex_bad", "r = torch.view_as_complex(torch.ones(3, 3, device=d))", None),
    ("c64_real_of_real", "r = torch.ones(2, device=d).real", None),
    ("c64_imag_of_real", "r = torch.ones(2, device=d).imag", None),
    ("c64_reciprocal_zero", "r = torch.zeros(1, dtype=torch.complex64, device=d).reciprocal()", None),
    ("c64_sqrt_negative", "r = torch.tensor([-4 + 0j], device=d).sqrt()", None),
    # --- bool edge values ---
    ("bool_neg", "r = -torch.ones(2, dtype=torch.bool, device=d)", None),
    (
        "bool_sub",
        "r = torch.ones(2, dtype=torch.bool, device=d) - torch.ones(2, dtype=torch.bool, device=d)",
        None,
    ),
    ("bool_sum", "r = torch.ones(5, dtype=torch.bool, device=d).sum()", None),
    ("bool_mean", "r = torch.ones(5, dtype=torch.bool, device=d).mean()", None),
    (
        "bool_div",
        "r = torch.ones(2, dtype=torch.bool, device=d) / torch.zeros(2, dtype=torch.bool, device=d)",
        None,
    ),
    ("bool_add_mul", "b = torch.tensor([True, False], device=d); r = (b + b, b * b)", None),
    ("bool_invert", "r = ~torch.tensor([True, False], device=d)", None),
    ("bool_cumsum", "r = torch.tensor([True, True, False], device=d).cumsum(0)", None),
    ("bool_from_nan", "r = torch.tensor([float('nan'), 0.0, -0.0], device=d).to(torch.bool)", None),
    # --- integer edge values ---
    ("int8_add_wraps", "r = torch.tensor([127], dtype=torch.int8, device=d) + 1", None),
    ("int32_mul_wraps", "r = torch.tensor([2**30], dtype=torch.int32, device=d) * 4", None),
    ("int8_abs_min", "r = torch.tensor([-128], dtype=torch.int8, device=d).abs()", None),
    ("int64_min_neg", "r = -torch.tensor([-2**63], device=d)", None),
    ("uint8_sub_wraps", "r = torch.tensor([0], dtype=torch.uint8, device=d) - 1", None),
    ("int_pow_negative", "r = torch.tensor([2], device=d) ** -1", None),
    ("int_shift_big", "r = torch.tensor([1], device=d) << 70", None),
    (
        "int64_big_values",
        "r = torch.tensor([2**62, -2**62], device=d) + torch.tensor([2**62 - 1, 1], device=d)",
        None,
    ),
    # --- huge and negative sizes ---
    ("arange_int64_large", "r = torch.arange(2**60, 2**60 + 10, 3, device=d)", None),
    ("arange_int64_negative_large", "r = torch.arange(-2**62, -2**62 + 5, device=d)", None),
    ("arange_huge_length", "r = torch.arange(0, 2**62, device=d)", None),
    ("arange_float_large", "r = torch.arange(2.0**40, 2.0**40 + 4, device=d)", None),
    ("zeros_numel_overflow", "r = torch.zeros(2**40, 2**40, device=d)", None),
    ("empty_strided_negative", "r = torch.empty_strided((2, 2), (-1, 1), device=d)", None),
    ("full_negative", "r = torch.full((-3,), 1.0, device=d)", None),
    ("eye_negative", "r = torch.eye(-1, device=d)", None),
    ("view_two_minus_one", "r = torch.ones(6, device=d).view(-1, -1)", None),
    ("reshape_minus_two", "r = torch.ones(6, device=d).reshape(-2, 3)", None),
    ("expand_negative", "r = torch.ones(1, device=d).expand(-2)", None),
    ("repeat_negative", "r = torch.ones(2, device=d).repeat(-1)", None),
    ("randint_huge_numel", "r = torch.randint(0, 5, (2**62,), device=d)", None),
    ("linspace_huge_steps", "r = torch.linspace(0, 1, 2**62, device=d)", None),
    ("new_zeros_negative", "r = torch.ones(2, device=d).new_zeros((2, -1))", None),
    # --- empty tensors ---
    ("empty_sum", "r = torch.ones(0, 3, device=d).sum(0)", None),
    ("empty_mean", "r = torch.ones(0, device=d).mean()", None),
    ("empty_prod", "r = torch.ones(0, device=d).prod()", None),
    ("empty_max_dim", "r = torch.ones(0, 3, device=d).max(dim=0)", None),
    ("empty_max_other_dim", "r = torch.ones(0, 3, device=d).amax(dim=1)", None),
    ("empty_matmul", "r = torch.ones(0, 3, device=d) @ torch.ones(3, 0, device=d)", None),
    ("empty_matmul_inner", "r = torch.ones(2, 0, device=d) @ torch.ones(0, 2, device=d)", None),
    ("empty_softmax", "r = torch.ones(0, 4, device=d).softmax(-1)", None),
    ("empty_std", "r = torch.ones(0, device=d).std()", None),
    ("empty_sort", "r = torch.ones(0, device=d).sort()", None),
    ("empty_cumsum", "r = torch.ones(0, device=d).cumsum(0)", None),
    ("empty_cat", "r = torch.cat([torch.ones(0, device=d), torch.ones(2, device=d)])", None),
    (
        "empty_conv_batch",
        "r = F.conv2d(torch.ones(0, 1, 4, 4, device=d), torch.ones(2, 1, 3, 3, device=d))",
        None,
    ),
    ("empty_layer_norm", "r = F.layer_norm(torch.ones(0, 4, device=d), (4,))", None),
    (
        "empty_index_select",
        "r = torch.ones(3, device=d).index_select(0, torch.tensor([], dtype=torch.long, device=d))",
        None,
    ),
    ("empty_topk", "r = torch.ones(0, device=d).topk(0)", None),
    ("empty_argmax_dim", "r = torch.ones(0, 3, device=d).argmax(dim=1)", None),
    ("empty_nonzero", "r = torch.ones(0, device=d).nonzero()", None),
    (
        "empty_mark_sharding",
        "r = tpu_only(lambda: shard(torch.ones(4, 0, device=d), ('x', None)), ok=True)",
        None,
    ),
    # --- out= misuse ---
    (
        "out_wrong_shape_resizes",
        "o = torch.empty(5, device=d); torch.add(torch.ones(3, device=d), 1, out=o); r = o",
        None,
    ),
    (
        "out_noncontiguous",
        "o = torch.zeros(3, 2, device=d).t(); torch.add(torch.ones(2, 3, device=d), 1, out=o); r = o",
        None,
    ),
    ("out_aliases_input", "x = torch.ones(3, device=d); torch.add(x, x, out=x); r = x", None),
    (
        "out_other_device",
        "r = tpu_only(lambda: torch.add(torch.ones(3, device=d), 1, out=torch.empty(3)))",
        None,
    ),
    (
        "out_int_for_float",
        "r = torch.mul(torch.ones(3, device=d), 0.5, out=torch.empty(3, dtype=torch.int32, device=d))",
        None,
    ),
    (
        "out_bool_for_compare",
        "o = torch.empty(3, dtype=torch.float32, device=d); torch.lt(torch.ones(3, device=d), 2, out=o); r = o",
        None,
    ),
    (
        "out_partial_overlap",
        "x = torch.arange(6.0, device=d); torch.add(x[:4], 1, out=x[2:]); r = x",
        "compiled-functional",
    ),
    (
        "out_matmul_wrong_dtype",
        "r = torch.mm(torch.ones(2, 2, device=d), torch.ones(2, 2, device=d), out=torch.empty(2, 2, dtype=torch.float64, device=d))",
        None,
    ),
    # --- in place on views and aliases ---
    ("inplace_strided_view", "x = torch.zeros(6, device=d); x[::2].add_(1); r = x", None),
    (
        "inplace_transposed_view",
        "x = torch.zeros(2, 3, device=d); x.t().add_(torch.arange(2.0, device=d)); r = x",
        None,
    ),
    ("inplace_diagonal", "x = torch.zeros(3, 3, device=d); x.diagonal().fill_(2); r = x", None),
    ("inplace_self_alias", "x = torch.arange(3.0, device=d); x.mul_(x); r = x", None),
    ("inplace_copy_flip", "x = torch.arange(4.0, device=d); x.copy_(x.flip(0)); r = x", None),
    (
        "inplace_partial_overlap_mul",
        "x = torch.arange(4.0, device=d); x[1:].mul_(x[:-1]); r = x",
        "compiled-functional",
    ),
    ("inplace_unsqueeze_view", "x = torch.zeros(3, device=d); x.unsqueeze(0).add_(1); r = x", None),
    ("inplace_view_of_view", "x = torch.zeros(4, 4, device=d); x[1:3][:, 1:3].fill_(5); r = x", None),
    (
        "inplace_real_view",
        "z = torch.zeros(2, dtype=torch.complex64, device=d); z.real.fill_(3); r = z",
        None,
    ),
    (
        "inplace_int_view_dtype",
        "x = torch.zeros(2, device=d); x.view(torch.int32).fill_(1065353216); r = x",
        None,
    ),
    ("inplace_zero_stride_fill", "r = torch.zeros(1, device=d).expand(3).fill_(1)", "fill-expanded"),
    # --- index edge cases ---
    ("index_negative_in_range", "r = torch.arange(4.0, device=d)[torch.tensor([-1, -4], device=d)]", None),
    ("index_empty_list", "r = torch.arange(4.0, device=d)[[]]", None),
    ("index_mask_all_false", "x = torch.arange(4.0, device=d); r = x[x > 10]", None),
    (
        "index_int8_tensor",
        "r = torch.arange(4.0, device=d)[torch.tensor([1], dtype=torch.int8, device=d)]",
        None,
    ),
    (
        "index_int32_tensor",
        "r = torch.arange(4.0, device=d)[torch.tensor([1, 3], dtype=torch.int32, device=d)]",
        None,
    ),
    ("index_too_many", "r = torch.arange(4.0, device=d)[0, 0]", None),
    ("index_cpu_index_tpu_tensor", "r = torch.arange(4.0, device=d)[torch.tensor([1, 2])]", None),
    (
        "gather_wrong_rank",
        "r = torch.ones(2, 2, device=d).gather(0, torch.zeros(2, dtype=torch.long, device=d))",
        None,
    ),
    (
        "index_select_2d_index",
        "r = torch.ones(4, device=d).index_select(0, torch.zeros(2, 2, dtype=torch.long, device=d))",
        None,
    ),
    (
        "masked_select_shape",
        "r = torch.ones(3, device=d).masked_select(torch.ones(4, dtype=torch.bool, device=d))",
        None,
    ),
    (
        "index_put_accumulate_dups",
        "x = torch.zeros(3, device=d); x.index_put_((torch.tensor([0, 0, 2, 0], device=d),), torch.ones(4, device=d), accumulate=True); r = x",
        None,
    ),
    (
        "index_reduce_prod_f16",
        "x = torch.ones(4, dtype=torch.float16, device=d); x.index_reduce_(0, torch.tensor([0, 0, 3], device=d), torch.tensor([2.0, 3, 4], dtype=torch.float16, device=d), 'prod'); r = x",
        None,
    ),
    (
        "scatter_reduce_bad",
        "r = torch.zeros(3, device=d).scatter_reduce(0, torch.tensor([0], device=d), torch.ones(1, device=d), 'median')",
        None,
    ),
    (
        "index_add_dtype_mismatch",
        "r = torch.zeros(3, device=d).index_add_(0, torch.tensor([0], device=d), torch.ones(1, dtype=torch.float64, device=d))",
        None,
    ),
    (
        "setitem_bool_mask_value",
        "x = torch.zeros(4, device=d); x[torch.tensor([True, False, True, False], device=d)] = torch.tensor([1.0, 2.0], device=d); r = x",
        "compiled-data-dependent",
    ),
    # --- generators ---
    (
        "generator_cpu_for_tpu",
        "g = torch.Generator(); r = tpu_only(lambda: torch.randn(3, device=d, generator=g))",
        None,
    ),
    (
        "generator_negative_seed",
        "g = torch.Generator(device=d); g.manual_seed(-1); r = torch.rand(2, device=d, generator=g).shape",
        None,
    ),
    ("generator_huge_seed", "g = torch.Generator(device=d); g.manual_seed(2**64); r = 0", None),
    ("randint_low_ge_high", "r = torch.randint(5, 5, (3,), device=d)", None),
    ("normal_negative_std", "r = torch.normal(torch.zeros(3, device=d), -1.0)", None),
    ("bernoulli_p_bad", "r = torch.bernoulli(torch.full((3,), 1.5, device=d))", "bernoulli-p"),
    ("multinomial_too_many", "r = torch.multinomial(torch.ones(3, device=d), 5)", None),
    ("randperm_negative", "r = torch.randperm(-1, device=d)", None),
    ("uniform_from_gt_to", "r = torch.empty(3, device=d).uniform_(2, 1)", None),
    ("exponential_negative", "r = torch.empty(3, device=d).exponential_(-1.0)", None),
    ("randint_bool_dtype_high", "r = torch.randint(0, 3, (4,), dtype=torch.bool, device=d)", None),
    # --- device mismatches and mixed devices ---
    ("matmul_mixed_devices", "r = tpu_only(lambda: torch.ones(2, 2, device=d) @ torch.ones(2, 2))", None),
    ("cat_mixed_devices", "r = tpu_only(lambda: torch.cat([torch.ones(2, device=d), torch.ones(2)]))", None),
    (
        "where_cpu_condition",
        "r = tpu_only(lambda: torch.where(torch.tensor([True, False]), torch.ones(2, device=d), 0.0))",
        None,
    ),
    ("cpu_scalar_tensor_ok", "r = torch.ones(2, device=d) + torch.tensor(3.0)", None),
    ("device_scalar_with_cpu", "r = tpu_only(lambda: torch.ones(2) + torch.tensor(3.0, device=d))", None),
    (
        "copy_across_devices",
        "x = torch.zeros(3, device=d); x.copy_(torch.arange(3.0)); r = x",
        "compiled-data-dependent",
    ),
    (
        "index_put_cpu_scalar_value",
        "x = torch.zeros(3, device=d); x[torch.tensor([0], device=d)] = torch.tensor(1.0); r = x",
        None,
    ),
    ("to_other_ordinal", "r = torch.ones(2, device=d).to(d + ':1' if d != 'cpu' else 'meta:x')", None),
    # --- sharding misuse (tpu only: the CPU reference raises where the tpu must) ---
    ("shard_view", "r = tpu_only(lambda: shard(torch.ones(4, 4, device=d)[1:], ('x', None)))", None),
    ("shard_unknown_axis", "r = tpu_only(lambda: shard(torch.ones(4, 4, device=d), ('nope', None)))", None),
    ("shard_too_many_dims", "r = tpu_only(lambda: shard(torch.ones(4, device=d), ('x', None, None)))", None),
    ("shard_cpu_tensor", "r = tpu_only(lambda: shard(torch.ones(4, 4), ('x', None)))", None),
    (
        "shard_bad_mesh",
        "r = tpu_only(lambda: __import__('torch_tpu.distributed', fromlist=['Mesh']).Mesh([0, 0], (2,), ('x',)))",
        None,
    ),
]

# A representative subset for the default (fast) run: one or two of each kind.
QUICK = [
    "add_shape_mismatch",
    "view_noncontiguous",
    "sum_dim_oob",
    "getitem_int_oob",
    "conv_channels",
    "inplace_promotion",
    "complex_tensor",
    "arange_step_zero",
    "mixed_device_add",
    "item_of_many",
    "inplace_expanded",
    "inplace_overlap_copy",
    "backward_twice",
    "index_select_oob",
    "setitem_tensor_oob",
    "index_add_oob",
    "nll_loss_target_oob",
    "int_floordiv_zero_tensor",
    "int_remainder_zero_number",
    "huge_allocation",
    # issue 24
    "f8_e4m3_mul_saturates",
    "f8_e4m3_requires_grad",
    "c64_div_zero_fused_zeros",
    "c64_lt_raises",
    "arange_int64_large",
    "empty_matmul",
    "out_noncontiguous",
    "inplace_strided_view",
    "index_int8_tensor",
    "shard_view",
]
