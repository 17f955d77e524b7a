// Float16 rows scored against a float32 query (inner products).
//
// A partitioned index ranks its lists by scoring the query against every
// centroid: at 10^7 rows that is 8,192 x 384 float32, 12.6 MB read from L3 per
// query (~0.5 ms here, a fifth of a 2.4 ms query). Kept as float16 the centroids
// are half the bytes; the rounding (relative 2^-11 per value) moves scores far
// less than the gaps that decide which lists are probed. Only unit centroids
// (cosine / ip) are kept this way: l2 centroids may lie past float16's range.
//
// Conversion rounds to nearest even in software (the same bits whatever the
// CPU). Scoring widens with F16C (AVX2) or AVX-512F and accumulates in float;
// the scalar path widens in software. Sums are taken in a different order per
// level, as the float32 pair kernels do, so scores may differ in the last bits.
#pragma once

#include <immintrin.h>

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "vecsift/kernels/cpu.hpp"

namespace vecsift {

inline uint16_t float_to_half(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint32_t sign = (x >> 16) & 0x8000u;
  x &= 0x7FFFFFFFu;
  if (x >= 0x7F800000u) return static_cast<uint16_t>(sign | 0x7C00u | (x > 0x7F800000u ? 0x200u : 0u));
  if (x >= 0x477FF000u) return static_cast<uint16_t>(sign | 0x7C00u);  // rounds past 65504: infinity
  if (x < 0x38800000u) {  // below 2^-14: subnormal half (or zero)
    if (x < 0x33000000u) return static_cast<uint16_t>(sign);  // below half the smallest subnormal
    // value / 2^-24 = mant * 2^(e - 126) with e the float's biased exponent (102..112)
    const uint32_t mant = (x & 0x007FFFFFu) | 0x00800000u;
    const int shift = 126 - static_cast<int>(x >> 23);  // 14..24
    const uint32_t q = mant >> shift, rem = mant & ((1u << shift) - 1u), half = 1u << (shift - 1);
    return static_cast<uint16_t>(sign | (q + (rem > half || (rem == half && (q & 1u)))));
  }
  const uint32_t base = ((x >> 13) - (112u << 10)) & 0xFFFFu;  // rebias the exponent, keep 10 mantissa bits
  const uint32_t rem = x & 0x1FFFu;
  return static_cast<uint16_t>(sign | (base + (rem > 0x1000u || (rem == 0x1000u && (base & 1u)))));
}

inline float half_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t e = (h >> 10) & 0x1Fu, m = h & 0x3FFu, x;
  if (e == 0x1F) {
    x = sign | 0x7F800000u | (m << 13);
  } else if (e) {
    x = sign | ((e + 112u) << 23) | (m << 13);
  } else if (m) {  // subnormal: normalise
    e = 113;
    while (!(m & 0x400u)) m <<= 1, --e;
    x = sign | (e << 23) | ((m & 0x3FFu) << 13);
  } else {
    x = sign;
  }
  float f;
  std::memcpy(&f, &x, 4);
  return f;
}

inline void to_half(const float* x, size_t n, uint16_t* out) {
  for (size_t i = 0; i < n; ++i) out[i] = float_to_half(x[i]);
}

// out[i] = <q, row_i>, rows float16 (n, d).
inline void half_ip_scalar(const float* q, const uint16_t* rows, size_t n, size_t d, float* out) {
  for (size_t i = 0; i < n; ++i) {
    const uint16_t* r = rows + i * d;
    float s = 0;
    for (size_t j = 0; j < d; ++j) s += q[j] * half_to_float(r[j]);
    out[i] = s;
  }
}

// Two accumulators a row: one FMA chain would cap the loop below the L3 rate this is bound by.
__attribute__((target("avx2,fma,f16c"))) inline void half_ip_avx2(const float* q, const uint16_t* rows, size_t n,
                                                                   size_t d, float* out) {
  for (size_t i = 0; i < n; ++i) {
    const uint16_t* r = rows + i * d;
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
    size_t j = 0;
    for (; j + 16 <= d; j += 16) {
      a0 = _mm256_fmadd_ps(_mm256_loadu_ps(q + j),
                           _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(r + j))), a0);
      a1 = _mm256_fmadd_ps(_mm256_loadu_ps(q + j + 8),
                           _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(r + j + 8))), a1);
    }
    if (j + 8 <= d) {
      a0 = _mm256_fmadd_ps(_mm256_loadu_ps(q + j),
                           _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(r + j))), a0);
      j += 8;
    }
    alignas(32) float lanes[8];
    _mm256_store_ps(lanes, _mm256_add_ps(a0, a1));
    float s = 0;
    for (float v : lanes) s += v;
    for (; j < d; ++j) s += q[j] * half_to_float(r[j]);
    out[i] = s;
  }
}

__attribute__((target("avx512f,avx512bw,avx512vl"))) inline void half_ip_avx512(const float* q, const uint16_t* rows,
                                                                                 size_t n, size_t d, float* out) {
  const __mmask16 tail = static_cast<__mmask16>((1u << (d % 16)) - 1u);
  for (size_t i = 0; i < n; ++i) {
    const uint16_t* r = rows + i * d;
    __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps();
    size_t j = 0;
    for (; j + 32 <= d; j += 32) {
      a0 = _mm512_fmadd_ps(_mm512_loadu_ps(q + j),
                           _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(r + j))), a0);
      a1 = _mm512_fmadd_ps(_mm512_loadu_ps(q + j + 16),
                           _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(r + j + 16))), a1);
    }
    for (; j < d; j += 16) {  // a last whole or partial group of 16 (masked: nothing read past the row)
      const __mmask16 m = j + 16 <= d ? static_cast<__mmask16>(0xFFFF) : tail;
      a0 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, q + j), _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, r + j)), a0);
    }
    out[i] = _mm512_reduce_add_ps(_mm512_add_ps(a0, a1));
  }
}

inline void half_ip_block(const float* q, const uint16_t* rows, size_t n, size_t d, float* out, Level level) {
  switch (level) {
    case Level::AVX512: return half_ip_avx512(q, rows, n, d, out);
    case Level::AVX2: return half_ip_avx2(q, rows, n, d, out);
    default: return half_ip_scalar(q, rows, n, d, out);
  }
}

}  // namespace vecsift
