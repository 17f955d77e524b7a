// QuantizedIndex: RaBitQ-style B-bit codes (quant_codes.hpp) in blocks of 32
// rows (bit planes for 1, 2 and 8 bits, nibbles for 4: quant_layout.hpp), and
// a brute-force top-k over the estimated similarity (higher is better; stored
// in TopK as -estimate). Rows enter and leave (add_codes, get_planes, saved
// blocks) as bit planes whatever the layout inside.
//
// The centroid is the mean of the first batch added (or of train()); later
// rows are coded against the same centroid and rotation. Concurrency as in
// BinaryIndex: searches share a lock, add takes it exclusively.
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <mutex>
#include <shared_mutex>
#include <stdexcept>
#include <vector>

#include "vecsift/index/filter.hpp"
#include "vecsift/io/memory.hpp"
#include "vecsift/kernels/distance.hpp"  // Metric
#include "vecsift/kernels/parallel.hpp"
#include "vecsift/kernels/quant_codes.hpp"
#include "vecsift/kernels/quant_layout.hpp"
#include "vecsift/kernels/quant_nibble_scan.hpp"
#include "vecsift/kernels/quant_pair_scan.hpp"
#include "vecsift/kernels/quant_rotation.hpp"
#include "vecsift/kernels/quant_scan.hpp"
#include "vecsift/kernels/quant_screen.hpp"
#include "vecsift/kernels/topk.hpp"

namespace vecsift {

constexpr size_t kQuantMaxDim = 4096;

inline bool quant_bits_supported(int b) { return b == 1 || b == 2 || b == 4 || b == 8; }
// Codes whose top plane the 1-bit screen reads (quant_screen.hpp): 2 bits (a plane of the blocks)
// and 4 bits (the nibble layout mixes the planes: a copy of the sign plane is kept beside it).
inline bool quant_screenable(int b) { return b == 2 || b == 4; }

// Default z of the 1-bit screen of 2- and 4-bit scans (quant_screen.hpp); 0 scans every block in full.
// Measured on 30k PyPI MiniLM rows (512-d codes, 200 queries, k = 20, one query a call): z = 2.5
// scores 15% of blocks in full, 3 20%, 4 34%, and the top 20 equalled the full scan's at each;
// one query 122 us at z = 3 against 166 us unscreened (bench/bench_quantised.py has the same-run ratios).
constexpr float kQuantScreenZ = 3.0f;
// The screen runs for calls of at most this many queries: it takes each query's blocks in one
// sweep, which loses the chunked batch scan's reuse of codes in L2. Measured (same rows, us a
// query, unscreened / screened): 1 query a call 191 / 140, 2: 152 / 136, 4: 130 / 134, 8: 117 / 134.
constexpr size_t kQuantScreenMaxQueries = 2;
// ... and codes of at least this many bytes a row: below, the screen's work per block (bounds,
// selection, a kernel call per refined block) outweighs the bytes it saves. Measured (100k PyPI
// rows cut to d dimensions, one query a call, us full / screened): 2 bits, code_dim 128 (32 bytes)
// 219 / 355, 192: 293 / 376, 256 (64 bytes) 334 / 354, 384 (96 bytes) 619 / 490; 4 bits, code_dim
// 128 (64 bytes) 367 / 420, 192 (96 bytes) 476 / 429, 256: 624 / 430. GloVe 50-d (2 bits,
// 128-d codes, 399k rows, k = 80): 800 / 1,265.
constexpr size_t kQuantScreenMinCodeBytes = 96;

// How rows and queries are rotated (quant_rotation.hpp); recorded in saved files.
enum class QuantRotationKind : int { Dense = 0, FHT = 1 };

class QuantizedIndex {
 public:
  // code_dim: dimension of the rotated space the codes live in (a multiple of
  // 64, at least dim; 0 picks the smallest). Extra dimensions are zero before
  // the rotation and carry information after it: more bits per vector.
  // rotation: Dense stores a (code_dim x code_dim) matrix, FHT kFhtRounds x code_dim signs.
  QuantizedIndex(size_t dim, int bits, Metric metric, uint64_t seed, size_t code_dim = 0, bool make_rotation = true,
                 QuantRotationKind rotation = QuantRotationKind::Dense)
      : dim_(dim), dpad_(code_dim ? code_dim : quant_padded_dim(dim)), J_(dpad_ / 8), bits_(bits),
        metric_(metric), seed_(seed), kind_(rotation), layout_(quant_layout_for(bits)),
        has_top_(quant_screenable(bits)) {
    if (dim == 0 || dim > kQuantMaxDim) throw std::invalid_argument("dim must be in [1, 4096]");
    if (dpad_ % 64 || dpad_ < dim || dpad_ > kQuantMaxDim)
      throw std::invalid_argument("code_dim must be a multiple of 64 in [dim, 4096]");
    if (!quant_bits_supported(bits)) throw std::invalid_argument("bits must be 1, 2, 4 or 8");
    // A loaded index brings its own rotation (set_state): no need to generate one.
    if (kind_ == QuantRotationKind::FHT)
      rotation_ = make_rotation ? random_signs(dpad_, seed) : std::vector<float>(kFhtRounds * dpad_, 0.0f);
    else if (kind_ == QuantRotationKind::Dense)
      rotation_ = make_rotation ? random_rotation(dpad_, seed) : std::vector<float>(dpad_ * dpad_, 0.0f);
    else
      throw std::invalid_argument("unknown rotation kind");
    centroid_.assign(dpad_, 0.0f);
  }

  size_t dim() const { return dim_; }
  size_t dim_pad() const { return dpad_; }
  int bits() const { return bits_; }
  Metric metric() const { return metric_; }
  uint64_t seed() const { return seed_; }
  bool trained() const { return trained_; }
  size_t size() const {
    std::shared_lock<std::shared_mutex> lock(mutex_);
    return n_;
  }
  // Bytes of one row's code: bits planes of dim_pad/8 bytes.
  size_t code_bytes() const { return static_cast<size_t>(bits_) * J_; }
  size_t nbytes() const {
    std::shared_lock<std::shared_mutex> lock(mutex_);
    return data_.capacity_bytes() + 5 * sizeof(float) * factors_a_.capacity() +
           5 * sizeof(float) * top_a_.capacity() + signs_.capacity_bytes();
  }
  // Whether every row carries top-plane factors, so 2- and 4-bit searches can screen (quant_screen.hpp).
  bool has_top() const {
    std::shared_lock<std::shared_mutex> lock(mutex_);
    return has_top_;
  }
  QuantRotationKind rotation_kind() const { return kind_; }
  // The dense matrix (row i = image of e_i) or the FHT signs (kFhtRounds x dim_pad).
  const std::vector<float>& rotation() const { return rotation_; }

  // y = P x for a padded, centred x (dim_pad entries). The dense product skips
  // the trailing zeros of x (the padding): see rotate_scalar.
  void rotate_vec(const float* x, float* y, Level level) const {
    if (kind_ == QuantRotationKind::FHT) return fht_rotate(rotation_.data(), dpad_, x, y, level);
    size_t rows = dpad_;
    while (rows > 0 && x[rows - 1] == 0.0f) --rows;
    rotate(rotation_.data(), dpad_, x, y, level, rows);
  }
  const std::vector<float>& centroid() const { return centroid_; }

  // Centroid = mean of x (n rows of dim), after normalising for cosine.
  void train(const float* x, size_t n) {
    std::unique_lock<std::shared_mutex> lock(mutex_);
    train_locked(x, n);
  }

  void add(const float* x, size_t m, size_t threads, Level level) {
    {
      std::unique_lock<std::shared_mutex> lock(mutex_);
      if (!trained_) train_locked(x, m);
    }
    std::vector<uint8_t> planes(m * code_bytes());
    std::vector<float> factors(m * 5), top(quant_screenable(bits_) ? m * 4 : 0);
    encode(x, m, planes.data(), factors.data(), threads, level, top.empty() ? nullptr : top.data());
    add_codes(planes.data(), factors.data(), m, top.empty() ? nullptr : top.data());
  }

  // Codes (m x code_bytes, row-major planes) and factors (m x 5) of m rows,
  // against the current centroid; nothing is stored. top_out (2 and 4 bits, m x 4):
  // the factors a, su, g, h of the top plane read as a 1-bit code, for the screen.
  void encode(const float* x, size_t m, uint8_t* planes_out, float* factors_out, size_t threads, Level level,
              float* top_out = nullptr) const {
    std::shared_lock<std::shared_mutex> lock(mutex_);
    if (!trained_) throw std::logic_error("encode before train: the centroid is not set");
    const size_t slices = std::max<size_t>(1, std::min(threads, m / 256));
    parallel_for(slices, slices, [&](size_t t) {
      std::vector<float> pad(dpad_), r(dpad_), scratch(dpad_);
      std::vector<uint8_t> u(dpad_), b1(top_out ? dpad_ : 0);
      for (size_t i = m * t / slices; i < m * (t + 1) / slices; ++i) {
        prepare(x + i * dim_, pad.data());
        for (size_t j = 0; j < dpad_; ++j) pad[j] -= centroid_[j];
        rotate_vec(pad.data(), r.data(), level);
        QuantFactors f = quantize_rotated(r.data(), dpad_, bits_, u.data(), scratch.data());
        if (top_out) {  // scratch holds the unit direction o
          double yo = 0, nn = 0;
          for (size_t j = 0; j < dpad_; ++j) {
            b1[j] = u[j] >> (bits_ - 1);  // the sign of o_j (u >= 2^(B-1) iff o_j >= 0)
            yo += (b1[j] - 0.5) * scratch[j];
            nn += static_cast<double>(r[j]) * r[j];
          }
          const QuantFactors f1 = factors_of(b1.data(), dpad_, std::sqrt(nn), yo, 0.25 * dpad_);
          float* to = top_out + 4 * i;
          to[0] = f1.a, to[1] = f1.su, to[2] = f1.g, to[3] = f1.h;
        }
        if (metric_ == Metric::L2) {
          double nn = 0;
          for (size_t j = 0; j < dpad_; ++j) nn += static_cast<double>(r[j]) * r[j];
          f.add = static_cast<float>(-nn);
        } else {
          double dot = 0;  // <x - c, c>, in the unrotated space
          for (size_t j = 0; j < dpad_; ++j) dot += static_cast<double>(pad[j]) * centroid_[j];
          f.add = static_cast<float>(dot);
        }
        pack_planes(u.data(), dpad_, bits_, planes_out + i * code_bytes());
        float* fo = factors_out + 5 * i;
        fo[0] = f.a, fo[1] = f.su, fo[2] = f.add, fo[3] = f.g, fo[4] = f.h;
      }
    });
  }

  // Appends m rows given as encode() returns them. Rows without top factors (top null) turn the
  // screen off for good: every later search reads every block in full.
  void add_codes(const uint8_t* planes, const float* factors, size_t m, const float* top = nullptr) {
    std::unique_lock<std::shared_mutex> lock(mutex_);
    const size_t total = n_ + m, nblocks = (total + kQuantBlockRows - 1) / kQuantBlockRows;
    data_.resize(quant_storage_blocks(layout_, nblocks) * block_stride());
    for (auto* v : factor_arrays()) v->resize(nblocks * kQuantBlockRows, 0.0f);
    if (m && !top) drop_top();
    for (auto* v : top_arrays()) v->resize(has_top_ ? nblocks * kQuantBlockRows : 0, 0.0f);
    if (has_top_ && layout_ == QuantLayout::Nibbles) signs_.resize(nblocks * J_ * kQuantBlockRows);
    for (size_t i = 0; i < m; ++i) {
      const float* f = factors + 5 * i;
      store_row(n_ + i, planes + i * code_bytes(), QuantFactors{f[0], f[1], f[2], f[3], f[4]});
      if (has_top_) store_top(n_ + i, top + 4 * i);
      if (has_top_ && layout_ == QuantLayout::Nibbles) store_sign(n_ + i, planes + i * code_bytes());
    }
    n_ = total;
  }

  // Rotated, centred and quantised query (and its metric constants).
  QuantQuery make_query(const float* q, int qbits, Level level) const {
    std::vector<float> pad(dpad_), r(dpad_);
    prepare(q, pad.data());
    double cq = 0;
    for (size_t j = 0; j < dpad_; ++j) {
      cq += static_cast<double>(centroid_[j]) * pad[j];
      pad[j] -= centroid_[j];
    }
    rotate_vec(pad.data(), r.data(), level);
    QuantQuery qq;
    const bool nibbles = layout_ == QuantLayout::Nibbles;
    quantize_query(r.data(), dpad_, qbits, qq, !nibbles);
    if (nibbles) build_query_words(qq.qu.data(), dpad_, qq.words);
    if (metric_ == Metric::L2) {
      qq.mq = 2.0f;
      qq.cq = -qq.norm2;
    } else {
      qq.mq = 1.0f;
      qq.cq = static_cast<float>(cq);
    }
    return qq;
  }

  // The estimator of B-bit codes (this index's bits unless given: the screen reads 1).
  QuantEstimator estimator(const QuantQuery& q, int bits = 0) const {
    const float cB = static_cast<float>(((1 << (bits ? bits : bits_)) - 1) / 2.0);
    const float K = cB * (q.dq * q.sum_qu + q.lo * static_cast<float>(dpad_));
    return QuantEstimator{q.dq, q.lo, K, q.mq, q.cq};
  }

  // Half-width of the z-sigma bound of row r's estimate.
  float bound(const QuantQuery& q, size_t r, float z) const {
    const double var = static_cast<double>(q.norm2) * factors_h_[r] + static_cast<double>(q.dq) * q.dq / 12.0;
    return static_cast<float>(z * q.mq * factors_g_[r] * std::sqrt(var));
  }

  // Top-k by estimate. Missing results: id -1, score -inf.
  // With out_lo/out_hi, also the z-sigma bounds of each result (-inf where none).
  // screen: z of the 1-bit screen of 2- and 4-bit scans (0: off); refined_out, if given, receives the
  // number of blocks scored in full (all of them without the screen), summed over queries.
  void search(const float* queries, size_t nq, size_t k, int qbits, const AllowSet* allow, size_t threads,
              int64_t* out_ids, float* out_scores, Level level, float z = 0, float* out_lo = nullptr,
              float* out_hi = nullptr, float screen = kQuantScreenZ, size_t* refined_out = nullptr) const {
    std::shared_lock<std::shared_mutex> lock(mutex_);
    const bool screened =
        screen > 0 && has_top_ && nq <= kQuantScreenMaxQueries && code_bytes() >= kQuantScreenMinCodeBytes;
    if (allow && allow->size() != n_) throw std::invalid_argument("allow length does not match the index size");
    std::vector<QuantQuery> qs(nq);
    std::vector<QuantEstimator> est(nq), est1(screened ? nq : 0);
    parallel_for(nq, nq >= 64 ? threads : 1, [&](size_t i) {
      qs[i] = make_query(queries + i * dim_, qbits, level);
      est[i] = estimator(qs[i]);
      if (screened) est1[i] = estimator(qs[i], 1);
      // Built once per query rather than per chunk; a large batch builds them per chunk (7 KiB a query
      // at 448 dims and 8-bit queries would add up).
      // the nibble layout's query has no plane tables: the screen's sign plane needs them
      if (screened && layout_ == QuantLayout::Nibbles) build_query_luts(qs[i].qu.data(), dpad_, qbits, qs[i].luts);
      if (nq <= kPairSlab && layout_ == QuantLayout::Pairs)
        quant_pair_tables(level, qs[i].luts.data(), J_, qs[i].passes(), qs[i].wide);
      else if (nq <= 256 && (layout_ == QuantLayout::Planes || screened))
        quant_wide_tables(level, qs[i].luts.data(), J_, qs[i].passes(), qs[i].wide);
    });
    const QuantBlocks blocks = view(allow);
    const size_t nblocks = blocks.nblocks;
    // ~256 KiB of codes per chunk: the chunk stays in L2 while each query's
    // tables (D/8 * 32 bytes a pass) stay in L1. A 32 KiB chunk measured slower
    // on batches: cycling 1,000 queries' tables through L1 per chunk cost more
    // than reading the codes once per query.
    // Pairs of blocks are read whole: a chunk of the pair layout holds whole pairs.
    size_t chunk = std::max<size_t>(1, (256 * 1024) / block_stride());
    if (layout_ == QuantLayout::Pairs) chunk += chunk & 1;
    threads = std::max<size_t>(1, std::min(threads, std::max<size_t>(1, nblocks / 64)));
    // Splitting few queries' rows over threads pays a thread start each (~0.1 ms on this project's
    // 2-core VMs): only with >= 4 MiB of codes x queries a thread. Measured, one 1-bit query, 448-bit codes:
    // 30k rows 77 us on one thread vs 166 on two, 120k 232 vs 247, 480k 917 vs 578.
    if (nq < threads)
      threads = std::max<size_t>(1, std::min(threads, nq * nblocks * block_stride() / (size_t{4} << 20)));
    using Top = TopKBuffer<float>;
    std::vector<Top> tops;
    // The screen's views: 2 bits, the top and the low plane of the same blocks; 4 bits, the copy of
    // the sign plane (blocks of one plane).
    QuantBlocks top_view = blocks, low_view = blocks;
    top_view.bits = low_view.bits = 1;
    if (layout_ == QuantLayout::Nibbles) {
      top_view.data = signs_.data();
    } else {
      if (screened) top_view.data += J_ * kQuantBlockRows;
      top_view.stride = low_view.stride = block_stride();
    }
    std::atomic<size_t> refined{0};
    auto scan = [&](size_t q, size_t b0, size_t b1, Top& top) {
      Sink sink{top, QuantScoreArgs{factors_a_.data(), factors_su_.data(), factors_add_.data(), est[q]}};
      if (refined_out) refined += count_blocks(blocks, b0, b1);
      const uint8_t* tables = qs[q].wide.empty() ? nullptr : qs[q].wide.data();
      if (layout_ == QuantLayout::Nibbles)
        quant_nibble_sums(level, blocks, qs[q].words.data(), qbits, b0, b1, sink);
      else if (layout_ == QuantLayout::Pairs)
        quant_pair_sums(level, blocks, qs[q].luts.data(), qs[q].passes(), b0, b1, sink, tables);
      else
        quant_sums(level, blocks, qs[q].luts.data(), qs[q].passes(), b0, b1, sink, tables);
    };
    // 1- and 2-bit batches in the plane layout at AVX-512 scan a group of queries per pass over a
    // block (quant_scan.hpp): the block's loads and nibble masks are shared. Queries without prebuilt
    // tables (batches over 256) get them built per group and chunk into `buf`: J/2 table pairs a
    // query, against the chunk's blocks x J/4 steps that use them. (1-bit codes in the pair layout
    // scan one query at a time: quant_pair_scan.hpp says why.)
    const size_t group = quant_group_queries(bits_);
    const bool grouped = !screened && nq >= 2 && group && layout_ == QuantLayout::Planes &&
                         level == Level::AVX512 && qs[0].passes() == 1;
    auto scan_group = [&](size_t q0, size_t m, size_t b0, size_t b1, Top* top, AlignedBytes& buf) {
      std::vector<Sink> sinks;
      sinks.reserve(m);
      const uint8_t* wide[kQuantGroupMax];
      const size_t table_bytes = J_ * 64;
      if (buf.size() < kQuantGroupMax * table_bytes) buf.resize(kQuantGroupMax * table_bytes);
      for (size_t g = 0; g < m; ++g) {
        const QuantQuery& qq = qs[q0 + g];
        sinks.push_back(Sink{top[g], QuantScoreArgs{factors_a_.data(), factors_su_.data(), factors_add_.data(),
                                                    est[q0 + g]}});
        if (!qq.wide.empty()) {
          wide[g] = qq.wide.data();
        } else {
          quant_wide_tables_avx512(qq.luts.data(), J_, 1, buf.data() + g * table_bytes);
          wide[g] = buf.data() + g * table_bytes;
        }
      }
      if (refined_out) refined += m * count_blocks(blocks, b0, b1);
      quant_sums_queries(m, blocks, wide, b0, b1, sinks.data());
    };
    // The screened scan takes a query's whole range at once (its phases need every block's bound
    // before the first refinement), rather than chunk by chunk.
    auto scan_screened = [&](size_t q, size_t b0, size_t b1, Top& top) {
      Sink sink{top, QuantScoreArgs{factors_a_.data(), factors_su_.data(), factors_add_.data(), est[q]}};
      const QuantQuery& qq = qs[q];
      AlignedBytes own;  // the screen scores single blocks: the AVX-512 tables must exist already
      const uint8_t* wide = qq.wide.empty() ? nullptr : qq.wide.data();
      if (!wide && level == Level::AVX512) {
        quant_wide_tables(level, qq.luts.data(), J_, qq.passes(), own);
        wide = own.data();
      }
      const float c = qq.dq * qq.dq / 12.0f;
      const float zs = screen * qq.mq * std::sqrt(qq.norm2 + (top_h_min_ < kInf ? c / top_h_min_ : 0.0f));
      const QuantScreenArgs f{QuantScoreArgs{top_a_.data(), top_su_.data(), factors_add_.data(), est1[q]},
                              top_w_.data(), zs};
      // The full S of a block that passes: 2 bits, S_top from the screen and the low plane read now;
      // 4 bits, the nibble scan of the block.
      auto full_S = [&](size_t b, const uint32_t* S_top, uint32_t* S) {
        QuantBlockCapture cap{S};
        if (layout_ == QuantLayout::Nibbles) {
          quant_nibble_sums(level, blocks, qq.words.data(), qbits, b, b + 1, cap);
          return;
        }
        quant_sums(level, low_view, qq.luts.data(), qq.passes(), b, b + 1, cap, wide);
        for (size_t l = 0; l < kQuantBlockRows; ++l) S[l] += 2 * S_top[l];
      };
      // 2k seed blocks: measured at z = 3, 20% of blocks refined against 28% with k seeds.
      const size_t r = quant_screened_scan(level, top_view, qq.luts.data(), qq.passes(), wide, f, b0, b1, 2 * k,
                                           full_S, sink);
      if (refined_out) refined += r;
    };
    if (nq >= threads) {
      tops.assign(nq, Top(k));
      parallel_for(threads, threads, [&](size_t t) {
        size_t q0 = nq * t / threads, q1 = nq * (t + 1) / threads;
        if (screened) {
          for (size_t q = q0; q < q1; ++q) scan_screened(q, 0, nblocks, tops[q]);
          return;
        }
        AlignedBytes buf;
        // Larger batches in the pair layout: the VBMI tables (12 KiB a query at 512 dims, 96 KiB at
        // 4,096) are built for kPairSlab queries at a time, which then scan every chunk. Built per
        // chunk instead, a 1,000-query batch at 100k rows took 182 us a query against 159
        // (docs/quantised.md).
        const size_t slab = layout_ == QuantLayout::Pairs && nq > kPairSlab ? kPairSlab : q1 - q0;
        for (size_t s0 = q0; s0 < q1; s0 += slab) {
          const size_t s1 = std::min(q1, s0 + slab);
          if (slab < q1 - q0)
            for (size_t q = s0; q < s1; ++q)
              quant_pair_tables(level, qs[q].luts.data(), J_, qs[q].passes(), qs[q].wide);
          for (size_t b = 0; b < nblocks; b += chunk) {
            size_t be = std::min(nblocks, b + chunk);
            if (grouped) {
              for (size_t q = s0; q < s1; q += group) scan_group(q, std::min(group, s1 - q), b, be, &tops[q], buf);
            } else {
              for (size_t q = s0; q < s1; ++q) scan(q, b, be, tops[q]);
            }
          }
          if (slab < q1 - q0)
            for (size_t q = s0; q < s1; ++q) AlignedBytes().swap(qs[q].wide);
        }
      });
    } else {
      tops.assign(nq * threads, Top(k));
      parallel_for(threads, threads, [&](size_t t) {
        size_t b0 = nblocks * t / threads, b1 = nblocks * (t + 1) / threads;
        if (screened) {
          for (size_t q = 0; q < nq; ++q) scan_screened(q, b0, b1, tops[q * threads + t]);
          return;
        }
        for (size_t b = b0; b < b1; b += chunk) {
          size_t be = std::min(b1, b + chunk);
          for (size_t q = 0; q < nq; ++q) scan(q, b, be, tops[q * threads + t]);
        }
      });
      for (size_t q = 0; q < nq; ++q) {
        for (size_t t = 1; t < threads; ++t) tops[q * threads].merge(tops[q * threads + t]);
        if (q) tops[q] = std::move(tops[q * threads]);
      }
    }
    if (refined_out) *refined_out = refined.load();
    for (size_t q = 0; q < nq; ++q) {
      auto best = tops[q].sorted();
      for (size_t j = 0; j < k; ++j) {
        out_ids[q * k + j] = j < best.size() ? best[j].id : -1;
        out_scores[q * k + j] = j < best.size() ? -best[j].key : -std::numeric_limits<float>::infinity();
        if (out_lo) {
          const float h = j < best.size() ? bound(qs[q], static_cast<size_t>(best[j].id), z) : 0.0f;
          out_lo[q * k + j] = out_scores[q * k + j] - h;
          out_hi[q * k + j] = out_scores[q * k + j] + h;
        }
      }
    }
  }

  // Estimates and z-sigma bounds for given rows of each query (m per query;
  // id -1 gives -inf). Used for the bound-driven rescoring policy and tests.
  void estimate_rows(const float* queries, size_t nq, const int64_t* ids, size_t m, int qbits, float z,
                     float* est_out, float* lo_out, float* hi_out, Level level) const {
    std::shared_lock<std::shared_mutex> lock(mutex_);
    const QuantBlocks blocks = view(nullptr);
    for (size_t q = 0; q < nq; ++q) {
      QuantQuery qq = make_query(queries + q * dim_, qbits, level);
      QuantEstimator e = estimator(qq);
      for (size_t j = 0; j < m; ++j) {
        const int64_t r = ids[q * m + j];
        float* outs[3] = {est_out + q * m + j, lo_out + q * m + j, hi_out + q * m + j};
        if (r < 0 || static_cast<size_t>(r) >= n_) {
          for (float* o : outs) *o = -std::numeric_limits<float>::infinity();
          continue;
        }
        const uint8_t* blk = blocks.block_ptr(r / kQuantBlockRows);
        const size_t lane = r % kQuantBlockRows;
        const uint32_t S =
            layout_ == QuantLayout::Nibbles
                ? quant_nibble_row_sum(blk, lane, J_, qq.words.data())
                : quant_row_sum(blk, lane, bits_, J_, qq.luts.data(), qq.passes(), blocks.pos_stride());
        const float v = e(S, factors_a_[r], factors_su_[r], factors_add_[r]);
        const float h = bound(qq, r, z);
        *outs[0] = v;
        *outs[1] = v - h;
        *outs[2] = v + h;
      }
    }
  }

  // ---- state, for persistence and tests
  // Row-major planes of row r: bits x dim_pad/8 bytes.
  void get_planes(size_t r, uint8_t* out) const {
    quant_get_row(data_.data(), r / kQuantBlockRows, r % kQuantBlockRows, bits_, J_, layout_, out);
  }
  QuantLayout layout() const { return layout_; }
  // The blocks in the plane layout (what files hold, whatever the layout in memory): blocks_bytes() bytes.
  void blocks_as_planes(uint8_t* out) const {
    quant_relayout(data_.data(), layout_, out, QuantLayout::Planes, blocks_bytes() / block_stride(), bits_, J_);
  }
  size_t blocks_bytes() const { return (n_ + kQuantBlockRows - 1) / kQuantBlockRows * block_stride(); }
  void get_factors(size_t r, float* out) const {
    out[0] = factors_a_[r], out[1] = factors_su_[r], out[2] = factors_add_[r], out[3] = factors_g_[r],
    out[4] = factors_h_[r];
  }
  // The top-plane factors of row r (a, su, g, h); only while has_top().
  void get_top_factors(size_t r, float* out) const {
    out[0] = top_a_[r], out[1] = top_su_[r], out[2] = top_g_[r], out[3] = top_h_[r];
  }

  // Restores a saved index (the caller checked sizes and checksum); blocks in the plane layout.
  // top: n x 4 top-plane factors, or null (a file without them: no screen).
  void set_state(const float* rotation, const float* centroid, bool trained, size_t n, const uint8_t* blocks,
                 const float* factors /* n x 5 */, const float* top = nullptr) {
    std::unique_lock<std::shared_mutex> lock(mutex_);
    std::memcpy(rotation_.data(), rotation, rotation_.size() * sizeof(float));
    std::memcpy(centroid_.data(), centroid, centroid_.size() * sizeof(float));
    trained_ = trained;
    n_ = n;
    const size_t nblocks = (n + kQuantBlockRows - 1) / kQuantBlockRows;
    data_.resize(quant_storage_blocks(layout_, nblocks) * block_stride());
    quant_relayout(blocks, QuantLayout::Planes, data_.data(), layout_, nblocks, bits_, J_);
    for (auto* v : factor_arrays()) v->assign(nblocks * kQuantBlockRows, 0.0f);
    for (size_t r = 0; r < n; ++r) {
      factors_a_[r] = factors[5 * r], factors_su_[r] = factors[5 * r + 1], factors_add_[r] = factors[5 * r + 2];
      factors_g_[r] = factors[5 * r + 3], factors_h_[r] = factors[5 * r + 4];
    }
    has_top_ = quant_screenable(bits_);
    top_h_min_ = kInf;
    if (n && !top) drop_top();
    for (auto* v : top_arrays()) v->assign(has_top_ ? nblocks * kQuantBlockRows : 0, 0.0f);
    for (size_t r = 0; has_top_ && r < n; ++r) store_top(r, top + 4 * r);
    if (has_top_ && layout_ == QuantLayout::Nibbles) {  // the sign plane: plane B-1 of each saved block
      signs_.resize(nblocks * J_ * kQuantBlockRows);
      const size_t plane = J_ * kQuantBlockRows;
      for (size_t b = 0; b < nblocks; ++b)
        std::memcpy(signs_.data() + b * plane, blocks + (b * bits_ + bits_ - 1) * plane, plane);
    }
  }

 private:
  // Scores a block's rows and keeps those that beat the current k-th best.
  struct Sink {
    TopKBuffer<float>& top;
    QuantScoreArgs f;
    // key = -est enters when -est < threshold, i.e. est > -threshold.
    float need() const { return -top.threshold(); }
    void tighten() { top.tighten(); }
    void block(size_t b, uint32_t mask, const uint32_t* S, Level level) {
      alignas(32) float est[kQuantBlockRows];
      const size_t row0 = b * kQuantBlockRows;
      uint32_t pass = quant_scores_above(level, f, row0, S, need(), est) & mask;
      keep(row0, pass, est);
    }
    // The same at AVX-512, compiled for it so the AVX-512 scans inline it (quant_sink_avx512).
    __attribute__((target("avx512f,avx512bw"))) void block_avx512(size_t b, uint32_t mask, const uint32_t* S) {
      alignas(64) float est[kQuantBlockRows];
      const size_t row0 = b * kQuantBlockRows;
      keep(row0, quant_scores_above_avx512(f, row0, S, need(), est) & mask, est);
    }
    // The same from S in registers (quant_sink_avx512_regs), for the full scans.
    __attribute__((target("avx512f,avx512bw"), always_inline)) void block_avx512_regs(size_t b, uint32_t mask,
                                                                                       __m512i s0, __m512i s1) {
      alignas(64) float est[kQuantBlockRows];
      const size_t row0 = b * kQuantBlockRows;
      keep(row0, quant_scores_above_avx512_regs(f, row0, s0, s1, need(), est) & mask, est);
    }
    void keep(size_t row0, uint32_t pass, const float* est) {
      while (pass) {
        const unsigned l = static_cast<unsigned>(__builtin_ctz(pass));
        top.push(-est[l], static_cast<int64_t>(row0 + l));
        pass &= pass - 1;
      }
    }
  };

  size_t block_stride() const { return code_bytes() * kQuantBlockRows; }
  // Queries whose pair-layout tables exist at once (search).
  static constexpr size_t kPairSlab = 64;

  QuantBlocks view(const AllowSet* allow) const {
    const size_t nblocks = (n_ + kQuantBlockRows - 1) / kQuantBlockRows;
    // The allow bitset's 64-bit words read as 32-bit words (little-endian): one per block.
    QuantBlocks v{data_.data(), bits_, J_, nblocks, quant_last_mask(n_),
                  allow ? reinterpret_cast<const uint32_t*>(allow->words()) : nullptr};
    v.paired = layout_ == QuantLayout::Pairs;
    return v;
  }

  std::vector<std::vector<float>*> factor_arrays() {
    return {&factors_a_, &factors_su_, &factors_add_, &factors_g_, &factors_h_};
  }
  std::vector<std::vector<float>*> top_arrays() { return {&top_a_, &top_su_, &top_g_, &top_h_, &top_w_}; }
  void drop_top() {
    has_top_ = false;
    top_h_min_ = kInf;
    for (auto* v : top_arrays()) std::vector<float>().swap(*v);
    signs_ = HugeBuffer<uint8_t>();
  }
  // The sign plane (the last of the row-major planes) of row r into the 4-bit index's copy.
  void store_sign(size_t r, const uint8_t* planes) {
    quant_put_row(signs_.data(), r / kQuantBlockRows, r % kQuantBlockRows, 1, J_, QuantLayout::Planes,
                  planes + (bits_ - 1) * J_);
  }
  // Also the screen's w = g1 * sqrt(max(h1, floor)), rounded up, and the least such h1 (quant_screen.hpp).
  void store_top(size_t r, const float* t) {
    top_a_[r] = t[0], top_su_[r] = t[1], top_g_[r] = t[2], top_h_[r] = t[3];
    const double g = t[2], h = std::max(static_cast<double>(t[3]), kScreenHFloor);
    float w = 0.0f;
    if (!std::isfinite(g) || !std::isfinite(h) || g < 0) {
      w = kInf;  // a factor that cannot bound: the row's block is always read in full
    } else if (g > 0) {
      const double exact = g * std::sqrt(h);
      w = static_cast<float>(exact);
      if (static_cast<double>(w) < exact) w = std::nextafter(w, kInf);
      float hf = static_cast<float>(h);  // rounded down: a smaller h_min only widens the bound
      if (static_cast<double>(hf) > h) hf = std::nextafter(hf, 0.0f);
      top_h_min_ = std::min(top_h_min_, hf);
    }
    top_w_[r] = w;
  }
  static constexpr float kInf = std::numeric_limits<float>::infinity();

  // Blocks of [b0, b1) with any lane to score (what a full scan reads).
  static size_t count_blocks(const QuantBlocks& s, size_t b0, size_t b1) {
    size_t c = 0;
    for (size_t b = b0; b < b1; ++b) c += s.lane_mask(b) != 0;
    return c;
  }

  // Copies a row into dpad_ floats: zero padding, unit length for cosine.
  void prepare(const float* x, float* out) const {
    double nn = 0;
    for (size_t j = 0; j < dim_; ++j) nn += static_cast<double>(x[j]) * x[j];
    const float s = (metric_ == Metric::Cosine && nn > 0) ? static_cast<float>(1.0 / std::sqrt(nn)) : 1.0f;
    for (size_t j = 0; j < dim_; ++j) out[j] = x[j] * s;
    for (size_t j = dim_; j < dpad_; ++j) out[j] = 0.0f;
  }

  void train_locked(const float* x, size_t n) {
    std::vector<double> sum(dpad_, 0.0);
    std::vector<float> pad(dpad_);
    for (size_t i = 0; i < n; ++i) {
      prepare(x + i * dim_, pad.data());
      for (size_t j = 0; j < dpad_; ++j) sum[j] += pad[j];
    }
    for (size_t j = 0; j < dpad_; ++j) centroid_[j] = n ? static_cast<float>(sum[j] / n) : 0.0f;
    trained_ = n > 0;
  }

  void store_row(size_t r, const uint8_t* planes, const QuantFactors& f) {
    quant_put_row(data_.data(), r / kQuantBlockRows, r % kQuantBlockRows, bits_, J_, layout_, planes);
    factors_a_[r] = f.a, factors_su_[r] = f.su, factors_add_[r] = f.add, factors_g_[r] = f.g, factors_h_[r] = f.h;
  }

  size_t dim_, dpad_, J_;
  int bits_;
  Metric metric_;
  uint64_t seed_;
  QuantRotationKind kind_;
  QuantLayout layout_;
  bool trained_ = false;
  size_t n_ = 0;
  std::vector<float> rotation_, centroid_;
  HugeBuffer<uint8_t> data_;  // blocks of 32 rows in layout_ (quant_layout.hpp)
  std::vector<float> factors_a_, factors_su_, factors_add_, factors_g_, factors_h_;
  bool has_top_;  // every row has top-plane factors (2- and 4-bit codes)
  std::vector<float> top_a_, top_su_, top_g_, top_h_;  // the top plane as a 1-bit code (quant_screen.hpp)
  std::vector<float> top_w_;  // the screen's per-row bound factor
  HugeBuffer<uint8_t> signs_;  // 4 bits: the sign plane in blocks of one plane, for the screen
  float top_h_min_ = std::numeric_limits<float>::infinity();
  mutable std::shared_mutex mutex_;
};

}  // namespace vecsift
