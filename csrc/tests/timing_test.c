/* timing_test.c: events and their times from PJRT completion events, the
** launch log, asynchronous reads into host blocks, device memory reports,
** and the two GradScaler ops (results written into more than one argument). */
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

/* A new tensor of |dtype| (4-byte elements) holding |data|. */
static tpurt_tensor_t upload(tpurt_dtype_t dtype, const void* data, int32_t rank, const int64_t* sizes) {
  int64_t n = 1;
  for (int32_t i = 0; i < rank; ++i) n *= sizes[i];
  tpurt_storage_t* s = NULL;
  tpurt_status_t st = tpurt_storage_create(0, (size_t)n * 4, &s);
  if (st) abort();
  tpurt_tensor_t t = dense(s, dtype, rank, sizes);
  st = tpurt_tensor_write_host(&t, data, (size_t)n * 4);
  if (st) abort();
  return t;
}

static tpurt_arg_t targ(tpurt_tensor_t t, bool is_write) {
  return (tpurt_arg_t){.kind = TPURT_ARG_TENSOR, .is_write = is_write, .u.tensor = t};
}

/* x = x @ x, |n| times: one program launch each. */
static tpurt_tensor_t work(tpurt_tensor_t x, int n) {
  for (int k = 0; k < n; ++k) {
    tpurt_arg_t args[2] = {targ(x, false), targ(x, false)};
    tpurt_result_t r[4];
    tpurt_op_call_t call = {.name = "aten::mm", .args = args, .num_args = 2, .results = r, .max_results = 4};
    tpurt_status_t st = tpurt_op_run(&call);
    if (st) abort();
    tpurt_storage_release(x.storage);
    x = dense(r[0].storage, r[0].dtype, r[0].rank, r[0].sizes);
  }
  return x;
}

TEST(Timing_EventsMeasureQueuedWork) {
  static float a[64 * 64];
  for (int i = 0; i < 64 * 64; ++i) a[i] = (float)(i % 7) * 0.01f;
  int64_t sizes[2] = {64, 64};
  tpurt_tensor_t x = upload(TPURT_DTYPE_F32, a, 2, sizes);
  ASSERT_OK(tpurt_synchronize(0));
  uint64_t before = 0;
  tpurt_launch_log(0, NULL, 0, &before);
  tpurt_event_t *start = NULL, *end = NULL;
  ASSERT_OK(tpurt_event_record(0, &start));
  x = work(x, 4);
  ASSERT_OK(tpurt_event_record(0, &end));
  tpurt_event_synchronize(end);
  EXPECT(tpurt_event_query(start) && tpurt_event_query(end));
  double ms = tpurt_event_elapsed_ms(start, end);
  EXPECT(ms > 0.0);
  tpurt_launch_record_t records[16];
  uint64_t next = 0;
  int n = tpurt_launch_log(before, records, 16, &next);
  EXPECT(n == 4 && next == before + 4);
  for (int i = 0; i < n; ++i) {
    EXPECT(strcmp(records[i].name, "aten::mm") == 0);
    EXPECT(records[i].num_ops > 0 && !records[i].is_copy);
    EXPECT(records[i].launch_ns <= records[i].start_ns && records[i].start_ns <= records[i].end_ns);
  }
  tpurt_event_free(start);
  tpurt_event_free(end);
  EXPECT_STATUS(tpurt_event_record(99, &start), TPURT_OUT_OF_RANGE);
  tpurt_storage_release(x.storage);
}

TEST(Timing_AsyncReadIntoAHostBlock) {
  float a[6] = {1, 2, 3, 4, 5, 6};
  int64_t sizes[1] = {6};
  tpurt_tensor_t x = upload(TPURT_DTYPE_F32, a, 1, sizes);
  float* host = NULL;
  ASSERT_OK(tpurt_host_alloc(sizeof(a), (void**)&host));
  EXPECT(tpurt_host_contains(host) && tpurt_host_contains(host + 5) && !tpurt_host_contains(a));
  ASSERT_OK(tpurt_tensor_read_host_async(&x, host, sizeof(a)));
  tpurt_event_t* done = NULL;
  ASSERT_OK(tpurt_event_record(0, &done));
  tpurt_event_synchronize(done);
  EXPECT(memcmp(host, a, sizeof(a)) == 0);
  tpurt_event_free(done);
  /* Freeing waits for a copy still in flight into the block. */
  ASSERT_OK(tpurt_tensor_read_host_async(&x, host, sizeof(a)));
  tpurt_host_free(host);
  EXPECT(!tpurt_host_contains(host));
  tpurt_storage_release(x.storage);
}

TEST(Timing_DeviceMemory) {
  tpurt_device_memory_t m;
  ASSERT_OK(tpurt_device_memory(0, &m));
  EXPECT(m.bytes_limit > 0 && m.bytes_free >= 0 && m.bytes_free <= m.bytes_limit);
  EXPECT(m.reported || m.from_host);
  EXPECT_STATUS(tpurt_device_memory(99, &m), TPURT_OUT_OF_RANGE);
}

TEST(Amp_UnscaleAndUpdateScale) {
  float g0[2] = {2, 4}, g1[1] = {INFINITY}, zero = 0, half = 0.5f, eight = 8;
  int32_t none = 0;
  int64_t two[1] = {2}, one[1] = {1};
  tpurt_tensor_t t0 = upload(TPURT_DTYPE_F32, g0, 1, two), t1 = upload(TPURT_DTYPE_F32, g1, 1, one);
  tpurt_tensor_t found = upload(TPURT_DTYPE_F32, &zero, 0, NULL);
  tpurt_tensor_t inv = upload(TPURT_DTYPE_F32, &half, 0, NULL);
  tpurt_arg_t args[5] = {{.kind = TPURT_ARG_TENSOR_LIST, .u.list_len = 2},
                         targ(t0, true),
                         targ(t1, true),
                         targ(found, true),
                         targ(inv, false)};
  tpurt_op_call_t call = {
      .name = "aten::_amp_foreach_non_finite_check_and_unscale_", .args = args, .num_args = 5};
  ASSERT_OK(tpurt_op_run(&call));
  float out0[2], flag;
  ASSERT_OK(tpurt_tensor_read_host(&t0, out0, sizeof(out0)));
  ASSERT_OK(tpurt_tensor_read_host(&found, &flag, sizeof(flag)));
  EXPECT(out0[0] == 1 && out0[1] == 2 && flag == 1);

  tpurt_tensor_t scale = upload(TPURT_DTYPE_F32, &eight, 0, NULL);
  tpurt_tensor_t tracker = upload(TPURT_DTYPE_I32, &none, 0, NULL);
  tpurt_arg_t uargs[6] = {targ(scale, true),
                          targ(tracker, true),
                          targ(found, false),
                          {.kind = TPURT_ARG_FLOAT, .u.scalar = {.dtype = TPURT_DTYPE_F64, .f = 2.0}},
                          {.kind = TPURT_ARG_FLOAT, .u.scalar = {.dtype = TPURT_DTYPE_F64, .f = 0.5}},
                          {.kind = TPURT_ARG_INT, .u.i = 2}};
  tpurt_op_call_t update = {.name = "aten::_amp_update_scale_", .args = uargs, .num_args = 6};
  ASSERT_OK(tpurt_op_run(&update));
  float s;
  int32_t k;
  ASSERT_OK(tpurt_tensor_read_host(&scale, &s, sizeof(s)));
  ASSERT_OK(tpurt_tensor_read_host(&tracker, &k, sizeof(k)));
  EXPECT(s == 4 && k == 0); /* backed off after the inf */
  tpurt_storage_release(t0.storage);
  tpurt_storage_release(t1.storage);
  tpurt_storage_release(found.storage);
  tpurt_storage_release(inv.storage);
  tpurt_storage_release(scale.storage);
  tpurt_storage_release(tracker.storage);
}

TEST_MAIN(TEST_CASE(Timing_EventsMeasureQueuedWork), TEST_CASE(Timing_AsyncReadIntoAHostBlock),
          TEST_CASE(Timing_DeviceMemory), TEST_CASE(Amp_UnscaleAndUpdateScale))
