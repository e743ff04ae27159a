/* cache_internal.h: what the files of the cache room share. */
#ifndef TPURT_CACHE_CACHE_INTERNAL_H_
#define TPURT_CACHE_CACHE_INTERNAL_H_

#include "../base/base.h"
#include "cache.h"

/* A 64-bit hash, eight bytes per step; |seed| chains calls. Not
** cryptographic: it names entries and catches corruption, it does not
** defend against someone who can write the cache directory (nobody else
** can: see disk_cache.c). */
uint64_t cache_hash64(uint64_t seed, const void* data, size_t n);

/*===--- HMAC-SHA256 (mac.c): binds a disk entry to its key ---===*/

typedef struct cache_sha256_s {
  uint32_t state[8];
  uint64_t length; /* bytes hashed so far */
  unsigned char block[64];
  size_t used; /* bytes of |block| filled */
} cache_sha256_t;
void cache_sha256_init(cache_sha256_t* s);
void cache_sha256_update(cache_sha256_t* s, const void* data, size_t n);
void cache_sha256_final(cache_sha256_t* s, unsigned char out[32]);

typedef struct cache_hmac_s {
  cache_sha256_t inner, outer;
} cache_hmac_t;
void cache_hmac_init(cache_hmac_t* m, const void* key, size_t key_size);
void cache_hmac_update(cache_hmac_t* m, const void* data, size_t n);
void cache_hmac_final(cache_hmac_t* m, unsigned char out[32]);
/* Compares two tags in constant time. */
bool cache_mac_equal(const unsigned char a[32], const unsigned char b[32]);

/* One program's key: its text plus two independent hashes of the full key
** (text, compile options, plugin identity, core version). */
typedef struct cache_key_s {
  const char* text;
  size_t size;
  uint64_t hash;   /* names the entry: tier-1 bucket, tier-2 file name */
  uint64_t digest; /* a second hash, checked before a tier-2 entry is trusted */
  /* The rest of the key, as hashed (borrowed for the call): tier 2 binds
  ** an entry to all of it (cache_key_sha256). */
  const char* identity;
  const char* options;
  size_t options_size;
} cache_key_t;

/* SHA-256 of the whole key (identity, core version, compile options, text):
** what a tier-2 entry's MAC binds its payload to. */
void cache_key_sha256(const cache_key_t* key, unsigned char out[32]);

/* Prints "torch_tpu: warning: ..." to stderr. */
void cache_warn(const char* fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 1, 2)))
#endif
    ;

/*===--- tier 1: memory (memory_cache.c); callers hold the cache lock ---===*/

void memory_set_limit_locked(uint64_t limit_bytes);
/* The executable for |key| (a new reference), now most recently used; NULL
** on a miss. *out_charge: its bytes in the budget; *out_from_disk: whether
** it was loaded from tier 2. */
pjrt_executable_t* memory_find_locked(const cache_key_t* key, uint64_t* out_charge, bool* out_from_disk);
/* Adds |executable| under |key| (the table takes a reference of its own),
** charging |charge| bytes (plus the key text), then evicts least recently
** used entries while the total is over the limit (never the entry just
** added). A key already present is left as it is. Returns the entry's
** charge. */
uint64_t memory_insert_locked(const cache_key_t* key, pjrt_executable_t* executable, uint64_t charge,
                              bool from_disk);
/* An alias: the bytes of |head| then those of |body|, named by |hash|. In
** two parts so that a lookup reads the caller's buffers where they are: a
** fused step's encoding (135 KB for a step of the tiny FLUX pipeline) is
** looked up on every step. */
typedef struct cache_alias_s {
  const char* head;
  size_t head_size;
  const char* body;
  size_t body_size;
  uint64_t hash;
} cache_alias_t;

/* The executable whose entry carries |alias| (compared in full), as
** memory_find_locked; NULL on a miss. */
pjrt_executable_t* memory_find_alias_locked(const cache_alias_t* alias, uint64_t* out_charge,
                                            bool* out_from_disk);
/* Gives |key|'s entry the alias |alias| (copied, charged to the entry, and
** replacing any alias it had); nothing if the entry is gone. */
void memory_set_alias_locked(const cache_key_t* key, const cache_alias_t* alias);
/* Drops the entry of key hash |hash|, if any. */
void memory_forget_locked(uint64_t hash);
void memory_clear_locked(void);
void memory_usage_locked(uint64_t* out_entries, uint64_t* out_bytes);

/*===--- tier 2: disk (disk_cache.c) ---===*/

typedef struct disk_config_s {
  int dirfd;                /* the open directory; -1: tier 2 is off */
  unsigned char secret[32]; /* the MAC key (DISK_SECRET_NAME in the directory) */
  uint64_t cap_bytes;       /* TORCH_TPU_CACHE_DISK_BYTES; 0: no cap */
  char* dir;                /* its path, or NULL when none was chosen */
  char* refused;            /* why tier 2 is off, or NULL */
} disk_config_t;

/* Chooses the directory from the environment, creates it (0700) and checks
** that it is private; on refusal warns once (stderr) and leaves it off. */
void disk_configure(disk_config_t* out_config);
void disk_config_free(disk_config_t* config);

typedef enum { DISK_MISS = 0, DISK_HIT = 1, DISK_REJECTED = 2 } disk_result_t;
/* Loads |key|'s entry. DISK_REJECTED: an entry was there but is not to be
** trusted (corrupt, truncated, foreign, unloadable); it was reported (once
** per entry) and removed. *out_payload_size: the serialised size on a hit. */
disk_result_t disk_load(const disk_config_t* config, const cache_key_t* key,
                        pjrt_executable_t** out_executable, size_t* out_payload_size);
/* Writes |executable| as |key|'s entry, atomically. Failures are warned
** about (once) and otherwise ignored. Returns the payload size written, or 0. */
size_t disk_store(const disk_config_t* config, const cache_key_t* key, pjrt_executable_t* executable);
/* Writes the serialised executable |payload| as the entry of |key| (the
** bytes of another plugin's compile: a precompiled target program). Returns
** the payload size, 0 if it was not written (warned once). */
size_t disk_store_bytes(const disk_config_t* config, const cache_key_t* key, const char* payload,
                        size_t size);
/* The entry of |key|, checked like disk_load (owner, mode, header, key,
** MAC) but not deserialised: *out_payload (malloc'd) on DISK_HIT. */
disk_result_t disk_load_bytes(const disk_config_t* config, const cache_key_t* key, char** out_payload,
                              size_t* out_payload_size);
/* Whether an entry file of |key| exists (not checked). */
bool disk_has(const disk_config_t* config, const cache_key_t* key);
/* Reports a loaded entry that must not be trusted (once, with |why|, which
** is consumed), and removes it. */
void disk_reject_consume(const disk_config_t* config, const cache_key_t* key, tpurt_status_t why);
/* Removes the entry of key hash |hash| (it failed to run). */
void disk_forget(const disk_config_t* config, uint64_t hash);
/* Scans the directory; over the cap, removes least recently used entries
** down to 90% of it. Returns how many were removed. */
uint64_t disk_enforce_cap(const disk_config_t* config);
/* Removes temporary files whose writer is gone (or older than an hour).
** Returns how many. */
uint64_t disk_clean_stale(const disk_config_t* config);
/* Counts the entry files and their bytes. */
void disk_usage(int dirfd, uint64_t* out_entries, uint64_t* out_bytes);
/* Writes |n| bytes to |dirfd|/|name| through a temporary file and a rename,
** so that readers see the whole file or none. */
TPURT_MUST_USE tpurt_status_t disk_write_atomic(int dirfd, const char* name, const void* head,
                                                size_t head_size, const void* body, size_t body_size);
/* mkdir -p |path|, each created level with |mode|. */
TPURT_MUST_USE tpurt_status_t disk_mkdirs(const char* path, unsigned mode);
/* The tier-2 directory (configured on first use), or -1 when it is off. */
int cache_disk_dirfd(void);
/* The file in the cache directory that holds the per-cache MAC key (32
** random bytes, 0600, created on first use). */
#define DISK_SECRET_NAME "mac.key"

/* What an import did (disk_import). */
typedef struct disk_import_s {
  uint64_t imported, refused;
} disk_import_t;
/* Copies the entries of |source_dir| (another cache, with its own
** DISK_SECRET_NAME) into |config|'s directory: each entry's MAC must check
** under the source's key and the plugin must load its program; it is then
** written under this cache's key. One line per refused entry on stderr. */
TPURT_MUST_USE tpurt_status_t disk_import(const disk_config_t* config, const char* source_dir,
                                          disk_import_t* out_result);

/* Forgets which entries and failures were warned about (tests). */
void disk_reset_warnings(void);

#endif /* TPURT_CACHE_CACHE_INTERNAL_H_ */
