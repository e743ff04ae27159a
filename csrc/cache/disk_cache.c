/* disk_cache.c: tier 2 of the executable cache, one file per program.
**
** A cache is code that will be executed, so the directory must be private:
** it is created 0700, and one that belongs to another user or that group or
** others may write is refused (a warning, once) and the cache runs in memory
** only. The directory is opened once and every file is reached through that
** descriptor, so renaming a path above it later changes nothing.
**
** Entry "<key hash as 16 hex digits>.tpuexe": a 128-byte header, then the
** bytes of PJRT_Executable_Serialize.
**
**   offset  size  field
**        0     8  magic "TPURTEXE"
**        8     4  format version (DISK_FORMAT_VERSION)
**       12     4  header size (128)
**       16     8  key hash     (cache_key_t.hash: also the file name)
**       24     8  key digest   (cache_key_t.digest)
**       32     8  payload size
**       40     8  reserved, 0
**       48    32  key SHA-256  (cache_key_sha256: the whole key, text included)
**       80    32  MAC: HMAC-SHA256 under the cache's secret of bytes 0..79
**                 and then the payload
**      112     8  reserved, 0
**      120     8  header checksum  (cache_hash64 of bytes 0..119)
**
** Trust. A cache is code that will be executed, and a checksum anyone can
** recompute proves nothing (issue 24: a program compiled for exp, planted
** under neg's key with a valid header, ran as neg). So an entry is loaded
** only when (1) it is a regular file owned by this user and writable by
** nobody else, and (2) its MAC checks under the per-cache secret: 32
** random bytes in DISK_SECRET_NAME, created 0600 on first use, which must
** itself be a regular file owned by this user that nobody else can read or
** write. The MAC covers the key's SHA-256, so an entry cannot be moved to
** another key, and the payload, so it cannot be altered. Whoever can read
** the secret can forge entries: that is this user (who can run code as
** themself anyway). A cache copied from elsewhere fails the MAC and is
** recompiled, unless it is imported (disk_import: `python -m torch_tpu
** cache import DIR`, which checks each entry under the source's own secret
** and rewrites it under this one) or the secret is copied with it,
** knowingly.
**
** Integers are in host byte order (an entry only ever serves the plugin
** that wrote it, on the same kind of machine). A writer fills a temporary
** file of its own (".tmp.<name>.<pid>.<n>", O_EXCL) and renames it over the
** entry, so a reader sees a whole entry or none, and two processes writing
** the same entry never mix their bytes. There is no fsync: an entry cut
** short by a crash fails its MAC and is recompiled.
**
** An entry that is truncated, corrupt, foreign (another key, plugin or
** version), of another format version, owned by another user, writable by
** others or without a valid MAC is never trusted: it is reported
** once, removed, and the program is compiled again (and rewritten). Entries
** are opened with O_NONBLOCK and checked with fstat before a byte is read,
** so a FIFO or device planted at an entry path cannot block the process; a
** directory there is removed (or, when it is not empty, renamed aside) so
** that the path heals.
**
** Size: the directory is kept under TORCH_TPU_CACHE_DISK_BYTES (default
** 2 GiB). A hit sets the entry's mtime, so mtime orders entries by last use;
** when a write takes the directory over the cap, the least recently used
** entries are removed until it is at 90% of it (the slack spares a scan of
** the directory per write). Temporary files left by writers that died
** (their pid is gone, or older than an hour) are removed when the
** directory is configured.
*/
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <pwd.h>
#include <signal.h>
#include <stdio.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cache_internal.h"

#define DISK_FORMAT_VERSION 2u
#define HEADER_SIZE 128
#define ENTRY_SUFFIX ".tpuexe"
static const char kMagic[8] = {'T', 'P', 'U', 'R', 'T', 'E', 'X', 'E'};
static const uint64_t kChecksumSeed = 0x7075727463686b73ULL;

typedef struct header_s {
  char magic[8];
  uint32_t version;
  uint32_t header_size;
  uint64_t key_hash;
  uint64_t key_digest;
  uint64_t payload_size;
  uint64_t reserved0;
  unsigned char key_sha256[32];
  unsigned char mac[32];
  uint64_t reserved1;
  uint64_t header_checksum;
} header_t;
_Static_assert(sizeof(header_t) == HEADER_SIZE, "the entry header is 128 bytes");
_Static_assert(offsetof(header_t, mac) == 80 && offsetof(header_t, header_checksum) == 120,
               "the header layout documented above");

/* Bytes of entries in the directory as this process believes: the last scan
** plus what it wrote since. Going over the cap triggers a scan. */
static uint64_t g_disk_bytes TPURT_GUARDED_BY(atomic);

/*===--- warnings, once each ---===*/

static pthread_mutex_t g_warn_lock = PTHREAD_MUTEX_INITIALIZER;
static uint64_t* g_warned TPURT_GUARDED_BY(g_warn_lock); /* key hashes of entries reported */
static size_t g_num_warned TPURT_GUARDED_BY(g_warn_lock), g_cap_warned TPURT_GUARDED_BY(g_warn_lock);
static bool g_warned_serialize TPURT_GUARDED_BY(g_warn_lock), g_warned_write TPURT_GUARDED_BY(g_warn_lock);

/* True the first time |hash| is seen. */
static bool first_warning(uint64_t hash) {
  pthread_mutex_lock(&g_warn_lock);
  bool first = true;
  for (size_t i = 0; i < g_num_warned && first; ++i) first = g_warned[i] != hash;
  if (first) {
    if (g_num_warned == g_cap_warned) {
      g_cap_warned = g_cap_warned ? 2 * g_cap_warned : 16;
      g_warned = tpurt_xrealloc(g_warned, g_cap_warned * sizeof(uint64_t));
    }
    g_warned[g_num_warned++] = hash;
  }
  pthread_mutex_unlock(&g_warn_lock);
  return first;
}

static bool first_flag(bool* flag) {
  pthread_mutex_lock(&g_warn_lock);
  bool first = !*flag;
  *flag = true;
  pthread_mutex_unlock(&g_warn_lock);
  return first;
}

void disk_reset_warnings(void) {
  pthread_mutex_lock(&g_warn_lock);
  free(g_warned);
  g_warned = NULL;
  g_num_warned = g_cap_warned = 0;
  g_warned_serialize = g_warned_write = false;
  pthread_mutex_unlock(&g_warn_lock);
}

/*===--- files ---===*/

static TPURT_MUST_USE tpurt_status_t errno_status(const char* what, const char* name) {
  int e = errno;
  return tpurt_status_create(e == ENOSPC ? TPURT_RESOURCE_EXHAUSTED : TPURT_UNAVAILABLE, "%s '%s': %s", what,
                             name, strerror(e));
}

static bool write_all(int fd, const void* data, size_t n) {
  const char* p = data;
  while (n > 0) {
    ssize_t w = write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      if (w == 0) errno = EIO;
      return false;
    }
    p += w;
    n -= (size_t)w;
  }
  return true;
}

/* Reads up to |n| bytes; returns how many were read (short only at EOF or
** on an error, then errno says which). */
static size_t read_all(int fd, void* data, size_t n) {
  char* p = data;
  size_t got = 0;
  while (got < n) {
    ssize_t r = read(fd, p + got, n - got);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    got += (size_t)r;
  }
  return got;
}

tpurt_status_t disk_write_atomic(int dirfd, const char* name, const void* head, size_t head_size,
                                 const void* body, size_t body_size) {
  static unsigned counter TPURT_GUARDED_BY(atomic);
  char tmp[256];
  int fd = -1;
  for (int attempt = 0; attempt < 100 && fd < 0; ++attempt) {
    snprintf(tmp, sizeof(tmp), ".tmp.%s.%ld.%u", name, (long)getpid(),
             __atomic_fetch_add(&counter, 1, __ATOMIC_RELAXED));
    fd = openat(dirfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0 && errno != EEXIST) break;
  }
  if (fd < 0) return errno_status("cannot create", tmp);
  bool ok = write_all(fd, head, head_size) && write_all(fd, body, body_size);
  tpurt_status_t status = ok ? NULL : errno_status("cannot write", tmp);
  if (close(fd) != 0 && !status) status = errno_status("cannot write", tmp);
  if (!status && renameat(dirfd, tmp, dirfd, name) != 0) status = errno_status("cannot rename to", name);
  if (status) unlinkat(dirfd, tmp, 0);
  return status;
}

tpurt_status_t disk_mkdirs(const char* path, unsigned mode) {
  char* p = tpurt_xstrdup(path);
  size_t n = strlen(p);
  while (n > 1 && p[n - 1] == '/') p[--n] = '\0';
  for (char* s = p + 1;; ++s) {
    bool last = *s == '\0';
    if (*s != '/' && !last) continue;
    *s = '\0';
    if (mkdir(p, (mode_t)mode) != 0 && errno != EEXIST) {
      tpurt_status_t status = errno_status("cannot create the directory", p);
      free(p);
      return status;
    }
    if (last) break;
    *s = '/';
  }
  free(p);
  return NULL;
}

/*===--- the directory ---===*/

static char* join(const char* a, const char* b) {
  tpurt_strbuf_t s = {0};
  tpurt_strbuf_printf(&s, "%s%s%s", a, (*a && a[strlen(a) - 1] == '/') ? "" : "/", b);
  return s.data;
}

/* TORCH_TPU_CACHE_DIR, else $XDG_CACHE_HOME/torch_tpu (an absolute one, as
** the XDG spec says), else ~/.cache/torch_tpu; NULL if there is no home. */
static char* choose_dir(void) {
  const char* env = tpurt_config()->cache_dir;
  if (env) return tpurt_xstrdup(env);
  const char* xdg = getenv("XDG_CACHE_HOME");
  if (xdg && xdg[0] == '/') return join(xdg, "torch_tpu");
  const char* home = getenv("HOME");
  if (!home || !*home) {
    struct passwd* pw = getpwuid(geteuid());
    home = pw ? pw->pw_dir : NULL;
  }
  if (!home || !*home) return NULL;
  return join(home, ".cache/torch_tpu");
}

/* Turns tier 2 off, keeping |why| (consumed) as the reason. */
static void refuse_consume(disk_config_t* c, tpurt_status_t why) {
  c->refused = tpurt_xstrdup(tpurt_status_message(why));
  tpurt_status_free(why);
  if (c->dirfd >= 0) close(c->dirfd);
  c->dirfd = -1;
  cache_warn(
      "the executable cache directory '%s' is not used: %s. A cache is code that will be executed: "
      "the directory must belong to you and be writable by you alone (chmod 700 it, or choose another "
      "with TORCH_TPU_CACHE_DIR). Compiled programs are cached in memory only",
      c->dir ? c->dir : "", c->refused);
}

/*===--- the per-cache secret ---===*/

static TPURT_MUST_USE tpurt_status_t random_bytes(unsigned char* out, size_t n) {
  size_t got = 0;
  while (got < n) {
    ssize_t r = getrandom(out + got, n - got, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0)
      return tpurt_status_create(TPURT_UNAVAILABLE, "no random bytes for its MAC key: %s", strerror(errno));
    got += (size_t)r;
  }
  return NULL;
}

/* Reads the 32-byte secret |dirfd|/DISK_SECRET_NAME. |private_to_me|: it
** must belong to this user and be unreadable by others (this cache's own
** key); an import's source key need only be a well-formed regular file. */
static TPURT_MUST_USE tpurt_status_t read_secret(int dirfd, bool private_to_me, unsigned char out[32]) {
  int fd = openat(dirfd, DISK_SECRET_NAME, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0 && errno == ENOENT)
    return tpurt_status_create(TPURT_NOT_FOUND, "it has no MAC key '%s'", DISK_SECRET_NAME);
  if (fd < 0) return errno_status("cannot open its MAC key", DISK_SECRET_NAME);
  struct stat st;
  tpurt_status_t status = NULL;
  if (fstat(fd, &st) != 0) {
    status = errno_status("cannot stat its MAC key", DISK_SECRET_NAME);
  } else if (!S_ISREG(st.st_mode)) {
    status = tpurt_status_create(TPURT_PERMISSION_DENIED, "its MAC key '%s' is not a regular file",
                                 DISK_SECRET_NAME);
  } else if (private_to_me && st.st_uid != geteuid()) {
    status = tpurt_status_create(TPURT_PERMISSION_DENIED,
                                 "its MAC key '%s' belongs to uid %u, not to this user (uid %u)",
                                 DISK_SECRET_NAME, (unsigned)st.st_uid, (unsigned)geteuid());
  } else if (private_to_me && (st.st_mode & 077)) {
    status = tpurt_status_create(
        TPURT_PERMISSION_DENIED,
        "its MAC key '%s' is open to others (mode %04o): whoever read it can forge entries; "
        "remove the file (the cache starts afresh) or chmod 600 it",
        DISK_SECRET_NAME, (unsigned)(st.st_mode & 07777));
  } else if (st.st_size != 32 || read_all(fd, out, 32) != 32) {
    status = tpurt_status_create(TPURT_DATA_LOSS,
                                 "its MAC key '%s' is not 32 bytes (%lld); remove it to start afresh",
                                 DISK_SECRET_NAME, (long long)st.st_size);
  }
  close(fd);
  return status;
}

/* The cache's secret, created on first use: written whole to a private
** temporary file, then linked into place, so that of two processes
** creating it at once one wins and both read the winner's. */
static TPURT_MUST_USE tpurt_status_t load_or_create_secret(int dirfd, unsigned char out[32]) {
  tpurt_status_t status = read_secret(dirfd, true, out);
  if (!status || tpurt_status_code(status) != TPURT_NOT_FOUND) return status;
  tpurt_status_free(status);
  unsigned char fresh[32];
  TPURT_RETURN_IF_ERROR(random_bytes(fresh, sizeof(fresh)));
  char tmp[128];
  snprintf(tmp, sizeof(tmp), ".tmp.%s.%ld.0", DISK_SECRET_NAME, (long)getpid());
  (void)unlinkat(dirfd, tmp, 0);
  int fd = openat(dirfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) return errno_status("cannot create its MAC key", tmp);
  bool ok = write_all(fd, fresh, sizeof(fresh));
  status = ok ? NULL : errno_status("cannot write its MAC key", tmp);
  if (close(fd) != 0 && !status) status = errno_status("cannot write its MAC key", tmp);
  if (!status && linkat(dirfd, tmp, dirfd, DISK_SECRET_NAME, 0) != 0 && errno != EEXIST)
    status = errno_status("cannot create its MAC key", DISK_SECRET_NAME);
  (void)unlinkat(dirfd, tmp, 0);
  memset(fresh, 0, sizeof(fresh));
  return status ? status : read_secret(dirfd, true, out);
}

/* HMAC-SHA256 under |secret| of header bytes 0..79 and the payload. */
static void entry_mac(const unsigned char secret[32], const header_t* h, const void* payload, size_t size,
                      unsigned char out[32]) {
  cache_hmac_t m;
  cache_hmac_init(&m, secret, 32);
  cache_hmac_update(&m, h, offsetof(header_t, mac));
  cache_hmac_update(&m, payload, size);
  cache_hmac_final(&m, out);
}

void disk_configure(disk_config_t* c) {
  c->dirfd = -1;
  c->dir = NULL;
  c->refused = NULL;
  c->cap_bytes = tpurt_config()->cache_disk_bytes;
  const char* env = tpurt_config()->cache_dir;
  if (env && strcmp(env, "0") == 0) {
    c->refused = tpurt_xstrdup("disabled by TORCH_TPU_CACHE_DIR=0");
    return;
  }
  c->dir = choose_dir();
  if (!c->dir) {
    refuse_consume(c, tpurt_status_create(TPURT_NOT_FOUND, "no home directory to put it in"));
    return;
  }
  tpurt_status_t status = disk_mkdirs(c->dir, 0700);
  if (status) {
    refuse_consume(c, status);
    return;
  }
  c->dirfd = open(c->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (c->dirfd < 0) {
    refuse_consume(c, errno_status("cannot open", c->dir));
    return;
  }
  struct stat st;
  if (fstat(c->dirfd, &st) != 0) {
    refuse_consume(c, errno_status("cannot stat", c->dir));
  } else if (!S_ISDIR(st.st_mode)) {
    refuse_consume(c, tpurt_status_create(TPURT_PERMISSION_DENIED, "it is not a directory"));
  } else if (st.st_uid != geteuid()) {
    refuse_consume(
        c, tpurt_status_create(TPURT_PERMISSION_DENIED, "it belongs to uid %u, not to this user (uid %u)",
                               (unsigned)st.st_uid, (unsigned)geteuid()));
  } else if (st.st_mode & (S_IWGRP | S_IWOTH)) {
    refuse_consume(c,
                   tpurt_status_create(TPURT_PERMISSION_DENIED, "it is writable by %s (mode %04o)",
                                       (st.st_mode & S_IWGRP) && (st.st_mode & S_IWOTH) ? "group and others"
                                       : (st.st_mode & S_IWGRP)                         ? "its group"
                                                                                        : "others",
                                       (unsigned)(st.st_mode & 07777)));
  }
  if (c->dirfd >= 0) {
    tpurt_status_t secret = load_or_create_secret(c->dirfd, c->secret);
    if (secret) refuse_consume(c, secret);
  }
}

void disk_config_free(disk_config_t* c) {
  if (c->dirfd >= 0) close(c->dirfd);
  memset(c->secret, 0, sizeof(c->secret));
  free(c->dir);
  free(c->refused);
  c->dirfd = -1;
  c->dir = c->refused = NULL;
}

/*===--- entries ---===*/

static void entry_name(uint64_t hash, char out[32]) { snprintf(out, 32, "%016" PRIx64 ENTRY_SUFFIX, hash); }

static uint64_t header_checksum(const header_t* h) {
  return cache_hash64(kChecksumSeed, h, offsetof(header_t, header_checksum));
}

/* Removes whatever is at entry path |name|: a file, or a directory (renamed
** aside when it is not empty, so that the path is free for a new entry). */
static void remove_entry_path(int dirfd, const char* name) {
  if (unlinkat(dirfd, name, 0) == 0 || errno == ENOENT) return;
  if (errno != EISDIR && errno != EPERM) return;
  if (unlinkat(dirfd, name, AT_REMOVEDIR) == 0) return;
  static unsigned counter TPURT_GUARDED_BY(atomic);
  char aside[256];
  snprintf(aside, sizeof(aside), ".bad.%s.%ld.%u", name, (long)getpid(),
           __atomic_fetch_add(&counter, 1, __ATOMIC_RELAXED));
  (void)renameat(dirfd, name, dirfd, aside); /* if even this fails, the program just stays uncached */
}

/* Reports a bad entry (once per entry), removes it, and says REJECTED. */
static disk_result_t reject(const disk_config_t* c, const cache_key_t* key, const char* name,
                            tpurt_status_t why) {
  if (first_warning(key->hash)) {
    cache_warn("ignoring the executable cache entry '%s/%s': %s; compiling the program again", c->dir, name,
               tpurt_status_message(why));
  }
  tpurt_status_free(why);
  remove_entry_path(c->dirfd, name);
  return DISK_REJECTED;
}

void disk_reject_consume(const disk_config_t* c, const cache_key_t* key, tpurt_status_t why) {
  if (c->dirfd < 0) {
    tpurt_status_free(why);
    return;
  }
  char name[32];
  entry_name(key->hash, name);
  (void)reject(c, key, name, why);
}

void disk_forget(const disk_config_t* c, uint64_t hash) {
  if (c->dirfd < 0) return;
  char name[32];
  entry_name(hash, name);
  remove_entry_path(c->dirfd, name);
}

/* Checks that |h| is a header of this build's format, whole; NULL if so.
** (What an entry and an imported entry share: the key checks differ.) */
static TPURT_MUST_USE tpurt_status_t check_header_frame(const header_t* h) {
  if (memcmp(h->magic, kMagic, sizeof(kMagic)) != 0)
    return tpurt_status_create(TPURT_DATA_LOSS, "not a torch_tpu cache entry (bad magic)");
  if (h->version != DISK_FORMAT_VERSION)
    return tpurt_status_create(TPURT_DATA_LOSS, "format version %u, this build reads %u", h->version,
                               DISK_FORMAT_VERSION);
  if (h->header_size != HEADER_SIZE || h->header_checksum != header_checksum(h))
    return tpurt_status_create(TPURT_DATA_LOSS, "corrupt header (checksum mismatch)");
  return NULL;
}

/* Checks |h| against |key| and the file size; NULL if it may be read on. */
static TPURT_MUST_USE tpurt_status_t check_header(const header_t* h, const cache_key_t* key,
                                                  uint64_t file_size) {
  TPURT_RETURN_IF_ERROR(check_header_frame(h));
  if (h->key_hash != key->hash || h->key_digest != key->digest)
    return tpurt_status_create(TPURT_DATA_LOSS,
                               "foreign: written for another program, plugin or torch_tpu version");
  unsigned char sha[32];
  cache_key_sha256(key, sha);
  if (memcmp(sha, h->key_sha256, sizeof(sha)) != 0)
    return tpurt_status_create(TPURT_DATA_LOSS,
                               "foreign: written for another program (its key's SHA-256 differs)");
  uint64_t have = file_size - HEADER_SIZE;
  if (have < h->payload_size)
    return tpurt_status_create(TPURT_DATA_LOSS, "truncated (%" PRIu64 " of %" PRIu64 " payload bytes)", have,
                               h->payload_size);
  if (have > h->payload_size)
    return tpurt_status_create(TPURT_DATA_LOSS, "%" PRIu64 " bytes beyond its payload",
                               have - h->payload_size);
  return NULL;
}

disk_result_t disk_load_bytes(const disk_config_t* c, const cache_key_t* key, char** out_payload,
                              size_t* out_payload_size) {
  *out_payload = NULL;
  *out_payload_size = 0;
  if (c->dirfd < 0) return DISK_MISS;
  char name[32];
  entry_name(key->hash, name);
  /* O_NONBLOCK: opening a FIFO for reading would wait for a writer forever */
  int fd = openat(c->dirfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return errno == ENOENT ? DISK_MISS : reject(c, key, name, errno_status("cannot open", name));
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    return reject(c, key, name, tpurt_status_create(TPURT_DATA_LOSS, "not a regular file"));
  }
  if (st.st_uid != geteuid()) {
    close(fd);
    return reject(
        c, key, name,
        tpurt_status_create(TPURT_PERMISSION_DENIED, "it belongs to uid %u, not to this user (uid %u)",
                            (unsigned)st.st_uid, (unsigned)geteuid()));
  }
  if (st.st_mode & (S_IWGRP | S_IWOTH)) {
    close(fd);
    return reject(c, key, name,
                  tpurt_status_create(TPURT_PERMISSION_DENIED, "it is writable by others (mode %04o)",
                                      (unsigned)(st.st_mode & 07777)));
  }
  /* reads of a regular file never block anyway; dropping the flag is tidiness */
  int flags = fcntl(fd, F_GETFL);
  if (flags >= 0) (void)fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
  header_t h;
  if (st.st_size < HEADER_SIZE || read_all(fd, &h, sizeof(h)) != sizeof(h)) {
    close(fd);
    return reject(c, key, name,
                  tpurt_status_create(TPURT_DATA_LOSS, "truncated (%lld bytes)", (long long)st.st_size));
  }
  tpurt_status_t why = check_header(&h, key, (uint64_t)st.st_size);
  if (why) {
    close(fd);
    return reject(c, key, name, why);
  }
  size_t size = (size_t)h.payload_size;
  char* payload = tpurt_xmalloc(size ? size : 1);
  size_t got = read_all(fd, payload, size);
  close(fd);
  if (got != size) {
    why =
        tpurt_status_create(TPURT_DATA_LOSS, "truncated while reading (%zu of %zu payload bytes)", got, size);
  } else {
    unsigned char mac[32];
    entry_mac(c->secret, &h, payload, size, mac);
    why = cache_mac_equal(mac, h.mac)
              ? NULL
              : tpurt_status_create(TPURT_DATA_LOSS,
                                    "its MAC does not check under this cache's key: corrupt, forged, or "
                                    "copied from another cache (import one with `python -m torch_tpu cache "
                                    "import DIR`)");
  }
  if (why) {
    free(payload);
    return reject(c, key, name, why);
  }
  /* mtime is the entry's last use: the size cap evicts by it */
  (void)utimensat(c->dirfd, name, NULL, 0); /* a read-only directory still serves hits */
  *out_payload = payload;
  *out_payload_size = size;
  return DISK_HIT;
}

disk_result_t disk_load(const disk_config_t* c, const cache_key_t* key, pjrt_executable_t** out_executable,
                        size_t* out_payload_size) {
  *out_executable = NULL;
  char* payload = NULL;
  disk_result_t found = disk_load_bytes(c, key, &payload, out_payload_size);
  if (found != DISK_HIT) return found;
  tpurt_status_t why = tpurt_status_annotate_consume(
      pjrt_executable_deserialize(payload, *out_payload_size, out_executable), "the plugin cannot load it");
  free(payload);
  if (why) {
    char name[32];
    entry_name(key->hash, name);
    *out_payload_size = 0;
    return reject(c, key, name, why);
  }
  return DISK_HIT;
}

bool disk_has(const disk_config_t* c, const cache_key_t* key) {
  if (c->dirfd < 0) return false;
  char name[32];
  entry_name(key->hash, name);
  struct stat st;
  return fstatat(c->dirfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode);
}

size_t disk_store(const disk_config_t* c, const cache_key_t* key, pjrt_executable_t* executable) {
  if (c->dirfd < 0) return 0;
  char* payload = NULL;
  size_t size = 0;
  tpurt_status_t status = pjrt_executable_serialize(executable, &payload, &size);
  if (status) {
    if (first_flag(&g_warned_serialize))
      cache_warn("the plugin cannot serialise programs (%s); the disk cache stays empty",
                 tpurt_status_message(status));
    tpurt_status_free(status);
    return 0;
  }
  size_t stored = disk_store_bytes(c, key, payload, size);
  free(payload);
  return stored;
}

size_t disk_store_bytes(const disk_config_t* c, const cache_key_t* key, const char* payload, size_t size) {
  if (c->dirfd < 0) return 0;
  tpurt_status_t status = NULL;
  header_t h;
  memset(&h, 0, sizeof(h));
  memcpy(h.magic, kMagic, sizeof(kMagic));
  h.version = DISK_FORMAT_VERSION;
  h.header_size = HEADER_SIZE;
  h.key_hash = key->hash;
  h.key_digest = key->digest;
  h.payload_size = size;
  cache_key_sha256(key, h.key_sha256);
  entry_mac(c->secret, &h, payload, size, h.mac);
  h.header_checksum = header_checksum(&h);
  char name[32];
  entry_name(key->hash, name);
  status = disk_write_atomic(c->dirfd, name, &h, sizeof(h), payload, size);
  if (status) {
    if (first_flag(&g_warned_write))
      cache_warn("cannot write to the executable cache directory '%s': %s", c->dir,
                 tpurt_status_message(status));
    tpurt_status_free(status);
    return 0;
  }
  uint64_t written = size + HEADER_SIZE;
  if (c->cap_bytes && __atomic_add_fetch(&g_disk_bytes, written, __ATOMIC_RELAXED) > c->cap_bytes)
    (void)disk_enforce_cap(c);
  return size;
}

void disk_usage(int dirfd, uint64_t* out_entries, uint64_t* out_bytes) {
  *out_entries = *out_bytes = 0;
  if (dirfd < 0) return;
  int fd = dup(dirfd);
  if (fd < 0) return;
  DIR* d = fdopendir(fd);
  if (!d) {
    close(fd);
    return;
  }
  rewinddir(d); /* the duplicate shares the original's offset */
  const size_t suffix = strlen(ENTRY_SUFFIX);
  for (struct dirent* e; (e = readdir(d)) != NULL;) {
    size_t n = strlen(e->d_name);
    if (e->d_name[0] == '.' || n <= suffix || strcmp(e->d_name + n - suffix, ENTRY_SUFFIX) != 0) continue;
    struct stat st;
    if (fstatat(dirfd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode)) continue;
    ++*out_entries;
    *out_bytes += (uint64_t)st.st_size;
  }
  closedir(d);
}

/*===--- the size cap and stale temporaries ---===*/

typedef struct scanned_s {
  char name[32];
  uint64_t bytes;
  struct timespec used;
} scanned_t;

static int by_last_use(const void* pa, const void* pb) {
  const scanned_t *a = pa, *b = pb;
  if (a->used.tv_sec != b->used.tv_sec) return a->used.tv_sec < b->used.tv_sec ? -1 : 1;
  if (a->used.tv_nsec != b->used.tv_nsec) return a->used.tv_nsec < b->used.tv_nsec ? -1 : 1;
  return strcmp(a->name, b->name);
}

static DIR* open_listing(int dirfd) {
  int fd = dup(dirfd);
  if (fd < 0) return NULL;
  DIR* d = fdopendir(fd);
  if (!d) {
    close(fd);
    return NULL;
  }
  rewinddir(d); /* the duplicate shares the original's offset */
  return d;
}

static bool is_entry_name(const char* n) {
  const size_t len = strlen(n), suffix = strlen(ENTRY_SUFFIX);
  return n[0] != '.' && len > suffix && len < 32 && strcmp(n + len - suffix, ENTRY_SUFFIX) == 0;
}

uint64_t disk_enforce_cap(const disk_config_t* c) {
  if (c->dirfd < 0) return 0;
  DIR* d = open_listing(c->dirfd);
  if (!d) return 0;
  scanned_t* items = NULL;
  size_t n = 0, cap = 0;
  uint64_t total = 0;
  for (struct dirent* e; (e = readdir(d)) != NULL;) {
    if (!is_entry_name(e->d_name)) continue;
    struct stat st;
    if (fstatat(c->dirfd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode)) continue;
    if (n == cap) {
      cap = cap ? 2 * cap : 256;
      items = tpurt_xrealloc(items, cap * sizeof(*items));
    }
    memcpy(items[n].name, e->d_name, strlen(e->d_name) + 1); /* is_entry_name: shorter than 32 */
    items[n].bytes = (uint64_t)st.st_size;
    items[n].used = st.st_mtim;
    total += items[n].bytes;
    ++n;
  }
  closedir(d);
  uint64_t removed = 0;
  if (c->cap_bytes && total > c->cap_bytes) {
    qsort(items, n, sizeof(*items), by_last_use);
    const uint64_t target = c->cap_bytes / 10 * 9;
    for (size_t i = 0; i < n && total > target; ++i) {
      if (unlinkat(c->dirfd, items[i].name, 0) != 0) continue;
      total -= items[i].bytes;
      ++removed;
    }
  }
  free(items);
  __atomic_store_n(&g_disk_bytes, total, __ATOMIC_RELAXED);
  return removed;
}

/* ".tmp.<entry>.<pid>.<n>": stale when its writer is gone or it is old. */
static bool tmp_is_stale(const char* name, const struct stat* st, time_t now) {
  if (now - st->st_mtim.tv_sec > 3600) return true;
  const char* dot = strrchr(name, '.');
  if (!dot || dot == name) return false;
  const char* p = dot - 1;
  while (p > name && *p >= '0' && *p <= '9') --p;
  if (*p != '.' || p + 1 == dot) return false;
  long pid = strtol(p + 1, NULL, 10);
  return pid > 0 && kill((pid_t)pid, 0) != 0 && errno == ESRCH;
}

uint64_t disk_clean_stale(const disk_config_t* c) {
  if (c->dirfd < 0) return 0;
  DIR* d = open_listing(c->dirfd);
  if (!d) return 0;
  time_t now = time(NULL);
  uint64_t removed = 0;
  for (struct dirent* e; (e = readdir(d)) != NULL;) {
    if (strncmp(e->d_name, ".tmp.", 5) != 0) continue;
    struct stat st;
    if (fstatat(c->dirfd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode)) continue;
    if (tmp_is_stale(e->d_name, &st, now) && unlinkat(c->dirfd, e->d_name, 0) == 0) ++removed;
  }
  closedir(d);
  return removed;
}

/*===--- import: a cache copied from elsewhere ---===*/

/* Checks one source entry |name| (read whole into |data|) and returns the
** payload's bounds; NULL if it may be imported. */
static TPURT_MUST_USE tpurt_status_t check_import(const unsigned char source_secret[32], const char* name,
                                                  const char* data, size_t size, header_t* out_header) {
  if (size < HEADER_SIZE) return tpurt_status_create(TPURT_DATA_LOSS, "truncated (%zu bytes)", size);
  memcpy(out_header, data, sizeof(*out_header));
  const header_t* h = out_header;
  TPURT_RETURN_IF_ERROR(check_header_frame(h));
  char expected[32];
  entry_name(h->key_hash, expected);
  if (strcmp(expected, name) != 0)
    return tpurt_status_create(TPURT_DATA_LOSS, "its header names another entry (%s)", expected);
  if (size - HEADER_SIZE != h->payload_size)
    return tpurt_status_create(TPURT_DATA_LOSS, "%zu payload bytes where its header says %" PRIu64,
                               size - HEADER_SIZE, h->payload_size);
  unsigned char mac[32];
  entry_mac(source_secret, h, data + HEADER_SIZE, size - HEADER_SIZE, mac);
  if (!cache_mac_equal(mac, h->mac))
    return tpurt_status_create(TPURT_DATA_LOSS, "its MAC does not check under the source's key");
  pjrt_executable_t* exe = NULL;
  TPURT_RETURN_IF_ERROR(
      tpurt_status_annotate_consume(pjrt_executable_deserialize(data + HEADER_SIZE, size - HEADER_SIZE, &exe),
                                    "the plugin cannot load it"));
  pjrt_executable_release(exe);
  return NULL;
}

/* Reads the regular file |dirfd|/|name| whole (at most 4 GiB). */
static TPURT_MUST_USE tpurt_status_t read_entry_file(int dirfd, const char* name, char** out_data,
                                                     size_t* out_size) {
  *out_data = NULL;
  *out_size = 0;
  int fd = openat(dirfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return errno_status("cannot open", name);
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size > ((off_t)4 << 30)) {
    close(fd);
    return tpurt_status_create(TPURT_DATA_LOSS, "not a regular file of at most 4 GiB");
  }
  size_t size = (size_t)st.st_size;
  char* data = tpurt_xmalloc(size ? size : 1);
  size_t got = read_all(fd, data, size);
  close(fd);
  if (got != size) {
    free(data);
    return tpurt_status_create(TPURT_DATA_LOSS, "read %zu of %zu bytes", got, size);
  }
  *out_data = data;
  *out_size = size;
  return NULL;
}

tpurt_status_t disk_import(const disk_config_t* c, const char* source_dir, disk_import_t* out) {
  memset(out, 0, sizeof(*out));
  if (c->dirfd < 0)
    return tpurt_status_create(TPURT_FAILED_PRECONDITION, "this process has no disk cache to import into: %s",
                               c->refused ? c->refused : "it is off");
  int src = open(source_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (src < 0) return errno_status("cannot open", source_dir);
  unsigned char source_secret[32];
  tpurt_status_t status = read_secret(src, false, source_secret);
  if (status) {
    close(src);
    return tpurt_status_annotate_consume(
        status,
        "the source must be a torch_tpu cache directory with its key: each entry is checked under it");
  }
  DIR* d = open_listing(src);
  if (!d) {
    close(src);
    return errno_status("cannot list", source_dir);
  }
  for (struct dirent* e; (e = readdir(d)) != NULL;) {
    if (!is_entry_name(e->d_name)) continue;
    char* data = NULL;
    size_t size = 0;
    header_t h;
    tpurt_status_t why = read_entry_file(src, e->d_name, &data, &size);
    if (!why) why = check_import(source_secret, e->d_name, data, size, &h);
    if (!why) {
      entry_mac(c->secret, &h, data + HEADER_SIZE, size - HEADER_SIZE, h.mac);
      h.header_checksum = header_checksum(&h);
      why = disk_write_atomic(c->dirfd, e->d_name, &h, sizeof(h), data + HEADER_SIZE, size - HEADER_SIZE);
    }
    free(data);
    if (why) {
      cache_warn("not importing '%s/%s': %s", source_dir, e->d_name, tpurt_status_message(why));
      tpurt_status_free(why);
      ++out->refused;
    } else {
      ++out->imported;
    }
  }
  closedir(d);
  close(src);
  memset(source_secret, 0, sizeof(source_secret));
  if (c->cap_bytes) (void)disk_enforce_cap(c);
  return NULL;
}
