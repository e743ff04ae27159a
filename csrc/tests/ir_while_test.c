/* ir_while_test.c: the ops with several regions: stablehlo.while (golden
** text; programs run on the plugin: a loop counter indexing dynamic_slice
** and dynamic_update_slice, a reduce inside a body, a while inside a while,
** implicit capture), stablehlo.if and stablehlo.case, and the sequence
** errors (wrong region returns, regions used out of order, an op never
** ended).
**
** As in ir_test.c, every golden module is also compiled by the plugin when
** TORCH_TPU_PJRT_PLUGIN names one (make ctest sets it). */
#include <math.h>

#include "../base/base.h"
#include "../ir/ir.h"
#include "../pjrt/pjrt.h"
#include "test.h"

/* after test.h and the rooms' headers */
#include "ir_check.h"

#define HDR "module @tpurt attributes {mhlo.num_partitions = 1 : i32, mhlo.num_replicas = 1 : i32} {\n"
#define F32 TPURT_DTYPE_F32
#define I32 TPURT_DTYPE_I32
#define BOOL TPURT_DTYPE_BOOL

/* Closes the condition "args[0] < |limit|" of a while whose first carried
** value is an i32 counter. */
static void cond_counter_below(ir_func_t* f, const ir_value_t* args, int64_t limit) {
  ir_value_t pred = ir_compare(f, IR_LT, args[0], ir_constant_i64(f, I32, limit));
  ir_region_end(f, &pred, 1);
}

static ir_value_t plus_one(ir_func_t* f, ir_value_t counter) {
  return ir_binary(f, IR_OP_ADD, counter, ir_constant_i64(f, I32, 1));
}

/* for i in 0..3: x = x + x */
static ir_func_t* build_doubling(void) {
  int64_t dims[1] = {4};
  ir_func_t* f = ir_func_create();
  ir_value_t x = ir_param(f, ir_type_make(F32, 1, dims));
  ir_value_t init[2] = {ir_constant_i64(f, I32, 0), x}, args[2], results[2];
  ir_region_op_t w = ir_while_begin(f, init, 2, args);
  cond_counter_below(f, args, 3);
  ir_while_body(f, &w, args);
  ir_value_t next[2] = {plus_one(f, args[0]), ir_binary(f, IR_OP_ADD, args[1], args[1])};
  ir_region_end(f, next, 2);
  ir_while_end(f, &w, results);
  ir_func_set_results(f, &results[1], 1);
  return f;
}

#define GOLDEN_DOUBLING                                                                                      \
  HDR "  func.func public @main(%v0: tensor<4xf32>) -> (tensor<4xf32>) {\n"                                  \
      "    %v1 = \"stablehlo.constant\"() {value = dense<0> : tensor<i32>} : () -> tensor<i32>\n"            \
      "    %v11:2 = \"stablehlo.while\"(%v1, %v0) ({\n"                                                      \
      "    ^bb0(%v2: tensor<i32>, %v3: tensor<4xf32>):\n"                                                    \
      "      %v4 = \"stablehlo.constant\"() {value = dense<3> : tensor<i32>} : () -> tensor<i32>\n"          \
      "      %v5 = \"stablehlo.compare\"(%v2, %v4) {comparison_direction = #stablehlo<comparison_direction " \
      "LT>, compare_type = #stablehlo<comparison_type SIGNED>} : (tensor<i32>, tensor<i32>) -> tensor<i1>\n" \
      "      \"stablehlo.return\"(%v5) : (tensor<i1>) -> ()\n"                                               \
      "    }, {\n"                                                                                           \
      "    ^bb0(%v6: tensor<i32>, %v7: tensor<4xf32>):\n"                                                    \
      "      %v8 = \"stablehlo.constant\"() {value = dense<1> : tensor<i32>} : () -> tensor<i32>\n"          \
      "      %v9 = \"stablehlo.add\"(%v6, %v8) : (tensor<i32>, tensor<i32>) -> tensor<i32>\n"                \
      "      %v10 = \"stablehlo.add\"(%v7, %v7) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>\n"         \
      "      \"stablehlo.return\"(%v9, %v10) : (tensor<i32>, tensor<4xf32>) -> ()\n"                         \
      "    }) : (tensor<i32>, tensor<4xf32>) -> (tensor<i32>, tensor<4xf32>)\n"                              \
      "    \"func.return\"(%v11#1) : (tensor<4xf32>) -> ()\n"                                                \
      "  }\n"                                                                                                \
      "}\n"

/* (a sticky error would fail the print) */
TEST(IrWhile_Golden) { EXPECT(print_check(build_doubling(), GOLDEN_DOUBLING, NULL)); }

static pjrt_buffer_t* upload_f32(const float* host, int32_t rank, const int64_t* dims) {
  pjrt_buffer_t* buf = NULL;
  tpurt_status_t s = pjrt_buffer_from_host(0, F32, rank, dims, host, &buf);
  if (s) {
    fprintf(stderr, "  upload failed: %s\n", tpurt_status_message(s));
    tpurt_status_free(s);
  }
  return buf;
}

TEST(IrWhile_RunDoubling) {
  if (test_plugin_state() == 0) return;
  const float host[4] = {1, -2, 0.5f, 3};
  pjrt_buffer_t* in = upload_f32(host, 1, (int64_t[]){4});
  ASSERT(in != NULL);
  float out[4] = {0};
  void* hosts[1] = {out};
  size_t sizes[1] = {sizeof(out)};
  EXPECT(run_check(build_doubling(), &in, 1, hosts, sizes, 1) == 1);
  pjrt_buffer_release(in);
  for (int i = 0; i < 4; ++i) EXPECT(out[i] == host[i] * 8);
}

/* The shape of a blocked attention loop: for each block b of 2 rows of x
** [6, 3] (x and w [3, 3] captured from @main), with the counter as the
** dynamic_slice / dynamic_update_slice offset:
**   y[b] = exp(x[b] @ w) * sum(x[b])   (dot_general, exp, a reduce in the body)
** and a running max of x carried alongside. */
TEST(IrWhile_RunBlockedDynamicSlices) {
  if (test_plugin_state() == 0) return;
  int64_t xd[2] = {6, 3}, bd[2] = {2, 3}, wd[2] = {3, 3};
  ir_func_t* f = ir_func_create();
  ir_value_t x = ir_param(f, ir_type_make(F32, 2, xd));
  ir_value_t wt = ir_param(f, ir_type_make(F32, 2, wd));
  ir_value_t zero = ir_constant_f64(f, F32, 0);
  ir_value_t y0 = ir_broadcast_in_dim(f, zero, 2, xd, NULL);
  ir_value_t init[3] = {ir_constant_i64(f, I32, 0), y0, ir_constant_f64(f, F32, -INFINITY)}, args[3],
             results[3];
  ir_region_op_t w = ir_while_begin(f, init, 3, args);
  cond_counter_below(f, args, 3);
  ir_while_body(f, &w, args);
  ir_value_t row = ir_binary(f, IR_OP_MULTIPLY, args[0], ir_constant_i64(f, I32, 2));
  ir_value_t starts[2] = {row, ir_constant_i64(f, I32, 0)};
  ir_value_t block = ir_dynamic_slice(f, x, starts, bd);
  ir_dot_dims_t dd = {.num_contract = 1, .lhs_contract = {1}, .rhs_contract = {0}};
  ir_value_t e = ir_unary(f, IR_OP_EXPONENTIAL, ir_dot_general(f, block, wt, &dd, F32));
  ir_value_t total = ir_reduce(f, block, zero, (int64_t[]){0, 1}, 2, IR_REDUCE_ADD);
  ir_value_t scaled = ir_binary(f, IR_OP_MULTIPLY, e, ir_broadcast_in_dim(f, total, 2, bd, NULL));
  ir_value_t block_max = ir_reduce(f, block, init[2], (int64_t[]){0, 1}, 2, IR_REDUCE_MAX);
  ir_value_t next[3] = {plus_one(f, args[0]), ir_dynamic_update_slice(f, args[1], scaled, starts),
                        ir_binary(f, IR_OP_MAXIMUM, args[2], block_max)};
  ir_region_end(f, next, 3);
  ir_while_end(f, &w, results);
  ir_func_set_results(f, &results[1], 2);
  EXPECT(ir_func_status(f) == NULL);

  float host[18], weights[9], out[18] = {0}, max = 0;
  for (int i = 0; i < 18; ++i) host[i] = 0.25f * (float)(i % 7) - 0.5f;
  for (int i = 0; i < 9; ++i) weights[i] = 0.125f * (float)(i % 4) - 0.25f;
  pjrt_buffer_t* in[2] = {upload_f32(host, 2, xd), upload_f32(weights, 2, wd)};
  ASSERT(in[0] != NULL && in[1] != NULL);
  void* hosts[2] = {out, &max};
  size_t sizes[2] = {sizeof(out), sizeof(max)};
  EXPECT(run_check(f, in, 2, hosts, sizes, 2) == 1);
  pjrt_buffer_release(in[0]);
  pjrt_buffer_release(in[1]);
  float want_max = -INFINITY;
  for (int b = 0; b < 3; ++b) {
    float sum = 0;
    for (int i = 6 * b; i < 6 * b + 6; ++i) sum += host[i], want_max = fmaxf(want_max, host[i]);
    for (int r = 2 * b; r < 2 * b + 2; ++r) {
      for (int c = 0; c < 3; ++c) {
        float dot = 0;
        for (int k = 0; k < 3; ++k) dot += host[3 * r + k] * weights[3 * k + c];
        EXPECT(fabsf(out[3 * r + c] - expf(dot) * sum) <= 1e-5f * fabsf(expf(dot) * sum) + 1e-6f);
      }
    }
  }
  EXPECT(max == want_max);
}

/* for i in 0..3: for j in 0..4: n = n + i + 1  (n = 4 * (1 + 2 + 3) = 24) */
TEST(IrWhile_RunNested) {
  if (test_plugin_state() == 0) return;
  ir_func_t* f = ir_func_create();
  ir_value_t init[2] = {ir_constant_i64(f, I32, 0), ir_constant_i64(f, I32, 0)}, outer[2], results[2];
  ir_region_op_t w = ir_while_begin(f, init, 2, outer);
  cond_counter_below(f, outer, 3);
  ir_while_body(f, &w, outer);
  {
    ir_value_t inner_init[2] = {ir_constant_i64(f, I32, 0), outer[1]}, inner[2], inner_results[2];
    ir_region_op_t v = ir_while_begin(f, inner_init, 2, inner);
    cond_counter_below(f, inner, 4);
    ir_while_body(f, &v, inner);
    /* outer[0] is captured from the enclosing body */
    ir_value_t n = ir_binary(f, IR_OP_ADD, inner[1], plus_one(f, outer[0]));
    ir_value_t inner_next[2] = {plus_one(f, inner[0]), n};
    ir_region_end(f, inner_next, 2);
    ir_while_end(f, &v, inner_results);
    ir_value_t next[2] = {plus_one(f, outer[0]), inner_results[1]};
    ir_region_end(f, next, 2);
  }
  ir_while_end(f, &w, results);
  ir_func_set_results(f, &results[1], 1);
  EXPECT(ir_func_status(f) == NULL);
  int32_t n = 0;
  void* hosts[1] = {&n};
  size_t sizes[1] = {sizeof(n)};
  EXPECT(run_check(f, NULL, 0, hosts, sizes, 1) == 1);
  EXPECT(n == 24);
}

/* if (p) x + 1 else x * 2, and case (k) of {x - 1, -x, x} */
static ir_func_t* build_if_case(void) {
  ir_func_t* f = ir_func_create();
  ir_type_t scalar = ir_type_scalar(F32);
  ir_value_t x = ir_param(f, scalar);
  ir_value_t p = ir_param(f, ir_type_scalar(BOOL));
  ir_value_t k = ir_param(f, ir_type_scalar(I32));
  ir_value_t results[2];
  ir_region_op_t h = ir_if_begin(f, p, &scalar, 1);
  ir_value_t r = ir_binary(f, IR_OP_ADD, x, ir_constant_f64(f, F32, 1));
  ir_region_end(f, &r, 1);
  ir_if_else(f, &h);
  r = ir_binary(f, IR_OP_MULTIPLY, x, ir_constant_f64(f, F32, 2));
  ir_region_end(f, &r, 1);
  ir_if_end(f, &h, &results[0]);
  ir_region_op_t c = ir_case_begin(f, k, 3, &scalar, 1);
  r = ir_binary(f, IR_OP_SUBTRACT, x, ir_constant_f64(f, F32, 1));
  ir_region_end(f, &r, 1);
  ir_case_next(f, &c);
  r = ir_unary(f, IR_OP_NEGATE, x);
  ir_region_end(f, &r, 1);
  ir_case_next(f, &c);
  ir_region_end(f, &x, 1);
  ir_case_end(f, &c, &results[1]);
  ir_func_set_results(f, results, 2);
  return f;
}

TEST(IrWhile_RunIfCase) {
  ir_func_t* f = build_if_case();
  EXPECT(ir_func_status(f) == NULL);
  char* text = NULL;
  ASSERT_OK(ir_func_print(f, &text, NULL));
  ir_func_free(f);
  /* branches have no block arguments, so no ^bb0 label */
  EXPECT(strstr(text, "\"stablehlo.if\"(%v1) ({\n      %v") != NULL);
  EXPECT(strstr(text, "\"stablehlo.case\"(%v2) ({\n") != NULL);
  free(text);
  if (test_plugin_state() == 0) return;
  static const struct {
    float x;
    bool p;
    int32_t k;
    float want_if, want_case;
  } kCases[] = {
      {3, true, 0, 4, 2}, {3, false, 1, 6, -3}, {-1.5f, true, 2, -0.5f, -1.5f}, {2, false, 7, 4, 2}};
  for (size_t i = 0; i < sizeof(kCases) / sizeof(kCases[0]); ++i) {
    pjrt_buffer_t* in[3] = {NULL, NULL, NULL};
    uint8_t pred = kCases[i].p;
    ASSERT_OK(pjrt_buffer_from_host(0, F32, 0, NULL, &kCases[i].x, &in[0]));
    ASSERT_OK(pjrt_buffer_from_host(0, BOOL, 0, NULL, &pred, &in[1]));
    ASSERT_OK(pjrt_buffer_from_host(0, I32, 0, NULL, &kCases[i].k, &in[2]));
    float got_if = 0, got_case = 0;
    void* hosts[2] = {&got_if, &got_case};
    size_t sizes[2] = {4, 4};
    EXPECT(run_check(build_if_case(), in, 3, hosts, sizes, 2) == 1);
    for (int j = 0; j < 3; ++j) pjrt_buffer_release(in[j]);
    EXPECT(got_if == kCases[i].want_if);
    EXPECT(got_case == kCases[i].want_case); /* k = 7 is out of range: the last branch */
  }
}

/* A while over one i32 counter starting at 0; its condition is open. */
static ir_region_op_t begin_counter(ir_func_t* f, ir_value_t* cond_arg) {
  ir_value_t init = ir_constant_i64(f, I32, 0);
  return ir_while_begin(f, &init, 1, cond_arg);
}

/* the body returns a value of another type than the carried one */
static void body_wrong_type(ir_func_t* f) {
  int64_t dims[1] = {4};
  ir_value_t init[2] = {ir_constant_i64(f, I32, 0), ir_param(f, ir_type_make(F32, 1, dims))}, args[2], out[2];
  ir_region_op_t w = ir_while_begin(f, init, 2, args);
  cond_counter_below(f, args, 3);
  ir_while_body(f, &w, args);
  ir_value_t wrong[2] = {args[0], ir_constant_f64(f, F32, 0)};
  ir_region_end(f, wrong, 2);
  ir_while_end(f, &w, out);
}

/* the condition returns its i32 argument instead of a tensor<i1> */
static void cond_not_bool(ir_func_t* f) {
  ir_value_t arg, out;
  ir_region_op_t w = begin_counter(f, &arg);
  ir_region_end(f, &arg, 1);
  ir_while_body(f, &w, &arg);
  ir_region_end(f, &arg, 1);
  ir_while_end(f, &w, &out);
}

/* the body opened while the condition is still open */
static void body_inside_cond(ir_func_t* f) {
  ir_value_t arg;
  ir_region_op_t w = begin_counter(f, &arg);
  ir_while_body(f, &w, &arg);
  EXPECT(arg == IR_NONE);
}

static void ended_without_body(ir_func_t* f) {
  ir_value_t arg, out;
  ir_region_op_t w = begin_counter(f, &arg);
  cond_counter_below(f, &arg, 3);
  ir_while_end(f, &w, &out);
  EXPECT(out == IR_NONE);
}

/* a condition's block argument used in the body (its region is closed) */
static void cond_arg_in_body(ir_func_t* f) {
  ir_value_t cond_arg, body_arg, out;
  ir_region_op_t w = begin_counter(f, &cond_arg);
  cond_counter_below(f, &cond_arg, 3);
  ir_while_body(f, &w, &body_arg);
  ir_value_t next = plus_one(f, cond_arg);
  ir_region_end(f, &next, 1);
  ir_while_end(f, &w, &out);
}

/* no carried values: fails, and the sequence still balances */
static void no_carried_values(ir_func_t* f) {
  ir_value_t none[1] = {IR_NONE}, out[1];
  ir_region_op_t w = ir_while_begin(f, none, 0, none);
  ir_region_end(f, NULL, 0);
  ir_while_body(f, &w, none);
  ir_region_end(f, NULL, 0);
  ir_while_end(f, &w, out);
}

/* if with |num_else| else branches, on |pred|, returning 1.0f */
static void if_returning_one(ir_func_t* f, ir_value_t pred, int num_else) {
  ir_type_t scalar = ir_type_scalar(F32);
  ir_value_t one = ir_constant_f64(f, F32, 1), out = 0;
  ir_region_op_t h = ir_if_begin(f, pred, &scalar, 1);
  ir_region_end(f, &one, 1);
  for (int i = 0; i < num_else; ++i) {
    ir_if_else(f, &h);
    ir_region_end(f, &one, 1);
  }
  ir_if_end(f, &h, &out);
  EXPECT(out == IR_NONE);
}

static void if_on_int(ir_func_t* f) { if_returning_one(f, ir_constant_i64(f, I32, 1), 1); }
static void if_three_branches(ir_func_t* f) { if_returning_one(f, ir_constant_i64(f, BOOL, 1), 2); }

static void case_no_branch(ir_func_t* f) {
  ir_type_t scalar = ir_type_scalar(F32);
  ir_value_t out;
  ir_region_op_t h = ir_case_begin(f, ir_constant_i64(f, I32, 0), 0, &scalar, 1);
  ir_region_end(f, NULL, 0);
  ir_case_end(f, &h, &out);
}

TEST(IrWhile_Errors) {
  static const struct {
    void (*build)(ir_func_t*);
    const char* message;
  } kErrors[] = {
      {body_wrong_type, "region result 1 must be tensor<4xf32>, got tensor<f32>"},
      {cond_not_bool, "region result 0 must be tensor<i1>, got tensor<i32>"},
      {body_inside_cond, "ir_while_body: stablehlo.while: the previous region is still open"},
      {ended_without_body, "ir_while_end: stablehlo.while ended after 1 of its 2 regions"},
      {cond_arg_in_body, "is defined inside a region of stablehlo.while that is closed"},
      {no_carried_values, "stablehlo.while: 0 loop-carried values is outside [1, 16]"},
      {if_on_int, "stablehlo.if: the selector must be tensor<i1>, got tensor<i32>"},
      {if_three_branches, "ir_if_else: stablehlo.if has only 2 region(s)"},
      {case_no_branch, "stablehlo.case: 0 branches (at least 1)"},
  };
  for (size_t i = 0; i < sizeof(kErrors) / sizeof(kErrors[0]); ++i) {
    ir_func_t* f = ir_func_create();
    kErrors[i].build(f);
    const char* got = ir_func_status(f) ? tpurt_status_message(ir_func_status(f)) : "(no error)";
    if (!strstr(got, kErrors[i].message))
      fprintf(stderr, "  expected \"%s\" in: %s\n", kErrors[i].message, got);
    EXPECT(strstr(got, kErrors[i].message) != NULL);
    char* text = NULL;
    tpurt_status_t printed = ir_func_print(f, &text, NULL); /* a sticky error never prints */
    EXPECT(printed != NULL && text == NULL);
    tpurt_status_free(printed);
    ir_func_free(f);
  }
}

/* built without error but never ended: printing refuses */
TEST(IrWhile_NotEnded) {
  ir_func_t* f = ir_func_create();
  ir_value_t arg;
  begin_counter(f, &arg);
  cond_counter_below(f, &arg, 3);
  EXPECT(ir_func_status(f) == NULL);
  char* text = NULL;
  tpurt_status_t s = ir_func_print(f, &text, NULL);
  EXPECT(s != NULL && strstr(tpurt_status_message(s), "1 while/if/case op(s) begun and not ended") != NULL);
  tpurt_status_free(s);
  ir_func_free(f);
}

TEST_MAIN(TEST_CASE(IrWhile_Golden), TEST_CASE(IrWhile_RunDoubling),
          TEST_CASE(IrWhile_RunBlockedDynamicSlices), TEST_CASE(IrWhile_RunNested),
          TEST_CASE(IrWhile_RunIfCase), TEST_CASE(IrWhile_Errors), TEST_CASE(IrWhile_NotEnded))
