// BinaryIndex: binary codes in the blocked layout of binary.hpp and a
// brute-force Hamming top-k scan over them.
//
// Batches are cache-blocked: the rows are walked in chunks that fit in L1/L2
// and every query of a thread's share is scanned against a chunk before the
// next chunk is touched, so codes are read from memory once per thread.
// Concurrency: searches share a lock, add takes it exclusively.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <mutex>
#include <shared_mutex>
#include <stdexcept>
#include <vector>

#include "vecsift/kernels/binary.hpp"
#include "vecsift/index/filter.hpp"
#include "vecsift/io/memory.hpp"
#include "vecsift/kernels/parallel.hpp"

namespace vecsift {

class BinaryIndex {
 public:
  explicit BinaryIndex(size_t dim)
      : dim_(dim), bytes_(code_bytes_for_dim(dim)), words_(words_for_bytes(code_bytes_for_dim(dim))) {
    if (dim == 0) throw std::invalid_argument("dim must be positive");
  }

  size_t dim() const { return dim_; }
  size_t code_bytes() const { return bytes_; }
  size_t size() const {
    std::shared_lock<std::shared_mutex> lock(mutex_);
    return n_;
  }
  size_t nbytes() const {
    std::shared_lock<std::shared_mutex> lock(mutex_);
    return data_.capacity_bytes();
  }

  // Appends m row-major codes of code_bytes() each.
  void add_codes(const uint8_t* codes, size_t m) {
    std::unique_lock<std::shared_mutex> lock(mutex_);
    const size_t total = n_ + m;
    const size_t nblocks = (total + kBlockRows - 1) / kBlockRows;
    data_.resize(nblocks * words_ * kBlockRows);
    for (size_t i = 0; i < m; ++i) {
      const size_t r = n_ + i, b = r / kBlockRows, lane = r % kBlockRows;
      const uint8_t* code = codes + i * bytes_;
      uint64_t* blk = data_.data() + b * words_ * kBlockRows;
      for (size_t k = 0; k < words_; ++k) blk[k * kBlockRows + lane] = load_word(code + 8 * k, bytes_ - 8 * k);
    }
    n_ = total;
  }

  // Row-major code of row r (for persistence and tests).
  void get_code(size_t r, uint8_t* out) const {
    std::shared_lock<std::shared_mutex> lock(mutex_);
    if (r >= n_) throw std::out_of_range("row out of range");
    const uint64_t* blk = data_.data() + (r / kBlockRows) * words_ * kBlockRows;
    for (size_t k = 0; k < words_; ++k) {
      uint64_t w = blk[k * kBlockRows + r % kBlockRows];
      std::memcpy(out + 8 * k, &w, std::min<size_t>(8, bytes_ - 8 * k));
    }
  }

  // Top-k by Hamming distance for nq query codes; ties go to the smaller row.
  // Missing results (fewer than k allowed rows) are id -1, distance INT32_MAX.
  void search(const uint8_t* qcodes, size_t nq, size_t k, const AllowSet* allow, size_t threads, int64_t* out_ids,
              int32_t* out_dist, Level level) const {
    std::shared_lock<std::shared_mutex> lock(mutex_);
    if (allow && allow->size() != n_) throw std::invalid_argument("allow length does not match the index size");
    std::vector<uint64_t> qwords(nq * words_);
    for (size_t i = 0; i < nq; ++i)
      for (size_t w = 0; w < words_; ++w) qwords[i * words_ + w] = load_word(qcodes + i * bytes_ + 8 * w, bytes_ - 8 * w);

    const size_t nblocks = (n_ + kBlockRows - 1) / kBlockRows;
    BlockScan scan{data_.data(), words_, nblocks,
                   static_cast<uint8_t>(n_ % kBlockRows ? (1u << (n_ % kBlockRows)) - 1u : 0xFFu),
                   allow ? reinterpret_cast<const uint8_t*>(allow->words()) : nullptr};
    BlockScanKernel kernel = block_scan_kernel(level);
    // ~32 KiB of codes per chunk keeps a chunk in L1 while all queries pass over it.
    const size_t chunk = std::max<size_t>(1, (32 * 1024) / (words_ * 8 * kBlockRows));

    threads = std::max<size_t>(1, std::min(threads, std::max<size_t>(1, nblocks / 64)));
    // Few queries split their rows over threads only with >= 16 MiB of codes x queries a thread: a
    // thread start costs ~0.1 ms on this project's 2-core VMs. One 384-bit query measured: 30k rows
    // 54 us on one thread vs 146 on two, 240k 181 vs 203, 960k 1,279 vs 1,069.
    if (nq < threads)
      threads = std::max<size_t>(1, std::min(threads, nq * nblocks * words_ * 8 * kBlockRows / (size_t{16} << 20)));
    std::vector<HammingTop> tops;
    if (nq >= threads) {
      // Each thread owns a slice of the queries and walks all rows.
      tops.assign(nq, HammingTop(k));
      parallel_for(threads, threads, [&](size_t t) {
        size_t q0 = nq * t / threads, q1 = nq * (t + 1) / threads;
        for (size_t b = 0; b < nblocks; b += chunk) {
          size_t be = std::min(nblocks, b + chunk);
          for (size_t q = q0; q < q1; ++q) kernel(scan, qwords.data() + q * words_, b, be, tops[q]);
        }
      });
    } else {
      // Few queries: each thread scans a slice of the rows, heaps are merged.
      tops.assign(nq * threads, HammingTop(k));
      parallel_for(threads, threads, [&](size_t t) {
        size_t b0 = nblocks * t / threads, b1 = nblocks * (t + 1) / threads;
        for (size_t b = b0; b < b1; b += chunk) {
          size_t be = std::min(b1, b + chunk);
          for (size_t q = 0; q < nq; ++q) kernel(scan, qwords.data() + q * words_, b, be, tops[q * threads + t]);
        }
      });
      for (size_t q = 0; q < nq; ++q) {
        for (size_t t = 1; t < threads; ++t) tops[q * threads].merge(tops[q * threads + t]);
        if (q) tops[q] = std::move(tops[q * threads]);
      }
    }
    for (size_t q = 0; q < nq; ++q) {
      auto best = tops[q].sorted();
      for (size_t j = 0; j < k; ++j) {
        out_ids[q * k + j] = j < best.size() ? best[j].id : -1;
        out_dist[q * k + j] = j < best.size() ? best[j].key : std::numeric_limits<int32_t>::max();
      }
    }
  }

 private:
  size_t dim_, bytes_, words_;
  size_t n_ = 0;
  HugeBuffer<uint64_t> data_;  // blocked layout, see binary.hpp
  mutable std::shared_mutex mutex_;
};

}  // namespace vecsift
