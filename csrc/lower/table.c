/* table.c: the one table from aten overload names to rules, built once
** from the per-family tables into a hash map.
**
** A name has one row. Should two rows name the same overload (two families
** both claiming it, or a row pasted twice), the first in kFamilies order
** stays in the map and the later one is counted, never silently put in
** its place: lower_check_rows names every such pair, and table_test fails
** on any in the real table. */
#include <pthread.h>
#include <stdio.h>

#include "../base/base.h"
#include "lower.h"

static const lower_rule_t* const kFamilies[] = {
    lower_elementwise_rules, lower_activation_rules,  lower_selection_rules,   lower_reduction_rules,
    lower_linalg_rules,      lower_norm_rules,        lower_shape_rules,       lower_factory_rules,
    lower_indexing_rules,    lower_random_rules,      lower_conv_rules,        lower_resample_rules,
    lower_attention_rules,   lower_backward_rules,    lower_foreach_rules,     lower_scan_rules,
    lower_sort_rules,        lower_pooling_rules,     lower_batch_norm_rules,  lower_special_rules,
    lower_search_rules,      lower_loss_rules,        lower_amp_rules,         lower_decomp_rules,
    lower_complex_rules,     lower_fft_rules,         lower_flash_rules,       lower_resample_filter_rules,
    lower_equal_rules,       lower_multinomial_rules, lower_grid_sample_rules,
};

#define MAP_SIZE 2048 /* power of two, > 2x the number of rules */
static const lower_rule_t* g_map[MAP_SIZE];
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static const lower_rule_t** slot(const char* name) {
  uint64_t h = tpurt_hash_str(TPURT_HASH_SEED, name);
  for (uint64_t i = 0;; ++i) {
    const lower_rule_t** s = &g_map[(h + i) & (MAP_SIZE - 1)];
    if (!*s || strcmp((*s)->name, name) == 0) return s;
  }
}

static void build_map(void) {
  for (size_t f = 0; f < sizeof(kFamilies) / sizeof(kFamilies[0]); ++f)
    for (const lower_rule_t* r = kFamilies[f]; r->name; ++r) {
      const lower_rule_t** s = slot(r->name);
      if (!*s) *s = r; /* a duplicate keeps the first row (see lower_check_rows) */
    }
}

/* The functional row |name| run as |variant| (in |scratch|), or NULL. A
** counted row too: the engine puts its count before the out= args. */
static const lower_rule_t* functional_as(const char* name, lower_variant_t variant, lower_rule_t* scratch) {
  const lower_rule_t* r = *slot(name);
  if (!r || r->variant != LOWER_FUNCTIONAL) return NULL;
  *scratch = *r;
  scratch->variant = variant;
  return scratch;
}

/* out= overloads whose namesake takes other arguments: all.out takes a dim
** while aten::all reduces everything (min.out and max.out, minimum's and
** maximum's, have rows of their own); the batch norms' running stats and
** rrelu's noise are args of the functional form only; the triangle indices'
** out= form has no dtype. */
static const char* const kOutNotOfNamesake[] = {
    "aten::_batch_norm_with_update.out",
    "aten::_native_batch_norm_legit.out",
    "aten::all.out",
    "aten::any.out",
    "aten::rrelu_with_noise.out",
    "aten::tril_indices.out",
    "aten::triu_indices.out",
};

/* An out= overload with no row of its own runs its functional row, the
** results written into the out= args: "aten::maximum.out" -> "aten::maximum"
** (or "aten::sub.out" -> "aten::sub.Tensor"), "aten::add.Scalar_out" ->
** "aten::add.Scalar". PyTorch mostly makes such a schema from the functional
** one plus the trailing out= args, so the rule reads the same positions; the
** exceptions are listed above, and tests/test_fallbacks_native.py compares
** every pair this maps with PyTorch's schemas. */
static const lower_rule_t* out_as_functional(const char* name, const char* dot, lower_rule_t* scratch) {
  for (size_t i = 0; i < sizeof(kOutNotOfNamesake) / sizeof(kOutNotOfNamesake[0]); ++i)
    if (strcmp(name, kOutNotOfNamesake[i]) == 0) return NULL;
  size_t base = (size_t)(dot - name), len = strlen(name);
  char functional[256];
  if (len + 8 > sizeof(functional)) return NULL;
  memcpy(functional, name, base);
  functional[base] = '\0';
  if (strcmp(dot, ".out") == 0) {
    const lower_rule_t* r = functional_as(functional, LOWER_OUT, scratch);
    if (r) return r;
    snprintf(functional + base, sizeof(functional) - base, ".Tensor");
    return functional_as(functional, LOWER_OUT, scratch);
  }
  if (len - base > 5 && strcmp(name + len - 4, "_out") == 0) { /* ".Scalar_out" -> ".Scalar" */
    memcpy(functional, name, len - 4);
    functional[len - 4] = '\0';
    return functional_as(functional, LOWER_OUT, scratch);
  }
  return NULL;
}

const lower_rule_t* lower_find(const char* name, lower_rule_t* scratch) {
  pthread_once(&g_once, build_map);
  const lower_rule_t* r = *slot(name);
  if (r) return r;
  const char* dot = strchr(name, '.');
  if (dot && (r = out_as_functional(name, dot, scratch))) return r;
  /* "aten::add_.Tensor" -> "aten::add.Tensor", run in place */
  size_t base = dot ? (size_t)(dot - name) : strlen(name);
  if (base < 2 || name[base - 1] != '_' || base + 1 > 200) return NULL;
  char functional[256];
  memcpy(functional, name, base - 1);
  snprintf(functional + base - 1, sizeof(functional) - (base - 1), "%s", dot ? dot : "");
  return functional_as(functional, LOWER_INPLACE, scratch);
}

TPURT_MUST_USE tpurt_status_t lower_rule_run(const lower_rule_t* rule, lower_ctx_t* ctx) {
  ctx->rule = rule;
  tpurt_status_t status = rule->fn(ctx);
  ctx->rule = NULL; /* |rule| may be the caller's scratch copy */
  return status;
}

const char* lower_rule_str(const lower_ctx_t* ctx) { return ctx->rule ? ctx->rule->data.str : NULL; }
const lower_rule_data_t* lower_rule_data(const lower_ctx_t* ctx) {
  static const lower_rule_data_t kNone = {.arg = -1};
  return ctx->rule ? &ctx->rule->data : &kNone;
}
ir_op_t lower_rule_op(const lower_ctx_t* ctx) { return ctx->rule ? ctx->rule->data.op : IR_OP_NONE; }
double lower_rule_real(const lower_ctx_t* ctx) { return ctx->rule ? ctx->rule->data.real : 0.0; }

/* Names are compared pairwise within a sorted copy: the table has under a
** thousand rows and this runs in a test, not at start-up. */
static int compare_rows(const void* a, const void* b) {
  const lower_rule_t* ra = *(const lower_rule_t* const*)a;
  const lower_rule_t* rb = *(const lower_rule_t* const*)b;
  int c = strcmp(ra->name, rb->name);
  return c ? c : (ra < rb ? -1 : ra > rb);
}

TPURT_MUST_USE tpurt_status_t lower_check_rows(const lower_rule_t* const* families, int32_t num_families) {
  size_t count = 0;
  for (int32_t f = 0; f < num_families; ++f)
    for (const lower_rule_t* r = families[f]; r->name; ++r) ++count;
  const lower_rule_t** rows = tpurt_xmalloc((count ? count : 1) * sizeof(*rows));
  size_t n = 0;
  for (int32_t f = 0; f < num_families; ++f)
    for (const lower_rule_t* r = families[f]; r->name; ++r) rows[n++] = r;
  qsort(rows, n, sizeof(*rows), compare_rows);
  tpurt_strbuf_t names = {0};
  int32_t duplicates = 0;
  for (size_t i = 1; i < n; ++i) {
    if (strcmp(rows[i - 1]->name, rows[i]->name) != 0) continue;
    if (duplicates++ < 8) tpurt_strbuf_printf(&names, "%s%s", duplicates > 1 ? ", " : "", rows[i]->name);
  }
  free(rows);
  tpurt_status_t status = NULL;
  if (duplicates)
    status = tpurt_status_create(TPURT_INTERNAL, "%d duplicate op-table row(s): %s%s", (int)duplicates,
                                 names.data, duplicates > 8 ? ", ..." : "");
  tpurt_strbuf_free(&names);
  return status;
}

TPURT_MUST_USE tpurt_status_t lower_check_table(void) {
  return lower_check_rows(kFamilies, (int32_t)(sizeof(kFamilies) / sizeof(kFamilies[0])));
}
