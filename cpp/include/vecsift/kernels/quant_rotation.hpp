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
inline void rotate_scalar(const float* cols, size_t d, const float* x, float* y) {
  for (size_t j = 0; j < d; ++j) y[j] = 0.0f;
  for (size_t i = 0; i < d; ++i) {
    const float xi = x[i];
    const float* c = cols + i * d;
    for (size_t j = 0; j < d; ++j) {
      float p = xi * c[j];
      y[j] = y[j] + p;
    }
  }
}

__attribute__((target("avx2"))) inline void rotate_avx2(const float* cols, size_t d, const float* x, float* y) {
  // d is a multiple of 64: 8 registers of output stay live over a 64-wide stripe.
  for (size_t j0 = 0; j0 < d; j0 += 64) {
    __m256 acc[8];
    for (int r = 0; r < 8; ++r) acc[r] = _mm256_setzero_ps();
    for (size_t i = 0; i < d; ++i) {
      const __m256 xi = _mm256_set1_ps(x[i]);
      const float* c = cols + i * d + j0;
      for (int r = 0; r < 8; ++r) acc[r] = _mm256_add_ps(acc[r], _mm256_mul_ps(xi, _mm256_loadu_ps(c + 8 * r)));
    }
    for (int r = 0; r < 8; ++r) _mm256_storeu_ps(y + j0 + 8 * r, acc[r]);
  }
}

__attribute__((target("avx512f"))) inline void rotate_avx512(const float* cols, size_t d, const float* x, float* y) {
  for (size_t j0 = 0; j0 < d; j0 += 64) {
    __m512 acc[4];
    for (int r = 0; r < 4; ++r) acc[r] = _mm512_setzero_ps();
    for (size_t i = 0; i < d; ++i) {
      const __m512 xi = _mm512_set1_ps(x[i]);
      const float* c = cols + i * d + j0;
      for (int r = 0; r < 4; ++r) acc[r] = _mm512_add_ps(acc[r], _mm512_mul_ps(xi, _mm512_loadu_ps(c + 16 * r)));
    }
    for (int r = 0; r < 4; ++r) _mm512_storeu_ps(y + j0 + 16 * r, acc[r]);
  }
}

inline void rotate(const float* cols, size_t d, const float* x, float* y, Level level) {
  switch (level) {
    case Level::AVX512: return rotate_avx512(cols, d, x, y);
    case Level::AVX2: return rotate_avx2(cols, d, x, y);
    default: return rotate_scalar(cols, d, x, y);
  }
}

}  // namespace vecsift
