// Scan kernel for 4-bit codes in the nibble layout (quant_layout.hpp).
//
// The same integer as quant_scan.hpp, S = sum_i u_i * qu_i, computed from the
// values rather than from bit planes: for each 4-byte word of eight rows,
// pmaddubsw multiplies the query bytes (unsigned, <= 255) by the low and the
// high nibbles (<= 15) and adds neighbouring pairs into 16-bit lanes; pmaddwd
// by ones then adds each row's two lanes into its 32-bit counter. Every
// product is exact and no pair saturates (2 * 255 * 15 = 7,650), so S is
// identical to the plane kernels' at every level.
//
// Measured on the 2-core AMD EPYC (Zen 1, AVX2) VM, 2,048 rows x 384 dims in
// L2, one thread: an 8-bit query 30.5 us here against 53.5 us with four planes
// x two table passes (1.75x); a 4-bit query 30.5 vs 32.4 us (tie); 30k rows
// from L3/DRAM 1.3-1.5x (throwaway microbenchmark, not committed).
//
// The AVX-512 level runs the AVX2 kernel: a zmm form (or VNNI's vpdpbusd) is
// the next step, but could not be run on the machine this was written on.
#pragma once

#include <immintrin.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "vecsift/kernels/cpu.hpp"
#include "vecsift/kernels/quant_scan.hpp"

namespace vecsift {

// Query words of the nibble scan: for word w, [2w] packs qu[8w + 2b] in byte b
// (the dimensions of the low nibbles), [2w + 1] packs qu[8w + 2b + 1].
inline void build_query_words(const uint8_t* qu, size_t D, std::vector<uint32_t>& out) {
  const size_t W = D / 8;
  out.resize(2 * W);
  for (size_t w = 0; w < W; ++w) {
    uint32_t lo = 0, hi = 0;
    for (int b = 0; b < 4; ++b) {
      lo |= static_cast<uint32_t>(qu[8 * w + 2 * b]) << (8 * b);
      hi |= static_cast<uint32_t>(qu[8 * w + 2 * b + 1]) << (8 * b);
    }
    out[2 * w] = lo, out[2 * w + 1] = hi;
  }
}

// S of the row at `lane` of a nibble block (W = D/8 words).
inline uint32_t quant_nibble_row_sum(const uint8_t* blk, size_t lane, size_t W, const uint32_t* qw) {
  uint32_t S = 0;
  for (size_t w = 0; w < W; ++w) {
    const uint8_t* src = blk + (w * kQuantBlockRows + lane) * 4;
    for (int b = 0; b < 4; ++b) {
      const uint32_t qe = (qw[2 * w] >> (8 * b)) & 255u, qo = (qw[2 * w + 1] >> (8 * b)) & 255u;
      S += (src[b] & 15u) * qe + (src[b] >> 4) * qo;
    }
  }
  return S;
}

template <class Sink>
inline void quant_nibble_sums_scalar(const QuantBlocks& s, const uint32_t* qw, size_t b0, size_t b1, Sink& sink,
                                     Level level) {
  uint32_t S[kQuantBlockRows];
  for (size_t b = b0; b < b1; ++b) {
    const uint32_t mask = s.lane_mask(b);
    if (!mask) continue;
    const uint8_t* blk = s.data + b * s.block_stride();
    for (size_t l = 0; l < kQuantBlockRows; ++l) S[l] = quant_nibble_row_sum(blk, l, s.J, qw);
    sink.block(b, mask, S, level);
  }
}

// K words are summed in 16-bit lanes before pmaddwd widens them. A word adds
// at most 4 * 15 * max(qu) to a lane, and the lanes are read as signed:
// K = 2 for 8-bit queries (30,600), K = 8 up to 6-bit queries (30,240).
// Each word's two cache lines of the next block are prefetched: 30k rows of
// 384 dims, one 8-bit query, codes evicted from cache before each scan 900-1,090
// -> 565-640 us, codes in L3 490-550 -> 450-460 us (Zen 1 VM, min of 21;
// a prefetch 2 or 4 blocks ahead measured the same or slower). A prefetch is a
// hint: past the end of the codes it reads nothing and cannot fault. Not at the
// AVX-512 level: there the same prefetch in the plane scan measured slower on
// both AVX-512 machines (docs/quantised.md), and this one is unmeasured.
template <int K, bool Prefetch, class Sink>
__attribute__((target("avx2"))) inline void quant_nibble_sums_avx2(const QuantBlocks& s, const uint32_t* qw,
                                                                   size_t b0, size_t b1, Sink& sink, Level level) {
  const size_t W = s.J, stride = s.block_stride();  // W: a multiple of 8 (D is a multiple of 64)
  const __m256i nib = _mm256_set1_epi8(0x0f), ones = _mm256_set1_epi16(1);
  alignas(32) uint32_t S[kQuantBlockRows];
  for (size_t b = b0; b < b1; ++b) {
    const uint32_t mask = s.lane_mask(b);
    if (!mask) continue;
    const uint8_t* blk = s.data + b * stride;
    __m256i acc[4] = {_mm256_setzero_si256(), _mm256_setzero_si256(), _mm256_setzero_si256(), _mm256_setzero_si256()};
    for (size_t w = 0; w < W; w += K) {
      __m256i t[4] = {_mm256_setzero_si256(), _mm256_setzero_si256(), _mm256_setzero_si256(), _mm256_setzero_si256()};
      for (int k = 0; k < K; ++k) {
        const __m256i ql = _mm256_set1_epi32(static_cast<int>(qw[2 * (w + k)]));
        const __m256i qh = _mm256_set1_epi32(static_cast<int>(qw[2 * (w + k) + 1]));
        const uint8_t* src = blk + (w + k) * kQuantBlockRows * 4;
        if (Prefetch) {
          _mm_prefetch(reinterpret_cast<const char*>(src + stride), _MM_HINT_T0);
          _mm_prefetch(reinterpret_cast<const char*>(src + stride + 64), _MM_HINT_T0);
        }
        for (int r = 0; r < 4; ++r) {  // rows 8r..8r+7
          const __m256i d = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + 32 * r));
          const __m256i lo = _mm256_and_si256(d, nib), hi = _mm256_and_si256(_mm256_srli_epi16(d, 4), nib);
          t[r] = _mm256_add_epi16(t[r], _mm256_add_epi16(_mm256_maddubs_epi16(ql, lo), _mm256_maddubs_epi16(qh, hi)));
        }
      }
      for (int r = 0; r < 4; ++r) acc[r] = _mm256_add_epi32(acc[r], _mm256_madd_epi16(t[r], ones));
    }
    for (int r = 0; r < 4; ++r) _mm256_store_si256(reinterpret_cast<__m256i*>(S + 8 * r), acc[r]);
    sink.block(b, mask, S, level);
  }
}

// S of every row of blocks [b0, b1) of a nibble-layout view (s.bits == 4)
// against a query of qbits bits given as build_query_words. The sink sees
// `level` (its scoring may use AVX-512 where the sums ran the AVX2 kernel).
template <class Sink>
inline void quant_nibble_sums(Level level, const QuantBlocks& s, const uint32_t* qw, int qbits, size_t b0, size_t b1,
                              Sink& sink) {
  if (level == Level::Scalar) return quant_nibble_sums_scalar(s, qw, b0, b1, sink, level);
  const bool pf = level == Level::AVX2;
  if (qbits <= 6)
    return pf ? quant_nibble_sums_avx2<8, true>(s, qw, b0, b1, sink, level)
              : quant_nibble_sums_avx2<8, false>(s, qw, b0, b1, sink, level);
  return pf ? quant_nibble_sums_avx2<2, true>(s, qw, b0, b1, sink, level)
            : quant_nibble_sums_avx2<2, false>(s, qw, b0, b1, sink, level);
}

}  // namespace vecsift
