// One planner for "score the allowed rows exactly, or search the index".
//
// Every index asks it: the HNSW filter path (hnsw.hpp), the collection before
// its dense stage (python/vecsift/index/planner.py calls this through _core),
// and the coming quantised and partitioned indexes. Two terms:
//
//  * a floor: an allow set of at most max(fetch, kExactBelow) rows is scanned
//    exactly whatever the index (fetch = k times the oversampling of a
//    quantised first stage: the index would return every allowed row anyway);
//  * for a graph over n rows searched with beam ef: the walk costs about
//    ef / selectivity distance computations and the scan n * selectivity,
//    so they cross at A^2 = gamma * ef * n allowed rows.
//
// Measured with bench/bench_planner.py (see docs/architecture.md) and, for the
// graph term, bench/bench_hnsw.py (crossover section, single thread): forced walk
// and forced scan cost the same at gamma ~ 62 on GloVe 399k (ef 64 and 160) and
// ~ 26 on a 60k slice; 40 sits between the two, and the choice costs little near
// the crossover, where both paths are equally fast.
#pragma once

#include <cmath>
#include <cstddef>

namespace vecsift {

constexpr size_t kExactBelow = 2048;
constexpr double kScanGamma = 40.0;

// The largest allow set a graph of n rows searched with beam ef scans exactly.
inline double graph_scan_threshold(size_t n, size_t ef) {
  return std::sqrt(kScanGamma * static_cast<double>(ef) * static_cast<double>(n));
}

// graph_n = 0: the index is not a graph (only the floor applies).
inline bool scan_exactly(size_t n_allowed, size_t fetch, size_t graph_n = 0, size_t ef = 0) {
  if (n_allowed <= (fetch > kExactBelow ? fetch : kExactBelow)) return true;
  return graph_n && static_cast<double>(n_allowed) <= graph_scan_threshold(graph_n, ef);
}

}  // namespace vecsift
