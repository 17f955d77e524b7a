// Seeded random orthogonal rotation for the quantised codes.
//
// The rotation works in a padded space of dim_pad = ceil(dim/64)*64 so that
// every code plane is a whole number of 64-bit words. A vector is padded with
// zeros and multiplied by a dense Haar-random orthogonal matrix (Gaussian
// matrix, modified Gram-Schmidt in double). The matrix is stored with the
// codes, so the generator only has to be deterministic for one build.
//
// The product is taken in "axpy" form, y += x_i * column_i, with a separate
// multiply and add (this file is compiled with -ffp-contract=off): every
// output coordinate then sums its terms in the same order at every SIMD level,
// so the scalar, AVX2 and AVX-512 paths give bit-identical results, and a
// numpy loop over i reproduces them exactly.
#pragma once

#include <immintrin.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <random>
#include <stdexcept>
#include <vector>

#include "vecsift/kernels/cpu.hpp"

namespace vecsift {

inline size_t quant_padded_dim(size_t dim) { return (dim + 63) / 64 * 64; }

// Row-major (d, d) matrix whose row i is column i of the rotation P, i.e. P^T:
// rotate(x)_j = sum_i x_i * cols[i*d + j].
inline std::vector<float> random_rotation(size_t d, uint64_t seed) {
  std::mt19937_64 gen(seed ^ 0x9E3779B97F4A7C15ULL);
  // Box-Muller from 53-bit uniforms: std::normal_distribution is not pinned down by the standard.
  auto uniform = [&] { return (static_cast<double>(gen() >> 11) + 0.5) * (1.0 / 9007199254740992.0); };
  std::vector<double> m(d * d);
  for (size_t i = 0; i < d * d; i += 2) {
    double r = std::sqrt(-2.0 * std::log(uniform())), th = 6.283185307179586 * uniform();
    m[i] = r * std::cos(th);
    if (i + 1 < d * d) m[i + 1] = r * std::sin(th);
  }
  // Modified Gram-Schmidt over the rows: the rows become an orthonormal basis.
  for (size_t i = 0; i < d; ++i) {
    double* vi = m.data() + i * d;
    for (size_t j = 0; j < i; ++j) {
      const double* vj = m.data() + j * d;
      double dot = 0;
      for (size_t t = 0; t < d; ++t) dot += vi[t] * vj[t];
      for (size_t t = 0; t < d; ++t) vi[t] -= dot * vj[t];
    }
    double nrm = 0;
    for (size_t t = 0; t < d; ++t) nrm += vi[t] * vi[t];
    nrm = std::sqrt(nrm);
    if (!(nrm > 1e-12)) throw std::runtime_error("rotation: degenerate Gaussian matrix");
    for (size_t t = 0; t < d; ++t) vi[t] /= nrm;
  }
  std::vector<float> out(d * d);
  for (size_t i = 0; i < d * d; ++i) out[i] = static_cast<float>(m[i]);
  return out;
}

// y[0..d) = sum_i x[i] * cols[i*d ..]; x has d entries (already padded).
// `rows` (<= d) says how many leading entries of x may be nonzero: the rest
// (zero padding) are skipped. Their terms are zeros, so y is the same up to
// the sign of an exactly zero coordinate, which no code or query depends on.
inline void rotate_scalar(const float* cols, size_t d, const float* x, float* y, size_t rows) {
  for (size_t j = 0; j < d; ++j) y[j] = 0.0f;
  for (size_t i = 0; i < rows; ++i) {
    const float xi = x[i];
    const float* c = cols + i * d;
    for (size_t j = 0; j < d; ++j) {
      float p = xi * c[j];
      y[j] = y[j] + p;
    }
  }
}

__attribute__((target("avx2"))) inline void rotate_avx2(const float* cols, size_t d, const float* x, float* y,
                                                        size_t rows) {
  // d is a multiple of 64: 8 registers of output stay live over a 64-wide stripe.
  for (size_t j0 = 0; j0 < d; j0 += 64) {
    __m256 acc[8];
    for (int r = 0; r < 8; ++r) acc[r] = _mm256_setzero_ps();
    for (size_t i = 0; i < rows; ++i) {
      const __m256 xi = _mm256_set1_ps(x[i]);
      const float* c = cols + i * d + j0;
      for (int r = 0; r < 8; ++r) acc[r] = _mm256_add_ps(acc[r], _mm256_mul_ps(xi, _mm256_loadu_ps(c + 8 * r)));
    }
    for (int r = 0; r < 8; ++r) _mm256_storeu_ps(y + j0 + 8 * r, acc[r]);
  }
}

__attribute__((target("avx512f"))) inline void rotate_avx512(const float* cols, size_t d, const float* x, float* y,
                                                              size_t rows) {
  for (size_t j0 = 0; j0 < d; j0 += 64) {
    __m512 acc[4];
    for (int r = 0; r < 4; ++r) acc[r] = _mm512_setzero_ps();
    for (size_t i = 0; i < rows; ++i) {
      const __m512 xi = _mm512_set1_ps(x[i]);
      const float* c = cols + i * d + j0;
      for (int r = 0; r < 4; ++r) acc[r] = _mm512_add_ps(acc[r], _mm512_mul_ps(xi, _mm512_loadu_ps(c + 16 * r)));
    }
    for (int r = 0; r < 4; ++r) _mm512_storeu_ps(y + j0 + 16 * r, acc[r]);
  }
}

inline void rotate(const float* cols, size_t d, const float* x, float* y, Level level, size_t rows) {
  switch (level) {
    case Level::AVX512: return rotate_avx512(cols, d, x, y, rows);
    case Level::AVX2: return rotate_avx2(cols, d, x, y, rows);
    default: return rotate_scalar(cols, d, x, y, rows);
  }
}

inline void rotate(const float* cols, size_t d, const float* x, float* y, Level level) {
  rotate(cols, d, x, y, level, d);
}

// ---------------------------------------------------------------- structured rotation
// A random-sign Hadamard rotation (the "FHT + Kac walk" construction): with T
// the largest power of two <= d, each of kFhtRounds rounds flips signs
// (seeded, stored), applies the normalised Walsh-Hadamard transform to the
// first T coordinates (even rounds) or the last T (odd rounds), and mixes the
// halves, (x_i, x_{i+d/2}) <- ((x_i + x_{i+d/2}) c, (x_i - x_{i+d/2}) c) with
// c = sqrt(1/2), unless T = d (then that mix would be the transform's last
// stage again and undo it). Every step is orthogonal, so the whole is; it costs
// O(d log d) instead of the d^2 of the dense matrix, and stores 4d signs.
//
// Each output is formed by the same float operations in the same order at
// every level (butterflies a + b, a - b by stages h = 1, 2, 4, ...; then one
// multiply by float(1/sqrt(T)); no fused multiply-add), so the scalar and
// vectorised paths agree bit for bit and a numpy loop reproduces them.
constexpr int kFhtRounds = 4;

inline std::vector<float> random_signs(size_t d, uint64_t seed) {
  std::mt19937_64 gen(seed ^ 0xD1B54A32D192ED03ULL);
  std::vector<float> s(static_cast<size_t>(kFhtRounds) * d);
  for (auto& v : s) v = (gen() >> 63) ? -1.0f : 1.0f;
  return s;
}

inline size_t fht_length(size_t d) {
  size_t t = 1;
  while (t * 2 <= d) t *= 2;
  return t;
}

__attribute__((always_inline)) inline void fht_inplace(float* x, size_t T) {
  for (size_t h = 1; h < T; h *= 2)
    for (size_t i = 0; i < T; i += 2 * h)
      for (size_t j = i; j < i + h; ++j) {
        const float a = x[j], b = x[j + h];
        x[j] = a + b;
        x[j + h] = a - b;
      }
}

// y = rotation of x (d entries); y may not alias x.
__attribute__((always_inline)) inline void fht_rotate_body(const float* signs, size_t d, const float* x, float* y) {
  const size_t T = fht_length(d), H = d / 2;
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(T)));
  const float c = static_cast<float>(std::sqrt(0.5));
  for (size_t j = 0; j < d; ++j) y[j] = x[j];
  for (int r = 0; r < kFhtRounds; ++r) {
    const float* s = signs + static_cast<size_t>(r) * d;
    for (size_t j = 0; j < d; ++j) y[j] = y[j] * s[j];
    float* w = y + (r % 2 ? d - T : 0);
    fht_inplace(w, T);
    for (size_t j = 0; j < T; ++j) w[j] = w[j] * scale;
    if (T == d) continue;  // the transform covered every coordinate (and the mix would undo its last stage)
    for (size_t j = 0; j < H; ++j) {
      const float a = y[j], b = y[j + H];
      y[j] = (a + b) * c;
      y[j + H] = (a - b) * c;
    }
  }
}

inline void fht_rotate_scalar(const float* signs, size_t d, const float* x, float* y) {
  fht_rotate_body(signs, d, x, y);
}

// AVX2: the same operations on 8 lanes. Stages h = 1, 2, 4 pair lanes inside
// one register: with s the register with each lane's partner, lane j < partner
// takes x + s (= a + b), the partner takes s - x (= a - b).
__attribute__((target("avx2"))) inline __m256 fht_small_stages_avx2(__m256 x) {
  __m256 s = _mm256_permute_ps(x, 0xB1);  // h = 1
  x = _mm256_blend_ps(_mm256_add_ps(x, s), _mm256_sub_ps(s, x), 0xAA);
  s = _mm256_permute_ps(x, 0x4E);  // h = 2
  x = _mm256_blend_ps(_mm256_add_ps(x, s), _mm256_sub_ps(s, x), 0xCC);
  s = _mm256_permute2f128_ps(x, x, 1);  // h = 4
  return _mm256_blend_ps(_mm256_add_ps(x, s), _mm256_sub_ps(s, x), 0xF0);
}

__attribute__((target("avx2"))) inline void fht_rotate_avx2(const float* signs, size_t d, const float* x, float* y) {
  const size_t T = fht_length(d), H = d / 2;  // d is a multiple of 64, so T >= 64 and H a multiple of 8
  const __m256 scale = _mm256_set1_ps(static_cast<float>(1.0 / std::sqrt(static_cast<double>(T))));
  const __m256 c = _mm256_set1_ps(static_cast<float>(std::sqrt(0.5)));
  for (size_t j = 0; j < d; ++j) y[j] = x[j];
  for (int r = 0; r < kFhtRounds; ++r) {
    const float* sg = signs + static_cast<size_t>(r) * d;
    for (size_t j = 0; j < d; j += 8)
      _mm256_storeu_ps(y + j, _mm256_mul_ps(_mm256_loadu_ps(y + j), _mm256_loadu_ps(sg + j)));
    float* w = y + (r % 2 ? d - T : 0);
    for (size_t j = 0; j < T; j += 8) _mm256_storeu_ps(w + j, fht_small_stages_avx2(_mm256_loadu_ps(w + j)));
    for (size_t h = 8; h < T; h *= 2)
      for (size_t i = 0; i < T; i += 2 * h)
        for (size_t j = i; j < i + h; j += 8) {
          const __m256 a = _mm256_loadu_ps(w + j), b = _mm256_loadu_ps(w + j + h);
          _mm256_storeu_ps(w + j, _mm256_add_ps(a, b));
          _mm256_storeu_ps(w + j + h, _mm256_sub_ps(a, b));
        }
    for (size_t j = 0; j < T; j += 8) _mm256_storeu_ps(w + j, _mm256_mul_ps(_mm256_loadu_ps(w + j), scale));
    if (T == d) continue;
    for (size_t j = 0; j < H; j += 8) {
      const __m256 a = _mm256_loadu_ps(y + j), b = _mm256_loadu_ps(y + j + H);
      _mm256_storeu_ps(y + j, _mm256_mul_ps(_mm256_add_ps(a, b), c));
      _mm256_storeu_ps(y + j + H, _mm256_mul_ps(_mm256_sub_ps(a, b), c));
    }
  }
}

// AVX-512 machines run the AVX2 code: the transform is a few microseconds
// either way, and one implementation keeps the levels identical by construction.
__attribute__((target("avx512f"))) inline void fht_rotate_avx512(const float* signs, size_t d, const float* x,
                                                                  float* y) {
  fht_rotate_avx2(signs, d, x, y);
}

inline void fht_rotate(const float* signs, size_t d, const float* x, float* y, Level level) {
  switch (level) {
    case Level::AVX512: return fht_rotate_avx512(signs, d, x, y);
    case Level::AVX2: return fht_rotate_avx2(signs, d, x, y);
    default: return fht_rotate_scalar(signs, d, x, y);
  }
}

}  // namespace vecsift
