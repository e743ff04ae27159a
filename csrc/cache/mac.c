/* mac.c: HMAC-SHA256, which binds a disk-cache entry to its key.
**
** Written from the standards: SHA-256 from FIPS 180-4 (section 4.1.2 for the
** functions, 4.2.2 for the constants, 5.1.1 for the padding, 6.2 for the
** computation) and HMAC from RFC 2104 (key longer than a block hashed
** first, then ipad 0x36 and opad 0x5c). Checked against the FIPS examples
** and RFC 4231's test cases in csrc/tests/cache_test.c. Not fast (about
** 200 MB/s on one core), and it needs not be: it runs only when an entry is
** read from or written to disk, next to a plugin call that costs more. */
#include "cache_internal.h"

/* FIPS 180-4 4.2.2: the first 32 bits of the fractional parts of the cube
** roots of the first 64 primes. */
static const uint32_t kRound[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
};

static inline uint32_t rotr(uint32_t x, int n) { return (x >> n) | (x << (32 - n)); }

/* FIPS 180-4 6.2.2: one 64-byte block into the state. */
static void compress(uint32_t state[8], const unsigned char block[64]) {
  uint32_t w[64];
  for (int t = 0; t < 16; ++t) {
    w[t] = (uint32_t)block[4 * t] << 24 | (uint32_t)block[4 * t + 1] << 16 | (uint32_t)block[4 * t + 2] << 8 |
           (uint32_t)block[4 * t + 3];
  }
  for (int t = 16; t < 64; ++t) {
    uint32_t s0 = rotr(w[t - 15], 7) ^ rotr(w[t - 15], 18) ^ (w[t - 15] >> 3);
    uint32_t s1 = rotr(w[t - 2], 17) ^ rotr(w[t - 2], 19) ^ (w[t - 2] >> 10);
    w[t] = s1 + w[t - 7] + s0 + w[t - 16];
  }
  uint32_t a = state[0], b = state[1], c = state[2], d = state[3];
  uint32_t e = state[4], f = state[5], g = state[6], h = state[7];
  for (int t = 0; t < 64; ++t) {
    uint32_t big1 = rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25);
    uint32_t ch = (e & f) ^ (~e & g);
    uint32_t t1 = h + big1 + ch + kRound[t] + w[t];
    uint32_t big0 = rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22);
    uint32_t maj = (a & b) ^ (a & c) ^ (b & c);
    uint32_t t2 = big0 + maj;
    h = g;
    g = f;
    f = e;
    e = d + t1;
    d = c;
    c = b;
    b = a;
    a = t1 + t2;
  }
  state[0] += a;
  state[1] += b;
  state[2] += c;
  state[3] += d;
  state[4] += e;
  state[5] += f;
  state[6] += g;
  state[7] += h;
}

void cache_sha256_init(cache_sha256_t* s) {
  /* FIPS 180-4 5.3.3: the fractional parts of the square roots of the first 8 primes */
  static const uint32_t kInitial[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                                       0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
  memcpy(s->state, kInitial, sizeof(kInitial));
  s->length = 0;
  s->used = 0;
}

void cache_sha256_update(cache_sha256_t* s, const void* data, size_t n) {
  const unsigned char* p = data;
  s->length += n;
  if (s->used) {
    size_t take = 64 - s->used < n ? 64 - s->used : n;
    memcpy(s->block + s->used, p, take);
    s->used += take;
    p += take;
    n -= take;
    if (s->used < 64) return;
    compress(s->state, s->block);
    s->used = 0;
  }
  for (; n >= 64; p += 64, n -= 64) compress(s->state, p);
  if (n) memcpy(s->block, p, n);
  s->used = n;
}

void cache_sha256_final(cache_sha256_t* s, unsigned char out[32]) {
  /* FIPS 180-4 5.1.1: a 1 bit, zeros to 56 mod 64 bytes, the bit length big-endian */
  const uint64_t bits = s->length * 8;
  s->block[s->used++] = 0x80;
  if (s->used > 56) {
    memset(s->block + s->used, 0, 64 - s->used);
    compress(s->state, s->block);
    s->used = 0;
  }
  memset(s->block + s->used, 0, 56 - s->used);
  for (int i = 0; i < 8; ++i) s->block[56 + i] = (unsigned char)(bits >> (56 - 8 * i));
  compress(s->state, s->block);
  for (int i = 0; i < 8; ++i) {
    out[4 * i] = (unsigned char)(s->state[i] >> 24);
    out[4 * i + 1] = (unsigned char)(s->state[i] >> 16);
    out[4 * i + 2] = (unsigned char)(s->state[i] >> 8);
    out[4 * i + 3] = (unsigned char)s->state[i];
  }
}

/* RFC 2104: K0 is the key, hashed when longer than a block, zero-padded to
** 64 bytes; H((K0 ^ opad) || H((K0 ^ ipad) || text)). */
void cache_hmac_init(cache_hmac_t* m, const void* key, size_t key_size) {
  unsigned char k0[64] = {0};
  if (key_size > 64) {
    cache_sha256_t s;
    cache_sha256_init(&s);
    cache_sha256_update(&s, key, key_size);
    cache_sha256_final(&s, k0);
  } else if (key_size) {
    memcpy(k0, key, key_size);
  }
  unsigned char pad[64];
  for (int i = 0; i < 64; ++i) pad[i] = k0[i] ^ 0x36;
  cache_sha256_init(&m->inner);
  cache_sha256_update(&m->inner, pad, 64);
  for (int i = 0; i < 64; ++i) pad[i] = k0[i] ^ 0x5c;
  cache_sha256_init(&m->outer);
  cache_sha256_update(&m->outer, pad, 64);
}

void cache_hmac_update(cache_hmac_t* m, const void* data, size_t n) {
  cache_sha256_update(&m->inner, data, n);
}

void cache_hmac_final(cache_hmac_t* m, unsigned char out[32]) {
  unsigned char inner[32];
  cache_sha256_final(&m->inner, inner);
  cache_sha256_update(&m->outer, inner, sizeof(inner));
  cache_sha256_final(&m->outer, out);
}

bool cache_mac_equal(const unsigned char a[32], const unsigned char b[32]) {
  unsigned char diff = 0; /* every byte, so the time says nothing of where they differ */
  for (int i = 0; i < 32; ++i) diff |= a[i] ^ b[i];
  return diff == 0;
}
