// int8 codes for the HNSW walk (HNSWGraph with codes = int8).
//
// A row x (unit length for cosine) is stored as c_i = round((x_i - mu_i) / s_i)
// clamped to [-127, 127], mu the per-dimension mean and s_i the per-dimension
// step (a high quantile of |x_i - mu_i| over 127), both fitted on the first
// rows added. A query q is turned once into w_i = q_i * s_i, quantised to
// int16 with one scale t: qq_i = round(w_i / t). Then
//
//     <q, x> ~ <q, mu> + t * S,    S = sum_i c_i * qq_i   (an exact integer)
//
// <q, mu> is the same for every row of one query, so the walk ranks by
// key = -t * S (ip, cosine) or |x|^2 - 2 t S (l2, |x|^2 stored per row), and
// the best candidates of the beam are rescored with the float32 rows.
//
// S is an integer sum, so every SIMD level returns the same S (tests compare
// scalar, AVX2 and AVX-512 against numpy exactly); the key is formed from it
// with the same two IEEE operations everywhere. Codes and queries are zero
// padded to a multiple of 32 dimensions; int32 lanes cannot overflow for
// dim <= 4096 (127 * 32767 * 4096 / 8 < 2^31 per lane), the limit enforced.
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>

#include "vecsift/kernels/cpu.hpp"

namespace vecsift {

constexpr size_t kCodeMaxDim = 4096;

inline size_t code_dim(size_t d) { return (d + 31) / 32 * 32; }

// ---------------------------------------------------------------- S = sum c_i * qq_i
inline int32_t code_dot_scalar(const int8_t* c, const int16_t* q, size_t cd) {
  int32_t s = 0;
  for (size_t i = 0; i < cd; ++i) s += static_cast<int32_t>(c[i]) * q[i];
  return s;
}

__attribute__((target("avx2"))) inline int32_t code_dot_avx2(const int8_t* c, const int16_t* q, size_t cd) {
  __m256i acc0 = _mm256_setzero_si256(), acc1 = _mm256_setzero_si256();
  for (size_t i = 0; i < cd; i += 32) {
    const __m256i c0 = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(c + i)));
    const __m256i c1 = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(c + i + 16)));
    acc0 = _mm256_add_epi32(acc0, _mm256_madd_epi16(c0, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + i))));
    acc1 = _mm256_add_epi32(acc1,
                            _mm256_madd_epi16(c1, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + i + 16))));
  }
  const __m256i acc = _mm256_add_epi32(acc0, acc1);
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(acc), _mm256_extracti128_si256(acc, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4E));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1));
  return _mm_cvtsi128_si32(s);
}

__attribute__((target("avx512f,avx512bw"))) inline int32_t code_dot_avx512(const int8_t* c, const int16_t* q,
                                                                            size_t cd) {
  __m512i acc = _mm512_setzero_si512();
  for (size_t i = 0; i < cd; i += 32) {
    const __m512i c16 = _mm512_cvtepi8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(c + i)));
    acc = _mm512_add_epi32(acc, _mm512_madd_epi16(c16, _mm512_loadu_si512(q + i)));
  }
  return _mm512_reduce_add_epi32(acc);
}

using CodeDotFn = int32_t (*)(const int8_t* c, const int16_t* q, size_t cd);

inline CodeDotFn code_dot_kernel(Level level) {
  switch (level) {
    case Level::AVX512: return code_dot_avx512;
    case Level::AVX2: return code_dot_avx2;
    default: return code_dot_scalar;
  }
}

// ---------------------------------------------------------------- keys over records
// A record holds [codes (cd bytes)] [|x|^2 float] [...]; keys for rows at base + ids[i] * stride.
struct CodeQuery {
  const int16_t* qq;
  float t;     // query scale
  bool l2;
  size_t cd;   // padded code dimension
};

inline float code_key(const CodeQuery& cq, int32_t s, float norm2) {
  float ts = cq.t * static_cast<float>(s);
  // Keep the product rounded on its own: no fused multiply-add at any level (bit-identical keys).
  __asm__("" : "+x"(ts));
  if (!cq.l2) return -ts;
  float two_ts = 2.0f * ts;
  __asm__("" : "+x"(two_ts));
  return norm2 - two_ts;
}

template <CodeDotFn Dot>
inline void code_batch(const CodeQuery& cq, const char* base, size_t stride, const uint32_t* ids, size_t cnt,
                       float* out) {
  constexpr size_t ahead = 3;
  const size_t bytes = cq.cd + 4;
  auto pf = [&](size_t i) {
    const char* p = base + static_cast<size_t>(ids[i]) * stride;
    for (size_t o = 0; o < bytes; o += 64) _mm_prefetch(p + o, _MM_HINT_T0);
  };
  for (size_t i = 0; i < cnt && i < ahead; ++i) pf(i);
  for (size_t i = 0; i < cnt; ++i) {
    if (i + ahead < cnt) pf(i + ahead);
    const char* r = base + static_cast<size_t>(ids[i]) * stride;
    float norm2;
    __builtin_memcpy(&norm2, r + cq.cd, 4);
    out[i] = code_key(cq, Dot(reinterpret_cast<const int8_t*>(r), cq.qq, cq.cd), norm2);
  }
}

using CodeBatchFn = void (*)(const CodeQuery& cq, const char* base, size_t stride, const uint32_t* ids, size_t cnt,
                             float* out);

__attribute__((target("avx2"))) inline void code_batch_avx2(const CodeQuery& cq, const char* base, size_t stride,
                                                            const uint32_t* ids, size_t cnt, float* out) {
  code_batch<code_dot_avx2>(cq, base, stride, ids, cnt, out);
}
__attribute__((target("avx512f,avx512bw"))) inline void code_batch_avx512(const CodeQuery& cq, const char* base,
                                                                          size_t stride, const uint32_t* ids,
                                                                          size_t cnt, float* out) {
  code_batch<code_dot_avx512>(cq, base, stride, ids, cnt, out);
}

inline CodeBatchFn code_batch_kernel(Level level) {
  switch (level) {
    case Level::AVX512: return code_batch_avx512;
    case Level::AVX2: return code_batch_avx2;
    default: return code_batch<code_dot_scalar>;
  }
}

// ---------------------------------------------------------------- encoding
// Row -> codes (cd bytes, zero padded). mu, step: d floats (step > 0).
inline void encode_row(const float* x, const float* mu, const float* inv_step, size_t d, size_t cd, int8_t* out) {
  for (size_t i = 0; i < d; ++i) {
    float v = std::nearbyint((x[i] - mu[i]) * inv_step[i]);
    v = v > 127.0f ? 127.0f : (v < -127.0f ? -127.0f : v);
    out[i] = static_cast<int8_t>(v);
  }
  for (size_t i = d; i < cd; ++i) out[i] = 0;
}

// Query -> int16 (cd entries, zero padded) and its scale t: qq_i = round(q_i step_i / t).
inline float encode_query(const float* q, const float* step, size_t d, size_t cd, int16_t* out) {
  float mx = 0;
  for (size_t i = 0; i < d; ++i) mx = std::max(mx, std::fabs(q[i] * step[i]));
  const float t = mx > 0 ? mx / 32767.0f : 1.0f;
  const float inv = 1.0f / t;
  for (size_t i = 0; i < d; ++i) {
    float v = std::nearbyint(q[i] * step[i] * inv);
    v = v > 32767.0f ? 32767.0f : (v < -32767.0f ? -32767.0f : v);
    out[i] = static_cast<int16_t>(v);
  }
  for (size_t i = d; i < cd; ++i) out[i] = 0;
  return t;
}

}  // namespace vecsift
