/* spmd.c: turning a printed one-device module into an SPMD one: the
** partition count in the module attributes and an mhlo.sharding attribute
** on every @main argument and result. The printer (ir/) stays unaware of
** shardings: they are a property of the buffers a program is launched with,
** known only here. */
#include "../base/base.h"
#include "engine.h"

/* Appends the comma-separated items of [begin, end) ("%0: tensor<4xf32>",
** or "tensor<4xf32>"), each followed by its sharding attribute. Types hold
** no ", ", so the split is exact. */
static bool annotate_list(tpurt_strbuf_t* out, const char* begin, const char* end, char* const* shardings,
                          int32_t count) {
  int32_t i = 0;
  const char* item = begin;
  while (item < end) {
    const char* next = item;
    while (next + 1 < end && !(next[0] == ',' && next[1] == ' ')) ++next;
    if (next + 1 >= end) next = end;
    if (i >= count) return false;
    if (i) tpurt_strbuf_puts(out, ", ");
    tpurt_strbuf_append(out, item, (size_t)(next - item));
    tpurt_strbuf_printf(out, " {mhlo.sharding = \"%s\"}", shardings[i]);
    ++i;
    item = next < end ? next + 2 : end;
  }
  return i == count;
}

tpurt_status_t spmd_annotate_module(const char* text, int32_t num_partitions, char* const* param_shardings,
                                    int32_t num_params, char* const* result_shardings, int32_t num_results,
                                    char** out_text, size_t* out_size) {
  *out_text = NULL;
  *out_size = 0;
  static const char kPartitions[] = "mhlo.num_partitions = 1 : i32";
  static const char kMain[] = "func.func public @main(";
  static const char kArrow[] = ") -> (";
  static const char kBody[] = ") {\n";
  const char* parts = strstr(text, kPartitions);
  const char* main = strstr(text, kMain);
  const char* arrow = main ? strstr(main, kArrow) : NULL;
  const char* body = arrow ? strstr(arrow, kBody) : NULL;
  if (!parts || !main || !arrow || !body || parts > main)
    return tpurt_status_create(TPURT_INTERNAL, "SPMD: the printed module has no @main signature to annotate");
  tpurt_strbuf_t out = {0};
  tpurt_strbuf_append(&out, text, (size_t)(parts - text));
  tpurt_strbuf_printf(&out, "mhlo.num_partitions = %d : i32", num_partitions);
  const char* after_parts = parts + sizeof(kPartitions) - 1;
  const char* params = main + sizeof(kMain) - 1;
  tpurt_strbuf_append(&out, after_parts, (size_t)(params - after_parts));
  bool ok = annotate_list(&out, params, arrow, param_shardings, num_params);
  tpurt_strbuf_puts(&out, kArrow);
  ok = ok && annotate_list(&out, arrow + sizeof(kArrow) - 1, body, result_shardings, num_results);
  tpurt_strbuf_puts(&out, body);
  if (!ok) {
    tpurt_strbuf_free(&out);
    return tpurt_status_create(TPURT_INTERNAL, "SPMD: @main has not %d arguments and %d results", num_params,
                               num_results);
  }
  *out_text = out.data;
  *out_size = out.size;
  return NULL;
}
