/* timing.c: the public face of events, the launch log and device memory
** reports. The pjrt room keeps the completion events and times; what the
** engine adds is that an event first runs pending fused work, so that the
** event follows every op queued before it. */
#include "../base/base.h"
#include "engine.h"

struct tpurt_event_s {
  pjrt_event_t* marker;
};

tpurt_status_t tpurt_event_record(int device, tpurt_event_t** out_event) {
  *out_event = NULL;
  TPURT_RETURN_IF_ERROR(tpurt_runtime_init());
  queue_drain(); /* the event follows every op queued before it */
  engine_lock();
  tpurt_status_t status = graph_flush_locked(GRAPH_FLUSH_SYNCHRONIZE);
  engine_unlock();
  TPURT_RETURN_IF_ERROR(status);
  pjrt_event_t* marker = NULL;
  TPURT_RETURN_IF_ERROR(pjrt_event_record(device, &marker));
  tpurt_event_t* event = tpurt_xcalloc(1, sizeof(*event));
  event->marker = marker;
  *out_event = event;
  return NULL;
}

void tpurt_event_free(tpurt_event_t* event) {
  if (!event) return;
  pjrt_event_free(event->marker);
  free(event);
}

bool tpurt_event_query(tpurt_event_t* event) { return pjrt_event_query(event->marker); }

void tpurt_event_synchronize(tpurt_event_t* event) { pjrt_event_synchronize(event->marker); }

double tpurt_event_elapsed_ms(tpurt_event_t* start, tpurt_event_t* end) {
  double a = (double)pjrt_event_time_ns(start->marker);
  double b = (double)pjrt_event_time_ns(end->marker);
  return (b - a) / 1e6;
}

uint64_t tpurt_now_ns(void) { return pjrt_now_ns(); }

void tpurt_set_launch_correlation(uint64_t id) { pjrt_set_launch_correlation(id); }

void tpurt_set_compile_label(const char* label) { (void)pjrt_swap_compile_label(label); }

void tpurt_wait_idle(void) {
  queue_drain();
  pjrt_wait_idle();
}

int tpurt_launch_log(uint64_t since, tpurt_launch_record_t* out, int max, uint64_t* out_next) {
  return pjrt_launch_log(since, out, max, out_next);
}

int tpurt_program_stats(tpurt_program_stats_t* out, int max, uint64_t* out_device_ns, uint64_t* out_runs) {
  return pjrt_program_stats(out, max, out_device_ns, out_runs);
}

tpurt_status_t tpurt_device_memory(int device, tpurt_device_memory_t* out_memory) {
  return pjrt_device_memory(device, out_memory);
}
