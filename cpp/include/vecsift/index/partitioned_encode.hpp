// Encoding of the partitioned index's multi-bit codes with an AVX2 scale
// search: the same codes and factors, bit for bit, as quantize_rotated
// (kernels/quant_codes.hpp), whose portable build (-march=x86-64) has no
// vector floor, so each of the 25 trial scales of a row cost D scalar floor
// calls. Here the trial's 8 lanes are one AVX2 register: the same operations
// in the same order per lane (multiply, add, floor, clamp, subtract,
// multiply, add; no fused multiply-add), the same lane reduction, so the
// chosen scale and the code are identical (the tests compare them).
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>

#include "vecsift/kernels/cpu.hpp"
#include "vecsift/kernels/quant_codes.hpp"
#include "vecsift/kernels/quant_rotation.hpp"

namespace vecsift {

__attribute__((target("avx2"))) inline float code_cosine_avx2(const float* o, size_t D, float t, float L, float top,
                                                               float cB) {
  const __m256 tv = _mm256_set1_ps(t), Lv = _mm256_set1_ps(L), topv = _mm256_set1_ps(top),
               cBv = _mm256_set1_ps(cB), zero = _mm256_setzero_ps();
  __m256 dot = _mm256_setzero_ps(), nn = _mm256_setzero_ps();
  for (size_t i = 0; i < D; i += 8) {
    const __m256 ov = _mm256_loadu_ps(o + i);
    __m256 v = _mm256_floor_ps(_mm256_add_ps(_mm256_mul_ps(tv, ov), Lv));
    v = _mm256_min_ps(_mm256_max_ps(v, zero), topv);
    const __m256 y = _mm256_sub_ps(v, cBv);
    dot = _mm256_add_ps(dot, _mm256_mul_ps(y, ov));
    nn = _mm256_add_ps(nn, _mm256_mul_ps(y, y));
  }
  alignas(32) float dl[8], nl[8];
  _mm256_store_ps(dl, dot);
  _mm256_store_ps(nl, nn);
  float d = 0, n = 0;
  for (size_t l = 0; l < 8; ++l) d += dl[l], n += nl[l];
  return d / std::sqrt(n);
}

// The grid values floor(t*o + L) clamped to [0, top], 8 at a time.
__attribute__((target("avx2"))) inline void code_values_avx2(const float* o, size_t D, float t, float L, float top,
                                                              float* v) {
  const __m256 tv = _mm256_set1_ps(t), Lv = _mm256_set1_ps(L), topv = _mm256_set1_ps(top),
               zero = _mm256_setzero_ps();
  for (size_t i = 0; i < D; i += 8) {
    __m256 x = _mm256_floor_ps(_mm256_add_ps(_mm256_mul_ps(tv, _mm256_loadu_ps(o + i)), Lv));
    _mm256_storeu_ps(v + i, _mm256_min_ps(_mm256_max_ps(x, zero), topv));
  }
}

// quantize_direction for B > 1 (D a multiple of 8); vbuf holds D floats.
inline void quantize_direction_avx2(const float* o, size_t D, int B, uint8_t* u, double* yo, double* yy,
                                    float* vbuf) {
  const double cB = ((1 << B) - 1) / 2.0;
  const int L = 1 << (B - 1), top = (1 << B) - 1;
  float m = 0;
  for (size_t i = 0; i < D; ++i) m = std::max(m, std::fabs(o[i]));
  if (!(m > 0)) {
    for (size_t i = 0; i < D; ++i) u[i] = static_cast<uint8_t>(L);
    *yo = 0;
    *yy = 0.25 * D;
    return;
  }
  const float unit = static_cast<float>(L) / m, step = (kScaleHi - kScaleLo) / (kScaleCoarse - 1);
  const float Lf = static_cast<float>(L), topf = static_cast<float>(top), cBf = static_cast<float>(cB);
  float best_cos = -2, best_s = 1;
  for (int k = 0; k < kScaleCoarse; ++k) {
    const float sc = kScaleLo + step * k;
    const float c = code_cosine_avx2(o, D, sc * unit, Lf, topf, cBf);
    if (c > best_cos) best_cos = c, best_s = sc;
  }
  const float s0 = best_s - step;
  for (int k = 0; k <= kScaleFine; ++k) {
    const float sc = s0 + 2 * step * k / kScaleFine;
    const float c = code_cosine_avx2(o, D, sc * unit, Lf, topf, cBf);
    if (c > best_cos) best_cos = c, best_s = sc;
  }
  code_values_avx2(o, D, best_s * unit, Lf, topf, vbuf);
  double dot = 0, nn = 0;
  for (size_t i = 0; i < D; ++i) {
    const float v = vbuf[i];
    u[i] = static_cast<uint8_t>(v);
    const double y = v - cB;
    dot += y * o[i];
    nn += y * y;
  }
  *yo = dot;
  *yy = nn;
}

// quantize_rotated with the AVX2 scale search where the CPU has it (scratch: 2 x D floats).
inline QuantFactors quantize_rotated_fast(const float* r, size_t D, int B, uint8_t* u, float* scratch, Level level) {
  if (B == 1 || level == Level::Scalar || D % 8) return quantize_rotated(r, D, B, u, scratch);
  const double nr = unit_direction(r, D, scratch);
  double yo, yy;
  quantize_direction_avx2(scratch, D, B, u, &yo, &yy, scratch + D);
  return factors_of(u, D, nr, yo, yy);
}

// Rotates kRotRows rows at once (x: rows of d floats, y: rows of d floats),
// each output y[r][j] the same sum in the same order (i = 0..d-1, multiply
// then add) as rotate() gives, so bit for bit its result; the matrix stripe
// is read once for all the rows instead of once a row (rotate() is bound by
// reading the d x d matrix, 800 KB at d = 448, for every row).
constexpr size_t kRotRows = 6;

__attribute__((target("avx2"))) inline void rotate_rows_avx2(const float* cols, size_t d, const float* x, float* y) {
  for (size_t j0 = 0; j0 < d; j0 += 16) {
    __m256 acc[kRotRows][2];
    for (size_t r = 0; r < kRotRows; ++r) acc[r][0] = acc[r][1] = _mm256_setzero_ps();
    for (size_t i = 0; i < d; ++i) {
      const float* c = cols + i * d + j0;
      const __m256 c0 = _mm256_loadu_ps(c), c1 = _mm256_loadu_ps(c + 8);
      for (size_t r = 0; r < kRotRows; ++r) {
        const __m256 xi = _mm256_broadcast_ss(x + r * d + i);
        acc[r][0] = _mm256_add_ps(acc[r][0], _mm256_mul_ps(xi, c0));
        acc[r][1] = _mm256_add_ps(acc[r][1], _mm256_mul_ps(xi, c1));
      }
    }
    for (size_t r = 0; r < kRotRows; ++r) {
      _mm256_storeu_ps(y + r * d + j0, acc[r][0]);
      _mm256_storeu_ps(y + r * d + j0 + 8, acc[r][1]);
    }
  }
}

// rows (count <= kRotRows) rotated: a group of kRotRows with AVX2 (d a multiple
// of 16), else one at a time with rotate().
inline void rotate_rows(const float* cols, size_t d, const float* x, float* y, size_t count, Level level) {
  if (count == kRotRows && level != Level::Scalar && d % 16 == 0) return rotate_rows_avx2(cols, d, x, y);
  for (size_t r = 0; r < count; ++r) rotate(cols, d, x + r * d, y + r * d, level);
}

}  // namespace vecsift
