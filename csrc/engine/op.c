/* op.c: running one aten op: the entry points.
**
** Strict eager finds the op's plan by its signature (plan_cache.c) or
** builds it (lower_op.c) and launches it (launch.c); fused eager and
** tracing lower the op into the thread's pending graph (graph.c). See
** op_internal.h for how the jobs split and which lock guards what.
*/
#include <stdio.h>

#include "../cache/cache.h"
#include "op_internal.h"

/* copy_ of a whole storage into a whole storage of the same type shares the
** immutable buffer instead of running a program. */
static bool try_share_copy(const tpurt_op_call_t* call) {
  if (strcmp(call->name, "aten::copy_") != 0 || call->num_args < 2) return false;
  const tpurt_arg_t *d = &call->args[0], *s = &call->args[1];
  if (d->kind != TPURT_ARG_TENSOR || s->kind != TPURT_ARG_TENSOR) return false;
  const tpurt_tensor_t *dt = &d->u.tensor, *st = &s->u.tensor;
  pjrt_buffer_t* sb = st->storage->buffer;
  if (!sb || dt->dtype != st->dtype || dt->storage->device != st->storage->device) return false;
  if (!view_is_whole(dt) || !view_is_whole(st) || dt->rank != st->rank) return false;
  for (int32_t i = 0; i < dt->rank; ++i)
    if (dt->sizes[i] != st->sizes[i]) return false;
  pjrt_buffer_retain(sb);
  storage_set_buffer_consume(dt->storage, sb);
  return true;
}

static TPURT_MUST_USE tpurt_status_t check_operands(const tpurt_op_call_t* call);

/* Under a shadow target a program the target refuses fails: the error
** then also names the dtypes it was refused at (the op and the chip are
** named already), since a TPU may take an op at one dtype only. Writes
** "at dtype Float, Half" into |out| ("" when there is no target). */
static void dtype_context(const tpurt_op_call_t* call, char* out, size_t cap) {
  out[0] = '\0';
  if (!tpurt_shadow_target()) return;
  bool seen[TPURT_DTYPE_COUNT] = {false};
  size_t used = 0;
  for (int32_t i = 0; i < call->num_args && used < cap; ++i) {
    if (call->args[i].kind != TPURT_ARG_TENSOR) continue;
    tpurt_dtype_t dt = call->args[i].u.tensor.dtype;
    if ((unsigned)dt >= TPURT_DTYPE_COUNT || seen[dt]) continue;
    seen[dt] = true;
    int n = snprintf(out + used, cap - used, "%s%s", used ? ", " : "at dtype ", tpurt_dtype_name(dt));
    if (n > 0) used += (size_t)n;
  }
}

static TPURT_MUST_USE tpurt_status_t name_dtypes_consume(const tpurt_op_call_t* call, tpurt_status_t status) {
  if (!status) return status;
  char context[220];
  dtype_context(call, context, sizeof context);
  return context[0] ? tpurt_status_annotate_consume(status, context) : status;
}

/* Compiles the claimed |plan| of lowered |call| on this thread, with the
** engine lock released when |may_unlock| (else under it), and takes the
** lock again; launches queued behind it then run. */
static TPURT_MUST_USE tpurt_status_t compile_here(const tpurt_op_call_t* call, plan_t* plan,
                                                  lowered_t* lowered, bool may_unlock) {
  if (may_unlock) engine_unlock();
  tpurt_status_t status = name_dtypes_consume(call, plan_compile_consume(plan, lowered));
  if (status) compiled_finish_consume(plan->compiled, NULL, status);
  if (may_unlock) engine_lock();
  return status;
}

/* Lowers |call| into the claimed |plan| (engine lock held) and compiles it
** here (compile_here). */
static TPURT_MUST_USE tpurt_status_t build_plan(const lower_rule_t* rule, tpurt_op_call_t* call, plan_t* plan,
                                                bool may_unlock) {
  lowered_t lowered;
  TPURT_RETURN_IF_ERROR(lower_op(rule, call, NULL, &lowered));
  plan_adopt_tables(plan, &lowered);
  return compile_here(call, plan, &lowered, may_unlock);
}

/* A miss that queues: lowers |call| into the claimed |plan|, queues its
** launch and hands the compile to the pool (queue.c). A program for a mesh
** is compiled here instead (SPMD launches are not queued). */
static TPURT_MUST_USE tpurt_status_t build_and_queue(const lower_rule_t* rule, tpurt_op_call_t* call,
                                                     plan_t* plan, bool* out_queued) {
  *out_queued = false;
  lowered_t lowered;
  TPURT_RETURN_IF_ERROR(lower_op(rule, call, NULL, &lowered));
  plan_adopt_tables(plan, &lowered);
  if (plan->mesh) return compile_here(call, plan, &lowered, true);
  tpurt_status_t status = queue_launch(plan, call);
  char context[220];
  dtype_context(call, context, sizeof context);
  /* compiled even when this launch could not be queued: others may want it */
  queue_compile_consume(plan, &lowered, context[0] ? context : NULL);
  *out_queued = true;
  return status;
}

/* Finds or builds the plan for |call| under |rule| and launches it (engine
** lock held).
**
** Strict eager (|may_unlock|, the op's own thread, outside the engine's
** nested ops): a miss is queued and compiled on the pool (build_and_queue),
** an op whose plan another thread is compiling queues behind it, and while
** anything is queued every op queues, so launches keep their order. Where
** the queue is off (TORCH_TPU_COMPILE_THREADS=0, debug eager, a thread
** with its own compile options) a miss compiles on this thread with the
** engine lock released, so other threads' ops run and compile meanwhile;
** after that the operands may have changed (another thread wrote them), so
** they are checked again and the signature is looked up afresh: a changed
** one is just another key. A thread that finds its key being compiled
** waits for it with the lock released.
**
** The engine's own nested ops (a replayed fused op, a view made dense for a
** transfer) run inside callers that rely on the lock staying held, so they
** compile under it and never queue.
**
** A program loaded from the disk tier that fails to run (a stale or
** planted entry the checksums could not catch) is dropped from both tiers
** and compiled again, once, with a warning; out of memory is not its
** fault. */
static TPURT_MUST_USE tpurt_status_t run_rule(const lower_rule_t* rule, tpurt_op_call_t* call,
                                              bool may_unlock) {
  /* asked only on a miss or behind a queued launch: the common op skips it */
  const bool may_queue_here = may_unlock && tpurt_get_eager_mode() == TPURT_MODE_DEFER_NEVER;
  sig_t sig;
  sig_init(&sig);
  tpurt_status_t status = NULL;
  bool retried = false, unlocked = false;
  for (;;) {
    if (unlocked) {
      status = check_operands(call);
      if (status) break;
      unlocked = false;
    }
    sig_build(call, rule->numbers_in_key, &sig);
    const uint64_t h = sig_hash(&sig);
    plan_t* p = NULL;
    plan_lookup_t found = plan_cache_lookup(&sig, h, &p);
    const bool may_queue = may_queue_here && (found != PLAN_FOUND || queue_busy()) && queue_enabled();
    if (found == PLAN_BUSY && may_queue && p->has_tables && !p->mesh) {
      status = queue_launch(p, call);
      plan_release(p);
      break;
    }
    if (found == PLAN_BUSY && !may_unlock) {
      /* A nested op cannot wait without the lock: it builds and runs a
      ** private plan of its own (a rare second compile of the key). */
      plan_release(p);
      plan_t* own = tpurt_xcalloc(1, sizeof(*own));
      tpurt_refcount_init(&own->refcount);
      own->compiled = compiled_create();
      status = build_plan(rule, call, own, false);
      if (!status) status = plan_launch(own, call);
      plan_release(own);
      break;
    }
    if (found == PLAN_BUSY) {
      plan_release(p);
      engine_unlock();
      plan_cache_wait(&sig, h);
      engine_lock();
      unlocked = true;
      continue;
    }
    if (found == PLAN_CLAIMED && may_queue) {
      bool queued = false;
      status = build_and_queue(rule, call, p, &queued);
      if (!queued) { /* compiled here (a mesh), or lowering failed */
        if (status) {
          plan_cache_abandon(p);
        } else {
          plan_cache_publish(p);
          status = plan_launch(p, call);
        }
      }
      plan_release(p);
      break;
    }
    if (found == PLAN_CLAIMED) {
      status = build_plan(rule, call, p, may_unlock);
      if (status) {
        plan_cache_abandon(p);
        plan_release(p);
        break;
      }
      plan_cache_publish(p);
      if (may_unlock) {
        plan_release(p);
        unlocked = true;
        continue; /* look again: the operands may be other shapes now */
      }
    }
    if (may_queue && queue_busy() && !p->mesh) {
      status = queue_launch(p, call);
      plan_release(p);
      break;
    }
    status = plan_launch(p, call);
    const bool from_disk = p->from_disk;
    if (!status || !from_disk || tpurt_status_code(status) == TPURT_RESOURCE_EXHAUSTED || retried) {
      plan_release(p);
      break;
    }
    static bool warned TPURT_GUARDED_BY(g_engine_mutex);
    if (!warned) {
      warned = true;
      fprintf(stderr,
              "torch_tpu: warning: %s: a program loaded from the executable cache failed to run (%s); it was "
              "removed from the cache and compiled again\n",
              call->name, tpurt_status_message(status));
    }
    tpurt_status_free(status);
    status = NULL;
    cache_forget(p->program_hash);
    plan_cache_drop(p);
    plan_release(p);
    retried = true;
  }
  sig_free(&sig);
  return status;
}

/* Data-dependent sizes: count one tensor arg on the device (its nonzeros,
** or what the rule's count_op counts), wait for that number, then run the
** op with it as a trailing INT arg. */
static TPURT_MUST_USE tpurt_status_t run_counted(const lower_rule_t* rule, tpurt_op_call_t* call,
                                                 bool may_unlock) {
  int32_t flat = -1, schema = 0;
  for (int32_t i = 0; i < call->num_args; ++i, ++schema) {
    if (schema == rule->count_arg) flat = i;
    if (call->args[i].kind == TPURT_ARG_TENSOR_LIST) i += call->args[i].u.list_len;
  }
  if (flat < 0 || call->args[flat].kind != TPURT_ARG_TENSOR)
    return tpurt_status_create(TPURT_INTERNAL, "%s: argument %d is not a tensor", call->name,
                               rule->count_arg);
  tpurt_result_t count_result;
  tpurt_op_call_t count_call = {.name = rule->count_op ? rule->count_op : "tpurt::count_nonzero",
                                .args = &call->args[flat],
                                .num_args = 1,
                                .device = call->device,
                                .results = &count_result,
                                .max_results = 1};
  lower_rule_t scratch;
  const lower_rule_t* counter = lower_find(count_call.name, &scratch);
  if (!counter) return tpurt_status_create(TPURT_INTERNAL, "%s: no rule for %s", call->name, count_call.name);
  TPURT_RETURN_IF_ERROR(run_rule(counter, &count_call, may_unlock));
  tpurt_storage_t* counted = count_call.results[0].storage;
  int64_t count = 0;
  tpurt_status_t status = pjrt_buffer_to_host(counted->buffer, &count, sizeof(count));
  tpurt_storage_release(counted);
  if (status) return status;
  /* The count follows the functional args: an out= form's written tensors
  ** still trail the call, where lower_op looks for them. */
  int32_t at = call->num_args;
  if (rule->variant == LOWER_OUT)
    while (at > 0 && call->args[at - 1].is_write &&
           (call->args[at - 1].kind == TPURT_ARG_TENSOR || call->args[at - 1].kind == TPURT_ARG_NONE))
      --at;
  tpurt_arg_t* args = tpurt_xmalloc(sizeof(tpurt_arg_t) * (size_t)(call->num_args + 1));
  memcpy(args, call->args, sizeof(tpurt_arg_t) * (size_t)at);
  args[at] = (tpurt_arg_t){.kind = TPURT_ARG_INT, .u.i = count};
  memcpy(args + at + 1, call->args + at, sizeof(tpurt_arg_t) * (size_t)(call->num_args - at));
  tpurt_op_call_t counted_call = *call;
  counted_call.args = args;
  counted_call.num_args = call->num_args + 1;
  status = run_rule(rule, &counted_call, may_unlock);
  free(args);
  call->num_results = counted_call.num_results;
  if (tpurt_status_code(status) == TPURT_NEEDS_RESIZE) { /* positions of the call as the glue made it */
    int32_t at_schema = 0;                               /* the count's schema position */
    for (int32_t i = 0; i < at; ++i, ++at_schema)
      if (call->args[i].kind == TPURT_ARG_TENSOR_LIST) i += call->args[i].u.list_len;
    call->resize_arg = counted_call.resize_arg - (counted_call.resize_arg > at_schema ? 1 : 0);
    call->resize_rank = counted_call.resize_rank;
    memcpy(call->resize_sizes, counted_call.resize_sizes, sizeof(call->resize_sizes));
  }
  return status;
}

/* A cheap signature of an op for loop detection: its name and the shapes
** of its tensor args. */
static uint64_t op_fingerprint(const tpurt_op_call_t* call) {
  uint64_t h = tpurt_hash_str(TPURT_HASH_SEED, call->name);
  for (int32_t i = 0; i < call->num_args; ++i) {
    const tpurt_arg_t* a = &call->args[i];
    if (a->kind != TPURT_ARG_TENSOR) continue;
    h = tpurt_hash_u64(h, (uint64_t)a->u.tensor.dtype);
    for (int32_t d = 0; d < a->u.tensor.rank; ++d) h = tpurt_hash_u64(h, (uint64_t)a->u.tensor.sizes[d]);
  }
  return h;
}

/* Fused eager and tracing: lower the op into the pending graph. In fused
** eager, the graph is flushed before an op that starts the sequence again
** (a loop step repeats: each step becomes the same program) and when it
** grows past TORCH_TPU_FUSE_MAX_OPS ops. */
static TPURT_MUST_USE tpurt_status_t record_op(const lower_rule_t* rule, tpurt_op_call_t* call, bool fuse) {
  graph_t* g = graph_current();
  uint64_t fp = op_fingerprint(call);
  if (fuse && g && !graph_is_tracing(g)) {
    if (graph_device(g) != call->device) {
      TPURT_RETURN_IF_ERROR(graph_flush_locked(GRAPH_FLUSH_DEVICE_COPY));
    } else if (graph_repeats(g, fp)) {
      TPURT_RETURN_IF_ERROR(graph_flush_locked(GRAPH_FLUSH_REPEATED_SEQUENCE));
    }
  }
  g = graph_open(call->device);
  if (graph_device(g) != call->device)
    return tpurt_status_create(TPURT_INVALID_ARGUMENT, "a traced graph runs on tpu:%d, this op on tpu:%d",
                               graph_device(g), call->device);
  /* Noted first: the values the op writes and an error its lowering leaves
  ** in the graph are blamed on it. */
  graph_note_op(g, call->name, fp);
  lowered_t unused;
  tpurt_status_t status = lower_op(rule, call, g, &unused);
  if (!status && fuse && !graph_is_tracing(g)) graph_record_call(g, call);
  if (!status && fuse && !graph_is_tracing(g) && graph_num_ops(g) >= tpurt_config()->fuse_max_ops)
    status = graph_flush_locked(GRAPH_FLUSH_SIZE_LIMIT);
  return status;
}

/* Operands first: a value pending in another thread's graph is computed
** (that graph runs), and one that a failed graph lost makes the op fail
** with that graph's error, never compute from stale bytes. */
static TPURT_MUST_USE tpurt_status_t check_operands(const tpurt_op_call_t* call) {
  for (int32_t i = 0; i < call->num_args; ++i) {
    const tpurt_arg_t* a = &call->args[i];
    if (a->kind != TPURT_ARG_TENSOR || !a->u.tensor.storage) continue;
    TPURT_RETURN_IF_ERROR(graph_settle_locked(a->u.tensor.storage));
    TPURT_RETURN_IF_ERROR(storage_check_poison(a->u.tensor.storage));
  }
  return NULL;
}

/* The rule of |call| (into |scratch| if resolved from another name), after
** check_operands. */
static TPURT_MUST_USE tpurt_status_t prepare_call(tpurt_op_call_t* call, lower_rule_t* scratch,
                                                  const lower_rule_t** out_rule) {
  call->num_results = 0;
  *out_rule = lower_find(call->name, scratch);
  if (!*out_rule) return tpurt_status_create(TPURT_UNIMPLEMENTED, "no tpu lowering for %s", call->name);
  return check_operands(call);
}

static TPURT_MUST_USE tpurt_status_t op_run_now(tpurt_op_call_t* call) {
  lower_rule_t scratch;
  const lower_rule_t* rule = NULL;
  TPURT_RETURN_IF_ERROR(prepare_call(call, &scratch, &rule));
  if (try_share_copy(call)) return NULL;
  return rule->count_arg >= 0 ? run_counted(rule, call, false) : run_rule(rule, call, false);
}

tpurt_status_t engine_op_run_now_locked(tpurt_op_call_t* call) {
  engine_nested_begin();
  tpurt_status_t status = op_run_now(call);
  engine_nested_end();
  return status;
}

tpurt_status_t engine_op_replay_locked(const tpurt_op_call_t* recorded, tpurt_result_t* results,
                                       int32_t num_results) {
  tpurt_op_call_t call = *recorded;
  tpurt_result_t* fresh = tpurt_xcalloc((size_t)call.max_results + 1, sizeof(tpurt_result_t));
  call.results = fresh;
  call.num_results = 0;
  tpurt_status_t status = engine_op_run_now_locked(&call);
  for (int32_t k = 0; k < call.num_results && k < call.max_results; ++k) {
    tpurt_storage_t* s = fresh[k].storage;
    if (!status && s && k < num_results && results[k].storage && s->buffer) {
      pjrt_buffer_retain(s->buffer);
      storage_set_buffer_consume(results[k].storage, s->buffer);
    }
    tpurt_storage_release(s);
  }
  free(fresh);
  return status;
}

tpurt_status_t engine_view_materialize_locked(const tpurt_tensor_t* view, tpurt_storage_t** out_dense) {
  *out_dense = NULL;
  /* memory_format=torch.contiguous_format (0): clone's default keeps a
  ** channels-last view channels-last, and this copy must be row-major */
  tpurt_arg_t args[2] = {{.kind = TPURT_ARG_TENSOR, .u.tensor = *view}, {.kind = TPURT_ARG_INT, .u.i = 0}};
  tpurt_result_t result;
  tpurt_op_call_t call = {.name = "aten::clone",
                          .args = args,
                          .num_args = 2,
                          .device = view->storage->device,
                          .results = &result,
                          .max_results = 1};
  TPURT_RETURN_IF_ERROR(engine_op_run_now_locked(&call));
  *out_dense = result.storage;
  return NULL;
}

/* engine_op_run_locked; |may_unlock|: see run_rule. */
static TPURT_MUST_USE tpurt_status_t op_run(tpurt_op_call_t* call, bool may_unlock) {
  lower_rule_t scratch;
  const lower_rule_t* rule = NULL;
  TPURT_RETURN_IF_ERROR(prepare_call(call, &scratch, &rule));
  tpurt_eager_mode_t mode = tpurt_get_eager_mode();
  graph_t* g = graph_current();
  bool tracing = g && graph_is_tracing(g);
  if (tracing || mode == TPURT_MODE_DEFER_AND_FUSE || mode == TPURT_MODE_INTERNAL_DEFER_ALL) {
    if (rule->count_arg < 0) return record_op(rule, call, mode == TPURT_MODE_DEFER_AND_FUSE);
    if (tracing)
      return tpurt_status_create(
          TPURT_INVALID_ARGUMENT,
          "%s has a data-dependent output size, which a compiled graph cannot express; "
          "let it run eagerly (a graph break)",
          call->name);
  }
  if (g) TPURT_RETURN_IF_ERROR(graph_flush_locked(GRAPH_FLUSH_STRICT_OP));
  if (try_share_copy(call)) return NULL;
  tpurt_status_t status =
      rule->count_arg >= 0 ? run_counted(rule, call, may_unlock) : run_rule(rule, call, may_unlock);
  if (!status && mode == TPURT_MODE_LAUNCH_BLOCKING) {
    /* debug eager: wait, so an error is raised at the op that caused it */
    status = pjrt_synchronize(call->device);
  }
  return status;
}

tpurt_status_t engine_op_run_locked(tpurt_op_call_t* call) {
  engine_nested_begin();
  tpurt_status_t status = op_run(call, false);
  engine_nested_end();
  return status;
}

tpurt_status_t tpurt_op_run(tpurt_op_call_t* call) {
  TPURT_RETURN_IF_ERROR(tpurt_runtime_init());
  engine_lock();
  tpurt_status_t status = op_run(call, engine_may_unlock());
  engine_unlock();
  return status;
}

bool tpurt_op_supported(const char* name) {
  lower_rule_t scratch;
  return lower_find(name, &scratch) != NULL;
}

tpurt_status_t tpurt_synchronize(int device) {
  /* Queued launches are made first (their errors are reported here), and
  ** compiles still on the pool end: a traced program compiled and not yet
  ** run is work submitted too, and a caller that changes the settings
  ** compiles read (precompile's directory) does so after this. */
  queue_settle();
  engine_lock();
  tpurt_status_t status = graph_flush_locked(GRAPH_FLUSH_SYNCHRONIZE);
  engine_unlock();
  return status ? status : pjrt_synchronize(device);
}
