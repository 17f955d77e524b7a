// Distance keys for the HNSW graph: smaller is better. key = -ip for ip and
// cosine (rows are unit-normalised on add, so cosine is ip), key = squared l2
// for l2. The batch form scores the unvisited neighbours of one node in one
// call: rows live in fixed-stride records, and the next rows are prefetched
// while the current one is scored.
#pragma once

#include <immintrin.h>

#include <cstddef>
#include <cstdint>

#include "vecsift/kernels/cpu.hpp"
#include "vecsift/kernels/distance.hpp"

namespace vecsift {

// out[i] = key(q, row ids[i]); a row is at base + ids[i] * stride.
using BatchKeyFn = void (*)(const float* q, const char* base, size_t stride, const uint32_t* ids, size_t cnt,
                            size_t d, float* out);
using PairKeyFn = float (*)(const float* a, const float* b, size_t d);

constexpr size_t kPrefetchAhead = 3;  // rows in flight ahead of the one being scored

inline void prefetch_row(const char* p, size_t bytes) {
  for (size_t o = 0; o < bytes; o += 64) _mm_prefetch(p + o, _MM_HINT_T0);
}

// ---------------------------------------------------------------- scalar / AVX2 (any d)
template <PairKeyFn Pair>
inline void batch_generic(const float* q, const char* base, size_t stride, const uint32_t* ids, size_t cnt, size_t d,
                          float* out) {
  const size_t bytes = d * sizeof(float);
  for (size_t i = 0; i < cnt && i < kPrefetchAhead; ++i) prefetch_row(base + ids[i] * stride, bytes);
  for (size_t i = 0; i < cnt; ++i) {
    if (i + kPrefetchAhead < cnt) prefetch_row(base + ids[i + kPrefetchAhead] * stride, bytes);
    out[i] = Pair(q, reinterpret_cast<const float*>(base + ids[i] * stride), d);
  }
}

inline float neg_ip_scalar(const float* a, const float* b, size_t d) { return -ip_scalar(a, b, d); }
__attribute__((target("avx2,fma"))) inline float neg_ip_avx2(const float* a, const float* b, size_t d) {
  return -ip_avx2(a, b, d);
}
__attribute__((target("avx512f,fma"))) inline float neg_ip_avx512(const float* a, const float* b, size_t d) {
  return -ip_avx512(a, b, d);
}

__attribute__((target("avx2,fma"))) inline void batch_ip_avx2(const float* q, const char* base, size_t stride,
                                                              const uint32_t* ids, size_t cnt, size_t d, float* out) {
  batch_generic<neg_ip_avx2>(q, base, stride, ids, cnt, d, out);
}
__attribute__((target("avx2,fma"))) inline void batch_l2_avx2(const float* q, const char* base, size_t stride,
                                                              const uint32_t* ids, size_t cnt, size_t d, float* out) {
  batch_generic<l2sq_avx2>(q, base, stride, ids, cnt, d, out);
}

// ---------------------------------------------------------------- AVX-512
// Generic d: the pair kernels of distance.hpp, inlined.
__attribute__((target("avx512f,fma"))) inline void batch_ip_avx512(const float* q, const char* base, size_t stride,
                                                                   const uint32_t* ids, size_t cnt, size_t d,
                                                                   float* out) {
  batch_generic<neg_ip_avx512>(q, base, stride, ids, cnt, d, out);
}
__attribute__((target("avx512f,fma"))) inline void batch_l2_avx512(const float* q, const char* base, size_t stride,
                                                                   const uint32_t* ids, size_t cnt, size_t d,
                                                                   float* out) {
  batch_generic<l2sq_avx512>(q, base, stride, ids, cnt, d, out);
}

// d <= 16*C: the query stays in C registers and the last 16-lane chunk is a
// masked load (no reads past the row).
template <int C, bool L2>
__attribute__((target("avx512f,fma"), always_inline)) inline float small_key_avx512(const __m512* qv, const float* r,
                                                                                      __mmask16 tail) {
  __m512 acc;
  if (L2) {
    __m512 t = _mm512_sub_ps(qv[0], C == 1 ? _mm512_maskz_loadu_ps(tail, r) : _mm512_loadu_ps(r));
    acc = _mm512_mul_ps(t, t);
    for (int c = 1; c < C; ++c) {
      __m512 x = c == C - 1 ? _mm512_maskz_loadu_ps(tail, r + 16 * c) : _mm512_loadu_ps(r + 16 * c);
      t = _mm512_sub_ps(qv[c], x);
      acc = _mm512_fmadd_ps(t, t, acc);
    }
    return _mm512_reduce_add_ps(acc);
  }
  acc = _mm512_mul_ps(qv[0], C == 1 ? _mm512_maskz_loadu_ps(tail, r) : _mm512_loadu_ps(r));
  for (int c = 1; c < C; ++c) {
    __m512 x = c == C - 1 ? _mm512_maskz_loadu_ps(tail, r + 16 * c) : _mm512_loadu_ps(r + 16 * c);
    acc = _mm512_fmadd_ps(qv[c], x, acc);
  }
  return -_mm512_reduce_add_ps(acc);
}

template <int C, bool L2>
__attribute__((target("avx512f,fma"))) inline void batch_small_avx512(const float* q, const char* base, size_t stride,
                                                                      const uint32_t* ids, size_t cnt, size_t d,
                                                                      float* out) {
  const unsigned rem = static_cast<unsigned>(d - 16 * (C - 1));
  const __mmask16 tail = static_cast<__mmask16>(rem >= 16 ? 0xFFFFu : (1u << rem) - 1u);
  __m512 qv[C];
  for (int c = 0; c < C - 1; ++c) qv[c] = _mm512_loadu_ps(q + 16 * c);
  qv[C - 1] = _mm512_maskz_loadu_ps(tail, q + 16 * (C - 1));
  const size_t bytes = d * sizeof(float);
  for (size_t i = 0; i < cnt && i < kPrefetchAhead; ++i) prefetch_row(base + ids[i] * stride, bytes);
  for (size_t i = 0; i < cnt; ++i) {
    if (i + kPrefetchAhead < cnt) prefetch_row(base + ids[i + kPrefetchAhead] * stride, bytes);
    out[i] = small_key_avx512<C, L2>(qv, reinterpret_cast<const float*>(base + ids[i] * stride), tail);
  }
}

struct GraphKernels {
  BatchKeyFn batch;
  PairKeyFn pair;
};

inline GraphKernels graph_kernels(Level level, bool l2, size_t d) {
  switch (level) {
    case Level::AVX512:
      if (d <= 64) {
        BatchKeyFn b;
        if (d <= 16) b = l2 ? batch_small_avx512<1, true> : batch_small_avx512<1, false>;
        else if (d <= 32) b = l2 ? batch_small_avx512<2, true> : batch_small_avx512<2, false>;
        else if (d <= 48) b = l2 ? batch_small_avx512<3, true> : batch_small_avx512<3, false>;
        else b = l2 ? batch_small_avx512<4, true> : batch_small_avx512<4, false>;
        return {b, l2 ? l2sq_avx512 : neg_ip_avx512};
      }
      return {l2 ? batch_l2_avx512 : batch_ip_avx512, l2 ? l2sq_avx512 : neg_ip_avx512};
    case Level::AVX2:
      return {l2 ? batch_l2_avx2 : batch_ip_avx2, l2 ? l2sq_avx2 : neg_ip_avx2};
    default:
      return {l2 ? batch_generic<l2sq_scalar> : batch_generic<neg_ip_scalar>, l2 ? l2sq_scalar : neg_ip_scalar};
  }
}

}  // namespace vecsift
