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
    return take_rows(rows.data(), rows.shape(0));
  }

  py::list take_rows(const int64_t* r, py::ssize_t n) const {
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

// Python ints, floats and bools from fixed-width Arrow columns (integers, float32 / float64, and
// bit-packed booleans), the same values pyarrow's to_pylist gives. Numeric metadata columns would
// otherwise cost a pyarrow take + to_pylist per search (~100 us cold, after a graph walk).
struct NumChunk {
  int64_t start = 0;
  int64_t rows = 0;
  const uint8_t* values = nullptr;  // rows values of `kind` / `width`, or a bitmap for bool
  char kind = 'i';                  // 'i' signed, 'u' unsigned, 'f' float, 'b' bool (bitmap)
  int width = 8;                    // bytes a value (not bool)
  const uint8_t* validity = nullptr;
  int64_t bit_offset = 0;           // of the validity bitmap and of a bool values bitmap
};

class NumColumn {
 public:
  // chunks: a sequence of (values, validity uint8 or None, bit_offset, rows). values: a contiguous
  // 1-d int8..int64 / uint8..uint64 / float32 / float64 array of `rows` values, or for bool the
  // uint8 bitmap (bit_offset + rows bits).
  explicit NumColumn(const py::sequence& chunks) {
    int64_t start = 0;
    for (const py::handle item : chunks) {
      auto t = py::reinterpret_borrow<py::tuple>(item);
      require(t.size() == 4, "each chunk is (values, validity, bit_offset, rows)");
      NumChunk c;
      c.start = start;
      c.bit_offset = py::cast<int64_t>(t[2]);
      c.rows = py::cast<int64_t>(t[3]);
      require(c.bit_offset >= 0 && c.rows >= 0, "bit_offset and rows must be >= 0");
      py::array values = py::array::ensure(t[0]);
      require(values && values.ndim() == 1 && (values.flags() & py::array::c_style),
              "values must be a contiguous 1-d array");
      const char k = values.dtype().kind();
      const int w = static_cast<int>(values.itemsize());
      if (k == 'b') throw py::type_error("bool values are passed as their uint8 bitmap (NumColumn.booleans)");
      c.values = static_cast<const uint8_t*>(values.data());
      if (k == 'f') {
        if (w != 4 && w != 8) throw py::type_error("float values must be float32 or float64");
        require(values.shape(0) >= c.rows, "values are shorter than their chunk");
      } else if (k == 'i' || k == 'u') {
        if (w != 1 && w != 2 && w != 4 && w != 8) throw py::type_error("integer values of an unknown width");
        require(values.shape(0) >= c.rows, "values are shorter than their chunk");
      } else {
        throw py::type_error("values must be integers or float32 / float64");
      }
      c.kind = k;
      c.width = w;
      if (!t[1].is_none()) {
        auto valid = py::cast<U8Array>(t[1]);
        require(valid.ndim() == 1 && valid.shape(0) * 8 >= c.bit_offset + c.rows,
                "validity bitmap is shorter than its chunk");
        c.validity = valid.data();
        owners_.push_back(valid);
      }
      owners_.push_back(values);
      chunks_.push_back(c);
      starts_.push_back(start);
      start += c.rows;
    }
    size_ = start;
  }

  // A column of booleans: chunks (bitmap uint8, validity or None, bit_offset, rows).
  static NumColumn booleans(const py::sequence& chunks) {
    NumColumn col(py::list{});
    int64_t start = 0;
    for (const py::handle item : chunks) {
      auto t = py::reinterpret_borrow<py::tuple>(item);
      require(t.size() == 4, "each chunk is (bitmap, validity, bit_offset, rows)");
      NumChunk c;
      c.start = start;
      c.kind = 'b';
      c.width = 0;
      c.bit_offset = py::cast<int64_t>(t[2]);
      c.rows = py::cast<int64_t>(t[3]);
      require(c.bit_offset >= 0 && c.rows >= 0, "bit_offset and rows must be >= 0");
      auto bits = py::cast<U8Array>(t[0]);
      require(bits.ndim() == 1 && bits.shape(0) * 8 >= c.bit_offset + c.rows, "bitmap is shorter than its chunk");
      c.values = bits.data();
      col.owners_.push_back(bits);
      if (!t[1].is_none()) {
        auto valid = py::cast<U8Array>(t[1]);
        require(valid.ndim() == 1 && valid.shape(0) * 8 >= c.bit_offset + c.rows,
                "validity bitmap is shorter than its chunk");
        c.validity = valid.data();
        col.owners_.push_back(valid);
      }
      col.chunks_.push_back(c);
      col.starts_.push_back(start);
      start += c.rows;
    }
    col.size_ = start;
    return col;
  }

  int64_t size() const { return size_; }

  py::list take(const I64Array& rows) const {
    require(rows.ndim() == 1, "rows must be a 1-d int64 array");
    return take_rows(rows.data(), rows.shape(0));
  }

  py::list take_rows(const int64_t* r, py::ssize_t n) const {
    py::list out(n);
    for (py::ssize_t i = 0; i < n; ++i) {
      const int64_t row = r[i];
      if (row < 0 || row >= size_) throw py::index_error("row " + std::to_string(row) + " is out of range");
      const NumChunk& c = chunk_of(row);
      const int64_t j = row - c.start;
      PyObject* v;
      if (c.validity && !((c.validity[(c.bit_offset + j) >> 3] >> ((c.bit_offset + j) & 7)) & 1)) {
        v = Py_NewRef(Py_None);
      } else {
        v = value(c, j);
        if (!v) throw py::error_already_set();
      }
      PyList_SET_ITEM(out.ptr(), i, v);  // steals the reference
    }
    return out;
  }

 private:
  static PyObject* value(const NumChunk& c, int64_t j) {
    const uint8_t* p = c.values;
    switch (c.kind) {
      case 'b': {
        const int64_t b = c.bit_offset + j;
        return PyBool_FromLong((p[b >> 3] >> (b & 7)) & 1);
      }
      case 'f':
        if (c.width == 4) return PyFloat_FromDouble(reinterpret_cast<const float*>(p)[j]);
        return PyFloat_FromDouble(reinterpret_cast<const double*>(p)[j]);
      case 'u':
        switch (c.width) {
          case 1: return PyLong_FromUnsignedLong(p[j]);
          case 2: return PyLong_FromUnsignedLong(reinterpret_cast<const uint16_t*>(p)[j]);
          case 4: return PyLong_FromUnsignedLong(reinterpret_cast<const uint32_t*>(p)[j]);
          default: return PyLong_FromUnsignedLongLong(reinterpret_cast<const uint64_t*>(p)[j]);
        }
      default:
        switch (c.width) {
          case 1: return PyLong_FromLong(reinterpret_cast<const int8_t*>(p)[j]);
          case 2: return PyLong_FromLong(reinterpret_cast<const int16_t*>(p)[j]);
          case 4: return PyLong_FromLong(reinterpret_cast<const int32_t*>(p)[j]);
          default: return PyLong_FromLongLong(reinterpret_cast<const int64_t*>(p)[j]);
        }
    }
  }

  const NumChunk& chunk_of(int64_t row) const {
    if (chunks_.size() == 1) return chunks_[0];
    auto it = std::upper_bound(starts_.begin(), starts_.end(), row);
    return chunks_[static_cast<size_t>(it - starts_.begin()) - 1];
  }

  std::vector<NumChunk> chunks_;
  std::vector<int64_t> starts_;
  std::vector<py::object> owners_;
  int64_t size_ = 0;
};

// The same rows of several columns (Utf8Column or NumColumn) in one call: {column: values} costs
// one conversion of rows and one call instead of one per column.
// rows: a 1-d int64 array, or a list of ints (what HNSWGraph.search_one returns).
py::list take_columns(const py::sequence& columns, const py::object& rows) {
  std::vector<int64_t> from_list;
  const int64_t* r;
  py::ssize_t n;
  I64Array arr;
  if (PyList_Check(rows.ptr())) {
    n = PyList_GET_SIZE(rows.ptr());
    from_list.resize(static_cast<size_t>(n));
    for (py::ssize_t i = 0; i < n; ++i) {
      PyObject* item = PyList_GET_ITEM(rows.ptr(), i);
      if (!PyLong_Check(item)) throw py::type_error("rows must be ints");
      const long long v = PyLong_AsLongLong(item);
      if (v == -1 && PyErr_Occurred()) throw py::error_already_set();
      from_list[static_cast<size_t>(i)] = v;
    }
    r = from_list.data();
  } else {
    arr = py::cast<I64Array>(rows);
    require(arr.ndim() == 1, "rows must be a 1-d int64 array");
    r = arr.data();
    n = arr.shape(0);
  }
  py::list out(columns.size());
  for (size_t i = 0; i < columns.size(); ++i) {
    py::handle c = columns[i];
    if (py::isinstance<Utf8Column>(c)) {
      out[i] = py::cast<const Utf8Column&>(c).take_rows(r, n);
    } else {
      out[i] = py::cast<const NumColumn&>(c).take_rows(r, n);
    }
  }
  return out;
}

}  // namespace

void bind_text(py::module_& m) {
  py::class_<Utf8Column>(m, "Utf8Column")
      .def(py::init<const py::sequence&>(), py::arg("chunks"))
      .def("__len__", &Utf8Column::size)
      .def("take", &Utf8Column::take, py::arg("rows"));
  py::class_<NumColumn>(m, "NumColumn")
      .def(py::init<const py::sequence&>(), py::arg("chunks"))
      .def_static("booleans", &NumColumn::booleans, py::arg("chunks"))
      .def("__len__", &NumColumn::size)
      .def("take", &NumColumn::take, py::arg("rows"));
  m.def("take_utf8", &take_columns, py::arg("columns"), py::arg("rows"),
        "One list of values (str / int / float / bool / None) per Utf8Column or NumColumn, for the same rows.");
  m.def("take_columns", &take_columns, py::arg("columns"), py::arg("rows"),
        "One list of values (str / int / float / bool / None) per Utf8Column or NumColumn, for the same rows.");
}
