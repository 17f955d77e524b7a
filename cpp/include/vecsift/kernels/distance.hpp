// float32 distance kernels: inner product and squared L2, for one pair and
// for one query against a block of row-major rows, at three SIMD levels.
// Any dimension works: AVX-512 handles tails with masked loads, AVX2 and
// scalar with a scalar tail loop.
#pragma once

#include <immintrin.h>

#include <cmath>
#include <cstddef>
#include <cstdint>

#include "vecsift/kernels/cpu.hpp"

namespace vecsift {

// ---------------------------------------------------------------- scalar
inline float ip_scalar(const float* a, const float* b, size_t d) {
  float s0 = 0, s1 = 0, s2 = 0, s3 = 0;
  size_t i = 0;
  for (; i + 4 <= d; i += 4) {
    s0 += a[i] * b[i];
    s1 += a[i + 1] * b[i + 1];
    s2 += a[i + 2] * b[i + 2];
    s3 += a[i + 3] * b[i + 3];
  }
  for (; i < d; ++i) s0 += a[i] * b[i];
  return (s0 + s1) + (s2 + s3);
}

inline float l2sq_scalar(const float* a, const float* b, size_t d) {
  float s0 = 0, s1 = 0, s2 = 0, s3 = 0;
  size_t i = 0;
  for (; i + 4 <= d; i += 4) {
    float t0 = a[i] - b[i], t1 = a[i + 1] - b[i + 1];
    float t2 = a[i + 2] - b[i + 2], t3 = a[i + 3] - b[i + 3];
    s0 += t0 * t0;
    s1 += t1 * t1;
    s2 += t2 * t2;
    s3 += t3 * t3;
  }
  for (; i < d; ++i) {
    float t = a[i] - b[i];
    s0 += t * t;
  }
  return (s0 + s1) + (s2 + s3);
}

// ---------------------------------------------------------------- AVX2
__attribute__((target("avx2,fma"))) inline float hsum256(__m256 v) {
  __m128 lo = _mm256_castps256_ps128(v);
  __m128 hi = _mm256_extractf128_ps(v, 1);
  lo = _mm_add_ps(lo, hi);
  lo = _mm_add_ps(lo, _mm_movehl_ps(lo, lo));
  lo = _mm_add_ss(lo, _mm_shuffle_ps(lo, lo, 1));
  return _mm_cvtss_f32(lo);
}

__attribute__((target("avx2,fma"))) inline float ip_avx2(const float* a, const float* b, size_t d) {
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  size_t i = 0;
  for (; i + 16 <= d; i += 16) {
    acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc0);
    acc1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), acc1);
  }
  for (; i + 8 <= d; i += 8)
    acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc0);
  float s = hsum256(_mm256_add_ps(acc0, acc1));
  for (; i < d; ++i) s += a[i] * b[i];
  return s;
}

__attribute__((target("avx2,fma"))) inline float l2sq_avx2(const float* a, const float* b, size_t d) {
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  size_t i = 0;
  for (; i + 16 <= d; i += 16) {
    __m256 t0 = _mm256_sub_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i));
    __m256 t1 = _mm256_sub_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8));
    acc0 = _mm256_fmadd_ps(t0, t0, acc0);
    acc1 = _mm256_fmadd_ps(t1, t1, acc1);
  }
  for (; i + 8 <= d; i += 8) {
    __m256 t = _mm256_sub_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i));
    acc0 = _mm256_fmadd_ps(t, t, acc0);
  }
  float s = hsum256(_mm256_add_ps(acc0, acc1));
  for (; i < d; ++i) {
    float t = a[i] - b[i];
    s += t * t;
  }
  return s;
}

// ---------------------------------------------------------------- AVX-512
__attribute__((target("avx512f,fma"))) inline float ip_avx512(const float* a, const float* b, size_t d) {
  __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
  size_t i = 0;
  for (; i + 32 <= d; i += 32) {
    acc0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), acc0);
    acc1 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i + 16), _mm512_loadu_ps(b + i + 16), acc1);
  }
  for (; i + 16 <= d; i += 16)
    acc0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), acc0);
  if (i < d) {
    __mmask16 m = static_cast<__mmask16>((1u << (d - i)) - 1u);
    acc1 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, a + i), _mm512_maskz_loadu_ps(m, b + i), acc1);
  }
  return _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1));
}

__attribute__((target("avx512f,fma"))) inline float l2sq_avx512(const float* a, const float* b, size_t d) {
  __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
  size_t i = 0;
  for (; i + 32 <= d; i += 32) {
    __m512 t0 = _mm512_sub_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i));
    __m512 t1 = _mm512_sub_ps(_mm512_loadu_ps(a + i + 16), _mm512_loadu_ps(b + i + 16));
    acc0 = _mm512_fmadd_ps(t0, t0, acc0);
    acc1 = _mm512_fmadd_ps(t1, t1, acc1);
  }
  for (; i + 16 <= d; i += 16) {
    __m512 t = _mm512_sub_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i));
    acc0 = _mm512_fmadd_ps(t, t, acc0);
  }
  if (i < d) {
    __mmask16 m = static_cast<__mmask16>((1u << (d - i)) - 1u);
    __m512 t = _mm512_sub_ps(_mm512_maskz_loadu_ps(m, a + i), _mm512_maskz_loadu_ps(m, b + i));
    acc1 = _mm512_fmadd_ps(t, t, acc1);
  }
  return _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1));
}

// ---------------------------------------------------------------- dispatch
using PairKernel = float (*)(const float*, const float*, size_t);

enum class Metric : int { IP = 0, L2 = 1, Cosine = 2 };

inline PairKernel ip_kernel(Level level) {
  switch (level) {
    case Level::AVX512: return ip_avx512;
    case Level::AVX2: return ip_avx2;
    default: return ip_scalar;
  }
}

inline PairKernel l2sq_kernel(Level level) {
  switch (level) {
    case Level::AVX512: return l2sq_avx512;
    case Level::AVX2: return l2sq_avx2;
    default: return l2sq_scalar;
  }
}

// One query against n rows (row stride d): out[i] = ip or squared l2.
inline void ip_block(const float* q, const float* rows, size_t n, size_t d, float* out,
                     Level level) {
  PairKernel f = ip_kernel(level);
  for (size_t i = 0; i < n; ++i) out[i] = f(q, rows + i * d, d);
}

inline void l2sq_block(const float* q, const float* rows, size_t n, size_t d, float* out,
                       Level level) {
  PairKernel f = l2sq_kernel(level);
  for (size_t i = 0; i < n; ++i) out[i] = f(q, rows + i * d, d);
}

// True when every value is finite (no NaN, no inf).
inline bool all_finite(const float* x, size_t n) {
  // Bit test instead of std::isfinite so -ffast-math style flags cannot fold it.
  const uint32_t* u = reinterpret_cast<const uint32_t*>(x);
  uint32_t bad = 0;
  for (size_t i = 0; i < n; ++i) bad |= static_cast<uint32_t>((u[i] & 0x7f800000u) == 0x7f800000u);
  return bad == 0;
}

// Normalises a row to unit L2 norm in place; zero rows stay zero.
inline void normalize_row(float* x, size_t d) {
  double s = 0;
  for (size_t i = 0; i < d; ++i) s += static_cast<double>(x[i]) * x[i];
  if (s > 0) {
    float inv = static_cast<float>(1.0 / std::sqrt(s));
    for (size_t i = 0; i < d; ++i) x[i] *= inv;
  }
}

// out = each row of x (n x d) over its L2 norm; zero rows stay zero. The norm is the float32 square
// root of the double-precision sum of squares, and each value is divided by it (not multiplied by an
// inverse), so a row of one nonzero value becomes exactly +-1.
inline void unit_rows(const float* x, size_t n, size_t d, float* out) {
  for (size_t r = 0; r < n; ++r) {
    const float* a = x + r * d;
    float* o = out + r * d;
    double s = 0;
    for (size_t i = 0; i < d; ++i) s += static_cast<double>(a[i]) * a[i];
    const float norm = s > 0 ? static_cast<float>(std::sqrt(s)) : 1.0f;
    for (size_t i = 0; i < d; ++i) o[i] = a[i] / norm;
  }
}

}  // namespace vecsift
