// HNSW graph (Malkov & Yashunin): build, search, filtered search, tombstones.
// Save/load live in hnsw_io.hpp.
//
// Layout. Node i has an internal id i (insertion order) and a uint64 label.
// Level 0, the part every search spends its time in, is one array of
// 64-byte-aligned records, record i = [vector (dim floats)] [count] [2m links],
// so a node's vector and its links share a few cache lines and the array can be
// written to and mapped from a file as is. Upper levels (about 1/m of the
// nodes) live in a second arena of uint32 words: [count][m links] per level.
// Cosine rows are unit-normalised on add, so cosine search is inner product.
//
// Codes mode (codes = kCodesInt8): level-0 records hold int8 codes of the rows
// (kernels/hnsw_codes.hpp) and |x|^2 instead of the float32 vector, so a hop
// reads ~4x fewer bytes; the float32 rows live in a separate array (rows_,
// mapped from the file's last section when loaded with mmap) that the walk
// never touches. Construction, the exact scan of small allow sets and the
// final rescoring of the beam's best candidates use the float32 rows.
//
// Concurrency model (one writer, many readers):
//  * add / save take writer_ (one at a time). add grows the arrays and copies
//    the new rows under an exclusive lock on rw_ (a short pause for readers),
//    then links the new nodes under a shared lock, in parallel, with one lock
//    per node stripe for writers. Searches hold rw_ shared and read links
//    without locks: link words are read and written atomically (a reader may
//    see an old or new list, both valid node ids; the arrays never move while
//    anyone holds rw_).
//  * A node becomes visible to searches (its bit in live_bits_) only after it
//    is fully linked; nodes still being inserted may be walked through but are
//    never returned. Tombstoned nodes are walked through, never returned.
//  * mark_deleted / unmark_deleted only flip state under the node's stripe
//    lock, so they run concurrently with searches and with add.
#pragma once

#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <mutex>
#include <new>
#include <shared_mutex>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

#include "vecsift/kernels/cpu.hpp"
#include "vecsift/kernels/distance.hpp"
#include "vecsift/kernels/hnsw_codes.hpp"
#include "vecsift/kernels/hnsw_kernels.hpp"
#include "vecsift/kernels/parallel.hpp"
#include "vecsift/kernels/topk.hpp"
#include "vecsift/index/planner.hpp"

namespace vecsift {

constexpr int kHnswMaxLevel = 30;
constexpr uint64_t kMaxLabel = static_cast<uint64_t>(std::numeric_limits<int64_t>::max());

// Filtered searches ask the planner (index/planner.hpp) whether to scan the
// allowed rows exactly or walk the graph.

// A byte buffer that is either owned (anonymous mmap, huge pages when large)
// or borrowed from a file mapping. Growing a borrowed buffer copies it into an
// owned one, which is how an index loaded with mmap=True becomes writable.
class GraphBuffer {
 public:
  GraphBuffer() = default;
  GraphBuffer(const GraphBuffer&) = delete;
  GraphBuffer& operator=(const GraphBuffer&) = delete;
  ~GraphBuffer() { release(); }

  char* data() const { return ptr_; }
  size_t capacity() const { return cap_; }
  bool owned() const { return owned_; }

  void borrow(char* p, size_t bytes) {
    release();
    ptr_ = p;
    cap_ = bytes;
    owned_ = false;
  }

  // Ensures capacity >= want; the first `used` bytes are kept. New bytes are zero.
  void reserve(size_t want, size_t used) {
    if (want <= cap_ && (owned_ || want == 0)) return;
    size_t bytes = std::max(want, cap_ + cap_ / 2);
    const size_t align = bytes >= (size_t{2} << 20) ? (size_t{2} << 20) : 4096;
    bytes = (bytes + align - 1) / align * align;
    void* p;
    if (owned_ && ptr_) {
      p = mremap(ptr_, cap_, bytes, MREMAP_MAYMOVE);
    } else {
      p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (p != MAP_FAILED && ptr_ && used) std::memcpy(p, ptr_, used);
    }
    if (p == MAP_FAILED) throw std::bad_alloc();
    if (bytes >= (size_t{2} << 20)) madvise(p, bytes, MADV_HUGEPAGE);
    if (!owned_) ptr_ = nullptr;  // a borrowed mapping is released by its owner
    ptr_ = static_cast<char*>(p);
    cap_ = bytes;
    owned_ = true;
  }

 private:
  void release() {
    if (owned_ && ptr_) munmap(ptr_, cap_);
    ptr_ = nullptr;
    cap_ = 0;
    owned_ = true;
  }

  char* ptr_ = nullptr;
  size_t cap_ = 0;
  bool owned_ = true;
};

// A read-only mapping of a whole file, shared by the buffers borrowing from it.
struct FileMapping {
  void* addr = nullptr;
  size_t bytes = 0;
  ~FileMapping() {
    if (addr) munmap(addr, bytes);
  }
};

struct HnswKeyId {
  float key;
  uint32_t id;
};
inline bool key_less(const HnswKeyId& a, const HnswKeyId& b) { return a.key < b.key; }
inline bool key_greater(const HnswKeyId& a, const HnswKeyId& b) { return a.key > b.key; }

// Per-thread search state, reused across queries: a visited bitset (reset by
// clearing only the words a query touched) and the two heaps.
struct HnswScratch {
  std::vector<uint64_t> visited;
  std::vector<uint32_t> touched;
  std::vector<HnswKeyId> cand, top, sel, prune, chosen;
  std::vector<uint32_t> nbr, kept;
  std::vector<float> keys, query;
  std::vector<int16_t> qcode;  // the query as int16 (codes mode)
  std::vector<uint32_t> rids;  // candidates being rescored (codes mode)
  std::vector<float> rkeys;
  // Counters of the current query (search statistics): distances computed,
  // nodes expanded (hops), rows scored by the exact scan.
  uint64_t ndist = 0, nhops = 0, nscan = 0;

  void prepare(size_t n, size_t max_links, size_t dim) {
    const size_t words = (n + 63) / 64;
    if (visited.size() < words) visited.resize(words, 0);
    if (nbr.size() < max_links + 1) nbr.resize(max_links + 1);
    if (keys.size() < max_links + 1) keys.resize(max_links + 1);
    if (query.size() < dim) query.resize(dim);
  }
  bool test_and_set(uint32_t id) {
    uint64_t& w = visited[id >> 6];
    const uint64_t b = uint64_t{1} << (id & 63);
    if (w & b) return true;
    if (!w) touched.push_back(id >> 6);
    w |= b;
    return false;
  }
  void reset_visited() {
    for (uint32_t w : touched) visited[w] = 0;
    touched.clear();
  }
};

// What a search may return: a bitset over internal ids and how many bits are set.
struct Eligible {
  const uint64_t* bits;
  size_t count;
  const uint32_t* list = nullptr;  // when set: the eligible ids themselves (scan only)
  bool test(uint32_t id) const { return (__atomic_load_n(bits + (id >> 6), __ATOMIC_RELAXED) >> (id & 63)) & 1u; }
};

// Which labels a filtered search allows, as handed in from Python.
struct AllowSpec {
  const uint8_t* mask = nullptr;  // bool mask indexed by label, length mask_len
  size_t mask_len = 0;
  const int64_t* labels = nullptr;  // or a list of labels
  size_t nlabels = 0;
  bool active() const { return mask || labels; }
};

constexpr int kCodesFloat = 0, kCodesInt8 = 1;

// Keys from the float32 rows (construction, exact scans, rescoring).
struct FloatScorer {
  const GraphKernels* k;
  const float* q;
  const char* base;
  size_t stride, dim;
  void batch(const uint32_t* ids, size_t cnt, float* out) const { k->batch(q, base, stride, ids, cnt, dim, out); }
  float pair(uint32_t id) const { return k->pair(q, reinterpret_cast<const float*>(base + id * stride), dim); }
};

// Keys from the int8 codes of the level-0 records (the walk in codes mode).
struct CodeScorer {
  CodeBatchFn fn;
  CodeQuery cq;
  const char* base;
  size_t stride;
  void batch(const uint32_t* ids, size_t cnt, float* out) const { fn(cq, base, stride, ids, cnt, out); }
  float pair(uint32_t id) const {
    float out;
    fn(cq, base, stride, &id, 1, &out);
    return out;
  }
};

class HNSWGraph {
 public:
  HNSWGraph(size_t dim, Metric metric, size_t m, size_t ef_construction, uint64_t seed, int codes = kCodesFloat)
      : dim_(dim), metric_(metric), m_(m), m0_(2 * m), efc_(ef_construction), seed_(seed), codes_(codes) {
    if (dim == 0 || dim > (1u << 16)) throw std::invalid_argument("dim must be in [1, 65536]");
    if (codes != kCodesFloat && codes != kCodesInt8) throw std::invalid_argument("codes must be float32 or int8");
    if (codes == kCodesInt8 && dim > kCodeMaxDim)
      throw std::invalid_argument("codes='int8' supports dim <= " + std::to_string(kCodeMaxDim));
    if (m < 2 || m > 512) throw std::invalid_argument("m must be in [2, 512]");
    if (ef_construction < 1 || ef_construction > (1u << 20))
      throw std::invalid_argument("ef_construction must be in [1, 1048576]");
    cd_ = code_dim(dim);
    links_off_ = codes_ ? cd_ + sizeof(float) : (dim * sizeof(float) + 3) / 4 * 4;
    rec_bytes_ = (links_off_ + (1 + m0_) * sizeof(uint32_t) + 63) / 64 * 64;
    ml_ = 1.0 / std::log(static_cast<double>(m));
    set_level(active_level());
  }

  // ---------------------------------------------------------------- properties
  size_t dim() const { return dim_; }
  Metric metric() const { return metric_; }
  size_t m() const { return m_; }
  size_t ef_construction() const { return efc_; }
  uint64_t seed() const { return seed_; }
  size_t ef_search() const { return ef_search_.load(std::memory_order_relaxed); }
  int codes() const { return codes_; }
  // Codes mode: best candidates of the beam rescored with float32 rows (0: auto, max(3k, 20); at least k).
  size_t rescore() const { return rescore_.load(std::memory_order_relaxed); }
  void set_rescore(size_t r) { rescore_.store(r, std::memory_order_relaxed); }
  size_t record_bytes() const { return rec_bytes_; }
  // Codes mode, for tests: the grid, a node's codes (code_dim bytes) and |x|^2, and walk keys
  // of a query (as given: the caller normalises cosine queries) for nodes by internal id.
  std::pair<std::vector<float>, std::vector<float>> code_grid() const {
    std::shared_lock<std::shared_mutex> r(rw_);
    return {qmu_, qstep_};
  }
  void node_codes(uint32_t id, int8_t* out, float* norm2) const {
    std::shared_lock<std::shared_mutex> r(rw_);
    if (id >= n_) throw std::invalid_argument("node id out of range");
    const char* rec = records_.data() + static_cast<size_t>(id) * rec_bytes_;
    std::memcpy(out, rec, cd_);
    std::memcpy(norm2, rec + cd_, sizeof(float));
  }
  float code_keys(const float* q, const uint32_t* ids, size_t cnt, int16_t* qq, float* keys) const {
    std::shared_lock<std::shared_mutex> r(rw_);
    if (qstep_.empty()) throw std::invalid_argument("the index has no code grid yet (empty)");
    for (size_t i = 0; i < cnt; ++i)
      if (ids[i] >= n_) throw std::invalid_argument("node id out of range");
    const float t = encode_query(q, qstep_.data(), dim_, cd_, qq);
    cbatch_(CodeQuery{qq, t, metric_ == Metric::L2, cd_}, records_.data(), rec_bytes_, ids, cnt, keys);
    return t;
  }
  // Codes mode: bytes of the float32 rows array (held or mapped), which the walk never reads.
  size_t row_bytes() const {
    std::shared_lock<std::shared_mutex> r(rw_);
    return rows_.capacity();
  }
  void set_ef_search(size_t ef) {
    if (ef < 1) throw std::invalid_argument("ef_search must be positive");
    ef_search_.store(ef, std::memory_order_relaxed);
  }
  size_t live() const { return live_.load(std::memory_order_relaxed); }
  size_t rows() const {
    std::shared_lock<std::shared_mutex> r(rw_);
    return n_;
  }
  uint64_t label_bound() const {
    std::shared_lock<std::shared_mutex> r(rw_);
    return label_bound_;
  }
  bool mapped() const {
    std::shared_lock<std::shared_mutex> r(rw_);
    return static_cast<bool>(mapping_);
  }
  size_t nbytes() const {
    std::shared_lock<std::shared_mutex> r(rw_);
    size_t b = records_.capacity() + upper_.capacity() + rows_.capacity();
    b += labels_.capacity() * 8 + levels_.capacity() + state_.capacity() + upper_off_.capacity() * 8;
    b += live_bits_.capacity() * 8;
    b += label_to_id_.size() * (sizeof(uint64_t) + sizeof(uint32_t) + 2 * sizeof(void*));
    return b;
  }
  void set_level(Level level) {
    level_ = clamp_level(level);
    kern_ = graph_kernels(level_, metric_ == Metric::L2, dim_);
    cbatch_ = code_batch_kernel(level_);
  }
  double scan_threshold(size_t ef) const { return graph_scan_threshold(n_, ef); }

  // Labels of all nodes, by internal id (tombstoned ones included).
  std::vector<uint64_t> labels() const {
    std::shared_lock<std::shared_mutex> r(rw_);
    return std::vector<uint64_t>(labels_.begin(), labels_.begin() + n_);
  }

  // ---------------------------------------------------------------- add
  // Inserts m rows with the given labels (or label_bound()...+m-1 when null).
  // Every check happens before anything changes: on error nothing is added.
  //
  // cancel (polled before each row): when it is raised the rows not yet
  // started are dropped again, so the call leaves a prefix of its rows fully
  // linked and the rest absent (their labels free); returns the rows added.
  size_t add(const float* x, size_t m, const uint64_t* labels_in, size_t threads,
             const std::atomic<bool>* cancel = nullptr) {
    std::lock_guard<std::mutex> w(writer_);
    if (!m) return 0;
    ensure_verified();  // an unverified mapped file: its level-0 links before any insert reads them
    size_t n0;
    const uint64_t bound0 = label_bound_;
    {
      std::unique_lock<std::shared_mutex> ex(rw_);
      n0 = n_;
      if (n0 + m >= std::numeric_limits<uint32_t>::max()) throw std::invalid_argument("too many rows for one index");
      std::vector<uint64_t> labs(m);
      for (size_t i = 0; i < m; ++i) labs[i] = labels_in ? labels_in[i] : label_bound_ + i;
      check_new_labels(labs);
      bool still_identity = identity_;
      for (size_t i = 0; i < m && still_identity; ++i) still_identity = labs[i] == n0 + i;
      grow(n0 + m, x, m, labs);  // may throw bad_alloc before any visible change
      if (identity_ && !still_identity) {
        for (size_t i = 0; i < n0; ++i) label_to_id_.emplace(labels_[i], static_cast<uint32_t>(i));
        identity_ = false;
      }
      if (!identity_)
        for (size_t i = 0; i < m; ++i) label_to_id_.emplace(labs[i], static_cast<uint32_t>(n0 + i));
      for (size_t i = 0; i < m; ++i) label_bound_ = std::max(label_bound_, labs[i] + 1);
      n_ = n0 + m;
    }
    std::shared_lock<std::shared_mutex> sh(rw_);
    size_t first = n0;
    if (entry_.load(std::memory_order_acquire) == kEmptyEntry) {
      HnswScratch s;
      insert(static_cast<uint32_t>(first++), s);
    }
    std::atomic<size_t> next{first};
    const size_t nt = std::max<size_t>(1, std::min(threads, n0 + m - first));
    parallel_for(nt, nt, [&](size_t) {
      ScratchLease lease(*this);
      HnswScratch& s = *lease.s;
      // Every index handed out is inserted, so the rows started form a prefix.
      while (!(cancel && cancel->load(std::memory_order_relaxed))) {
        const size_t i = next.fetch_add(1);
        if (i >= n0 + m) break;
        insert(static_cast<uint32_t>(i), s);
      }
    });
    const size_t done = std::min(next.load(), n0 + m);
    if (done == n0 + m) return m;
    sh.unlock();
    truncate(done, bound0);
    return done - n0;
  }

  // ---------------------------------------------------------------- search
  // Top-k for nq queries; labels -1 / scores -inf pad rows with fewer than k
  // eligible results. Scores are similarities (ip, cosine, -squared l2).
  // filter_mode (for tests and calibration): 0 auto, 1 always walk the graph, 2 always scan.
  // out_stats (optional, nq x 3): distances computed, nodes expanded, rows scanned exactly.
  // cancel (polled before each query): remaining queries are skipped; the caller discards the output.
  void search(const float* queries, size_t nq, size_t k, size_t ef, const AllowSpec& allow, size_t threads,
              int64_t* out_labels, float* out_scores, int filter_mode = 0, uint64_t* out_stats = nullptr,
              const std::atomic<bool>* cancel = nullptr) const {
    std::shared_lock<std::shared_mutex> r(rw_);
    std::vector<uint64_t> filter_bits;
    Eligible elig{live_bits_.data(), live()};
    bool scan = false;
    std::vector<uint32_t> filter_list;
    const size_t beam = std::max(ef, k);
    if (allow.labels && filter_mode != 1 && (filter_mode == 2 || scan_exactly(allow.nlabels, k, n_, beam))) {
      // Few allowed labels: scan them directly, no bitset over all rows.
      filter_list.reserve(allow.nlabels);
      for (size_t j = 0; j < allow.nlabels; ++j) {
        const uint32_t id = id_of(allow.labels[j]);
        if (elig.test(id)) filter_list.push_back(id);
      }
      // Memory order, duplicates dropped (labels usually arrive sorted already).
      if (!std::is_sorted(filter_list.begin(), filter_list.end())) std::sort(filter_list.begin(), filter_list.end());
      filter_list.erase(std::unique(filter_list.begin(), filter_list.end()), filter_list.end());
      elig = Eligible{nullptr, filter_list.size(), filter_list.data()};
      scan = true;
    } else if (allow.active()) {
      filter_bits = allowed_live_bits(allow);
      size_t c = 0;
      for (uint64_t w : filter_bits) c += static_cast<size_t>(__builtin_popcountll(w));
      elig = Eligible{filter_bits.data(), c};
      scan = filter_mode == 0 ? scan_exactly(c, k, n_, beam) : filter_mode == 2;
    }
    if (n_ == 0) elig.count = 0;
    threads = std::max<size_t>(1, std::min(threads, nq));
    parallel_for(threads, threads, [&](size_t t) {
      ScratchLease lease(*this);
      HnswScratch& s = *lease.s;
      s.prepare(n_, m0_, dim_);
      const size_t q0 = nq * t / threads, q1 = nq * (t + 1) / threads;
      for (size_t q = q0; q < q1; ++q) {
        if (cancel && cancel->load(std::memory_order_relaxed)) break;
        s.ndist = s.nhops = s.nscan = 0;
        search_one(queries + q * dim_, k, ef, elig, scan, s, out_labels + q * k, out_scores + q * k);
        if (out_stats) {
          out_stats[3 * q] = s.ndist;
          out_stats[3 * q + 1] = s.nhops;
          out_stats[3 * q + 2] = s.nscan;
        }
      }
    });
  }

  // ---------------------------------------------------------------- deletes
  // Returns how many labels changed state. Unknown labels: invalid_argument, nothing changed.
  size_t set_deleted(const int64_t* labels, size_t cnt, bool deleted) {
    std::shared_lock<std::shared_mutex> r(rw_);
    std::vector<uint32_t> ids(cnt);
    for (size_t i = 0; i < cnt; ++i) ids[i] = id_of(labels[i]);
    size_t changed = 0;
    for (uint32_t id : ids) {
      std::lock_guard<std::mutex> g(node_lock(id));
      const uint8_t st = state_[id];
      const uint8_t ns = deleted ? (st | kDeleted) : (st & ~kDeleted);
      if (ns == st) continue;
      ++changed;
      state_[id] = ns;
      update_live(id, st, ns);
    }
    return changed;
  }

  bool is_deleted(int64_t label) const {
    std::shared_lock<std::shared_mutex> r(rw_);
    return state_[id_of(label)] & kDeleted;
  }

  // Save / load: hnsw_io.hpp.
  void save(const std::string& path) const;
  static std::unique_ptr<HNSWGraph> load(const std::string& path, bool use_mmap, bool verify = true);
  // CRC-32C of the payload of the file this graph was last saved to or loaded from (0: neither).
  uint32_t file_crc() const { return file_crc_; }
  bool verified() const { return !unverified_; }

 private:
  friend struct HnswFile;
  static constexpr uint64_t kEmptyEntry = ~uint64_t{0};
  static constexpr uint8_t kReady = 1, kDeleted = 2;
  static constexpr size_t kStripes = 1024;

  // ---------------------------------------------------------------- storage access
  // The float32 row of a node: in its level-0 record, or (codes mode) in rows_.
  const char* fbase() const { return codes_ ? rows_.data() : records_.data(); }
  size_t fstride() const { return codes_ ? dim_ * sizeof(float) : rec_bytes_; }
  const float* vec(uint32_t id) const { return reinterpret_cast<const float*>(fbase() + id * fstride()); }
  float* vec_mut(uint32_t id) { return const_cast<float*>(vec(id)); }
  char* rec_mut(uint32_t id) { return records_.data() + static_cast<size_t>(id) * rec_bytes_; }
  FloatScorer float_scorer(const float* q) const { return FloatScorer{&kern_, q, fbase(), fstride(), dim_}; }
  uint32_t* links(uint32_t id, int lev) const {
    if (lev == 0) return reinterpret_cast<uint32_t*>(records_.data() + id * rec_bytes_ + links_off_);
    return reinterpret_cast<uint32_t*>(upper_.data()) + upper_off_[id] + (lev - 1) * (m_ + 1);
  }
  static uint32_t load_count(const uint32_t* l) { return __atomic_load_n(l, __ATOMIC_ACQUIRE); }
  static uint32_t load_link(const uint32_t* l, size_t j) { return __atomic_load_n(l + 1 + j, __ATOMIC_RELAXED); }
  // Writes a whole list: links first, then the count (release), so a reader
  // that sees the new count also sees the new links.
  static void store_list(uint32_t* l, const HnswKeyId* items, size_t cnt) {
    for (size_t j = 0; j < cnt; ++j) __atomic_store_n(l + 1 + j, items[j].id, __ATOMIC_RELAXED);
    __atomic_store_n(l, static_cast<uint32_t>(cnt), __ATOMIC_RELEASE);
  }
  std::mutex& node_lock(uint32_t id) const { return node_locks_[id % kStripes]; }

  // Scratch buffers are pooled so a one-query call allocates nothing.
  struct ScratchLease {
    const HNSWGraph& g;
    std::unique_ptr<HnswScratch> s;
    explicit ScratchLease(const HNSWGraph& graph) : g(graph) {
      std::lock_guard<std::mutex> l(g.pool_mutex_);
      if (g.pool_.empty()) {
        s.reset(new HnswScratch);
      } else {
        s = std::move(g.pool_.back());
        g.pool_.pop_back();
      }
    }
    ~ScratchLease() {
      std::lock_guard<std::mutex> l(g.pool_mutex_);
      if (g.pool_.size() < 64) g.pool_.push_back(std::move(s));
    }
  };

  static uint64_t pack_entry(int level, uint32_t id) { return (static_cast<uint64_t>(level) << 32) | id; }
  static int entry_level(uint64_t e) { return static_cast<int>(e >> 32); }
  static uint32_t entry_id(uint64_t e) { return static_cast<uint32_t>(e); }

  // Level of node id: exponential with mL = 1/ln(m), drawn from a hash of
  // (seed, id) so a graph is reproducible without storing generator state.
  int draw_level(uint64_t id) const {
    uint64_t z = seed_ + 0x9E3779B97F4A7C15ull * (id + 1);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    const double u = (static_cast<double>(z >> 11) + 1.0) * (1.0 / 9007199254740992.0);  // (0, 1]
    return std::min(kHnswMaxLevel, static_cast<int>(-std::log(u) * ml_));
  }

  uint32_t id_of(int64_t label) const {
    if (label < 0) throw std::invalid_argument("label " + std::to_string(label) + " is negative");
    if (identity_) {
      if (static_cast<uint64_t>(label) >= n_) throw std::invalid_argument("label " + std::to_string(label) + " is not in the index");
      return static_cast<uint32_t>(label);
    }
    auto it = label_to_id_.find(static_cast<uint64_t>(label));
    if (it == label_to_id_.end()) throw std::invalid_argument("label " + std::to_string(label) + " is not in the index");
    return it->second;
  }

  void check_new_labels(const std::vector<uint64_t>& labs) const {
    std::vector<uint64_t> sorted(labs);
    std::sort(sorted.begin(), sorted.end());
    for (size_t i = 0; i < sorted.size(); ++i) {
      if (sorted[i] > kMaxLabel) throw std::invalid_argument("labels must be below 2**63");
      if (i && sorted[i] == sorted[i - 1])
        throw std::invalid_argument("duplicate label " + std::to_string(sorted[i]) + " in ids");
    }
    for (uint64_t l : labs) {
      bool present = identity_ ? l < n_ : label_to_id_.count(l) > 0;
      if (present) throw std::invalid_argument("label " + std::to_string(l) + " is already in the index");
    }
  }

  // Grows every array to `total` nodes and writes the new rows (unlinked,
  // not yet visible). Called under the exclusive lock.
  void grow(size_t total, const float* x, size_t m, const std::vector<uint64_t>& labs) {
    const size_t n0 = n_;
    if (codes_ && qmu_.empty()) fit_codes(x, m);  // the first rows added fix the code grid
    std::vector<uint8_t> lv(m);
    size_t upper_add = 0;
    for (size_t i = 0; i < m; ++i) {
      lv[i] = static_cast<uint8_t>(draw_level(n0 + i));
      upper_add += lv[i] * (m_ + 1);
    }
    records_.reserve(total * rec_bytes_, n0 * rec_bytes_);
    if (codes_) rows_.reserve(total * dim_ * sizeof(float), n0 * dim_ * sizeof(float));
    upper_.reserve((upper_words_ + upper_add) * 4, upper_words_ * 4);
    // Grow by half only when full: growing on every add compounded (1.5^adds).
    if (total > labels_.capacity()) labels_.reserve(std::max(total, labels_.capacity() * 3 / 2));
    levels_.reserve(labels_.capacity());
    state_.reserve(labels_.capacity());
    upper_off_.reserve(labels_.capacity());
    live_bits_.reserve((labels_.capacity() + 63) / 64);
    // From here on nothing can fail (capacity is reserved).
    for (size_t i = 0; i < m; ++i) {
      const uint32_t id = static_cast<uint32_t>(n0 + i);
      float* v = vec_mut(id);
      std::memcpy(v, x + i * dim_, dim_ * sizeof(float));
      if (metric_ == Metric::Cosine) normalize_row(v, dim_);
      std::memset(rec_mut(id) + links_off_, 0, rec_bytes_ - links_off_);
      if (codes_) encode_node(id);
      labels_.push_back(labs[i]);
      levels_.push_back(lv[i]);
      state_.push_back(0);
      upper_off_.push_back(upper_words_);
      uint32_t* up = reinterpret_cast<uint32_t*>(upper_.data()) + upper_words_;
      std::memset(up, 0, lv[i] * (m_ + 1) * 4);
      upper_words_ += lv[i] * (m_ + 1);
    }
    live_bits_.resize((total + 63) / 64, 0);
    maybe_drop_mapping();
  }

  // Codes mode: per-dimension mean and step from (a sample of) the first rows:
  // step = the 99.9th percentile of |x_i - mu_i| over 127, so a few outliers
  // clip instead of coarsening every code.
  void fit_codes(const float* x, size_t m) {
    const size_t take = std::min<size_t>(m, 20000);
    std::vector<float> sample(take * dim_);
    for (size_t j = 0; j < take; ++j) {
      const size_t i = take == m ? j : j * m / take;
      std::memcpy(&sample[j * dim_], x + i * dim_, dim_ * sizeof(float));
      if (metric_ == Metric::Cosine) normalize_row(&sample[j * dim_], dim_);
    }
    std::vector<float> mu(dim_, 0.0f), step(dim_, 1.0f), col(take);
    for (size_t d = 0; d < dim_; ++d) {
      double acc = 0;
      for (size_t j = 0; j < take; ++j) acc += sample[j * dim_ + d];
      mu[d] = static_cast<float>(acc / static_cast<double>(std::max<size_t>(take, 1)));
      for (size_t j = 0; j < take; ++j) col[j] = std::fabs(sample[j * dim_ + d] - mu[d]);
      float q = 0;
      if (take) {
        const size_t at = std::min(take - 1, static_cast<size_t>(0.999 * static_cast<double>(take)));
        std::nth_element(col.begin(), col.begin() + at, col.end());
        q = col[at];
      }
      step[d] = q > 0 && std::isfinite(q) ? q / 127.0f : 1.0f;
    }
    set_code_params(std::move(mu), std::move(step));
  }

  void set_code_params(std::vector<float> mu, std::vector<float> step) {
    qinv_.resize(dim_);
    for (size_t d = 0; d < dim_; ++d) qinv_[d] = 1.0f / step[d];
    qmu_ = std::move(mu);
    qstep_ = std::move(step);
  }

  void encode_node(uint32_t id) {
    char* r = rec_mut(id);
    const float* v = vec(id);
    encode_row(v, qmu_.data(), qinv_.data(), dim_, cd_, reinterpret_cast<int8_t*>(r));
    float n2 = 0;
    for (size_t d = 0; d < dim_; ++d) n2 += v[d] * v[d];
    std::memcpy(r + cd_, &n2, sizeof n2);
  }

  // Drops nodes [keep, n_) again: rows of an interrupted add that were never
  // started (no links to or from them, never ready). bound0: label_bound before that add.
  void truncate(size_t keep, uint64_t bound0) {
    std::unique_lock<std::shared_mutex> ex(rw_);
    uint64_t bound = bound0;
    for (size_t i = keep; i < n_; ++i)
      if (!identity_) label_to_id_.erase(labels_[i]);
    for (size_t i = 0; i < keep; ++i) bound = std::max(bound, labels_[i] + 1);
    upper_words_ = keep < n_ ? upper_off_[keep] : upper_words_;
    labels_.resize(keep);
    levels_.resize(keep);
    state_.resize(keep);
    upper_off_.resize(keep);
    live_bits_.resize((keep + 63) / 64);
    label_bound_ = bound;
    n_ = keep;
  }

  void maybe_drop_mapping() {
    if (mapping_ && records_.owned() && (upper_.owned() || upper_words_ == 0) && (rows_.owned() || !codes_))
      mapping_.reset();
  }

  void update_live(uint32_t id, uint8_t old_state, uint8_t new_state) {
    const bool was = (old_state & kReady) && !(old_state & kDeleted);
    const bool now = (new_state & kReady) && !(new_state & kDeleted);
    if (was == now) return;
    const uint64_t bit = uint64_t{1} << (id & 63);
    if (now) {
      __atomic_fetch_or(&live_bits_[id >> 6], bit, __ATOMIC_RELEASE);
      live_.fetch_add(1, std::memory_order_relaxed);
    } else {
      __atomic_fetch_and(&live_bits_[id >> 6], ~bit, __ATOMIC_RELEASE);
      live_.fetch_sub(1, std::memory_order_relaxed);
    }
  }

  void set_ready(uint32_t id) {
    std::lock_guard<std::mutex> g(node_lock(id));
    const uint8_t st = state_[id];
    state_[id] = st | kReady;
    update_live(id, st, st | kReady);
  }

  // The allow set by label, turned into a bitset over internal ids and ANDed
  // with the live bits: once per call.
  std::vector<uint64_t> allowed_live_bits(const AllowSpec& a) const {
    const size_t words = (n_ + 63) / 64;
    std::vector<uint64_t> bits(words, 0);
    if (a.mask) {
      if (a.mask_len != label_bound_)
        throw std::invalid_argument("allow mask has length " + std::to_string(a.mask_len) +
                                    ", expected label_bound = " + std::to_string(label_bound_) +
                                    " (largest label + 1)");
      if (identity_) {
        for (size_t i = 0; i < n_; ++i) bits[i >> 6] |= static_cast<uint64_t>(a.mask[i] != 0) << (i & 63);
      } else {
        for (size_t i = 0; i < n_; ++i) bits[i >> 6] |= static_cast<uint64_t>(a.mask[labels_[i]] != 0) << (i & 63);
      }
    } else {
      for (size_t j = 0; j < a.nlabels; ++j) {
        const uint32_t id = id_of(a.labels[j]);
        bits[id >> 6] |= uint64_t{1} << (id & 63);
      }
    }
    for (size_t w = 0; w < words; ++w) bits[w] &= __atomic_load_n(&live_bits_[w], __ATOMIC_RELAXED);
    return bits;
  }

  // ---------------------------------------------------------------- graph walks
  // Greedy descent on one upper level: move to the best neighbour until none is better.
  template <class Scorer>
  void greedy(const Scorer& sc, uint32_t& cur, float& cur_key, int lev, HnswScratch& s) const {
    bool changed = true;
    while (changed) {
      changed = false;
      const uint32_t* l = links(cur, lev);
      const size_t cnt = std::min<size_t>(load_count(l), m_);
      for (size_t j = 0; j < cnt; ++j) s.nbr[j] = load_link(l, j);
      ++s.nhops;
      s.ndist += cnt;
      sc.batch(s.nbr.data(), cnt, s.keys.data());
      for (size_t j = 0; j < cnt; ++j)
        if (s.keys[j] < cur_key) {
          cur_key = s.keys[j];
          cur = s.nbr[j];
          changed = true;
        }
    }
  }

  // Beam search with width ef on one level from ep. s.top ends as a max-heap of
  // up to ef eligible nodes; every reachable node may be expanded.
  template <class Scorer, class Elig>
  void search_layer(const Scorer& sc, uint32_t ep, float ep_key, size_t ef, int lev, HnswScratch& s,
                    const Elig& elig) const {
    const size_t maxc = lev == 0 ? m0_ : m_;
    const size_t n = n_;
    s.reset_visited();
    s.cand.clear();
    s.top.clear();
    s.test_and_set(ep);
    s.cand.push_back({ep_key, ep});
    float lower = std::numeric_limits<float>::infinity();
    if (elig(ep)) {
      s.top.push_back({ep_key, ep});
      if (ef <= 1) lower = ep_key;
    }
    while (!s.cand.empty()) {
      const HnswKeyId c = s.cand.front();
      if (c.key > lower) break;
      std::pop_heap(s.cand.begin(), s.cand.end(), key_greater);
      s.cand.pop_back();
      if (!s.cand.empty()) {  // the next candidate's whole link list
        const char* nl = reinterpret_cast<const char*>(links(s.cand.front().id, lev));
        for (size_t o = 0; o < (maxc + 1) * 4; o += 64) _mm_prefetch(nl + o, _MM_HINT_T0);
      }
      const uint32_t* l = links(c.id, lev);
      const size_t cnt = std::min<size_t>(load_count(l), maxc);
      uint64_t* vis = s.visited.data();
      uint32_t* nbr = s.nbr.data();
      size_t nn = 0;
      for (size_t j = 0; j < cnt; ++j) {
        const uint32_t v = load_link(l, j);
        if (v >= n) continue;  // only an unverified mapped file can hold one
        uint64_t& w = vis[v >> 6];
        const uint64_t b = uint64_t{1} << (v & 63);
        if (w & b) continue;
        if (!w) s.touched.push_back(v >> 6);
        w |= b;
        nbr[nn++] = v;
      }
      ++s.nhops;
      if (!nn) continue;
      s.ndist += nn;
      sc.batch(s.nbr.data(), nn, s.keys.data());
      for (size_t j = 0; j < nn; ++j) {
        const float key = s.keys[j];
        if (!(key < lower)) continue;
        const uint32_t v = s.nbr[j];
        s.cand.push_back({key, v});
        std::push_heap(s.cand.begin(), s.cand.end(), key_greater);
        if (elig(v)) {
          s.top.push_back({key, v});
          std::push_heap(s.top.begin(), s.top.end(), key_less);
          if (s.top.size() > ef) {
            std::pop_heap(s.top.begin(), s.top.end(), key_less);
            s.top.pop_back();
          }
          if (s.top.size() >= ef) lower = s.top.front().key;
        }
      }
    }
  }

  // ---------------------------------------------------------------- one query
  void search_one(const float* q_in, size_t k, size_t ef, const Eligible& elig, bool scan, HnswScratch& s,
                  int64_t* out_labels, float* out_scores) const {
    const float* q = q_in;
    if (metric_ == Metric::Cosine) {
      std::memcpy(s.query.data(), q_in, dim_ * sizeof(float));
      normalize_row(s.query.data(), dim_);
      q = s.query.data();
    }
    size_t found = 0;
    const size_t want = std::min(k, elig.count);
    const uint64_t e = entry_.load(std::memory_order_acquire);
    if (want && !scan && e != kEmptyEntry) {
      auto by_key = [&](const HnswKeyId& a, const HnswKeyId& b) {
        return a.key < b.key || (a.key == b.key && labels_[a.id] < labels_[b.id]);
      };
      uint32_t cur = entry_id(e);
      const auto el = [&](uint32_t v) { return elig.test(v); };
      if (codes_) {
        if (s.qcode.size() < cd_) s.qcode.resize(cd_);
        const float t = encode_query(q, qstep_.data(), dim_, cd_, s.qcode.data());
        const CodeScorer sc{cbatch_, CodeQuery{s.qcode.data(), t, metric_ == Metric::L2, cd_}, records_.data(),
                            rec_bytes_};
        float cur_key = sc.pair(cur);
        ++s.ndist;
        for (int lev = entry_level(e); lev > 0; --lev) greedy(sc, cur, cur_key, lev, s);
        search_layer(sc, cur, cur_key, std::max(ef, k), 0, s, el);
        // Rescore the best candidates of the beam with the float32 rows.
        // 0 (auto): 3k, at least 20 -- on MiniLM 30k, 2k already gave the recall of the whole beam.
        const size_t want_r = rescore() ? std::max(rescore(), k) : std::max<size_t>(3 * k, 20);
        const size_t r = std::min(s.top.size(), want_r);
        if (r < s.top.size()) {
          std::nth_element(s.top.begin(), s.top.begin() + r, s.top.end(), key_less);
          s.top.resize(r);
        }
        s.rids.resize(r);
        s.rkeys.resize(r);
        for (size_t j = 0; j < r; ++j) s.rids[j] = s.top[j].id;
        kern_.batch(q, rows_.data(), dim_ * sizeof(float), s.rids.data(), r, dim_, s.rkeys.data());
        s.ndist += r;
        for (size_t j = 0; j < r; ++j) s.top[j].key = s.rkeys[j];
      } else {
        const FloatScorer sc = float_scorer(q);
        float cur_key = sc.pair(cur);
        ++s.ndist;
        for (int lev = entry_level(e); lev > 0; --lev) greedy(sc, cur, cur_key, lev, s);
        search_layer(sc, cur, cur_key, std::max(ef, k), 0, s, el);
      }
      std::sort(s.top.begin(), s.top.end(), by_key);
      found = std::min(k, s.top.size());
      for (size_t j = 0; j < found; ++j) {
        out_labels[j] = static_cast<int64_t>(labels_[s.top[j].id]);
        out_scores[j] = -s.top[j].key;
      }
    }
    // Exact scan: chosen for small allowed sets, and the safety net whenever
    // the walk found fewer than k of the eligible rows.
    if (found < want) {
      s.nscan += elig.count;
      s.ndist += elig.count;
      found = scan_eligible(q, k, elig, out_labels, out_scores);
    }
    for (size_t j = found; j < k; ++j) {
      out_labels[j] = -1;
      out_scores[j] = -std::numeric_limits<float>::infinity();
    }
  }

  size_t scan_eligible(const float* q, size_t k, const Eligible& elig, int64_t* out_labels, float* out_scores) const {
    TopK<float> top(k);
    if (elig.list) {
      float keys[64];
      for (size_t i = 0; i < elig.count; i += 64) {
        const size_t cnt = std::min<size_t>(64, elig.count - i);
        kern_.batch(q, fbase(), fstride(), elig.list + i, cnt, dim_, keys);
        for (size_t j = 0; j < cnt; ++j)
          if (keys[j] <= top.threshold()) top.push(keys[j], static_cast<int64_t>(labels_[elig.list[i + j]]));
      }
      return emit(top, out_labels, out_scores);
    }
    const size_t words = (n_ + 63) / 64;
    uint32_t ids[64];
    float keys[64];
    for (size_t w = 0; w < words; ++w) {
      uint64_t bits = __atomic_load_n(elig.bits + w, __ATOMIC_RELAXED);
      size_t cnt = 0;
      while (bits) {
        ids[cnt++] = static_cast<uint32_t>(w * 64 + static_cast<size_t>(__builtin_ctzll(bits)));
        bits &= bits - 1;
      }
      if (!cnt) continue;
      kern_.batch(q, fbase(), fstride(), ids, cnt, dim_, keys);
      for (size_t j = 0; j < cnt; ++j)
        if (keys[j] <= top.threshold()) top.push(keys[j], static_cast<int64_t>(labels_[ids[j]]));
    }
    return emit(top, out_labels, out_scores);
  }

  static size_t emit(TopK<float>& top, int64_t* out_labels, float* out_scores) {
    auto best = top.sorted();
    for (size_t j = 0; j < best.size(); ++j) {
      out_labels[j] = best[j].id;
      out_scores[j] = -best[j].key;
    }
    return best.size();
  }

  // ---------------------------------------------------------------- insertion
  // The neighbour-selection heuristic: keep a candidate only if it is closer
  // to the base than to every neighbour already kept. `cands` sorted ascending.
  // Distances to the kept neighbours are computed 8 at a time with the batch
  // kernel, stopping at the first chunk that rejects the candidate.
  void select_neighbors(const std::vector<HnswKeyId>& cands, size_t M, std::vector<HnswKeyId>& out,
                        HnswScratch& s) const {
    out.clear();
    if (cands.size() <= M) {
      out = cands;
      return;
    }
    s.kept.clear();
    float keys[8];
    for (const HnswKeyId& c : cands) {
      if (out.size() >= M) break;
      const float* cv = vec(c.id);
      bool good = true;
      for (size_t o = 0; o < out.size() && good; o += 8) {
        const size_t cnt = std::min<size_t>(8, out.size() - o);
        kern_.batch(cv, fbase(), fstride(), s.kept.data() + o, cnt, dim_, keys);
        for (size_t j = 0; j < cnt; ++j) good = good && !(keys[j] < c.key);
      }
      if (good) {
        out.push_back(c);
        s.kept.push_back(c.id);
      }
    }
  }

  void insert(uint32_t q, HnswScratch& s) {
    s.prepare(n_, m0_, dim_);
    const float* v = vec(q);
    const int L = levels_[q];
    std::unique_lock<std::mutex> top_lock(entry_mutex_);
    const uint64_t e = entry_.load(std::memory_order_acquire);
    if (e == kEmptyEntry) {
      entry_.store(pack_entry(L, q), std::memory_order_release);
      top_lock.unlock();
      set_ready(q);
      return;
    }
    const int maxl = entry_level(e);
    if (L <= maxl) top_lock.unlock();  // only a new top node holds it to the end
    uint32_t cur = entry_id(e);
    const FloatScorer sc = float_scorer(v);
    float cur_key = sc.pair(cur);
    for (int lev = maxl; lev > L; --lev) greedy(sc, cur, cur_key, lev, s);
    for (int lev = std::min(L, maxl); lev >= 0; --lev) {
      search_layer(sc, cur, cur_key, efc_, lev, s, [](uint32_t) { return true; });
      std::sort(s.top.begin(), s.top.end(), key_less);
      s.top.erase(std::remove_if(s.top.begin(), s.top.end(), [&](const HnswKeyId& x) { return x.id == q; }),
                  s.top.end());
      if (s.top.empty()) continue;
      cur = s.top[0].id;
      cur_key = s.top[0].key;
      select_neighbors(s.top, lev == 0 ? m0_ : m_, s.sel, s);
      connect(q, lev, s);
    }
    if (L > maxl) entry_.store(pack_entry(L, q), std::memory_order_release);
    set_ready(q);
  }

  // Links q to s.sel on level lev and each selected node back to q, pruning
  // a full list with the heuristic.
  void connect(uint32_t q, int lev, HnswScratch& s) {
    const size_t maxc = lev == 0 ? m0_ : m_;
    {
      std::lock_guard<std::mutex> g(node_lock(q));
      store_list(links(q, lev), s.sel.data(), s.sel.size());
    }
    s.chosen = s.sel;  // s.sel is reused by the pruning below
    for (const HnswKeyId& nb : s.chosen) {
      std::lock_guard<std::mutex> g(node_lock(nb.id));
      uint32_t* l = links(nb.id, lev);
      const size_t cnt = std::min<size_t>(load_count(l), maxc);
      bool present = false;
      for (size_t j = 0; j < cnt && !present; ++j) present = load_link(l, j) == q;
      if (present) continue;
      if (cnt < maxc) {
        __atomic_store_n(l + 1 + cnt, q, __ATOMIC_RELAXED);
        __atomic_store_n(l, static_cast<uint32_t>(cnt + 1), __ATOMIC_RELEASE);
        continue;
      }
      const float* bv = vec(nb.id);
      s.prune.clear();
      s.prune.push_back({nb.key, q});
      for (size_t j = 0; j < cnt; ++j) s.nbr[j] = load_link(l, j);
      kern_.batch(bv, fbase(), fstride(), s.nbr.data(), cnt, dim_, s.keys.data());
      for (size_t j = 0; j < cnt; ++j) s.prune.push_back({s.keys[j], s.nbr[j]});
      std::sort(s.prune.begin(), s.prune.end(), key_less);
      select_neighbors(s.prune, maxc, s.sel, s);
      store_list(l, s.sel.data(), s.sel.size());
    }
  }

  // ---------------------------------------------------------------- state
  size_t dim_;
  Metric metric_;
  size_t m_, m0_, efc_;
  uint64_t seed_;
  double ml_ = 0;
  int codes_ = kCodesFloat;
  size_t cd_ = 0;  // padded code dimension (codes mode)
  size_t links_off_ = 0, rec_bytes_ = 0;
  Level level_ = Level::Scalar;
  GraphKernels kern_{};
  CodeBatchFn cbatch_ = nullptr;
  std::vector<float> qmu_, qstep_, qinv_;  // codes mode: grid of the codes (empty until the first add)
  GraphBuffer rows_;                       // codes mode: n_ float32 rows (normalised for cosine)
  std::atomic<size_t> rescore_{0};

  size_t n_ = 0;  // nodes allocated (some may still be linking)
  uint64_t label_bound_ = 0;
  bool identity_ = true;  // labels_[i] == i for all i: no map needed
  GraphBuffer records_;   // n_ * rec_bytes_
  GraphBuffer upper_;     // upper_words_ uint32
  size_t upper_words_ = 0;
  std::vector<uint64_t> labels_;
  std::vector<uint8_t> levels_;
  std::vector<uint8_t> state_;  // kReady | kDeleted
  std::vector<uint64_t> upper_off_;
  std::vector<uint64_t> live_bits_;  // ready and not deleted
  std::unordered_map<uint64_t, uint32_t> label_to_id_;
  std::shared_ptr<FileMapping> mapping_;
  mutable uint32_t file_crc_ = 0;
  bool unverified_ = false;  // loaded with verify=false: level-0 links not checked yet
  void ensure_verified();

  std::atomic<uint64_t> entry_{kEmptyEntry};
  std::atomic<size_t> live_{0};
  std::atomic<size_t> ef_search_{64};

  mutable std::shared_mutex rw_;
  std::mutex writer_;
  std::mutex entry_mutex_;
  mutable std::mutex node_locks_[kStripes];
  mutable std::mutex pool_mutex_;
  mutable std::vector<std::unique_ptr<HnswScratch>> pool_;
};

}  // namespace vecsift

#include "vecsift/io/hnsw_io.hpp"
