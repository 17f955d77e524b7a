// Bindings for the partitioned (IVF) index: a searcher over numpy views
// (usually file mappings) and the nearest-centroid assignment used by adds.
// Conversion and checks only; kernels run without the GIL.
#include <pybind11/stl.h>

#include <memory>

#include "common.hpp"
#include "vecsift/index/partitioned.hpp"
#include "vecsift/index/partitioned_quant.hpp"

using namespace vecsift;

namespace {

using I64Flat = py::array_t<int64_t, py::array::c_style>;
using U16Array = py::array_t<uint16_t, py::array::c_style>;

Metric ivf_metric(const std::string& m) {
  if (m == "ip") return Metric::IP;
  if (m == "l2") return Metric::L2;
  if (m == "cosine") return Metric::Cosine;
  throw py::value_error("metric must be 'ip', 'l2' or 'cosine', got '" + m + "'");
}

// Holds the arrays it reads so their memory (or mapping) outlives every search.
class PyIVF {
 public:
  PyIVF(F32Array centroids, I64Flat list_block, I64Flat list_size, I64Flat slot_row, U64Array codes,
        F32Array vectors, std::optional<F32Array> inv_norm, const std::string& metric, std::string scorer)
      : centroids_(centroids), list_block_(list_block), list_size_(list_size), slot_row_(slot_row), codes_(codes),
        vectors_(vectors), inv_norm_(inv_norm) {
    require_matrix(centroids, "centroids");
    require_matrix(vectors, "vectors");
    require(scorer == "sign", "scorer must be 'sign', got '" + scorer + "'");
    v_.dim = centroids.shape(1);
    v_.nlist = centroids.shape(0);
    v_.nrows = vectors.shape(0);
    v_.words = words_for_bytes(code_bytes_for_dim(v_.dim));
    v_.metric = ivf_metric(metric);
    require(static_cast<size_t>(vectors.shape(1)) == v_.dim, "vectors and centroids differ in dimension");
    require(list_block.ndim() == 1 && static_cast<size_t>(list_block.shape(0)) == v_.nlist + 1,
            "list_block must have nlist + 1 entries");
    require(list_size.ndim() == 1 && static_cast<size_t>(list_size.shape(0)) == v_.nlist,
            "list_size must have nlist entries");
    const int64_t* lb = list_block.data();
    const int64_t* ls = list_size.data();
    require(lb[0] == 0, "list_block must start at 0");
    for (size_t l = 0; l < v_.nlist; ++l)
      require(lb[l + 1] >= lb[l] && ls[l] >= 0 && ls[l] <= (lb[l + 1] - lb[l]) * int64_t(kBlockRows) &&
                  ls[l] > (lb[l + 1] - lb[l] - 1) * int64_t(kBlockRows),
              "list " + std::to_string(l) + ": size and blocks disagree");
    const size_t nblocks = static_cast<size_t>(lb[v_.nlist]);
    require(static_cast<size_t>(slot_row.size()) == nblocks * kBlockRows, "slot_row must have 8 entries a block");
    require(static_cast<size_t>(codes.size()) == nblocks * kBlockRows * v_.words, "codes size does not match blocks");
    const int64_t* sr = slot_row.data();
    const int64_t n = static_cast<int64_t>(v_.nrows);
    {
      bool ok = true;
      py::gil_scoped_release nogil;
      for (size_t s = 0; s < nblocks * kBlockRows; ++s) ok &= sr[s] >= -1 && sr[s] < n;
      if (!ok) {
        py::gil_scoped_acquire gil;
        throw py::value_error("slot_row holds a row id outside [-1, n)");
      }
    }
    if (v_.metric == Metric::Cosine) {
      require(inv_norm.has_value() && static_cast<size_t>(inv_norm->size()) == v_.nrows,
              "cosine needs inv_norm with one entry per row");
      v_.inv_norm = inv_norm->data();
    }
    v_.centroids = centroids.data();
    v_.list_block = lb;
    v_.list_size = ls;
    v_.slot_row = sr;
    v_.codes = codes.data();
    v_.vectors = vectors.data();
    searcher_ = std::make_unique<IVFSearcher<SignScorer>>(v_, active_level());
  }

  py::tuple search(const F32Array& queries, long k, long nprobe, long oversample, long refine, long min_candidates,
                   bool exact_small, const std::optional<U8Array>& allow_mask,
                   const std::optional<I64Array>& allow_ids, long threads) const {
    require_matrix(queries, "queries");
    require(static_cast<size_t>(queries.shape(1)) == v_.dim, "queries have dimension " +
                                                                 std::to_string(queries.shape(1)) + ", expected " +
                                                                 std::to_string(v_.dim));
    require(k > 0, "k must be positive");
    require(nprobe > 0, "nprobe must be positive");
    require(oversample > 0, "oversample must be positive");
    require(refine > 0, "refine must be positive");
    require(min_candidates >= 0, "min_candidates must be >= 0");
    auto allow = allow_arg(allow_mask, allow_ids, v_.nrows);
    const size_t nq = queries.shape(0);
    IVFParams p;
    p.k = static_cast<size_t>(k);
    p.nprobe = static_cast<size_t>(nprobe);
    p.oversample = static_cast<size_t>(oversample);
    p.refine = static_cast<size_t>(refine);
    p.min_candidates = static_cast<size_t>(min_candidates);
    p.exact_small = exact_small;
    I64Array ids({nq, p.k});
    F32Array scores({nq, p.k});
    IVFStats st;
    const float* pq = queries.data();
    int64_t* pi = ids.mutable_data();
    float* ps = scores.mutable_data();
    size_t nt = resolve_threads(threads);
    {
      py::gil_scoped_release nogil;
      searcher_->search(pq, nq, p, allow ? &*allow : nullptr, nt, pi, ps, &st);
    }
    py::dict stats;
    stats["lists"] = st.lists;
    stats["rows"] = st.rows;
    stats["exact"] = st.exact;
    return py::make_tuple(ids, scores, stats);
  }

  size_t nlist() const { return v_.nlist; }
  size_t dim() const { return v_.dim; }
  size_t size() const { return v_.nrows; }

 private:
  F32Array centroids_;
  I64Flat list_block_, list_size_, slot_row_;
  U64Array codes_;
  F32Array vectors_;
  std::optional<F32Array> inv_norm_;
  IVFView v_;
  std::unique_ptr<IVFSearcher<SignScorer>> searcher_;
};


// The kind of a rotation array and its code dimension D: (D, D) is the dense
// matrix, (kFhtRounds, D) the signs of the structured rotation (D is a
// multiple of 64, so the two shapes never coincide). Returns true for fht.
bool rotation_shape(const F32Array& rotation, size_t& D) {
  require_matrix(rotation, "rotation");
  const size_t r = rotation.shape(0), c = rotation.shape(1);
  require(c % 64 == 0 && c > 0 && (r == c || r == static_cast<size_t>(kFhtRounds)),
          "rotation must be (D, D) or (" + std::to_string(kFhtRounds) + ", D) with D a multiple of 64");
  D = c;
  return r != c;
}

// The RaBitQ-code variant (partitioned_quant.hpp). Holds every array it reads.
class PyIVFQ {
 public:
  PyIVFQ(F32Array centroids, F32Array centres, F32Array centres_rot, F32Array rotation, I64Flat list_block,
         I64Flat list_size, I64Flat slot_row, U8Array codes, F32Array factors, F32Array vectors,
         std::optional<F32Array> inv_norm, const std::string& metric, int bits, std::optional<F32Array> rank_basis,
         std::optional<U16Array> rank_proj, bool nibbles)
      : arrays_{centroids, centres, centres_rot, rotation, factors, vectors},
        list_block_(list_block), list_size_(list_size), slot_row_(slot_row), codes_(codes), inv_norm_(inv_norm),
        rank_basis_(rank_basis), rank_proj_(rank_proj) {
    require_matrix(centroids, "centroids");
    require_matrix(centres, "centres");
    require_matrix(centres_rot, "centres_rot");
    require_matrix(factors, "factors");
    require_matrix(vectors, "vectors");
    require(bits == 1 || bits == 2 || bits == 4 || bits == 8, "bits must be 1, 2, 4 or 8");
    require(!nibbles || bits == 4, "the nibble layout holds 4-bit codes only");
    v_.bits = bits;
    v_.layout = nibbles ? QuantLayout::Nibbles : QuantLayout::Planes;
    v_.dim = centroids.shape(1);
    v_.nlist = centroids.shape(0);
    v_.nrows = vectors.shape(0);
    v_.fht = rotation_shape(rotation, v_.D);
    v_.J = v_.D / 8;
    v_.metric = ivf_metric(metric);
    require(v_.D >= v_.dim, "rotation: D must be at least dim");
    v_.ncentres = centres.shape(0);
    require(v_.ncentres == 1 || v_.ncentres == v_.nlist, "centres must have 1 or nlist rows");
    require(static_cast<size_t>(centres.shape(1)) == v_.dim, "centres and centroids differ in dimension");
    require(static_cast<size_t>(centres_rot.shape(0)) == v_.ncentres && static_cast<size_t>(centres_rot.shape(1)) == v_.D,
            "centres_rot must be (centres, D)");
    require(static_cast<size_t>(vectors.shape(1)) == v_.dim, "vectors and centroids differ in dimension");
    require(list_block.ndim() == 1 && static_cast<size_t>(list_block.shape(0)) == v_.nlist + 1,
            "list_block must have nlist + 1 entries");
    require(list_size.ndim() == 1 && static_cast<size_t>(list_size.shape(0)) == v_.nlist,
            "list_size must have nlist entries");
    const int64_t* lb = list_block.data();
    const int64_t* ls = list_size.data();
    const int64_t R = static_cast<int64_t>(kQuantBlockRows);
    require(lb[0] == 0, "list_block must start at 0");
    for (size_t l = 0; l < v_.nlist; ++l)
      require(lb[l + 1] >= lb[l] && ls[l] >= 0 && ls[l] <= (lb[l + 1] - lb[l]) * R && ls[l] > (lb[l + 1] - lb[l] - 1) * R,
              "list " + std::to_string(l) + ": size and blocks disagree");
    const size_t nblocks = static_cast<size_t>(lb[v_.nlist]), nslots = nblocks * kQuantBlockRows;
    require(static_cast<size_t>(slot_row.size()) == nslots, "slot_row must have 32 entries a block");
    require(static_cast<size_t>(codes.size()) == nblocks * v_.block_stride(), "codes size does not match blocks");
    require(static_cast<size_t>(factors.shape(0)) == 5 && static_cast<size_t>(factors.shape(1)) == nslots,
            "factors must be (5, slots)");
    const int64_t* sr = slot_row.data();
    const int64_t n = static_cast<int64_t>(v_.nrows);
    {
      bool ok = true;
      py::gil_scoped_release nogil;
      for (size_t s = 0; s < nslots; ++s) ok &= sr[s] >= -1 && sr[s] < n;
      if (!ok) {
        py::gil_scoped_acquire gil;
        throw py::value_error("slot_row holds a row id outside [-1, n)");
      }
    }
    if (v_.metric == Metric::Cosine) {
      require(inv_norm.has_value() && static_cast<size_t>(inv_norm->size()) == v_.nrows,
              "cosine needs inv_norm with one entry per row");
      v_.inv_norm = inv_norm->data();
    }
    // Ranking sorts lists by centroid score: a NaN there would break the ordering.
    require(all_finite(centroids.data(), static_cast<size_t>(centroids.size())),
            "centroids hold NaN or infinite values");
    v_.centroids = centroids.data();
    v_.centres = centres.data();
    v_.centres_rot = centres_rot.data();
    v_.rotation = rotation.data();
    v_.list_block = lb;
    v_.list_size = ls;
    v_.slot_row = sr;
    v_.codes = codes.data();
    v_.factors = factors.data();
    v_.vectors = vectors.data();
    require(rank_basis.has_value() == rank_proj.has_value(), "rank_basis and rank_proj go together");
    if (rank_basis) {
      require_matrix(*rank_basis, "rank_basis");
      const size_t r = rank_basis->shape(0);
      require(r > 0 && static_cast<size_t>(rank_basis->shape(1)) == v_.dim, "rank_basis must be (r, dim)");
      require(rank_proj->ndim() == 2 && static_cast<size_t>(rank_proj->shape(0)) == v_.nlist &&
                  static_cast<size_t>(rank_proj->shape(1)) == r,
              "rank_proj must be (nlist, r)");
      require(all_finite(rank_basis->data(), static_cast<size_t>(rank_basis->size())),
              "rank_basis holds NaN or infinite values");
      v_.rank_basis = rank_basis->data();
      v_.rank_proj = rank_proj->data();
      v_.rank_dims = r;
    }
    searcher_ = std::make_unique<IVFQuantSearcher>(v_, active_level());
  }

  py::tuple search(const F32Array& queries, long k, long nprobe, long oversample, long min_candidates,
                   bool exact_small, int qbits, const std::string& rescore, double confidence,
                   const std::optional<U8Array>& allow_mask, const std::optional<I64Array>& allow_ids,
                   long threads) const {
    require_matrix(queries, "queries");
    require(static_cast<size_t>(queries.shape(1)) == v_.dim, "queries have dimension " +
                                                                 std::to_string(queries.shape(1)) + ", expected " +
                                                                 std::to_string(v_.dim));
    require(k > 0, "k must be positive");
    require(nprobe > 0, "nprobe must be positive");
    require(oversample > 0, "oversample must be positive");
    require(min_candidates >= 0, "min_candidates must be >= 0");
    require(qbits >= 4 && qbits <= 8, "query_bits must be in [4, 8]");
    require(std::isfinite(confidence) && confidence >= 0, "confidence must be a finite number >= 0");
    IVFQParams p;
    if (rescore == "bound") p.rescore = IVFRescore::Bound;
    else if (rescore == "fixed") p.rescore = IVFRescore::Fixed;
    else if (rescore == "none") p.rescore = IVFRescore::None;
    else throw py::value_error("rescore must be 'bound', 'fixed' or 'none', got '" + rescore + "'");
    auto allow = allow_arg(allow_mask, allow_ids, v_.nrows);
    const size_t nq = queries.shape(0);
    p.k = static_cast<size_t>(k);
    p.nprobe = static_cast<size_t>(nprobe);
    p.oversample = static_cast<size_t>(oversample);
    p.min_candidates = static_cast<size_t>(min_candidates);
    p.exact_small = exact_small;
    p.qbits = qbits;
    p.confidence = static_cast<float>(confidence);
    I64Array ids({nq, p.k});
    F32Array scores({nq, p.k});
    IVFQStats st;
    const float* pq = queries.data();
    int64_t* pi = ids.mutable_data();
    float* ps = scores.mutable_data();
    size_t nt = resolve_threads(threads);
    {
      py::gil_scoped_release nogil;
      searcher_->search(pq, nq, p, allow ? &*allow : nullptr, nt, pi, ps, &st);
    }
    py::dict stats;
    stats["lists"] = st.lists;
    stats["rows"] = st.rows;
    stats["exact"] = st.exact;
    stats["rescored"] = st.rescored;
    return py::make_tuple(ids, scores, stats);
  }

 private:
  std::vector<F32Array> arrays_;
  I64Flat list_block_, list_size_, slot_row_;
  U8Array codes_;
  std::optional<F32Array> inv_norm_, rank_basis_;
  std::optional<U16Array> rank_proj_;
  IVFQView v_;
  std::unique_ptr<IVFQuantSearcher> searcher_;
};

// Codes of rows against code centres: (planes (n, bits*D/8) uint8, factors (n, 5) float32).
py::tuple ivf_quant_encode_py(const F32Array& rotation, const F32Array& centres, const F32Array& rows,
                              const I64Flat& centre_of, const std::string& metric, int bits, long threads) {
  require_matrix(centres, "centres");
  require_matrix(rows, "rows");
  require(bits == 1 || bits == 2 || bits == 4 || bits == 8, "bits must be 1, 2, 4 or 8");
  IVFQView v;
  v.fht = rotation_shape(rotation, v.D);
  v.J = v.D / 8;
  v.dim = centres.shape(1);
  v.bits = bits;
  v.metric = ivf_metric(metric);
  require(v.D >= v.dim, "rotation: D must be at least the rows' dimension");
  require(static_cast<size_t>(rows.shape(1)) == v.dim, "rows and centres differ in dimension");
  const size_t n = rows.shape(0);
  require(centre_of.ndim() == 1 && static_cast<size_t>(centre_of.shape(0)) == n, "one centre per row");
  const int64_t* co = centre_of.data();
  for (size_t i = 0; i < n; ++i)
    require(co[i] >= 0 && co[i] < centres.shape(0), "centre index out of range");
  v.rotation = rotation.data();
  v.centres = centres.data();
  U8Array planes({n, v.code_bytes()});
  F32Array factors({n, size_t{5}});
  const float* pr = rows.data();
  uint8_t* pp = planes.mutable_data();
  float* pf = factors.mutable_data();
  size_t nt = resolve_threads(threads);
  {
    py::gil_scoped_release nogil;
    ivf_quant_encode(v, pr, co, n, pp, pf, nt, active_level());
  }
  return py::make_tuple(planes, factors);
}

// kind "dense": the (D, D) Haar matrix; "fht": (kFhtRounds, D) random signs of the structured rotation.
F32Array ivf_quant_rotation_py(size_t D, uint64_t seed, const std::string& kind) {
  require(D % 64 == 0 && D > 0 && D <= 4096, "code_dim must be a multiple of 64 in [64, 4096]");
  require(kind == "dense" || kind == "fht", "rotation must be 'fht' or 'dense', got '" + kind + "'");
  std::vector<float> r;
  {
    py::gil_scoped_release nogil;
    r = kind == "fht" ? random_signs(D, seed) : random_rotation(D, seed);
  }
  F32Array out({r.size() / D, D});
  std::copy(r.begin(), r.end(), out.mutable_data());
  return out;
}

// Rotates rows (n, D) by a rotation of either kind (the same kernels the search uses).
F32Array ivf_quant_rotate_py(const F32Array& rotation, const F32Array& x) {
  require_matrix(x, "x");
  IVFQView v;
  v.fht = rotation_shape(rotation, v.D);
  v.rotation = rotation.data();
  const size_t D = v.D, n = x.shape(0);
  require(static_cast<size_t>(x.shape(1)) == D, "x must have D columns");
  F32Array out({n, D});
  const float* px = x.data();
  float* po = out.mutable_data();
  Level lv = active_level();
  py::gil_scoped_release nogil;
  for (size_t i = 0; i < n; ++i) ivf_rotate(v, px + i * D, po + i * D, lv);
  return out;
}

// Tables of ivf_query_luts against build_query_luts, for the tests.
bool ivf_luts_match_py(const U8Array& qu, int qbits) {
  require(qu.ndim() == 1 && qu.shape(0) % 8 == 0, "qu must be 1-d with a multiple of 8 entries");
  std::vector<uint8_t> a, b;
  build_query_luts(qu.data(), qu.shape(0), qbits, a);
  ivf_query_luts(qu.data(), qu.shape(0), qbits, b);
  return a == b;
}

py::array_t<int64_t> ivf_assign_py(const F32Array& centroids, const F32Array& rows, const std::string& metric,
                                   long threads) {
  require_matrix(centroids, "centroids");
  require_matrix(rows, "rows");
  require(centroids.shape(0) > 0, "centroids must not be empty");
  require(rows.shape(1) == centroids.shape(1), "rows and centroids differ in dimension");
  const size_t n = rows.shape(0), nlist = centroids.shape(0), d = rows.shape(1);
  Metric m = ivf_metric(metric);
  py::array_t<int64_t> out(n);
  const float *pc = centroids.data(), *pr = rows.data();
  int64_t* po = out.mutable_data();
  size_t nt = resolve_threads(threads);
  {
    py::gil_scoped_release nogil;
    ivf_assign(pc, nlist, d, pr, n, m, nt, po, active_level());
  }
  return out;
}

// The permutation select_largest writes (the m best first), for tests against numpy.
py::array_t<uint32_t> select_largest_py(const F32Array& scores, size_t m) {
  require(scores.ndim() == 1, "scores must be 1-d");
  const size_t n = scores.shape(0);
  require(all_finite(scores.data(), n), "scores hold NaN or infinite values");
  py::array_t<uint32_t> order(n);
  std::vector<uint32_t> scratch;
  select_largest(scores.data(), n, m, order.mutable_data(), scratch);
  return order;
}

// float16 bits of x (round to nearest even), for the tests against numpy.
py::array_t<uint16_t> to_half_py(const F32Array& x) {
  py::array_t<uint16_t> out(x.size());
  to_half(x.data(), static_cast<size_t>(x.size()), out.mutable_data());
  return out;
}

// Inner products of a float32 query with float16 rows (the IVF list ranking), at a SIMD level.
F32Array half_scores_py(const F32Array& q, const py::array_t<uint16_t, py::array::c_style>& rows, int level) {
  require(q.ndim() == 1, "q must be 1-d");
  require(rows.ndim() == 2 && rows.shape(1) == q.shape(0), "rows must be (n, len(q))");
  const size_t n = rows.shape(0), d = rows.shape(1);
  F32Array out(n);
  half_ip_block(q.data(), rows.data(), n, d, out.mutable_data(), level_arg(level));
  return out;
}

}  // namespace

void bind_partitioned(py::module_& m) {
  py::class_<PyIVF>(m, "IVF")
      .def(py::init<F32Array, I64Flat, I64Flat, I64Flat, U64Array, F32Array, std::optional<F32Array>,
                    const std::string&, std::string>(),
           py::arg("centroids"), py::arg("list_block"), py::arg("list_size"), py::arg("slot_row"), py::arg("codes"),
           py::arg("vectors"), py::arg("inv_norm"), py::arg("metric"), py::arg("scorer") = "sign")
      .def_property_readonly("nlist", &PyIVF::nlist)
      .def_property_readonly("dim", &PyIVF::dim)
      .def("__len__", &PyIVF::size)
      .def("search", &PyIVF::search, py::arg("queries"), py::arg("k"), py::arg("nprobe"), py::arg("oversample"),
           py::arg("refine") = 1, py::arg("min_candidates") = 0, py::arg("exact_small") = true, py::arg("allow_mask") = py::none(),
           py::arg("allow_ids") = py::none(), py::arg("threads") = 0);
  py::class_<PyIVFQ>(m, "IVFQuant")
      .def(py::init<F32Array, F32Array, F32Array, F32Array, I64Flat, I64Flat, I64Flat, U8Array, F32Array, F32Array,
                    std::optional<F32Array>, const std::string&, int, std::optional<F32Array>,
                    std::optional<U16Array>, bool>(),
           py::arg("centroids"), py::arg("centres"), py::arg("centres_rot"), py::arg("rotation"), py::arg("list_block"),
           py::arg("list_size"), py::arg("slot_row"), py::arg("codes"), py::arg("factors"), py::arg("vectors"),
           py::arg("inv_norm"), py::arg("metric"), py::arg("bits"), py::arg("rank_basis") = py::none(),
           py::arg("rank_proj") = py::none(), py::arg("nibbles") = false)
      .def("search", &PyIVFQ::search, py::arg("queries"), py::arg("k"), py::arg("nprobe"), py::arg("oversample"),
           py::arg("min_candidates"), py::arg("exact_small"), py::arg("query_bits"), py::arg("rescore"),
           py::arg("confidence"), py::arg("allow_mask") = py::none(), py::arg("allow_ids") = py::none(),
           py::arg("threads") = 0);
  m.def("ivf_quant_encode", &ivf_quant_encode_py, py::arg("rotation"), py::arg("centres"), py::arg("rows"),
        py::arg("centre_of"), py::arg("metric"), py::arg("bits"), py::arg("threads") = 0);
  m.def("ivf_quant_rotation", &ivf_quant_rotation_py, py::arg("code_dim"), py::arg("seed"),
        py::arg("kind") = "dense");
  m.def("ivf_quant_rotate", &ivf_quant_rotate_py, py::arg("rotation"), py::arg("x"));
  m.def("ivf_luts_match", &ivf_luts_match_py, py::arg("qu"), py::arg("query_bits"));
  m.def("to_half", &to_half_py, py::arg("x"));
  m.def("select_largest", &select_largest_py, py::arg("scores"), py::arg("m"));
  m.def("half_scores", &half_scores_py, py::arg("q"), py::arg("rows"), py::arg("level") = -1);
  m.def("ivf_assign", &ivf_assign_py, py::arg("centroids"), py::arg("rows"), py::arg("metric"),
        py::arg("threads") = 0);
}
