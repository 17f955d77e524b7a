// The AVX-512 VBMI scan of 1-bit codes in the pair layout (quant_layout.hpp).
//
// In the pair layout one 64-byte register holds byte j of 64 rows, so a
// single lookup table serves the whole register, and `vpermt2b` takes a
// 128-entry table (two registers) indexed by the low 7 bits of each byte: the
// sum of the query values of 7 dimensions in one instruction. The 8th bit
// (the byte's sign) adds its query value under the mask `vpmovb2m` makes.
// Per 64 bytes of codes that is 3 instructions against 6 for the two nibble
// lookups of the plane kernel (quant_scan.hpp), which cuts each byte in two.
// The byte sums of two positions (<= 2 x 120) are accumulated as in the plane
// kernel: T += v as u16 lanes and O += v >> 8 (odd rows); even rows are
// T - 256 O (mod 2^16, exact since a row's sum per pass is <= 120 J <= 61,440).
//
// Each pass of a query's tables (quant_codes.hpp: 4-bit digits of the query,
// lo/hi nibble tables per byte) becomes, per byte j, 192 bytes: entries 0-63
// and 64-127 of the 7-bit table and the bit-7 value in every lane. Four pairs
// share each table load (two for two-pass queries, whose counters would not
// fit the 32 registers otherwise). The same integer S as the plane kernel,
// so the same estimates.
//
// Measured on an AMD EPYC Zen 4 (throwaway C++ probe, 512-bit codes, one
// 4-bit query, medians of 11): 0.97-1.02 ns a row against 1.31-1.34 for the
// plane kernel, with the codes in L1 and streamed from L3 alike.
//
// Batches scan one query at a time: 2-4 queries sharing each pass over a pair
// (as the plane kernel's batches do) measured slower there, since each query
// needs 6 table loads per 128 bytes and 2-4 queries' tables (12 KiB each at
// 512 dimensions) crowd Zen 4's 32 KiB L1 (docs/quantised.md).
#pragma once

#include <immintrin.h>

#include <cstddef>
#include <cstdint>

#include "vecsift/kernels/aligned.hpp"
#include "vecsift/kernels/quant_scan.hpp"

namespace vecsift {

constexpr size_t kQuantPairTableBytes = 192;  // per byte position and pass

// The VBMI tables of a query: passes x J x kQuantPairTableBytes bytes at out.
__attribute__((target("avx512f,avx512bw,avx512vbmi"))) inline void quant_pair_tables_vbmi(const uint8_t* luts,
                                                                                          size_t J, int passes,
                                                                                          uint8_t* out) {
  alignas(64) uint8_t iota[64];
  for (int i = 0; i < 64; ++i) iota[i] = static_cast<uint8_t>(i);
  const __m512i x = _mm512_load_si512(iota), nib = _mm512_set1_epi8(0x0f);
  const __m512i x_lo = _mm512_and_si512(x, nib);
  const __m512i x_hi = _mm512_and_si512(_mm512_srli_epi16(x, 4), nib);       // 0..3: entries 0-63
  const __m512i x_hi4 = _mm512_add_epi8(x_hi, _mm512_set1_epi8(4));           // 4..7: entries 64-127
  for (int g = 0; g < passes; ++g)
    for (size_t j = 0; j < J; ++j) {
      const uint8_t* t = luts + (static_cast<size_t>(g) * J + j) * 32;
      const __m512i L = _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(t)));
      const __m512i H = _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(t + 16)));
      const __m512i lo = _mm512_shuffle_epi8(L, x_lo);
      uint8_t* o = out + (static_cast<size_t>(g) * J + j) * kQuantPairTableBytes;
      _mm512_store_si512(o, _mm512_add_epi8(lo, _mm512_shuffle_epi8(H, x_hi)));
      _mm512_store_si512(o + 64, _mm512_add_epi8(lo, _mm512_shuffle_epi8(H, x_hi4)));
      _mm512_store_si512(o + 128, _mm512_set1_epi8(static_cast<char>(t[16 + 8])));  // bit 7 alone
    }
}

// The tables for a pair-layout scan at `level` (empty unless it runs the VBMI kernel).
inline void quant_pair_tables(Level level, const uint8_t* luts, size_t J, int passes, AlignedBytes& out) {
  out.clear();
  if (level != Level::AVX512 || !cpu_has_vbmi()) return;
  out.resize(static_cast<size_t>(passes) * J * kQuantPairTableBytes);
  quant_pair_tables_vbmi(luts, J, passes, out.data());
}

// Adds a pair's counters (T, O as above), shifted left by `shift`, to its sums S[0..3]: rows 0-15,
// 16-31, 32-47, 48-63 as u32. u16 lane i of E / O holds row 2i / 2i+1: interleaved back into row order.
__attribute__((target("avx512f,avx512bw"), always_inline)) inline void quant_pair_fold(__m512i T, __m512i O, int shift,
                                                                                       __m512i* S) {
  alignas(64) static const uint16_t kLo[32] = {0,  32, 1,  33, 2,  34, 3,  35, 4,  36, 5,  37, 6,  38, 7,  39,
                                               8,  40, 9,  41, 10, 42, 11, 43, 12, 44, 13, 45, 14, 46, 15, 47};
  alignas(64) static const uint16_t kHi[32] = {16, 48, 17, 49, 18, 50, 19, 51, 20, 52, 21, 53, 22, 54, 23, 55,
                                               24, 56, 25, 57, 26, 58, 27, 59, 28, 60, 29, 61, 30, 62, 31, 63};
  const __m512i E = _mm512_sub_epi16(T, _mm512_slli_epi16(O, 8));
  const __m512i rlo = _mm512_permutex2var_epi16(E, _mm512_load_si512(kLo), O);
  const __m512i rhi = _mm512_permutex2var_epi16(E, _mm512_load_si512(kHi), O);
  const __m512i part[4] = {_mm512_cvtepu16_epi32(_mm512_castsi512_si256(rlo)),
                           _mm512_cvtepu16_epi32(_mm512_extracti64x4_epi64(rlo, 1)),
                           _mm512_cvtepu16_epi32(_mm512_castsi512_si256(rhi)),
                           _mm512_cvtepu16_epi32(_mm512_extracti64x4_epi64(rhi, 1))};
  for (int q = 0; q < 4; ++q) S[q] = _mm512_add_epi32(S[q], _mm512_slli_epi32(part[q], shift));
}

// S of R pairs (pointers to their first byte) for P passes: S[r][0..3] = rows 0-15, 16-31, 32-47,
// 48-63 as u32.
template <int R, int P>
__attribute__((target("avx512f,avx512bw,avx512vbmi"), always_inline)) inline void quant_pairs_vbmi(
    const uint8_t* const* pr, const uint8_t* tables, size_t J, __m512i (*S)[4]) {
  const __m512i zero = _mm512_setzero_si512();
  __m512i T[R][P], O[R][P];
  for (int r = 0; r < R; ++r)
    for (int g = 0; g < P; ++g) T[r][g] = O[r][g] = zero;
  for (size_t j = 0; j < J; j += 2) {
    __m512i A0[P], B0[P], W0[P], A1[P], B1[P], W1[P];
    for (int g = 0; g < P; ++g) {
      const uint8_t* t = tables + (static_cast<size_t>(g) * J + j) * kQuantPairTableBytes;
      A0[g] = _mm512_load_si512(t), B0[g] = _mm512_load_si512(t + 64), W0[g] = _mm512_load_si512(t + 128);
      A1[g] = _mm512_load_si512(t + 192), B1[g] = _mm512_load_si512(t + 256), W1[g] = _mm512_load_si512(t + 320);
    }
    for (int r = 0; r < R; ++r) {
      const __m512i d0 = _mm512_load_si512(pr[r] + j * 64), d1 = _mm512_load_si512(pr[r] + j * 64 + 64);
      const __mmask64 k0 = _mm512_movepi8_mask(d0), k1 = _mm512_movepi8_mask(d1);
      for (int g = 0; g < P; ++g) {
        __m512i a0 = _mm512_permutex2var_epi8(A0[g], d0, B0[g]), a1 = _mm512_permutex2var_epi8(A1[g], d1, B1[g]);
        a0 = _mm512_mask_add_epi8(a0, k0, a0, W0[g]);
        a1 = _mm512_mask_add_epi8(a1, k1, a1, W1[g]);
        const __m512i v = _mm512_add_epi8(a0, a1);
        T[r][g] = _mm512_add_epi16(T[r][g], v);
        O[r][g] = _mm512_add_epi16(O[r][g], _mm512_srli_epi16(v, 8));
      }
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int q = 0; q < 4; ++q) S[r][q] = zero;
    for (int g = 0; g < P; ++g) quant_pair_fold(T[r][g], O[r][g], 4 * g, S[r]);
  }
}

// Scores R pairs and hands their blocks to the sink (masks m0: first block, m1: second; 0 skips).
template <int R, int P, class Sink>
__attribute__((target("avx512f,avx512bw,avx512vbmi"))) inline void quant_pairs_flush_vbmi(
    const uint8_t* const* pr, const size_t* pb, const uint32_t* m0, const uint32_t* m1, const uint8_t* tables,
    size_t J, Sink& sink) {
  alignas(64) uint32_t buf[kQuantBlockRows];
  __m512i S[R][4];
  quant_pairs_vbmi<R, P>(pr, tables, J, S);
  for (int r = 0; r < R; ++r) {
    if (m0[r]) quant_sink_avx512_regs(sink, pb[r], m0[r], S[r][0], S[r][1], buf, 0);
    if (m1[r]) quant_sink_avx512_regs(sink, pb[r] + 1, m1[r], S[r][2], S[r][3], buf, 0);
  }
}

// Blocks [b0, b1) of a paired view; b0 and b1 may be odd (a pair across the boundary is read for
// the block on this side only). tables: quant_pair_tables of the query, or null to build them here.
template <class Sink>
__attribute__((target("avx512f,avx512bw,avx512vbmi"))) inline void quant_pair_sums_vbmi(
    const QuantBlocks& s, const uint8_t* luts, int passes, size_t b0, size_t b1, Sink& sink,
    const uint8_t* tables) {
  const size_t J = s.J;
  AlignedBytes own;
  if (!tables) {
    own.resize(static_cast<size_t>(passes) * J * kQuantPairTableBytes);
    quant_pair_tables_vbmi(luts, J, passes, own.data());
    tables = own.data();
  }
  constexpr int kMax = 4;
  const int group = passes == 2 ? 2 : 4;
  const uint8_t* pr[kMax];
  size_t pb[kMax];
  uint32_t m0[kMax], m1[kMax];
  int pend = 0;
  auto flush = [&](int m) {
    if (passes == 2) {
      if (m == 2) return quant_pairs_flush_vbmi<2, 2>(pr, pb, m0, m1, tables, J, sink);
      for (int i = 0; i < m; ++i) quant_pairs_flush_vbmi<1, 2>(pr + i, pb + i, m0 + i, m1 + i, tables, J, sink);
      return;
    }
    if (m == 4) return quant_pairs_flush_vbmi<4, 1>(pr, pb, m0, m1, tables, J, sink);
    for (int i = 0; i < m; ++i) quant_pairs_flush_vbmi<1, 1>(pr + i, pb + i, m0 + i, m1 + i, tables, J, sink);
  };
  for (size_t b = b0 & ~size_t{1}; b < b1; b += 2) {
    const uint32_t a = b >= b0 ? s.lane_mask(b) : 0u, c = b + 1 < b1 ? s.lane_mask(b + 1) : 0u;
    if (!(a | c)) continue;  // a fully filtered pair is never read
    pr[pend] = s.block_ptr(b), pb[pend] = b, m0[pend] = a, m1[pend] = c;
    if (++pend == group) flush(pend), pend = 0;
  }
  if (pend) flush(pend);
}

// S of the blocks [b0, b1) of a paired view at `level`: the VBMI kernel where the CPU has it, else
// the AVX2 or scalar plane kernels, which read a paired block's bytes 64 apart. The same integers.
template <class Sink>
inline void quant_pair_sums(Level level, const QuantBlocks& s, const uint8_t* luts, int passes, size_t b0,
                            size_t b1, Sink& sink, const uint8_t* tables = nullptr) {
  if (level == Level::AVX512 && cpu_has_vbmi()) return quant_pair_sums_vbmi(s, luts, passes, b0, b1, sink, tables);
  quant_sums(level, s, luts, passes, b0, b1, sink);
}

}  // namespace vecsift
