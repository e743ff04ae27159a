"""The bad-input catalogue: hostile inputs as data.

Each case is ``(name, code, difference)``. ``code`` runs with ``d`` bound to the
device ("cpu" or "tpu"), ``torch`` and ``F`` (``torch.nn.functional``) in scope;
it may leave its result in ``r``, which is read back to the host (so fused eager
runs it). ``difference`` is ``None`` when the tpu must behave as the CPU does
(both raise, or both succeed), else the key of the row of the README's
"Differences from CPU" table that documents how it differs, and in which modes
(``DEBUG_CHECKED``: the tpu raises in debug eager only).
"""

from __future__ import annotations

# Differences from CPU (README "Differences from CPU"): key -> modes where the
# tpu does NOT raise as the CPU does.
DEBUG_CHECKED = "debug-checked"  # raises in debug eager; strict and fused eager do not check
DIFFERENCES: dict[str, tuple[str, ...]] = {
    DEBUG_CHECKED: ("strict", "fused"),
    "complex": ("strict", "debug", "fused"),  # the tpu raises, the CPU computes
    "nan-to-int": (),  # both succeed, with different values: never raises anywhere
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
    ("multinomial_negative", "r = torch.multinomial(torch.tensor([-1.0, 1.0], device=d), 1)", None),
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
    ("inplace_expanded", "r = torch.zeros(1, device=d).expand(3).add_(1)", None),
    ("inplace_overlap_copy", "x = torch.arange(4.0, device=d); x[1:].copy_(x[:-1]); r = x", None),
    (
        "out_expanded",
        "r = torch.add(torch.zeros(3, device=d), 1, out=torch.zeros(3, device=d).expand(2, 3))",
        None,
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
        None,
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
]
