// Partitioned (IVF) search over codes: k-means lists of codes, probed in
// centroid order, candidates rescored exactly from float32 rows.
//
// The index does not own its arrays: it reads views handed in by the caller
// (numpy arrays, usually file mappings), so every process that opens the same
// file shares one copy of the codes, lists and centroids in the page cache.
//
// Layout (built in Python, python/vecsift/index/partitioned.py):
//   centroids  (nlist, dim) float32
//   list_block (nlist + 1) int64: list l owns code blocks [list_block[l], list_block[l+1])
//   list_size  (nlist) int64: rows in list l; the tail of its last block is padding
//   slot_row   (nblocks * 8) int64: row id of each slot (-1 for padding)
//   codes      blocked layout of binary.hpp (block b, word w, lane l at (b*words + w)*8 + l)
//   vectors    (n, dim) float32 in row-id order, for exact rescoring
//   inv_norm   (n) float32 or null: 1/|x| for cosine rescoring (0 for zero rows)
// Each list starts on a block boundary, so one byte of allow mask covers one
// block of one list and the Hamming block kernels run unchanged on a list.
//
// The in-list scorer is a template parameter (see SignScorer): a scorer turns
// a query into its code form once, may re-prepare per list (residual codes),
// and scans a block range into a TopK of (key, slot). Swapping sign bits for
// the estimator of the quantised codes only adds a scorer.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <numeric>
#include <stdexcept>
#include <vector>

#include "vecsift/index/filter.hpp"
#include "vecsift/kernels/binary.hpp"
#include "vecsift/kernels/distance.hpp"
#include "vecsift/kernels/parallel.hpp"
#include "vecsift/kernels/topk.hpp"

namespace vecsift {

struct IVFView {
  size_t dim = 0, nlist = 0, nrows = 0, words = 0;
  const float* centroids = nullptr;
  const int64_t* list_block = nullptr;
  const int64_t* list_size = nullptr;
  const int64_t* slot_row = nullptr;
  const uint64_t* codes = nullptr;
  const float* vectors = nullptr;
  const float* inv_norm = nullptr;
  Metric metric = Metric::IP;

  size_t nblocks() const { return nlist ? static_cast<size_t>(list_block[nlist]) : 0; }
};

struct IVFParams {
  size_t k = 10;
  size_t nprobe = 16;
  size_t oversample = 8;       // candidates rescored = k * oversample
  size_t refine = 1;           // code-stage candidates = k * oversample * refine, cut to k * oversample
                               // by the asymmetric estimate (float query x sign bits) before rescoring
  size_t min_candidates = 0;   // allowed rows the probed lists must hold; 0 = automatic (see one())
  bool exact_small = true;     // small allow sets: exact scan of the allowed rows
};

struct IVFStats {
  uint64_t lists = 0, rows = 0, exact = 0;  // summed over the queries of a call
};

// Today's sign-bit codes: Hamming distance between the query's and the row's
// sign bits (the same code for every list).
struct SignScorer {
  using Key = int32_t;
  struct Query {
    std::vector<uint64_t> words;
  };
  size_t dim, words;
  Level level;
  BlockScanKernel kernel;

  SignScorer(const IVFView& v, Level lv) : dim(v.dim), words(v.words), level(lv), kernel(block_scan_kernel(lv)) {}

  void prepare(const float* q, Query& s) const {
    std::vector<uint8_t> code(code_bytes_for_dim(dim));
    binary_quantize(q, 1, dim, code.data(), level);
    s.words.assign(words, 0);
    for (size_t w = 0; w < words; ++w) s.words[w] = load_word(code.data() + 8 * w, code.size() - 8 * w);
  }
  void begin_list(size_t /*list*/, const float* /*q*/, Query& /*s*/) const {}
  void scan(const Query& s, const BlockScan& bs, size_t b0, size_t b1, TopK<Key>& top) const {
    kernel(bs, s.words.data(), b0, b1, top);
  }
};

// Asymmetric estimate <q, 2b - 1> of a float query against a row's sign bits,
// through one 256-entry table per code byte: t[j][v] = sum of 2 q[8j + i] over
// the set bits i of v, so the estimate is sum_j t[j][byte j] - sum(q). It
// ranks far better than Hamming distance (the query keeps its magnitudes) at
// one table lookup a byte, so it re-ranks the Hamming candidates before the
// float32 rows are read.
class AsymTable {
 public:
  void build(const float* q, size_t dim) {
    nbytes_ = code_bytes_for_dim(dim);
    t_.resize(nbytes_ * 256);
    double sum = 0;
    for (size_t i = 0; i < dim; ++i) sum += q[i];
    bias_ = static_cast<float>(sum);
    for (size_t j = 0; j < nbytes_; ++j) {
      float* t = t_.data() + j * 256;
      t[0] = 0.0f;
      for (unsigned v = 1; v < 256; ++v) {
        unsigned low = static_cast<unsigned>(__builtin_ctz(v));
        size_t i = 8 * j + low;
        t[v] = t[v & (v - 1)] + (i < dim ? 2.0f * q[i] : 0.0f);
      }
    }
  }
  // Estimate for slot s of the blocked layout (binary.hpp).
  float score(const uint64_t* codes, size_t words, size_t s) const {
    const uint64_t* blk = codes + (s / kBlockRows) * words * kBlockRows + s % kBlockRows;
    float acc = 0.0f;
    const float* t = t_.data();
    for (size_t k = 0; k < words; ++k) {
      uint64_t w = blk[k * kBlockRows];
      const size_t end = std::min<size_t>(8, nbytes_ - 8 * k);
      for (size_t b = 0; b < end; ++b, t += 256) acc += t[(w >> (8 * b)) & 0xFFu];
    }
    return acc - bias_;
  }

 private:
  std::vector<float> t_;
  size_t nbytes_ = 0;
  float bias_ = 0.0f;
};

// Exact similarity of a query with row r (higher is better).
inline float ivf_exact_score(const IVFView& v, const float* q, int64_t r, PairKernel ip, PairKernel l2) {
  const float* x = v.vectors + static_cast<size_t>(r) * v.dim;
  switch (v.metric) {
    case Metric::L2: return -l2(q, x, v.dim);
    case Metric::Cosine: return ip(q, x, v.dim) * v.inv_norm[r];
    default: return ip(q, x, v.dim);
  }
}

template <class Scorer>
class IVFSearcher {
 public:
  IVFSearcher(const IVFView& v, Level level)
      : v_(v), level_(level), scorer_(v, level), ip_(ip_kernel(level)), l2_(l2sq_kernel(level)) {}

  // Queries are row-major (nq, dim); for cosine they must be unit-normalised.
  // Results sorted by score (desc), ties to the smaller row id; id -1 / -inf pad.
  void search(const float* queries, size_t nq, const IVFParams& p, const AllowSet* allow, size_t threads,
              int64_t* out_ids, float* out_scores, IVFStats* stats) const {
    if (allow && allow->size() != v_.nrows) throw std::invalid_argument("allow length does not match the index size");
    threads = std::max<size_t>(1, std::min(threads, nq));
    std::vector<IVFStats> per(threads);
    parallel_for(threads, threads, [&](size_t t) {
      size_t q0 = nq * t / threads, q1 = nq * (t + 1) / threads;
      Scratch sc;
      for (size_t q = q0; q < q1; ++q)
        one(queries + q * v_.dim, p, allow, sc, out_ids + q * p.k, out_scores + q * p.k, per[t]);
    });
    if (stats)
      for (const auto& s : per) {
        stats->lists += s.lists;
        stats->rows += s.rows;
        stats->exact += s.exact;
      }
  }

  // Similarity of the query to every centroid (higher is better).
  void centroid_scores(const float* q, float* out) const {
    if (v_.metric == Metric::L2) {
      l2sq_block(q, v_.centroids, v_.nlist, v_.dim, out, level_);
      for (size_t c = 0; c < v_.nlist; ++c) out[c] = -out[c];
    } else {
      ip_block(q, v_.centroids, v_.nlist, v_.dim, out, level_);
    }
  }

 private:
  struct Scratch {
    std::vector<float> cscore;
    std::vector<uint32_t> order;
    std::unique_ptr<uint8_t[]> lanes;  // allow byte per block, written only for probed lists
    size_t lanes_size = 0;
    typename Scorer::Query query;
    AsymTable asym;
  };

  // Allowed lanes of the blocks of list l; returns how many rows are allowed.
  size_t fill_lanes(size_t l, const AllowSet& allow, uint8_t* lanes) const {
    const size_t b0 = v_.list_block[l], b1 = v_.list_block[l + 1];
    const uint64_t* aw = allow.words();
    size_t count = 0;
    for (size_t b = b0; b < b1; ++b) {
      const int64_t* rows = v_.slot_row + b * kBlockRows;
      unsigned m = 0;
      for (size_t lane = 0; lane < kBlockRows; ++lane) {
        int64_t r = rows[lane];
        unsigned bit = r >= 0 ? static_cast<unsigned>((aw[r >> 6] >> (r & 63)) & 1u) : 0u;
        m |= bit << lane;
      }
      lanes[b] = static_cast<uint8_t>(m);
      count += static_cast<size_t>(__builtin_popcount(m));
    }
    return count;
  }

  static uint8_t last_mask_for(size_t size) {
    size_t tail = size % kBlockRows;
    return static_cast<uint8_t>(tail ? (1u << tail) - 1u : 0xFFu);
  }

  // Exact top-k over the allowed rows, for allow sets so small that scanning
  // them costs less than probing the lists until enough of them are seen.
  void exact_allowed(const float* q, size_t k, const AllowSet& allow, int64_t* ids, float* scores) const {
    TopK<float> top(k);
    const uint64_t* aw = allow.words();
    for (size_t w = 0; w < allow.nwords(); ++w) {
      uint64_t bits = aw[w];
      while (bits) {
        int64_t r = static_cast<int64_t>(w * 64 + static_cast<size_t>(__builtin_ctzll(bits)));
        bits &= bits - 1;
        top.push(-ivf_exact_score(v_, q, r, ip_, l2_), r);
      }
    }
    write(top, k, ids, scores);
  }

  static void write(TopK<float>& top, size_t k, int64_t* ids, float* scores) {
    auto best = top.sorted();
    for (size_t j = 0; j < k; ++j) {
      ids[j] = j < best.size() ? best[j].id : -1;
      scores[j] = j < best.size() ? -best[j].key : -std::numeric_limits<float>::infinity();
    }
  }

  void one(const float* q, const IVFParams& p, const AllowSet* allow, Scratch& sc, int64_t* ids, float* scores,
           IVFStats& st) const {
    const size_t nfinal = std::max<size_t>(p.k, p.k * p.oversample);
    const size_t ncand = nfinal * std::max<size_t>(1, p.refine);
    // Allowed rows the probe must see. Filtered, the allowed top-k lie as far
    // out as the overall top-k / selectivity, so by default probing goes on
    // until the lists seen hold as many allowed rows as nprobe lists hold rows.
    size_t target = ncand;
    if (p.min_candidates) target = std::max(p.min_candidates, p.k);
    else if (allow) target = std::max(ncand, p.nprobe * v_.nrows / std::max<size_t>(1, v_.nlist));
    if (allow && p.exact_small) {
      // Exact reads count * dim floats; probing reads about target / selectivity
      // slots of (code + row id) bytes. Take the cheaper one.
      const double cnt = static_cast<double>(allow->count());
      const double exact_bytes = cnt * v_.dim * 4.0;
      const double probe_bytes =
          cnt > 0 ? static_cast<double>(target) * v_.nrows / cnt * (v_.words * 8.0 + 8.0) : 0.0;
      if (cnt == 0 || exact_bytes <= probe_bytes) {
        ++st.exact;
        exact_allowed(q, p.k, *allow, ids, scores);
        return;
      }
    }
    // Rank lists by centroid similarity: the first nprobe by partial sort, the
    // rest only if a filter makes us probe further.
    sc.cscore.resize(v_.nlist);
    centroid_scores(q, sc.cscore.data());
    sc.order.resize(v_.nlist);
    std::iota(sc.order.begin(), sc.order.end(), 0u);
    const float* cs = sc.cscore.data();
    auto by_score = [cs](uint32_t a, uint32_t b) { return cs[a] > cs[b] || (cs[a] == cs[b] && a < b); };
    size_t sorted_upto = std::min(p.nprobe, v_.nlist);
    std::partial_sort(sc.order.begin(), sc.order.begin() + sorted_upto, sc.order.end(), by_score);

    if (allow && sc.lanes_size < v_.nblocks()) {
      sc.lanes.reset(new uint8_t[v_.nblocks()]);
      sc.lanes_size = v_.nblocks();
    }
    scorer_.prepare(q, sc.query);
    TopK<typename Scorer::Key> top(ncand);
    size_t seen = 0, probed = 0;
    for (; probed < v_.nlist; ++probed) {
      if (probed >= p.nprobe && seen >= target) break;
      if (probed == sorted_upto) {  // past the ranked prefix: rank the rest once
        std::sort(sc.order.begin() + sorted_upto, sc.order.end(), by_score);
        sorted_upto = v_.nlist;
      }
      const size_t l = sc.order[probed];
      const size_t b0 = v_.list_block[l], b1 = v_.list_block[l + 1];
      if (b0 == b1) continue;
      size_t allowed = static_cast<size_t>(v_.list_size[l]);
      if (allow) allowed = fill_lanes(l, *allow, sc.lanes.get());
      st.rows += static_cast<uint64_t>(v_.list_size[l]);
      ++st.lists;
      if (!allowed) continue;
      seen += allowed;
      scorer_.begin_list(l, q, sc.query);
      // nblocks = b1 makes the kernel apply the list's last-block mask.
      BlockScan bs{v_.codes, v_.words, b1, last_mask_for(static_cast<size_t>(v_.list_size[l])),
                   allow ? sc.lanes.get() : nullptr};
      scorer_.scan(sc.query, bs, b0, b1, top);
    }
    auto cand = top.sorted();
    if (cand.size() > nfinal) {
      // Re-rank the code-stage candidates by the asymmetric estimate; keep nfinal.
      sc.asym.build(q, v_.dim);
      TopK<float> mid(nfinal);
      for (const auto& c : cand) mid.push(-sc.asym.score(v_.codes, v_.words, static_cast<size_t>(c.id)), c.id);
      auto kept = mid.sorted();
      cand.clear();
      for (const auto& c : kept) cand.push_back({0, c.id});
    }
    // Rescore the candidates exactly from the float32 rows.
    TopK<float> fin(p.k);
    for (const auto& c : cand) {
      int64_t r = v_.slot_row[c.id];
      fin.push(-ivf_exact_score(v_, q, r, ip_, l2_), r);
    }
    write(fin, p.k, ids, scores);
  }

  IVFView v_;
  Level level_;
  Scorer scorer_;
  PairKernel ip_, l2_;
};

// Nearest centroid of each row (ties to the smaller list), for adds: rows are
// scored against all centroids with the pair kernels, threads over rows.
inline void ivf_assign(const float* centroids, size_t nlist, size_t dim, const float* rows, size_t n, Metric metric,
                       size_t threads, int64_t* out, Level level) {
  PairKernel ip = ip_kernel(level), l2 = l2sq_kernel(level);
  const size_t chunks = std::max<size_t>(1, std::min(threads, n / 64 + 1));
  parallel_for(chunks, chunks, [&](size_t t) {
    size_t r0 = n * t / chunks, r1 = n * (t + 1) / chunks;
    for (size_t r = r0; r < r1; ++r) {
      const float* x = rows + r * dim;
      float best = -std::numeric_limits<float>::infinity();
      int64_t arg = 0;
      for (size_t c = 0; c < nlist; ++c) {
        float s = metric == Metric::L2 ? -l2(x, centroids + c * dim, dim) : ip(x, centroids + c * dim, dim);
        if (s > best) {
          best = s;
          arg = static_cast<int64_t>(c);
        }
      }
      out[r] = arg;
    }
  });
}

}  // namespace vecsift
