/* storage.c: storage objects and host/device transfers through views.
**
** A storage never changes identity: PyTorch's DataPtr context points at it
** for its whole life. Its value (an immutable PJRT buffer) is swapped on
** every write, which is how in-place ops and aliases work.
*/
#include <stdio.h>

#include "../base/base.h"
#include "engine.h"

static pthread_mutex_t g_engine_mutex = PTHREAD_MUTEX_INITIALIZER;
void engine_lock(void) { pthread_mutex_lock(&g_engine_mutex); }
void engine_unlock(void) { pthread_mutex_unlock(&g_engine_mutex); }

/* Signalled when a graph that was compiling with the lock released ran. */
static pthread_cond_t g_engine_cond = PTHREAD_COND_INITIALIZER;
void engine_wait(void) { pthread_cond_wait(&g_engine_cond, &g_engine_mutex); }
void engine_broadcast(void) { pthread_cond_broadcast(&g_engine_cond); }

/* How deep this thread is in the engine's own nested ops. */
static _Thread_local int t_nested TPURT_GUARDED_BY(thread);
void engine_nested_begin(void) { ++t_nested; }
void engine_nested_end(void) { --t_nested; }
bool engine_may_unlock(void) { return t_nested == 0; }

/* Fake addresses start high and only grow, so ranges never overlap. They
** are never dereferenced. */
static uint64_t g_next_address TPURT_GUARDED_BY(atomic) = 0x100000000000ULL;

tpurt_status_t tpurt_storage_create(int device, size_t nbytes, tpurt_storage_t** out_storage) {
  *out_storage = NULL;
  TPURT_RETURN_IF_ERROR(tpurt_runtime_init());
  if (device < 0 || device >= pjrt_device_count())
    return tpurt_status_create(TPURT_INVALID_ARGUMENT,
                               "device tpu:%d does not exist (%d device(s) available)", device,
                               pjrt_device_count());
  tpurt_storage_t* s = tpurt_xcalloc(1, sizeof(*s));
  tpurt_refcount_init(&s->refcount);
  s->device = device;
  s->nbytes = nbytes;
  uint64_t span = ((uint64_t)nbytes + 4096) & ~(uint64_t)4095;
  s->address = (uintptr_t)__atomic_fetch_add(&g_next_address, span, __ATOMIC_RELAXED);
  atomic_fetch_add_explicit(&engine_counters.live_storages, 1, memory_order_relaxed);
  *out_storage = s;
  return NULL;
}

/* Each device's memory limit, read once (it does not change): 0 not read
** yet, -1 unknown (the plugin reports none), else the limit + 1. */
#define LIMIT_SLOTS 64 /* the client's most devices (pjrt_internal.h) */
static int64_t g_memory_limit[LIMIT_SLOTS] TPURT_GUARDED_BY(atomic);

static int64_t device_memory_limit(int device) {
  int64_t cached = __atomic_load_n(&g_memory_limit[device], __ATOMIC_ACQUIRE);
  if (cached == 0) {
    tpurt_device_memory_t memory;
    /* A plugin whose memory stats fail has no known limit: nothing to check
    ** against, and an allocation must not fail for it. */
    tpurt_status_t status = tpurt_device_memory(device, &memory);
    cached = !status && memory.bytes_limit >= 0 ? memory.bytes_limit + 1 : -1;
    tpurt_status_ignore(status);
    __atomic_store_n(&g_memory_limit[device], cached, __ATOMIC_RELEASE);
  }
  return cached > 0 ? cached - 1 : -1;
}

tpurt_status_t storage_check_fits(int device, size_t nbytes) {
  if (device >= 0 && device < pjrt_device_count() && device < LIMIT_SLOTS) {
    int64_t limit = device_memory_limit(device);
    if (limit >= 0 && (uint64_t)nbytes > (uint64_t)limit) {
      return tpurt_status_create(TPURT_RESOURCE_EXHAUSTED,
                                 "cannot allocate %.2f GiB on tpu:%d: the device has %.2f GiB in all",
                                 nbytes / 1073741824.0, device, limit / 1073741824.0);
    }
  }
  return NULL;
}

tpurt_status_t tpurt_storage_create_checked(int device, size_t nbytes, tpurt_storage_t** out_storage) {
  *out_storage = NULL;
  TPURT_RETURN_IF_ERROR(tpurt_runtime_init());
  TPURT_RETURN_IF_ERROR(storage_check_fits(device, nbytes));
  return tpurt_storage_create(device, nbytes, out_storage);
}

void tpurt_storage_retain(tpurt_storage_t* storage) {
  if (storage) tpurt_refcount_inc(&storage->refcount);
}

void tpurt_storage_release(tpurt_storage_t* storage) {
  if (!storage) return;
  if (!tpurt_refcount_dec_and_test(&storage->refcount)) return;
  pjrt_buffer_release(storage->buffer);
  tpurt_status_free(storage->poison);
  atomic_fetch_sub_explicit(&engine_counters.live_storages, 1, memory_order_relaxed);
  free(storage);
}

size_t tpurt_storage_nbytes(const tpurt_storage_t* storage) { return storage->nbytes; }
int tpurt_storage_device(const tpurt_storage_t* storage) { return storage->device; }
void* tpurt_storage_address(const tpurt_storage_t* storage) { return (void*)storage->address; }

void storage_set_buffer_consume(tpurt_storage_t* storage, pjrt_buffer_t* buffer) {
  pjrt_buffer_t* old = storage->buffer;
  storage->buffer = buffer;
  pjrt_buffer_release(old);
  tpurt_status_free(storage->poison);
  storage->poison = NULL;
}

void storage_poison(tpurt_storage_t* storage, tpurt_borrowed_status_t cause, const char* origin) {
  tpurt_status_free(storage->poison);
  storage->poison = tpurt_status_create(
      tpurt_status_code(cause), "this tensor's value%s%s%s was lost when the program computing it failed: %s",
      origin ? " (" : "", origin ? origin : "", origin ? ")" : "", tpurt_status_message(cause));
}

void storage_poison_copy(tpurt_storage_t* storage, tpurt_borrowed_status_t poison) {
  tpurt_status_t copy = tpurt_status_clone(poison);
  tpurt_status_free(storage->poison);
  storage->poison = copy;
}

tpurt_status_t storage_check_poison(const tpurt_storage_t* storage) {
  return tpurt_status_clone(storage->poison);
}

tpurt_storage_t* storage_wrap_buffer_consume(pjrt_buffer_t* buffer) {
  tpurt_storage_t* s = NULL;
  tpurt_status_t st = tpurt_storage_create(buffer->device, buffer->nbytes, &s);
  if (st) { /* the runtime is up if a buffer exists; cannot fail */
    tpurt_status_ignore(st);
    abort();
  }
  s->buffer = buffer;
  return s;
}

/* Before a host read or a transfer of |storage|: run the pending graph of
** fused eager if it holds a newer value of that storage (else the buffer is
** current and the graph keeps growing). While tracing for torch.compile a
** value of the graph cannot be read: it does not exist yet. */
static TPURT_MUST_USE tpurt_status_t settle_pending(const tpurt_storage_t* storage, int reason) {
  graph_t* g = storage ? graph_holding(storage) : graph_current();
  if (!g) return NULL;
  if (graph_is_tracing(g)) {
    return tpurt_status_create(
        TPURT_FAILED_PRECONDITION,
        "a value computed inside a graph being compiled was read on the host (data-dependent "
        "control flow or .item()); move that code outside the compiled region");
  }
  return graph_flush_graph_locked(g, g == graph_current() ? reason : GRAPH_FLUSH_OTHER_THREAD);
}

/* A storage keeps its natural shape when resized: growing reads the old
** bytes as a flat prefix (see view_read), so a resize only drops the value
** when it shrinks below it. */
tpurt_status_t tpurt_storage_resize(tpurt_storage_t* storage, size_t nbytes) {
  if (nbytes == storage->nbytes) return NULL;
  engine_lock();
  tpurt_status_t status = settle_pending(storage, GRAPH_FLUSH_HOST_READ);
  pjrt_buffer_t* b = storage->buffer;
  if (!status && b && b->nbytes != nbytes) {
    /* Re-materialise as a flat buffer of the new size: read the old bytes
    ** back and upload (rare: PyTorch resizes out= tensors that were empty). */
    char* host = tpurt_xcalloc(1, nbytes ? nbytes : 1);
    size_t keep = b->nbytes < nbytes ? b->nbytes : nbytes;
    char* old = tpurt_xmalloc(b->nbytes ? b->nbytes : 1);
    status = pjrt_buffer_to_host(b, old, b->nbytes);
    if (!status) {
      memcpy(host, old, keep);
      size_t esize = tpurt_dtype_size(b->dtype);
      int64_t n = (int64_t)(nbytes / esize);
      pjrt_buffer_t* nb = NULL;
      if (nbytes % esize == 0) {
        status = pjrt_buffer_from_host(storage->device, b->dtype, 1, &n, host, &nb);
      } else {
        n = (int64_t)nbytes;
        status = pjrt_buffer_from_host(storage->device, TPURT_DTYPE_U8, 1, &n, host, &nb);
      }
      if (!status) storage_set_buffer_consume(storage, nb);
    }
    free(old);
    free(host);
  }
  if (!status) storage->nbytes = nbytes;
  engine_unlock();
  return status;
}

/*===--- views ---===*/

int64_t view_numel(const tpurt_tensor_t* v) {
  int64_t n = 1;
  for (int32_t i = 0; i < v->rank; ++i) n *= v->sizes[i];
  return n;
}

bool view_is_contiguous(const tpurt_tensor_t* v) {
  /* an empty tensor is contiguous whatever its strides, as in PyTorch
  ** (ones(4, 0) has strides (1, 1)) */
  for (int32_t i = 0; i < v->rank; ++i)
    if (v->sizes[i] == 0) return true;
  int64_t expected = 1;
  for (int32_t i = v->rank - 1; i >= 0; --i) {
    if (v->sizes[i] == 1) continue;
    if (v->strides[i] != expected) return false;
    expected *= v->sizes[i];
  }
  return true;
}

bool view_memory_order(const tpurt_tensor_t* v, int64_t* order) {
  if (v->rank < 2 || view_is_contiguous(v)) return false;
  for (int32_t i = 0; i < v->rank; ++i) order[i] = i;
  for (int32_t i = 1; i < v->rank; ++i) /* stable: larger stride first */
    for (int32_t j = i; j > 0 && v->strides[order[j]] > v->strides[order[j - 1]]; --j) {
      int64_t x = order[j];
      order[j] = order[j - 1];
      order[j - 1] = x;
    }
  int64_t expected = 1; /* dense in that order? */
  for (int32_t i = v->rank - 1; i >= 0; --i) {
    int64_t d = order[i];
    if (v->sizes[d] != 1 && v->strides[d] != expected) return false;
    expected *= v->sizes[d];
  }
  return true;
}

bool view_is_whole(const tpurt_tensor_t* v) {
  const tpurt_storage_t* s = v->storage;
  if (v->offset != 0 || !view_is_contiguous(v)) return false;
  if ((size_t)view_numel(v) * tpurt_dtype_size(v->dtype) != s->nbytes) return false;
  return !s->buffer || s->buffer->dtype == v->dtype;
}

/*===--- transfers ---===*/

static TPURT_MUST_USE tpurt_status_t check_host_size(const tpurt_tensor_t* view, size_t host_nbytes) {
  size_t need = (size_t)view_numel(view) * tpurt_dtype_size(view->dtype);
  if (need != host_nbytes)
    return tpurt_status_create(TPURT_INVALID_ARGUMENT, "host buffer has %zu bytes, the tensor needs %zu",
                               host_nbytes, need);
  size_t end = (size_t)(view->offset + 1) * tpurt_dtype_size(view->dtype);
  for (int32_t i = 0; i < view->rank; ++i)
    end += (size_t)((view->sizes[i] > 0 ? view->sizes[i] - 1 : 0) * view->strides[i]) *
           tpurt_dtype_size(view->dtype);
  if (view_numel(view) > 0 && end > view->storage->nbytes)
    return tpurt_status_create(TPURT_OUT_OF_RANGE, "view reaches byte %zu of a storage of %zu bytes", end,
                               view->storage->nbytes);
  return NULL;
}

/* A storage holding one new buffer made from host bytes. */
static TPURT_MUST_USE tpurt_status_t upload(int device, tpurt_dtype_t dtype, int32_t rank,
                                            const int64_t* sizes, const void* host, tpurt_storage_t** out) {
  pjrt_buffer_t* b = NULL;
  TPURT_RETURN_IF_ERROR(pjrt_buffer_from_host(device, dtype, rank, sizes, host, &b));
  *out = storage_wrap_buffer_consume(b);
  return NULL;
}

tpurt_status_t tpurt_tensor_write_host(const tpurt_tensor_t* view, const void* host, size_t host_nbytes) {
  TPURT_RETURN_IF_ERROR(check_host_size(view, host_nbytes));
  engine_lock();
  tpurt_status_t status = settle_pending(view->storage, GRAPH_FLUSH_HOST_READ);
  graph_t* g = graph_current();
  if (status) {
    /* reported below */
  } else if (view_is_whole(view) && !(g && graph_has_storage(g, view->storage))) {
    pjrt_buffer_t* b = NULL;
    const pjrt_buffer_t* old = view->storage->buffer;
    if (old && old->sharding && old->rank == view->rank &&
        memcmp(old->dims, view->sizes, sizeof(int64_t) * (size_t)view->rank) == 0) {
      /* a sharded tensor stays sharded the same way */
      status = pjrt_buffer_shard_from_host(old->sharding, view->dtype, view->rank, view->sizes, host, &b);
    } else {
      status = pjrt_buffer_from_host(view->storage->device, view->dtype, view->rank, view->sizes, host, &b);
    }
    if (!status) storage_set_buffer_consume(view->storage, b);
  } else {
    /* Upload densely, then copy through the view on the device. */
    tpurt_storage_t* tmp = NULL;
    status = upload(view->storage->device, view->dtype, view->rank, view->sizes, host, &tmp);
    if (!status) {
      tpurt_arg_t args[3] = {{.kind = TPURT_ARG_TENSOR, .is_write = true, .u.tensor = *view},
                             {.kind = TPURT_ARG_TENSOR, .u.tensor = *view},
                             {.kind = TPURT_ARG_BOOL, .u.i = 0}};
      args[1].u.tensor.storage = tmp;
      args[1].u.tensor.offset = 0;
      int64_t stride = 1;
      for (int32_t i = view->rank - 1; i >= 0; --i) {
        args[1].u.tensor.strides[i] = stride;
        stride *= view->sizes[i];
      }
      tpurt_op_call_t call = {
          .name = "aten::copy_", .args = args, .num_args = 3, .device = view->storage->device};
      status = engine_op_run_locked(&call);
      tpurt_storage_release(tmp);
    }
  }
  engine_unlock();
  return status;
}

/* Copies |b| to |host|: waits, or (|async|) queues the copy on the device. */
static TPURT_MUST_USE tpurt_status_t buffer_to_host(pjrt_buffer_t* b, void* host, size_t host_nbytes,
                                                    bool async) {
  return async ? pjrt_buffer_to_host_async(b, host, host_nbytes) : pjrt_buffer_to_host(b, host, host_nbytes);
}

static TPURT_MUST_USE tpurt_status_t read_host(const tpurt_tensor_t* view, void* host, size_t host_nbytes,
                                               bool async) {
  TPURT_RETURN_IF_ERROR(check_host_size(view, host_nbytes));
  if (host_nbytes == 0) return NULL;
  engine_lock();
  tpurt_status_t status = settle_pending(view->storage, GRAPH_FLUSH_HOST_READ);
  if (!status) status = storage_check_poison(view->storage);
  pjrt_buffer_t* b = view->storage->buffer;
  tpurt_storage_t* dense = NULL;
  if (status) {
    b = NULL; /* reported below */
  } else if (!b) {
    memset(host, 0, host_nbytes); /* never written: reads as zeros */
  } else if (b->dtype == view->dtype && view_is_contiguous(view) &&
             (size_t)view_numel(view) * tpurt_dtype_size(view->dtype) == b->nbytes && view->offset == 0) {
    pjrt_buffer_retain(b);
  } else {
    /* Any other view is made dense on the device first, in every mode. */
    status = engine_view_materialize_locked(view, &dense);
    b = status ? NULL : dense->buffer;
    pjrt_buffer_retain(b);
  }
  engine_unlock();
  if (!status && b) status = buffer_to_host(b, host, host_nbytes, async);
  if (b) pjrt_buffer_release(b);
  tpurt_storage_release(dense);
  return status;
}

tpurt_status_t tpurt_tensor_read_host(const tpurt_tensor_t* view, void* host, size_t host_nbytes) {
  return read_host(view, host, host_nbytes, false);
}

tpurt_status_t tpurt_tensor_read_host_async(const tpurt_tensor_t* view, void* host, size_t host_nbytes) {
  return read_host(view, host, host_nbytes, true);
}

tpurt_status_t tpurt_tensor_copy(const tpurt_tensor_t* dst, const tpurt_tensor_t* src) {
  if (dst->rank != src->rank)
    return tpurt_status_create(TPURT_INVALID_ARGUMENT, "copy: destination has rank %d, source rank %d",
                               dst->rank, src->rank);
  engine_lock();
  tpurt_status_t status = NULL;
  tpurt_tensor_t s = *src;
  tpurt_storage_t* moved = NULL;
  if (src->storage->device != dst->storage->device)
    status = settle_pending(src->storage, GRAPH_FLUSH_DEVICE_COPY);
  if (!status && src->storage->device != dst->storage->device) {
    /* Densify on the source device, then move the buffer across. */
    tpurt_storage_t* dense = NULL;
    status = engine_view_materialize_locked(src, &dense);
    if (!status) {
      pjrt_buffer_t* nb = NULL;
      status = pjrt_buffer_copy_to_device(dense->buffer, dst->storage->device, &nb);
      tpurt_storage_release(dense);
      if (!status) {
        moved = storage_wrap_buffer_consume(nb);
        s.storage = moved;
        s.offset = 0;
        int64_t stride = 1;
        for (int32_t i = s.rank - 1; i >= 0; --i) {
          s.strides[i] = stride;
          stride *= s.sizes[i];
        }
      }
    }
  }
  if (!status) {
    tpurt_arg_t args[3] = {{.kind = TPURT_ARG_TENSOR, .is_write = true, .u.tensor = *dst},
                           {.kind = TPURT_ARG_TENSOR, .u.tensor = s},
                           {.kind = TPURT_ARG_BOOL, .u.i = 0}};
    tpurt_op_call_t call = {
        .name = "aten::copy_", .args = args, .num_args = 3, .device = dst->storage->device};
    status = engine_op_run_locked(&call);
  }
  tpurt_storage_release(moved);
  engine_unlock();
  return status;
}

int32_t tpurt_storage_num_shards(const tpurt_storage_t* storage) {
  engine_lock();
  const pjrt_buffer_t* b = storage->buffer;
  int32_t n = b && b->sharding ? b->sharding->num_devices : 0;
  engine_unlock();
  return n;
}

tpurt_status_t tpurt_tensor_shard(const tpurt_tensor_t* view, const tpurt_sharding_spec_t* spec) {
  if (!view_is_whole(view))
    return tpurt_status_create(TPURT_INVALID_ARGUMENT,
                               "only a whole tensor can be sharded, not a view of part of its storage");
  if (spec->num_devices < 1 || spec->num_devices > 64 || spec->mesh_rank < 1 ||
      spec->mesh_rank > PJRT_MAX_MESH_RANK)
    return tpurt_status_create(TPURT_INVALID_ARGUMENT, "a mesh has 1 to 64 devices and 1 to %d axes",
                               PJRT_MAX_MESH_RANK);
  pjrt_sharding_t sh = {.num_devices = spec->num_devices, .mesh_rank = spec->mesh_rank, .rank = view->rank};
  memcpy(sh.devices, spec->devices, sizeof(int) * (size_t)spec->num_devices);
  memcpy(sh.mesh_shape, spec->mesh_shape, sizeof(int64_t) * (size_t)spec->mesh_rank);
  memset(sh.dim_axis, -1, sizeof(sh.dim_axis));
  if (view->rank) memcpy(sh.dim_axis, spec->dim_axis, (size_t)view->rank);
  TPURT_RETURN_IF_ERROR(pjrt_init());
  TPURT_RETURN_IF_ERROR(pjrt_sharding_check(&sh, view->rank, view->sizes));
  const size_t nbytes = (size_t)view_numel(view) * tpurt_dtype_size(view->dtype);
  char* host = tpurt_xcalloc(nbytes ? nbytes : 1, 1);
  engine_lock();
  tpurt_status_t status = settle_pending(view->storage, GRAPH_FLUSH_HOST_READ);
  if (!status) status = storage_check_poison(view->storage);
  pjrt_buffer_t* old = status ? NULL : view->storage->buffer;
  if (old) pjrt_buffer_retain(old);
  engine_unlock();
  /* Through the host: a reshard of a sharded value gathers it first. */
  if (!status && old) status = pjrt_buffer_to_host(old, host, nbytes);
  pjrt_buffer_release(old);
  pjrt_buffer_t* b = NULL;
  if (!status) status = pjrt_buffer_shard_from_host(&sh, view->dtype, view->rank, view->sizes, host, &b);
  free(host);
  if (!status) {
    engine_lock();
    storage_set_buffer_consume(view->storage, b);
    engine_unlock();
  }
  return status;
}
