// The extension module vecsift._core: each bind_* file registers one part.
#include <pybind11/pybind11.h>

namespace py = pybind11;

void bind_core(py::module_& m);
void bind_hnsw(py::module_& m);
void bind_text(py::module_& m);
void bind_fusion(py::module_& m);
void bind_quant(py::module_& m);
void bind_partitioned(py::module_& m);

PYBIND11_MODULE(_core, m) {
  m.doc() = "vecsift native core (SIMD kernels, exact and binary scans)";
  bind_core(m);
  bind_hnsw(m);
  bind_text(m);
  bind_fusion(m);
  bind_quant(m);
  bind_partitioned(m);
}
