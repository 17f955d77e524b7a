// Bindings for the partitioned (IVF) index: a searcher over numpy views
// (usually file mappings) and the nearest-centroid assignment used by adds.
// Conversion and checks only; kernels run without the GIL.
#include <pybind11/stl.h>

#include <memory>

#include "common.hpp"
#include "vecsift/index/partitioned.hpp"

using namespace vecsift;

namespace {

using I64Flat = py::array_t<int64_t, py::array::c_style>;

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
  m.def("ivf_assign", &ivf_assign_py, py::arg("centroids"), py::arg("rows"), py::arg("metric"),
        py::arg("threads") = 0);
}
