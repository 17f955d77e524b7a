// Helpers shared by the binding files: array views, argument checks, allow sets.
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <optional>
#include <thread>
#include <stdexcept>
#include <string>

#include "vecsift/kernels/cpu.hpp"
#include "vecsift/kernels/distance.hpp"
#include "vecsift/index/filter.hpp"

namespace py = pybind11;

// C-contiguous arrays only: the Python layer converts (copying only when it must).
using F32Array = py::array_t<float, py::array::c_style>;
using U8Array = py::array_t<uint8_t, py::array::c_style>;
using I64Array = py::array_t<int64_t, py::array::c_style>;
using U64Array = py::array_t<uint64_t, py::array::c_style>;

inline void require(bool ok, const std::string& msg) {
  if (!ok) throw py::value_error(msg);
}

inline void require_matrix(const py::array& a, const char* name) {
  require(a.ndim() == 2, std::string(name) + " must be a 2-d array");
}

// level < 0 means the process-wide active level.
inline vecsift::Level level_arg(int level) {
  if (level < 0) return vecsift::active_level();
  require(level <= 2, "level must be 0 (scalar), 1 (avx2) or 2 (avx512)");
  return vecsift::clamp_level(static_cast<vecsift::Level>(level));
}

// Builds the allow set for n rows from a uint8 mask or an int64 id array.
inline std::optional<vecsift::AllowSet> allow_arg(const std::optional<U8Array>& mask,
                                                  const std::optional<I64Array>& ids, size_t n) {
  if (mask) {
    require(mask->ndim() == 1 && static_cast<size_t>(mask->shape(0)) == n,
            "allow mask length " + std::to_string(mask->size()) + " does not match " + std::to_string(n) + " rows");
    const uint8_t* p = mask->data();
    py::gil_scoped_release nogil;
    return vecsift::AllowSet::from_mask(p, n);
  }
  if (ids) {
    require(ids->ndim() == 1, "allow ids must be a 1-d array");
    const int64_t* p = ids->data();
    size_t m = static_cast<size_t>(ids->shape(0));
    try {
      py::gil_scoped_release nogil;
      return vecsift::AllowSet::from_ids(p, m, n);
    } catch (const std::out_of_range&) {
      throw py::value_error("allow contains a row id outside [0, " + std::to_string(n) + ")");
    }
  }
  return std::nullopt;
}

// The metric names the Python layer uses, both ways.
inline vecsift::Metric metric_arg(const std::string& metric) {
  if (metric == "ip") return vecsift::Metric::IP;
  if (metric == "l2") return vecsift::Metric::L2;
  if (metric == "cosine") return vecsift::Metric::Cosine;
  throw py::value_error("metric must be 'ip', 'l2' or 'cosine', got '" + metric + "'");
}

inline const char* metric_name(vecsift::Metric m) {
  switch (m) {
    case vecsift::Metric::IP: return "ip";
    case vecsift::Metric::L2: return "l2";
    default: return "cosine";
  }
}

// Runs fn(cancel) on a worker thread while the calling thread (which holds the
// GIL on entry) checks for signals every ~50 ms: a Ctrl-C raises `cancel`,
// waits for fn to stop at its next poll, and raises KeyboardInterrupt. The core
// knows nothing of Python; it only polls the flag. Used for long calls only
// (a thread start costs ~30 us).
template <class Fn>
auto run_interruptible(Fn&& fn) -> decltype(fn(static_cast<const std::atomic<bool>*>(nullptr))) {
  using R = decltype(fn(static_cast<const std::atomic<bool>*>(nullptr)));
  std::atomic<bool> cancel{false};
  std::mutex mu;
  std::condition_variable cv;
  bool done = false, interrupted = false;
  std::exception_ptr err;
  R result{};
  {
    py::gil_scoped_release nogil;
    std::thread worker([&] {
      try {
        result = fn(&cancel);
      } catch (...) {
        err = std::current_exception();
      }
      std::lock_guard<std::mutex> l(mu);
      done = true;
      cv.notify_all();
    });
    std::unique_lock<std::mutex> l(mu);
    while (!cv.wait_for(l, std::chrono::milliseconds(50), [&] { return done; })) {
      l.unlock();
      {
        py::gil_scoped_acquire gil;
        if (PyErr_CheckSignals() != 0) interrupted = true;  // the handler's exception stays set
      }
      l.lock();
      if (interrupted) {
        cancel.store(true);
        cv.wait(l, [&] { return done; });
        break;
      }
    }
    l.unlock();
    worker.join();
  }
  if (interrupted) throw py::error_already_set();
  if (err) std::rethrow_exception(err);
  return result;
}
