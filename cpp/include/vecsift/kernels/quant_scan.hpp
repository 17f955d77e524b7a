// Scan kernels over bit-plane codes (see quant_codes.hpp for the algebra).
//
// For every row the kernels compute, exactly, the integer
//   S = sum_i u_i * qu_i = sum_{p<B} 2^p * sum_i bit_p(u_i) * qu_i,
// i.e. the AND of each data plane with the query, weighted by the query value
// and summed. Rather than one AND + popcount per (data plane, query plane)
// pair, the query planes are folded into nibble lookup tables: for each byte
// of a data plane, pshufb maps its two nibbles to the sums of the selected
// query values, which is the same integer as the weighted popcounts of all
// query planes at once. Measured on this machine (AVX2, 30k x 384): one data
// plane with a 4-bit query costs ~1.3x a sign-bit Hamming scan this way,
// against ~3.7x with four AND + popcount passes (bench/bench_quantised.py).
//
// Layout: rows in blocks of 32; block b holds byte j of plane p of its 32
// rows at data[((b*B + p)*J + j)*32 + lane], J = D/8. One 256-bit register
// carries one byte of 32 rows, so every byte of it uses the same table (pshufb
// tables are per 128-bit lane), a scan that needs fewer planes reads fewer
// cache lines, and one 32-bit word of an allow bitset covers one block.
//
// The float estimate is formed from S by the same sequence of IEEE operations
// at every level (no fused multiply-add: the binding is compiled with
// -ffp-contract=off), so results are bit-identical across levels.
#pragma once

#include <immintrin.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "vecsift/kernels/aligned.hpp"
#include "vecsift/kernels/cpu.hpp"

namespace vecsift {

constexpr size_t kQuantBlockRows = 32;

// Where block b of blocks `stride` bytes apart starts; in the pair layout (quant_layout.hpp) blocks
// 2m and 2m+1 share 2 x stride bytes, the second starting 32 bytes in.
inline size_t quant_block_offset(bool paired, size_t b, size_t stride) {
  return paired ? (b & ~size_t{1}) * stride + (b & 1) * kQuantBlockRows : b * stride;
}

struct QuantBlocks {
  const uint8_t* data;
  int bits;       // B data planes
  size_t J;       // bytes per plane (D / 8)
  size_t nblocks;
  uint32_t last_mask;     // valid lanes of the final block
  const uint32_t* allow;  // one 32-bit word per block, or null
  // Bytes from one block to the next; 0: `bits` planes. A view of some planes of wider blocks (the
  // 1-bit screen reads one plane of 2-bit blocks: quant_screen.hpp) sets the blocks' own stride.
  size_t stride = 0;
  // 1-bit codes in the pair layout (quant_layout.hpp): blocks 2m and 2m+1 interleaved, byte j of
  // their 64 rows contiguous; block b's bytes are then pos_stride() = 64 apart. nblocks may be odd
  // (the last pair's second block holds no rows).
  bool paired = false;

  size_t block_stride() const { return stride ? stride : static_cast<size_t>(bits) * J * kQuantBlockRows; }
  const uint8_t* block_ptr(size_t b) const { return data + quant_block_offset(paired, b, block_stride()); }
  size_t pos_stride() const { return paired ? 2 * kQuantBlockRows : kQuantBlockRows; }
  uint32_t lane_mask(size_t b) const {
    uint32_t m = allow ? allow[b] : 0xFFFFFFFFu;
    return b + 1 == nblocks ? (m & last_mask) : m;
  }
};

inline uint32_t quant_last_mask(size_t n) {
  return n % kQuantBlockRows ? (1u << (n % kQuantBlockRows)) - 1u : 0xFFFFFFFFu;
}

// Per-query constants of est = mq * a * (dq*S + lo*su - K) + add + cq.
struct QuantEstimator {
  float dq, lo, K, mq, cq;
  float operator()(uint32_t S, float a, float su, float add) const {
    const float t1 = dq * static_cast<float>(S);
    const float t2 = lo * su;
    const float t3 = (t1 + t2) - K;
    const float t4 = a * t3;
    return mq * t4 + (add + cq);
  }
};

// Row factors and the query's estimator: what turns S into a score.
struct QuantScoreArgs {
  const float *a, *su, *add;
  QuantEstimator e;
};

// ---------------------------------------------------------------- S of one row (scalar)
// blk: QuantBlocks::block_ptr; ps: its pos_stride.
inline uint32_t quant_row_sum(const uint8_t* blk, size_t lane, int B, size_t J, const uint8_t* luts, int passes,
                              size_t ps = kQuantBlockRows) {
  uint32_t S = 0;
  for (int p = 0; p < B; ++p)
    for (int g = 0; g < passes; ++g) {
      uint32_t c = 0;
      const uint8_t* t = luts + static_cast<size_t>(g) * J * 32;
      for (size_t j = 0; j < J; ++j) {
        const uint8_t byte = blk[(p * J + j) * ps + lane];
        c += t[j * 32 + (byte & 15)] + t[j * 32 + 16 + (byte >> 4)];
      }
      S += c << (p + 4 * g);
    }
  return S;
}

// Sinks receive (block, lane mask, S[32]) and, for the scanning sink, the
// scores: score_block fills est[32] for the block at the given level.
template <class Sink>
inline void quant_sums_scalar(const QuantBlocks& s, const uint8_t* luts, int passes, size_t b0, size_t b1,
                              Sink& sink) {
  uint32_t S[kQuantBlockRows];
  for (size_t b = b0; b < b1; ++b) {
    const uint32_t mask = s.lane_mask(b);
    if (!mask) continue;
    const uint8_t* blk = s.block_ptr(b);
    const size_t ps = s.pos_stride();
    for (size_t l = 0; l < kQuantBlockRows; ++l) S[l] = quant_row_sum(blk, l, s.bits, s.J, luts, passes, ps);
    sink.block(b, mask, S, Level::Scalar);
  }
}

// ---------------------------------------------------------------- AVX2
// u16 counters of 32 rows in two registers: lo holds rows 0-7 | 16-23, hi rows
// 8-15 | 24-31 (unpack order); folded into S (u32, row order) with a shift.
__attribute__((target("avx2"), always_inline)) inline void quant_fold_avx2(__m256i lo, __m256i hi, int shift,
                                                                            __m256i* S) {
  const __m128i sh = _mm_cvtsi32_si128(shift);
  S[0] = _mm256_add_epi32(S[0], _mm256_sll_epi32(_mm256_cvtepu16_epi32(_mm256_castsi256_si128(lo)), sh));
  S[1] = _mm256_add_epi32(S[1], _mm256_sll_epi32(_mm256_cvtepu16_epi32(_mm256_castsi256_si128(hi)), sh));
  S[2] = _mm256_add_epi32(S[2], _mm256_sll_epi32(_mm256_cvtepu16_epi32(_mm256_extracti128_si256(lo, 1)), sh));
  S[3] = _mm256_add_epi32(S[3], _mm256_sll_epi32(_mm256_cvtepu16_epi32(_mm256_extracti128_si256(hi, 1)), sh));
}

// One data plane of a block against P query passes (P = 1 or 2). The nibbles
// of each data byte are cut once and looked up in every pass's tables. Two
// bytes' lo + hi values fit a u8 (each table value is at most 60); they are
// summed as u16 lanes without unpacking: T += v (even row + 256 * odd row) and
// O += v >> 8 (odd rows), and the even rows are T - 256 * O at the end (mod
// 2^16, exact since every row's sum is at most 120 * J <= 61,440).
// Each step prefetches the line `ahead` bytes on (the same place in the next
// block). Measured on the Zen 1 AVX2 VM (throwaway C++ A/B, 30k rows, 512
// dims, one 4-bit query, min of 21): 2 bits 346-392 -> 326-327 us with the
// codes in L3, 608-739 -> 500-553 us evicted; 1 bit equal in L3, 282-359 ->
// 192-270 us evicted. (Prefetching a whole block at its start measured slower.)
// ps: bytes from one data byte of the 32 rows to the next (32; 64 in the pair layout).
template <int P>
__attribute__((target("avx2"))) inline void quant_plane_avx2(const uint8_t* src, const uint8_t* luts, size_t J,
                                                             int p, __m256i* acc, size_t ahead,
                                                             size_t ps = kQuantBlockRows) {
  const __m256i nib = _mm256_set1_epi8(0x0f), zero = _mm256_setzero_si256();
  __m256i T[P], O[P];
  for (int g = 0; g < P; ++g) T[g] = O[g] = zero;
  for (size_t j = 0; j < J; j += 2) {
    _mm_prefetch(reinterpret_cast<const char*>(src + ahead + j * ps), _MM_HINT_T0);  // a hint: cannot fault
    const __m256i d0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + j * ps));
    const __m256i d1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + (j + 1) * ps));
    const __m256i n0l = _mm256_and_si256(d0, nib), n0h = _mm256_and_si256(_mm256_srli_epi16(d0, 4), nib);
    const __m256i n1l = _mm256_and_si256(d1, nib), n1h = _mm256_and_si256(_mm256_srli_epi16(d1, 4), nib);
    for (int g = 0; g < P; ++g) {
      const uint8_t* t = luts + static_cast<size_t>(g) * J * 32 + j * 32;
      const __m256i l0 = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(t)));
      const __m256i h0 = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(t + 16)));
      const __m256i l1 = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(t + 32)));
      const __m256i h1 = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(t + 48)));
      __m256i v = _mm256_add_epi8(_mm256_shuffle_epi8(l0, n0l), _mm256_shuffle_epi8(h0, n0h));
      v = _mm256_add_epi8(v, _mm256_add_epi8(_mm256_shuffle_epi8(l1, n1l), _mm256_shuffle_epi8(h1, n1h)));
      T[g] = _mm256_add_epi16(T[g], v);
      O[g] = _mm256_add_epi16(O[g], _mm256_srli_epi16(v, 8));
    }
  }
  for (int g = 0; g < P; ++g) {
    const __m256i E = _mm256_sub_epi16(T[g], _mm256_slli_epi16(O[g], 8));
    // unpack(E, O) by 16-bit lanes: rows 0-7 | 16-23 and 8-15 | 24-31, the fold's order.
    quant_fold_avx2(_mm256_unpacklo_epi16(E, O[g]), _mm256_unpackhi_epi16(E, O[g]), p + 4 * g, acc);
  }
}

template <class Sink>
__attribute__((target("avx2"))) inline void quant_sums_avx2(const QuantBlocks& s, const uint8_t* luts, int passes,
                                                            size_t b0, size_t b1, Sink& sink) {
  const size_t J = s.J;
  alignas(32) uint32_t S[kQuantBlockRows];
  for (size_t b = b0; b < b1; ++b) {
    const uint32_t mask = s.lane_mask(b);
    if (!mask) continue;
    const uint8_t* blk = s.block_ptr(b);
    const size_t ps = s.pos_stride(), ahead = s.paired ? 2 * s.block_stride() : s.block_stride();
    __m256i acc[4] = {_mm256_setzero_si256(), _mm256_setzero_si256(), _mm256_setzero_si256(), _mm256_setzero_si256()};
    for (int p = 0; p < s.bits; ++p) {
      const uint8_t* src = blk + p * J * ps;
      if (passes == 2)
        quant_plane_avx2<2>(src, luts, J, p, acc, ahead, ps);
      else
        quant_plane_avx2<1>(src, luts, J, p, acc, ahead, ps);
    }
    for (int r = 0; r < 4; ++r) _mm256_store_si256(reinterpret_cast<__m256i*>(S + 8 * r), acc[r]);
    sink.block(b, mask, S, Level::AVX2);
  }
}

// ---------------------------------------------------------------- AVX-512
// The AVX2 plane kernel with one zmm per two bytes: it carries bytes j and j+1
// of the 32 rows (contiguous in the layout), its tables are
// [T_j, T_j, T_j+1, T_j+1] by 128-bit lane. T and O are kept the same way as
// in AVX2; their two halves are added at the end (mod 2^16), which gives the
// AVX2 registers.
template <int P>
__attribute__((target("avx512f,avx512bw"))) inline void quant_plane_avx512(const uint8_t* src, const uint8_t* luts,
                                                                           size_t J, int p, __m256i* acc) {
  const __m512i nib = _mm512_set1_epi8(0x0f), zero = _mm512_setzero_si512();
  __m512i T[P], O[P];
  for (int g = 0; g < P; ++g) T[g] = O[g] = zero;
  for (size_t j = 0; j < J; j += 2) {
    const __m512i d = _mm512_loadu_si512(src + j * 32);
    const __m512i nl = _mm512_and_si512(d, nib), nh = _mm512_and_si512(_mm512_srli_epi16(d, 4), nib);
    for (int g = 0; g < P; ++g) {
      const uint8_t* t = luts + static_cast<size_t>(g) * J * 32 + j * 32;
      const __m512i l = _mm512_mask_blend_epi64(
          0xF0, _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(t))),
          _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(t + 32))));
      const __m512i h = _mm512_mask_blend_epi64(
          0xF0, _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(t + 16))),
          _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(t + 48))));
      // One byte's lo + hi (<= 120 a lane): T and O stay below 2^16 as in AVX2.
      const __m512i v = _mm512_add_epi8(_mm512_shuffle_epi8(l, nl), _mm512_shuffle_epi8(h, nh));
      T[g] = _mm512_add_epi16(T[g], v);
      O[g] = _mm512_add_epi16(O[g], _mm512_srli_epi16(v, 8));
    }
  }
  for (int g = 0; g < P; ++g) {
    const __m256i t = _mm256_add_epi16(_mm512_castsi512_si256(T[g]), _mm512_extracti64x4_epi64(T[g], 1));
    const __m256i o = _mm256_add_epi16(_mm512_castsi512_si256(O[g]), _mm512_extracti64x4_epi64(O[g], 1));
    const __m256i E = _mm256_sub_epi16(t, _mm256_slli_epi16(o, 8));
    quant_fold_avx2(_mm256_unpacklo_epi16(E, o), _mm256_unpackhi_epi16(E, o), p + 4 * g, acc);
  }
}

// Tables of bytes j and j+1 of pass g, as one zmm: [T_j, T_j, T_j+1, T_j+1] by 128-bit lane.
__attribute__((target("avx512f,avx512bw"))) inline void quant_tables_avx512(const uint8_t* t, __m512i& l, __m512i& h) {
  l = _mm512_mask_blend_epi64(0xF0, _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(t))),
                              _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(t + 32))));
  h = _mm512_mask_blend_epi64(0xF0,
                              _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(t + 16))),
                              _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(t + 48))));
}

// The tables of every byte pair and pass laid out as zmm operands (wide[(g * J/2 + j/2) * 2] = L, + 1 = H),
// built once per scan call: a block then loads each table in one instruction instead of four broadcasts
// and a blend (a third of the work of a 1-bit block).
__attribute__((target("avx512f,avx512bw"))) inline void quant_wide_tables_avx512(const uint8_t* luts, size_t J,
                                                                                 int passes, uint8_t* wide) {
  for (int g = 0; g < passes; ++g)
    for (size_t jp = 0; jp < J / 2; ++jp) {
      const size_t w = (static_cast<size_t>(g) * (J / 2) + jp) * 2;
      __m512i l, h;
      quant_tables_avx512(luts + static_cast<size_t>(g) * J * 32 + jp * 64, l, h);
      _mm512_storeu_si512(wide + w * 64, l);
      _mm512_storeu_si512(wide + (w + 1) * 64, h);
    }
}

// All B planes of a block at once (B <= 4). The tables depend on the byte and the pass, not the plane,
// so each is loaded once per byte pair and shared by every plane, and four bytes' values (<= 240) are
// summed as u8 before the u16 counters take them: half the counter work of the plane-at-a-time kernel
// and 1/B of its table loads. The same integers per (plane, pass) as quant_plane_avx512.
// Prefetch: touch the same lines `ahead` bytes on (the next block of a plane view). A template
// argument, not a test in the loop: with the test inside, GCC kept T and O on the stack.
template <int B, int P, bool Prefetch = false>
__attribute__((target("avx512f,avx512bw"))) inline void quant_block_avx512(const uint8_t* blk, const uint8_t* wide,
                                                                           size_t J, __m256i* acc, size_t ahead = 0) {
  const __m512i nib = _mm512_set1_epi8(0x0f), zero = _mm512_setzero_si512();
  __m512i T[B][P], O[B][P];
  for (int p = 0; p < B; ++p)
    for (int g = 0; g < P; ++g) T[p][g] = O[p][g] = zero;
  const size_t plane = J * kQuantBlockRows;
  size_t j = 0;
  for (; j + 4 <= J; j += 4) {
    __m512i L0[P], H0[P], L1[P], H1[P];
    for (int g = 0; g < P; ++g) {
      const uint8_t* t = wide + (static_cast<size_t>(g) * (J / 2) + j / 2) * 128;
      L0[g] = _mm512_loadu_si512(t), H0[g] = _mm512_loadu_si512(t + 64);
      L1[g] = _mm512_loadu_si512(t + 128), H1[g] = _mm512_loadu_si512(t + 192);
    }
    for (int p = 0; p < B; ++p) {
      const uint8_t* src = blk + p * plane + j * 32;
      if (Prefetch) {  // hints: cannot fault
        _mm_prefetch(reinterpret_cast<const char*>(src + ahead), _MM_HINT_T0);
        _mm_prefetch(reinterpret_cast<const char*>(src + ahead + 64), _MM_HINT_T0);
      }
      const __m512i d0 = _mm512_loadu_si512(src), d1 = _mm512_loadu_si512(src + 64);
      const __m512i n0l = _mm512_and_si512(d0, nib), n0h = _mm512_and_si512(_mm512_srli_epi16(d0, 4), nib);
      const __m512i n1l = _mm512_and_si512(d1, nib), n1h = _mm512_and_si512(_mm512_srli_epi16(d1, 4), nib);
      for (int g = 0; g < P; ++g) {
        __m512i v = _mm512_add_epi8(_mm512_shuffle_epi8(L0[g], n0l), _mm512_shuffle_epi8(H0[g], n0h));
        v = _mm512_add_epi8(v, _mm512_add_epi8(_mm512_shuffle_epi8(L1[g], n1l), _mm512_shuffle_epi8(H1[g], n1h)));
        T[p][g] = _mm512_add_epi16(T[p][g], v);
        O[p][g] = _mm512_add_epi16(O[p][g], _mm512_srli_epi16(v, 8));
      }
    }
  }
  if (j < J) {  // J % 4 == 2: the last byte pair alone
    __m512i L[P], H[P];
    for (int g = 0; g < P; ++g) {
      const uint8_t* t = wide + (static_cast<size_t>(g) * (J / 2) + j / 2) * 128;
      L[g] = _mm512_loadu_si512(t), H[g] = _mm512_loadu_si512(t + 64);
    }
    for (int p = 0; p < B; ++p) {
      const __m512i d = _mm512_loadu_si512(blk + p * plane + j * 32);
      const __m512i nl = _mm512_and_si512(d, nib), nh = _mm512_and_si512(_mm512_srli_epi16(d, 4), nib);
      for (int g = 0; g < P; ++g) {
        const __m512i v = _mm512_add_epi8(_mm512_shuffle_epi8(L[g], nl), _mm512_shuffle_epi8(H[g], nh));
        T[p][g] = _mm512_add_epi16(T[p][g], v);
        O[p][g] = _mm512_add_epi16(O[p][g], _mm512_srli_epi16(v, 8));
      }
    }
  }
  for (int p = 0; p < B; ++p)
    for (int g = 0; g < P; ++g) {
      const __m256i t = _mm256_add_epi16(_mm512_castsi512_si256(T[p][g]), _mm512_extracti64x4_epi64(T[p][g], 1));
      const __m256i o = _mm256_add_epi16(_mm512_castsi512_si256(O[p][g]), _mm512_extracti64x4_epi64(O[p][g], 1));
      const __m256i E = _mm256_sub_epi16(t, _mm256_slli_epi16(o, 8));
      quant_fold_avx2(_mm256_unpacklo_epi16(E, o), _mm256_unpackhi_epi16(E, o), p + 4 * g, acc);
    }
}

template <int P>
__attribute__((target("avx512f,avx512bw"))) inline bool quant_block_avx512_any(int bits, const uint8_t* blk,
                                                                               const uint8_t* wide, size_t J,
                                                                               __m256i* acc, size_t ahead) {
  switch (bits) {
    case 1:
      if (ahead)
        quant_block_avx512<1, P, true>(blk, wide, J, acc, ahead);
      else
        quant_block_avx512<1, P>(blk, wide, J, acc);
      return true;
    case 2: quant_block_avx512<2, P>(blk, wide, J, acc); return true;
    case 4: quant_block_avx512<4, P>(blk, wide, J, acc); return true;
    default: return false;
  }
}

// The zmm tables of a query for AVX-512 scans (passes x J x 64 bytes), built once per query by callers
// that scan many chunks; empty at other levels.
inline void quant_wide_tables(Level level, const uint8_t* luts, size_t J, int passes, AlignedBytes& wide) {
  wide.clear();
  if (level != Level::AVX512) return;
  wide.resize(static_cast<size_t>(passes) * J * 64);
  quant_wide_tables_avx512(luts, J, passes, wide.data());
}

// Hands a scored block to a sink from an AVX-512 scan: a sink with block_avx512 (compiled for
// AVX-512, so it inlines here with the estimate code) takes it directly; others through block().
// Measured (perf, 100k-row 1-bit batch): the out-of-line estimate call behind block() was 14% of
// the profile.
template <class Sink>
__attribute__((target("avx512f,avx512bw"))) inline auto quant_sink_avx512(Sink& sink, size_t b, uint32_t mask,
                                                                         const uint32_t* S, int)
    -> decltype(sink.block_avx512(b, mask, S), void()) {
  sink.block_avx512(b, mask, S);
}
template <class Sink>
inline void quant_sink_avx512(Sink& sink, size_t b, uint32_t mask, const uint32_t* S, long) {
  sink.block(b, mask, S, Level::AVX512);
}
// S in registers: a sink with block_avx512_regs takes them; others get them stored into S.
template <class Sink>
__attribute__((target("avx512f,avx512bw"), always_inline)) inline auto quant_sink_avx512_regs(
    Sink& sink, size_t b, uint32_t mask, __m512i s0, __m512i s1, uint32_t*, int)
    -> decltype(sink.block_avx512_regs(b, mask, s0, s1), void()) {
  sink.block_avx512_regs(b, mask, s0, s1);
}
template <class Sink>
__attribute__((target("avx512f,avx512bw"), always_inline)) inline void quant_sink_avx512_regs(
    Sink& sink, size_t b, uint32_t mask, __m512i s0, __m512i s1, uint32_t* S, long) {
  _mm512_store_si512(S, s0);
  _mm512_store_si512(S + 16, s1);
  quant_sink_avx512(sink, b, mask, S, 0);
}

// wide: the query's quant_wide_tables, or null to build them here.
template <class Sink>
__attribute__((target("avx512f,avx512bw"))) inline void quant_sums_avx512(const QuantBlocks& s, const uint8_t* luts,
                                                                          int passes, size_t b0, size_t b1,
                                                                          Sink& sink, const uint8_t* wide) {
  const size_t J = s.J;
  alignas(64) uint32_t S[kQuantBlockRows];
  AlignedBytes own;
  if (s.bits <= 4 && !wide) {
    own.resize(static_cast<size_t>(passes) * J * 64);
    quant_wide_tables_avx512(luts, J, passes, own.data());
    wide = own.data();
  }
  for (size_t b = b0; b < b1; ++b) {
    const uint32_t mask = s.lane_mask(b);
    if (!mask) continue;
    const uint8_t* blk = s.data + b * s.block_stride();
    __m256i acc[4] = {_mm256_setzero_si256(), _mm256_setzero_si256(), _mm256_setzero_si256(), _mm256_setzero_si256()};
    // A view of one plane of wider blocks prefetches the next block's lines: its reads jump a page
    // per block, where the hardware prefetcher starts over.
    const size_t ahead = s.stride && b + 1 < b1 ? s.stride : 0;
    const bool done = passes == 2 ? quant_block_avx512_any<2>(s.bits, blk, wide, J, acc, ahead)
                                  : quant_block_avx512_any<1>(s.bits, blk, wide, J, acc, ahead);
    for (int p = 0; !done && p < s.bits; ++p) {  // 8 planes: too many counters for one pass over the block
      const uint8_t* src = blk + p * J * kQuantBlockRows;
      if (passes == 2)
        quant_plane_avx512<2>(src, luts, J, p, acc);
      else
        quant_plane_avx512<1>(src, luts, J, p, acc);
    }
    // S stays in registers for a sink that takes them (quant_scores_above_avx512_regs); else it is
    // stored as two 64-byte halves, which the scoring's 64-byte loads can be forwarded from.
    quant_sink_avx512_regs(sink, b, mask, _mm512_inserti64x4(_mm512_castsi256_si512(acc[0]), acc[1], 1),
                           _mm512_inserti64x4(_mm512_castsi256_si512(acc[2]), acc[3], 1), S, 0);
  }
}

// ---------------------------------------------------------------- AVX-512, several queries a pass
// A batch of queries (one table pass each) against 1- or 2-bit blocks, Q at a time: each 128 bytes of
// a plane are loaded and cut into nibbles once and looked up in every query's tables, which shares the
// two loads and six nibble operations (of the 16 vector operations a query costs per 128 bytes
// alone) and the loop. The same integers as quant_block_avx512<B, 1> per query. Measured (throwaway
// C++ over the 1-bit kernel, 30k rows x 512-bit codes, 256 KiB chunks in L2, min of 15): 2.6-3.5 ns
// a row and query one at a time, 1.7-2.0 four at a time (model-106 Xeon); eight were no faster.
template <int B, int Q>
__attribute__((target("avx512f,avx512bw"), always_inline)) inline void quant_block_queries_avx512_regs(
    const uint8_t* blk, const uint8_t* const* wide, size_t J, __m512i* Sv) {
  const __m512i nib = _mm512_set1_epi8(0x0f), zero = _mm512_setzero_si512();
  __m512i T[B][Q], O[B][Q];
  for (int p = 0; p < B; ++p)
    for (int g = 0; g < Q; ++g) T[p][g] = O[p][g] = zero;
  const size_t plane = J * kQuantBlockRows;
  size_t j = 0;
  for (; j + 4 <= J; j += 4) {
    // every plane's nibbles once; then each query's tables once, for every plane
    __m512i n0l[B], n0h[B], n1l[B], n1h[B];
    for (int p = 0; p < B; ++p) {
      const uint8_t* src = blk + p * plane + j * 32;
      const __m512i d0 = _mm512_loadu_si512(src), d1 = _mm512_loadu_si512(src + 64);
      n0l[p] = _mm512_and_si512(d0, nib), n0h[p] = _mm512_and_si512(_mm512_srli_epi16(d0, 4), nib);
      n1l[p] = _mm512_and_si512(d1, nib), n1h[p] = _mm512_and_si512(_mm512_srli_epi16(d1, 4), nib);
    }
    for (int g = 0; g < Q; ++g) {
      const uint8_t* t = wide[g] + j * 64;  // tables of bytes j .. j+3 (quant_wide_tables_avx512)
      const __m512i L0 = _mm512_loadu_si512(t), H0 = _mm512_loadu_si512(t + 64);
      const __m512i L1 = _mm512_loadu_si512(t + 128), H1 = _mm512_loadu_si512(t + 192);
      for (int p = 0; p < B; ++p) {
        __m512i v = _mm512_add_epi8(_mm512_shuffle_epi8(L0, n0l[p]), _mm512_shuffle_epi8(H0, n0h[p]));
        v = _mm512_add_epi8(v, _mm512_add_epi8(_mm512_shuffle_epi8(L1, n1l[p]), _mm512_shuffle_epi8(H1, n1h[p])));
        T[p][g] = _mm512_add_epi16(T[p][g], v);
        O[p][g] = _mm512_add_epi16(O[p][g], _mm512_srli_epi16(v, 8));
      }
    }
  }
  if (j < J) {  // J % 4 == 2: the last byte pair alone
    for (int p = 0; p < B; ++p) {
      const __m512i d = _mm512_loadu_si512(blk + p * plane + j * 32);
      const __m512i nl = _mm512_and_si512(d, nib), nh = _mm512_and_si512(_mm512_srli_epi16(d, 4), nib);
      for (int g = 0; g < Q; ++g) {
        const uint8_t* t = wide[g] + j * 64;
        const __m512i v = _mm512_add_epi8(_mm512_shuffle_epi8(_mm512_loadu_si512(t), nl),
                                          _mm512_shuffle_epi8(_mm512_loadu_si512(t + 64), nh));
        T[p][g] = _mm512_add_epi16(T[p][g], v);
        O[p][g] = _mm512_add_epi16(O[p][g], _mm512_srli_epi16(v, 8));
      }
    }
  }
  // S (u32, row order) = sum over planes of 2^p times the plane's counts, without quant_fold_avx2's
  // zeroed accumulators.
  for (int g = 0; g < Q; ++g) {
    __m512i s0 = zero, s1 = zero;
    for (int p = 0; p < B; ++p) {
      const __m256i t = _mm256_add_epi16(_mm512_castsi512_si256(T[p][g]), _mm512_extracti64x4_epi64(T[p][g], 1));
      const __m256i o = _mm256_add_epi16(_mm512_castsi512_si256(O[p][g]), _mm512_extracti64x4_epi64(O[p][g], 1));
      const __m256i E = _mm256_sub_epi16(t, _mm256_slli_epi16(o, 8));
      // unpack: rows 0-7 | 16-23 and 8-15 | 24-31 by 128-bit lane
      const __m256i lo = _mm256_unpacklo_epi16(E, o), hi = _mm256_unpackhi_epi16(E, o);
      s0 = _mm512_add_epi32(s0, _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_permute2x128_si256(lo, hi, 0x20)), p));
      s1 = _mm512_add_epi32(s1, _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_permute2x128_si256(lo, hi, 0x31)), p));
    }
    Sv[2 * g] = s0, Sv[2 * g + 1] = s1;
  }
}

// The same into memory: S + 32 g holds query g's 32 sums.
template <int B, int Q>
__attribute__((target("avx512f,avx512bw"))) inline void quant_block_queries_avx512(const uint8_t* blk,
                                                                                   const uint8_t* const* wide,
                                                                                   size_t J, uint32_t* S) {
  __m512i Sv[2 * Q];
  quant_block_queries_avx512_regs<B, Q>(blk, wide, J, Sv);
  for (int g = 0; g < 2 * Q; ++g) _mm512_store_si512(S + 16 * g, Sv[g]);
}

template <int B, int Q, class Sink>
__attribute__((target("avx512f,avx512bw"))) inline void quant_sums_queries_avx512(const QuantBlocks& s,
                                                                                  const uint8_t* const* wide,
                                                                                  size_t b0, size_t b1,
                                                                                  Sink* sinks) {
  alignas(64) uint32_t S[Q * kQuantBlockRows];
  for (size_t b = b0; b < b1; ++b) {
    const uint32_t mask = s.lane_mask(b);
    if (!mask) continue;
    __m512i Sv[2 * Q];
    quant_block_queries_avx512_regs<B, Q>(s.data + b * s.block_stride(), wide, s.J, Sv);
    for (int g = 0; g < Q; ++g)
      quant_sink_avx512_regs(sinks[g], b, mask, Sv[2 * g], Sv[2 * g + 1], S + g * kQuantBlockRows, 0);
  }
}

// How many queries share a pass over a block of `bits` planes (0: not grouped): 1 bit four, 2 bits
// two (their counters, 2 x 2 x Q registers, stay in the 32 zmm).
inline size_t quant_group_queries(int bits) { return bits == 1 ? 4 : bits == 2 ? 2 : 0; }
constexpr size_t kQuantGroupMax = 4;

// Up to quant_group_queries(s.bits) queries' sums at AVX-512 (the caller checks the level and one
// table pass). wide: each query's quant_wide_tables; sinks: one per query.
template <class Sink>
inline void quant_sums_queries(size_t nq, const QuantBlocks& s, const uint8_t* const* wide, size_t b0, size_t b1,
                               Sink* sinks) {
  if (s.bits == 2) {
    if (nq == 2) return quant_sums_queries_avx512<2, 2>(s, wide, b0, b1, sinks);
    return quant_sums_queries_avx512<2, 1>(s, wide, b0, b1, sinks);
  }
  switch (nq) {
    case 4: return quant_sums_queries_avx512<1, 4>(s, wide, b0, b1, sinks);
    case 3: return quant_sums_queries_avx512<1, 3>(s, wide, b0, b1, sinks);
    case 2: return quant_sums_queries_avx512<1, 2>(s, wide, b0, b1, sinks);
    default: return quant_sums_queries_avx512<1, 1>(s, wide, b0, b1, sinks);
  }
}

template <class Sink>
inline void quant_sums(Level level, const QuantBlocks& s, const uint8_t* luts, int passes, size_t b0, size_t b1,
                       Sink& sink, const uint8_t* wide = nullptr) {
  switch (level) {
    case Level::AVX512:  // the zmm kernels read two bytes of a block at once: not the pair layout's
      if (s.paired) return quant_sums_avx2(s, luts, passes, b0, b1, sink);
      return quant_sums_avx512(s, luts, passes, b0, b1, sink, wide);
    case Level::AVX2: return quant_sums_avx2(s, luts, passes, b0, b1, sink);
    default: return quant_sums_scalar(s, luts, passes, b0, b1, sink);
  }
}

// ---------------------------------------------------------------- scores of a block
inline void quant_scores_scalar(const QuantScoreArgs& f, size_t row0, const uint32_t* S, float* est) {
  for (size_t l = 0; l < kQuantBlockRows; ++l) est[l] = f.e(S[l], f.a[row0 + l], f.su[row0 + l], f.add[row0 + l]);
}

// The estimates of a block's 32 rows into est (the same operations as QuantEstimator, eight rows
// at a time), and the lanes whose estimate is above `need` (est > need: false for NaN) as a bit
// mask, compared on the registers just computed (no reload of est).
__attribute__((target("avx2"))) inline uint32_t quant_scores_above_avx2(const QuantScoreArgs& f, size_t row0,
                                                                        const uint32_t* S, float need, float* est) {
  const __m256 dq = _mm256_set1_ps(f.e.dq), lo = _mm256_set1_ps(f.e.lo), K = _mm256_set1_ps(f.e.K),
               mq = _mm256_set1_ps(f.e.mq), cq = _mm256_set1_ps(f.e.cq), nd = _mm256_set1_ps(need);
  uint32_t pass = 0;
  for (size_t l = 0; l < kQuantBlockRows; l += 8) {
    // S < 2^31 (checked by the index), so the signed conversion is exact-rounding like the scalar cast.
    const __m256 s = _mm256_cvtepi32_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(S + l)));
    const __m256 t1 = _mm256_mul_ps(dq, s);
    const __m256 t2 = _mm256_mul_ps(lo, _mm256_loadu_ps(f.su + row0 + l));
    const __m256 t3 = _mm256_sub_ps(_mm256_add_ps(t1, t2), K);
    const __m256 t4 = _mm256_mul_ps(_mm256_loadu_ps(f.a + row0 + l), t3);
    const __m256 e = _mm256_add_ps(_mm256_mul_ps(mq, t4), _mm256_add_ps(_mm256_loadu_ps(f.add + row0 + l), cq));
    _mm256_store_ps(est + l, e);
    pass |= static_cast<uint32_t>(_mm256_movemask_ps(_mm256_cmp_ps(e, nd, _CMP_GT_OQ))) << l;
  }
  return pass;
}

// The estimates of rows r .. r+15 from their S (the operations of QuantEstimator, sixteen rows at a
// time: the same bits). Shared by the scoring below and the 1-bit screen (quant_screen.hpp).
__attribute__((target("avx512f"), always_inline)) inline __m512 quant_estimates16_avx512(const QuantScoreArgs& f,
                                                                                         size_t r, __m512i Si) {
  const __m512 s = _mm512_cvtepi32_ps(Si);
  const __m512 t1 = _mm512_mul_ps(_mm512_set1_ps(f.e.dq), s);
  const __m512 t2 = _mm512_mul_ps(_mm512_set1_ps(f.e.lo), _mm512_loadu_ps(f.su + r));
  const __m512 t3 = _mm512_sub_ps(_mm512_add_ps(t1, t2), _mm512_set1_ps(f.e.K));
  const __m512 t4 = _mm512_mul_ps(_mm512_loadu_ps(f.a + r), t3);
  return _mm512_add_ps(_mm512_mul_ps(_mm512_set1_ps(f.e.mq), t4),
                       _mm512_add_ps(_mm512_loadu_ps(f.add + r), _mm512_set1_ps(f.e.cq)));
}

// The scores of a block and the lanes above `need`, from S in two registers (rows 0-15, 16-31):
// half the instructions of the AVX2 form, the same bits. The full scans hand S over in registers:
// stored and reloaded, it cost 5% of a one-query 1-bit search on an AMD Zen 4 (whose 512-bit
// stores are split in two, which a 512-bit reload cannot be forwarded from).
__attribute__((target("avx512f"), always_inline)) inline uint32_t quant_scores_above_avx512_regs(
    const QuantScoreArgs& f, size_t row0, __m512i S0, __m512i S1, float need, float* est) {
  const __m512 nd = _mm512_set1_ps(need);
  const __m512 e0 = quant_estimates16_avx512(f, row0, S0), e1 = quant_estimates16_avx512(f, row0 + 16, S1);
  _mm512_storeu_ps(est, e0);
  _mm512_storeu_ps(est + 16, e1);
  return static_cast<uint32_t>(_mm512_cmp_ps_mask(e0, nd, _CMP_GT_OQ)) |
         static_cast<uint32_t>(_mm512_cmp_ps_mask(e1, nd, _CMP_GT_OQ)) << 16;
}

__attribute__((target("avx512f"))) inline uint32_t quant_scores_above_avx512(const QuantScoreArgs& f, size_t row0,
                                                                             const uint32_t* S, float need,
                                                                             float* est) {
  return quant_scores_above_avx512_regs(f, row0, _mm512_loadu_si512(S), _mm512_loadu_si512(S + 16), need, est);
}

// est: 32 floats, 32-byte aligned.
inline uint32_t quant_scores_above(Level level, const QuantScoreArgs& f, size_t row0, const uint32_t* S, float need,
                                   float* est) {
  if (level == Level::AVX512) return quant_scores_above_avx512(f, row0, S, need, est);
  if (level != Level::Scalar) return quant_scores_above_avx2(f, row0, S, need, est);
  quant_scores_scalar(f, row0, S, est);
  uint32_t pass = 0;
  for (size_t l = 0; l < kQuantBlockRows; ++l) pass |= static_cast<uint32_t>(est[l] > need) << l;
  return pass;
}

}  // namespace vecsift
