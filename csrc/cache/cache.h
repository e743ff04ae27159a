/* cache.h: the executable cache.
**
** Key: the printed module text, the compile options, the plugin identity
** (pjrt_identity) and the core version (tpurt_version()). Lookup order:
**   tier 1, memory: a hash table with LRU eviction, bounded in bytes
**           (TORCH_TPU_CACHE_MEMORY_BYTES, default 1 GiB);
**   tier 2, disk: one file per program in TORCH_TPU_CACHE_DIR (default
**           $XDG_CACHE_HOME/torch_tpu or ~/.cache/torch_tpu; "0": off),
**           loaded with PJRT_Executable_DeserializeAndLoad;
**   then the plugin compiles, and the result goes to both tiers.
** See disk_cache.c for the entry format and what is refused.
**
** Lifetimes: executables are reference counted (pjrt_executable_retain).
** The cache holds one reference per tier-1 entry and hands every caller a
** reference of its own, so eviction never frees a program a caller (an
** engine plan) still runs; the program goes when its last holder lets go.
**
** Thread safety: every function may be called from any thread.
*/
#ifndef TPURT_CACHE_CACHE_H_
#define TPURT_CACHE_CACHE_H_

#include "../pjrt/pjrt.h"

/* Returns the executable for |mlir| (a new reference: the caller releases
** it), compiling it on a miss. *out_hit says whether it came from either
** tier of the cache rather than from the compiler. */
TPURT_MUST_USE tpurt_status_t cache_get_or_compile(const char* mlir, size_t size,
                                                   pjrt_executable_t** out_executable, bool* out_hit);

/* What the cache knows of a program it handed out. */
typedef struct cache_entry_info_s {
  bool hit;        /* from either tier, not compiled by this call */
  bool from_disk;  /* loaded from tier 2 (by this call or an earlier one) */
  uint64_t hash;   /* the key hash: names the program in both tiers (cache_forget) */
  uint64_t charge; /* the bytes it is charged in the memory budget */
} cache_entry_info_t;
/* cache_get_or_compile, saying more about the program it returns. */
TPURT_MUST_USE tpurt_status_t cache_get_or_compile_info(const char* mlir, size_t size,
                                                        pjrt_executable_t** out_executable,
                                                        cache_entry_info_t* out_info);
/* Prints the module on demand: *out_text is malloc'd, the caller frees it. */
typedef TPURT_MUST_USE tpurt_status_t (*cache_print_fn)(void* ctx, char** out_text, size_t* out_size);
/* cache_get_or_compile for a module also known by |encoding| (its exact
** binary form, ir_func_encode). A program reached through the same encoding
** under the same compile options comes back from the memory tier without
** the module being printed; otherwise |print| makes the text, the text
** goes through cache_get_or_compile, and the program's entry keeps the
** encoding as its alias. This is how a fused graph that runs every loop
** step skips the printer and the hash of its text. */
TPURT_MUST_USE tpurt_status_t cache_get_or_compile_encoded(const char* encoding, size_t encoding_size,
                                                           cache_print_fn print, void* print_ctx,
                                                           pjrt_executable_t** out_executable, bool* out_hit);
/* The memory budget (TORCH_TPU_CACHE_MEMORY_BYTES). The engine's plan cache
** keeps its plans within the same budget. */
uint64_t cache_memory_limit(void);
/* Drops the program of key hash |hash| from both tiers: it was loaded but
** failed to run, so the next request compiles it afresh. Holders of a
** reference keep theirs. */
void cache_forget(uint64_t hash);

typedef struct cache_stats_s {
  uint64_t requests;
  uint64_t hits_memory, hits_disk;
  uint64_t hits_alias; /* of hits_memory, those found by encoding (no text printed) */
  uint64_t disk_writes, disk_rejects;
  uint64_t entries, bytes_memory; /* tier 1 now (not reset) */
} cache_stats_t;
void cache_stats(cache_stats_t* out_stats);
/* Zeroes the counters (requests, hits, writes, rejects). */
void cache_reset_counters(void);

/* For tests: drops every tier-1 entry (releasing the cache's references). */
void cache_reset_memory_for_test(void);
/* For tests: drops tier 1 and forgets the configuration, so that the next
** call reads the environment (TORCH_TPU_CACHE_*) and the directory again and
** warns afresh. */
void cache_reconfigure_for_test(void);

/* Shadow compilation (shadow.c). The label this thread's next programs are
** recorded under (the aten op, the fused graph); borrowed until the next
** call. */
void cache_shadow_label(const char* label);
/* Compiles |text| for the shadow target if one is set and |exe| (may be
** NULL) was not yet shadowed under it, with the runtime's compile options
** |options| (for SPMD programs, |num_partitions| > 1, the target's own
** device assignment), and records the verdict. A refusal is the record's
** verdict; under TORCH_TPU_TARGET_REFUSE it is also returned (naming the
** target, its chip and the compiler's words), so the program is refused
** before it runs here. */
TPURT_MUST_USE tpurt_status_t cache_shadow_program(const char* text, size_t size, const char* options,
                                                   size_t options_size, int32_t num_partitions,
                                                   pjrt_executable_t* exe);
/* A program compiled for the shadow target only (a compile-only trace,
** over |num_partitions| of its chips): recorded like cache_shadow_program's,
** once per distinct program, and compiled on the compile pool, so the call
** returns before the target's compiler is done. No target set is the
** returned error; the target's verdict (a refusal too) is the record's,
** which tpurt_shadow_records and tpurt_shadow_wait wait for. */
TPURT_MUST_USE tpurt_status_t cache_shadow_compile_only(const char* text, size_t size, const char* options,
                                                        size_t options_size, int32_t num_partitions);

/* Whether precompile is on (tpurt_shadow_set_precompile) with a target set:
** this plugin's own programs are then kept in memory only. */
bool cache_shadow_precompiling(void);
/* Whether precompile has been on in this process: then the directory holds
** the target's programs only, and this plugin's are never written there. */
bool cache_shadow_directory_is_targets(void);
/* Precompiled programs (precompile for a target): executables another
** plugin compiled, stored in this cache's directory under the key a process
** running on that plugin computes, |identity| being that process's plugin
** identity (pjrt_identity's form: path|api|platform|platform version).
** Entries are written, checked and MAC'd like the runtime's own. */
TPURT_MUST_USE tpurt_status_t cache_precompiled_store(const char* identity, const char* text, size_t size,
                                                      const char* options, size_t options_size,
                                                      const char* payload, size_t payload_size);
bool cache_precompiled_has(const char* identity, const char* text, size_t size, const char* options,
                           size_t options_size);
/* The entry's serialised bytes (malloc'd), checked (owner, header, key's
** SHA-256, MAC); NOT_FOUND when there is none or it was refused. */
TPURT_MUST_USE tpurt_status_t cache_precompiled_load(const char* identity, const char* text, size_t size,
                                                     const char* options, size_t options_size,
                                                     char** out_payload, size_t* out_size);

#endif /* TPURT_CACHE_CACHE_H_ */
