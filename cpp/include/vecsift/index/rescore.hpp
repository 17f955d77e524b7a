// Exact rescoring of each query's own candidates, read in place from row-major
// float32 rows (a collection's memory-mapped vectors), and the bound-driven
// pruning that decides which candidates are worth reading.
//
// Collections rescore a few dozen rows a query after every approximate stage;
// done in numpy that was a gather, a matmul, a lexsort and two take_along_axis
// per call: ~35 us warm for 40 rows at 384-d, several times that with cold
// caches (a shard behind a Ray call), against ~3 us here.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <vector>

#include "vecsift/kernels/cpu.hpp"
#include "vecsift/kernels/distance.hpp"
#include "vecsift/kernels/parallel.hpp"
#include "vecsift/kernels/topk.hpp"

namespace vecsift {

// Candidates of query q are cand[q*c .. q*c+c) (row numbers, -1 = none, no
// repeats). Writes the best k of them by exact similarity (ip; -(squared l2)
// for L2; for Cosine ip / (|row| |query|), 0 where either is zero: callers whose
// rows and queries are unit length already pass IP), ties to the smaller row;
// missing results are row -1, score -inf.
// Throws std::out_of_range for a row >= n before reading anything, std::domain_error for a
// non-finite score.
inline void rescore_candidates(const float* rows, size_t n, size_t d, const float* queries, size_t nq,
                               const int64_t* cand, size_t c, size_t k, Metric metric, size_t threads,
                               int64_t* out_ids, float* out_scores, Level level) {
  for (size_t i = 0; i < nq * c; ++i)
    if (cand[i] >= static_cast<int64_t>(n)) throw std::out_of_range("candidate row past the end of the rows");
  const PairKernel f = metric == Metric::L2 ? l2sq_kernel(level) : ip_kernel(level);
  const PairKernel dot = ip_kernel(level);
  const float sign = metric == Metric::L2 ? -1.0f : 1.0f;
  threads = std::max<size_t>(1, std::min(threads, nq / 16 + 1));
  parallel_for(nq, threads, [&](size_t q) {
    TopK<float> top(k);
    const float* qv = queries + q * d;
    const int64_t* cq = cand + q * c;
    const float qn = metric == Metric::Cosine ? std::sqrt(dot(qv, qv, d)) : 1.0f;
    for (size_t j = 0; j < c; ++j) {
      const int64_t r = cq[j];
      if (r < 0) continue;
      const float* x = rows + static_cast<size_t>(r) * d;
      float s = sign * f(qv, x, d);
      float nr = 1.0f;
      if (metric == Metric::Cosine) nr = std::sqrt(dot(x, x, d)) * qn;
      // Rows are the caller's (QuantizedIndex.search(rescore=...) takes any float32 array): a NaN or
      // infinite value would make a score no ordering can rank.
      if (!std::isfinite(s) || !std::isfinite(nr))
        throw std::domain_error("a candidate row has NaN or infinite values (or its score overflows float32)");
      if (metric == Metric::Cosine) s = nr > 0 ? s / nr : 0.0f;
      top.push(-s, r);  // TopK keeps the smallest key
    }
    auto best = top.sorted();
    for (size_t j = 0; j < k; ++j) {
      out_ids[q * k + j] = j < best.size() ? best[j].id : -1;
      out_scores[q * k + j] = j < best.size() ? -best[j].key : -std::numeric_limits<float>::infinity();
    }
  });
}

// The bound policy: of each query's c candidates (with lower and upper bounds
// of their estimates), keep those whose upper bound reaches the k-th largest
// lower bound; the others become -1. A candidate dropped this way is below k
// others with high probability, so reading its float32 row cannot change the
// top k. Returns the number kept.
inline size_t bound_prune(int64_t* cand, const float* lo, const float* hi, size_t nq, size_t c, size_t k) {
  const size_t kk = std::min(k, c);
  if (kk == 0) return 0;
  size_t kept = 0;
  std::vector<float> v(c);
  for (size_t q = 0; q < nq; ++q) {
    int64_t* cq = cand + q * c;
    std::copy(lo + q * c, lo + q * c + c, v.begin());
    // k-th largest lower bound; -inf bounds (missing candidates) sort last. NaN never occurs (finite rows).
    std::nth_element(v.begin(), v.begin() + (kk - 1), v.end(), [](float a, float b) { return a > b; });
    const float kth = v[kk - 1];
    for (size_t j = 0; j < c; ++j) {
      if (cq[j] >= 0 && !(hi[q * c + j] >= kth)) cq[j] = -1;
      kept += cq[j] >= 0;
    }
  }
  return kept;
}

}  // namespace vecsift
