// The allow-set handed in from Python: a dense bitset over row ids, bit i set
// when row i may be scored. Built once per call from a bool mask or an id list.
#pragma once

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <type_traits>
#include <vector>

namespace vecsift {

class AllowSet {
 public:
  AllowSet() = default;
  explicit AllowSet(size_t n) : n_(n), words_((n + 63) / 64, 0) {}

  static AllowSet from_mask(const uint8_t* mask, size_t n) {
    AllowSet a(n);
    for (size_t i = 0; i < n; ++i)
      if (mask[i]) a.words_[i >> 6] |= uint64_t{1} << (i & 63);
    a.recount();
    return a;
  }

  // Ids outside [0, n) are an error: the caller asked for rows that do not exist.
  template <class Int>
  static AllowSet from_ids(const Int* ids, size_t m, size_t n) {
    AllowSet a(n);
    for (size_t j = 0; j < m; ++j) {
      if constexpr (std::is_signed<Int>::value)
        if (ids[j] < 0) throw std::out_of_range("allow: row id out of range");
      if (static_cast<uint64_t>(ids[j]) >= n) throw std::out_of_range("allow: row id out of range");
      a.words_[static_cast<size_t>(ids[j]) >> 6] |= uint64_t{1} << (static_cast<size_t>(ids[j]) & 63);
    }
    a.recount();
    return a;
  }

  bool test(size_t i) const { return (words_[i >> 6] >> (i & 63)) & 1u; }
  // The first allowed row in [i, end), or end: skips empty words, so a sparse
  // allow set costs n / 64 word tests rather than n bit tests.
  size_t next(size_t i, size_t end) const {
    while (i < end) {
      const uint64_t w = words_[i >> 6] >> (i & 63);
      if (w) {
        const size_t r = i + static_cast<size_t>(__builtin_ctzll(w));
        return r < end ? r : end;
      }
      i = (i | 63) + 1;
    }
    return end;
  }
  void set(size_t i) { words_[i >> 6] |= uint64_t{1} << (i & 63); }
  size_t size() const { return n_; }
  size_t count() const { return count_; }
  const uint64_t* words() const { return words_.data(); }
  size_t nwords() const { return words_.size(); }

  void recount() {
    size_t c = 0;
    for (uint64_t w : words_) c += static_cast<size_t>(__builtin_popcountll(w));
    count_ = c;
  }

 private:
  size_t n_ = 0;
  size_t count_ = 0;
  std::vector<uint64_t> words_;
};

}  // namespace vecsift
