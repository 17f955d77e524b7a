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

}  // namespace vecsift
