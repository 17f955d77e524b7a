// Bindings for the RaBitQ-style quantised index and its kernels. Conversion
// and checks only; every kernel runs without the GIL. vecsift.QuantizedIndex
// (python/vecsift/index/quantised.py) wraps this class.
//
// This file is compiled with -ffp-contract=off (CMakeLists.txt): the estimate
// must round the same way at every SIMD level.
#include <pybind11/stl.h>

#include <cmath>
#include <optional>

#include "common.hpp"
#include "vecsift/index/quant_parts.hpp"
#include "vecsift/index/quantised_index.hpp"

using namespace vecsift;

namespace {

Metric quant_metric(const std::string& metric) {
  if (metric == "ip") return Metric::IP;
  if (metric == "l2") return Metric::L2;
  if (metric == "cosine") return Metric::Cosine;
  throw py::value_error("metric must be 'ip', 'l2' or 'cosine', got '" + metric + "'");
}

const char* quant_metric_name(Metric m) {
  switch (m) {
    case Metric::IP: return "ip";
    case Metric::L2: return "l2";
    default: return "cosine";
  }
}

void check_qbits(int qbits) { require(qbits >= 4 && qbits <= 8, "query_bits must be in [4, 8], got " + std::to_string(qbits)); }

void check_vectors(const F32Array& x, size_t dim, const char* name) {
  require_matrix(x, name);
  require(static_cast<size_t>(x.shape(1)) == dim, std::string(name) + " have dimension " +
                                                      std::to_string(x.shape(1)) + ", the index has " +
                                                      std::to_string(dim));
}

QuantRotationKind rotation_kind_arg(const std::string& r) {
  if (r == "dense") return QuantRotationKind::Dense;
  if (r == "fht") return QuantRotationKind::FHT;
  throw py::value_error("rotation must be 'fht' or 'dense', got '" + r + "'");
}

std::unique_ptr<QuantizedIndex> make_index(size_t dim, int bits, const std::string& metric, uint64_t seed,
                                           size_t code_dim, bool make_rotation, const std::string& rotation) {
  require(dim >= 1 && dim <= kQuantMaxDim, "dim must be in [1, 4096], got " + std::to_string(dim));
  require(code_dim == 0 || (code_dim % 64 == 0 && code_dim >= dim && code_dim <= kQuantMaxDim),
          "code_dim must be a multiple of 64 in [dim, 4096], got " + std::to_string(code_dim));
  require(quant_bits_supported(bits), "bits must be 1, 2, 4 or 8, got " + std::to_string(bits));
  Metric m = quant_metric(metric);
  QuantRotationKind kind = rotation_kind_arg(rotation);
  py::gil_scoped_release nogil;
  return std::make_unique<QuantizedIndex>(dim, bits, m, seed, code_dim, make_rotation, kind);
}

void add_py(QuantizedIndex& ix, const F32Array& x, long threads, int level) {
  check_vectors(x, ix.dim(), "vectors");
  const float* p = x.data();
  size_t m = x.shape(0), nt = resolve_threads(threads);
  Level lv = level_arg(level);
  py::gil_scoped_release nogil;
  ix.add(p, m, nt, lv);
}

// (planes, factors), and with top=True (2 and 4 bits) the (m, 4) top-plane factors as a third.
py::tuple encode_py(const QuantizedIndex& ix, const F32Array& x, long threads, int level, bool top) {
  check_vectors(x, ix.dim(), "vectors");
  require(ix.trained(), "encode needs a trained index (train or add first)");
  require(!top || quant_screenable(ix.bits()), "top factors exist for 2- and 4-bit codes only");
  const size_t m = x.shape(0);
  U8Array planes({m, ix.code_bytes()});
  F32Array factors({m, size_t{5}});
  F32Array tops({top ? m : 0, size_t{4}});
  const float* p = x.data();
  uint8_t* pp = planes.mutable_data();
  float* pf = factors.mutable_data();
  float* pt = top ? tops.mutable_data() : nullptr;
  size_t nt = resolve_threads(threads);
  Level lv = level_arg(level);
  {
    py::gil_scoped_release nogil;
    ix.encode(p, m, pp, pf, nt, lv, pt);
  }
  if (top) return py::make_tuple(planes, factors, tops);
  return py::make_tuple(planes, factors);
}

// top: the (m, 4) top-plane factors of 2- and 4-bit rows, or None (then later searches cannot screen).
void add_codes_py(QuantizedIndex& ix, const U8Array& planes, const F32Array& factors,
                  const std::optional<F32Array>& top) {
  require_matrix(planes, "planes");
  require_matrix(factors, "factors");
  require(static_cast<size_t>(planes.shape(1)) == ix.code_bytes(),
          "planes have width " + std::to_string(planes.shape(1)) + ", the index expects " +
              std::to_string(ix.code_bytes()));
  require(factors.shape(1) == 5 && factors.shape(0) == planes.shape(0), "factors must be (len(planes), 5)");
  const float* pt = nullptr;
  if (top) {
    require(quant_screenable(ix.bits()), "top factors exist for 2- and 4-bit codes only");
    require(top->ndim() == 2 && top->shape(1) == 4 && top->shape(0) == planes.shape(0),
            "top must be (len(planes), 4)");
    pt = top->data();
  }
  const uint8_t* pp = planes.data();
  const float* pf = factors.data();
  size_t m = planes.shape(0);
  py::gil_scoped_release nogil;
  ix.add_codes(pp, pf, m, pt);
}

void train_py(QuantizedIndex& ix, const F32Array& x) {
  check_vectors(x, ix.dim(), "vectors");
  require(x.shape(0) > 0, "train needs at least one vector");
  const float* p = x.data();
  size_t m = x.shape(0);
  py::gil_scoped_release nogil;
  ix.train(p, m);
}

py::tuple search_py(const QuantizedIndex& ix, const F32Array& q, long k, int qbits, const std::optional<U8Array>& mask,
                    const std::optional<I64Array>& ids, long threads, int level, std::optional<float> confidence,
                    float screen, bool stats) {
  check_vectors(q, ix.dim(), "queries");
  require(k > 0, "k must be positive");
  check_qbits(qbits);
  require(std::isfinite(screen) && screen >= 0, "screen must be a finite number >= 0");
  size_t refined = 0;
  size_t* pr = stats ? &refined : nullptr;
  const size_t nq = q.shape(0);
  auto allow = allow_arg(mask, ids, ix.size());
  I64Array out_ids({nq, static_cast<size_t>(k)});
  F32Array out_scores({nq, static_cast<size_t>(k)});
  const float* pq = q.data();
  int64_t* pi = out_ids.mutable_data();
  float* ps = out_scores.mutable_data();
  Level lv = level_arg(level);
  size_t nt = resolve_threads(threads);
  if (confidence) {
    require(std::isfinite(*confidence) && *confidence >= 0, "confidence must be a finite number >= 0");
    F32Array lo({nq, static_cast<size_t>(k)}), hi({nq, static_cast<size_t>(k)});
    float *pl = lo.mutable_data(), *ph = hi.mutable_data();
    float z = *confidence;
    {
      py::gil_scoped_release nogil;
      ix.search(pq, nq, static_cast<size_t>(k), qbits, allow ? &*allow : nullptr, nt, pi, ps, lv, z, pl, ph,
                screen, pr);
    }
    if (stats) return py::make_tuple(out_ids, out_scores, lo, hi, refined);
    return py::make_tuple(out_ids, out_scores, lo, hi);
  }
  {
    py::gil_scoped_release nogil;
    ix.search(pq, nq, static_cast<size_t>(k), qbits, allow ? &*allow : nullptr, nt, pi, ps, lv, 0, nullptr, nullptr,
              screen, pr);
  }
  if (stats) return py::make_tuple(out_ids, out_scores, refined);
  return py::make_tuple(out_ids, out_scores);
}

py::tuple estimate_py(const QuantizedIndex& ix, const F32Array& q, const I64Array& ids, int qbits, float z, int level) {
  check_vectors(q, ix.dim(), "queries");
  require_matrix(ids, "ids");
  require(ids.shape(0) == q.shape(0), "ids must have one row per query");
  check_qbits(qbits);
  const size_t nq = q.shape(0), m = ids.shape(1);
  F32Array est({nq, m}), lo({nq, m}), hi({nq, m});
  const float* pq = q.data();
  const int64_t* pi = ids.data();
  float *pe = est.mutable_data(), *pl = lo.mutable_data(), *ph = hi.mutable_data();
  Level lv = level_arg(level);
  {
    py::gil_scoped_release nogil;
    ix.estimate_rows(pq, nq, pi, m, qbits, z, pe, pl, ph, lv);
  }
  return py::make_tuple(est, lo, hi);
}

py::dict query_state_py(const QuantizedIndex& ix, const F32Array& q, int qbits, int level) {
  require(q.ndim() == 1 && static_cast<size_t>(q.shape(0)) == ix.dim(), "query must be 1-d of the index dimension");
  check_qbits(qbits);
  QuantQuery qq = ix.make_query(q.data(), qbits, level_arg(level));
  QuantEstimator e = ix.estimator(qq);
  U8Array qu(qq.qu.size());
  std::memcpy(qu.mutable_data(), qq.qu.data(), qq.qu.size());
  py::dict d;
  d["qu"] = qu;
  d["lo"] = qq.lo;
  d["dq"] = qq.dq;
  d["sum_qu"] = qq.sum_qu;
  d["norm2"] = qq.norm2;
  d["K"] = e.K;
  d["mq"] = e.mq;
  d["cq"] = e.cq;
  return d;
}

// Dense: the (d, d) matrix; FHT: the (kFhtRounds, d) signs.
F32Array rotation_py(const QuantizedIndex& ix) {
  const size_t d = ix.dim_pad(), rows = ix.rotation().size() / d;
  F32Array out({rows, d});
  std::memcpy(out.mutable_data(), ix.rotation().data(), rows * d * sizeof(float));
  return out;
}

F32Array centroid_py(const QuantizedIndex& ix) {
  F32Array out(ix.dim_pad());
  std::memcpy(out.mutable_data(), ix.centroid().data(), ix.dim_pad() * sizeof(float));
  return out;
}

U8Array planes_py(const QuantizedIndex& ix) {
  const size_t n = ix.size(), w = ix.code_bytes();
  U8Array out({n, w});
  uint8_t* p = out.mutable_data();
  for (size_t i = 0; i < n; ++i) ix.get_planes(i, p + i * w);
  return out;
}

U8Array blocks_py(const QuantizedIndex& ix) {
  const size_t n = ix.blocks_bytes();
  U8Array out(n);
  if (n) ix.blocks_as_planes(out.mutable_data());
  return out;
}

F32Array factors_py(const QuantizedIndex& ix) {
  const size_t n = ix.size();
  F32Array out({n, size_t{5}});
  float* p = out.mutable_data();
  for (size_t i = 0; i < n; ++i) ix.get_factors(i, p + 5 * i);
  return out;
}

// (n, 4) top-plane factors of a 2- or 4-bit index, or None when its rows lack them.
std::optional<F32Array> top_factors_py(const QuantizedIndex& ix) {
  if (!ix.has_top()) return std::nullopt;
  const size_t n = ix.size();
  F32Array out({n, size_t{4}});
  float* p = out.mutable_data();
  for (size_t i = 0; i < n; ++i) ix.get_top_factors(i, p + 4 * i);
  return out;
}

void set_state_py(QuantizedIndex& ix, const F32Array& rotation, const F32Array& centroid, bool trained, size_t n,
                  const U8Array& blocks, const F32Array& factors, const std::optional<F32Array>& top) {
  const size_t d = ix.dim_pad();
  require(static_cast<size_t>(rotation.size()) == ix.rotation().size(), "rotation has the wrong size");
  require(static_cast<size_t>(centroid.size()) == d, "centroid has the wrong size");
  const size_t nblocks = (n + kQuantBlockRows - 1) / kQuantBlockRows;
  require(static_cast<size_t>(blocks.size()) == nblocks * ix.code_bytes() * kQuantBlockRows, "codes have the wrong size");
  require(static_cast<size_t>(factors.size()) == 5 * n, "factors have the wrong size");
  require(!top || (quant_screenable(ix.bits()) && static_cast<size_t>(top->size()) == 4 * n),
          "top factors must be (n, 4), and exist for 2- and 4-bit codes only");
  ix.set_state(rotation.data(), centroid.data(), trained, n, blocks.data(), factors.data(),
               top ? top->data() : nullptr);
}

// The block kernels alone, for tests: S = u . qu for each row of the code
// values u (n x D, each < 2^bits; D a multiple of 64), stored in the blocked
// plane layout (or the nibble layout, 4 bits only, or the pair layout, 1 bit
// only), against query values qu (D, each < 2^qbits). allow: one 32-bit word
// per block, or empty.
py::array_t<uint32_t> plane_sums_py(const U8Array& u, const U8Array& qu, int bits, int qbits, int level,
                                    bool nibbles, bool pairs, const py::array_t<uint32_t, py::array::c_style>& allow) {
  require_matrix(u, "u");
  const size_t n = u.shape(0), D = u.shape(1);
  require(D % 64 == 0 && D > 0 && D <= kQuantMaxDim, "u must have a positive multiple of 64 columns, at most 4096");
  require(bits >= 1 && bits <= 8, "bits must be in [1, 8]");
  require(qbits >= 1 && qbits <= 8, "qbits must be in [1, 8]");
  require(qu.ndim() == 1 && static_cast<size_t>(qu.shape(0)) == D, "qu must be 1-d with u.shape[1] entries");
  require(!nibbles || bits == 4, "the nibble layout holds 4-bit codes only");
  require(!pairs || bits == 1, "the pair layout holds 1-bit codes only");
  const QuantLayout layout = nibbles ? QuantLayout::Nibbles : pairs ? QuantLayout::Pairs : QuantLayout::Planes;
  const size_t J = D / 8, nblocks = (n + kQuantBlockRows - 1) / kQuantBlockRows;
  const size_t stride = static_cast<size_t>(bits) * J * kQuantBlockRows;
  require(allow.size() == 0 || static_cast<size_t>(allow.size()) == nblocks, "allow must hold one word per block");
  AlignedBytes data(quant_storage_blocks(layout, nblocks) * stride, 0);
  std::vector<uint8_t> planes(bits * J), luts;
  std::vector<uint32_t> words;
  const uint8_t* pu = u.data();
  for (size_t r = 0; r < n; ++r) {
    pack_planes(pu + r * D, D, bits, planes.data());
    quant_put_row(data.data(), r / kQuantBlockRows, r % kQuantBlockRows, bits, J, layout, planes.data());
  }
  build_query_luts(qu.data(), D, qbits, luts);
  build_query_words(qu.data(), D, words);
  py::array_t<uint32_t> out(nblocks * kQuantBlockRows);
  uint32_t* po = out.mutable_data();
  std::fill(po, po + nblocks * kQuantBlockRows, 0u);
  QuantBlocks s{data.data(), bits, J, nblocks, quant_last_mask(n), allow.size() ? allow.data() : nullptr};
  s.paired = pairs;
  Level lv = level_arg(level);
  {
    py::gil_scoped_release nogil;
    struct Store {
      uint32_t* po;
      void block(size_t b, uint32_t mask, const uint32_t* S, Level) {
        for (size_t l = 0; l < kQuantBlockRows; ++l)
          if ((mask >> l) & 1u) po[b * kQuantBlockRows + l] = S[l];
      }
    } sink{po};
    if (nibbles)
      quant_nibble_sums(lv, s, words.data(), qbits, 0, nblocks, sink);
    else if (pairs)  // in two ranges split at an odd block: a pair across the split is read twice
      for (size_t b0 : {size_t{0}, nblocks / 2 | 1}) {
        const size_t b1 = b0 ? nblocks : std::min(nblocks, nblocks / 2 | 1);
        quant_pair_sums(lv, s, luts.data(), (qbits + 3) / 4, b0, b1, sink);
      }
    else
      quant_sums(lv, s, luts.data(), (qbits + 3) / 4, 0, nblocks, sink);
  }
  out.resize({n});
  return out;
}

// Rows of 4-bit codes between row-major planes and the nibble bytes of quant_layout.hpp
// (n, D/2 bytes both ways); to_nibbles=false is the inverse.
U8Array nibble_rows_py(const U8Array& rows, bool to_nibbles) {
  require_matrix(rows, "rows");
  const size_t n = rows.shape(0), cb = rows.shape(1);
  require(cb % 32 == 0 && cb > 0 && cb <= 4 * kQuantMaxDim / 8,
          "rows must be 4-bit codes: a positive multiple of 32 bytes, at most 2048");
  const size_t J = cb / 4;
  U8Array out({n, cb});
  const uint8_t* src = rows.data();
  uint8_t* dst = out.mutable_data();
  {
    py::gil_scoped_release nogil;
    for (size_t i = 0; i < n; ++i) {
      if (to_nibbles)
        planes_to_nibbles(src + i * cb, J, dst + i * cb);
      else
        nibbles_to_planes(src + i * cb, J, dst + i * cb);
    }
  }
  return out;
}

F32Array rotate_py(const F32Array& cols, const F32Array& x, int level) {
  require_matrix(cols, "cols");
  require_matrix(x, "x");
  const size_t d = cols.shape(0);
  require(static_cast<size_t>(cols.shape(1)) == d && d % 64 == 0, "cols must be square with a multiple of 64 rows");
  require(static_cast<size_t>(x.shape(1)) == d, "x must have as many columns as cols");
  const size_t m = x.shape(0);
  F32Array out({m, d});
  const float *pc = cols.data(), *px = x.data();
  float* po = out.mutable_data();
  Level lv = level_arg(level);
  py::gil_scoped_release nogil;
  for (size_t i = 0; i < m; ++i) rotate(pc, d, px + i * d, po + i * d, lv);
  return out;
}

// The structured rotation alone, for tests: signs (kFhtRounds, d), x (m, d).
F32Array fht_rotate_py(const F32Array& signs, const F32Array& x, int level) {
  require_matrix(signs, "signs");
  require_matrix(x, "x");
  const size_t d = signs.shape(1);
  require(static_cast<size_t>(signs.shape(0)) == static_cast<size_t>(kFhtRounds) && d % 64 == 0 && d > 0,
          "signs must be (" + std::to_string(kFhtRounds) + ", d) with d a positive multiple of 64");
  require(static_cast<size_t>(x.shape(1)) == d, "x must have as many columns as signs");
  const size_t m = x.shape(0);
  F32Array out({m, d});
  const float *ps = signs.data(), *px = x.data();
  float* po = out.mutable_data();
  Level lv = level_arg(level);
  py::gil_scoped_release nogil;
  for (size_t i = 0; i < m; ++i) fht_rotate(ps, d, px + i * d, po + i * d, lv);
  return out;
}

// One query over several indexes (a node's shards): see quant_parts.hpp.
void check_query_1d(const F32Array& q, size_t dim) {
  require(q.ndim() == 1 && static_cast<size_t>(q.shape(0)) == dim,
          "query must be 1-d with the indexes' dimension " + std::to_string(dim));
}

py::tuple parts_candidates_py(const py::list& indexes, const F32Array& query, const std::vector<long>& candidates,
                              const std::vector<long>& threads, long k, int qbits, std::optional<float> confidence,
                              int level) {
  const size_t np = indexes.size();
  require(np > 0, "indexes must not be empty");
  require(candidates.size() == np && threads.size() == np, "candidates and threads need one value per index");
  require(k > 0, "k must be positive");
  check_qbits(qbits);
  if (confidence) require(std::isfinite(*confidence) && *confidence >= 0, "confidence must be a finite number >= 0");
  std::vector<QuantPart> parts(np);
  size_t width = 1;
  for (size_t p = 0; p < np; ++p) {
    if (!py::isinstance<QuantizedIndex>(indexes[p]))
      throw py::type_error("indexes must be _core.QuantizedIndex objects, got " +
                           std::string(py::str(py::type::of(indexes[p]).attr("__name__"))));
    const QuantizedIndex* ix = indexes[p].cast<const QuantizedIndex*>();
    if (p == 0) check_query_1d(query, ix->dim());
    require(ix->dim() == static_cast<size_t>(query.shape(0)), "indexes differ in dimension");
    require(candidates[p] >= 0, "candidates must be >= 0");
    parts[p] = QuantPart{ix, static_cast<size_t>(candidates[p]), resolve_threads(threads[p])};
    width = std::max(width, parts[p].candidates);
  }
  I64Array cand({np, width});
  std::vector<size_t> kept(np);
  const float* pq = query.data();
  int64_t* pc = cand.mutable_data();
  Level lv = level_arg(level);
  {
    py::gil_scoped_release nogil;
    quant_parts_candidates(parts.data(), np, pq, qbits, confidence ? *confidence : -1.0f, static_cast<size_t>(k),
                           width, pc, kept.data(), lv);
  }
  return py::make_tuple(cand, kept);
}

py::tuple parts_rescore_py(const std::vector<F32Array>& rows, const F32Array& query, const I64Array& cand, long k,
                           const std::string& metric, int level) {
  const size_t np = rows.size();
  require(np > 0, "rows must not be empty");
  require_matrix(cand, "candidates");
  require(static_cast<size_t>(cand.shape(0)) == np, "candidates need one row per part");
  require(k > 0, "k must be positive");
  require(query.ndim() == 1, "query must be 1-d");
  const size_t d = query.shape(0), width = cand.shape(1);
  std::vector<const float*> pr(np);
  std::vector<size_t> nr(np);
  for (size_t p = 0; p < np; ++p) {
    require_matrix(rows[p], "rows");
    require(static_cast<size_t>(rows[p].shape(1)) == d, "rows have dimension " + std::to_string(rows[p].shape(1)) +
                                                            ", the query has " + std::to_string(d));
    pr[p] = rows[p].data();
    nr[p] = rows[p].shape(0);
  }
  Metric m = metric_arg(metric);
  I64Array ids({np, static_cast<size_t>(k)});
  F32Array scores({np, static_cast<size_t>(k)});
  const float* pq = query.data();
  const int64_t* pc = cand.data();
  int64_t* pi = ids.mutable_data();
  float* ps = scores.mutable_data();
  Level lv = level_arg(level);
  try {
    py::gil_scoped_release nogil;
    quant_parts_rescore(pr.data(), nr.data(), np, d, pq, pc, width, static_cast<size_t>(k), m, pi, ps, lv);
  } catch (const std::out_of_range&) {
    throw py::value_error("candidate rows must be below their part's row count");
  } catch (const std::domain_error& e) {
    throw py::value_error(std::string("rows: ") + e.what());
  }
  return py::make_tuple(ids, scores);
}

}  // namespace

void bind_quant(py::module_& m) {
  m.def("quant_plane_sums", &plane_sums_py, py::arg("u"), py::arg("qu"), py::arg("bits"), py::arg("qbits"),
        py::arg("level") = -1, py::arg("nibbles") = false, py::arg("pairs") = false,
        py::arg("allow") = py::array_t<uint32_t>(0));
  m.def("quant_nibble_rows", &nibble_rows_py, py::arg("rows"), py::arg("to_nibbles") = true);
  m.def("quant_rotate", &rotate_py, py::arg("cols"), py::arg("x"), py::arg("level") = -1);
  m.def("quant_fht_rotate", &fht_rotate_py, py::arg("signs"), py::arg("x"), py::arg("level") = -1);
  m.attr("QUANT_FHT_ROUNDS") = kFhtRounds;
  m.attr("QUANT_SCREEN_Z") = kQuantScreenZ;
  m.def("quant_parts_candidates", &parts_candidates_py, py::arg("indexes"), py::arg("query"), py::arg("candidates"),
        py::arg("threads"), py::arg("k"), py::arg("query_bits"), py::arg("confidence") = py::none(),
        py::arg("level") = -1,
        "One query's candidates in each of several QuantizedIndex objects: (cand int64 (parts, max c), kept per "
        "part); with confidence, pruned by bounds as bound_prune does.");
  m.def("quant_parts_rescore", &parts_rescore_py, py::arg("rows"), py::arg("query"), py::arg("candidates"),
        py::arg("k"), py::arg("metric"), py::arg("level") = -1,
        "Exact top-k of each part's candidates among its own float32 rows: (ids (parts, k), scores (parts, k)).");

  py::class_<QuantizedIndex>(m, "QuantizedIndex")
      .def(py::init(&make_index), py::arg("dim"), py::arg("bits"), py::arg("metric"), py::arg("seed"),
           py::arg("code_dim") = 0, py::arg("make_rotation") = true, py::arg("rotation") = "dense")
      .def_property_readonly("rotation_kind", [](const QuantizedIndex& ix) {
        return ix.rotation_kind() == QuantRotationKind::FHT ? "fht" : "dense";
      })
      .def_property_readonly("dim", &QuantizedIndex::dim)
      .def_property_readonly("dim_pad", &QuantizedIndex::dim_pad)
      .def_property_readonly("bits", &QuantizedIndex::bits)
      .def_property_readonly("seed", &QuantizedIndex::seed)
      .def_property_readonly("trained", &QuantizedIndex::trained)
      .def_property_readonly("metric", [](const QuantizedIndex& ix) { return quant_metric_name(ix.metric()); })
      .def_property_readonly("code_bytes", &QuantizedIndex::code_bytes)
      .def_property_readonly("nbytes", &QuantizedIndex::nbytes)
      .def("__len__", &QuantizedIndex::size)
      .def("add", &add_py, py::arg("vectors"), py::arg("threads") = 0, py::arg("level") = -1)
      .def("train", &train_py, py::arg("vectors"))
      .def("encode", &encode_py, py::arg("vectors"), py::arg("threads") = 0, py::arg("level") = -1,
           py::arg("top") = false)
      .def("add_codes", &add_codes_py, py::arg("planes"), py::arg("factors"), py::arg("top") = py::none())
      .def("search", &search_py, py::arg("queries"), py::arg("k"), py::arg("query_bits"),
           py::arg("allow_mask") = py::none(), py::arg("allow_ids") = py::none(), py::arg("threads") = 0,
           py::arg("level") = -1, py::arg("confidence") = py::none(), py::arg("screen") = kQuantScreenZ,
           py::arg("stats") = false)
      .def_property_readonly("has_top", &QuantizedIndex::has_top)
      .def("top_factors", &top_factors_py)
      .def("estimate", &estimate_py, py::arg("queries"), py::arg("ids"), py::arg("query_bits"), py::arg("z"),
           py::arg("level") = -1)
      .def("query_state", &query_state_py, py::arg("query"), py::arg("query_bits"), py::arg("level") = -1)
      .def("rotation", &rotation_py)
      .def("centroid", &centroid_py)
      .def("planes", &planes_py)
      .def("blocks", &blocks_py)
      .def("factors", &factors_py)
      .def("set_state", &set_state_py, py::arg("rotation"), py::arg("centroid"), py::arg("trained"), py::arg("n"),
           py::arg("blocks"), py::arg("factors"), py::arg("top") = py::none());
}
