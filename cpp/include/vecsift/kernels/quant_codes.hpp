// RaBitQ-style codes of rotated, centred vectors and the quantised query.
//
// Algebra (our derivation from RaBitQ, Gao & Long 2024, and Extended RaBitQ,
// 2025). In the rotated space of dimension D (dim_pad), a data vector gives
// r = P(x - c) with c the stored centroid, o = r / |r|. A B-bit code holds
// u_i in [0, 2^B) per coordinate, read as the grid point y_i = u_i - (2^B-1)/2.
// For any query direction q_r, <y, q_r> / <y, o> estimates <o, q_r> without
// bias (over the random rotation), with standard deviation at most
//   |q_r| * sqrt((1 - cos^2) / ((D - 1) cos^2)),   cos = <y, o> / |y|.
// B = 1 is the sign bit; for B > 1 the grid scale t (u = floor(t*o + 2^(B-1)),
// clipped) is chosen by search to maximise cos, as Extended RaBitQ does.
//
// The query q_r = P(q - c) is quantised once to Bq bits: q_r,i ~ lo + dq*qu_i.
// Then <y, q_r> ~ dq*S + lo*sum(u) - cB*(dq*sum(qu) + lo*D) with
// S = sum_i u_i*qu_i = sum over plane pairs (p, k) of 2^(p+k) popcount(U_p & Q_k):
// S is an integer the scan computes exactly (quant_scan.hpp).
//
// Per-vector factors (floats): a = |r| / <y, o>, su = sum(u), add (metric
// term), g = |r| / cos and h = (1 - cos^2) / (D - 1) for the bound.
#pragma once

#include <emmintrin.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "vecsift/kernels/aligned.hpp"

namespace vecsift {

struct QuantFactors {
  float a, su, add, g, h;
};

inline size_t quant_words(size_t dim_pad) { return dim_pad / 64; }

// The scale of a multi-bit code, s = t * max|o_i| / 2^(B-1), is searched over
// [kScaleLo, kScaleHi]: a coarse grid, then a finer one around its best point.
// Measured on Gaussian directions at D = 384: the best s lies near 1.4-1.9 for
// B = 2, 1.05-1.35 for B = 4, ~1.0 for B = 8.
constexpr int kScaleCoarse = 16, kScaleFine = 8;
constexpr float kScaleLo = 0.6f, kScaleHi = 2.2f;

// cos(y, o) of the code at scale t, in float with 8 independent lanes (the
// compiler vectorises them); only used to compare scales.
inline float code_cosine(const float* o, size_t D, float t, float L, float top, float cB) {
  float dot[8] = {0}, nn[8] = {0};
  for (size_t i = 0; i < D; i += 8)
    for (size_t l = 0; l < 8; ++l) {
      float v = std::floor(t * o[i + l] + L);
      v = v < 0.0f ? 0.0f : (v > top ? top : v);
      const float y = v - cB;
      dot[l] += y * o[i + l];
      nn[l] += y * y;
    }
  float d = 0, n = 0;
  for (size_t l = 0; l < 8; ++l) d += dot[l], n += nn[l];
  return d / std::sqrt(n);
}

// Quantises one unit direction o (D entries, D a multiple of 8) to B-bit
// values u (D bytes). Returns <y, o> and |y|^2 through the out-parameters.
inline void quantize_direction(const float* o, size_t D, int B, uint8_t* u, double* yo, double* yy) {
  const double cB = ((1 << B) - 1) / 2.0;
  if (B == 1) {
    double dot = 0;
    for (size_t i = 0; i < D; ++i) {
      u[i] = o[i] > 0.0f;
      dot += (u[i] - 0.5) * o[i];
    }
    *yo = dot;
    *yy = 0.25 * D;
    return;
  }
  const int L = 1 << (B - 1), top = (1 << B) - 1;
  float m = 0;
  for (size_t i = 0; i < D; ++i) m = std::max(m, std::fabs(o[i]));
  if (!(m > 0)) {  // zero direction: any code; keep the centre
    for (size_t i = 0; i < D; ++i) u[i] = static_cast<uint8_t>(L);
    *yo = 0;
    *yy = 0.25 * D;
    return;
  }
  const float unit = static_cast<float>(L) / m, step = (kScaleHi - kScaleLo) / (kScaleCoarse - 1);
  float best_cos = -2, best_s = 1;
  for (int k = 0; k < kScaleCoarse; ++k) {
    const float sc = kScaleLo + step * k;
    const float c = code_cosine(o, D, sc * unit, L, top, static_cast<float>(cB));
    if (c > best_cos) best_cos = c, best_s = sc;
  }
  const float s0 = best_s - step;
  for (int k = 0; k <= kScaleFine; ++k) {
    const float sc = s0 + 2 * step * k / kScaleFine;
    const float c = code_cosine(o, D, sc * unit, L, top, static_cast<float>(cB));
    if (c > best_cos) best_cos = c, best_s = sc;
  }
  const float t = best_s * unit;
  double dot = 0, nn = 0;
  for (size_t i = 0; i < D; ++i) {
    float v = std::floor(t * o[i] + L);
    v = v < 0.0f ? 0.0f : (v > top ? top : v);
    u[i] = static_cast<uint8_t>(v);
    const double y = v - cB;
    dot += y * o[i];
    nn += y * y;
  }
  *yo = dot;
  *yy = nn;
}

// Writes r / |r| into out (zeros when r is 0) and returns |r|.
inline double unit_direction(const float* r, size_t D, float* out) {
  double nn = 0;
  for (size_t i = 0; i < D; ++i) nn += static_cast<double>(r[i]) * r[i];
  const double nr = std::sqrt(nn);
  for (size_t i = 0; i < D; ++i) out[i] = nr > 0 ? static_cast<float>(r[i] / nr) : 0.0f;
  return nr;
}

// The per-vector factors of codes u (D entries) of a vector of norm nr whose
// quantised direction y = u - cB has <y, o> = yo and |y|^2 = yy.
inline QuantFactors factors_of(const uint8_t* u, size_t D, double nr, double yo, double yy) {
  QuantFactors f{};
  double su = 0;
  for (size_t i = 0; i < D; ++i) su += u[i];
  f.su = static_cast<float>(su);
  if (nr > 0 && yo > 0) {
    const double cos = yo / std::sqrt(yy);
    f.a = static_cast<float>(nr / yo);
    f.g = static_cast<float>(nr / cos);
    f.h = static_cast<float>(std::max(0.0, 1.0 - cos * cos) / (D > 1 ? D - 1 : 1));
  } else {  // the vector is the centroid: the estimate is exact
    f.a = f.g = f.h = 0.0f;
  }
  return f;
}

// Codes and factors of one rotated, centred vector r (D entries).
// `add` is the metric's per-vector constant, filled in by the caller.
inline QuantFactors quantize_rotated(const float* r, size_t D, int B, uint8_t* u, float* scratch) {
  const double nr = unit_direction(r, D, scratch);
  double yo, yy;
  quantize_direction(scratch, D, B, u, &yo, &yy);
  return factors_of(u, D, nr, yo, yy);
}

// Packs D values of B bits into B planes of D/8 bytes: bit t of byte j of
// plane p is bit p of u[8j + t] (numpy: packbits((u >> p) & 1, bitorder="little")).
inline void pack_planes(const uint8_t* u, size_t D, int B, uint8_t* out) {
  const size_t J = D / 8;
  for (int p = 0; p < B; ++p)
    for (size_t j = 0; j < J; ++j) {
      uint8_t byte = 0;
      for (size_t t = 0; t < 8; ++t) byte |= static_cast<uint8_t>(((u[8 * j + t] >> p) & 1u) << t);
      out[p * J + j] = byte;
    }
}

// The query, quantised once per search: qu_i in [0, 2^Bq) per coordinate.
// The scan consumes it as nibble lookup tables (quant_scan.hpp): the query
// bits are cut into digits of 4 bits (ceil(Bq/4) passes), and for byte j of a
// code plane the table of pass g holds, for each 4-bit pattern n of the low
// (high) nibble, the sum of digit g of qu over the dimensions 8j+t (8j+4+t)
// whose bit t is set in n. Entries are at most 4*15 = 60.
struct QuantQuery {
  int bits = 4;
  float lo = 0, dq = 0;  // q_r,i ~ lo + dq * qu_i
  float sum_qu = 0;      // sum of qu_i
  float norm2 = 0;       // |q_r|^2 (float32 rounding of the double sum)
  float cq = 0;          // metric's per-query constant
  float mq = 1;          // metric's multiplier of <r, q_r>
  std::vector<uint8_t> qu;    // D values
  std::vector<uint8_t> luts;  // passes x (D/8) x 2 x 16, see above (plane-layout scans)
  std::vector<uint32_t> words;  // qu packed for the nibble-layout scan (quant_nibble_scan.hpp), when built
  AlignedBytes wide;  // the same tables laid out for the AVX-512 scan, when a caller builds them
  int passes() const { return (bits + 3) / 4; }
};

inline void build_query_luts(const uint8_t* qu, size_t D, int Bq, std::vector<uint8_t>& luts) {
  const int passes = (Bq + 3) / 4;
  const size_t J = D / 8;
  luts.resize(static_cast<size_t>(passes) * J * 32);
  // Entry n of a table = sum over b of digit b times bit b of n: four masked
  // broadcasts added (SSE2, every level; the sums are at most 60).
  const __m128i m0 = _mm_setr_epi8(0, -1, 0, -1, 0, -1, 0, -1, 0, -1, 0, -1, 0, -1, 0, -1);
  const __m128i m1 = _mm_setr_epi8(0, 0, -1, -1, 0, 0, -1, -1, 0, 0, -1, -1, 0, 0, -1, -1);
  const __m128i m2 = _mm_setr_epi8(0, 0, 0, 0, -1, -1, -1, -1, 0, 0, 0, 0, -1, -1, -1, -1);
  const __m128i m3 = _mm_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, -1, -1, -1, -1, -1, -1, -1, -1);
  for (int g = 0; g < passes; ++g)
    for (size_t j = 0; j < J; ++j)
      for (int half = 0; half < 2; ++half) {
        uint8_t* t = luts.data() + ((g * J + j) * 2 + half) * 16;
        const uint8_t* src = qu + 8 * j + 4 * half;
        auto dig = [&](int b) { return _mm_set1_epi8(static_cast<char>((src[b] >> (4 * g)) & 15)); };
        const __m128i v = _mm_add_epi8(_mm_add_epi8(_mm_and_si128(dig(0), m0), _mm_and_si128(dig(1), m1)),
                                       _mm_add_epi8(_mm_and_si128(dig(2), m2), _mm_and_si128(dig(3), m3)));
        _mm_storeu_si128(reinterpret_cast<__m128i*>(t), v);
      }
}

// qr: the rotated, centred query (D entries). luts=false leaves the tables
// empty (a caller that scans the nibble layout needs only qu).
inline void quantize_query(const float* qr, size_t D, int Bq, QuantQuery& q, bool luts = true) {
  float lo = qr[0], hi = qr[0];
  double nn = 0;
  for (size_t i = 0; i < D; ++i) {
    lo = std::min(lo, qr[i]);
    hi = std::max(hi, qr[i]);
    nn += static_cast<double>(qr[i]) * qr[i];
  }
  const int top = (1 << Bq) - 1;
  const float dq = (hi - lo) / static_cast<float>(top);
  q.bits = Bq;
  q.lo = lo;
  q.dq = dq;
  q.norm2 = static_cast<float>(nn);
  q.qu.resize(D);
  int64_t sq = 0;  // an integer sum: exact in any order
  for (size_t i = 0; i < D; ++i) {
    // qr[i] - lo >= 0, so t >= 0.5 (or NaN): truncation is floor, without a libm call.
    const float t = (qr[i] - lo) / dq + 0.5f;
    int v = dq > 0 ? static_cast<int>(t) : 0;
    v = v < 0 ? 0 : (v > top ? top : v);
    q.qu[i] = static_cast<uint8_t>(v);
    sq += v;
  }
  q.sum_qu = static_cast<float>(sq);
  if (luts) build_query_luts(q.qu.data(), D, Bq, q.luts);
}

}  // namespace vecsift
