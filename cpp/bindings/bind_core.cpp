// Bindings for CPU dispatch, distance and binary kernels, exact search and
// BinaryIndex. Conversion and checks only; every kernel runs without the GIL.
#include <pybind11/stl.h>

#include "common.hpp"
#include "vecsift/kernels/binary.hpp"
#include "vecsift/index/binary_index.hpp"
#include "vecsift/kernels/distance.hpp"
#include "vecsift/index/flat.hpp"
#include "vecsift/index/planner.hpp"
#include "vecsift/index/rescore.hpp"
#include "vecsift/io/block_checks.hpp"
#include "vecsift/io/checksum.hpp"
#include "vecsift/io/idle_timer.hpp"
#include "vecsift/kernels/parallel.hpp"
#include "vecsift/kernels/read_probe.hpp"

using namespace vecsift;

namespace {

py::dict cpu_features() {
  CpuFeatures f = detect_cpu();
  py::dict d;
  d["popcnt"] = f.popcnt;
  d["fma"] = f.fma;
  d["avx2"] = f.avx2;
  d["avx512f"] = f.avx512f;
  d["avx512bw"] = f.avx512bw;
  d["avx512vpopcntdq"] = f.avx512vpopcntdq;
  d["avx512vbmi"] = f.avx512vbmi;
  d["best_level"] = level_name(hardware_level());
  d["level"] = level_name(active_level());
  return d;
}

bool all_finite_py(const F32Array& x) {
  const float* p = x.data();
  size_t n = static_cast<size_t>(x.size());
  py::gil_scoped_release nogil;
  return all_finite(p, n);
}

U8Array quantize_py(const F32Array& x, int level) {
  require_matrix(x, "vectors");
  const size_t n = x.shape(0), d = x.shape(1);
  require(d > 0, "vectors must have at least one column");
  U8Array out({n, code_bytes_for_dim(d)});
  const float* src = x.data();
  uint8_t* dst = out.mutable_data();
  Level lv = level_arg(level);
  {
    py::gil_scoped_release nogil;
    // Row slices on all cores; small inputs stay on one thread.
    const size_t w = code_bytes_for_dim(d), slices = std::max<size_t>(1, std::min(hardware_threads(), n * d / (1 << 20)));
    parallel_for(slices, slices, [&](size_t t) {
      size_t r0 = n * t / slices, r1 = n * (t + 1) / slices;
      binary_quantize(src + r0 * d, r1 - r0, d, dst + r0 * w, lv);
    });
  }
  return out;
}

// Row-wise Hamming distance between two code matrices of equal shape.
py::array_t<int32_t> hamming_rows_py(const U8Array& a, const U8Array& b, int level) {
  require_matrix(a, "a");
  require_matrix(b, "b");
  require(a.shape(0) == b.shape(0) && a.shape(1) == b.shape(1), "a and b must have the same shape");
  const size_t n = a.shape(0), w = a.shape(1);
  py::array_t<int32_t> out(n);
  const uint8_t *pa = a.data(), *pb = b.data();
  int32_t* po = out.mutable_data();
  Level lv = level_arg(level);
  {
    py::gil_scoped_release nogil;
    for (size_t i = 0; i < n; ++i) po[i] = static_cast<int32_t>(hamming(pa + i * w, pb + i * w, w, lv));
  }
  return out;
}

// One query against every row: inner products or squared L2 distances.
F32Array distances_py(const F32Array& q, const F32Array& rows, const std::string& kind, int level) {
  require_matrix(rows, "rows");
  const size_t n = rows.shape(0), d = rows.shape(1);
  require(q.ndim() == 1 && static_cast<size_t>(q.shape(0)) == d, "query length must equal rows.shape[1]");
  require(kind == "ip" || kind == "l2sq", "kind must be 'ip' or 'l2sq'");
  F32Array out(n);
  const float *pq = q.data(), *pr = rows.data();
  float* po = out.mutable_data();
  Level lv = level_arg(level);
  bool ip = kind == "ip";
  {
    py::gil_scoped_release nogil;
    if (ip) ip_block(pq, pr, n, d, po, lv);
    else l2sq_block(pq, pr, n, d, po, lv);
  }
  return out;
}

py::tuple exact_search_py(const F32Array& base, const F32Array& queries, long k, const std::string& metric,
                          const std::optional<U8Array>& allow_mask, const std::optional<I64Array>& allow_ids,
                          long threads, int level) {
  require_matrix(base, "base");
  require_matrix(queries, "queries");
  const size_t n = base.shape(0), d = base.shape(1), nq = queries.shape(0);
  require(static_cast<size_t>(queries.shape(1)) == d, "queries have dimension " + std::to_string(queries.shape(1)) +
                                                          ", base has " + std::to_string(d));
  require(k > 0, "k must be positive");
  Metric m = metric_arg(metric);
  auto allow = allow_arg(allow_mask, allow_ids, n);
  I64Array ids({nq, static_cast<size_t>(k)});
  F32Array scores({nq, static_cast<size_t>(k)});
  const float *pb = base.data(), *pq = queries.data();
  int64_t* pi = ids.mutable_data();
  float* ps = scores.mutable_data();
  Level lv = level_arg(level);
  size_t nt = resolve_threads(threads);
  {
    py::gil_scoped_release nogil;
    exact_search(pb, n, d, pq, nq, static_cast<size_t>(k), m, allow ? &*allow : nullptr, nt, pi, ps, lv);
  }
  return py::make_tuple(ids, scores);
}

py::tuple rescore_py(const F32Array& rows, const F32Array& queries, const I64Array& cand, long k,
                     const std::string& metric, long threads, int level) {
  require_matrix(rows, "rows");
  require_matrix(queries, "queries");
  require_matrix(cand, "candidates");
  const size_t n = rows.shape(0), d = rows.shape(1), nq = queries.shape(0), c = cand.shape(1);
  require(static_cast<size_t>(queries.shape(1)) == d, "queries have dimension " + std::to_string(queries.shape(1)) +
                                                          ", rows have " + std::to_string(d));
  require(static_cast<size_t>(cand.shape(0)) == nq, "candidates have " + std::to_string(cand.shape(0)) +
                                                        " rows, there are " + std::to_string(nq) + " queries");
  require(k > 0, "k must be positive");
  Metric m = metric_arg(metric);
  I64Array ids({nq, static_cast<size_t>(k)});
  F32Array scores({nq, static_cast<size_t>(k)});
  const float *pr = rows.data(), *pq = queries.data();
  const int64_t* pc = cand.data();
  int64_t* pi = ids.mutable_data();
  float* ps = scores.mutable_data();
  Level lv = level_arg(level);
  size_t nt = resolve_threads(threads);
  try {
    py::gil_scoped_release nogil;
    rescore_candidates(pr, n, d, pq, nq, pc, c, static_cast<size_t>(k), m, nt, pi, ps, lv);
  } catch (const std::out_of_range&) {
    throw py::value_error("candidate rows must be below the " + std::to_string(n) + " rows given");
  } catch (const std::domain_error& e) {
    throw py::value_error(std::string("rows: ") + e.what());
  }
  return py::make_tuple(ids, scores);
}

long bound_prune_py(I64Array& cand, const F32Array& lo, const F32Array& hi, long k) {
  require_matrix(cand, "candidates");
  require(lo.ndim() == 2 && hi.ndim() == 2 && lo.shape(0) == cand.shape(0) && hi.shape(0) == cand.shape(0) &&
              lo.shape(1) == cand.shape(1) && hi.shape(1) == cand.shape(1),
          "lower and upper bounds must have the candidates' shape");
  require(k > 0, "k must be positive");
  int64_t* pc = cand.mutable_data();
  const size_t nq = cand.shape(0), c = cand.shape(1);
  const float *pl = lo.data(), *ph = hi.data();
  py::gil_scoped_release nogil;
  return static_cast<long>(bound_prune(pc, pl, ph, nq, c, static_cast<size_t>(k)));
}

F32Array unit_rows_py(const F32Array& x) {
  require_matrix(x, "x");
  const size_t n = x.shape(0), d = x.shape(1);
  F32Array out({n, d});
  const float* px = x.data();
  float* po = out.mutable_data();
  py::gil_scoped_release nogil;
  unit_rows(px, n, d, po);
  return out;
}

void binary_add_py(BinaryIndex& index, const U8Array& codes) {
  require_matrix(codes, "codes");
  require(static_cast<size_t>(codes.shape(1)) == index.code_bytes(),
          "codes have width " + std::to_string(codes.shape(1)) + " bytes, the index expects " +
              std::to_string(index.code_bytes()));
  const uint8_t* p = codes.data();
  size_t m = codes.shape(0);
  py::gil_scoped_release nogil;
  index.add_codes(p, m);
}

py::tuple binary_search_py(const BinaryIndex& index, const U8Array& qcodes, long k,
                           const std::optional<U8Array>& allow_mask, const std::optional<I64Array>& allow_ids,
                           long threads, int level) {
  require_matrix(qcodes, "queries");
  require(static_cast<size_t>(qcodes.shape(1)) == index.code_bytes(),
          "query codes have width " + std::to_string(qcodes.shape(1)) + " bytes, the index expects " +
              std::to_string(index.code_bytes()));
  require(k > 0, "k must be positive");
  const size_t nq = qcodes.shape(0);
  auto allow = allow_arg(allow_mask, allow_ids, index.size());
  I64Array ids({nq, static_cast<size_t>(k)});
  py::array_t<int32_t> dist({nq, static_cast<size_t>(k)});
  const uint8_t* pq = qcodes.data();
  int64_t* pi = ids.mutable_data();
  int32_t* pd = dist.mutable_data();
  Level lv = level_arg(level);
  size_t nt = resolve_threads(threads);
  {
    py::gil_scoped_release nogil;
    index.search(pq, nq, static_cast<size_t>(k), allow ? &*allow : nullptr, nt, pi, pd, lv);
  }
  return py::make_tuple(ids, dist);
}

U8Array binary_codes_py(const BinaryIndex& index) {
  const size_t n = index.size(), w = index.code_bytes();
  U8Array out({n, w});
  uint8_t* p = out.mutable_data();
  py::gil_scoped_release nogil;
  for (size_t i = 0; i < n; ++i) index.get_code(i, p + i * w);
  return out;
}

// Streams an array once with wide loads (OR-reduction) so benchmarks can put
// scan speed next to this machine's single-thread read bandwidth.
uint64_t read_probe_py(const U8Array& a, int level) {
  const uint8_t* p = a.data();
  size_t n = static_cast<size_t>(a.size());
  Level lv = level_arg(level);
  py::gil_scoped_release nogil;
  return read_probe(p, n, lv);
}

// The bytes of a C-contiguous buffer (bytes, bytearray, memoryview, numpy array). Strided views are
// refused: their items are not one run of memory, and reading size * itemsize bytes from the first item
// would checksum the wrong bytes (past the end, for a negative stride).
struct Bytes {
  py::buffer_info info;
  const uint8_t* p;
  size_t n;
};

Bytes contiguous_bytes(const py::buffer& data) {
  py::buffer_info info = data.request();
  py::ssize_t want = info.itemsize;
  for (py::ssize_t d = info.ndim - 1; d >= 0; --d) {
    require(info.shape[d] <= 1 || info.strides[d] == want, "buffer must be C-contiguous");
    want *= info.shape[d];
  }
  const auto* p = static_cast<const uint8_t*>(info.ptr);
  const size_t n = static_cast<size_t>(info.size) * static_cast<size_t>(info.itemsize);
  return {std::move(info), p, n};
}

// Below this many bytes the checksum takes well under a microsecond: releasing the GIL would cost more
// (and, with other threads running, could make the caller wait to get it back).
constexpr size_t kCrcNoGilBytes = 16 << 10;

uint32_t crc32c_run(Crc32cImpl impl, const Bytes& b, uint32_t value) {
  if (b.n < kCrcNoGilBytes) return crc32c_final(crc32c_update_with(impl, crc32c_final(value), b.p, b.n));
  py::gil_scoped_release nogil;
  return crc32c_final(crc32c_update_with(impl, crc32c_final(value), b.p, b.n));
}

// CRC-32C of a buffer, continuing from a previous (final) value, like zlib.crc32.
uint32_t crc32c_py(const py::buffer& data, uint32_t value) {
  static const Crc32cImpl best = crc32c_best_impl();
  return crc32c_run(best, contiguous_bytes(data), value);
}

const char* const kCrcImplNames[] = {"table", "serial", "interleaved"};

// The same with a named implementation, for tests and benchmarks (every one gives the same value).
uint32_t crc32c_impl_py(const py::buffer& data, uint32_t value, const std::string& name) {
  for (int i = 0; i < 3; ++i) {
    if (name != kCrcImplNames[i]) continue;
    const auto impl = static_cast<Crc32cImpl>(i);
    require(crc32c_impl_supported(impl), "crc32c implementation " + name + " needs CPU features this CPU lacks");
    return crc32c_run(impl, contiguous_bytes(data), value);
  }
  throw py::value_error("unknown crc32c implementation " + name + " (table, serial, interleaved)");
}

py::list crc32c_impls() {
  py::list out;
  for (int i = 0; i < 3; ++i) {
    if (crc32c_impl_supported(static_cast<Crc32cImpl>(i))) out.append(kCrcImplNames[i]);
  }
  return out;
}

// Block checks of a row file (storage/rowsums.py): the byte map of verified blocks is the caller's and
// must be a writable uint8 array, updated in place; the caller serialises the calls that write it.
using I64 = py::array_t<int64_t, py::array::c_style | py::array::forcecast>;

py::array_t<uint8_t> verified_map(const py::array& a) {
  require(a.dtype().is(py::dtype::of<uint8_t>()) && a.ndim() == 1 && (a.flags() & py::array::c_style),
          "verified must be a 1-d C-contiguous uint8 array");
  return py::reinterpret_borrow<py::array_t<uint8_t>>(a);
}

py::array_t<int64_t> pending_blocks_py(const I64& rows, uint64_t row_bytes, uint64_t block, const py::array& verified) {
  require(row_bytes > 0 && block > 0, "row_bytes and block must be positive");
  auto v = verified_map(verified);
  const std::vector<int64_t> need = pending_blocks(rows.data(), static_cast<size_t>(rows.size()), row_bytes, block,
                                                   v.data(), static_cast<uint64_t>(v.size()));
  py::array_t<int64_t> out(static_cast<py::ssize_t>(need.size()));
  std::copy(need.begin(), need.end(), out.mutable_data());
  return out;
}

py::tuple check_blocks_py(const py::buffer& data, uint64_t block, const py::array_t<uint32_t, py::array::c_style>& crcs,
                          const I64& blocks, py::array& verified, bool stop_at_bad) {
  require(block > 0, "block must be positive");
  Bytes b = contiguous_bytes(data);
  auto v = verified_map(verified);
  require(crcs.size() == v.size(), "crcs and verified must have one entry per block");
  const uint64_t n_blocks = static_cast<uint64_t>(v.size());
  require(b.n <= n_blocks * block && (n_blocks == 0 || b.n > (n_blocks - 1) * block),
          "data length does not match the number of blocks");
  const int64_t* bl = blocks.data();
  const size_t n = static_cast<size_t>(blocks.size());
  for (size_t i = 0; i < n; ++i) require(bl[i] >= 0 && static_cast<uint64_t>(bl[i]) < n_blocks, "block out of range");
  uint8_t* vm = v.mutable_data();
  int64_t bad = -1;
  size_t marked;
  if (n * block < kCrcNoGilBytes) {
    marked = check_blocks(b.p, b.n, block, crcs.data(), bl, n, vm, stop_at_bad, &bad);
  } else {
    py::gil_scoped_release nogil;
    marked = check_blocks(b.p, b.n, block, crcs.data(), bl, n, vm, stop_at_bad, &bad);
  }
  return py::make_tuple(marked, bad);
}

py::array_t<uint32_t> crc_each_block_py(const py::buffer& data, uint64_t block) {
  require(block > 0, "block must be positive");
  Bytes b = contiguous_bytes(data);
  py::array_t<uint32_t> out(static_cast<py::ssize_t>(b.n / block));
  uint32_t* o = out.mutable_data();
  py::gil_scoped_release nogil;
  crc_each_block(b.p, b.n, block, o);
  return out;
}

}  // namespace

void bind_core(py::module_& m) {
  m.def("crc32c", &crc32c_py, py::arg("data"), py::arg("value") = 0,
        "CRC-32C (Castagnoli) of a contiguous buffer, continuing from value (the checksum of every vecsift file).");
  m.def("pending_blocks", &pending_blocks_py, py::arg("rows"), py::arg("row_bytes"), py::arg("block"),
        py::arg("verified"), "Sorted unverified blocks holding a byte of rows (negative rows skipped).");
  m.def("check_blocks", &check_blocks_py, py::arg("data"), py::arg("block"), py::arg("crcs"), py::arg("blocks"),
        py::arg("verified"), py::arg("stop_at_bad") = true,
        "CRC-32C checks of blocks of data, marking the matching ones in verified: (newly marked, first bad or -1).");
  m.def("crc_each_block", &crc_each_block_py, py::arg("data"), py::arg("block"),
        "CRC-32C of each complete block of data (uint32 array).");
  m.def("_crc32c_impl", &crc32c_impl_py, py::arg("data"), py::arg("value"), py::arg("impl"),
        "crc32c with a named implementation: table, serial or interleaved (tests, benchmarks).");
  m.def("_crc32c_impls", &crc32c_impls, "The crc32c implementations this CPU runs, the one crc32c uses last.");
  py::class_<IdleTimer>(m, "IdleTimer",
                         "A deadline one thread sleeps until (wait(), without the GIL) while others move it "
                         "(set_in, clear) without waking it (io/idle_timer.hpp).")
      .def(py::init<>())
      .def("set_in", [](IdleTimer& t, double seconds) {
             require(seconds >= 0 && seconds < 1e9, "seconds must be >= 0 and finite");
             t.set_in(seconds);
           }, py::arg("seconds"))
      .def("arm_in", [](IdleTimer& t, double seconds) {
             require(seconds >= 0 && seconds < 1e9, "seconds must be >= 0 and finite");
             return t.arm_in(seconds);
           }, py::arg("seconds"))
      .def("clear", &IdleTimer::clear)
      .def("wait", &IdleTimer::wait, py::call_guard<py::gil_scoped_release>(),
           "Blocks until the deadline passes (True) or close() (False).")
      .def("close", &IdleTimer::close)
      .def_property_readonly("armed", &IdleTimer::armed);
  m.def("cpu_features", &cpu_features, "Detected CPU features and the kernel level in use.");
  m.def("hardware_threads", &hardware_threads);
  m.def("read_probe", &read_probe_py, py::arg("a"), py::arg("level") = -1);
  m.def("all_finite", &all_finite_py, py::arg("x"));
  m.def("scan_exactly", &scan_exactly, py::arg("n_allowed"), py::arg("fetch"), py::arg("graph_n") = 0,
        py::arg("ef") = 0, "The planner (index/planner.hpp): scan the allowed rows exactly rather than search?");
  m.attr("EXACT_BELOW") = kExactBelow;
  m.def("binary_quantize", &quantize_py, py::arg("x"), py::arg("level") = -1);
  m.def("hamming_rows", &hamming_rows_py, py::arg("a"), py::arg("b"), py::arg("level") = -1);
  m.def("distances", &distances_py, py::arg("q"), py::arg("rows"), py::arg("kind"), py::arg("level") = -1);
  m.def("exact_search", &exact_search_py, py::arg("base"), py::arg("queries"), py::arg("k"), py::arg("metric"),
        py::arg("allow_mask") = py::none(), py::arg("allow_ids") = py::none(), py::arg("threads") = 0,
        py::arg("level") = -1);

  m.def("unit_rows", &unit_rows_py, py::arg("x"),
        "Rows scaled to unit L2 length (zero rows stay zero), as a new float32 array.");
  m.def("rescore", &rescore_py, py::arg("rows"), py::arg("queries"), py::arg("candidates"), py::arg("k"),
        py::arg("metric"), py::arg("threads") = 1, py::arg("level") = -1,
        "Exact top-k of each query among its own candidate rows (-1 = none), read in place from rows.");
  m.def("bound_prune", &bound_prune_py, py::arg("candidates"), py::arg("lower"), py::arg("upper"), py::arg("k"),
        "In place: candidates whose upper bound is below the k-th largest lower bound become -1; returns how "
        "many are kept.");

  py::class_<BinaryIndex>(m, "BinaryIndex")
      .def(py::init<size_t>(), py::arg("dim"))
      .def_property_readonly("dim", &BinaryIndex::dim)
      .def_property_readonly("code_bytes", &BinaryIndex::code_bytes)
      .def_property_readonly("nbytes", &BinaryIndex::nbytes)
      .def("__len__", &BinaryIndex::size)
      .def("add_codes", &binary_add_py, py::arg("codes"))
      .def("codes", &binary_codes_py)
      .def("search_codes", &binary_search_py, py::arg("queries"), py::arg("k"), py::arg("allow_mask") = py::none(),
           py::arg("allow_ids") = py::none(), py::arg("threads") = 0, py::arg("level") = -1);
}
