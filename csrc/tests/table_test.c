/* table_test.c: the op table: no two rows claim one overload, a planted
** duplicate is caught and named, lower_find's in-place fallback, and the
** facts rows declare (tpurt_op_facts, tpurt_op_check_args: index bounds and
** integer division, read through a fake device read). */
#include "../lower/lower.h"
#include "test.h"

static tpurt_status_t nop_rule(lower_ctx_t* ctx) {
  (void)ctx;
  return NULL;
}
static tpurt_status_t other_rule(lower_ctx_t* ctx) {
  (void)ctx;
  return NULL;
}

TEST(Table_NoDuplicateRows) {
  tpurt_status_t status = lower_check_table();
  if (status) fprintf(stderr, "  %s\n", tpurt_status_message(status));
  EXPECT(status == NULL);
  tpurt_status_free(status);
}

TEST(Table_PlantedDuplicateIsNamed) {
  static const lower_rule_t a[] = {LOWER_FN("aten::x.one", nop_rule), LOWER_FN("aten::y", nop_rule),
                                   LOWER_END};
  static const lower_rule_t b[] = {LOWER_FN("aten::z", nop_rule), LOWER_FN("aten::x.one", other_rule),
                                   LOWER_END};
  const lower_rule_t* const clean[] = {a};
  const lower_rule_t* const both[] = {a, b};
  EXPECT(lower_check_rows(clean, 1) == NULL);
  tpurt_status_t status = lower_check_rows(both, 2);
  EXPECT(status != NULL);
  if (status) {
    EXPECT(tpurt_status_code(status) == TPURT_INTERNAL);
    EXPECT(strcmp(tpurt_status_message(status), "1 duplicate op-table row(s): aten::x.one") == 0);
  }
  tpurt_status_free(status);
  /* the same row twice in one family counts too */
  static const lower_rule_t c[] = {LOWER_FN("aten::w", nop_rule), LOWER_FN("aten::w", nop_rule), LOWER_END};
  const lower_rule_t* const self[] = {c};
  status = lower_check_rows(self, 1);
  EXPECT(status != NULL);
  tpurt_status_free(status);
}

TEST(Table_FindAndInplaceFallback) {
  lower_rule_t scratch;
  const lower_rule_t* add = lower_find("aten::add.Tensor", &scratch);
  ASSERT(add != NULL);
  EXPECT(add->variant == LOWER_FUNCTIONAL && strcmp(add->name, "aten::add.Tensor") == 0);
  const lower_rule_t* add_ = lower_find("aten::add_.Tensor", &scratch);
  ASSERT(add_ != NULL);
  EXPECT(add_->variant == LOWER_INPLACE && add_->fn == add->fn);
  EXPECT(lower_find("aten::no_such_op", &scratch) == NULL);
}

TEST(Table_OpFacts) {
  tpurt_op_facts_t dropout = tpurt_op_facts("aten::native_dropout");
  EXPECT(dropout.default_generator && !dropout.checks_args);
  EXPECT(tpurt_op_facts("aten::index_select").checks_args);
  EXPECT(tpurt_op_facts("aten::index_add_").checks_args); /* through its functional row */
  EXPECT(tpurt_op_facts("aten::remainder.Tensor").checks_args);
  tpurt_op_facts_t add = tpurt_op_facts("aten::add.Tensor");
  EXPECT(!add.default_generator && !add.checks_args);
  tpurt_op_facts_t none = tpurt_op_facts("aten::no_such_op");
  EXPECT(!none.default_generator && !none.checks_args);
}

/* The values the fake device read returns (as the tensor's dtype). */
static const int64_t* g_read_values;
static int g_reads;
static tpurt_status_t fake_read(const tpurt_tensor_t* view, void* host, size_t nbytes) {
  int64_t n = 1;
  for (int32_t d = 0; d < view->rank; ++d) n *= view->sizes[d];
  ++g_reads;
  if (nbytes != (size_t)n * tpurt_dtype_size(view->dtype)) return tpurt_status_create(TPURT_INTERNAL, "size");
  for (int64_t i = 0; i < n; ++i) {
    if (view->dtype == TPURT_DTYPE_I32) {
      ((int32_t*)host)[i] = (int32_t)g_read_values[i];
    } else {
      ((int64_t*)host)[i] = g_read_values[i];
    }
  }
  return NULL;
}

static tpurt_arg_t tensor_arg(tpurt_dtype_t dtype, int32_t rank, const int64_t* sizes) {
  tpurt_arg_t a = {.kind = TPURT_ARG_TENSOR};
  a.u.tensor.dtype = dtype;
  a.u.tensor.rank = rank;
  for (int32_t d = 0; d < rank; ++d) a.u.tensor.sizes[d] = sizes[d];
  return a;
}
static tpurt_arg_t int_arg(int64_t value) { return (tpurt_arg_t){.kind = TPURT_ARG_INT, .u = {.i = value}}; }

/* Runs tpurt_op_check_args over |name| and |args| with index values
** |values| and expects |code| (TPURT_OK: no error) and, for an error, the
** message |words|. */
static void expect_check(const char* name, const tpurt_arg_t* args, int32_t n, const int64_t* values,
                         tpurt_read_host_fn read, tpurt_status_code_t code, const char* words) {
  tpurt_op_call_t call = {.name = name, .args = args, .num_args = n};
  g_read_values = values;
  tpurt_status_t status = tpurt_op_check_args(&call, read);
  EXPECT(tpurt_status_code(status) == code);
  if (words && strcmp(tpurt_status_message(status), words) != 0) {
    fprintf(stderr, "  %s: got \"%s\"\n", name, tpurt_status_message(status));
    ++test_failures_;
  }
  tpurt_status_free(status);
}

TEST(Table_IndexFactsCheckBounds) {
  const int64_t four = 4, two = 2, one = 1, x3[3] = {2, 4, 3};
  /* index_select(self[4], 0, index[2]): no negatives, IndexError in its words */
  tpurt_arg_t sel[3] = {tensor_arg(TPURT_DTYPE_F32, 1, &four), int_arg(0),
                        tensor_arg(TPURT_DTYPE_I64, 1, &two)};
  const int64_t ok[2] = {0, 3}, high[2] = {1, 4}, negative[2] = {-1, 0};
  expect_check("aten::index_select", sel, 3, ok, fake_read, TPURT_OK, NULL);
  expect_check("aten::index_select", sel, 3, high, fake_read, TPURT_OUT_OF_RANGE,
               "index out of range in self (index 4 is out of bounds for dimension 0 with size 4)");
  expect_check("aten::index_select", sel, 3, negative, fake_read, TPURT_OUT_OF_RANGE, NULL);
  g_reads = 0;
  expect_check("aten::index_select", sel, 3, high, NULL, TPURT_OK, NULL); /* no reader: not read */
  EXPECT(g_reads == 0);
  /* int32 indices widen; a negative dim names the dim it wraps to */
  tpurt_arg_t sel32[3] = {tensor_arg(TPURT_DTYPE_F32, 3, x3), int_arg(-2),
                          tensor_arg(TPURT_DTYPE_I32, 1, &two)};
  expect_check("aten::index_copy_", sel32, 3, high, fake_read, TPURT_OUT_OF_RANGE,
               "index 4 is out of bounds for dimension 1 with size 4");
  /* index_fill wraps negatives; gather raises a RuntimeError's code */
  const int64_t wrapped[2] = {-4, 3}, too_negative[2] = {-5, 0};
  expect_check("aten::index_fill.int_Scalar", sel, 3, wrapped, fake_read, TPURT_OK, NULL);
  expect_check("aten::index_fill.int_Scalar", sel, 3, too_negative, fake_read, TPURT_OUT_OF_RANGE,
               "index -5 is out of bounds for dimension 0 with size 4");
  expect_check("aten::gather", sel, 3, high, fake_read, TPURT_INVALID_ARGUMENT,
               "index 4 is out of bounds for dimension 0 with size 4");
  /* take(self[4], index): flat, wrapping */
  tpurt_arg_t take[2] = {tensor_arg(TPURT_DTYPE_F32, 1, &four), tensor_arg(TPURT_DTYPE_I64, 1, &two)};
  expect_check("aten::take", take, 2, wrapped, fake_read, TPURT_OK, NULL);
  expect_check("aten::take", take, 2, too_negative, fake_read, TPURT_OUT_OF_RANGE,
               "out of range: tried to access index -5 on a tensor of 4 elements.");
  /* an index given as a number (a 0-d CPU tensor) is refused in every mode */
  tpurt_arg_t take_number[2] = {take[0], {.kind = TPURT_ARG_SCALAR}};
  take_number[1].u.scalar.dtype = TPURT_DTYPE_I64;
  expect_check(
      "aten::take", take_number, 2, NULL, NULL, TPURT_INVALID_ARGUMENT,
      "Expected all tensors to be on the same device, but found at least two devices, tpu:0 and cpu!");
  /* x[:, idx] on [2, 4, 3]: the dim is the index's place among the indices given */
  tpurt_arg_t list[4] = {tensor_arg(TPURT_DTYPE_F32, 3, x3),
                         {.kind = TPURT_ARG_TENSOR_LIST, .u = {.list_len = 2}},
                         {.kind = TPURT_ARG_NONE},
                         tensor_arg(TPURT_DTYPE_I64, 1, &one)};
  const int64_t at4 = 4, at_minus4 = -4;
  expect_check("aten::index.Tensor", list, 4, &at_minus4, fake_read, TPURT_OK, NULL);
  expect_check("aten::index.Tensor", list, 4, &at4, fake_read, TPURT_OUT_OF_RANGE,
               "index 4 is out of bounds for dimension 0 with size 4");
  /* nll_loss_forward(self[2, 3], target[2], weight, reduction, ignore_index) */
  const int64_t x23[2] = {2, 3};
  tpurt_arg_t nll[5] = {tensor_arg(TPURT_DTYPE_F32, 2, x23),
                        tensor_arg(TPURT_DTYPE_I64, 1, &two),
                        {.kind = TPURT_ARG_NONE},
                        int_arg(1),
                        int_arg(-100)};
  const int64_t ignored[2] = {2, -100}, class3[2] = {0, 3};
  expect_check("aten::nll_loss_forward", nll, 5, ignored, fake_read, TPURT_OK, NULL);
  expect_check("aten::nll_loss_forward", nll, 5, class3, fake_read, TPURT_OUT_OF_RANGE,
               "Target 3 is out of bounds.");
}

TEST(Table_DivisionFactsCheckZero) {
  const int64_t two = 2;
  const int64_t zero_in_tensor[2] = {1, 0}, no_zero[2] = {1, 2};
  const char* kWords = "ZeroDivisionError (integer division or remainder by zero)";
  tpurt_arg_t zero_number = {.kind = TPURT_ARG_SCALAR};
  zero_number.u.scalar.dtype = TPURT_DTYPE_I64;
  zero_number.u.scalar.tier = TPURT_TIER_WRAPPED;
  /* a zero Python number: checked without a reader */
  tpurt_arg_t by_number[2] = {tensor_arg(TPURT_DTYPE_I64, 1, &two), zero_number};
  expect_check("aten::remainder.Scalar", by_number, 2, NULL, NULL, TPURT_INVALID_ARGUMENT, kWords);
  /* a zero in a device tensor: only through the reader */
  tpurt_arg_t by_tensor[2] = {tensor_arg(TPURT_DTYPE_I64, 1, &two), tensor_arg(TPURT_DTYPE_I64, 1, &two)};
  expect_check("aten::floor_divide", by_tensor, 2, zero_in_tensor, NULL, TPURT_OK, NULL);
  expect_check("aten::floor_divide", by_tensor, 2, zero_in_tensor, fake_read, TPURT_INVALID_ARGUMENT, kWords);
  expect_check("aten::floor_divide", by_tensor, 2, no_zero, fake_read, TPURT_OK, NULL);
  /* floats divide by zero without an error */
  tpurt_arg_t floats[2] = {tensor_arg(TPURT_DTYPE_F32, 1, &two), tensor_arg(TPURT_DTYPE_F32, 1, &two)};
  expect_check("aten::fmod.Tensor", floats, 2, zero_in_tensor, fake_read, TPURT_OK, NULL);
  /* div divides integers only when given a rounding mode */
  tpurt_arg_t true_div[3] = {by_number[0], zero_number, {.kind = TPURT_ARG_NONE}};
  expect_check("aten::div.Scalar_mode", true_div, 3, NULL, NULL, TPURT_OK, NULL);
  tpurt_arg_t floor_div[3] = {by_number[0], zero_number, {.kind = TPURT_ARG_STRING, .u = {.str = "floor"}}};
  expect_check("aten::div.Scalar_mode", floor_div, 3, NULL, NULL, TPURT_INVALID_ARGUMENT, kWords);
}

TEST_MAIN(TEST_CASE(Table_NoDuplicateRows), TEST_CASE(Table_PlantedDuplicateIsNamed),
          TEST_CASE(Table_FindAndInplaceFallback), TEST_CASE(Table_OpFacts),
          TEST_CASE(Table_IndexFactsCheckBounds), TEST_CASE(Table_DivisionFactsCheckZero))
