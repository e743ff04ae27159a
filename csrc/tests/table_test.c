/* table_test.c: the op table: no two rows claim one overload, a planted
** duplicate is caught and named, and lower_find's in-place fallback. */
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

TEST_MAIN(TEST_CASE(Table_NoDuplicateRows), TEST_CASE(Table_PlantedDuplicateIsNamed),
          TEST_CASE(Table_FindAndInplaceFallback))
