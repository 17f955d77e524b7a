// The 1-bit screen of 2- and 4-bit scans (Extended RaBitQ's idea of a cheap
// first estimate from the most significant bits).
//
// The top plane of a B-bit code is the code's sign bits: bit B-1 of
// u = floor(t*o + 2^(B-1)) is set iff o_i >= 0. Read alone it is a 1-bit RaBitQ code
// of the same vector, with factors of its own (a1, su1, g1, h1: quant_codes.hpp
// with y = b - 1/2), so the S of the top plane against the query gives an
// unbiased estimate est1 and its z-sigma upper bound
//   hi = est1 + z * mq * g1 * sqrt(|q_r|^2 * h1 + dq^2 / 12)
// (the half-width of QuantizedIndex::bound). The scan uses a bound at least as
// wide with one factor a row, w = g1 * sqrt(h1) rounded up, times the query's
// sqrt(|q_r|^2 + (dq^2 / 12) / h_min), h_min the least h1 of the index: the dq
// term is ~7% of the variance and h1 varies by ~20% across rows, so this widens
// the bound by ~1% (measured: the same share of blocks refined) and saves a
// stream and a sqrt a row.
//
// A block none of whose rows has hi above the current k-th best estimate is
// dropped without reading the rest of its code; the others get the full S (2 bits:
// 2 * S_top + S_low; 4 bits: the nibble scan of the block), the same integer as a
// full scan, and are scored as usual. So a row is
// lost only when its 1-bit estimate falls z sigma below the k-th best 2-bit
// estimate; otherwise the k best rows are exactly those of the full scan.
//
// The decisions use the same IEEE operations at every level (no fused
// multiply-add), so a screened search returns the same rows at every SIMD level.
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <vector>

#include "vecsift/kernels/cpu.hpp"
#include "vecsift/kernels/quant_scan.hpp"

namespace vecsift {

// Per-query constants and the top-plane factors of the screen.
struct QuantScreenArgs {
  QuantScoreArgs top;  // a1, su1, add and the 1-bit estimator
  const float* w;      // g1 * sqrt(h1) a row
  float zs;            // z * mq * sqrt(|q_r|^2 + (dq^2 / 12) / h_min)
};

// Floor of h1 in w and h_min: keeps the bound valid for a row whose 1-bit code is exact (cos = 1,
// h1 = 0, g1 > 0) while such a row exists.
constexpr double kScreenHFloor = 1e-7;

inline float quant_screen_hi(const QuantScreenArgs& f, size_t r, uint32_t S) {
  const float e = f.top.e(S, f.top.a[r], f.top.su[r], f.top.add[r]);
  const float hi = e + f.zs * f.w[r];
  return hi == hi ? hi : std::numeric_limits<float>::infinity();  // NaN: cannot tell, so read the block
}

// The largest upper bound among the masked lanes of a block (-inf if none). A NaN bound (junk
// top factors given to add_codes) counts as +inf: such a row's block is always read in full, and
// the full estimate decides, as without the screen.
__attribute__((target("avx512f"))) inline float quant_screen_max_avx512(const QuantScreenArgs& f, size_t row0,
                                                                        const uint32_t* S, uint32_t mask) {
  const __m512 zs = _mm512_set1_ps(f.zs), inf = _mm512_set1_ps(std::numeric_limits<float>::infinity());
  __m512 m = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
  for (size_t l = 0; l < kQuantBlockRows; l += 16) {
    const size_t r = row0 + l;
    const __m512 e = quant_estimates16_avx512(f.top, r, _mm512_loadu_si512(S + l));
    __m512 hi = _mm512_add_ps(e, _mm512_mul_ps(zs, _mm512_loadu_ps(f.w + r)));
    hi = _mm512_mask_mov_ps(hi, _mm512_cmp_ps_mask(hi, hi, _CMP_UNORD_Q), inf);
    m = _mm512_mask_max_ps(m, static_cast<__mmask16>(mask >> l), hi, m);
  }
  return _mm512_reduce_max_ps(m);
}

inline float quant_screen_max(Level level, const QuantScreenArgs& f, size_t row0, const uint32_t* S, uint32_t mask) {
  if (level == Level::AVX512) return quant_screen_max_avx512(f, row0, S, mask);
  float m = -std::numeric_limits<float>::infinity();
  for (size_t l = 0; l < kQuantBlockRows; ++l)
    if ((mask >> l) & 1u) {
      const float hi = quant_screen_hi(f, row0 + l, S[l]);
      m = hi > m ? hi : m;
    }
  return m;
}

// The S of one block of a view (every lane; the caller masks), through the level's kernel.
struct QuantBlockCapture {
  uint32_t* S;
  void block(size_t, uint32_t, const uint32_t* s, Level) {
    for (size_t l = 0; l < kQuantBlockRows; ++l) S[l] = s[l];
  }
};

// Phase 1 of a screened scan: each block's S_top and the largest bound of its rows, while the
// block's S is in L1.
struct QuantScreenCollect {
  const QuantScreenArgs& f;
  size_t b0;
  uint32_t* S_top;  // 32 per block from b0
  float* max_hi;    // one per block from b0, -inf beforehand
  void block(size_t b, uint32_t mask, const uint32_t* S, Level level) {
    // The four factor streams are not caught by the hardware prefetcher in time (perf: the bound
    // stalled on their loads): fetch them two blocks ahead. Hints past the end cannot fault.
    const size_t ahead = (b + 2) * kQuantBlockRows;
    for (const float* p : {f.top.a, f.top.su, f.top.add, f.w}) {
      _mm_prefetch(reinterpret_cast<const char*>(p + ahead), _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(p + ahead + 16), _MM_HINT_T0);
    }
    std::memcpy(S_top + (b - b0) * kQuantBlockRows, S, kQuantBlockRows * sizeof(uint32_t));
    max_hi[b - b0] = quant_screen_max(level, f, b * kQuantBlockRows, S, mask);
  }
};

// A screened 2- or 4-bit scan of blocks [b0, b1) for one query into `full` (the scoring sink, which
// owns the top-k and reports need(), its current k-th best estimate). Phase 1 reads the top plane of
// every block; phase 2 scores in full the `seeds` blocks with the largest bounds, so need starts near
// its final value (a scan in row order would refine most early blocks against a low k-th best:
// measured 47% of blocks at z = 3 that way against 20% with 2k seeds); phase 3 scores the other
// blocks whose bound beats need. Returns the number of blocks scored in full.
// wide: the query's AVX-512 tables (required at that level).
// full_S(b, S_top, S) writes the full S of block b (the caller's codes: the low plane of 2-bit
// blocks, the nibbles of 4-bit ones).
template <class FullS, class Full>
inline size_t quant_screened_scan(Level level, const QuantBlocks& top_view, const uint8_t* luts, int passes,
                                  const uint8_t* wide, const QuantScreenArgs& f, size_t b0, size_t b1, size_t seeds,
                                  FullS&& full_S, Full& full) {
  if (b1 <= b0) return 0;
  const size_t nb = b1 - b0;
  thread_local std::vector<uint32_t> S_top;  // reused: a fresh 100k-row buffer a query would page-fault
  thread_local std::vector<float> max_hi, vals;
  S_top.resize(nb * kQuantBlockRows);
  max_hi.assign(nb, -std::numeric_limits<float>::infinity());
  QuantScreenCollect collect{f, b0, S_top.data(), max_hi.data()};
  quant_sums(level, top_view, luts, passes, b0, b1, collect, wide);

  size_t refined = 0;
  auto refine = [&](size_t i) {
    const size_t b = b0 + i;
    alignas(64) uint32_t S[kQuantBlockRows];
    full_S(b, S_top.data() + i * kQuantBlockRows, S);
    full.block(b, top_view.lane_mask(b), S, level);
    max_hi[i] = -std::numeric_limits<float>::infinity();  // done: phase 3 skips it
    ++refined;
  };
  // Seeds: the blocks whose bound is at least the seeds-th largest (ties may add a few), in row order.
  // The bar is one of the bounds, so it is above -inf: blocks with no lane to score never pass it.
  vals.clear();
  for (size_t i = 0; i < nb; ++i)
    if (max_hi[i] > -std::numeric_limits<float>::infinity()) vals.push_back(max_hi[i]);
  if (seeds && !vals.empty()) {
    seeds = std::min(seeds, vals.size());
    std::nth_element(vals.begin(), vals.begin() + static_cast<std::ptrdiff_t>(seeds - 1), vals.end(),
                     std::greater<float>());
    const float bar = vals[seeds - 1];
    for (size_t i = 0; i < nb; ++i)
      if (max_hi[i] >= bar) refine(i);
    full.tighten();
  }
  for (size_t i = 0; i < nb; ++i)
    if (max_hi[i] > full.need()) refine(i);
  return refined;
}

}  // namespace vecsift
