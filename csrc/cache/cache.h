/* cache.h: the executable cache. Key: the printed module text and the
** plugin identity (hashed, then compared in full). Tier 1 lives in memory.
** Executables are owned by the cache and live for the process.
*/
#ifndef TPURT_CACHE_CACHE_H_
#define TPURT_CACHE_CACHE_H_

#include "../pjrt/pjrt.h"

/* Returns the executable for |mlir|, compiling it on a miss. *out_hit says
** whether it came from the cache. The executable is borrowed. */
tpurt_status_t cache_get_or_compile(const char* mlir, size_t size, pjrt_executable_t** out_executable,
                                    bool* out_hit);

typedef struct cache_stats_s {
  uint64_t requests, hits_memory, entries;
} cache_stats_t;
void cache_stats(cache_stats_t* out_stats);

#endif /* TPURT_CACHE_CACHE_H_ */
