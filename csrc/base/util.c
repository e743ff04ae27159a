/* util.c: dtype facts, checked host allocation, strings, arena, hashing. */
#include <stdio.h>

#include "base.h"

/* The Makefile passes the package's version (torch_tpu/_version.py). */
#ifndef TPURT_VERSION
#error "TPURT_VERSION is defined by the Makefile from torch_tpu/_version.py"
#endif
const char* tpurt_version(void) { return TPURT_VERSION; }

/*===--- dtypes ---===*/

static const struct {
  size_t size;
  const char* name;
} kDtypeInfo[TPURT_DTYPE_COUNT] = {
    [TPURT_DTYPE_INVALID] = {0, "Invalid"},
    [TPURT_DTYPE_BOOL] = {1, "Bool"},
    [TPURT_DTYPE_U8] = {1, "Byte"},
    [TPURT_DTYPE_I8] = {1, "Char"},
    [TPURT_DTYPE_I16] = {2, "Short"},
    [TPURT_DTYPE_I32] = {4, "Int"},
    [TPURT_DTYPE_I64] = {8, "Long"},
    [TPURT_DTYPE_F16] = {2, "Half"},
    [TPURT_DTYPE_BF16] = {2, "BFloat16"},
    [TPURT_DTYPE_F32] = {4, "Float"},
    [TPURT_DTYPE_F64] = {8, "Double"},
    [TPURT_DTYPE_U16] = {2, "UInt16"},
    [TPURT_DTYPE_U32] = {4, "UInt32"},
    [TPURT_DTYPE_U64] = {8, "UInt64"},
    [TPURT_DTYPE_F8E4M3FN] = {1, "Float8_e4m3fn"},
    [TPURT_DTYPE_F8E5M2] = {1, "Float8_e5m2"},
    [TPURT_DTYPE_F8E4M3FNUZ] = {1, "Float8_e4m3fnuz"},
    [TPURT_DTYPE_F8E5M2FNUZ] = {1, "Float8_e5m2fnuz"},
    [TPURT_DTYPE_C64] = {8, "ComplexFloat"},
    [TPURT_DTYPE_C128] = {16, "ComplexDouble"},
};

size_t tpurt_dtype_size(tpurt_dtype_t dtype) {
  return (dtype > 0 && dtype < TPURT_DTYPE_COUNT) ? kDtypeInfo[dtype].size : 0;
}

const char* tpurt_dtype_name(tpurt_dtype_t dtype) {
  return (dtype >= 0 && dtype < TPURT_DTYPE_COUNT) ? kDtypeInfo[dtype].name : "Invalid";
}

bool tpurt_dtype_is_float8(tpurt_dtype_t dtype) {
  return dtype == TPURT_DTYPE_F8E4M3FN || dtype == TPURT_DTYPE_F8E5M2 || dtype == TPURT_DTYPE_F8E4M3FNUZ ||
         dtype == TPURT_DTYPE_F8E5M2FNUZ;
}

bool tpurt_dtype_is_complex(tpurt_dtype_t dtype) {
  return dtype == TPURT_DTYPE_C64 || dtype == TPURT_DTYPE_C128;
}

tpurt_dtype_t tpurt_dtype_to_real(tpurt_dtype_t dtype) {
  if (dtype == TPURT_DTYPE_C64) return TPURT_DTYPE_F32;
  if (dtype == TPURT_DTYPE_C128) return TPURT_DTYPE_F64;
  return dtype;
}

tpurt_dtype_t tpurt_dtype_to_complex(tpurt_dtype_t dtype) {
  if (tpurt_dtype_is_complex(dtype)) return dtype;
  return dtype == TPURT_DTYPE_F64 ? TPURT_DTYPE_C128 : TPURT_DTYPE_C64;
}

bool tpurt_dtype_is_float(tpurt_dtype_t dtype) {
  return dtype == TPURT_DTYPE_F16 || dtype == TPURT_DTYPE_BF16 || dtype == TPURT_DTYPE_F32 ||
         dtype == TPURT_DTYPE_F64 || tpurt_dtype_is_float8(dtype);
}

bool tpurt_dtype_is_unsigned(tpurt_dtype_t dtype) {
  return dtype == TPURT_DTYPE_U8 || dtype == TPURT_DTYPE_U16 || dtype == TPURT_DTYPE_U32 ||
         dtype == TPURT_DTYPE_U64;
}

bool tpurt_dtype_is_signed_int(tpurt_dtype_t dtype) {
  return dtype == TPURT_DTYPE_I8 || dtype == TPURT_DTYPE_I16 || dtype == TPURT_DTYPE_I32 ||
         dtype == TPURT_DTYPE_I64;
}

bool tpurt_dtype_is_integral(tpurt_dtype_t dtype) {
  return tpurt_dtype_is_unsigned(dtype) || tpurt_dtype_is_signed_int(dtype);
}

/*===--- host memory ---===*/

static void* check_alloc(void* p, size_t size) {
  if (!p && size) {
    fprintf(stderr, "tpurt: out of host memory allocating %zu bytes\n", size);
    abort();
  }
  return p;
}

void* tpurt_xmalloc(size_t size) { return check_alloc(malloc(size ? size : 1), size); }
void* tpurt_xcalloc(size_t count, size_t size) {
  return check_alloc(calloc(count ? count : 1, size ? size : 1), count * size);
}
void* tpurt_xrealloc(void* ptr, size_t size) { return check_alloc(realloc(ptr, size ? size : 1), size); }
void tpurt_copy_str(char* dst, size_t cap, const char* src) {
  size_t n = src ? strnlen(src, cap - 1) : 0;
  if (n) memcpy(dst, src, n);
  dst[n] = '\0';
}
char* tpurt_xstrdup(const char* s) {
  size_t n = strlen(s) + 1;
  return memcpy(tpurt_xmalloc(n), s, n);
}

/*===--- string buffer ---===*/

void tpurt_strbuf_append(tpurt_strbuf_t* buf, const char* s, size_t n) {
  if (buf->size + n + 1 > buf->capacity) {
    size_t cap = buf->capacity ? buf->capacity * 2 : 256;
    while (cap < buf->size + n + 1) cap *= 2;
    buf->data = tpurt_xrealloc(buf->data, cap);
    buf->capacity = cap;
  }
  memcpy(buf->data + buf->size, s, n);
  buf->size += n;
  buf->data[buf->size] = '\0';
}

void tpurt_strbuf_puts(tpurt_strbuf_t* buf, const char* s) { tpurt_strbuf_append(buf, s, strlen(s)); }

void tpurt_strbuf_put_i64(tpurt_strbuf_t* buf, int64_t value) {
  char text[24], *end = text + sizeof(text), *p = end;
  uint64_t u = value < 0 ? 0 - (uint64_t)value : (uint64_t)value;
  do {
    *--p = (char)('0' + u % 10);
    u /= 10;
  } while (u);
  if (value < 0) *--p = '-';
  tpurt_strbuf_append(buf, p, (size_t)(end - p));
}

void tpurt_strbuf_put_hex(tpurt_strbuf_t* buf, uint64_t value, int32_t digits) {
  char text[16];
  if (digits < 1) digits = 1;
  if (digits > 16) digits = 16;
  for (int32_t i = digits - 1; i >= 0; --i, value >>= 4) text[i] = "0123456789ABCDEF"[value & 15];
  tpurt_strbuf_append(buf, text, (size_t)digits);
}

void tpurt_strbuf_printf(tpurt_strbuf_t* buf, const char* fmt, ...) {
  char small[256];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(small, sizeof(small), fmt, ap);
  va_end(ap);
  if (n < 0) return;
  if ((size_t)n < sizeof(small)) {
    tpurt_strbuf_append(buf, small, (size_t)n);
    return;
  }
  char* big = tpurt_xmalloc((size_t)n + 1);
  va_start(ap, fmt);
  vsnprintf(big, (size_t)n + 1, fmt, ap);
  va_end(ap);
  tpurt_strbuf_append(buf, big, (size_t)n);
  free(big);
}

void tpurt_strbuf_free(tpurt_strbuf_t* buf) {
  free(buf->data);
  buf->data = NULL;
  buf->size = buf->capacity = 0;
}

/*===--- arena ---===*/

struct tpurt_arena_block_s {
  tpurt_arena_block_t* next;
  size_t used, capacity;
  _Alignas(16) unsigned char data[];
};

void* tpurt_arena_alloc(tpurt_arena_t* arena, size_t size) {
  size = (size + 15) & ~(size_t)15;
  tpurt_arena_block_t* block = arena->head;
  if (!block || block->used + size > block->capacity) {
    size_t cap = size > 16384 ? size : 16384;
    block = tpurt_xmalloc(sizeof(*block) + cap);
    block->next = arena->head;
    block->used = 0;
    block->capacity = cap;
    arena->head = block;
  }
  void* p = block->data + block->used;
  block->used += size;
  memset(p, 0, size);
  return p;
}

char* tpurt_arena_strdup(tpurt_arena_t* arena, const char* s) {
  size_t n = strlen(s) + 1;
  return memcpy(tpurt_arena_alloc(arena, n), s, n);
}

void tpurt_arena_free(tpurt_arena_t* arena) {
  tpurt_arena_block_t* block = arena->head;
  while (block) {
    tpurt_arena_block_t* next = block->next;
    free(block);
    block = next;
  }
  arena->head = NULL;
}

/*===--- hashing ---===*/

uint64_t tpurt_hash_bytes(uint64_t h, const void* data, size_t n) {
  const unsigned char* p = data;
  for (size_t i = 0; i < n; ++i) {
    h ^= p[i];
    h *= 0x100000001b3ULL;
  }
  return h;
}

uint64_t tpurt_hash_u64(uint64_t h, uint64_t v) {
  /* one multiply-xorshift round per word: cheaper than 8 FNV steps */
  h ^= v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
  h *= 0xff51afd7ed558ccdULL;
  return h ^ (h >> 33);
}

uint64_t tpurt_hash_str(uint64_t h, const char* s) { return tpurt_hash_bytes(h, s, strlen(s) + 1); }
