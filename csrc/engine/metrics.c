/* metrics.c: the metrics of every room, read from their atomic counters
** (each field is read once, atomically: a snapshot of several fields is
** not one instant, but none is torn), and the memory counters by device.
*/
#include <stddef.h>

#include "../cache/cache.h"
#include "op_internal.h"

engine_counters_t engine_counters TPURT_GUARDED_BY(atomic);

/* The metrics' names and labels, from the one list (TPURT_METRICS). */
#define METRIC_IS_SECONDS_COUNT false
#define METRIC_IS_SECONDS_SECONDS true
#define METRIC_INFO_(name, kind, label) \
  {#name, label, METRIC_IS_SECONDS_##kind, offsetof(tpurt_metrics_t, name)},
static const tpurt_metric_info_t kMetricInfos[] = {TPURT_METRICS(METRIC_INFO_)};
#undef METRIC_INFO_

const tpurt_metric_info_t* tpurt_metric_infos(int* out_count) {
  *out_count = (int)(sizeof(kMetricInfos) / sizeof(kMetricInfos[0]));
  return kMetricInfos;
}

static double ns_to_s(uint64_t ns) { return (double)ns / 1e9; }

void tpurt_metrics_get(tpurt_metrics_t* m) {
  queue_drain(); /* counts include the compiles and launches of ops queued so far */
  memset(m, 0, sizeof(*m));
  pjrt_counters_t* c = pjrt_counters();
  m->compiles = c->compiles;
  m->executions = c->executions;
  m->bytes_to_device = c->bytes_to_device;
  m->bytes_from_device = c->bytes_from_device;
  m->compile_seconds = ns_to_s(c->compile_ns);
  m->compiles_eager_op = c->compiles_by_kind[TPURT_COMPILE_KIND_EAGER_OP];
  m->compile_seconds_eager_op = ns_to_s(c->compile_ns_by_kind[TPURT_COMPILE_KIND_EAGER_OP]);
  m->compiles_fused_graph = c->compiles_by_kind[TPURT_COMPILE_KIND_FUSED_GRAPH];
  m->compile_seconds_fused_graph = ns_to_s(c->compile_ns_by_kind[TPURT_COMPILE_KIND_FUSED_GRAPH]);
  m->compiles_compiled_graph = c->compiles_by_kind[TPURT_COMPILE_KIND_COMPILED_GRAPH];
  m->compile_seconds_compiled_graph = ns_to_s(c->compile_ns_by_kind[TPURT_COMPILE_KIND_COMPILED_GRAPH]);
  m->compiles_block = c->compiles_by_kind[TPURT_COMPILE_KIND_BLOCK];
  m->compile_seconds_block = ns_to_s(c->compile_ns_by_kind[TPURT_COMPILE_KIND_BLOCK]);
  m->max_concurrent_compiles = c->max_concurrent_compiles;
  m->queued_launches = queue_launch_count();
  m->live_buffers = c->live_buffers;
  m->cache_hits = engine_counters.plan_hits + engine_counters.exec_hits;
  m->spmd_compiles = engine_counters.spmd_compiles;
  m->live_storages = (uint64_t)atomic_load_explicit(&engine_counters.live_storages, memory_order_relaxed);
  cache_stats_t cs;
  cache_stats(&cs);
  m->cache_hits_memory = cs.hits_memory;
  m->cache_hits_disk = cs.hits_disk;
  m->cache_bytes_memory = cs.bytes_memory;
  m->cache_entries = cs.entries;
  m->cache_disk_writes = cs.disk_writes;
  m->cache_disk_rejects = cs.disk_rejects;
  plan_cache_usage(&m->plans, &m->plan_bytes);
  uint64_t device_ns = 0, runs = 0;
  (void)tpurt_program_stats(NULL, 0, &device_ns, &runs);
  m->execute_seconds = (double)device_ns / 1e9;
  for (int d = 0; d < 64; ++d) {
    m->bytes_in_use += c->bytes_in_use[d];
    m->peak_bytes_in_use += c->peak_bytes_in_use[d];
  }
}

void tpurt_metrics_reset(void) {
  queue_drain(); /* what ops queued before the reset compile is counted before it */
  pjrt_counters_t* c = pjrt_counters();
  c->compiles = c->executions = c->bytes_to_device = c->bytes_from_device = 0;
  c->compile_ns = 0;
  for (int k = 0; k < TPURT_COMPILE_KINDS; ++k) c->compiles_by_kind[k] = c->compile_ns_by_kind[k] = 0;
  c->max_concurrent_compiles = c->compiles_in_flight; /* a compile running now is still counted */
  engine_counters.plan_hits = engine_counters.exec_hits = 0;
  engine_counters.spmd_compiles = 0;
  queue_reset_count();
  cache_reset_counters();
  graph_reset_counts();
  pjrt_program_stats_reset();
}

tpurt_compile_kind_t tpurt_set_compile_kind(tpurt_compile_kind_t kind) {
  return pjrt_force_compile_kind(kind);
}

uint64_t tpurt_memory_allocated(int device) {
  queue_drain(); /* a queued op's outputs hold memory once it runs */
  return (device >= 0 && device < 64) ? pjrt_counters()->bytes_in_use[device] : 0;
}
uint64_t tpurt_max_memory_allocated(int device) {
  queue_drain();
  return (device >= 0 && device < 64) ? pjrt_counters()->peak_bytes_in_use[device] : 0;
}
void tpurt_reset_peak_memory(int device) {
  if (device >= 0 && device < 64)
    pjrt_counters()->peak_bytes_in_use[device] = pjrt_counters()->bytes_in_use[device];
}
