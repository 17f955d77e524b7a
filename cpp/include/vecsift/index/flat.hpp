// Exact (brute-force) search: ground truth and small collections.
//
// Rows are gathered in chunks (only allowed rows), transposed into panels of
// NR rows (panel[j][r] = row r, dim j), and a register-blocked micro-kernel
// computes MR queries x NR rows of dot products at once, like a GEMM. Scores
// are similarities: ip, cosine, or -(squared l2).
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "vecsift/kernels/cpu.hpp"
#include "vecsift/kernels/distance.hpp"
#include "vecsift/index/filter.hpp"
#include "vecsift/kernels/parallel.hpp"
#include "vecsift/kernels/topk.hpp"

namespace vecsift {

constexpr size_t kFlatMR = 6;  // queries per micro-tile

inline size_t flat_panel_rows(Level level) {
  switch (level) {
    case Level::AVX512: return 32;
    case Level::AVX2: return 16;
    default: return 8;
  }
}

// out[i*NR + r] = dot(q_i, row r) for i < mq, from a d x NR panel.
template <int MQ>
__attribute__((target("avx512f,fma"))) void tile_avx512(const float* q, size_t qstride, const float* panel, size_t d,
                                                        float* out) {
  __m512 acc[MQ][2];
  for (int i = 0; i < MQ; ++i) acc[i][0] = acc[i][1] = _mm512_setzero_ps();
  for (size_t j = 0; j < d; ++j) {
    __m512 p0 = _mm512_loadu_ps(panel + j * 32), p1 = _mm512_loadu_ps(panel + j * 32 + 16);
    for (int i = 0; i < MQ; ++i) {
      __m512 b = _mm512_set1_ps(q[i * qstride + j]);
      acc[i][0] = _mm512_fmadd_ps(b, p0, acc[i][0]);
      acc[i][1] = _mm512_fmadd_ps(b, p1, acc[i][1]);
    }
  }
  for (int i = 0; i < MQ; ++i) {
    _mm512_storeu_ps(out + i * 32, acc[i][0]);
    _mm512_storeu_ps(out + i * 32 + 16, acc[i][1]);
  }
}

template <int MQ>
__attribute__((target("avx2,fma"))) void tile_avx2(const float* q, size_t qstride, const float* panel, size_t d,
                                                   float* out) {
  __m256 acc[MQ][2];
  for (int i = 0; i < MQ; ++i) acc[i][0] = acc[i][1] = _mm256_setzero_ps();
  for (size_t j = 0; j < d; ++j) {
    __m256 p0 = _mm256_loadu_ps(panel + j * 16), p1 = _mm256_loadu_ps(panel + j * 16 + 8);
    for (int i = 0; i < MQ; ++i) {
      __m256 b = _mm256_broadcast_ss(q + i * qstride + j);
      acc[i][0] = _mm256_fmadd_ps(b, p0, acc[i][0]);
      acc[i][1] = _mm256_fmadd_ps(b, p1, acc[i][1]);
    }
  }
  for (int i = 0; i < MQ; ++i) {
    _mm256_storeu_ps(out + i * 16, acc[i][0]);
    _mm256_storeu_ps(out + i * 16 + 8, acc[i][1]);
  }
}

template <int MQ>
void tile_scalar(const float* q, size_t qstride, const float* panel, size_t d, float* out) {
  float acc[MQ][8] = {};
  for (size_t j = 0; j < d; ++j)
    for (int i = 0; i < MQ; ++i) {
      float b = q[i * qstride + j];
      for (int r = 0; r < 8; ++r) acc[i][r] += b * panel[j * 8 + r];
    }
  for (int i = 0; i < MQ; ++i)
    for (int r = 0; r < 8; ++r) out[i * 8 + r] = acc[i][r];
}

using TileKernel = void (*)(const float*, size_t, const float*, size_t, float*);

inline TileKernel tile_kernel(Level level, size_t mq) {
#define VECSIFT_TILES(fn) \
  switch (mq) {           \
    case 1: return fn<1>; \
    case 2: return fn<2>; \
    case 3: return fn<3>; \
    case 4: return fn<4>; \
    case 5: return fn<5>; \
    default: return fn<6>; \
  }
  switch (level) {
    case Level::AVX512: VECSIFT_TILES(tile_avx512)
    case Level::AVX2: VECSIFT_TILES(tile_avx2)
    default: VECSIFT_TILES(tile_scalar)
  }
#undef VECSIFT_TILES
}

using ScoreTop = TopK<float>;  // key = -similarity

// Few queries: transposing rows into panels would cost more than the dot
// products, so each allowed row is scored directly by the pair kernels.
inline void flat_scan_direct(const float* base, size_t d, const float* queries, size_t q0, size_t q1,
                             const float* qnorm, size_t r0, size_t r1, Metric metric, const AllowSet* allow,
                             ScoreTop* tops, Level level) {
  PairKernel ip = ip_kernel(level), l2 = l2sq_kernel(level);
  for (size_t r = allow ? allow->next(r0, r1) : r0; r < r1; r = allow ? allow->next(r + 1, r1) : r + 1) {
    const float* row = base + r * d;
    float inv = 0.0f;
    if (metric == Metric::Cosine) {
      float s = ip(row, row, d);
      inv = s > 0 ? 1.0f / std::sqrt(s) : 0.0f;
    }
    for (size_t q = q0; q < q1; ++q) {
      const float* qv = queries + q * d;
      float s = metric == Metric::L2 ? -l2(qv, row, d) : ip(qv, row, d);
      if (metric == Metric::Cosine) s *= qnorm[q] * inv;
      ScoreTop& top = tops[q - q0];
      if (-s < top.threshold()) top.push(-s, static_cast<int64_t>(r));
    }
  }
}

// Scans rows [r0, r1) (allowed ones only) for queries [q0, q1), pushing into tops[q - q0].
inline void flat_scan_range(const float* base, size_t d, const float* queries, size_t q0, size_t q1,
                            const float* qnorm, size_t r0, size_t r1, Metric metric, const AllowSet* allow,
                            ScoreTop* tops, Level level) {
  if (q1 - q0 < kFlatMR / 2) return flat_scan_direct(base, d, queries, q0, q1, qnorm, r0, r1, metric, allow, tops, level);
  const size_t NR = flat_panel_rows(level);
  // A chunk of rows whose panels fit in about 256 KiB (L2).
  const size_t chunk = std::max<size_t>(NR, std::min<size_t>(4096, (256 * 1024 / (4 * d)) / NR * NR));
  std::vector<float> panels(chunk * d), rnorm(chunk), tile(kFlatMR * NR);
  std::vector<int64_t> ids(chunk);
  size_t r = r0;
  while (r < r1) {
    // Gather the next chunk of allowed rows.
    size_t m = 0;
    for (r = allow ? allow->next(r, r1) : r; r < r1 && m < chunk; r = allow ? allow->next(r + 1, r1) : r + 1)
      ids[m++] = static_cast<int64_t>(r);
    if (!m) break;
    const size_t npanels = (m + NR - 1) / NR;
    for (size_t p = 0; p < npanels; ++p) {
      float* panel = panels.data() + p * NR * d;
      for (size_t lane = 0; lane < NR; ++lane) {
        size_t idx = p * NR + lane;
        if (idx < m) {
          const float* row = base + static_cast<size_t>(ids[idx]) * d;
          for (size_t j = 0; j < d; ++j) panel[j * NR + lane] = row[j];
        } else {
          for (size_t j = 0; j < d; ++j) panel[j * NR + lane] = 0.0f;
        }
      }
    }
    if (metric != Metric::IP) {
      for (size_t i = 0; i < m; ++i) {
        const float* row = base + static_cast<size_t>(ids[i]) * d;
        double s = 0;
        for (size_t j = 0; j < d; ++j) s += static_cast<double>(row[j]) * row[j];
        rnorm[i] = metric == Metric::L2 ? static_cast<float>(s) : (s > 0 ? static_cast<float>(1.0 / std::sqrt(s)) : 0.0f);
      }
    }
    for (size_t qb = q0; qb < q1; qb += kFlatMR) {
      const size_t mq = std::min(kFlatMR, q1 - qb);
      TileKernel kern = tile_kernel(level, mq);
      for (size_t p = 0; p < npanels; ++p) {
        kern(queries + qb * d, d, panels.data() + p * NR * d, d, tile.data());
        const size_t lanes = std::min(NR, m - p * NR);
        for (size_t i = 0; i < mq; ++i) {
          ScoreTop& top = tops[qb + i - q0];
          const float* t = tile.data() + i * NR;
          for (size_t lane = 0; lane < lanes; ++lane) {
            const size_t idx = p * NR + lane;
            float s = t[lane];
            if (metric == Metric::Cosine) s *= qnorm[qb + i] * rnorm[idx];
            else if (metric == Metric::L2) s = -std::max(0.0f, rnorm[idx] - 2.0f * s + qnorm[qb + i]);
            if (-s < top.threshold()) top.push(-s, ids[idx]);
          }
        }
      }
    }
  }
}

// Exact top-k. Results sorted by score (desc), ties by smaller id; missing
// results (fewer than k allowed rows) are id -1, score -inf.
inline void exact_search(const float* base, size_t n, size_t d, const float* queries, size_t nq, size_t k,
                         Metric metric, const AllowSet* allow, size_t threads, int64_t* out_ids, float* out_scores,
                         Level level) {
  std::vector<float> qnorm(nq, 0.0f);
  if (metric != Metric::IP) {
    for (size_t i = 0; i < nq; ++i) {
      double s = 0;
      for (size_t j = 0; j < d; ++j) s += static_cast<double>(queries[i * d + j]) * queries[i * d + j];
      qnorm[i] = metric == Metric::L2 ? static_cast<float>(s) : (s > 0 ? static_cast<float>(1.0 / std::sqrt(s)) : 0.0f);
    }
  }
  threads = std::max<size_t>(1, std::min(threads, std::max<size_t>(1, n / 1024)));
  // Few queries split the rows over threads only with >= 6 MiB of rows x queries a thread (a thread
  // start costs ~0.1 ms on this project's 2-core VMs): one 384-d query, 3k rows 84 us on one thread
  // vs 143 on two, 10k 292 vs 227.
  if (nq < threads * kFlatMR)
    threads = std::max<size_t>(1, std::min(threads, nq * n * d * sizeof(float) / (size_t{6} << 20)));
  std::vector<ScoreTop> tops;
  if (nq >= threads * kFlatMR) {
    tops.assign(nq, ScoreTop(k));
    parallel_for(threads, threads, [&](size_t t) {
      size_t q0 = nq * t / threads, q1 = nq * (t + 1) / threads;
      flat_scan_range(base, d, queries, q0, q1, qnorm.data(), 0, n, metric, allow, tops.data() + q0, level);
    });
  } else {
    tops.assign(nq * threads, ScoreTop(k));
    parallel_for(threads, threads, [&](size_t t) {
      size_t r0 = n * t / threads, r1 = n * (t + 1) / threads;
      flat_scan_range(base, d, queries, 0, nq, qnorm.data(), r0, r1, metric, allow, tops.data() + t * nq, level);
    });
    for (size_t t = 1; t < threads; ++t)
      for (size_t q = 0; q < nq; ++q) tops[q].merge(tops[t * nq + q]);
  }
  for (size_t q = 0; q < nq; ++q) {
    auto best = tops[q].sorted();
    for (size_t j = 0; j < k; ++j) {
      out_ids[q * k + j] = j < best.size() ? best[j].id : -1;
      out_scores[q * k + j] = j < best.size() ? -best[j].key : -std::numeric_limits<float>::infinity();
    }
  }
}

}  // namespace vecsift
