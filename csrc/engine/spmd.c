/* spmd.c: turning a printed one-device module into an SPMD one: the
** partition count in the module attributes, the device mesh as an sdy.mesh
** and an sdy.sharding attribute on every @main argument and result. These
** are Shardy's annotations, which XLA's current partitioner reads (the
** compile options ask for it: pjrt_spmd_compile_options); the older
** mhlo.sharding form makes XLA run GSPMD, which it is retiring and warns
** about at every compile. The printer (ir/) stays unaware of
** shardings: they are a property of the buffers a program is launched with,
** known only here. */
#include <stdio.h>

#include "../base/base.h"
#include "../cache/cache.h"
#include "engine.h"

/* The rank of the tensor type in [item, end) ("%v0: tensor<4x8xf32>" is 2),
** or -1 if it holds no tensor type. Shapes are static: the dims are the
** leading all-digit "x"-separated fields. */
static int32_t item_rank(const char* item, const char* end) {
  static const char kTensor[] = "tensor<";
  const size_t n = sizeof(kTensor) - 1;
  const char* t = item;
  while (t + n <= end && memcmp(t, kTensor, n) != 0) ++t;
  if (t + n > end) return -1;
  int32_t rank = 0;
  for (const char* p = t + n; p < end && *p >= '0' && *p <= '9';) {
    while (p < end && *p >= '0' && *p <= '9') ++p;
    if (p >= end || *p != 'x') break;
    ++rank;
    ++p;
  }
  return rank;
}

/* Appends the comma-separated items of [begin, end) ("%v0: tensor<4xf32>",
** or "tensor<4xf32>"), each followed by its Shardy sharding (NULL:
** replicated). Types hold no ", ", so the split is exact. */
static bool annotate_list(tpurt_strbuf_t* out, const char* begin, const char* end,
                          const pjrt_sharding_t* const* shardings, int32_t count) {
  int32_t i = 0;
  const char* item = begin;
  while (item < end) {
    const char* next = item;
    while (next + 1 < end && !(next[0] == ',' && next[1] == ' ')) ++next;
    if (next + 1 >= end) next = end;
    if (i >= count) return false;
    if (i) tpurt_strbuf_puts(out, ", ");
    tpurt_strbuf_append(out, item, (size_t)(next - item));
    int32_t rank = item_rank(item, next);
    if (rank >= 0) {
      if (shardings[i] && shardings[i]->rank != rank) return false;
      tpurt_strbuf_puts(out, " {sdy.sharding = ");
      pjrt_sharding_sdy_text(shardings[i], rank, out);
      tpurt_strbuf_puts(out, "}");
    }
    ++i;
    item = next < end ? next + 2 : end;
  }
  return i == count;
}

tpurt_status_t spmd_annotate_module(const char* text, const pjrt_sharding_t* mesh,
                                    const pjrt_sharding_t* const* param_shardings, int32_t num_params,
                                    const pjrt_sharding_t* const* result_shardings, int32_t num_results,
                                    char** out_text, size_t* out_size) {
  *out_text = NULL;
  *out_size = 0;
  static const char kPartitions[] = "mhlo.num_partitions = 1 : i32";
  static const char kMain[] = "  func.func public @main(";
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
  tpurt_strbuf_printf(&out, "mhlo.num_partitions = %d : i32", mesh->num_devices);
  const char* after_parts = parts + sizeof(kPartitions) - 1;
  tpurt_strbuf_append(&out, after_parts, (size_t)(main - after_parts));
  /* the mesh every sharding names, a symbol of the module */
  tpurt_strbuf_puts(&out, "  ");
  pjrt_sharding_sdy_mesh(mesh, &out);
  tpurt_strbuf_puts(&out, "\n  func.func public @main(");
  const char* params = main + sizeof(kMain) - 1;
  bool ok = annotate_list(&out, params, arrow, param_shardings, num_params);
  tpurt_strbuf_puts(&out, kArrow);
  ok = ok && annotate_list(&out, arrow + sizeof(kArrow) - 1, body, result_shardings, num_results);
  tpurt_strbuf_puts(&out, body);
  if (!ok) {
    tpurt_strbuf_free(&out);
    return tpurt_status_create(TPURT_INTERNAL,
                               "SPMD: @main has not %d arguments and %d results of the shardings' ranks",
                               num_params, num_results);
  }
  *out_text = out.data;
  *out_size = out.size;
  return NULL;
}

/*===--- fused and compiled graphs on sharded operands ---===*/

tpurt_status_t spmd_mesh_of(pjrt_buffer_t* const* args, int32_t num_args, const pjrt_sharding_t** out_mesh) {
  *out_mesh = NULL;
  for (int32_t i = 0; i < num_args; ++i) {
    const pjrt_buffer_t* b = args[i];
    if (!b || !b->sharding) continue;
    if (!*out_mesh) {
      *out_mesh = b->sharding;
    } else if (!pjrt_sharding_same_mesh(*out_mesh, b->sharding)) {
      return tpurt_status_create(TPURT_INVALID_ARGUMENT,
                                 "operands are sharded over two different meshes (of %d and %d devices); "
                                 "reshard them onto one mesh first",
                                 (*out_mesh)->num_devices, b->sharding->num_devices);
    }
  }
  return NULL;
}

/* |out| = replicated on |mesh| at |type|'s rank, or split as |like| (may be NULL). */
static void result_like(const pjrt_sharding_t* mesh, const ir_type_t* type, const pjrt_sharding_t* like,
                        pjrt_sharding_t* out) {
  *out = *mesh;
  out->rank = type->rank;
  memset(out->dim_axis, -1, sizeof(out->dim_axis));
  if (like) memcpy(out->dim_axis, like->dim_axis, sizeof(out->dim_axis));
}

void spmd_result_sharding(const pjrt_sharding_t* mesh, pjrt_buffer_t* const* args, int32_t num_args,
                          const ir_type_t* type, const pjrt_buffer_t* prior, pjrt_sharding_t* out) {
  const pjrt_buffer_t* like = NULL;
  if (prior && prior->sharding && prior->rank == type->rank &&
      memcmp(prior->dims, type->dims, sizeof(int64_t) * (size_t)type->rank) == 0)
    like = prior;
  for (int32_t i = 0; i < num_args && !like; ++i) {
    const pjrt_buffer_t* b = args[i];
    if (b && b->sharding && b->rank == type->rank &&
        memcmp(b->dims, type->dims, sizeof(int64_t) * (size_t)type->rank) == 0)
      like = b;
  }
  result_like(mesh, type, like ? like->sharding : NULL, out);
}

void spmd_result_sharding_typed(const pjrt_sharding_t* mesh, const pjrt_sharding_t* const* params,
                                const ir_type_t* param_types, int32_t num_params, const ir_type_t* type,
                                pjrt_sharding_t* out) {
  const pjrt_sharding_t* like = NULL;
  for (int32_t i = 0; i < num_params && !like; ++i) {
    const ir_type_t* t = &param_types[i];
    if (params[i] && t->rank == type->rank &&
        memcmp(t->dims, type->dims, sizeof(int64_t) * (size_t)type->rank) == 0)
      like = params[i];
  }
  result_like(mesh, type, like, out);
}

/* SPMD executables of fused and compiled graphs, keyed by the annotated
** module (which holds every sharding) and the mesh's devices. A small FIFO:
** a graph that repeats finds its program; the plan cache holds strict eager's. */
enum { SPMD_CACHE_SIZE = 64 };
typedef struct {
  uint64_t hash;
  char* text;
  pjrt_executable_t* executable;
} spmd_entry_t;
static spmd_entry_t g_spmd_cache[SPMD_CACHE_SIZE] TPURT_GUARDED_BY(g_engine_mutex);
static int32_t g_spmd_next TPURT_GUARDED_BY(g_engine_mutex);

tpurt_status_t spmd_annotate(const char* text, const pjrt_sharding_t* mesh, const pjrt_buffer_t* const* args,
                             int32_t num_args, const pjrt_sharding_t* results, int32_t num_results,
                             char** out_text, size_t* out_size) {
  const pjrt_sharding_t** shardings = tpurt_xcalloc((size_t)(num_args + num_results) + 1, sizeof(void*));
  for (int32_t i = 0; i < num_args; ++i) shardings[i] = args[i] ? args[i]->sharding : NULL;
  for (int32_t i = 0; i < num_results; ++i) shardings[num_args + i] = &results[i];
  tpurt_status_t status = spmd_annotate_module(text, mesh, shardings, num_args, shardings + num_args,
                                               num_results, out_text, out_size);
  free(shardings);
  return status;
}

tpurt_status_t spmd_get_or_compile(const char* text, const pjrt_sharding_t* mesh, pjrt_buffer_t* const* args,
                                   int32_t num_args, const pjrt_sharding_t* results, int32_t num_results,
                                   pjrt_executable_t** out_executable) {
  *out_executable = NULL;
  char* annotated = NULL;
  size_t size = 0;
  tpurt_status_t status = spmd_annotate(text, mesh, (const pjrt_buffer_t* const*)args, num_args, results,
                                        num_results, &annotated, &size);
  if (status) return status;
  uint64_t h = tpurt_hash_str(TPURT_HASH_SEED, annotated);
  for (int32_t i = 0; i < mesh->num_devices; ++i) h = tpurt_hash_u64(h, (uint64_t)mesh->devices[i]);
  for (int32_t i = 0; i < SPMD_CACHE_SIZE; ++i) {
    spmd_entry_t* e = &g_spmd_cache[i];
    if (e->executable && e->hash == h && strcmp(e->text, annotated) == 0) {
      status = cache_shadow_program(annotated, size, "", 0, mesh->num_devices, e->executable);
      if (status) {
        free(annotated);
        return status;
      }
      pjrt_executable_retain(e->executable);
      *out_executable = e->executable;
      free(annotated);
      return NULL;
    }
  }
  if (tpurt_config()->print_mlir) fprintf(stderr, "// SPMD graph\n%s\n", annotated);
  status = pjrt_compile_spmd(annotated, size, mesh->num_devices, mesh->devices, out_executable);
  if (status) {
    free(annotated);
    return status;
  }
  atomic_fetch_add(&engine_counters.spmd_compiles, 1);
  status = cache_shadow_program(annotated, size, "", 0, mesh->num_devices, *out_executable);
  if (status) {
    free(annotated);
    pjrt_executable_release(*out_executable);
    *out_executable = NULL;
    return status;
  }
  spmd_entry_t* e = &g_spmd_cache[g_spmd_next];
  g_spmd_next = (g_spmd_next + 1) % SPMD_CACHE_SIZE;
  free(e->text);
  pjrt_executable_release(e->executable);
  e->hash = h;
  e->text = annotated;
  e->executable = *out_executable;
  pjrt_executable_retain(e->executable);
  return NULL;
}

tpurt_status_t spmd_run(pjrt_executable_t* executable, const pjrt_sharding_t* mesh,
                        pjrt_buffer_t* const* args, int32_t num_args, const pjrt_sharding_t* results,
                        const ir_type_t* result_types, int32_t num_results, pjrt_buffer_t** outs,
                        const char* label) {
  const size_t n = (size_t)mesh->num_devices, na = (size_t)num_args, no = (size_t)num_results;
  pjrt_buffer_t** per = tpurt_xcalloc(n * na + 1, sizeof(pjrt_buffer_t*));
  bool* owned = tpurt_xcalloc(n * na + 1, sizeof(bool));
  pjrt_buffer_t** raw = tpurt_xcalloc(n * no + 1, sizeof(pjrt_buffer_t*));
  tpurt_status_t status = NULL;
  for (size_t d = 0; d < n && !status; ++d) {
    for (size_t i = 0; i < na && !status; ++i) {
      pjrt_buffer_t* b = args[i];
      if (b->sharding) {
        per[d * na + i] = b->shards[d];
      } else {
        /* a one-device operand: the same value on every device */
        status = pjrt_buffer_copy_to_device(b, mesh->devices[d], &per[d * na + i]);
        owned[d * na + i] = !status;
      }
    }
  }
  if (!status)
    status = pjrt_execute_spmd(executable, mesh->num_devices, mesh->devices, per, na, raw, no, label);
  for (size_t i = 0; i < n * na; ++i)
    if (owned[i]) pjrt_buffer_release(per[i]);
  if (!status) {
    pjrt_buffer_t* shards[64];
    for (size_t k = 0; k < no; ++k) {
      for (size_t d = 0; d < n; ++d) shards[d] = raw[d * no + k];
      outs[k] = pjrt_buffer_sharded_create_consume(&results[k], result_types[k].dtype, result_types[k].rank,
                                                   result_types[k].dims, shards);
    }
  }
  free(per);
  free(owned);
  free(raw);
  return status;
}
