// Bounded selection of the k best (key, id) pairs: smaller key is better,
// equal keys prefer the smaller id. Similarities are stored as -score so one
// structure serves distances and similarities.
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>
#include <vector>

namespace vecsift {

template <class Key>
struct Candidate {
  Key key;
  int64_t id;
};

template <class Key>
inline bool better(const Candidate<Key>& a, const Candidate<Key>& b) {
  return a.key < b.key || (a.key == b.key && a.id < b.id);
}

template <class Key>
class TopK {
 public:
  explicit TopK(size_t k = 0) { reset(k); }

  void reset(size_t k) {
    k_ = k;
    heap_.clear();
    heap_.reserve(k);
  }

  size_t size() const { return heap_.size(); }
  size_t capacity() const { return k_; }
  bool full() const { return heap_.size() >= k_; }

  // Keys strictly below this may enter (ids arrive in increasing order
  // within one scan, so an equal key would lose the tie anyway).
  Key threshold() const {
    return full() ? heap_.front().key : std::numeric_limits<Key>::max();
  }

  // Full comparison, for merging heaps filled from different row ranges.
  void push(Key key, int64_t id) {
    Candidate<Key> c{key, id};
    if (!full()) {
      heap_.push_back(c);
      std::push_heap(heap_.begin(), heap_.end(), better<Key>);
    } else if (k_ > 0 && better(c, heap_.front())) {
      std::pop_heap(heap_.begin(), heap_.end(), better<Key>);
      heap_.back() = c;
      std::push_heap(heap_.begin(), heap_.end(), better<Key>);
    }
  }

  void merge(const TopK& other) {
    for (const auto& c : other.heap_) push(c.key, c.id);
  }

  // Best first; the heap is consumed.
  std::vector<Candidate<Key>> sorted() {
    std::sort_heap(heap_.begin(), heap_.end(), better<Key>);
    return std::move(heap_);
  }

 private:
  size_t k_ = 0;
  std::vector<Candidate<Key>> heap_;  // max-heap by better(): front is the worst kept
};

// The k best like TopK, for scans that offer many candidates: a push appends to a buffer of
// max(2k, 32) entries and a full buffer is cut back to its k best (nth_element), so a push costs
// O(1) amortised instead of a heap sift (a 30k-row quantised scan with k = 40 pushes ~320 rows a
// query). threshold() is the k-th best as of the last cut, looser in between: more candidates
// pass a caller's filter, none that belongs is lost. The same k results as TopK for the same pushes.
template <class Key>
class TopKBuffer {
 public:
  explicit TopKBuffer(size_t k = 0) { reset(k); }

  void reset(size_t k) {
    k_ = k;
    cap_ = std::max<size_t>(2 * k, 32);
    buf_.clear();
    buf_.reserve(k ? std::min<size_t>(cap_, 1024) : 0);  // a huge k grows on demand: no 2k reserved per query
    cut_ = false;
  }

  size_t capacity() const { return k_; }

  // Keys strictly below this may enter (as TopK::threshold, as of the last cut).
  Key threshold() const { return cut_ ? worst_.key : std::numeric_limits<Key>::max(); }

  void push(Key key, int64_t id) {
    const Candidate<Key> c{key, id};
    if (k_ == 0 || (cut_ && !better(c, worst_))) return;
    buf_.push_back(c);
    if (buf_.size() >= cap_) cut();
  }

  // Cuts now if the buffer holds more than k, so threshold() is the current k-th best (a caller
  // about to filter many candidates against it).
  void tighten() {
    if (cut_ ? buf_.size() > k_ : buf_.size() >= k_ && k_) cut();
  }

  void merge(const TopKBuffer& other) {
    for (const auto& c : other.buf_) push(c.key, c.id);
  }

  // Best first; the buffer is consumed.
  std::vector<Candidate<Key>> sorted() {
    if (buf_.size() > k_) cut();
    std::sort(buf_.begin(), buf_.end(), better<Key>);
    cut_ = false;
    return std::move(buf_);
  }

  // The same k best in no particular order (for callers that rescore them all); the buffer is consumed.
  std::vector<Candidate<Key>> best() {
    if (buf_.size() > k_) cut();
    cut_ = false;
    return std::move(buf_);
  }

 private:
  void cut() {
    std::nth_element(buf_.begin(), buf_.begin() + static_cast<std::ptrdiff_t>(k_ - 1), buf_.end(), better<Key>);
    buf_.resize(k_);
    worst_ = buf_[k_ - 1];
    cut_ = true;
  }

  size_t k_ = 0, cap_ = 32;
  bool cut_ = false;
  Candidate<Key> worst_{};  // the k-th best at the last cut
  std::vector<Candidate<Key>> buf_;
};

}  // namespace vecsift
