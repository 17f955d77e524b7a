// Sign-bit quantisation and XOR+popcount Hamming kernels.
//
// Codes are ceil(dim/8) bytes a row, bit t of byte j set when x[8j+t] > 0
// (numpy's packbits(x > 0, bitorder="little")).
//
// For scanning, codes are stored in blocks of 8 rows, transposed by 64-bit
// word: block b holds word k of rows 8b..8b+7 at data[(b*words + k)*8 + lane].
// One AVX-512 register then carries the same word of 8 rows, so a block's 8
// distances come out in one register with no horizontal reduction, and one
// byte of an allow bitset covers exactly one block.
#pragma once

#include <immintrin.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>

#include "vecsift/kernels/cpu.hpp"
#include "vecsift/kernels/topk.hpp"

namespace vecsift {

constexpr size_t kBlockRows = 8;

inline size_t code_bytes_for_dim(size_t dim) { return (dim + 7) / 8; }
inline size_t words_for_bytes(size_t bytes) { return (bytes + 7) / 8; }

// ---------------------------------------------------------------- quantise
inline void quantize_scalar(const float* x, size_t n, size_t d, uint8_t* out) {
  const size_t w = code_bytes_for_dim(d);
  for (size_t i = 0; i < n; ++i) {
    const float* row = x + i * d;
    uint8_t* code = out + i * w;
    for (size_t j = 0; j < w; ++j) {
      uint8_t byte = 0;
      for (size_t t = 0; t < 8 && 8 * j + t < d; ++t) byte |= static_cast<uint8_t>(row[8 * j + t] > 0.0f) << t;
      code[j] = byte;
    }
  }
}

__attribute__((target("avx2"))) inline void quantize_avx2(const float* x, size_t n, size_t d, uint8_t* out) {
  const size_t w = code_bytes_for_dim(d);
  const __m256 zero = _mm256_setzero_ps();
  for (size_t i = 0; i < n; ++i) {
    const float* row = x + i * d;
    uint8_t* code = out + i * w;
    size_t j = 0;
    for (; 8 * j + 8 <= d; ++j)
      code[j] = static_cast<uint8_t>(_mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(row + 8 * j), zero, _CMP_GT_OQ)));
    if (j < w) {
      uint8_t byte = 0;
      for (size_t t = 0; 8 * j + t < d; ++t) byte |= static_cast<uint8_t>(row[8 * j + t] > 0.0f) << t;
      code[j] = byte;
    }
  }
}

__attribute__((target("avx512f"))) inline void quantize_avx512(const float* x, size_t n, size_t d, uint8_t* out) {
  const size_t w = code_bytes_for_dim(d);
  const __m512 zero = _mm512_setzero_ps();
  for (size_t i = 0; i < n; ++i) {
    const float* row = x + i * d;
    uint8_t* code = out + i * w;
    size_t j = 0;  // dims consumed
    for (; j + 16 <= d; j += 16) {
      uint16_t m = _mm512_cmp_ps_mask(_mm512_loadu_ps(row + j), zero, _CMP_GT_OQ);
      std::memcpy(code + j / 8, &m, 2);
    }
    if (j < d) {
      __mmask16 lm = static_cast<__mmask16>((1u << (d - j)) - 1u);
      uint16_t m = _mm512_mask_cmp_ps_mask(lm, _mm512_maskz_loadu_ps(lm, row + j), zero, _CMP_GT_OQ);
      std::memcpy(code + j / 8, &m, w - j / 8);  // 1 or 2 bytes remain
    }
  }
}

inline void binary_quantize(const float* x, size_t n, size_t d, uint8_t* out, Level level) {
  switch (level) {
    case Level::AVX512: return quantize_avx512(x, n, d, out);
    case Level::AVX2: return quantize_avx2(x, n, d, out);
    default: return quantize_scalar(x, n, d, out);
  }
}

// ---------------------------------------------------------------- popcount helpers
inline uint32_t popcount_swar(uint64_t x) {
  x = x - ((x >> 1) & 0x5555555555555555ULL);
  x = (x & 0x3333333333333333ULL) + ((x >> 2) & 0x3333333333333333ULL);
  x = (x + (x >> 4)) & 0x0f0f0f0f0f0f0f0fULL;
  return static_cast<uint32_t>((x * 0x0101010101010101ULL) >> 56);
}

__attribute__((target("popcnt"))) inline uint32_t popcount_hw(uint64_t x) {
  return static_cast<uint32_t>(__builtin_popcountll(x));
}

inline uint64_t load_word(const uint8_t* p, size_t avail) {
  uint64_t w = 0;
  std::memcpy(&w, p, avail < 8 ? avail : 8);
  return w;
}

// AVX2 popcount of each byte by nibble lookup.
__attribute__((target("avx2"))) inline __m256i popcount_bytes_avx2(__m256i v) {
  const __m256i lut = _mm256_setr_epi8(0, 1, 1, 2, 1, 2, 2, 3, 1, 2, 2, 3, 2, 3, 3, 4, 0, 1, 1, 2, 1, 2, 2, 3, 1, 2,
                                       2, 3, 2, 3, 3, 4);
  const __m256i low = _mm256_set1_epi8(0x0f);
  __m256i lo = _mm256_and_si256(v, low);
  __m256i hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), low);
  return _mm256_add_epi8(_mm256_shuffle_epi8(lut, lo), _mm256_shuffle_epi8(lut, hi));
}

// ---------------------------------------------------------------- one pair, row-major codes
template <uint32_t (*Pop)(uint64_t)>
inline uint32_t hamming_words(const uint8_t* a, const uint8_t* b, size_t nbytes) {
  uint32_t s = 0;
  for (size_t i = 0; i < nbytes; i += 8) s += Pop(load_word(a + i, nbytes - i) ^ load_word(b + i, nbytes - i));
  return s;
}

inline uint32_t hamming_scalar(const uint8_t* a, const uint8_t* b, size_t nbytes) {
  return hamming_words<popcount_swar>(a, b, nbytes);
}

__attribute__((target("popcnt"))) inline uint32_t hamming_popcnt(const uint8_t* a, const uint8_t* b, size_t nbytes) {
  return hamming_words<popcount_hw>(a, b, nbytes);
}

__attribute__((target("avx2,popcnt"))) inline uint32_t hamming_avx2(const uint8_t* a, const uint8_t* b, size_t nbytes) {
  __m256i acc = _mm256_setzero_si256();
  size_t i = 0;
  for (; i + 32 <= nbytes; i += 32) {
    __m256i x = _mm256_xor_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(a + i)),
                                 _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + i)));
    acc = _mm256_add_epi64(acc, _mm256_sad_epu8(popcount_bytes_avx2(x), _mm256_setzero_si256()));
  }
  alignas(32) uint64_t lanes[4];
  _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), acc);
  uint32_t s = static_cast<uint32_t>(lanes[0] + lanes[1] + lanes[2] + lanes[3]);
  return s + hamming_words<popcount_hw>(a + i, b + i, nbytes - i);
}

__attribute__((target("avx512f,avx512bw,avx512vpopcntdq"))) inline uint32_t hamming_avx512(const uint8_t* a,
                                                                                            const uint8_t* b,
                                                                                            size_t nbytes) {
  __m512i acc = _mm512_setzero_si512();
  size_t i = 0;
  for (; i + 64 <= nbytes; i += 64)
    acc = _mm512_add_epi64(acc, _mm512_popcnt_epi64(_mm512_xor_si512(_mm512_loadu_si512(a + i), _mm512_loadu_si512(b + i))));
  if (i < nbytes) {
    __mmask64 m = (~0ULL) >> (64 - (nbytes - i));
    acc = _mm512_add_epi64(acc, _mm512_popcnt_epi64(_mm512_xor_si512(_mm512_maskz_loadu_epi8(m, a + i),
                                                                     _mm512_maskz_loadu_epi8(m, b + i))));
  }
  return static_cast<uint32_t>(_mm512_reduce_add_epi64(acc));
}

inline bool has_popcnt() {
  static const bool v = detect_cpu().popcnt;
  return v;
}

inline uint32_t hamming(const uint8_t* a, const uint8_t* b, size_t nbytes, Level level) {
  switch (level) {
    case Level::AVX512: return hamming_avx512(a, b, nbytes);
    case Level::AVX2: return hamming_avx2(a, b, nbytes);
    default: return has_popcnt() ? hamming_popcnt(a, b, nbytes) : hamming_scalar(a, b, nbytes);
  }
}

// ---------------------------------------------------------------- block scans
// Scans blocks [b0, b1) of the transposed layout against one query (its code
// as `words` 64-bit words) and pushes rows whose distance beats the current
// k-th best. `allow` (one byte per block, may be null) and `last_mask` (valid
// lanes of the final, partial block) decide which lanes may enter.
struct BlockScan {
  const uint64_t* blocks;
  size_t words;
  size_t nblocks;
  uint8_t last_mask;
  const uint8_t* allow;  // allow bitset viewed as bytes, or null

  uint8_t lane_mask(size_t b) const {
    uint8_t m = allow ? allow[b] : 0xFF;
    return b + 1 == nblocks ? static_cast<uint8_t>(m & last_mask) : m;
  }
};

using HammingTop = TopK<int32_t>;

inline void push_lanes(HammingTop& top, const uint64_t* dist, unsigned mask, size_t b) {
  while (mask) {
    unsigned l = static_cast<unsigned>(__builtin_ctz(mask));
    top.push(static_cast<int32_t>(dist[l]), static_cast<int64_t>(b * kBlockRows + l));
    mask &= mask - 1;
  }
}

template <uint32_t (*Pop)(uint64_t)>
inline void scan_blocks_words(const BlockScan& s, const uint64_t* q, size_t b0, size_t b1, HammingTop& top) {
  uint64_t dist[kBlockRows];
  for (size_t b = b0; b < b1; ++b) {
    unsigned mask = s.lane_mask(b);
    if (!mask) continue;
    const uint64_t* blk = s.blocks + b * s.words * kBlockRows;
    for (size_t l = 0; l < kBlockRows; ++l) dist[l] = 0;
    for (size_t k = 0; k < s.words; ++k)
      for (size_t l = 0; l < kBlockRows; ++l) dist[l] += Pop(blk[k * kBlockRows + l] ^ q[k]);
    const uint64_t thr = static_cast<uint64_t>(top.threshold());
    unsigned pass = 0;
    for (size_t l = 0; l < kBlockRows; ++l) pass |= static_cast<unsigned>(dist[l] < thr) << l;
    push_lanes(top, dist, mask & pass, b);
  }
}

inline void scan_blocks_scalar(const BlockScan& s, const uint64_t* q, size_t b0, size_t b1, HammingTop& top) {
  scan_blocks_words<popcount_swar>(s, q, b0, b1, top);
}

__attribute__((target("popcnt"))) inline void scan_blocks_popcnt(const BlockScan& s, const uint64_t* q, size_t b0,
                                                                 size_t b1, HammingTop& top) {
  scan_blocks_words<popcount_hw>(s, q, b0, b1, top);
}

__attribute__((target("avx2,popcnt"))) inline void scan_blocks_avx2(const BlockScan& s, const uint64_t* q, size_t b0,
                                                                    size_t b1, HammingTop& top) {
  alignas(32) uint64_t dist[kBlockRows];
  const __m256i zero = _mm256_setzero_si256();
  for (size_t b = b0; b < b1; ++b) {
    unsigned mask = s.lane_mask(b);
    if (!mask) continue;
    const uint64_t* blk = s.blocks + b * s.words * kBlockRows;
    __m256i acc_lo = zero, acc_hi = zero;
    size_t k = 0;
    while (k < s.words) {
      // Byte counters hold at most 8 per word: flush to 64-bit lanes every 16 words.
      size_t end = k + 16 < s.words ? k + 16 : s.words;
      __m256i c_lo = zero, c_hi = zero;
      for (; k < end; ++k) {
        __m256i qk = _mm256_set1_epi64x(static_cast<long long>(q[k]));
        const __m256i* p = reinterpret_cast<const __m256i*>(blk + k * kBlockRows);
        c_lo = _mm256_add_epi8(c_lo, popcount_bytes_avx2(_mm256_xor_si256(_mm256_loadu_si256(p), qk)));
        c_hi = _mm256_add_epi8(c_hi, popcount_bytes_avx2(_mm256_xor_si256(_mm256_loadu_si256(p + 1), qk)));
      }
      acc_lo = _mm256_add_epi64(acc_lo, _mm256_sad_epu8(c_lo, zero));
      acc_hi = _mm256_add_epi64(acc_hi, _mm256_sad_epu8(c_hi, zero));
    }
    _mm256_store_si256(reinterpret_cast<__m256i*>(dist), acc_lo);
    _mm256_store_si256(reinterpret_cast<__m256i*>(dist + 4), acc_hi);
    const uint64_t thr = static_cast<uint64_t>(top.threshold());
    unsigned pass = 0;
    for (size_t l = 0; l < kBlockRows; ++l) pass |= static_cast<unsigned>(dist[l] < thr) << l;
    push_lanes(top, dist, mask & pass, b);
  }
}

// Distances of the 8 rows of one block, for the AVX-512 scan.
__attribute__((target("avx512f,avx512bw,avx512vpopcntdq"))) inline __m512i block_distances_avx512(
    const uint64_t* blk, const uint64_t* q, size_t words) {
  __m512i acc0 = _mm512_setzero_si512(), acc1 = _mm512_setzero_si512();
  size_t k = 0;
  for (; k + 2 <= words; k += 2) {
    acc0 = _mm512_add_epi64(acc0, _mm512_popcnt_epi64(_mm512_xor_si512(
                                      _mm512_loadu_si512(blk + k * kBlockRows), _mm512_set1_epi64(static_cast<long long>(q[k])))));
    acc1 = _mm512_add_epi64(acc1, _mm512_popcnt_epi64(_mm512_xor_si512(
                                      _mm512_loadu_si512(blk + (k + 1) * kBlockRows), _mm512_set1_epi64(static_cast<long long>(q[k + 1])))));
  }
  if (k < words)
    acc0 = _mm512_add_epi64(acc0, _mm512_popcnt_epi64(_mm512_xor_si512(
                                      _mm512_loadu_si512(blk + k * kBlockRows), _mm512_set1_epi64(static_cast<long long>(q[k])))));
  return _mm512_add_epi64(acc0, acc1);
}

__attribute__((target("avx512f,avx512bw,avx512vpopcntdq,popcnt"))) inline void scan_blocks_avx512(
    const BlockScan& s, const uint64_t* q, size_t b0, size_t b1, HammingTop& top) {
  alignas(64) uint64_t dist[kBlockRows];
  const size_t words = s.words, stride = words * kBlockRows;
  __m512i thr = _mm512_set1_epi64(top.threshold());
  size_t b = b0;
  // Two blocks per step: more independent loads in flight on a memory-bound scan.
  for (; b + 2 <= b1; b += 2) {
    unsigned m0 = s.lane_mask(b), m1 = s.lane_mask(b + 1);
    if (!(m0 | m1)) continue;
    __m512i d0 = block_distances_avx512(s.blocks + b * stride, q, words);
    __m512i d1 = block_distances_avx512(s.blocks + (b + 1) * stride, q, words);
    unsigned p0 = _mm512_mask_cmplt_epu64_mask(static_cast<__mmask8>(m0), d0, thr);
    unsigned p1 = _mm512_mask_cmplt_epu64_mask(static_cast<__mmask8>(m1), d1, thr);
    if (p0 | p1) {
      if (p0) {
        _mm512_store_si512(dist, d0);
        push_lanes(top, dist, p0, b);
      }
      if (p1) {
        _mm512_store_si512(dist, d1);
        push_lanes(top, dist, p1, b + 1);
      }
      thr = _mm512_set1_epi64(top.threshold());
    }
  }
  for (; b < b1; ++b) {
    unsigned mask = s.lane_mask(b);
    if (!mask) continue;
    __m512i d = block_distances_avx512(s.blocks + b * stride, q, words);
    unsigned pass = _mm512_mask_cmplt_epu64_mask(static_cast<__mmask8>(mask), d, thr);
    if (pass) {
      _mm512_store_si512(dist, d);
      push_lanes(top, dist, pass, b);
      thr = _mm512_set1_epi64(top.threshold());
    }
  }
}

using BlockScanKernel = void (*)(const BlockScan&, const uint64_t*, size_t, size_t, HammingTop&);

inline BlockScanKernel block_scan_kernel(Level level) {
  switch (level) {
    case Level::AVX512: return scan_blocks_avx512;
    case Level::AVX2: return scan_blocks_avx2;
    default: return has_popcnt() ? scan_blocks_popcnt : scan_blocks_scalar;
  }
}

}  // namespace vecsift
