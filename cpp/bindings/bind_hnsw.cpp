// Bindings for the HNSW graph. Conversion and checks only; build, search and
// file I/O run without the GIL. vecsift.HNSWIndex (python/vecsift/hnsw.py)
// wraps this class.
#include <pybind11/stl.h>

#include <optional>

#include "common.hpp"
#include "vecsift/kernels/distance.hpp"
#include "vecsift/index/hnsw.hpp"
#include "vecsift/kernels/parallel.hpp"

using namespace vecsift;

namespace {

// Calls at least this large (rows added, queries searched) poll for Ctrl-C.
constexpr size_t kInterruptibleRows = 2048, kInterruptibleQueries = 256;

void check_vectors(const F32Array& x, size_t dim, const char* name) {
  require_matrix(x, name);
  require(static_cast<size_t>(x.shape(1)) == dim, std::string(name) + " have dimension " +
                                                      std::to_string(x.shape(1)) + ", the index has " +
                                                      std::to_string(dim));
}

size_t add_py(HNSWGraph& g, const F32Array& x, const std::optional<U64Array>& labels, long threads) {
  check_vectors(x, g.dim(), "vectors");
  const size_t m = x.shape(0);
  const uint64_t* pl = nullptr;
  if (labels) {
    require(labels->ndim() == 1 && static_cast<size_t>(labels->shape(0)) == m,
            "ids must be 1-d with one label per row (" + std::to_string(m) + ")");
    pl = labels->data();
  }
  const float* px = x.data();
  size_t nt = resolve_threads(threads);
  bool finite;
  {
    py::gil_scoped_release nogil;
    finite = all_finite(px, m * g.dim());
  }
  require(finite, "vectors contain NaN or infinite values");
  // Large adds run interruptibly: a Ctrl-C keeps the rows already linked (a prefix) and drops the rest.
  if (m < kInterruptibleRows) {
    py::gil_scoped_release nogil;
    return g.add(px, m, pl, nt);
  }
  return run_interruptible([&](const std::atomic<bool>* cancel) { return g.add(px, m, pl, nt, cancel); });
}

py::tuple search_py(const HNSWGraph& g, const F32Array& q, long k, long ef, const std::optional<U8Array>& mask,
                    const std::optional<I64Array>& allow_labels, long threads, int filter_mode, bool stats) {
  check_vectors(q, g.dim(), "queries");
  require(k > 0, "k must be positive");
  if (ef <= 0) ef = static_cast<long>(g.ef_search());
  const size_t nq = q.shape(0);
  AllowSpec allow;
  if (mask) {
    require(mask->ndim() == 1, "allow mask must be 1-d");
    allow.mask = mask->data();
    allow.mask_len = static_cast<size_t>(mask->shape(0));
  } else if (allow_labels) {
    require(allow_labels->ndim() == 1, "allow labels must be 1-d");
    allow.labels = allow_labels->data();
    allow.nlabels = static_cast<size_t>(allow_labels->shape(0));
  }
  I64Array labels({nq, static_cast<size_t>(k)});
  F32Array scores({nq, static_cast<size_t>(k)});
  const float* pq = q.data();
  int64_t* pl = labels.mutable_data();
  float* ps = scores.mutable_data();
  size_t nt = resolve_threads(threads);
  py::array_t<uint64_t> st;
  uint64_t* pst = nullptr;
  if (stats) {
    st = py::array_t<uint64_t>({nq, size_t{3}});
    pst = st.mutable_data();
  }
  bool finite;
  {
    py::gil_scoped_release nogil;
    finite = all_finite(pq, nq * g.dim());
  }
  require(finite, "queries contain NaN or infinite values");
  auto run = [&](const std::atomic<bool>* cancel) {
    g.search(pq, nq, static_cast<size_t>(k), static_cast<size_t>(ef), allow, nt, pl, ps, filter_mode, pst, cancel);
    return 0;
  };
  if (nq < kInterruptibleQueries) {
    py::gil_scoped_release nogil;
    run(nullptr);
  } else {
    run_interruptible(run);
  }
  if (stats) return py::make_tuple(labels, scores, st);
  return py::make_tuple(labels, scores);
}

// One query, no allow set, results as Python lists (labels with -1 padding, float scores): what
// Collection.search's single-query path reads, without two numpy arrays and their views per call.
py::tuple search_one_py(const HNSWGraph& g, const F32Array& q, long k, long ef, long threads) {
  require(q.ndim() == 1 && static_cast<size_t>(q.shape(0)) == g.dim(),
          "query must be 1-d with the index's dimension (" + std::to_string(g.dim()) + ")");
  require(k > 0, "k must be positive");
  if (ef <= 0) ef = static_cast<long>(g.ef_search());
  const float* pq = q.data();
  require(all_finite(pq, g.dim()), "queries contain NaN or infinite values");
  std::vector<int64_t> labels(static_cast<size_t>(k));
  std::vector<float> scores(static_cast<size_t>(k));
  const size_t nt = resolve_threads(threads);
  {
    py::gil_scoped_release nogil;
    g.search(pq, 1, static_cast<size_t>(k), static_cast<size_t>(ef), AllowSpec{}, nt, labels.data(), scores.data(),
             0, nullptr, nullptr);
  }
  py::list pl(k), ps(k);
  for (long i = 0; i < k; ++i) {
    PyObject* a = PyLong_FromLongLong(labels[static_cast<size_t>(i)]);
    if (!a) throw py::error_already_set();
    PyList_SET_ITEM(pl.ptr(), i, a);
    PyObject* b = PyFloat_FromDouble(scores[static_cast<size_t>(i)]);
    if (!b) throw py::error_already_set();
    PyList_SET_ITEM(ps.ptr(), i, b);
  }
  return py::make_tuple(std::move(pl), std::move(ps));
}

size_t set_deleted_py(HNSWGraph& g, const I64Array& labels, bool deleted) {
  require(labels.ndim() == 1, "labels must be 1-d");
  const int64_t* p = labels.data();
  size_t n = static_cast<size_t>(labels.shape(0));
  py::gil_scoped_release nogil;
  return g.set_deleted(p, n, deleted);
}

}  // namespace

void bind_hnsw(py::module_& m) {
  static py::exception<CorruptIndex> corrupt(m, "_CorruptIndex", PyExc_ValueError);
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const CorruptIndex& e) {
      // Raised as vecsift.CorruptIndexError when the Python package is importable.
      try {
        py::object cls = py::module_::import("vecsift.errors").attr("CorruptIndexError");
        PyErr_SetString(cls.ptr(), e.what());
      } catch (...) {
        py::set_error(corrupt, e.what());
      }
    } catch (const IndexIoError& e) {
      PyErr_SetString(PyExc_OSError, e.what());
    }
  });

  py::class_<HNSWGraph>(m, "HNSW")
      .def(py::init([](size_t dim, const std::string& metric, size_t mm, size_t efc, uint64_t seed,
                       const std::string& codes) {
             require(codes == "float32" || codes == "int8", "codes must be 'float32' or 'int8', got '" + codes + "'");
             return new HNSWGraph(dim, metric_arg(metric), mm, efc, seed, codes == "int8" ? kCodesInt8 : kCodesFloat);
           }),
           py::arg("dim"), py::arg("metric"), py::arg("m"), py::arg("ef_construction"), py::arg("seed"),
           py::arg("codes") = "float32")
      .def_property_readonly("codes", [](const HNSWGraph& g) { return g.codes() ? "int8" : "float32"; })
      .def_property("rescore", &HNSWGraph::rescore, &HNSWGraph::set_rescore)
      .def_property_readonly("record_bytes", &HNSWGraph::record_bytes)
      .def_property_readonly("row_bytes", &HNSWGraph::row_bytes)
      // Test hooks (codes mode): the code grid, a node's codes and |x|^2, the query as int16 and its
      // scale, and the walk's keys of a query for given nodes, at the graph's current kernel level.
      .def("_code_grid",
           [](const HNSWGraph& g) {
             auto gr = g.code_grid();
             F32Array mu(gr.first.size()), step(gr.second.size());
             std::copy(gr.first.begin(), gr.first.end(), mu.mutable_data());
             std::copy(gr.second.begin(), gr.second.end(), step.mutable_data());
             return py::make_tuple(mu, step);
           })
      .def("_codes",
           [](const HNSWGraph& g, const I64Array& ids) {
             require(g.codes() != 0, "not a codes index");
             const size_t n = static_cast<size_t>(ids.shape(0)), cd = code_dim(g.dim());
             py::array_t<int8_t> codes({n, cd});
             F32Array norms(n);
             for (size_t i = 0; i < n; ++i) g.node_codes(static_cast<uint32_t>(ids.data()[i]),
                                                         codes.mutable_data() + i * cd, norms.mutable_data() + i);
             return py::make_tuple(codes, norms);
           }, py::arg("ids"))
      .def("_code_keys",
           [](const HNSWGraph& g, const F32Array& q, const I64Array& ids) {
             require(g.codes() != 0, "not a codes index");
             require(q.ndim() == 1 && static_cast<size_t>(q.shape(0)) == g.dim(), "query must be 1-d of dim");
             const size_t n = static_cast<size_t>(ids.shape(0)), cd = code_dim(g.dim());
             py::array_t<int16_t> qq(cd);
             F32Array keys(n);
             std::vector<uint32_t> v(n);
             for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint32_t>(ids.data()[i]);
             const float t = g.code_keys(q.data(), v.data(), n, qq.mutable_data(), keys.mutable_data());
             return py::make_tuple(qq, t, keys);
           }, py::arg("query"), py::arg("ids"))
      .def_property_readonly("dim", &HNSWGraph::dim)
      .def_property_readonly("metric", [](const HNSWGraph& g) { return metric_name(g.metric()); })
      .def_property_readonly("m", &HNSWGraph::m)
      .def_property_readonly("ef_construction", &HNSWGraph::ef_construction)
      .def_property_readonly("seed", &HNSWGraph::seed)
      .def_property("ef_search", &HNSWGraph::ef_search, &HNSWGraph::set_ef_search)
      .def_property_readonly("nbytes", &HNSWGraph::nbytes)
      .def_property_readonly("rows", &HNSWGraph::rows)
      .def_property_readonly("label_bound", &HNSWGraph::label_bound)
      .def_property_readonly("mapped", &HNSWGraph::mapped)
      .def("__len__", &HNSWGraph::live)
      .def("scan_threshold", &HNSWGraph::scan_threshold, py::arg("ef"))
      .def("set_level", [](HNSWGraph& g, int level) { g.set_level(level_arg(level)); }, py::arg("level"))
      .def("labels",
           [](const HNSWGraph& g) {
             auto v = g.labels();
             py::array_t<uint64_t> out(v.size());
             std::copy(v.begin(), v.end(), out.mutable_data());
             return out;
           })
      .def("add", &add_py, py::arg("vectors"), py::arg("labels"), py::arg("threads"))
      .def("search", &search_py, py::arg("queries"), py::arg("k"), py::arg("ef"), py::arg("allow_mask"),
           py::arg("allow_labels"), py::arg("threads"), py::arg("filter_mode") = 0, py::arg("stats") = false)
      .def("search_one", &search_one_py, py::arg("query"), py::arg("k"), py::arg("ef"), py::arg("threads"))
      .def("set_deleted", &set_deleted_py, py::arg("labels"), py::arg("deleted"))
      .def("save",
           [](const HNSWGraph& g, const std::string& path) {
             py::gil_scoped_release nogil;
             g.save(path);
           },
           py::arg("path"))
      .def_property_readonly("file_crc", &HNSWGraph::file_crc)
      .def_property_readonly("verified", &HNSWGraph::verified)
      .def_static("load",
                  [](const std::string& path, bool use_mmap, bool verify) {
                    std::unique_ptr<HNSWGraph> g;
                    {
                      py::gil_scoped_release nogil;
                      g = HNSWGraph::load(path, use_mmap, verify);
                    }
                    return g;
                  },
                  py::arg("path"), py::arg("mmap"), py::arg("verify") = true)
      .def_static("verify_file",
                  [](const std::string& path) {
                    py::gil_scoped_release nogil;
                    return HnswFile::verify_file(path);
                  },
                  py::arg("path"));
}
