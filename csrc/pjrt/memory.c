/* memory.c: what the plugin says of device memory (Device_MemoryStats), and
** the host blocks PyTorch pins for staging copies.
**
** Host blocks are page-aligned ordinary host memory: PJRT 0.114 offers no
** call that registers host memory for DMA, and a pinned_host memory space
** hands out buffers, not host pointers PyTorch could wrap. The blocks are
** still what makes non_blocking device -> host copies safe: a block is
** never freed under an asynchronous copy into it. */
#include <stdlib.h>
#include <unistd.h>

#include "pjrt_internal.h"

tpurt_status_t pjrt_device_memory(int device, tpurt_device_memory_t* out_memory) {
  memset(out_memory, 0, sizeof(*out_memory));
  TPURT_RETURN_IF_ERROR(pjrt_init());
  TPURT_RETURN_IF_ERROR(pjrt_check_device(device));
  pjrt_abi_device_memory_stats_args_t a;
  memset(&a, 0, sizeof(a));
  a.struct_size = pjrt_abi_device_memory_stats_args_t_SIZE;
  a.device = pjrt_g.devices[device];
  pthread_mutex_lock(&pjrt_g.lock);
  tpurt_status_t status = PJRT_CALL(PJRTABI_DEVICE_MEMORY_STATS, "Device_MemoryStats", &a);
  pthread_mutex_unlock(&pjrt_g.lock);
  out_memory->bytes_in_use = out_memory->peak_bytes_in_use = out_memory->num_allocs = -1;
  out_memory->largest_alloc_size = out_memory->bytes_limit = out_memory->bytes_reserved = -1;
  out_memory->peak_bytes_reserved = out_memory->bytes_free = -1;
  bool unreported = status && tpurt_status_code(status) == TPURT_UNIMPLEMENTED;
  if (unreported && strcmp(pjrt_g.platform_name, "cpu") == 0) {
    /* The CPU plugin's device memory is the host's RAM. */
    tpurt_status_ignore(status);
    long page = sysconf(_SC_PAGESIZE), total = sysconf(_SC_PHYS_PAGES), avail = sysconf(_SC_AVPHYS_PAGES);
    out_memory->from_host = true;
    out_memory->bytes_limit = (int64_t)page * total;
    out_memory->bytes_free = (int64_t)page * avail;
    return NULL;
  }
  if (status) return status;
#define OPTIONAL(field) (a.field.is_set ? a.field.value : -1)
  out_memory->reported = true;
  out_memory->bytes_in_use = a.bytes_in_use;
  out_memory->peak_bytes_in_use = OPTIONAL(peak_bytes_in_use);
  out_memory->num_allocs = OPTIONAL(num_allocs);
  out_memory->largest_alloc_size = OPTIONAL(largest_alloc_size);
  out_memory->bytes_limit = OPTIONAL(bytes_limit);
  out_memory->bytes_reserved = OPTIONAL(bytes_reserved);
  out_memory->peak_bytes_reserved = OPTIONAL(peak_bytes_reserved);
#undef OPTIONAL
  if (out_memory->bytes_limit >= 0) out_memory->bytes_free = out_memory->bytes_limit - a.bytes_in_use;
  return NULL;
}

/*===--- host blocks ---===*/

typedef struct {
  char* ptr;
  size_t size;
} host_block_t;

static pthread_mutex_t g_host_lock = PTHREAD_MUTEX_INITIALIZER;
static host_block_t* g_blocks;
static size_t g_num_blocks, g_cap_blocks;

tpurt_status_t tpurt_host_alloc(size_t nbytes, void** out_ptr) {
  *out_ptr = NULL;
  const size_t page = 4096;
  size_t size = (nbytes + page - 1) / page * page;
  void* p = NULL;
  if (posix_memalign(&p, page, size ? size : page) != 0)
    return tpurt_status_create(TPURT_RESOURCE_EXHAUSTED, "cannot allocate %zu bytes of host memory", nbytes);
  pthread_mutex_lock(&g_host_lock);
  if (g_num_blocks == g_cap_blocks) {
    g_cap_blocks = g_cap_blocks ? 2 * g_cap_blocks : 64;
    g_blocks = tpurt_xrealloc(g_blocks, sizeof(host_block_t) * g_cap_blocks);
  }
  g_blocks[g_num_blocks++] = (host_block_t){p, size ? size : page};
  pthread_mutex_unlock(&g_host_lock);
  *out_ptr = p;
  return NULL;
}

void tpurt_host_free(void* ptr) {
  if (!ptr) return;
  size_t size = 0;
  pthread_mutex_lock(&g_host_lock);
  for (size_t i = 0; i < g_num_blocks; ++i) {
    if (g_blocks[i].ptr != ptr) continue;
    size = g_blocks[i].size;
    g_blocks[i] = g_blocks[--g_num_blocks];
    break;
  }
  pthread_mutex_unlock(&g_host_lock);
  if (size) pjrt_wait_host_range(ptr, size); /* never initialises the runtime */
  free(ptr);
}

bool tpurt_host_contains(const void* ptr) {
  const char* p = ptr;
  bool found = false;
  pthread_mutex_lock(&g_host_lock);
  for (size_t i = 0; i < g_num_blocks && !found; ++i)
    found = p >= g_blocks[i].ptr && p < g_blocks[i].ptr + g_blocks[i].size;
  pthread_mutex_unlock(&g_host_lock);
  return found;
}
