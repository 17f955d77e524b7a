// Minimal fork-join parallelism over an index range with std::thread.
#pragma once

#include <algorithm>
#include <cstddef>
#include <exception>
#include <thread>
#include <vector>

namespace vecsift {

inline size_t hardware_threads() {
  // Asked once: glibc reads /sys on every call (~5 us, measured on a single-query search).
  static const size_t n = [] {
    unsigned h = std::thread::hardware_concurrency();
    return h ? static_cast<size_t>(h) : size_t{1};
  }();
  return n;
}

// threads <= 0 means all hardware threads.
inline size_t resolve_threads(long threads) {
  return threads > 0 ? static_cast<size_t>(threads) : hardware_threads();
}

// Calls fn(task) for task in [0, ntasks) on up to `threads` threads; tasks are
// handed out statically in contiguous slices. The first exception is rethrown.
template <class Fn>
void parallel_for(size_t ntasks, size_t threads, Fn&& fn) {
  threads = std::max<size_t>(1, std::min(threads, ntasks));
  if (threads == 1) {
    for (size_t t = 0; t < ntasks; ++t) fn(t);
    return;
  }
  std::vector<std::thread> pool;
  std::vector<std::exception_ptr> errors(threads);
  pool.reserve(threads);
  for (size_t w = 0; w < threads; ++w) {
    pool.emplace_back([&, w] {
      try {
        size_t lo = ntasks * w / threads, hi = ntasks * (w + 1) / threads;
        for (size_t t = lo; t < hi; ++t) fn(t);
      } catch (...) {
        errors[w] = std::current_exception();
      }
    });
  }
  for (auto& th : pool) th.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
}

}  // namespace vecsift
