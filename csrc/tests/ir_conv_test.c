/* ir_conv_test.c: the convolution builder: golden text, shape inference,
** errors, and a small convolution run on the plugin (when it loads, as
** make ctest arranges) checked against a direct loop. */
#include "../base/base.h"
#include "../ir/ir.h"
#include "../pjrt/pjrt.h"
#include "test.h"

#define HDR "module @tpurt attributes {mhlo.num_partitions = 1 : i32, mhlo.num_replicas = 1 : i32} {\n"
#define F32 TPURT_DTYPE_F32
#define BF16 TPURT_DTYPE_BF16

/* Prints |func| (destroyed), compares with |golden| and compiles it. */
static void check_golden(ir_func_t* func, const char* golden) {
  char* text = NULL;
  tpurt_status_t s = ir_func_print(func, &text, NULL);
  ir_func_free(func);
  if (s) {
    fprintf(stderr, "  print failed: %s\n", tpurt_status_message(s));
    tpurt_status_free(s);
    ++test_failures_;
    return;
  }
  if (strcmp(text, golden) != 0) {
    fprintf(stderr, "  printed text differs.\n--- expected\n%s--- got\n%s---\n", golden, text);
    ++test_failures_;
  }
  int state = test_plugin_state();
  if (state < 0) ++test_failures_;
  if (state == 1) {
    pjrt_executable_t* exe = NULL;
    s = pjrt_compile(text, strlen(text), &exe);
    if (s) {
      fprintf(stderr, "  the plugin rejects the module: %s\n%s", tpurt_status_message(s), text);
      tpurt_status_free(s);
      ++test_failures_;
    } else {
      pjrt_executable_release(exe);
    }
  }
  free(text);
}

/* NCHW x OIHW -> NCHW with |ns| spatial dims. */
static ir_conv_dims_t nchw(int32_t ns) {
  ir_conv_dims_t d;
  memset(&d, 0, sizeof(d));
  d.num_spatial = ns;
  d.input_batch = d.output_batch = 0;
  d.input_feature = d.output_feature = 1;
  d.kernel_output_feature = 0;
  d.kernel_input_feature = 1;
  for (int32_t i = 0; i < ns; ++i) {
    d.input_spatial[i] = d.kernel_spatial[i] = d.output_spatial[i] = 2 + i;
    d.window_strides[i] = d.lhs_dilation[i] = d.rhs_dilation[i] = 1;
  }
  d.feature_group_count = d.batch_group_count = 1;
  return d;
}

TEST(IrConv_Basic2d) {
  ir_func_t* f = ir_func_create();
  ir_value_t x = ir_param(f, ir_type_make(F32, 4, (int64_t[]){1, 3, 8, 8}));
  ir_value_t w = ir_param(f, ir_type_make(F32, 4, (int64_t[]){4, 3, 3, 3}));
  ir_conv_dims_t d = nchw(2);
  d.padding_low[0] = d.padding_low[1] = d.padding_high[0] = d.padding_high[1] = 1;
  ir_value_t y = ir_convolution(f, x, w, &d, F32);
  const ir_type_t* t = ir_value_type(f, y);
  ASSERT(t && t->rank == 4 && t->dims[0] == 1 && t->dims[1] == 4 && t->dims[2] == 8 && t->dims[3] == 8);
  ir_func_set_results(f, &y, 1);
  check_golden(
      f, HDR
      "  func.func public @main(%v0: tensor<1x3x8x8xf32>, %v1: tensor<4x3x3x3xf32>) -> (tensor<1x4x8x8xf32>) "
      "{\n"
      "    %v2 = \"stablehlo.convolution\"(%v0, %v1) {batch_group_count = 1 : i64, dimension_numbers = "
      "#stablehlo.conv<[b, f, 0, 1]x[o, i, 0, 1]->[b, f, 0, 1]>, feature_group_count = 1 : i64, lhs_dilation "
      "= array<i64: 1, 1>, padding = dense<[[1, 1], [1, 1]]> : tensor<2x2xi64>, rhs_dilation = array<i64: 1, "
      "1>, window_strides = array<i64: 1, 1>} : (tensor<1x3x8x8xf32>, tensor<4x3x3x3xf32>) -> "
      "tensor<1x4x8x8xf32>\n"
      "    \"func.return\"(%v2) : (tensor<1x4x8x8xf32>) -> ()\n"
      "  }\n"
      "}\n");
}

/* strides, dilations, groups, a permuted kernel layout, bf16 in, f32 out */
TEST(IrConv_GroupsDilationLayout) {
  ir_func_t* f = ir_func_create();
  ir_value_t x = ir_param(f, ir_type_make(BF16, 3, (int64_t[]){2, 4, 9}));
  ir_value_t w = ir_param(f, ir_type_make(BF16, 3, (int64_t[]){3, 2, 6})); /* [k, i, o] */
  ir_conv_dims_t d = nchw(1);
  d.kernel_spatial[0] = 0;
  d.kernel_input_feature = 1;
  d.kernel_output_feature = 2;
  d.window_strides[0] = 2;
  d.lhs_dilation[0] = 2;
  d.rhs_dilation[0] = 3;
  d.padding_low[0] = 2;
  d.padding_high[0] = -1;
  d.feature_group_count = 2;
  ir_value_t y = ir_convolution(f, x, w, &d, F32);
  /* lhs dilated 17, padded 18, window 7: (18 - 7) / 2 + 1 = 6 */
  const ir_type_t* t = ir_value_type(f, y);
  ASSERT(t && t->rank == 3 && t->dims[0] == 2 && t->dims[1] == 6 && t->dims[2] == 6 && t->dtype == F32);
  ir_func_set_results(f, &y, 1);
  check_golden(
      f, HDR
      "  func.func public @main(%v0: tensor<2x4x9xbf16>, %v1: tensor<3x2x6xbf16>) -> (tensor<2x6x6xf32>) "
      "{\n"
      "    %v2 = \"stablehlo.convolution\"(%v0, %v1) {batch_group_count = 1 : i64, dimension_numbers = "
      "#stablehlo.conv<[b, f, 0]x[0, i, o]->[b, f, 0]>, feature_group_count = 2 : i64, lhs_dilation = "
      "array<i64: 2>, padding = dense<[[2, -1]]> : tensor<1x2xi64>, rhs_dilation = array<i64: 3>, "
      "window_strides = array<i64: 2>} : (tensor<2x4x9xbf16>, tensor<3x2x6xbf16>) -> "
      "tensor<2x6x6xf32>\n"
      "    \"func.return\"(%v2) : (tensor<2x6x6xf32>) -> ()\n"
      "  }\n"
      "}\n");
}

/* batch_group_count (the weight gradient of a grouped conv) and a result
** layout that differs from the input's */
TEST(IrConv_BatchGroups) {
  ir_func_t* f = ir_func_create();
  ir_value_t x = ir_param(f, ir_type_make(F32, 4, (int64_t[]){4, 2, 5, 5})); /* [f, b, h, w] */
  ir_value_t g = ir_param(f, ir_type_make(F32, 4, (int64_t[]){6, 4, 3, 3})); /* [o, i, h, w] */
  ir_conv_dims_t d = nchw(2);
  d.input_batch = 1;
  d.input_feature = 0;
  d.kernel_output_feature = 0;
  d.kernel_input_feature = 1;
  d.output_batch = 1;
  d.output_feature = 0;
  d.batch_group_count = 2;
  ir_value_t y = ir_convolution(f, x, g, &d, F32);
  const ir_type_t* t = ir_value_type(f, y);
  ASSERT(t && t->dims[0] == 6 && t->dims[1] == 1 && t->dims[2] == 3 && t->dims[3] == 3);
  ir_func_set_results(f, &y, 1);
  check_golden(
      f, HDR
      "  func.func public @main(%v0: tensor<4x2x5x5xf32>, %v1: tensor<6x4x3x3xf32>) -> "
      "(tensor<6x1x3x3xf32>) {\n"
      "    %v2 = \"stablehlo.convolution\"(%v0, %v1) {batch_group_count = 2 : i64, dimension_numbers = "
      "#stablehlo.conv<[f, b, 0, 1]x[o, i, 0, 1]->[f, b, 0, 1]>, feature_group_count = 1 : i64, "
      "lhs_dilation = array<i64: 1, 1>, padding = dense<[[0, 0], [0, 0]]> : tensor<2x2xi64>, "
      "rhs_dilation = array<i64: 1, 1>, window_strides = array<i64: 1, 1>} : (tensor<4x2x5x5xf32>, "
      "tensor<6x4x3x3xf32>) -> tensor<6x1x3x3xf32>\n"
      "    \"func.return\"(%v2) : (tensor<6x1x3x3xf32>) -> ()\n"
      "  }\n"
      "}\n");
}

TEST(IrConv_Errors) {
  ir_func_t* f = ir_func_create();
  ir_value_t x = ir_param(f, ir_type_make(F32, 4, (int64_t[]){1, 3, 8, 8}));
  ir_value_t w = ir_param(f, ir_type_make(F32, 4, (int64_t[]){4, 2, 3, 3}));
  ir_conv_dims_t d = nchw(2);
  EXPECT(ir_convolution(f, x, w, &d, F32) == IR_NONE); /* 3 features, kernel takes 2 */
  EXPECT(tpurt_status_code(ir_func_status(f)) == TPURT_INTERNAL);
  EXPECT(strstr(tpurt_status_message(ir_func_status(f)), "feature_group_count") != NULL);
  ir_func_free(f);

  f = ir_func_create();
  x = ir_param(f, ir_type_make(F32, 4, (int64_t[]){1, 3, 8, 8}));
  w = ir_param(f, ir_type_make(F32, 4, (int64_t[]){4, 3, 3, 3}));
  d = nchw(2);
  d.input_spatial[1] = 2; /* repeats dim 2 */
  EXPECT(ir_convolution(f, x, w, &d, F32) == IR_NONE);
  EXPECT(strstr(tpurt_status_message(ir_func_status(f)), "repeats") != NULL);
  ir_func_free(f);

  f = ir_func_create();
  x = ir_param(f, ir_type_make(F32, 4, (int64_t[]){1, 3, 8, 8}));
  w = ir_param(f, ir_type_make(F32, 4, (int64_t[]){4, 3, 3, 3}));
  d = nchw(2);
  d.window_strides[0] = 0;
  EXPECT(ir_convolution(f, x, w, &d, F32) == IR_NONE);
  EXPECT(strstr(tpurt_status_message(ir_func_status(f)), "stride 0") != NULL);
  /* sticky: a later op on the failed value stays IR_NONE */
  EXPECT(ir_unary(f, IR_OP_NEGATE, IR_NONE) == IR_NONE);
  ir_func_free(f);
}

/* y = conv1d(x, w), stride 2, padding 1, dilation 2, run and checked. */
TEST(IrConv_Run1d) {
  if (test_plugin_state() == 0) return;
  ASSERT(test_plugin_state() == 1);
  enum { N = 2, C = 2, L = 7, O = 3, K = 2, S = 2, P = 1, D = 2 };
  const int64_t out_len = (L + 2 * P - D * (K - 1) - 1) / S + 1; /* 4 */
  float xs[N * C * L], ws[O * C * K], ys[N * O * 4], want[N * O * 4];
  for (int i = 0; i < N * C * L; ++i) xs[i] = (float)((i * 7) % 11) - 5.0f;
  for (int i = 0; i < O * C * K; ++i) ws[i] = (float)((i * 5) % 7) - 3.0f;
  for (int n = 0; n < N; ++n)
    for (int o = 0; o < O; ++o)
      for (int j = 0; j < out_len; ++j) {
        float acc = 0;
        for (int c = 0; c < C; ++c)
          for (int k = 0; k < K; ++k) {
            int p = j * S - P + k * D;
            if (p >= 0 && p < L) acc += xs[(n * C + c) * L + p] * ws[(o * C + c) * K + k];
          }
        want[(n * O + o) * out_len + j] = acc;
      }
  ir_func_t* f = ir_func_create();
  ir_value_t x = ir_param(f, ir_type_make(F32, 3, (int64_t[]){N, C, L}));
  ir_value_t w = ir_param(f, ir_type_make(F32, 3, (int64_t[]){O, C, K}));
  ir_conv_dims_t d = nchw(1);
  d.window_strides[0] = S;
  d.rhs_dilation[0] = D;
  d.padding_low[0] = d.padding_high[0] = P;
  ir_value_t y = ir_convolution(f, x, w, &d, F32);
  ir_func_set_results(f, &y, 1);
  char* text = NULL;
  ASSERT_OK(ir_func_print(f, &text, NULL));
  ir_func_free(f);
  pjrt_executable_t* exe = NULL;
  pjrt_buffer_t *args[2] = {NULL, NULL}, *out = NULL;
  tpurt_status_t s = pjrt_compile(text, strlen(text), &exe);
  free(text);
  ASSERT_OK(s);
  ASSERT_OK(pjrt_buffer_from_host(0, F32, 3, (int64_t[]){N, C, L}, xs, &args[0]));
  ASSERT_OK(pjrt_buffer_from_host(0, F32, 3, (int64_t[]){O, C, K}, ws, &args[1]));
  s = pjrt_execute(exe, 0, args, 2, &out, 1, "ir_conv_test");
  if (!s) s = pjrt_buffer_to_host(out, ys, sizeof(ys));
  pjrt_buffer_release(args[0]);
  pjrt_buffer_release(args[1]);
  if (out) pjrt_buffer_release(out);
  pjrt_executable_release(exe);
  ASSERT_OK(s);
  for (int i = 0; i < N * O * (int)out_len; ++i) EXPECT(ys[i] == want[i]);
}

/*===--- the conv and resample rules end to end (ASan/UBSan cover them) ---===*/

static tpurt_arg_t T_(tpurt_tensor_t t) { return (tpurt_arg_t){.kind = TPURT_ARG_TENSOR, .u.tensor = t}; }
static tpurt_arg_t INTS(const int64_t* v, int32_t n) {
  return (tpurt_arg_t){.kind = TPURT_ARG_INT_LIST, .u.ints = {v, n}};
}
static tpurt_arg_t B_(bool v) { return (tpurt_arg_t){.kind = TPURT_ARG_BOOL, .u.i = v}; }
static tpurt_arg_t I_(int64_t v) { return (tpurt_arg_t){.kind = TPURT_ARG_INT, .u.i = v}; }
static tpurt_arg_t FL(double v) {
  return (tpurt_arg_t){.kind = TPURT_ARG_FLOAT, .u.scalar = {.dtype = TPURT_DTYPE_F64, .f = v}};
}
static const tpurt_arg_t kNoneArg = {.kind = TPURT_ARG_NONE};

/* Runs |name|; checks each defined result's sizes against |want| (rank
** 0 = expect an undefined result) and releases them; the first result's
** first |n_first| floats go to |first|. */
static void run_op(const char* name, tpurt_arg_t* args, int32_t num_args, int32_t num_results,
                   const int64_t (*want)[5], const int32_t* want_rank, float* first, size_t n_first) {
  tpurt_result_t results[8];
  memset(results, 0, sizeof(results));
  tpurt_op_call_t call = {
      .name = name, .args = args, .num_args = num_args, .results = results, .max_results = 8};
  tpurt_status_t s = tpurt_op_run(&call);
  if (s) {
    fprintf(stderr, "  %s: %s\n", name, tpurt_status_message(s));
    tpurt_status_free(s);
    ++test_failures_;
    return;
  }
  EXPECT(call.num_results == num_results);
  for (int32_t k = 0; k < call.num_results && k < num_results; ++k) {
    if (want_rank[k] == 0) {
      EXPECT(results[k].storage == NULL);
      continue;
    }
    EXPECT(results[k].storage != NULL && results[k].rank == want_rank[k]);
    for (int32_t i = 0; i < want_rank[k] && i < results[k].rank; ++i)
      EXPECT(results[k].sizes[i] == want[k][i]);
    if (k == 0 && first && results[k].storage) {
      tpurt_tensor_t r = {.storage = results[k].storage, .dtype = results[k].dtype, .rank = results[k].rank};
      int64_t n = 1;
      for (int32_t i = r.rank - 1; i >= 0; --i) {
        r.sizes[i] = results[k].sizes[i];
        r.strides[i] = n;
        n *= r.sizes[i];
      }
      EXPECT((size_t)n >= n_first);
      float* all = tpurt_xmalloc(sizeof(float) * (size_t)n);
      s = tpurt_tensor_read_host(&r, all, sizeof(float) * (size_t)n);
      EXPECT(s == NULL);
      tpurt_status_free(s);
      memcpy(first, all, sizeof(float) * n_first);
      free(all);
    }
    if (results[k].storage) tpurt_storage_release(results[k].storage);
  }
}

TEST(IrConv_Rules) {
  if (test_plugin_state() == 0) return;
  ASSERT(test_plugin_state() == 1);
  float xs[2 * 4 * 5 * 5], ws[4 * 3 * 3 * 3], bs[6] = {1, 2, 3, 4, 5, 6}, gs[2 * 6 * 11 * 11];
  for (int i = 0; i < (int)(sizeof(xs) / 4); ++i) xs[i] = (float)(i % 7) - 3;
  for (int i = 0; i < (int)(sizeof(ws) / 4); ++i) ws[i] = (float)(i % 5) - 2;
  for (int i = 0; i < (int)(sizeof(gs) / 4); ++i) gs[i] = (float)(i % 3) - 1;
  tpurt_tensor_t x = test_upload_f32(xs, 4, (int64_t[]){2, 4, 5, 5});
  tpurt_tensor_t w = test_upload_f32(ws, 4, (int64_t[]){4, 3, 3, 3}); /* transposed: [Ci, Co/g, k, k] */
  tpurt_tensor_t b = test_upload_f32(bs, 1, (int64_t[]){6});
  tpurt_tensor_t g = test_upload_f32(gs, 4, (int64_t[]){2, 6, 11, 11});
  const int64_t two[2] = {2, 2}, one[2] = {1, 1}, zero[2] = {0, 0}, opad[2] = {1, 1};
  /* conv_transpose2d(x, w, b, stride 2, padding 1, output_padding 1, groups 2): 5 -> 10 */
  tpurt_arg_t conv[9] = {T_(x),        T_(w),    T_(b),         INTS(two, 2), INTS(one, 2),
                         INTS(one, 2), B_(true), INTS(opad, 2), I_(2)};
  const int64_t conv_out[1][5] = {{2, 6, 10, 10}};
  run_op("aten::convolution", conv, 9, 1, conv_out, (int32_t[]){4}, NULL, 0);
  /* its backward with grad_weight left out; grad_output is [2, 6, 10, 10] */
  tpurt_tensor_t gy = g;
  gy.sizes[2] = gy.sizes[3] = 10;
  const int64_t mask[3] = {1, 0, 1}, bias_sizes[1] = {6};
  tpurt_arg_t bwd[11] = {T_(gy),        T_(x),        T_(w),        INTS(bias_sizes, 1),
                         INTS(two, 2),  INTS(one, 2), INTS(one, 2), B_(true),
                         INTS(opad, 2), I_(2),        INTS(mask, 3)};
  const int64_t bwd_out[3][5] = {{2, 4, 5, 5}, {0}, {6}};
  run_op("aten::convolution_backward", bwd, 11, 3, bwd_out, (int32_t[]){4, 0, 1}, NULL, 0);
  /* a plain conv with padding: every output of a 1x... checked in Run1d; here sizes */
  tpurt_tensor_t w3 = w; /* [4, 3, 3, 3] as [O, C/g] with groups... C = 4 needs C/g = 3: use x[:, :3] */
  tpurt_tensor_t x3 = x;
  x3.sizes[1] = 3;
  tpurt_arg_t plain[9] = {T_(x3),       T_(w3),    kNoneArg,      INTS(two, 2), INTS(one, 2),
                          INTS(one, 2), B_(false), INTS(zero, 2), I_(1)};
  const int64_t plain_out[1][5] = {{2, 4, 3, 3}};
  run_op("aten::convolution", plain, 9, 1, plain_out, (int32_t[]){4}, NULL, 0);
  /* bilinear with a given scale, nearest x2 and its backward */
  const int64_t up[2] = {11, 11}, up2[2] = {10, 10}, in_size[4] = {2, 4, 5, 5};
  tpurt_arg_t bil[5] = {T_(x), INTS(up, 2), B_(false), FL(2.2), FL(2.2)};
  const int64_t up_out[1][5] = {{2, 4, 11, 11}};
  run_op("aten::upsample_bilinear2d", bil, 5, 1, up_out, (int32_t[]){4}, NULL, 0);
  float near[10];
  tpurt_arg_t nn[4] = {T_(x), INTS(up2, 2), kNoneArg, kNoneArg};
  const int64_t nn_out[1][5] = {{2, 4, 10, 10}};
  run_op("aten::upsample_nearest2d", nn, 4, 1, nn_out, (int32_t[]){4}, near, 10);
  for (int j = 0; j < 10; ++j) EXPECT(near[j] == xs[j / 2]);
  tpurt_tensor_t g4 = g;
  g4.sizes[1] = 4;
  g4.sizes[2] = g4.sizes[3] = 11;
  tpurt_arg_t bilb[6] = {T_(g4), INTS(up, 2), INTS(in_size, 4), B_(true), kNoneArg, kNoneArg};
  const int64_t in_out[1][5] = {{2, 4, 5, 5}};
  run_op("aten::upsample_bilinear2d_backward", bilb, 6, 1, in_out, (int32_t[]){4}, NULL, 0);
  /* pads */
  const int64_t pads[4] = {2, 1, -1, 3};
  tpurt_arg_t refl[2] = {T_(x), INTS(pads, 4)};
  const int64_t pad_out[1][5] = {{2, 4, 7, 8}};
  float row[8];
  run_op("aten::reflection_pad2d", refl, 2, 1, pad_out, (int32_t[]){4}, row, 8);
  /* row 0 of the output is input row 1 (top cropped by 1), reflected 2 left and 1 right */
  const float* r1 = xs + 5;
  EXPECT(row[0] == r1[2] && row[1] == r1[1] && row[2] == r1[0] && row[6] == r1[4] && row[7] == r1[3]);
  tpurt_tensor_t gp = g;
  gp.sizes[1] = 4;
  gp.sizes[2] = 7;
  gp.sizes[3] = 8;
  tpurt_arg_t replb[3] = {T_(gp), T_(x), INTS(pads, 4)};
  run_op("aten::replication_pad2d_backward", replb, 3, 1, in_out, (int32_t[]){4}, NULL, 0);
  tpurt_arg_t cpad[3] = {
      T_(x), INTS(pads, 4), {.kind = TPURT_ARG_SCALAR, .u.scalar = {.dtype = TPURT_DTYPE_F64, .f = 0.5}}};
  run_op("aten::constant_pad_nd", cpad, 3, 1, pad_out, (int32_t[]){4}, row, 8);
  EXPECT(row[0] == 0.5f && row[1] == 0.5f && row[2] == r1[0] && row[7] == 0.5f);
  /* a PyTorch error, worded as PyTorch words it */
  tpurt_tensor_t wbad = w;
  wbad.sizes[1] = 2;
  tpurt_arg_t bad[9] = {T_(x3),       T_(wbad),  kNoneArg,      INTS(one, 2), INTS(zero, 2),
                        INTS(one, 2), B_(false), INTS(zero, 2), I_(1)};
  tpurt_result_t rs[2];
  tpurt_op_call_t call = {
      .name = "aten::convolution", .args = bad, .num_args = 9, .results = rs, .max_results = 2};
  tpurt_status_t s = tpurt_op_run(&call);
  EXPECT(s && strstr(tpurt_status_message(s), "expected input[2, 3, 5, 5] to have 2 channels, but got 3"));
  tpurt_status_free(s);
  tpurt_storage_release(x.storage);
  tpurt_storage_release(w.storage);
  tpurt_storage_release(b.storage);
  tpurt_storage_release(g.storage);
}

TEST_MAIN(TEST_CASE(IrConv_Basic2d), TEST_CASE(IrConv_GroupsDilationLayout), TEST_CASE(IrConv_BatchGroups),
          TEST_CASE(IrConv_Errors), TEST_CASE(IrConv_Run1d), TEST_CASE(IrConv_Rules))
