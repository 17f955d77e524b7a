// One query over several quantised indexes, each with its own float32 rows:
// the shards a node actor serves (python/vecsift/distributed/node.py).
//
// Per part, the same steps as that index's own search: the best c estimates,
// pruned by their bounds, then the exact top k among the survivors. Done as two
// calls for all parts instead of four per part, because behind a Ray call every
// Python step of every shard runs with cold caches; between the two calls the
// Python layer verifies the candidates' row blocks.
// Each part's results equal what QuantizedIndex::search, bound_prune and
// rescore_candidates give it one at a time.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "vecsift/index/quantised_index.hpp"
#include "vecsift/index/rescore.hpp"

namespace vecsift {

struct QuantPart {
  const QuantizedIndex* index;
  size_t candidates;  // c: estimates kept before pruning, <= the caller's width
  size_t threads;
};

// cand: parts x width row numbers (-1 = none). z < 0: the fixed policy (every
// one of the c best estimates kept); z >= 0: candidates whose upper z-sigma
// bound is below the part's k-th largest lower bound dropped, part by part.
// (Pruning the parts together, as one index of all their rows would, reads a
// third of the rows: 22 instead of 63 for three shards at k 10 on 30k MiniLM
// rows; but it saved only ~10 us of a ~250 us node search and cost recall@10,
// 1.0000 -> 0.9952 over 1,000 queries, where one collection gets 0.9955.)
// kept[p]: survivors of part p.
inline void quant_parts_candidates(const QuantPart* parts, size_t nparts, const float* query, int qbits, float z,
                                   size_t k, size_t width, int64_t* cand, size_t* kept, Level level) {
  std::vector<float> est(width), lo(width), hi(width);
  for (size_t p = 0; p < nparts; ++p) {
    const QuantPart& part = parts[p];
    int64_t* cp = cand + p * width;
    std::fill(cp, cp + width, int64_t{-1});
    const size_t c = std::min(part.candidates, width);
    if (c == 0) {
      kept[p] = 0;
      continue;
    }
    if (z >= 0) {
      part.index->search(query, 1, c, qbits, nullptr, part.threads, cp, est.data(), level, z, lo.data(), hi.data());
      kept[p] = bound_prune(cp, lo.data(), hi.data(), 1, c, k);
    } else {
      part.index->search(query, 1, c, qbits, nullptr, part.threads, cp, est.data(), level);
      kept[p] = static_cast<size_t>(std::count_if(cp, cp + c, [](int64_t r) { return r >= 0; }));
    }
  }
}

// Exact top k of each part's candidates (cand as above) among its own rows
// (rows[p]: nrows[p] x d, row-major). out_*: parts x k, row -1 / -inf where a
// part has fewer than k. Throws as rescore_candidates does.
inline void quant_parts_rescore(const float* const* rows, const size_t* nrows, size_t nparts, size_t d,
                                const float* query, const int64_t* cand, size_t width, size_t k, Metric metric,
                                int64_t* out_ids, float* out_scores, Level level) {
  for (size_t p = 0; p < nparts; ++p)
    rescore_candidates(rows[p], nrows[p], d, query, 1, cand + p * width, width, k, metric, 1, out_ids + p * k,
                       out_scores + p * k, level);
}

}  // namespace vecsift
