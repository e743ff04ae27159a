/* graph_test.c: fused eager (one program for many ops, temporaries never
** computed, repeated steps reuse one executable) and tracing for
** torch.compile (trace once, run with new inputs). */
#include "../engine/engine.h"
#include "test.h"

static tpurt_tensor_t dense(tpurt_storage_t* s, int32_t rank, const int64_t* sizes) {
  tpurt_tensor_t t = {.storage = s, .dtype = TPURT_DTYPE_F32, .rank = rank};
  int64_t stride = 1;
  for (int32_t i = rank - 1; i >= 0; --i) {
    t.sizes[i] = sizes[i];
    t.strides[i] = stride;
    stride *= sizes[i];
  }
  return t;
}

static tpurt_tensor_t upload(const float* data, int64_t n) {
  tpurt_storage_t* s = NULL;
  if (tpurt_storage_create(0, (size_t)n * 4, &s)) abort();
  tpurt_tensor_t t = dense(s, 1, &n);
  if (tpurt_tensor_write_host(&t, data, (size_t)n * 4)) abort();
  return t;
}

static tpurt_arg_t targ(tpurt_tensor_t t) { return (tpurt_arg_t){.kind = TPURT_ARG_TENSOR, .u.tensor = t}; }
static tpurt_arg_t farg(double v) {
  return (tpurt_arg_t){.kind = TPURT_ARG_SCALAR,
                       .u.scalar = {.dtype = TPURT_DTYPE_F64, .tier = TPURT_TIER_WRAPPED, .f = v}};
}

/* y = x * a + b as two ops; returns y (caller releases). */
static TPURT_MUST_USE tpurt_status_t mul_add(tpurt_tensor_t x, double a, double b, tpurt_tensor_t* out) {
  tpurt_result_t r1[1], r2[1];
  tpurt_arg_t args1[2] = {targ(x), farg(a)};
  tpurt_op_call_t c1 = {
      .name = "aten::mul.Tensor", .args = args1, .num_args = 2, .results = r1, .max_results = 1};
  {
    tpurt_status_t st1 = tpurt_op_run(&c1);
    if (st1) return st1;
  }
  tpurt_tensor_t t = dense(r1[0].storage, r1[0].rank, r1[0].sizes);
  tpurt_arg_t args2[3] = {targ(t), farg(b), farg(1)};
  tpurt_op_call_t c2 = {
      .name = "aten::add.Tensor", .args = args2, .num_args = 3, .results = r2, .max_results = 1};
  tpurt_status_t st = tpurt_op_run(&c2);
  tpurt_storage_release(t.storage); /* a temporary: dies inside the graph */
  if (st) return st;
  *out = dense(r2[0].storage, r2[0].rank, r2[0].sizes);
  return NULL;
}

TEST(Graph_FusedStepsShareOneProgram) {
  float a[4] = {1, 2, 3, 4};
  tpurt_tensor_t x = upload(a, 4);
  ASSERT_OK(tpurt_set_eager_mode(TPURT_MODE_DEFER_AND_FUSE));
  tpurt_metrics_t m0, m1;
  for (int step = 0; step < 6; ++step) {
    if (step == 2) tpurt_metrics_get(&m0);
    tpurt_tensor_t y;
    ASSERT_OK(mul_add(x, 0.5 + step, 1.0 * step, &y));
    float out[4];
    ASSERT_OK(tpurt_tensor_read_host(&y, out, sizeof(out))); /* a host read flushes */
    for (int i = 0; i < 4; ++i) EXPECT(out[i] == (float)(a[i] * (float)(0.5 + step) + (float)step));
    tpurt_storage_release(y.storage);
  }
  tpurt_metrics_get(&m1);
  EXPECT(m1.compiles == m0.compiles);         /* steps after the first compile nothing */
  EXPECT(m1.executions - m0.executions == 4); /* one launch per step */
  ASSERT_OK(tpurt_set_eager_mode(TPURT_MODE_DEFER_NEVER));
  tpurt_storage_release(x.storage);
}

/* A number a step binds twice is uploaded once: a step whose two numbers
** are equal sends fewer bytes to the device than one whose numbers differ,
** and both compute the right values. */
TEST(Graph_RepeatedNumbersUploadOnce) {
  float a[4] = {1, 2, 3, 4};
  tpurt_tensor_t x = upload(a, 4);
  ASSERT_OK(tpurt_set_eager_mode(TPURT_MODE_DEFER_AND_FUSE));
  uint64_t sent[2] = {0, 0};
  for (int step = 0; step < 4; ++step) {
    const double mul = 2.0, add = step % 2 ? 3.0 : 2.0;
    tpurt_metrics_t m0, m1;
    tpurt_metrics_get(&m0);
    tpurt_tensor_t y;
    ASSERT_OK(mul_add(x, mul, add, &y));
    float out[4];
    ASSERT_OK(tpurt_tensor_read_host(&y, out, sizeof(out)));
    tpurt_metrics_get(&m1);
    for (int i = 0; i < 4; ++i) EXPECT(out[i] == a[i] * 2.0f + (float)add);
    sent[step % 2] = m1.bytes_to_device - m0.bytes_to_device;
    tpurt_storage_release(y.storage);
  }
  EXPECT(sent[0] > 0);
  EXPECT(sent[0] < sent[1]); /* 2.0 twice: one upload; 2.0 and 3.0: two */
  ASSERT_OK(tpurt_set_eager_mode(TPURT_MODE_DEFER_NEVER));
  tpurt_storage_release(x.storage);
}

TEST(Graph_InplaceAndModeSwitchFlush) {
  float a[3] = {1, 2, 3};
  tpurt_tensor_t x = upload(a, 3);
  ASSERT_OK(tpurt_set_eager_mode(TPURT_MODE_DEFER_AND_FUSE));
  for (int k = 0; k < 3; ++k) {
    tpurt_arg_t args[3] = {targ(x), farg(1.0), farg(1)};
    args[0].is_write = true;
    tpurt_op_call_t c = {.name = "aten::add_.Scalar", .args = args, .num_args = 3};
    ASSERT_OK(tpurt_op_run(&c));
  }
  ASSERT_OK(tpurt_set_eager_mode(TPURT_MODE_DEFER_NEVER)); /* leaving fused eager flushes */
  float out[3];
  ASSERT_OK(tpurt_tensor_read_host(&x, out, sizeof(out)));
  for (int i = 0; i < 3; ++i) EXPECT(out[i] == a[i] + 3);
  tpurt_storage_release(x.storage);
}

TEST(Graph_TraceOnceRunTwice) {
  tpurt_storage_t* ps = NULL;
  int64_t n = 4;
  ASSERT_OK(tpurt_storage_create(0, 16, &ps));
  tpurt_tensor_t placeholder = dense(ps, 1, &n);
  ASSERT_OK(tpurt_set_eager_mode(TPURT_MODE_INTERNAL_DEFER_ALL));
  ASSERT_OK(tpurt_trace_begin(0));
  ASSERT_OK(tpurt_trace_input(&placeholder, 0));
  tpurt_tensor_t y;
  ASSERT_OK(mul_add(placeholder, 3.0, 2.0, &y));
  tpurt_program_t* prog = NULL;
  ASSERT_OK(tpurt_trace_end(&y, 1, 1, &prog));
  ASSERT_OK(tpurt_set_eager_mode(TPURT_MODE_DEFER_NEVER));
  tpurt_storage_release(y.storage);
  tpurt_storage_release(ps);
  EXPECT(strstr(tpurt_program_text(prog), "stablehlo.multiply") != NULL);
  for (int run = 0; run < 2; ++run) {
    float a[4] = {1.f + run, 2, 3, 4};
    tpurt_tensor_t x = upload(a, 4);
    tpurt_metrics_t m0, m1;
    tpurt_metrics_get(&m0);
    tpurt_result_t r[1];
    uint64_t rng[2] = {0, 0};
    ASSERT_OK(tpurt_program_run(prog, 0, &x, 1, rng, r, 1));
    tpurt_metrics_get(&m1);
    EXPECT(m1.executions - m0.executions == 1 && m1.compiles == m0.compiles);
    tpurt_tensor_t out_t = dense(r[0].storage, r[0].rank, r[0].sizes);
    float out[4];
    ASSERT_OK(tpurt_tensor_read_host(&out_t, out, sizeof(out)));
    for (int i = 0; i < 4; ++i) EXPECT(out[i] == a[i] * 3 + 2);
    tpurt_storage_release(out_t.storage);
    tpurt_storage_release(x.storage);
  }
  tpurt_program_free(prog);
}

/* A lowering that leaves the pending graph's function broken: the flush's
** error names that op; the graph is replayed op by op, so a value that does
** not depend on that op is kept. */
TEST(Graph_ErrorNamesTheOp) {
  float a[4] = {1, 2, 3, 4};
  tpurt_tensor_t x = upload(a, 4);
  ASSERT_OK(tpurt_set_eager_mode(TPURT_MODE_DEFER_AND_FUSE));
  tpurt_tensor_t y;
  ASSERT_OK(mul_add(x, 2.0, 1.0, &y)); /* ops 1 and 2: aten::mul.Tensor, aten::add.Tensor */
  engine_lock();                       /* op 3: a rule that breaks the function */
  graph_t* g = graph_current();
  graph_note_op(g, "aten::broken.default", 0);
  ir_func_fail_consume(graph_func(g), tpurt_status_create(TPURT_INTERNAL, "stablehlo.test: bad operand"));
  engine_unlock();
  float out[4];
  tpurt_status_t st = tpurt_tensor_read_host(&y, out, sizeof(out));
  EXPECT(tpurt_status_code(st) == TPURT_INTERNAL);
  EXPECT(
      strstr(tpurt_status_message(st), "in aten::broken.default (op 3 of 3): stablehlo.test: bad operand"));
  tpurt_status_free(st);
  /* the graph was replayed op by op: y does not depend on the broken op
  ** (issue 24), so it was computed and kept */
  ASSERT_OK(tpurt_tensor_read_host(&y, out, sizeof(out)));
  EXPECT(out[0] == 3 && out[1] == 5 && out[2] == 7 && out[3] == 9);
  ASSERT_OK(tpurt_set_eager_mode(TPURT_MODE_DEFER_NEVER));
  tpurt_storage_release(y.storage);
  tpurt_storage_release(x.storage);
}

TEST(Graph_NoLeaks) {
  ASSERT_OK(tpurt_synchronize(-1));
  tpurt_metrics_t m;
  tpurt_metrics_get(&m);
  EXPECT(m.live_storages == 0);
  EXPECT(m.live_buffers == 0);
}

TEST_MAIN(TEST_CASE(Graph_FusedStepsShareOneProgram), TEST_CASE(Graph_RepeatedNumbersUploadOnce),
          TEST_CASE(Graph_InplaceAndModeSwitchFlush), TEST_CASE(Graph_TraceOnceRunTwice),
          TEST_CASE(Graph_ErrorNamesTheOp), TEST_CASE(Graph_NoLeaks))
