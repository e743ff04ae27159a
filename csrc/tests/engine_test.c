/* engine_test.c: the engine and a few lowering rules end to end on the
** plugin: storages, views, in-place writes, scalar parameters, caching,
** errors and object lifetimes. */
#include "test.h"

static tpurt_tensor_t dense(tpurt_storage_t* s, tpurt_dtype_t dtype, int32_t rank, const int64_t* sizes) {
  tpurt_tensor_t t = {.storage = s, .dtype = dtype, .rank = rank};
  int64_t stride = 1;
  for (int32_t i = rank - 1; i >= 0; --i) {
    t.sizes[i] = sizes[i];
    t.strides[i] = stride;
    stride *= sizes[i];
  }
  return t;
}

static tpurt_arg_t targ(tpurt_tensor_t t) { return (tpurt_arg_t){.kind = TPURT_ARG_TENSOR, .u.tensor = t}; }
static tpurt_arg_t farg(double v) {
  return (tpurt_arg_t){.kind = TPURT_ARG_SCALAR,
                       .u.scalar = {.dtype = TPURT_DTYPE_F64, .tier = TPURT_TIER_WRAPPED, .f = v}};
}
static tpurt_arg_t iarg(int64_t v) {
  return (tpurt_arg_t){.kind = TPURT_ARG_SCALAR,
                       .u.scalar = {.dtype = TPURT_DTYPE_I64, .tier = TPURT_TIER_WRAPPED, .i = v}};
}

static tpurt_tensor_t result_tensor(const tpurt_result_t* r) {
  return dense(r->storage, r->dtype, r->rank, r->sizes);
}

TEST(Engine_AddBroadcast) {
  float a[6] = {1, 2, 3, 4, 5, 6}, b[3] = {10, 20, 30};
  int64_t sa[2] = {2, 3}, sb[1] = {3};
  tpurt_tensor_t ta = test_upload_f32(a, 2, sa), tb = test_upload_f32(b, 1, sb);
  tpurt_arg_t args[3] = {targ(ta), targ(tb), iarg(2)};
  tpurt_result_t call_results[4];
  tpurt_op_call_t call = {
      .name = "aten::add.Tensor", .args = args, .num_args = 3, .results = call_results, .max_results = 4};
  ASSERT_OK(tpurt_op_run(&call));
  ASSERT(call.num_results == 1);
  EXPECT(call.results[0].rank == 2 && call.results[0].sizes[0] == 2 && call.results[0].sizes[1] == 3);
  float out[6];
  tpurt_tensor_t r = result_tensor(&call.results[0]);
  ASSERT_OK(tpurt_tensor_read_host(&r, out, sizeof(out)));
  for (int i = 0; i < 6; ++i) EXPECT(out[i] == a[i] + 2 * b[i % 3]);
  tpurt_storage_release(r.storage);
  tpurt_storage_release(ta.storage);
  tpurt_storage_release(tb.storage);
}

TEST(Engine_ScalarIsAParameter) {
  float a[4] = {1, 2, 3, 4};
  int64_t s[1] = {4};
  tpurt_tensor_t ta = test_upload_f32(a, 1, s);
  tpurt_metrics_t before, after;
  tpurt_metrics_get(&before);
  for (int k = 0; k < 50; ++k) {
    double v = 0.5 + k * 0.37;
    tpurt_arg_t args[2] = {targ(ta), farg(v)};
    tpurt_result_t call_results[4];
    tpurt_op_call_t call = {
        .name = "aten::mul.Tensor", .args = args, .num_args = 2, .results = call_results, .max_results = 4};
    ASSERT_OK(tpurt_op_run(&call));
    float out[4];
    tpurt_tensor_t r = result_tensor(&call.results[0]);
    ASSERT_OK(tpurt_tensor_read_host(&r, out, sizeof(out)));
    for (int i = 0; i < 4; ++i) EXPECT(out[i] == (float)(a[i] * (float)v));
    tpurt_storage_release(r.storage);
  }
  tpurt_metrics_get(&after);
  EXPECT(after.compiles - before.compiles <= 1);
  tpurt_storage_release(ta.storage);
}

TEST(Engine_InplaceThroughTransposedView) {
  float a[6] = {0, 1, 2, 3, 4, 5};
  int64_t s[2] = {2, 3};
  tpurt_tensor_t x = test_upload_f32(a, 2, s);
  tpurt_tensor_t xt = x; /* x.t() */
  xt.sizes[0] = 3, xt.sizes[1] = 2, xt.strides[0] = 1, xt.strides[1] = 3;
  tpurt_arg_t args[3] = {targ(xt), iarg(1), iarg(1)};
  args[0].is_write = true;
  tpurt_result_t call_results[4];
  tpurt_op_call_t call = {
      .name = "aten::add_.Scalar", .args = args, .num_args = 3, .results = call_results, .max_results = 4};
  ASSERT_OK(tpurt_op_run(&call));
  EXPECT(call.num_results == 0);
  float out[6];
  ASSERT_OK(tpurt_tensor_read_host(&x, out, sizeof(out)));
  for (int i = 0; i < 6; ++i) EXPECT(out[i] == a[i] + 1);
  /* read the transposed view back densely */
  ASSERT_OK(tpurt_tensor_read_host(&xt, out, sizeof(out)));
  float expect[6] = {1, 4, 2, 5, 3, 6};
  for (int i = 0; i < 6; ++i) EXPECT(out[i] == expect[i]);
  tpurt_storage_release(x.storage);
}

TEST(Engine_ZeroASliceOfAFlatView) {
  float a[10] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  int64_t s[2] = {2, 5};
  tpurt_tensor_t x = test_upload_f32(a, 2, s);
  tpurt_tensor_t v = x; /* x.view(-1)[3:7] */
  v.rank = 1, v.sizes[0] = 4, v.strides[0] = 1, v.offset = 3;
  tpurt_arg_t args[1] = {targ(v)};
  args[0].is_write = true;
  tpurt_result_t call_results[4];
  tpurt_op_call_t call = {
      .name = "aten::zero_", .args = args, .num_args = 1, .results = call_results, .max_results = 4};
  ASSERT_OK(tpurt_op_run(&call));
  float out[10];
  ASSERT_OK(tpurt_tensor_read_host(&x, out, sizeof(out)));
  for (int i = 0; i < 10; ++i) EXPECT(out[i] == ((i >= 3 && i < 7) ? 0 : a[i]));
  tpurt_storage_release(x.storage);
}

TEST(Engine_WriteAColumn) {
  float a[6] = {0, 0, 0, 0, 0, 0}, col[2] = {7, 8};
  int64_t s[2] = {2, 3}, sc[1] = {2};
  tpurt_tensor_t x = test_upload_f32(a, 2, s);
  tpurt_tensor_t c = x; /* x[:, 1] */
  c.rank = 1, c.sizes[0] = 2, c.strides[0] = 3, c.offset = 1;
  ASSERT_OK(tpurt_tensor_write_host(&c, col, sizeof(col)));
  float out[6];
  ASSERT_OK(tpurt_tensor_read_host(&x, out, sizeof(out)));
  float expect[6] = {0, 7, 0, 0, 8, 0};
  for (int i = 0; i < 6; ++i) EXPECT(out[i] == expect[i]);
  float back[2];
  ASSERT_OK(tpurt_tensor_read_host(&c, back, sizeof(back)));
  EXPECT(back[0] == 7 && back[1] == 8);
  (void)sc;
  tpurt_storage_release(x.storage);
}

TEST(Engine_EmptyStorageReadsZeros) {
  tpurt_storage_t* s = NULL;
  ASSERT_OK(tpurt_storage_create(0, 16, &s));
  int64_t n[1] = {4};
  tpurt_tensor_t t = dense(s, TPURT_DTYPE_F32, 1, n);
  tpurt_arg_t args[2] = {targ(t), farg(1.5)};
  tpurt_result_t call_results[4];
  tpurt_op_call_t call = {
      .name = "aten::add.Tensor", .args = args, .num_args = 2, .results = call_results, .max_results = 4};
  ASSERT_OK(tpurt_op_run(&call));
  float out[4];
  tpurt_tensor_t r = result_tensor(&call.results[0]);
  ASSERT_OK(tpurt_tensor_read_host(&r, out, sizeof(out)));
  for (int i = 0; i < 4; ++i) EXPECT(out[i] == 1.5f);
  tpurt_storage_release(r.storage);
  tpurt_storage_release(s);
}

TEST(Engine_MatmulAndReductions) {
  float a[6] = {1, 2, 3, 4, 5, 6}, b[6] = {1, 0, 0, 1, 1, 1};
  int64_t sa[2] = {2, 3}, sb[2] = {3, 2};
  tpurt_tensor_t ta = test_upload_f32(a, 2, sa), tb = test_upload_f32(b, 2, sb);
  tpurt_arg_t args[2] = {targ(ta), targ(tb)};
  tpurt_result_t call_results[4];
  tpurt_op_call_t call = {
      .name = "aten::mm", .args = args, .num_args = 2, .results = call_results, .max_results = 4};
  ASSERT_OK(tpurt_op_run(&call));
  float out[4];
  tpurt_tensor_t r = result_tensor(&call.results[0]);
  ASSERT_OK(tpurt_tensor_read_host(&r, out, sizeof(out)));
  EXPECT(out[0] == 4 && out[1] == 5 && out[2] == 10 && out[3] == 11);
  tpurt_storage_release(r.storage);
  /* sum over dim 1, keepdim */
  int64_t dims[1] = {1};
  tpurt_arg_t sargs[4] = {targ(ta),
                          {.kind = TPURT_ARG_INT_LIST, .u.ints = {dims, 1}},
                          {.kind = TPURT_ARG_BOOL, .u.i = 1},
                          {.kind = TPURT_ARG_NONE}};
  tpurt_result_t scall_results[4];
  tpurt_op_call_t scall = {.name = "aten::sum.dim_IntList",
                           .args = sargs,
                           .num_args = 4,
                           .results = scall_results,
                           .max_results = 4};
  ASSERT_OK(tpurt_op_run(&scall));
  EXPECT(scall.results[0].rank == 2 && scall.results[0].sizes[1] == 1);
  r = result_tensor(&scall.results[0]);
  ASSERT_OK(tpurt_tensor_read_host(&r, out, 8));
  EXPECT(out[0] == 6 && out[1] == 15);
  tpurt_storage_release(r.storage);
  tpurt_storage_release(ta.storage);
  tpurt_storage_release(tb.storage);
}

TEST(Engine_ShapeErrorsSayWhatCame) {
  float a[6] = {0}, b[4] = {0};
  int64_t sa[1] = {6}, sb[1] = {4};
  tpurt_tensor_t ta = test_upload_f32(a, 1, sa), tb = test_upload_f32(b, 1, sb);
  tpurt_arg_t args[2] = {targ(ta), targ(tb)};
  tpurt_result_t call_results[4];
  tpurt_op_call_t call = {
      .name = "aten::mul.Tensor", .args = args, .num_args = 2, .results = call_results, .max_results = 4};
  tpurt_status_t st = tpurt_op_run(&call);
  EXPECT(tpurt_status_code(st) == TPURT_INVALID_ARGUMENT);
  EXPECT(strstr(tpurt_status_message(st), "size of tensor a (6) must match the size of tensor b (4)") !=
         NULL);
  tpurt_status_free(st);
  call.name = "aten::no_such_op";
  EXPECT_STATUS(tpurt_op_run(&call), TPURT_UNIMPLEMENTED);
  tpurt_storage_release(ta.storage);
  tpurt_storage_release(tb.storage);
}

/* The CPU plugin has every dtype we name; the answer is the plugin's (a
** compiled conversion), asked once and then remembered. */
TEST(Engine_DtypeSupportComesFromThePlugin) {
  for (int d = TPURT_DTYPE_BOOL; d < TPURT_DTYPE_COUNT; ++d) {
    ASSERT_OK(tpurt_dtype_check((tpurt_dtype_t)d));
    ASSERT_OK(tpurt_dtype_check((tpurt_dtype_t)d)); /* remembered */
  }
  EXPECT_STATUS(tpurt_dtype_check(TPURT_DTYPE_INVALID), TPURT_INVALID_ARGUMENT);
  EXPECT_STATUS(tpurt_dtype_check(TPURT_DTYPE_COUNT), TPURT_INVALID_ARGUMENT);
}

/* Runs last: everything above was released, so nothing may be alive. */
TEST(Engine_NoLeaksAcrossManyOps) {
  float a[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  int64_t s[1] = {8};
  tpurt_tensor_t x = test_upload_f32(a, 1, s);
  for (int k = 0; k < 2000; ++k) {
    tpurt_arg_t args[3] = {targ(x), farg(0.001 * k), iarg(1)};
    args[0].is_write = true;
    tpurt_result_t call_results[4];
    tpurt_op_call_t call = {
        .name = "aten::add_.Scalar", .args = args, .num_args = 3, .results = call_results, .max_results = 4};
    ASSERT_OK(tpurt_op_run(&call));
  }
  ASSERT_OK(tpurt_synchronize(-1));
  tpurt_storage_release(x.storage);
  tpurt_metrics_t m;
  tpurt_metrics_get(&m);
  EXPECT(m.live_storages == 0);
  EXPECT(m.live_buffers == 0);
}

TEST_MAIN(TEST_CASE(Engine_AddBroadcast), TEST_CASE(Engine_ScalarIsAParameter),
          TEST_CASE(Engine_InplaceThroughTransposedView), TEST_CASE(Engine_ZeroASliceOfAFlatView),
          TEST_CASE(Engine_WriteAColumn), TEST_CASE(Engine_EmptyStorageReadsZeros),
          TEST_CASE(Engine_MatmulAndReductions), TEST_CASE(Engine_ShapeErrorsSayWhatCame),
          TEST_CASE(Engine_DtypeSupportComesFromThePlugin), TEST_CASE(Engine_NoLeaksAcrossManyOps))
