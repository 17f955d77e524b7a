// Partitioned (IVF) search over the RaBitQ-style codes of the quantised index
// (kernels/quant_codes.hpp, quant_scan.hpp): each list holds the codes of its
// rows' residuals to a code centre, in the bit-plane layout of 32-row blocks,
// and is scanned by the same kernels a flat QuantizedIndex uses, one call per
// list over the list's block range.
//
// Layout (built in Python, python/vecsift/index/partitioned.py):
//   centroids   (nlist, dim) float32: ranking centroids (what queries probe by)
//   centres     (m, dim) float32: code centres, m = nlist ("list": residual to
//               the list's centroid, as faiss IndexIVFRaBitQ) or m = 1 ("global")
//   centres_rot (m, D) float32: the centres rotated (P c, D = code_dim)
//   rotation    (D, D) float32: P^T row-major, or (kFhtRounds, D) random signs of
//               the structured rotation (fht; quant_rotation.hpp)
//   list_block  (nlist + 1) int64: list l owns 32-row blocks [list_block[l], list_block[l+1])
//   list_size   (nlist) int64; slot_row (nblocks * 32) int64 row id of each slot (-1 padding)
//   codes       nblocks * bits * D/8 * 32 bytes: block b, plane byte i, lane t at (b*bits*J + i)*32 + t
//   factors     (5, nblocks * 32) float32: a, su, add, g, h of each slot (quant_codes.hpp)
//   vectors     (n, dim) float32 for exact rescoring; inv_norm (n) for cosine
//   rank_basis  (r, dim) float32 and rank_proj (nlist, r) float16, or absent: the
//               centroids' leading principal directions and the centroids projected
//               on them, for two-stage list ranking (rank_lists below)
//
// A query is rotated once (P q). For list l with centre c, the residual query
// P q - P c is quantised (per list with "list" centres, once with "global")
// and the list's blocks are scanned into one TopKBuffer of (-estimate, slot).
// Rescoring ("bound", the collection's policy): of the best k * oversample
// estimates, only those whose upper bound reaches the k-th best lower bound
// are rescored exactly; "fixed" rescores all of them; "none" returns estimates.
#pragma once

#include <algorithm>
#include <functional>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <numeric>
#include <stdexcept>
#include <vector>

#include "vecsift/index/filter.hpp"
#include "vecsift/index/partitioned_encode.hpp"
#include "vecsift/kernels/distance.hpp"
#include "vecsift/kernels/half.hpp"
#include "vecsift/kernels/parallel.hpp"
#include "vecsift/kernels/quant_codes.hpp"
#include "vecsift/kernels/quant_layout.hpp"
#include "vecsift/kernels/quant_nibble_scan.hpp"
#include "vecsift/kernels/quant_rotation.hpp"
#include "vecsift/kernels/quant_scan.hpp"
#include "vecsift/kernels/select.hpp"
#include "vecsift/kernels/topk.hpp"

namespace vecsift {

enum class IVFRescore { Bound = 0, Fixed = 1, None = 2 };

struct IVFQView {
  size_t dim = 0, D = 0, J = 0, nlist = 0, nrows = 0, ncentres = 0;
  int bits = 2;
  QuantLayout layout = QuantLayout::Planes;  // of the blocks in `codes` (quant_layout.hpp); Nibbles: 4 bits
  const float* centroids = nullptr;
  const float* centres = nullptr;
  const float* centres_rot = nullptr;
  const float* rotation = nullptr;
  bool fht = false;  // rotation holds kFhtRounds x D signs (fht_rotate), else the dense (D, D) matrix
  const int64_t* list_block = nullptr;
  const int64_t* list_size = nullptr;
  const int64_t* slot_row = nullptr;
  const uint8_t* codes = nullptr;
  const float* factors = nullptr;  // 5 x nslots
  const float* vectors = nullptr;
  const float* inv_norm = nullptr;
  const float* rank_basis = nullptr;   // (rank_dims, dim) or null: one-stage ranking
  const uint16_t* rank_proj = nullptr;  // (nlist, rank_dims) float16
  size_t rank_dims = 0;
  Metric metric = Metric::IP;

  size_t nblocks() const { return nlist ? static_cast<size_t>(list_block[nlist]) : 0; }
  size_t nslots() const { return nblocks() * kQuantBlockRows; }
  size_t code_bytes() const { return static_cast<size_t>(bits) * J; }
  size_t block_stride() const { return code_bytes() * kQuantBlockRows; }
  const float* fac(int i) const { return factors + static_cast<size_t>(i) * nslots(); }
};

// y = P x for one padded row (D floats) with the view's rotation.
inline void ivf_rotate(const IVFQView& v, const float* x, float* y, Level level) {
  if (v.fht) fht_rotate(v.rotation, v.D, x, y, level);
  else rotate(v.rotation, v.D, x, y, level);
}

struct IVFQParams {
  size_t k = 10, nprobe = 16, oversample = 4;
  size_t min_candidates = 0;  // allowed rows the probed lists must hold; 0 = automatic
  bool exact_small = true;
  int qbits = 4;
  IVFRescore rescore = IVFRescore::Bound;
  float confidence = 1.0f;  // bound width in standard deviations
};

struct IVFQStats {
  uint64_t lists = 0, rows = 0, exact = 0, rescored = 0;
};

// Same 32 x 16 nibble tables as build_query_luts (quant_codes.hpp), built by
// doubling: t[n | 2^b] = t[n] + digit b. The integers are identical; this runs
// once per probed list, where the bit-by-bit loop cost more than a list's scan.
inline void ivf_query_luts(const uint8_t* qu, size_t D, int Bq, std::vector<uint8_t>& luts) {
  const int passes = (Bq + 3) / 4;
  const size_t J = D / 8;
  luts.resize(static_cast<size_t>(passes) * J * 32);
  for (int g = 0; g < passes; ++g)
    for (size_t j = 0; j < J; ++j)
      for (int half = 0; half < 2; ++half) {
        uint8_t* t = luts.data() + ((g * J + j) * 2 + half) * 16;
        const uint8_t* src = qu + 8 * j + 4 * half;
        t[0] = 0;
        for (int b = 0, w = 1; b < 4; ++b, w <<= 1) {
          const uint8_t d = static_cast<uint8_t>((src[b] >> (4 * g)) & 15);
          for (int n = 0; n < w; ++n) t[w + n] = static_cast<uint8_t>(t[n] + d);
        }
      }
}

// quantize_query of quant_codes.hpp with the tables above (same values); for
// codes in the nibble layout the query words instead of the tables.
inline void ivf_quantize_query(const float* qr, size_t D, int Bq, QuantQuery& q, QuantLayout layout) {
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
  double sq = 0;
  for (size_t i = 0; i < D; ++i) {
    int v = dq > 0 ? static_cast<int>(std::floor((qr[i] - lo) / dq + 0.5f)) : 0;
    v = v < 0 ? 0 : (v > top ? top : v);
    q.qu[i] = static_cast<uint8_t>(v);
    sq += v;
  }
  q.sum_qu = static_cast<float>(sq);
  if (layout == QuantLayout::Nibbles)
    build_query_words(q.qu.data(), D, q.words);
  else
    ivf_query_luts(q.qu.data(), D, Bq, q.luts);
}

// Codes and factors of rows assigned to code centres (row-major planes
// n x bits*D/8 and factors n x 5), as QuantizedIndex::encode does for one centre.
inline void ivf_quant_encode(const IVFQView& v, const float* rows, const int64_t* centre_of, size_t n,
                             uint8_t* planes, float* factors, size_t threads, Level level) {
  const size_t D = v.D, dim = v.dim, cb = v.code_bytes();
  const size_t slices = std::max<size_t>(1, std::min(threads, n / 256));
  parallel_for(slices, slices, [&](size_t t) {
    constexpr size_t G = kRotRows;  // rows rotated together (partitioned_encode.hpp)
    std::vector<float> pads(G * D), rs(G * D), scratch(2 * D);
    std::vector<uint8_t> u(D);
    const size_t i0 = n * t / slices, i1 = n * (t + 1) / slices;
    for (size_t g0 = i0; g0 < i1; g0 += G) {
      const size_t cnt = std::min(G, i1 - g0);
      for (size_t k = 0; k < cnt; ++k) {
        const size_t i = g0 + k;
        const float* x = rows + i * dim;
        const float* c = v.centres + static_cast<size_t>(centre_of[i]) * dim;
        double nn = 0;
        for (size_t j = 0; j < dim; ++j) nn += static_cast<double>(x[j]) * x[j];
        const float s = (v.metric == Metric::Cosine && nn > 0) ? static_cast<float>(1.0 / std::sqrt(nn)) : 1.0f;
        float* pad = pads.data() + k * D;
        for (size_t j = 0; j < dim; ++j) pad[j] = x[j] * s - c[j];
        for (size_t j = dim; j < D; ++j) pad[j] = 0.0f;
      }
      if (v.fht)  // O(D log D) a row: no matrix to share across rows
        for (size_t k = 0; k < cnt; ++k) fht_rotate(v.rotation, D, pads.data() + k * D, rs.data() + k * D, level);
      else
        rotate_rows(v.rotation, D, pads.data(), rs.data(), cnt, level);
      for (size_t k = 0; k < cnt; ++k) {
        const size_t i = g0 + k;
        const float* c = v.centres + static_cast<size_t>(centre_of[i]) * dim;
        const float* pad = pads.data() + k * D;
        const float* r = rs.data() + k * D;
        QuantFactors f = quantize_rotated_fast(r, D, v.bits, u.data(), scratch.data(), level);
        if (v.metric == Metric::L2) {
          double rr = 0;
          for (size_t j = 0; j < D; ++j) rr += static_cast<double>(r[j]) * r[j];
          f.add = static_cast<float>(-rr);
        } else {
          double dot = 0;  // <x - c, c>
          for (size_t j = 0; j < dim; ++j) dot += static_cast<double>(pad[j]) * c[j];
          f.add = static_cast<float>(dot);
        }
        pack_planes(u.data(), D, v.bits, planes + i * cb);
        float* fo = factors + 5 * i;
        fo[0] = f.a, fo[1] = f.su, fo[2] = f.add, fo[3] = f.g, fo[4] = f.h;
      }
    }
  });
}

class IVFQuantSearcher {
 public:
  // Unfiltered calls with at least this many queries take the list-major batch path.
  static constexpr size_t kBatchQueries = 8, kBatchChunk = 4096;

  IVFQuantSearcher(const IVFQView& v, Level level)
      : v_(v), level_(level), ip_(ip_kernel(level)), l2_(l2sq_kernel(level)) {
    // Cosine and ip centroids are unit vectors (spherical k-means): float16 keeps them to 2^-11.
    // l2 centroids live at the data's scale, which float16's range (65504) may not hold.
    float top = 0;
    for (size_t i = 0; i < v.nlist * v.dim; ++i) top = std::max(top, std::fabs(v.centroids[i]));
    if (v.metric != Metric::L2 && top <= kHalfCentroidMax) {
      half_centroids_.resize(v.nlist * v.dim);
      to_half(v.centroids, v.nlist * v.dim, half_centroids_.data());
    }
  }
  static constexpr float kHalfCentroidMax = 64.0f;
  // Two-stage ranking rescores max(256, 4 nprobe) lists on the whole centroids (only when
  // that is at most half of them). On 10M generated MiniLM rows (nlist 8192, r = 160 of
  // 384 for 90% of the centroids' energy) the first 128 lists found overlap the one-stage
  // ones 0.9999 (1,000 queries).
  static constexpr size_t kRankShortlistMin = 256, kRankShortlistPerProbe = 4;

  const IVFQView& view() const { return v_; }

  void search(const float* queries, size_t nq, const IVFQParams& p, const AllowSet* allow, size_t threads,
              int64_t* out_ids, float* out_scores, IVFQStats* stats) const {
    if (allow && allow->size() != v_.nrows) throw std::invalid_argument("allow length does not match the index size");
    if (!allow && v_.ncentres == 1 && nq >= kBatchQueries && v_.nlist > 1) {
      // In chunks: the per-thread candidate heaps of a chunk are threads x chunk x k*oversample.
      for (size_t q0 = 0; q0 < nq; q0 += kBatchChunk) {
        const size_t m = std::min(kBatchChunk, nq - q0);
        search_batch(queries + q0 * v_.dim, m, p, threads, out_ids + q0 * p.k, out_scores + q0 * p.k, stats);
      }
      return;
    }
    threads = std::max<size_t>(1, std::min(threads, nq));
    std::vector<IVFQStats> per(threads);
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
        stats->rescored += s.rescored;
      }
  }

 private:
  struct ListQuery {
    float norm2, dq, mq;
  };
  struct Scratch {
    std::vector<float> cscore, pad, rq, qr, qproj;
    std::vector<uint32_t> order, keys;  // keys: select_largest scratch
    std::vector<uint32_t> lanes;       // allow word per block, written for probed lists only
    std::vector<ListQuery> lq;         // per list (per centre for "global": entry 0)
    QuantQuery query;
  };

  // Scores a block of a list; keys are -estimate, ids are slots.
  struct Sink {
    TopKBuffer<float>& top;
    QuantScoreArgs f;
    size_t slot0;
    void block(size_t b, uint32_t mask, const uint32_t* S, Level level) {
      alignas(32) float est[kQuantBlockRows];
      uint32_t pass = quant_scores_above(level, f, b * kQuantBlockRows, S, -top.threshold(), est) & mask;
      while (pass) {
        const unsigned l = static_cast<unsigned>(__builtin_ctz(pass));
        top.push(-est[l], static_cast<int64_t>(slot0 + b * kQuantBlockRows + l));
        pass &= pass - 1;
      }
    }
  };

  float exact(const float* q, int64_t r) const {
    const float* x = v_.vectors + static_cast<size_t>(r) * v_.dim;
    switch (v_.metric) {
      case Metric::L2: return -l2_(q, x, v_.dim);
      case Metric::Cosine: return ip_(q, x, v_.dim) * v_.inv_norm[r];
      default: return ip_(q, x, v_.dim);
    }
  }

  size_t fill_lanes(size_t l, const AllowSet& allow, uint32_t* lanes) const {
    const size_t b0 = v_.list_block[l], b1 = v_.list_block[l + 1];
    const uint64_t* aw = allow.words();
    size_t count = 0;
    for (size_t b = b0; b < b1; ++b) {
      const int64_t* rows = v_.slot_row + b * kQuantBlockRows;
      uint32_t m = 0;
      for (size_t lane = 0; lane < kQuantBlockRows; ++lane) {
        const int64_t r = rows[lane];
        const uint32_t bit = r >= 0 ? static_cast<uint32_t>((aw[r >> 6] >> (r & 63)) & 1u) : 0u;
        m |= bit << lane;
      }
      lanes[b] = m;
      count += static_cast<size_t>(__builtin_popcount(m));
    }
    return count;
  }

  static void write(TopK<float>& top, size_t k, int64_t* ids, float* scores) {
    auto best = top.sorted();
    for (size_t j = 0; j < k; ++j) {
      ids[j] = j < best.size() ? best[j].id : -1;
      scores[j] = j < best.size() ? -best[j].key : -std::numeric_limits<float>::infinity();
    }
  }

  void exact_allowed(const float* q, size_t k, const AllowSet& allow, int64_t* ids, float* scores) const {
    TopK<float> top(k);
    const uint64_t* aw = allow.words();
    for (size_t w = 0; w < allow.nwords(); ++w) {
      uint64_t bits = aw[w];
      while (bits) {
        const int64_t r = static_cast<int64_t>(w * 64 + static_cast<size_t>(__builtin_ctzll(bits)));
        bits &= bits - 1;
        top.push(-exact(q, r), r);
      }
    }
    write(top, k, ids, scores);
  }

  // The quantised residual query of centre c into sc.query and sc.lq[c].
  void prepare_centre(size_t c, const float* q, Scratch& sc, const IVFQParams& p, QuantEstimator& e) const {
    const float* pc = v_.centres_rot + c * v_.D;
    for (size_t j = 0; j < v_.D; ++j) sc.qr[j] = sc.rq[j] - pc[j];
    ivf_quantize_query(sc.qr.data(), v_.D, p.qbits, sc.query, v_.layout);
    const float* cu = v_.centres + c * v_.dim;
    float mq, cq;
    if (v_.metric == Metric::L2) {
      mq = 2.0f;
      cq = -sc.query.norm2;
    } else {
      double dot = 0;
      for (size_t j = 0; j < v_.dim; ++j) dot += static_cast<double>(cu[j]) * q[j];
      mq = 1.0f;
      cq = static_cast<float>(dot);
    }
    const float cB = static_cast<float>(((1 << v_.bits) - 1) / 2.0);
    const float K = cB * (sc.query.dq * sc.query.sum_qu + sc.query.lo * static_cast<float>(v_.D));
    e = QuantEstimator{sc.query.dq, sc.query.lo, K, mq, cq};
    sc.lq[c] = ListQuery{sc.query.norm2, sc.query.dq, mq};
  }

  size_t list_of_slot(size_t slot) const {
    const size_t b = slot / kQuantBlockRows;
    const int64_t* lb = v_.list_block;
    return static_cast<size_t>(std::upper_bound(lb, lb + v_.nlist + 1, static_cast<int64_t>(b)) - lb) - 1;
  }

  void one(const float* q, const IVFQParams& p, const AllowSet* allow, Scratch& sc, int64_t* ids, float* scores,
           IVFQStats& st) const {
    const size_t ncand = std::max<size_t>(p.k, p.k * p.oversample);
    size_t target = ncand;
    if (p.min_candidates) target = std::max(p.min_candidates, p.k);
    else if (allow) target = std::max(ncand, p.nprobe * v_.nrows / std::max<size_t>(1, v_.nlist));
    if (allow && p.exact_small) {
      // Exact reads count * dim floats; probing reads about target / selectivity
      // slots of (code + factors + row id) bytes. Take the cheaper one.
      const double cnt = static_cast<double>(allow->count());
      const double exact_bytes = cnt * v_.dim * 4.0;
      const double probe_bytes =
          cnt > 0 ? static_cast<double>(target) * v_.nrows / cnt * (v_.code_bytes() + 20.0 + 8.0) : 0.0;
      if (cnt == 0 || exact_bytes <= probe_bytes) {
        ++st.exact;
        exact_allowed(q, p.k, *allow, ids, scores);
        return;
      }
    }
    rank_lists(q, p.nprobe, sc);
    const float* cs = sc.cscore.data();
    auto by_score = [cs](uint32_t a, uint32_t b) { return cs[a] > cs[b] || (cs[a] == cs[b] && a < b); };
    size_t sorted_upto = std::min(p.nprobe, v_.nlist);
    if (allow && sc.lanes.size() < v_.nblocks()) sc.lanes.resize(v_.nblocks());
    rotate_query(q, sc);
    sc.lq.resize(v_.ncentres);
    const bool per_list = v_.ncentres > 1;
    QuantEstimator e{};
    // The AVX-512 scan's tables, once per query (or per list when the query is per list), not per list call.
    auto prepare = [&](size_t c) {
      prepare_centre(c, q, sc, p, e);
      if (v_.layout == QuantLayout::Planes)
        quant_wide_tables(level_, sc.query.luts.data(), v_.J, sc.query.passes(), sc.query.wide);
    };
    if (!per_list) prepare(0);

    TopKBuffer<float> top(ncand);
    const size_t stride = v_.block_stride(), nslots = v_.nslots();
    const float *fa = v_.factors, *fsu = fa + nslots, *fadd = fsu + nslots;
    size_t seen = 0, probed = 0;
    for (; probed < v_.nlist; ++probed) {
      if (probed >= p.nprobe && seen >= target) break;
      if (probed == sorted_upto) {
        std::sort(sc.order.begin() + sorted_upto, sc.order.end(), by_score);
        sorted_upto = v_.nlist;
      }
      const size_t l = sc.order[probed];
      const size_t b0 = v_.list_block[l], b1 = v_.list_block[l + 1];
      if (b0 == b1) continue;
      const size_t size = static_cast<size_t>(v_.list_size[l]);
      size_t allowed = size;
      if (allow) allowed = fill_lanes(l, *allow, sc.lanes.data());
      st.rows += size;
      ++st.lists;
      if (!allowed) continue;
      seen += allowed;
      if (per_list) prepare(l);
      const QuantBlocks blocks{v_.codes + b0 * stride, v_.bits, v_.J, b1 - b0, quant_last_mask(size),
                               allow ? sc.lanes.data() + b0 : nullptr};
      const size_t slot0 = b0 * kQuantBlockRows;
      Sink sink{top, QuantScoreArgs{fa + slot0, fsu + slot0, fadd + slot0, e}, slot0};
      if (v_.layout == QuantLayout::Nibbles)
        quant_nibble_sums(level_, blocks, sc.query.words.data(), p.qbits, 0, b1 - b0, sink);
      else
        quant_sums(level_, blocks, sc.query.luts.data(), sc.query.passes(), 0, b1 - b0, sink,
                   sc.query.wide.empty() ? nullptr : sc.query.wide.data());
    }
    auto cand = top.best();
    finish(q, cand, sc.lq, per_list, p, ids, scores, st);
  }

  // Rescoring of the code-stage candidates (in any order) by the policy of p.
  void finish(const float* q, std::vector<Candidate<float>>& cand, const std::vector<ListQuery>& lq, bool per_list,
              const IVFQParams& p, int64_t* ids, float* scores, IVFQStats& st) const {
    if (p.rescore == IVFRescore::None) {
      const auto mid = cand.begin() + static_cast<std::ptrdiff_t>(std::min(p.k, cand.size()));
      std::partial_sort(cand.begin(), mid, cand.end(), better<float>);
      for (size_t j = 0; j < p.k; ++j) {
        ids[j] = j < cand.size() ? v_.slot_row[cand[j].id] : -1;
        scores[j] = j < cand.size() ? -cand[j].key : -std::numeric_limits<float>::infinity();
      }
      return;
    }
    size_t keep = cand.size();
    std::vector<uint8_t> take(cand.size(), 1);
    if (p.rescore == IVFRescore::Bound && cand.size() > p.k) {
      // Half-width of each candidate's bound: z * mq * g * sqrt(|q_r|^2 h + dq^2 / 12).
      const float *fg = v_.fac(3), *fh = v_.fac(4);
      std::vector<float> lo(cand.size()), hi(cand.size());
      for (size_t j = 0; j < cand.size(); ++j) {
        const size_t s = static_cast<size_t>(cand[j].id);
        const ListQuery& L = lq[per_list ? list_of_slot(s) : 0];
        const double var = static_cast<double>(L.norm2) * fh[s] + static_cast<double>(L.dq) * L.dq / 12.0;
        const float h = static_cast<float>(p.confidence * L.mq * fg[s] * std::sqrt(var));
        lo[j] = -cand[j].key - h;
        hi[j] = -cand[j].key + h;
      }
      std::vector<float> srt(lo);
      std::nth_element(srt.begin(), srt.begin() + (p.k - 1), srt.end(), std::greater<float>());
      const float kth_lower = srt[p.k - 1];
      keep = 0;
      for (size_t j = 0; j < cand.size(); ++j) {
        take[j] = hi[j] >= kth_lower;
        keep += take[j];
      }
    }
    st.rescored += keep;
    TopK<float> fin(p.k);
    for (size_t j = 0; j < cand.size(); ++j) {
      if (!take[j]) continue;
      const int64_t r = v_.slot_row[cand[j].id];
      fin.push(-exact(q, r), r);
    }
    write(fin, p.k, ids, scores);
  }

  // Batched unfiltered search with one code centre: every query's lists are
  // chosen first, then each list is scanned once for all the queries that
  // probe it (its codes stay in cache across them), threads over lists.
  // The lists probed and the candidates kept are those of one() per query.
  void search_batch(const float* queries, size_t nq, const IVFQParams& p, size_t threads, int64_t* out_ids,
                    float* out_scores, IVFQStats* stats) const {
    threads = std::max<size_t>(1, threads);
    const size_t ncand = std::max<size_t>(p.k, p.k * p.oversample);
    std::vector<QuantQuery> qq(nq);
    std::vector<QuantEstimator> est(nq);
    std::vector<std::vector<ListQuery>> lq(nq);
    std::vector<std::vector<uint32_t>> probes(nq);
    std::vector<IVFQStats> per(threads);
    const size_t tq = std::min(threads, nq);
    parallel_for(tq, tq, [&](size_t t) {
      Scratch sc;
      for (size_t q = nq * t / tq; q < nq * (t + 1) / tq; ++q) {
        const float* x = queries + q * v_.dim;
        rank_lists(x, p.nprobe, sc);
        size_t seen = 0, probed = 0, sorted_upto = std::min(p.nprobe, v_.nlist);
        const float* cs = sc.cscore.data();
        auto by_score = [cs](uint32_t a, uint32_t b) { return cs[a] > cs[b] || (cs[a] == cs[b] && a < b); };
        for (; probed < v_.nlist; ++probed) {
          if (probed >= p.nprobe && seen >= ncand) break;
          if (probed == sorted_upto) {
            std::sort(sc.order.begin() + sorted_upto, sc.order.end(), by_score);
            sorted_upto = v_.nlist;
          }
          const size_t l = sc.order[probed];
          if (v_.list_block[l] == v_.list_block[l + 1]) continue;
          seen += static_cast<size_t>(v_.list_size[l]);
          probes[q].push_back(static_cast<uint32_t>(l));
          per[t].rows += static_cast<uint64_t>(v_.list_size[l]);
          ++per[t].lists;
        }
        rotate_query(x, sc);
        sc.lq.resize(1);
        prepare_centre(0, x, sc, p, est[q]);
        sc.query.wide.clear();  // a batch's scans build their own tables (no 7 KiB copy per query)
        qq[q] = sc.query;
        lq[q] = sc.lq;
      }
    });
    // list -> queries probing it
    std::vector<size_t> off(v_.nlist + 1, 0);
    for (size_t q = 0; q < nq; ++q)
      for (uint32_t l : probes[q]) ++off[l + 1];
    for (size_t l = 0; l < v_.nlist; ++l) off[l + 1] += off[l];
    std::vector<uint32_t> who(off[v_.nlist]);
    {
      std::vector<size_t> fill(off.begin(), off.end() - 1);
      for (size_t q = 0; q < nq; ++q)
        for (uint32_t l : probes[q]) who[fill[l]++] = static_cast<uint32_t>(q);
    }
    // Threads take list ranges of about equal work (rows x queries).
    std::vector<double> cum(v_.nlist + 1, 0.0);
    for (size_t l = 0; l < v_.nlist; ++l)
      cum[l + 1] = cum[l] + static_cast<double>(v_.list_size[l]) * static_cast<double>(off[l + 1] - off[l]);
    const size_t ts = std::max<size_t>(1, std::min(threads, v_.nlist));
    std::vector<size_t> cut(ts + 1, v_.nlist);
    cut[0] = 0;
    for (size_t t = 1; t < ts; ++t)
      cut[t] = static_cast<size_t>(std::lower_bound(cum.begin(), cum.end(), cum[v_.nlist] * t / ts) - cum.begin());
    std::vector<TopKBuffer<float>> tops(ts * nq, TopKBuffer<float>(ncand));
    const size_t stride = v_.block_stride(), nslots = v_.nslots();
    const float *fa = v_.factors, *fsu = fa + nslots, *fadd = fsu + nslots;
    parallel_for(ts, ts, [&](size_t t) {
      for (size_t l = cut[t]; l < std::max(cut[t], cut[t + 1]); ++l) {
        const size_t b0 = v_.list_block[l], b1 = v_.list_block[l + 1];
        if (b0 == b1) continue;
        const size_t size = static_cast<size_t>(v_.list_size[l]);
        const QuantBlocks blocks{v_.codes + b0 * stride, v_.bits, v_.J, b1 - b0, quant_last_mask(size), nullptr};
        const size_t slot0 = b0 * kQuantBlockRows;
        for (size_t j = off[l]; j < off[l + 1]; ++j) {
          const size_t q = who[j];
          Sink sink{tops[t * nq + q], QuantScoreArgs{fa + slot0, fsu + slot0, fadd + slot0, est[q]}, slot0};
          if (v_.layout == QuantLayout::Nibbles)
            quant_nibble_sums(level_, blocks, qq[q].words.data(), p.qbits, 0, b1 - b0, sink);
          else
            quant_sums(level_, blocks, qq[q].luts.data(), qq[q].passes(), 0, b1 - b0, sink);
        }
      }
    });
    parallel_for(tq, tq, [&](size_t t) {
      for (size_t q = nq * t / tq; q < nq * (t + 1) / tq; ++q) {
        for (size_t u = 1; u < ts; ++u) tops[q].merge(tops[u * nq + q]);
        auto cand = tops[q].best();
        finish(queries + q * v_.dim, cand, lq[q], false, p, out_ids + q * p.k, out_scores + q * p.k, per[t]);
      }
    });
    if (stats)
      for (const auto& s : per) {
        stats->lists += s.lists;
        stats->rows += s.rows;
        stats->rescored += s.rescored;
      }
  }

  // Lists scored in two stages: all of them on the r-dimensional projections (r/dim of the
  // bytes), then the best `shortlist` again on the whole float16 centroids. The first
  // nprobe are taken among the shortlist by the whole scores; the other lists keep their
  // projected scores, which order any further probing (filters).
  size_t rank_shortlist(size_t nprobe) const {
    if (!v_.rank_basis || half_centroids_.empty()) return 0;
    const size_t L = std::max(kRankShortlistMin, kRankShortlistPerProbe * nprobe);
    return 2 * L <= v_.nlist ? L : 0;
  }

  void rank_two_stage(const float* q, size_t nprobe, size_t L, Scratch& sc) const {
    const size_t r = v_.rank_dims, d = v_.dim;
    sc.qproj.resize(r);
    ip_block(q, v_.rank_basis, r, d, sc.qproj.data(), level_);
    half_ip_block(sc.qproj.data(), v_.rank_proj, v_.nlist, r, sc.cscore.data(), level_);
    sc.order.resize(v_.nlist);
    const float* cs = sc.cscore.data();
    auto by_score = [cs](uint32_t a, uint32_t b) { return cs[a] > cs[b] || (cs[a] == cs[b] && a < b); };
    select_largest(sc.cscore.data(), v_.nlist, L, sc.order.data(), sc.keys);
    for (size_t i = 0; i < L; ++i) {
      const uint32_t l = sc.order[i];
      half_ip_block(q, half_centroids_.data() + static_cast<size_t>(l) * d, 1, d, &sc.cscore[l], level_);
    }
    const auto mid = sc.order.begin() + std::min(nprobe, L);
    std::nth_element(sc.order.begin(), mid, sc.order.begin() + L, by_score);
    std::sort(sc.order.begin(), mid, by_score);
  }

  // Centroid similarities into sc.cscore and the first nprobe lists ranked in sc.order.
  // Cosine / ip: scored against the float16 copy of the centroids, half the bytes
  // of the float32 ones, which every query reads whole (kernels/half.hpp), or in two
  // stages when the index has a ranking basis (rank_two_stage).
  void rank_lists(const float* q, size_t nprobe, Scratch& sc) const {
    sc.cscore.resize(v_.nlist);
    if (const size_t L = rank_shortlist(nprobe)) return rank_two_stage(q, nprobe, L, sc);
    if (!half_centroids_.empty()) {
      half_ip_block(q, half_centroids_.data(), v_.nlist, v_.dim, sc.cscore.data(), level_);
    } else if (v_.metric == Metric::L2) {
      l2sq_block(q, v_.centroids, v_.nlist, v_.dim, sc.cscore.data(), level_);
      for (size_t c = 0; c < v_.nlist; ++c) sc.cscore[c] = -sc.cscore[c];
    } else {
      ip_block(q, v_.centroids, v_.nlist, v_.dim, sc.cscore.data(), level_);
    }
    sc.order.resize(v_.nlist);
    const float* cs = sc.cscore.data();
    auto by_score = [cs](uint32_t a, uint32_t b) { return cs[a] > cs[b] || (cs[a] == cs[b] && a < b); };
    // The first nprobe in order (what partial_sort gives: the comparator breaks ties by list id),
    // by radix selection then a sort of those few: linear in nlist instead of nlist log nprobe.
    const size_t m = std::min(nprobe, v_.nlist);
    select_largest(cs, v_.nlist, m, sc.order.data(), sc.keys);
    std::sort(sc.order.begin(), sc.order.begin() + m, by_score);
  }

  // The padded query rotated once into sc.rq.
  void rotate_query(const float* q, Scratch& sc) const {
    sc.pad.assign(v_.D, 0.0f);
    std::copy(q, q + v_.dim, sc.pad.begin());
    sc.rq.resize(v_.D);
    sc.qr.resize(v_.D);
    ivf_rotate(v_, sc.pad.data(), sc.rq.data(), level_);
  }

  IVFQView v_;
  Level level_;
  PairKernel ip_, l2_;
  std::vector<uint16_t> half_centroids_;  // (nlist, dim) float16 for ranking, or empty (float32 ranking)
};

}  // namespace vecsift
