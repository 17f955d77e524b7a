// Float16 rows scored against a float32 query.
//
// A partitioned index ranks its lists by scoring the query against every
// centroid: at 10^7 rows that is 8,192 x 384 float32, 12.6 MB read from L3 per
// query (~0.5 ms here, a quarter of the query). Kept as float16 the centroids
// are half the bytes; the rounding (relative 2^-11 per value) moves scores far
// less than the gaps that decide which lists are probed.
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

// out[i] = <q, row_i> (l2 = false) or |q - row_i|^2 (l2 = true), rows float16 (n, d).
inline void half_block_scalar(const float* q, const uint16_t* rows, size_t n, size_t d, bool l2, float* out) {
  for (size_t i = 0; i < n; ++i) {
    const uint16_t* r = rows + i * d;
    float s = 0;
    for (size_t j = 0; j < d; ++j) {
      const float v = half_to_float(r[j]);
      s += l2 ? (q[j] - v) * (q[j] - v) : q[j] * v;
    }
    out[i] = s;
  }
}

__attribute__((target("avx2,fma,f16c"))) inline void half_block_avx2(const float* q, const uint16_t* rows, size_t n,
                                                                      size_t d, bool l2, float* out) {
  const size_t d8 = d / 8 * 8;
  for (size_t i = 0; i < n; ++i) {
    const uint16_t* r = rows + i * d;
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
    size_t j = 0;
    for (; j + 16 <= d8; j += 16) {
      const __m256 v0 = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(r + j)));
      const __m256 v1 = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(r + j + 8)));
      const __m256 q0 = _mm256_loadu_ps(q + j), q1 = _mm256_loadu_ps(q + j + 8);
      if (l2) {
        const __m256 e0 = _mm256_sub_ps(q0, v0), e1 = _mm256_sub_ps(q1, v1);
        a0 = _mm256_fmadd_ps(e0, e0, a0), a1 = _mm256_fmadd_ps(e1, e1, a1);
      } else {
        a0 = _mm256_fmadd_ps(q0, v0, a0), a1 = _mm256_fmadd_ps(q1, v1, a1);
      }
    }
    for (; j < d8; j += 8) {
      const __m256 v = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(r + j)));
      const __m256 qv = _mm256_loadu_ps(q + j);
      if (l2) {
        const __m256 e = _mm256_sub_ps(qv, v);
        a0 = _mm256_fmadd_ps(e, e, a0);
      } else {
        a0 = _mm256_fmadd_ps(qv, v, a0);
      }
    }
    alignas(32) float lanes[8];
    _mm256_store_ps(lanes, _mm256_add_ps(a0, a1));
    float s = 0;
    for (float v : lanes) s += v;
    for (; j < d; ++j) {
      const float v = half_to_float(r[j]);
      s += l2 ? (q[j] - v) * (q[j] - v) : q[j] * v;
    }
    out[i] = s;
  }
}

__attribute__((target("avx512f,avx512bw,avx512vl"))) inline void half_block_avx512(const float* q,
                                                                                    const uint16_t* rows, size_t n,
                                                                                    size_t d, bool l2, float* out) {
  const __mmask16 tail = static_cast<__mmask16>((1u << (d % 16)) - 1u);
  const size_t d16 = d / 16 * 16;
  for (size_t i = 0; i < n; ++i) {
    const uint16_t* r = rows + i * d;
    __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps();
    size_t j = 0;
    for (; j + 32 <= d16; j += 32) {
      const __m512 v0 = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(r + j)));
      const __m512 v1 = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(r + j + 16)));
      const __m512 q0 = _mm512_loadu_ps(q + j), q1 = _mm512_loadu_ps(q + j + 16);
      if (l2) {
        const __m512 e0 = _mm512_sub_ps(q0, v0), e1 = _mm512_sub_ps(q1, v1);
        a0 = _mm512_fmadd_ps(e0, e0, a0), a1 = _mm512_fmadd_ps(e1, e1, a1);
      } else {
        a0 = _mm512_fmadd_ps(q0, v0, a0), a1 = _mm512_fmadd_ps(q1, v1, a1);
      }
    }
    for (; j < d; j += 16) {  // a last whole or partial group of 16 (masked: nothing read past the row)
      const __mmask16 m = j + 16 <= d ? static_cast<__mmask16>(0xFFFF) : tail;
      const __m512 v = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, r + j));
      const __m512 qv = _mm512_maskz_loadu_ps(m, q + j);
      if (l2) {
        const __m512 e = _mm512_sub_ps(qv, v);
        a0 = _mm512_fmadd_ps(e, e, a0);
      } else {
        a0 = _mm512_fmadd_ps(qv, v, a0);
      }
    }
    out[i] = _mm512_reduce_add_ps(_mm512_add_ps(a0, a1));
  }
}

inline void half_block(const float* q, const uint16_t* rows, size_t n, size_t d, bool l2, float* out, Level level) {
  switch (level) {
    case Level::AVX512: return half_block_avx512(q, rows, n, d, l2, out);
    case Level::AVX2: return half_block_avx2(q, rows, n, d, l2, out);
    default: return half_block_scalar(q, rows, n, d, l2, out);
  }
}

}  // namespace vecsift
