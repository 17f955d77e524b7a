// Binding for reciprocal rank fusion: argument checks and conversion only.
#include <pybind11/stl.h>

#include "common.hpp"
#include "vecsift/kernels/fusion.hpp"

namespace {

using F64Array = py::array_t<double, py::array::c_style>;

py::tuple rrf_fuse_py(const I64Array& flat, const I64Array& bounds, const F64Array& weights, double k,
                      int64_t top_n) {
  require(flat.ndim() == 1 && bounds.ndim() == 1 && weights.ndim() == 1, "flat, bounds and weights must be 1-d");
  require(bounds.shape(0) >= 1, "bounds needs at least one entry");
  const size_t n_lists = static_cast<size_t>(bounds.shape(0) - 1);
  require(static_cast<size_t>(weights.shape(0)) == n_lists, "one weight per list");
  const int64_t* b = bounds.data();
  require(b[0] == 0 && b[n_lists] == flat.shape(0), "bounds must run from 0 to len(flat)");
  for (size_t i = 0; i < n_lists; ++i) require(b[i] <= b[i + 1], "bounds must not decrease");
  vecsift::Fused f;
  {
    py::gil_scoped_release nogil;
    f = vecsift::rrf_fuse(flat.data(), b, n_lists, weights.data(), k, top_n);
  }
  const py::ssize_t m = static_cast<py::ssize_t>(f.ids.size());
  py::array_t<int64_t> ids(m), ranks({m, static_cast<py::ssize_t>(n_lists)});
  py::array_t<double> scores(m);
  std::copy(f.ids.begin(), f.ids.end(), ids.mutable_data());
  std::copy(f.scores.begin(), f.scores.end(), scores.mutable_data());
  std::copy(f.ranks.begin(), f.ranks.end(), ranks.mutable_data());
  return py::make_tuple(ids, scores, ranks);
}

}  // namespace

void bind_fusion(py::module_& m) {
  m.def("rrf_fuse", &rrf_fuse_py, py::arg("flat"), py::arg("bounds"), py::arg("weights"), py::arg("k"),
        py::arg("top_n"), "Reciprocal rank fusion of concatenated id lists: (ids, scores, ranks), best first.");
}
