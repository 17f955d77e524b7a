// Block checksums of a row file's data region: one CRC-32C per fixed-size block, each block checked
// once, the first time a read needs one of its rows.
//
// Two jobs, both on the hot path of a search's first pass over a freshly opened file, which is why they
// are here and not in Python: finding which blocks of a handful of rows are not yet verified (a lookup
// per row in a byte map), and checksumming those blocks. The caller owns the byte map and serialises
// the calls that write it.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "vecsift/io/checksum.hpp"

namespace vecsift {

// The unverified blocks holding a byte of any of `rows` (sorted, unique). Negative rows are padding and
// rows whose bytes start past the last block are skipped (the caller's bug, not a block to check).
inline std::vector<int64_t> pending_blocks(const int64_t* rows, size_t n, uint64_t row_bytes, uint64_t block,
                                           const uint8_t* verified, uint64_t n_blocks) {
  std::vector<int64_t> out;
  for (size_t i = 0; i < n; ++i) {
    if (rows[i] < 0) continue;
    const uint64_t r = static_cast<uint64_t>(rows[i]);
    const uint64_t first = r * row_bytes / block;
    const uint64_t last = std::min(((r + 1) * row_bytes - 1) / block, n_blocks ? n_blocks - 1 : 0);
    for (uint64_t b = first; b <= last && b < n_blocks; ++b) {
      if (!verified[b]) out.push_back(static_cast<int64_t>(b));
    }
  }
  if (out.size() > 1) {
    std::sort(out.begin(), out.end());
    out.erase(std::unique(out.begin(), out.end()), out.end());
  }
  return out;
}

// Checks `blocks` of `data` (length `len`; the last block may be short) against `crcs`. Each block that
// matches is marked in `verified`; returns how many were newly marked. A block that fails is left
// unmarked; the first failing one goes to *first_bad (else -1). With `stop_at_bad`, checking stops there.
inline size_t check_blocks(const uint8_t* data, uint64_t len, uint64_t block, const uint32_t* crcs,
                           const int64_t* blocks, size_t n, uint8_t* verified, bool stop_at_bad,
                           int64_t* first_bad) {
  static const Crc32cImpl impl = crc32c_best_impl();
  size_t marked = 0;
  *first_bad = -1;
  for (size_t i = 0; i < n; ++i) {
    const uint64_t b = static_cast<uint64_t>(blocks[i]);
    if (verified[b]) continue;
    const uint64_t lo = b * block;
    const uint64_t hi = std::min(lo + block, len);
    const uint32_t got = crc32c_final(crc32c_update_with(impl, crc32c_init(), data + lo, hi - lo));
    if (got != crcs[b]) {
      if (*first_bad < 0) *first_bad = static_cast<int64_t>(b);
      if (stop_at_bad) break;
      continue;
    }
    verified[b] = 1;
    ++marked;
  }
  return marked;
}

// CRC-32C of each complete `block` bytes of data, into out[0 .. len / block).
inline void crc_each_block(const uint8_t* data, uint64_t len, uint64_t block, uint32_t* out) {
  static const Crc32cImpl impl = crc32c_best_impl();
  for (uint64_t b = 0, nb = len / block; b < nb; ++b) {
    out[b] = crc32c_final(crc32c_update_with(impl, crc32c_init(), data + b * block, block));
  }
}

}  // namespace vecsift
