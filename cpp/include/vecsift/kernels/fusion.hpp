// Reciprocal rank fusion (Cormack, Clarke and Buettcher 2009) of ranked id lists:
//   score(d) = sum_i  w_i / (k + rank_i(d)),  rank 1-based, lists where d is absent add nothing.
// Lists hold int64 ids best first; negative entries are padding. An id repeated
// within a list counts at its first position. Contributions are summed in list
// order, so the result does not depend on how entries were gathered.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

namespace vecsift {

struct Fused {
  std::vector<int64_t> ids;     // best first: higher score, then better best rank, then smaller id
  std::vector<double> scores;
  std::vector<int64_t> ranks;   // ids.size() x n_lists, row-major; 0 where a list lacks the id
};

// flat: the lists concatenated, list i at flat[bounds[i] .. bounds[i + 1]).
// top_n < 0 keeps every fused id.
inline Fused rrf_fuse(const int64_t* flat, const int64_t* bounds, size_t n_lists, const double* weights, double k,
                      int64_t top_n) {
  struct Entry {
    int64_t id;
    int64_t rank;
    size_t list;
    size_t seq;  // position in flat: list order, then rank
  };
  std::vector<Entry> entries;
  entries.reserve(static_cast<size_t>(bounds[n_lists]));
  for (size_t li = 0; li < n_lists; ++li)
    for (int64_t j = bounds[li]; j < bounds[li + 1]; ++j)
      if (flat[j] >= 0) entries.push_back({flat[j], j - bounds[li] + 1, li, static_cast<size_t>(j)});
  std::sort(entries.begin(), entries.end(),
            [](const Entry& a, const Entry& b) { return a.id < b.id || (a.id == b.id && a.seq < b.seq); });

  std::vector<int64_t> ids, best, ranks;
  std::vector<double> scores;
  for (size_t e = 0; e < entries.size(); ++e) {
    const Entry& x = entries[e];
    if (e == 0 || x.id != entries[e - 1].id) {
      ids.push_back(x.id);
      best.push_back(x.rank);
      scores.push_back(0.0);
      ranks.resize(ranks.size() + n_lists, 0);
    }
    const size_t g = ids.size() - 1;
    int64_t& r = ranks[g * n_lists + x.list];
    if (r != 0) continue;  // a repeat within the same list
    r = x.rank;
    scores[g] += weights[x.list] / (k + static_cast<double>(x.rank));
    best[g] = std::min(best[g], x.rank);
  }

  const size_t m = ids.size();
  const size_t keep = top_n < 0 ? m : std::min(m, static_cast<size_t>(top_n));
  std::vector<size_t> order(m);
  for (size_t i = 0; i < m; ++i) order[i] = i;
  auto before = [&](size_t a, size_t b) {  // ids are distinct: a strict total order
    if (scores[a] != scores[b]) return scores[a] > scores[b];
    if (best[a] != best[b]) return best[a] < best[b];
    return ids[a] < ids[b];
  };
  std::partial_sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(keep), order.end(), before);

  Fused out;
  out.ids.resize(keep);
  out.scores.resize(keep);
  out.ranks.resize(keep * n_lists);
  for (size_t i = 0; i < keep; ++i) {
    const size_t g = order[i];
    out.ids[i] = ids[g];
    out.scores[i] = scores[g];
    std::copy_n(ranks.begin() + static_cast<std::ptrdiff_t>(g * n_lists), n_lists,
                out.ranks.begin() + static_cast<std::ptrdiff_t>(i * n_lists));
  }
  return out;
}

}  // namespace vecsift
