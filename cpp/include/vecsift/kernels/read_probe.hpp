// Read-bandwidth probe: streams a buffer once with wide loads (an OR
// reduction, so nothing is optimised away) for benchmarks to compare scan
// speed with this machine's single-thread read bandwidth. Dispatched like
// every kernel: AVX2 only when the active level allows it.
#pragma once

#include <immintrin.h>

#include <cstddef>
#include <cstdint>

#include "vecsift/kernels/cpu.hpp"

namespace vecsift {

inline uint64_t read_probe_scalar(const uint8_t* p, size_t n) {
  uint64_t acc[4] = {0, 0, 0, 0};
  size_t i = 0;
  for (; i + 32 <= n; i += 32)
    for (int j = 0; j < 4; ++j) {
      uint64_t w;
      __builtin_memcpy(&w, p + i + 8 * j, 8);
      acc[j] |= w;
    }
  uint64_t r = acc[0] | acc[1] | acc[2] | acc[3];
  for (; i < n; ++i) r |= p[i];
  return r;
}

__attribute__((target("avx2"))) inline uint64_t read_probe_avx2(const uint8_t* p, size_t n) {
  __m256i acc0 = _mm256_setzero_si256(), acc1 = acc0, acc2 = acc0, acc3 = acc0;
  size_t i = 0;
  for (; i + 128 <= n; i += 128) {
    acc0 = _mm256_or_si256(acc0, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i)));
    acc1 = _mm256_or_si256(acc1, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i + 32)));
    acc2 = _mm256_or_si256(acc2, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i + 64)));
    acc3 = _mm256_or_si256(acc3, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i + 96)));
  }
  acc0 = _mm256_or_si256(_mm256_or_si256(acc0, acc1), _mm256_or_si256(acc2, acc3));
  alignas(32) uint64_t lanes[4];
  _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), acc0);
  uint64_t r = lanes[0] | lanes[1] | lanes[2] | lanes[3];
  for (; i < n; ++i) r |= p[i];
  return r;
}

// The OR of every byte of p[0, n) (as a 64-bit lane OR for the wide paths: only zero / non-zero is meaningful).
inline uint64_t read_probe(const uint8_t* p, size_t n, Level lv) {
  return lv >= Level::AVX2 ? read_probe_avx2(p, n) : read_probe_scalar(p, n);
}

}  // namespace vecsift
