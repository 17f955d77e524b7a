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

Metric hnsw_metric(const std::string& metric) {
  if (metric == "ip") return Metric::IP;
  if (metric == "l2") return Metric::L2;
  if (metric == "cosine") return Metric::Cosine;
  throw py::value_error("metric must be 'ip', 'l2' or 'cosine', got '" + metric + "'");
}

const char* metric_name(Metric m) {
  switch (m) {
    case Metric::IP: return "ip";
    case Metric::L2: return "l2";
    default: return "cosine";
  }
}

void check_vectors(const F32Array& x, size_t dim, const char* name) {
  require_matrix(x, name);
  require(static_cast<size_t>(x.shape(1)) == dim, std::string(name) + " have dimension " +
                                                      std::to_string(x.shape(1)) + ", the index has " +
                                                      std::to_string(dim));
}

void add_py(HNSWGraph& g, const F32Array& x, const std::optional<U64Array>& labels, long threads) {
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
  py::gil_scoped_release nogil;
  require(all_finite(px, m * g.dim()), "vectors contain NaN or infinite values");
  g.add(px, m, pl, nt);
}

py::tuple search_py(const HNSWGraph& g, const F32Array& q, long k, long ef, const std::optional<U8Array>& mask,
                    const std::optional<I64Array>& allow_labels, long threads, int filter_mode) {
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
  {
    py::gil_scoped_release nogil;
    require(all_finite(pq, nq * g.dim()), "queries contain NaN or infinite values");
    g.search(pq, nq, static_cast<size_t>(k), static_cast<size_t>(ef), allow, nt, pl, ps, filter_mode);
  }
  return py::make_tuple(labels, scores);
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
      .def(py::init([](size_t dim, const std::string& metric, size_t mm, size_t efc, uint64_t seed) {
             return new HNSWGraph(dim, hnsw_metric(metric), mm, efc, seed);
           }),
           py::arg("dim"), py::arg("metric"), py::arg("m"), py::arg("ef_construction"), py::arg("seed"))
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
           py::arg("allow_labels"), py::arg("threads"), py::arg("filter_mode") = 0)
      .def("set_deleted", &set_deleted_py, py::arg("labels"), py::arg("deleted"))
      .def("save",
           [](const HNSWGraph& g, const std::string& path) {
             py::gil_scoped_release nogil;
             g.save(path);
           },
           py::arg("path"))
      .def_static("load",
                  [](const std::string& path, bool use_mmap) {
                    std::unique_ptr<HNSWGraph> g;
                    {
                      py::gil_scoped_release nogil;
                      g = HNSWGraph::load(path, use_mmap);
                    }
                    return g;
                  },
                  py::arg("path"), py::arg("mmap"));
}
