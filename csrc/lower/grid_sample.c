/* grid_sample.c: grid_sampler_2d forward, bilinear and nearest, with zeros,
** border and reflection padding (bicubic declines: the CPU fallback runs
** it). For each output point the grid gives (x, y) in [-1, 1]; it is
** unnormalised to pixel coordinates (align_corners: -1 and 1 are the
** corner pixels' centres, else their outer edges), clipped or reflected
** by the padding mode, and the input is read there. Reads are gathers of
** whole channel rows from the input as [N * H * W, C]; a corner outside
** the input reads 0. The arithmetic follows PyTorch's vectorised CPU
** kernel (its unnormalisation, weights and summation order), in the
** input's dtype as that kernel computes (no f32 opmath for half types).
** grid_sampler_3d (bilinear, nearest) follows PyTorch's scalar 3d CPU kernel
** the same way. */
#include <math.h>

#include "../base/base.h"
#include "lower.h"

#define I32 TPURT_DTYPE_I32

enum { MODE_BILINEAR = 0, MODE_NEAREST = 1, MODE_BICUBIC = 2 };
enum { PAD_ZEROS = 0, PAD_BORDER = 1, PAD_REFLECTION = 2 };

/* reflect_coordinates as PyTorch's vectorised CPU kernel computes it:
** |x| folded into [twice_low / 2, twice_high / 2] by whole spans. */
static ir_value_t reflect(lower_ctx_t* ctx, ir_value_t x, int64_t twice_low, int64_t twice_high) {
  ir_func_t* f = ctx->func;
  if (twice_low == twice_high) return ir_const_like(ctx->func, x, 0.0);
  double lo = (double)twice_low / 2, span = (double)(twice_high - twice_low) / 2;
  ir_value_t in = ir_abs(f, ir_sub(f, x, ir_const_like(f, x, lo)));
  ir_value_t sp = ir_const_like(f, x, span);
  ir_value_t flips = ir_unary(f, IR_OP_FLOOR, ir_div(f, in, sp));
  ir_value_t extra = ir_sub(f, in, ir_mul(f, flips, sp));
  ir_value_t half = ir_mul(f, flips, ir_const_like(f, x, 0.5));
  ir_value_t even = ir_compare(f, IR_EQ, ir_unary(f, IR_OP_FLOOR, half), half);
  ir_value_t a = ir_add(f, extra, ir_const_like(f, x, lo));
  ir_value_t b = ir_add(f, ir_sub(f, sp, extra), ir_const_like(f, x, lo));
  return ir_select(f, even, a, b);
}

/* clip_coordinates: into [0, size - 1]. */
static ir_value_t clip(lower_ctx_t* ctx, ir_value_t x, int64_t size) {
  ir_func_t* f = ctx->func;
  return ir_min(f, ir_const_like(f, x, (double)(size - 1)), ir_max(f, x, ir_const_like(f, x, 0.0)));
}

/* grid_sampler_compute_source_index */
static ir_value_t source_index(lower_ctx_t* ctx, ir_value_t coord, int64_t size, int64_t padding,
                               bool align) {
  ir_func_t* f = ctx->func;
  /* the vectorised kernel's unnormalisation: (c + 1) * scale [- 0.5] */
  ir_value_t one = ir_const_like(f, coord, 1.0);
  double scale = align ? (double)(float)((float)(size - 1) / 2.0f) : (double)(float)((float)size / 2.0f);
  ir_value_t x = ir_mul(f, ir_add(f, coord, one), ir_const_like(f, coord, scale));
  if (!align) x = ir_sub(f, x, ir_const_like(f, coord, 0.5));
  if (padding == PAD_BORDER) {
    x = clip(ctx, x, size);
  } else if (padding == PAD_REFLECTION) {
    x = align ? reflect(ctx, x, 0, 2 * (size - 1)) : reflect(ctx, x, -1, 2 * size - 1);
    x = clip(ctx, x, size);
  }
  return x;
}

typedef struct sampler_s {
  ir_value_t rows; /* the input as [N * H * W, C] */
  int64_t n, c, h, w, ho, wo;
  ir_value_t batch; /* n * H * W per output point, f32 [N, Ho, Wo] as i32 */
} sampler_t;

/* The input at integer pixel (ix, iy) (i32 [N, Ho, Wo]) as [N, Ho, Wo, C];
** 0 outside the input. */
static ir_value_t read_at(lower_ctx_t* ctx, const sampler_t* s, ir_value_t ix, ir_value_t iy) {
  ir_func_t* f = ctx->func;
  ir_value_t zero = ir_const_like(f, ix, 0.0);
  ir_value_t inside = ir_and(
      f,
      ir_and(f, ir_compare(f, IR_GE, ix, zero), ir_compare(f, IR_LT, ix, ir_const_like(f, ix, (double)s->w))),
      ir_and(f, ir_compare(f, IR_GE, iy, zero),
             ir_compare(f, IR_LT, iy, ir_const_like(f, iy, (double)s->h))));
  ir_value_t cx = ir_clamp(f, ir_constant_i64(f, I32, 0), ix, ir_constant_i64(f, I32, s->w - 1));
  ir_value_t cy = ir_clamp(f, ir_constant_i64(f, I32, 0), iy, ir_constant_i64(f, I32, s->h - 1));
  ir_value_t flat = ir_add(f, s->batch, ir_add(f, ir_mul(f, cy, ir_const_like(f, cy, (double)s->w)), cx));
  int64_t m = s->n * s->ho * s->wo;
  ir_value_t got = lower_gather_along(ctx, s->rows, 0, ir_reshape(f, flat, 1, &m));
  int64_t out[4] = {s->n, s->ho, s->wo, s->c}, bd[3] = {0, 1, 2};
  got = ir_reshape(f, got, 4, out);
  ir_value_t mask = ir_broadcast_in_dim(f, inside, 4, out, bd);
  return ir_select(f, mask, got, ir_const_like(ctx->func, got, 0.0));
}

/* A [N, Ho, Wo] weight as [N, Ho, Wo, C]. */
static ir_value_t per_channel(lower_ctx_t* ctx, const sampler_t* s, ir_value_t w) {
  int64_t out[4] = {s->n, s->ho, s->wo, s->c}, bd[3] = {0, 1, 2};
  return ir_broadcast_in_dim(ctx->func, w, 4, out, bd);
}

/* PyTorch's checks of grid_sampler's input and grid for |spatial| (2 or 3)
** spatial dims, in its words. */
static TPURT_MUST_USE tpurt_status_t check_grid_args(const tpurt_tensor_t* in, const tpurt_tensor_t* grid,
                                                     int32_t spatial) {
  int32_t rank = spatial + 2;
  if (in->dtype != grid->dtype)
    return lower_error(
        TPURT_INVALID_ARGUMENT,
        "grid_sampler(): expected input and grid to have same dtype, but input has %s and grid has %s",
        tpurt_dtype_name(in->dtype), tpurt_dtype_name(grid->dtype));
  if (in->rank != rank || grid->rank != rank)
    return lower_error(
        TPURT_INVALID_ARGUMENT,
        "grid_sampler(): expected %dD input and grid with same number of dimensions, but got input with "
        "sizes %s and grid with sizes %s",
        (int)rank, lower_shape_str(in->rank, in->sizes), lower_shape_str(grid->rank, grid->sizes));
  if (in->sizes[0] != grid->sizes[0] || grid->sizes[rank - 1] != spatial)
    return lower_error(
        TPURT_INVALID_ARGUMENT,
        "grid_sampler(): expected grid to have size %lld in first dimension and size %d in last "
        "dimension, but got grid with sizes %s",
        (long long)in->sizes[0], (int)spatial, lower_shape_str(grid->rank, grid->sizes));
  return NULL;
}

/* grid_sampler_2d(input, grid, interpolation_mode, padding_mode, align_corners) */
static TPURT_MUST_USE tpurt_status_t lower_grid_sampler_2d(lower_ctx_t* ctx) {
  const tpurt_tensor_t* in = lower_meta(ctx, 0);
  const tpurt_tensor_t* grid = lower_meta(ctx, 1);
  int64_t mode = lower_int(ctx, 2, 0), padding = lower_int(ctx, 3, 0);
  bool align = lower_bool(ctx, 4, false);
  TPURT_RETURN_IF_ERROR(check_grid_args(in, grid, 2));
  if (mode == MODE_BICUBIC || !tpurt_dtype_is_float(in->dtype))
    return lower_error(TPURT_UNIMPLEMENTED, "grid_sampler_2d: bicubic or a non-float dtype");
  if (mode != MODE_BILINEAR && mode != MODE_NEAREST)
    return lower_error(TPURT_INVALID_ARGUMENT, "grid_sampler(): unknown interpolation mode %lld",
                       (long long)mode);
  ir_func_t* f = ctx->func;
  /* in the input's dtype: CPU's kernel has no wider opmath here (bf16 grids
  ** give bf16 coordinates) */
  tpurt_dtype_t acc = in->dtype;
  sampler_t s = {.n = in->sizes[0],
                 .c = in->sizes[1],
                 .h = in->sizes[2],
                 .w = in->sizes[3],
                 .ho = grid->sizes[1],
                 .wo = grid->sizes[2]};
  int64_t out_dims[4] = {s.n, s.c, s.ho, s.wo};
  if (s.n * s.c * s.ho * s.wo == 0 || s.h * s.w == 0) {
    lower_set_result(ctx, 0, ir_splat(ctx->func, in->dtype, 4, out_dims, 0.0));
    return NULL;
  }
  int64_t perm[4] = {0, 2, 3, 1}, rows[2] = {s.n * s.h * s.w, s.c};
  s.rows = ir_reshape(f, ir_transpose(f, lower_cast(ctx, lower_tensor(ctx, 0), acc), perm), 2, rows);
  int64_t pts[3] = {s.n, s.ho, s.wo};
  s.batch =
      ir_mul(f, ir_iota(f, ir_type_make(I32, 3, pts), 0), ir_splat(f, I32, 3, pts, (double)(s.h * s.w)));
  ir_value_t g = lower_cast(ctx, lower_tensor(ctx, 1), acc);
  int64_t lo[4] = {0, 0, 0, 0}, hx[4] = {s.n, s.ho, s.wo, 1}, step[4] = {1, 1, 1, 1};
  int64_t ly[4] = {0, 0, 0, 1}, hy[4] = {s.n, s.ho, s.wo, 2};
  ir_value_t gx = ir_reshape(f, ir_slice(f, g, lo, hx, step), 3, pts);
  ir_value_t gy = ir_reshape(f, ir_slice(f, g, ly, hy, step), 3, pts);
  ir_value_t ix = source_index(ctx, gx, s.w, padding, align);
  ir_value_t iy = source_index(ctx, gy, s.h, padding, align);
  ir_value_t res;
  if (mode == MODE_NEAREST) {
    ir_value_t nx = ir_convert(f, ir_unary(f, IR_OP_ROUND_NEAREST_EVEN, ix), I32);
    ir_value_t ny = ir_convert(f, ir_unary(f, IR_OP_ROUND_NEAREST_EVEN, iy), I32);
    res = read_at(ctx, &s, nx, ny);
  } else {
    ir_value_t x0 = ir_unary(f, IR_OP_FLOOR, ix), y0 = ir_unary(f, IR_OP_FLOOR, iy);
    ir_value_t x1 = ir_add(f, x0, ir_const_like(f, x0, 1.0)), y1 = ir_add(f, y0, ir_const_like(f, y0, 1.0));
    /* the vectorised kernel's weights: distances to the west and north edges */
    ir_value_t w = ir_sub(f, ix, x0), n = ir_sub(f, iy, y0);
    ir_value_t e = ir_sub(f, ir_const_like(f, w, 1.0), w), so = ir_sub(f, ir_const_like(f, n, 1.0), n);
    ir_value_t nw = ir_mul(f, so, e), ne = ir_mul(f, so, w), sw = ir_mul(f, n, e), se = ir_mul(f, n, w);
    ir_value_t ix0 = ir_convert(f, x0, I32), iy0 = ir_convert(f, y0, I32);
    ir_value_t ix1 = ir_convert(f, x1, I32), iy1 = ir_convert(f, y1, I32);
    res = ir_mul(f, read_at(ctx, &s, ix0, iy0), per_channel(ctx, &s, nw));
    res = ir_add(f, res, ir_mul(f, read_at(ctx, &s, ix1, iy0), per_channel(ctx, &s, ne)));
    res = ir_add(f, res, ir_mul(f, read_at(ctx, &s, ix0, iy1), per_channel(ctx, &s, sw)));
    res = ir_add(f, res, ir_mul(f, read_at(ctx, &s, ix1, iy1), per_channel(ctx, &s, se)));
  }
  int64_t back[4] = {0, 3, 1, 2};
  lower_set_result(ctx, 0, lower_cast(ctx, ir_transpose(f, res, back), in->dtype));
  return NULL;
}

/*===--- grid_sampler_3d: PyTorch's scalar CPU kernel ---===*/

/* reflect_coordinates of the scalar kernel: fmod for the extra part. */
static ir_value_t reflect_scalar(lower_ctx_t* ctx, ir_value_t x, int64_t twice_low, int64_t twice_high) {
  ir_func_t* f = ctx->func;
  if (twice_low == twice_high) return ir_const_like(f, x, 0.0);
  double lo = (double)twice_low / 2, span = (double)(twice_high - twice_low) / 2;
  ir_value_t in = ir_abs(f, ir_sub(f, x, ir_const_like(f, x, lo)));
  ir_value_t sp = ir_const_like(f, x, span);
  ir_value_t extra = ir_binary(f, IR_OP_REMAINDER, in, sp);
  ir_value_t flips = ir_unary(f, IR_OP_FLOOR, ir_div(f, in, sp));
  ir_value_t half = ir_mul(f, flips, ir_const_like(f, x, 0.5));
  ir_value_t even = ir_compare(f, IR_EQ, ir_unary(f, IR_OP_FLOOR, half), half);
  return ir_select(f, even, ir_add(f, extra, ir_const_like(f, x, lo)),
                   ir_add(f, ir_sub(f, sp, extra), ir_const_like(f, x, lo)));
}

/* grid_sampler_compute_source_index of the scalar kernel. */
static ir_value_t source_index_scalar(lower_ctx_t* ctx, ir_value_t c, int64_t size, int64_t padding,
                                      bool align) {
  ir_func_t* f = ctx->func;
  ir_value_t one = ir_const_like(f, c, 1.0);
  ir_value_t x =
      align ? ir_mul(f, ir_div(f, ir_add(f, c, one), ir_const_like(f, c, 2.0)),
                     ir_const_like(f, c, (double)(size - 1)))
            : ir_div(f, ir_sub(f, ir_mul(f, ir_add(f, c, one), ir_const_like(f, c, (double)size)), one),
                     ir_const_like(f, c, 2.0));
  if (padding == PAD_BORDER) {
    x = clip(ctx, x, size);
  } else if (padding == PAD_REFLECTION) {
    x = align ? reflect_scalar(ctx, x, 0, 2 * (size - 1)) : reflect_scalar(ctx, x, -1, 2 * size - 1);
    x = clip(ctx, x, size);
  }
  return x;
}

typedef struct sampler3_s {
  ir_value_t rows; /* the input as [N * D * H * W, C] */
  int64_t n, c, d, h, w, pts[4];
  ir_value_t batch; /* n * D * H * W per output point, i32 [N, Do, Ho, Wo] */
} sampler3_t;

/* The input at integer voxel (ix, iy, iz) as [N, Do, Ho, Wo, C]; 0 outside. */
static ir_value_t read_at3(lower_ctx_t* ctx, const sampler3_t* s, ir_value_t ix, ir_value_t iy,
                           ir_value_t iz) {
  ir_func_t* f = ctx->func;
  const ir_value_t c[3] = {ix, iy, iz};
  const int64_t size[3] = {s->w, s->h, s->d};
  ir_value_t inside = IR_NONE, flat = s->batch;
  int64_t stride[3] = {1, s->w, s->w * s->h};
  for (int32_t k = 0; k < 3; ++k) {
    ir_value_t ok = ir_and(f, ir_compare(f, IR_GE, c[k], ir_const_like(f, c[k], 0.0)),
                           ir_compare(f, IR_LT, c[k], ir_const_like(f, c[k], (double)size[k])));
    inside = k ? ir_and(f, inside, ok) : ok;
    ir_value_t cl = ir_clamp(f, ir_constant_i64(f, I32, 0), c[k], ir_constant_i64(f, I32, size[k] - 1));
    flat = ir_add(f, flat, ir_mul(f, cl, ir_const_like(f, cl, (double)stride[k])));
  }
  int64_t m = s->pts[0] * s->pts[1] * s->pts[2] * s->pts[3];
  ir_value_t got = lower_gather_along(ctx, s->rows, 0, ir_reshape(f, flat, 1, &m));
  int64_t out[5] = {s->pts[0], s->pts[1], s->pts[2], s->pts[3], s->c}, bd[4] = {0, 1, 2, 3};
  got = ir_reshape(f, got, 5, out);
  return ir_select(f, ir_broadcast_in_dim(f, inside, 5, out, bd), got, ir_const_like(f, got, 0.0));
}

/* grid_sampler_3d(input, grid, interpolation_mode, padding_mode, align_corners): the
** scalar kernel's arithmetic: its unnormalisation, its eight weights as
** products of the distances (x, then y, then z), summed tnw..bse. */
static TPURT_MUST_USE tpurt_status_t lower_grid_sampler_3d(lower_ctx_t* ctx) {
  const tpurt_tensor_t* in = lower_meta(ctx, 0);
  const tpurt_tensor_t* grid = lower_meta(ctx, 1);
  int64_t mode = lower_int(ctx, 2, 0), padding = lower_int(ctx, 3, 0);
  bool align = lower_bool(ctx, 4, false);
  TPURT_RETURN_IF_ERROR(check_grid_args(in, grid, 3));
  if (mode == MODE_BICUBIC)
    return lower_error(TPURT_INVALID_ARGUMENT,
                       "grid_sampler(): bicubic interpolation only supports 4D input");
  if (mode != MODE_BILINEAR && mode != MODE_NEAREST)
    return lower_error(TPURT_INVALID_ARGUMENT, "grid_sampler(): unknown interpolation mode %lld",
                       (long long)mode);
  if (!tpurt_dtype_is_float(in->dtype))
    return lower_error(TPURT_INVALID_ARGUMENT, "\"grid_sampler_3d_cpu\" not implemented for '%s'",
                       tpurt_dtype_name(in->dtype));
  ir_func_t* f = ctx->func;
  tpurt_dtype_t acc = in->dtype;
  sampler3_t s = {
      .n = in->sizes[0], .c = in->sizes[1], .d = in->sizes[2], .h = in->sizes[3], .w = in->sizes[4]};
  for (int32_t k = 0; k < 4; ++k) s.pts[k] = grid->sizes[k];
  int64_t out_dims[5] = {s.n, s.c, s.pts[1], s.pts[2], s.pts[3]};
  if (s.n * s.c * s.pts[1] * s.pts[2] * s.pts[3] == 0 || s.d * s.h * s.w == 0) {
    lower_set_result(ctx, 0, ir_splat(f, in->dtype, 5, out_dims, 0.0));
    return NULL;
  }
  int64_t perm[5] = {0, 2, 3, 4, 1}, rows[2] = {s.n * s.d * s.h * s.w, s.c};
  s.rows = ir_reshape(f, ir_transpose(f, lower_tensor(ctx, 0), perm), 2, rows);
  s.batch = ir_mul(f, ir_iota(f, ir_type_make(I32, 4, s.pts), 0),
                   ir_splat(f, I32, 4, s.pts, (double)(s.d * s.h * s.w)));
  ir_value_t g = lower_cast(ctx, lower_tensor(ctx, 1), acc);
  ir_value_t coord[3];
  const int64_t size[3] = {s.w, s.h, s.d};
  for (int32_t k = 0; k < 3; ++k) {
    int64_t lo[5] = {0, 0, 0, 0, k}, hi[5] = {s.pts[0], s.pts[1], s.pts[2], s.pts[3], k + 1};
    int64_t step[5] = {1, 1, 1, 1, 1};
    coord[k] = source_index_scalar(ctx, ir_reshape(f, ir_slice(f, g, lo, hi, step), 4, s.pts), size[k],
                                   padding, align);
  }
  int64_t out5[5] = {s.pts[0], s.pts[1], s.pts[2], s.pts[3], s.c}, bd[4] = {0, 1, 2, 3};
  ir_value_t res;
  if (mode == MODE_NEAREST) {
    ir_value_t r[3];
    for (int32_t k = 0; k < 3; ++k)
      r[k] = ir_convert(f, ir_unary(f, IR_OP_ROUND_NEAREST_EVEN, coord[k]), I32);
    res = read_at3(ctx, &s, r[0], r[1], r[2]);
  } else {
    ir_value_t c0[3], c1[3], d0[3], d1[3];
    for (int32_t k = 0; k < 3; ++k) {
      ir_value_t fl = ir_unary(f, IR_OP_FLOOR, coord[k]);
      d1[k] = ir_sub(f, ir_add(f, fl, ir_const_like(f, fl, 1.0)), coord[k]); /* to the far corner */
      d0[k] = ir_sub(f, coord[k], fl);
      c0[k] = ir_convert(f, fl, I32);
      c1[k] = ir_add(f, c0[k], ir_const_like(f, c0[k], 1.0));
    }
    res = IR_NONE;
    /* tnw, tne, tsw, tse, bnw, bne, bsw, bse: x fastest, then y, then z */
    for (int32_t corner = 0; corner < 8; ++corner) {
      bool hx = corner & 1, hy = corner & 2, hz = corner & 4;
      ir_value_t w = ir_mul(f, ir_mul(f, hx ? d0[0] : d1[0], hy ? d0[1] : d1[1]), hz ? d0[2] : d1[2]);
      ir_value_t v = ir_mul(f, read_at3(ctx, &s, hx ? c1[0] : c0[0], hy ? c1[1] : c0[1], hz ? c1[2] : c0[2]),
                            ir_broadcast_in_dim(f, w, 5, out5, bd));
      res = corner ? ir_add(f, res, v) : v;
    }
  }
  int64_t back[5] = {0, 4, 1, 2, 3};
  lower_set_result(ctx, 0, lower_cast(ctx, ir_transpose(f, res, back), in->dtype));
  return NULL;
}

const lower_rule_t lower_grid_sample_rules[] = {
    LOWER_FN("aten::grid_sampler_3d", lower_grid_sampler_3d),
    LOWER_OUT_FN("aten::grid_sampler_3d.out", lower_grid_sampler_3d),
    LOWER_FN("aten::grid_sampler_2d", lower_grid_sampler_2d),
    LOWER_OUT_FN("aten::grid_sampler_2d.out", lower_grid_sampler_2d),
    LOWER_END,
};
