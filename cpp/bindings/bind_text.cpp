// Python strings from UTF-8 columns in Arrow's layout (offsets + bytes), for
// building search hits. pyarrow's take + to_pylist costs ~5 us of dispatch per
// column whatever the row count; one call here gathers the 10 rows of a result
// (two columns) in ~1.6 us. Conversion only: every offset read is bounds-checked,
// so a damaged buffer raises ValueError instead of reading out of bounds.
#include <algorithm>
#include <vector>

#include "common.hpp"

namespace {

struct Utf8Chunk {
  int64_t start = 0;  // first row of the column this chunk holds
  int64_t rows = 0;
  const int32_t* off32 = nullptr;  // exactly one of off32 / off64 is set (string / large_string)
  const int64_t* off64 = nullptr;
  const char* data = nullptr;
  int64_t data_len = 0;
  const uint8_t* validity = nullptr;  // Arrow bitmap, least significant bit first; null: no nulls
  int64_t bit_offset = 0;
};

class Utf8Column {
 public:
  // chunks: a sequence of (offsets int32|int64 [rows + 1], data uint8, validity uint8 or None, bit_offset).
  explicit Utf8Column(const py::sequence& chunks) {
    int64_t start = 0;
    for (const py::handle item : chunks) {
      auto t = py::reinterpret_borrow<py::tuple>(item);
      require(t.size() == 4, "each chunk is (offsets, data, validity, bit_offset)");
      Utf8Chunk c;
      c.start = start;
      py::array offsets = py::array::ensure(t[0]);
      require(offsets && offsets.ndim() == 1 && offsets.shape(0) >= 1 &&
                  (offsets.flags() & py::array::c_style),
              "offsets must be a contiguous 1-d array with at least one entry");
      c.rows = offsets.shape(0) - 1;
      if (py::isinstance<py::array_t<int32_t>>(offsets)) {
        c.off32 = static_cast<const int32_t*>(offsets.data());
      } else if (py::isinstance<py::array_t<int64_t>>(offsets)) {
        c.off64 = static_cast<const int64_t*>(offsets.data());
      } else {
        throw py::type_error("offsets must be int32 or int64");
      }
      auto data = py::cast<U8Array>(t[1]);
      require(data.ndim() == 1, "data must be a 1-d uint8 array");
      c.data = reinterpret_cast<const char*>(data.data());
      c.data_len = data.shape(0);
      c.bit_offset = py::cast<int64_t>(t[3]);
      require(c.bit_offset >= 0, "bit_offset must be >= 0");
      if (!t[2].is_none()) {
        auto valid = py::cast<U8Array>(t[2]);
        require(valid.ndim() == 1 && valid.shape(0) * 8 >= c.bit_offset + c.rows,
                "validity bitmap is shorter than its chunk");
        c.validity = valid.data();
        owners_.push_back(valid);
      }
      owners_.push_back(offsets);
      owners_.push_back(data);
      chunks_.push_back(c);
      starts_.push_back(start);
      start += c.rows;
    }
    size_ = start;
  }

  int64_t size() const { return size_; }

  // One str (or None for a null) per row, in the order given.
  py::list take(const I64Array& rows) const {
    require(rows.ndim() == 1, "rows must be a 1-d int64 array");
    const int64_t* r = rows.data();
    const py::ssize_t n = rows.shape(0);
    py::list out(n);
    for (py::ssize_t i = 0; i < n; ++i) {
      const int64_t row = r[i];
      if (row < 0 || row >= size_) throw py::index_error("row " + std::to_string(row) + " is out of range");
      const Utf8Chunk& c = chunk_of(row);
      const int64_t j = row - c.start;
      PyObject* s;
      if (c.validity && !((c.validity[(c.bit_offset + j) >> 3] >> ((c.bit_offset + j) & 7)) & 1)) {
        s = Py_NewRef(Py_None);
      } else {
        const int64_t a = c.off32 ? c.off32[j] : c.off64[j];
        const int64_t b = c.off32 ? c.off32[j + 1] : c.off64[j + 1];
        require(0 <= a && a <= b && b <= c.data_len, "string offsets out of bounds (damaged column)");
        s = PyUnicode_DecodeUTF8(c.data + a, static_cast<py::ssize_t>(b - a), "strict");
        if (!s) throw py::error_already_set();
      }
      PyList_SET_ITEM(out.ptr(), i, s);  // steals the reference
    }
    return out;
  }

 private:
  const Utf8Chunk& chunk_of(int64_t row) const {
    if (chunks_.size() == 1) return chunks_[0];
    auto it = std::upper_bound(starts_.begin(), starts_.end(), row);
    return chunks_[static_cast<size_t>(it - starts_.begin()) - 1];
  }

  std::vector<Utf8Chunk> chunks_;
  std::vector<int64_t> starts_;
  std::vector<py::object> owners_;  // keep the buffers the chunks point into alive
  int64_t size_ = 0;
};

// The same rows of several columns in one call: {column: values} costs one
// conversion of rows and one call instead of one per column.
py::list take_columns(const py::sequence& columns, const I64Array& rows) {
  py::list out(columns.size());
  for (size_t i = 0; i < columns.size(); ++i) out[i] = py::cast<const Utf8Column&>(columns[i]).take(rows);
  return out;
}

}  // namespace

void bind_text(py::module_& m) {
  py::class_<Utf8Column>(m, "Utf8Column")
      .def(py::init<const py::sequence&>(), py::arg("chunks"))
      .def("__len__", &Utf8Column::size)
      .def("take", &Utf8Column::take, py::arg("rows"));
  m.def("take_utf8", &take_columns, py::arg("columns"), py::arg("rows"),
        "One list of str/None per Utf8Column, for the same rows.");
}
