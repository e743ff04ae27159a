/* signature.c: an op's structural signature, the plan cache's key.
**
** Only a change of op, dtype, shape, view layout or attribute makes a new
** signature; scalar values and buffer identities never do (a rule that
** keys on numbers adds them). Built for every op, so it pushes words into
** the op's own inline buffer and hashes them in one pass.
*/
#include "op_internal.h"

void sig_init(sig_t* s) {
  s->w = s->inline_w;
  s->n = 0;
  s->cap = sizeof(s->inline_w) / sizeof(s->inline_w[0]);
}

void sig_free(sig_t* s) {
  if (s->w != s->inline_w) free(s->w);
  sig_init(s);
}

static void sig_push(sig_t* s, uint64_t v) {
  if (s->n == s->cap) {
    s->cap *= 2;
    if (s->w == s->inline_w) {
      s->w = tpurt_xmalloc(s->cap * sizeof(uint64_t));
      memcpy(s->w, s->inline_w, sizeof(s->inline_w));
    } else {
      s->w = tpurt_xrealloc(s->w, s->cap * sizeof(uint64_t));
    }
  }
  s->w[s->n++] = v;
}

int32_t sig_storage_class(const tpurt_op_call_t* call, int32_t flat) {
  const tpurt_storage_t* st = call->args[flat].u.tensor.storage;
  for (int32_t j = 0; j < flat; ++j)
    if (call->args[j].kind == TPURT_ARG_TENSOR && call->args[j].u.tensor.storage == st) return j;
  return flat;
}

/* The facts of a number the key records (see lower_number_fact). */
static uint64_t number_facts(const tpurt_arg_t* a) {
  double v = tpurt_dtype_is_float(a->u.scalar.dtype) ? a->u.scalar.f : (double)a->u.scalar.i;
  return lower_number_fact(v, a->u.scalar.tier);
}

void sig_build(const tpurt_op_call_t* call, bool numbers_in_key, sig_t* s) {
  s->n = 0;
  sig_push(s, tpurt_hash_str(TPURT_HASH_SEED, call->name));
  sig_push(s, (uint64_t)call->matmul_precision);
  for (int32_t i = 0; i < call->num_args; ++i) {
    const tpurt_arg_t* a = &call->args[i];
    sig_push(s, (uint64_t)a->kind | ((uint64_t)a->is_write << 8));
    switch (a->kind) {
      case TPURT_ARG_TENSOR: {
        const tpurt_tensor_t* t = &a->u.tensor;
        sig_push(
            s, (uint64_t)t->dtype | ((uint64_t)t->rank << 8) | ((uint64_t)sig_storage_class(call, i) << 16));
        for (int32_t d = 0; d < t->rank; ++d) {
          sig_push(s, (uint64_t)t->sizes[d]);
          sig_push(s, (uint64_t)t->strides[d]);
        }
        sig_push(s, (uint64_t)(t->offset != 0)); /* where a view starts is a runtime value */
        const pjrt_buffer_t* b = t->storage->buffer;
        if (!b) {
          sig_push(s, 0xE0E0E0E0ULL);
          sig_push(s, t->storage->nbytes);
        } else {
          sig_push(s, (uint64_t)b->dtype | ((uint64_t)b->rank << 8));
          for (int32_t d = 0; d < b->rank; ++d) sig_push(s, (uint64_t)b->dims[d]);
          if (b->sharding) sig_push(s, pjrt_sharding_hash(b->sharding)); /* a new layout is a new program */
        }
        break;
      }
      case TPURT_ARG_SCALAR:
      case TPURT_ARG_FLOAT:
        sig_push(s,
                 (uint64_t)a->u.scalar.dtype | ((uint64_t)a->u.scalar.tier << 8) | (number_facts(a) << 16));
        if (numbers_in_key) {
          uint64_t bits;
          memcpy(&bits, &a->u.scalar.f, 8);
          sig_push(s, bits);
          sig_push(s, (uint64_t)a->u.scalar.i);
        }
        break;
      case TPURT_ARG_INT:
      case TPURT_ARG_BOOL:
      case TPURT_ARG_DTYPE:
        sig_push(s, (uint64_t)a->u.i);
        break;
      case TPURT_ARG_INT_LIST:
        sig_push(s, (uint64_t)a->u.ints.len);
        for (int32_t k = 0; k < a->u.ints.len; ++k) sig_push(s, (uint64_t)a->u.ints.data[k]);
        break;
      case TPURT_ARG_STRING:
        sig_push(s, tpurt_hash_str(TPURT_HASH_SEED, a->u.str ? a->u.str : ""));
        break;
      case TPURT_ARG_TENSOR_LIST:
        sig_push(s, (uint64_t)a->u.list_len);
        break;
      case TPURT_ARG_FLOAT_LIST: /* values are parameters; only the length shapes the program */
        sig_push(s, (uint64_t)a->u.floats.len);
        break;
      default:
        break;
    }
  }
}

uint64_t sig_hash(const sig_t* s) {
  uint64_t h = TPURT_HASH_SEED;
  for (size_t i = 0; i < s->n; ++i) h = tpurt_hash_u64(h, s->w[i]);
  return h;
}
