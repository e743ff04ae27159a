/* sharding.c: sharded buffers: one logical array of a global shape held as
** one PJRT buffer per mesh device (that device's shard), and the HLO
** sharding text that describes the layout to XLA's SPMD partitioner. */
#include <stdio.h>

#include "pjrt_internal.h"

/* The mesh coordinate of partition |p| along |axis| (row-major mesh). */
static int64_t mesh_coordinate(const pjrt_sharding_t* sh, int32_t p, int32_t axis) {
  int64_t rest = p;
  for (int32_t a = sh->mesh_rank - 1; a > axis; --a) rest /= sh->mesh_shape[a];
  return rest % sh->mesh_shape[axis];
}

tpurt_status_t pjrt_sharding_check(const pjrt_sharding_t* sh, int32_t rank, const int64_t* dims) {
  TPURT_RETURN_IF_ERROR(pjrt_sharding_check_layout(sh, rank, dims));
  for (int32_t i = 0; i < sh->num_devices; ++i) TPURT_RETURN_IF_ERROR(pjrt_check_device(sh->devices[i]));
  return NULL;
}

tpurt_status_t pjrt_sharding_check_layout(const pjrt_sharding_t* sh, int32_t rank, const int64_t* dims) {
  int64_t n = 1;
  if (sh->mesh_rank >= 1 && sh->mesh_rank <= PJRT_MAX_MESH_RANK)
    for (int32_t a = 0; a < sh->mesh_rank; ++a) n *= sh->mesh_shape[a];
  if (sh->mesh_rank < 1 || sh->mesh_rank > PJRT_MAX_MESH_RANK || n != sh->num_devices || n < 1 ||
      n > PJRT_MAX_DEVICES)
    return tpurt_status_create(TPURT_INVALID_ARGUMENT, "a mesh of shape product %lld over %d devices",
                               (long long)n, sh->num_devices);
  if (rank != sh->rank)
    return tpurt_status_create(TPURT_INVALID_ARGUMENT, "the partition spec has %d entries for a %d-d tensor",
                               sh->rank, rank);
  bool used[PJRT_MAX_MESH_RANK] = {false};
  for (int32_t d = 0; d < rank; ++d) {
    int32_t a = sh->dim_axis[d];
    if (a < 0) continue;
    if (a >= sh->mesh_rank || used[a])
      return tpurt_status_create(TPURT_INVALID_ARGUMENT, "dim %d names mesh axis %d, which %s", d, a,
                                 a >= sh->mesh_rank ? "does not exist" : "another dim already uses");
    used[a] = true;
    if (dims[d] % sh->mesh_shape[a] != 0)
      return tpurt_status_create(TPURT_INVALID_ARGUMENT,
                                 "dim %d of size %lld is not divisible by mesh axis %d of size %lld", d,
                                 (long long)dims[d], a, (long long)sh->mesh_shape[a]);
  }
  return NULL;
}

bool pjrt_sharding_is_replicated(const pjrt_sharding_t* sh) {
  for (int32_t d = 0; d < sh->rank; ++d)
    if (sh->dim_axis[d] >= 0) return false;
  return true;
}

bool pjrt_sharding_same_mesh(const pjrt_sharding_t* a, const pjrt_sharding_t* b) {
  if (a->num_devices != b->num_devices || a->mesh_rank != b->mesh_rank) return false;
  for (int32_t i = 0; i < a->mesh_rank; ++i)
    if (a->mesh_shape[i] != b->mesh_shape[i]) return false;
  for (int32_t i = 0; i < a->num_devices; ++i)
    if (a->devices[i] != b->devices[i]) return false;
  return true;
}

uint64_t pjrt_sharding_hash(const pjrt_sharding_t* sh) {
  uint64_t h = tpurt_hash_u64(TPURT_HASH_SEED, (uint64_t)sh->num_devices);
  for (int32_t i = 0; i < sh->num_devices; ++i) h = tpurt_hash_u64(h, (uint64_t)sh->devices[i]);
  for (int32_t a = 0; a < sh->mesh_rank; ++a) h = tpurt_hash_u64(h, (uint64_t)sh->mesh_shape[a]);
  for (int32_t d = 0; d < sh->rank; ++d) h = tpurt_hash_u64(h, (uint64_t)(sh->dim_axis[d] + 1));
  return h;
}

/* Shardy names mesh axes; ours are positional, so axis a is "a<a>". */
void pjrt_sharding_sdy_mesh(const pjrt_sharding_t* mesh, tpurt_strbuf_t* out) {
  tpurt_strbuf_puts(out, "sdy.mesh @mesh = <[");
  for (int32_t a = 0; a < mesh->mesh_rank; ++a)
    tpurt_strbuf_printf(out, "%s\"a%d\"=%lld", a ? ", " : "", (int)a, (long long)mesh->mesh_shape[a]);
  tpurt_strbuf_puts(out, "]>");
}

/* Every dim closed ({} or {"a<k>"}): the partitioner may not reshard a
** program's arguments or results, which must be laid out as the buffers are. */
void pjrt_sharding_sdy_text(const pjrt_sharding_t* sh, int32_t rank, tpurt_strbuf_t* out) {
  tpurt_strbuf_puts(out, "#sdy.sharding<@mesh, [");
  for (int32_t d = 0; d < rank; ++d) {
    int32_t a = sh ? sh->dim_axis[d] : -1;
    if (a >= 0)
      tpurt_strbuf_printf(out, "%s{\"a%d\"}", d ? ", " : "", (int)a);
    else
      tpurt_strbuf_puts(out, d ? ", {}" : "{}");
  }
  tpurt_strbuf_puts(out, "]>");
}

void pjrt_sharding_shard_dims(const pjrt_sharding_t* sh, int32_t p, const int64_t* dims, int64_t* out_start,
                              int64_t* out_dims) {
  for (int32_t d = 0; d < sh->rank; ++d) {
    int32_t a = sh->dim_axis[d];
    int64_t parts = a >= 0 ? sh->mesh_shape[a] : 1;
    out_dims[d] = dims[d] / parts;
    out_start[d] = a >= 0 ? mesh_coordinate(sh, p, a) * out_dims[d] : 0;
  }
}

/* Copies the block [start, start+block) of a dense row-major |full| array
** to or from a dense |shard| array. */
static void copy_block(char* full, char* shard, int32_t rank, const int64_t* dims, const int64_t* start,
                       const int64_t* block, size_t elem, bool to_shard) {
  if (rank == 0) {
    if (to_shard)
      memcpy(shard, full, elem);
    else
      memcpy(full, shard, elem);
    return;
  }
  size_t inner = elem; /* bytes of one step along dim 0 in |full| */
  size_t shard_inner = elem;
  for (int32_t d = 1; d < rank; ++d) {
    inner *= (size_t)dims[d];
    shard_inner *= (size_t)block[d];
  }
  for (int64_t i = 0; i < block[0]; ++i) {
    char* f = full + (size_t)(start[0] + i) * inner;
    char* s = shard + (size_t)i * shard_inner;
    copy_block(f, s, rank - 1, dims + 1, start + 1, block + 1, elem, to_shard);
  }
}

static pjrt_sharding_t* sharding_copy(const pjrt_sharding_t* sh) {
  pjrt_sharding_t* c = tpurt_xmalloc(sizeof(*c));
  *c = *sh;
  return c;
}

pjrt_buffer_t* pjrt_buffer_sharded_create_consume(const pjrt_sharding_t* sharding, tpurt_dtype_t dtype,
                                                  int32_t rank, const int64_t* dims, pjrt_buffer_t** shards) {
  pjrt_buffer_t* b = tpurt_xcalloc(1, sizeof(*b));
  b->device = sharding->devices[0];
  b->dtype = dtype;
  b->rank = rank;
  if (rank) memcpy(b->dims, dims, sizeof(int64_t) * (size_t)rank);
  size_t n = tpurt_dtype_size(dtype);
  for (int32_t d = 0; d < rank; ++d) n *= (size_t)dims[d];
  b->nbytes = n;
  tpurt_refcount_init(&b->refcount);
  b->sharding = sharding_copy(sharding);
  b->shards = tpurt_xmalloc(sizeof(pjrt_buffer_t*) * (size_t)sharding->num_devices);
  memcpy(b->shards, shards, sizeof(pjrt_buffer_t*) * (size_t)sharding->num_devices);
  return b;
}

tpurt_status_t pjrt_buffer_shard_from_host(const pjrt_sharding_t* sharding, tpurt_dtype_t dtype, int32_t rank,
                                           const int64_t* dims, const void* data,
                                           pjrt_buffer_t** out_buffer) {
  *out_buffer = NULL;
  TPURT_RETURN_IF_ERROR(pjrt_init());
  TPURT_RETURN_IF_ERROR(pjrt_sharding_check(sharding, rank, dims));
  const size_t elem = tpurt_dtype_size(dtype);
  pjrt_buffer_t* shards[PJRT_MAX_DEVICES] = {NULL};
  tpurt_status_t status = NULL;
  for (int32_t p = 0; p < sharding->num_devices && !status; ++p) {
    int64_t start[TPURT_MAX_RANK], block[TPURT_MAX_RANK];
    pjrt_sharding_shard_dims(sharding, p, dims, start, block);
    size_t n = elem;
    for (int32_t d = 0; d < rank; ++d) n *= (size_t)block[d];
    char* host = tpurt_xmalloc(n ? n : 1);
    if (n) copy_block((char*)data, host, rank, dims, start, block, elem, true);
    status = pjrt_buffer_from_host(sharding->devices[p], dtype, rank, block, host, &shards[p]);
    free(host);
  }
  if (status) {
    for (int32_t p = 0; p < sharding->num_devices; ++p) pjrt_buffer_release(shards[p]);
    return tpurt_status_annotate_consume(status, "sharding a tensor over a mesh");
  }
  *out_buffer = pjrt_buffer_sharded_create_consume(sharding, dtype, rank, dims, shards);
  return NULL;
}

tpurt_status_t pjrt_buffer_gather_to_host(pjrt_buffer_t* buffer, void* dst, size_t dst_size) {
  const pjrt_sharding_t* sh = buffer->sharding;
  if (dst_size < buffer->nbytes)
    return tpurt_status_create(TPURT_INVALID_ARGUMENT, "gathering a sharded buffer of %zu bytes into %zu",
                               buffer->nbytes, dst_size);
  if (pjrt_sharding_is_replicated(sh)) return pjrt_buffer_to_host(buffer->shards[0], dst, dst_size);
  const size_t elem = tpurt_dtype_size(buffer->dtype);
  for (int32_t p = 0; p < sh->num_devices; ++p) {
    int64_t start[TPURT_MAX_RANK], block[TPURT_MAX_RANK];
    pjrt_sharding_shard_dims(sh, p, buffer->dims, start, block);
    pjrt_buffer_t* shard = buffer->shards[p];
    char* host = tpurt_xmalloc(shard->nbytes ? shard->nbytes : 1);
    tpurt_status_t status = pjrt_buffer_to_host(shard, host, shard->nbytes);
    if (!status && shard->nbytes)
      copy_block(dst, host, buffer->rank, buffer->dims, start, block, elem, false);
    free(host);
    if (status) return tpurt_status_annotate_consume(status, "gathering a sharded buffer");
  }
  return NULL;
}
