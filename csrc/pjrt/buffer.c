/* buffer.c: device buffers: upload, download, device-to-device copies,
** reference counts, and the memory counters. */
#include "pjrt_internal.h"

/* tpurt_dtype_t -> PJRT_Buffer_Type. */
static const int kToPjrtType[TPURT_DTYPE_COUNT] = {
    [TPURT_DTYPE_INVALID] = PJRTABI_TYPE_INVALID,
    [TPURT_DTYPE_BOOL] = PJRTABI_TYPE_PRED,
    [TPURT_DTYPE_U8] = PJRTABI_TYPE_U8,
    [TPURT_DTYPE_I8] = PJRTABI_TYPE_S8,
    [TPURT_DTYPE_I16] = PJRTABI_TYPE_S16,
    [TPURT_DTYPE_I32] = PJRTABI_TYPE_S32,
    [TPURT_DTYPE_I64] = PJRTABI_TYPE_S64,
    [TPURT_DTYPE_F16] = PJRTABI_TYPE_F16,
    [TPURT_DTYPE_BF16] = PJRTABI_TYPE_BF16,
    [TPURT_DTYPE_F32] = PJRTABI_TYPE_F32,
    [TPURT_DTYPE_F64] = PJRTABI_TYPE_F64,
    [TPURT_DTYPE_U16] = PJRTABI_TYPE_U16,
    [TPURT_DTYPE_U32] = PJRTABI_TYPE_U32,
    [TPURT_DTYPE_U64] = PJRTABI_TYPE_U64,
    [TPURT_DTYPE_F8E4M3FN] = PJRTABI_TYPE_F8E4M3FN,
    [TPURT_DTYPE_F8E5M2] = PJRTABI_TYPE_F8E5M2,
    [TPURT_DTYPE_F8E4M3FNUZ] = PJRTABI_TYPE_F8E4M3FNUZ,
    [TPURT_DTYPE_F8E5M2FNUZ] = PJRTABI_TYPE_F8E5M2FNUZ,
    [TPURT_DTYPE_C64] = PJRTABI_TYPE_C64,
    [TPURT_DTYPE_C128] = PJRTABI_TYPE_C128,
};

static tpurt_dtype_t from_pjrt_type(int type) {
  for (int d = 1; d < TPURT_DTYPE_COUNT; ++d) {
    if (kToPjrtType[d] == type) return (tpurt_dtype_t)d;
  }
  return TPURT_DTYPE_INVALID;
}

void pjrt_launch_retain(pjrt_launch_t* launch) {
  if (launch) tpurt_refcount_inc(&launch->refcount);
}

void pjrt_launch_release(pjrt_launch_t* launch) {
  if (!launch || !tpurt_refcount_dec_and_test(&launch->refcount)) return;
  free(launch->outputs);
  free(launch);
}

void pjrt_launch_failed_locked(pjrt_launch_t* launch) {
  pjrt_counters_t* c = &pjrt_g.counters;
  for (size_t i = 0; i < launch->num_outputs; ++i) {
    pjrt_buffer_t* b = launch->outputs[i];
    if (!b || b->uncounted) continue;
    c->bytes_in_use[b->device] -= b->nbytes;
    b->uncounted = true;
  }
}

/* Dense byte size of |rank| |dims| of |dtype|, checking for negative sizes
** and overflow. */
static TPURT_MUST_USE tpurt_status_t dense_size(tpurt_dtype_t dtype, int32_t rank, const int64_t* dims,
                                                size_t* out_nbytes) {
  if (rank < 0 || rank > TPURT_MAX_RANK) {
    return tpurt_status_create(TPURT_INVALID_ARGUMENT, "buffer rank must be 0..%d, got %d", TPURT_MAX_RANK,
                               (int)rank);
  }
  size_t n = tpurt_dtype_size(dtype);
  for (int32_t i = 0; i < rank; ++i) {
    if (dims[i] < 0) {
      return tpurt_status_create(TPURT_INVALID_ARGUMENT, "buffer dimension %d must be >= 0, got %lld", (int)i,
                                 (long long)dims[i]);
    }
    if (dims[i] != 0 && n > SIZE_MAX / (size_t)dims[i]) {
      return tpurt_status_create(TPURT_RESOURCE_EXHAUSTED,
                                 "buffer of %s with dimension %d = %lld overflows size_t",
                                 tpurt_dtype_name(dtype), (int)i, (long long)dims[i]);
    }
    n *= (size_t)dims[i];
  }
  *out_nbytes = n;
  return NULL;
}

static pjrt_buffer_t* new_buffer(pjrt_abi_buffer_t* raw, int device, tpurt_dtype_t dtype, int32_t rank,
                                 const int64_t* dims, size_t nbytes) {
  pjrt_buffer_t* b = tpurt_xcalloc(1, sizeof(*b));
  b->raw = raw;
  b->device = device;
  b->dtype = dtype;
  b->rank = rank;
  if (rank) memcpy(b->dims, dims, sizeof(int64_t) * (size_t)rank);
  b->nbytes = nbytes;
  tpurt_refcount_init(&b->refcount);
  return b;
}

void pjrt_count_buffer_locked(const pjrt_buffer_t* buffer) {
  pjrt_counters_t* c = &pjrt_g.counters;
  c->live_buffers++;
  uint64_t in_use = c->bytes_in_use[buffer->device] += buffer->nbytes;
  if (in_use > c->peak_bytes_in_use[buffer->device]) c->peak_bytes_in_use[buffer->device] = in_use;
}

void pjrt_raw_buffer_free_locked(pjrt_abi_buffer_t* raw) {
  PJRT_ARGS(pjrt_abi_buffer_destroy_args_t, a);
  a.buffer = raw;
  tpurt_status_ignore(PJRT_CALL(PJRTABI_BUFFER_DESTROY, "Buffer_Destroy", &a));
}

tpurt_status_t pjrt_wrap_buffer_consume_locked(pjrt_abi_buffer_t* raw, int device, pjrt_launch_t* launch,
                                               pjrt_buffer_t** out_buffer) {
  *out_buffer = NULL;
  PJRT_ARGS(pjrt_abi_buffer_element_type_args_t, t);
  t.buffer = raw;
  tpurt_status_t status = PJRT_CALL(PJRTABI_BUFFER_ELEMENT_TYPE, "Buffer_ElementType", &t);
  PJRT_ARGS(pjrt_abi_buffer_dimensions_args_t, d);
  d.buffer = raw;
  if (!status) status = PJRT_CALL(PJRTABI_BUFFER_DIMENSIONS, "Buffer_Dimensions", &d);
  tpurt_dtype_t dtype = from_pjrt_type(t.type);
  if (!status && dtype == TPURT_DTYPE_INVALID) {
    status = tpurt_status_create(TPURT_UNIMPLEMENTED,
                                 "a program produced a buffer of PJRT element type %d, which "
                                 "torch_tpu does not support",
                                 t.type);
  }
  if (!status && d.num_dims > TPURT_MAX_RANK) {
    status =
        tpurt_status_create(TPURT_UNIMPLEMENTED, "a program produced a buffer of rank %zu; the maximum is %d",
                            d.num_dims, TPURT_MAX_RANK);
  }
  size_t nbytes = 0;
  if (!status) status = dense_size(dtype, (int32_t)d.num_dims, d.dims, &nbytes);
  if (status) {
    pjrt_raw_buffer_free_locked(raw);
    return status;
  }
  pjrt_buffer_t* b = new_buffer(raw, device, dtype, (int32_t)d.num_dims, d.dims, nbytes);
  if (launch) {
    pjrt_launch_retain(launch);
    b->launch = launch;
  }
  pjrt_count_buffer_locked(b);
  *out_buffer = b;
  return NULL;
}

tpurt_status_t pjrt_buffer_from_host(int device, tpurt_dtype_t dtype, int32_t rank, const int64_t* dims,
                                     const void* data, pjrt_buffer_t** out_buffer) {
  *out_buffer = NULL;
  TPURT_RETURN_IF_ERROR(pjrt_init());
  TPURT_RETURN_IF_ERROR(pjrt_check_device(device));
  if (dtype <= TPURT_DTYPE_INVALID || dtype >= TPURT_DTYPE_COUNT) {
    return tpurt_status_create(TPURT_INVALID_ARGUMENT, "cannot make a device buffer of dtype %d", (int)dtype);
  }
  size_t nbytes;
  TPURT_RETURN_IF_ERROR(dense_size(dtype, rank, dims, &nbytes));
  static const char kEmpty[8];
  if (nbytes == 0 || !data) data = kEmpty; /* the plugin wants a pointer even for no bytes */
  if (nbytes && data == kEmpty) {
    return tpurt_status_create(TPURT_INVALID_ARGUMENT, "NULL host data for a buffer of %zu bytes", nbytes);
  }
  PJRT_ARGS(pjrt_abi_buffer_from_host_args_t, a);
  a.client = pjrt_g.client;
  a.data = data;
  a.type = kToPjrtType[dtype];
  a.dims = dims;
  a.num_dims = (size_t)rank;
  a.host_buffer_semantics = PJRTABI_HOST_BUFFER_IMMUTABLE_ONLY_DURING_CALL;
  a.device = pjrt_g.devices[device];
  pthread_mutex_lock(&pjrt_g.lock);
  tpurt_status_t status =
      PJRT_CALL(PJRTABI_CLIENT_BUFFER_FROM_HOST_BUFFER, "Client_BufferFromHostBuffer", &a);
  pjrt_buffer_t* b = NULL;
  if (!status) {
    b = new_buffer(a.buffer, device, dtype, rank, dims, nbytes);
    pjrt_count_buffer_locked(b);
    pjrt_g.counters.bytes_to_device += nbytes;
  }
  pthread_mutex_unlock(&pjrt_g.lock);
  /* kImmutableOnlyDuringCall: the host bytes were copied before the call
  ** returned, so the event is (or is about to be) ready; its error, if any,
  ** is the transfer's. */
  tpurt_status_t done = pjrt_api_event_await(&pjrt_g.api, a.done_with_host_buffer);
  if (status) return tpurt_status_annotate_consume(status, "uploading a buffer to the device");
  if (done) {
    pjrt_buffer_release(b);
    return tpurt_status_annotate_consume(done, "uploading a buffer to the device");
  }
  *out_buffer = b;
  return NULL;
}

/*===--- futures ---===*/

/* Futures change state once (pending -> fulfilled or failed); waiters of
** any future sleep on one condition, which every change wakes. Reading
** |pending| without the lock is the fast path: it only ever goes from
** true to false, and a reader that sees false then reads raw and failure,
** written before it (release/acquire). */
static pthread_mutex_t g_future_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_future_changed = PTHREAD_COND_INITIALIZER;

pjrt_buffer_t* pjrt_buffer_future_create(int device, tpurt_dtype_t dtype, int32_t rank, const int64_t* dims) {
  size_t nbytes = tpurt_dtype_size(dtype);
  for (int32_t i = 0; i < rank; ++i) nbytes *= (size_t)dims[i];
  pjrt_buffer_t* b = new_buffer(NULL, device, dtype, rank, dims, nbytes);
  b->pending = true;
  return b;
}

bool pjrt_buffer_is_pending(const pjrt_buffer_t* buffer) {
  return buffer && __atomic_load_n(&buffer->pending, __ATOMIC_ACQUIRE);
}

static void settle_future(pjrt_buffer_t* future, pjrt_abi_buffer_t* raw, pjrt_launch_t* launch,
                          bool uncounted, tpurt_status_t failure) {
  pthread_mutex_lock(&g_future_lock);
  future->raw = raw;
  future->launch = launch;
  future->uncounted = uncounted;
  future->failure = failure;
  __atomic_store_n(&future->pending, false, __ATOMIC_RELEASE);
  pthread_cond_broadcast(&g_future_changed);
  pthread_mutex_unlock(&g_future_lock);
}

void pjrt_buffer_fulfil_consume(pjrt_buffer_t* future, pjrt_buffer_t* value) {
  bool same = value->dtype == future->dtype && value->rank == future->rank && !value->sharding &&
              value->device == future->device &&
              memcmp(value->dims, future->dims, sizeof(int64_t) * (size_t)value->rank) == 0;
  if (!same) {
    tpurt_status_t why = tpurt_status_create(TPURT_INTERNAL,
                                             "a queued program produced a %s value of rank %d where its "
                                             "plan said %s of rank %d",
                                             tpurt_dtype_name(value->dtype), (int)value->rank,
                                             tpurt_dtype_name(future->dtype), (int)future->rank);
    pjrt_buffer_future_fail(future, why);
    tpurt_status_free(why);
    pjrt_buffer_release(value);
    return;
  }
  /* The future takes over the value's device buffer, its launch and its
  ** place in the memory counters; the launch's list of outputs now names
  ** the future. */
  pthread_mutex_lock(&pjrt_g.lock);
  pjrt_launch_t* l = value->launch;
  for (size_t i = 0; l && i < l->num_outputs; ++i)
    if (l->outputs[i] == value) l->outputs[i] = future;
  pthread_mutex_unlock(&pjrt_g.lock);
  settle_future(future, value->raw, value->launch, value->uncounted, NULL);
  free(value);
}

void pjrt_buffer_future_fail(pjrt_buffer_t* future, tpurt_borrowed_status_t cause) {
  settle_future(future, NULL, NULL, true, tpurt_status_clone(cause));
}

tpurt_status_t pjrt_buffer_ready(pjrt_buffer_t* buffer) {
  if (!buffer) return NULL;
  if (__atomic_load_n(&buffer->pending, __ATOMIC_ACQUIRE)) {
    pthread_mutex_lock(&g_future_lock);
    while (buffer->pending) pthread_cond_wait(&g_future_changed, &g_future_lock);
    pthread_mutex_unlock(&g_future_lock);
  }
  return buffer->failure ? tpurt_status_clone(buffer->failure) : NULL;
}

void pjrt_buffer_retain(pjrt_buffer_t* buffer) {
  if (buffer) tpurt_refcount_inc(&buffer->refcount);
}

void pjrt_buffer_release(pjrt_buffer_t* buffer) {
  if (!buffer || !tpurt_refcount_dec_and_test(&buffer->refcount)) return;
  if (buffer->sharding) { /* not counted itself: its shards are */
    for (int32_t p = 0; p < buffer->sharding->num_devices; ++p) pjrt_buffer_release(buffer->shards[p]);
    free(buffer->shards);
    free(buffer->sharding);
    free(buffer);
    return;
  }
  tpurt_status_free(buffer->failure);
  if (!buffer->raw) { /* a future never fulfilled: it was never counted */
    free(buffer);
    return;
  }
  pthread_mutex_lock(&pjrt_g.lock);
  pjrt_raw_buffer_free_locked(buffer->raw);
  pjrt_counters_t* c = &pjrt_g.counters;
  c->live_buffers--;
  if (!buffer->uncounted) c->bytes_in_use[buffer->device] -= buffer->nbytes;
  pjrt_launch_t* l = buffer->launch;
  for (size_t i = 0; l && i < l->num_outputs; ++i)
    if (l->outputs[i] == buffer) l->outputs[i] = NULL;
  pthread_mutex_unlock(&pjrt_g.lock);
  pjrt_launch_release(buffer->launch);
  free(buffer);
}

/* Names the op that produced |buffer| in |status| (consumed and returned). */
static TPURT_MUST_USE tpurt_status_t blame_consume(pjrt_buffer_t* buffer, tpurt_status_t status) {
  return buffer->launch ? tpurt_status_annotate_consume(status, buffer->launch->op_name) : status;
}

tpurt_status_t pjrt_buffer_await(pjrt_buffer_t* buffer) {
  if (buffer->sharding) {
    for (int32_t p = 0; p < buffer->sharding->num_devices; ++p)
      TPURT_RETURN_IF_ERROR(pjrt_buffer_await(buffer->shards[p]));
    return NULL;
  }
  TPURT_RETURN_IF_ERROR(pjrt_buffer_ready(buffer));
  PJRT_ARGS(pjrt_abi_buffer_ready_event_args_t, a);
  a.buffer = buffer->raw;
  pthread_mutex_lock(&pjrt_g.lock);
  tpurt_status_t status = PJRT_CALL(PJRTABI_BUFFER_READY_EVENT, "Buffer_ReadyEvent", &a);
  pthread_mutex_unlock(&pjrt_g.lock);
  if (status) return status;
  return blame_consume(buffer, pjrt_api_event_await(&pjrt_g.api, a.event));
}

tpurt_status_t pjrt_buffer_to_host(pjrt_buffer_t* buffer, void* dst, size_t dst_size) {
  if (dst_size < buffer->nbytes) {
    return tpurt_status_create(
        TPURT_INVALID_ARGUMENT,
        "reading a %s buffer of %zu bytes to the host needs %zu bytes of space, got %zu",
        tpurt_dtype_name(buffer->dtype), buffer->nbytes, buffer->nbytes, dst_size);
  }
  if (buffer->sharding) return pjrt_buffer_gather_to_host(buffer, dst, dst_size);
  TPURT_RETURN_IF_ERROR(pjrt_buffer_ready(buffer));
  /* dst == NULL would ask the plugin for the size instead of copying. */
  if (buffer->nbytes == 0) return pjrt_buffer_await(buffer);
  PJRT_ARGS(pjrt_abi_buffer_to_host_args_t, a);
  a.src = buffer->raw;
  a.dst = dst;
  a.dst_size = buffer->nbytes;
  pthread_mutex_lock(&pjrt_g.lock);
  tpurt_status_t status = PJRT_CALL(PJRTABI_BUFFER_TO_HOST_BUFFER, "Buffer_ToHostBuffer", &a);
  if (!status) pjrt_g.counters.bytes_from_device += buffer->nbytes;
  pthread_mutex_unlock(&pjrt_g.lock);
  if (!status) status = pjrt_api_event_await(&pjrt_g.api, a.event);
  return blame_consume(buffer, status);
}

tpurt_status_t pjrt_buffer_copy_to_device(pjrt_buffer_t* buffer, int device, pjrt_buffer_t** out_buffer) {
  *out_buffer = NULL;
  TPURT_RETURN_IF_ERROR(pjrt_check_device(device));
  if (buffer->sharding) { /* gathered through the host onto one device */
    void* host = tpurt_xmalloc(buffer->nbytes ? buffer->nbytes : 1);
    tpurt_status_t status = pjrt_buffer_gather_to_host(buffer, host, buffer->nbytes);
    if (!status)
      status = pjrt_buffer_from_host(device, buffer->dtype, buffer->rank, buffer->dims, host, out_buffer);
    free(host);
    return status;
  }
  if (device == buffer->device) { /* buffers are immutable: share it (a future too) */
    pjrt_buffer_retain(buffer);
    *out_buffer = buffer;
    return NULL;
  }
  TPURT_RETURN_IF_ERROR(pjrt_buffer_ready(buffer));
  PJRT_ARGS(pjrt_abi_buffer_copy_to_device_args_t, a);
  a.buffer = buffer->raw;
  a.dst_device = pjrt_g.devices[device];
  pthread_mutex_lock(&pjrt_g.lock);
  tpurt_status_t status = PJRT_CALL(PJRTABI_BUFFER_COPY_TO_DEVICE, "Buffer_CopyToDevice", &a);
  pjrt_buffer_t* b = NULL;
  if (!status) {
    b = new_buffer(a.dst_buffer, device, buffer->dtype, buffer->rank, buffer->dims, buffer->nbytes);
    pjrt_count_buffer_locked(b);
  }
  pthread_mutex_unlock(&pjrt_g.lock);
  if (status) {
    return tpurt_status_annotate_consume(blame_consume(buffer, status), "copying a buffer between devices");
  }
  if (buffer->launch) {
    pjrt_launch_retain(buffer->launch);
    b->launch = buffer->launch;
  }
  *out_buffer = b;
  return NULL;
}
