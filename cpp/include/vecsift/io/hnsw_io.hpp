// HNSW file format, versions 1 and 2 (little-endian). Version 1: float32
// records. Version 2 (codes mode, int8 codes in the records): the same header
// with `codes` = 1 and two more sections after the upper links: the code grid
// (dim float means, dim float steps; empty when n = 0) and the float32 rows
// (n * dim), mapped with the rest and read only for rescoring and exact scans.
// Float graphs are still written as version 1, so older builds read them.
//
// Version 1 layout:
//
//   [0, 128)   header: magic "VSFTHNSW", version, dim, metric, m, counts,
//              entry point, file size, CRC-32C of the payload, CRC-32C of
//              the header itself (its last 4 bytes)
//   payload    sections, each starting at a 64-byte boundary, zero padded:
//              records (n * rec_bytes: level-0 vectors and links, exactly the
//              in-memory layout, so it can be mapped), labels (n uint64),
//              levels (n uint8), deleted flags (n uint8), upper links
//              (upper_words uint32).
//
// Loading checks, in order: size, magic, header CRC, version, every header
// field against its range and the file size, payload CRC, and then the graph
// itself (link counts and targets, levels, labels, entry point), so a file
// that passes cannot make a search read out of bounds. Saving writes a
// temporary file, fsyncs it and renames it over the target.
#pragma once

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <string>

#include "vecsift/io/checksum.hpp"
#include "vecsift/index/hnsw.hpp"

namespace vecsift {

// A file that is truncated, corrupted, foreign or of another version.
struct CorruptIndex : std::runtime_error {
  using std::runtime_error::runtime_error;
};
// The file system refused (missing file, permissions, disk full).
struct IndexIoError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct HnswHeader {
  char magic[8];
  uint32_t version;
  uint32_t header_bytes;
  uint32_t dim, metric, m, ef_construction;
  uint64_t seed;
  uint64_t n;
  uint64_t upper_words;
  uint64_t label_bound;
  uint64_t file_bytes;
  uint32_t rec_bytes, ef_search;
  uint32_t entry_id;
  int32_t entry_level;  // -1: empty graph
  uint32_t identity;
  uint32_t payload_crc;
  uint32_t codes;  // 0 float32 records (version 1), 1 int8 codes (version 2)
  uint8_t reserved[128 - 104];
  uint32_t header_crc;
};
static_assert(sizeof(HnswHeader) == 128, "header is 128 bytes");

struct HnswFile {
  static constexpr char kMagic[8] = {'V', 'S', 'F', 'T', 'H', 'N', 'S', 'W'};
  static constexpr uint32_t kVersion = 1, kVersionCodes = 2;

  static uint64_t align64(uint64_t x) { return (x + 63) / 64 * 64; }

  struct Layout {
    uint64_t records, labels, levels, state, upper, end;
    uint64_t grid = 0, grid_bytes = 0, rows = 0, rows_bytes = 0;  // version 2
  };
  // Section offsets; false on arithmetic overflow (a crafted header).
  static bool layout(uint64_t n, uint64_t rec_bytes, uint64_t upper_words, Layout* out, uint32_t codes = 0,
                     uint64_t dim = 0) {
    const uint64_t lim = uint64_t{1} << 56;
    if (n > lim / 64 || rec_bytes > (uint64_t{1} << 20) || upper_words > lim) return false;
    if (codes && (dim == 0 || dim > (uint64_t{1} << 16) || n > lim / (4 * dim))) return false;
    Layout l;
    l.records = 128;
    l.labels = align64(l.records + n * rec_bytes);
    l.levels = align64(l.labels + n * 8);
    l.state = align64(l.levels + n);
    l.upper = align64(l.state + n);
    l.end = l.upper + upper_words * 4;
    if (codes) {
      l.grid = align64(l.end);
      l.grid_bytes = n ? 2 * dim * 4 : 0;
      l.rows = align64(l.grid + l.grid_bytes);
      l.rows_bytes = n * dim * 4;
      l.end = l.rows + l.rows_bytes;
    }
    *out = l;
    return true;
  }

  static uint32_t header_crc(const HnswHeader& h) { return crc32c(&h, offsetof(HnswHeader, header_crc)); }

  // ---------------------------------------------------------------- save
  static void write_all(int fd, const void* p, size_t n, const std::string& path) {
    const char* c = static_cast<const char*>(p);
    while (n) {
      ssize_t w = ::write(fd, c, std::min<size_t>(n, size_t{1} << 30));
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) throw IndexIoError("cannot write " + path + ": " + std::strerror(errno));
      c += w;
      n -= static_cast<size_t>(w);
    }
  }

  static void save(const HNSWGraph& g, const std::string& path) {
    std::lock_guard<std::mutex> w(const_cast<HNSWGraph&>(g).writer_);  // no add while saving
    std::shared_lock<std::shared_mutex> r(g.rw_);
    const uint64_t n = g.n_;
    Layout l;
    layout(n, g.rec_bytes_, g.upper_words_, &l, static_cast<uint32_t>(g.codes_), g.dim_);
    std::vector<uint8_t> deleted(n);
    std::vector<float> grid;
    if (g.codes_ && n) {
      grid = g.qmu_;
      grid.insert(grid.end(), g.qstep_.begin(), g.qstep_.end());
    }
    for (size_t i = 0; i < n; ++i) deleted[i] = (g.state_[i] & HNSWGraph::kDeleted) ? 1 : 0;

    struct Piece {
      uint64_t off;
      const void* p;
      uint64_t bytes;
    };
    std::vector<Piece> pieces = {{l.records, g.records_.data(), n * g.rec_bytes_},
                                 {l.labels, g.labels_.data(), n * 8},
                                 {l.levels, g.levels_.data(), n},
                                 {l.state, deleted.data(), n},
                                 {l.upper, g.upper_.data(), g.upper_words_ * 4}};
    if (g.codes_) {
      pieces.push_back({l.grid, grid.data(), l.grid_bytes});
      pieces.push_back({l.rows, g.rows_.data(), l.rows_bytes});
    }
    static const char zeros[64] = {};
    uint32_t crc = crc32c_init();
    uint64_t pos = 128;
    for (const Piece& pc : pieces) {
      crc = crc32c_update(crc, zeros, pc.off - pos);
      if (pc.bytes) crc = crc32c_update(crc, pc.p, pc.bytes);
      pos = pc.off + pc.bytes;
    }

    HnswHeader h;
    std::memset(&h, 0, sizeof h);
    std::memcpy(h.magic, kMagic, 8);
    h.version = g.codes_ ? kVersionCodes : kVersion;
    h.codes = static_cast<uint32_t>(g.codes_);
    h.header_bytes = sizeof(HnswHeader);
    h.dim = static_cast<uint32_t>(g.dim_);
    h.metric = static_cast<uint32_t>(g.metric_);
    h.m = static_cast<uint32_t>(g.m_);
    h.ef_construction = static_cast<uint32_t>(g.efc_);
    h.seed = g.seed_;
    h.n = n;
    h.upper_words = g.upper_words_;
    h.label_bound = g.label_bound_;
    h.file_bytes = l.end;
    h.rec_bytes = static_cast<uint32_t>(g.rec_bytes_);
    h.ef_search = static_cast<uint32_t>(std::min<size_t>(g.ef_search(), 0xFFFFFFFFu));
    const uint64_t e = g.entry_.load();
    h.entry_id = e == HNSWGraph::kEmptyEntry ? 0 : HNSWGraph::entry_id(e);
    h.entry_level = e == HNSWGraph::kEmptyEntry ? -1 : HNSWGraph::entry_level(e);
    h.identity = g.identity_ ? 1 : 0;
    h.payload_crc = crc32c_final(crc);
    h.header_crc = header_crc(h);
    g.file_crc_ = h.payload_crc;

    const std::string tmp = path + ".tmp" + std::to_string(::getpid());
    int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) throw IndexIoError("cannot create " + tmp + ": " + std::strerror(errno));
    try {
      write_all(fd, &h, sizeof h, tmp);
      pos = 128;
      for (const Piece& pc : pieces) {
        write_all(fd, zeros, pc.off - pos, tmp);
        if (pc.bytes) write_all(fd, pc.p, pc.bytes, tmp);
        pos = pc.off + pc.bytes;
      }
      if (::fsync(fd) != 0) throw IndexIoError("cannot fsync " + tmp + ": " + std::strerror(errno));
    } catch (...) {
      ::close(fd);
      ::unlink(tmp.c_str());
      throw;
    }
    ::close(fd);
    if (::rename(tmp.c_str(), path.c_str()) != 0) {
      ::unlink(tmp.c_str());
      throw IndexIoError("cannot rename " + tmp + " to " + path + ": " + std::strerror(errno));
    }
    // Make the rename durable: fsync the directory.
    std::string dir = path.find('/') == std::string::npos ? "." : path.substr(0, path.rfind('/'));
    if (dir.empty()) dir = "/";
    int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
      ::fsync(dfd);
      ::close(dfd);
    }
  }

  // ---------------------------------------------------------------- load
  struct ReadOnlyFd {
    int fd;
    explicit ReadOnlyFd(const std::string& path) : fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC)) {
      if (fd < 0) throw IndexIoError("cannot open " + path + ": " + std::strerror(errno));
    }
    ~ReadOnlyFd() { ::close(fd); }
    ReadOnlyFd(const ReadOnlyFd&) = delete;
    ReadOnlyFd& operator=(const ReadOnlyFd&) = delete;
  };

  [[noreturn]] static void corrupt(const std::string& path, const std::string& why) {
    throw CorruptIndex(path + ": " + why);
  }

  static void check_level0(const HNSWGraph& g, const char* rec, uint64_t n, const std::string& path) {
    for (uint64_t i = 0; i < n; ++i) {
      const uint32_t* l0 = reinterpret_cast<const uint32_t*>(rec + i * g.rec_bytes_ + g.links_off_);
      if (l0[0] > g.m0_) corrupt(path, "bad level-0 link count");
      for (uint32_t j = 0; j < l0[0]; ++j)
        if (l0[1 + j] >= n) corrupt(path, "level-0 link out of range");
    }
  }

  // Reads the whole file once: header checks and the payload CRC (what an
  // unverified mmap open skipped). Returns the payload CRC.
  static uint32_t verify_file(const std::string& path) {
    const ReadOnlyFd file(path);
    const int fd = file.fd;
    HnswHeader h;
    if (::pread(fd, &h, sizeof h, 0) != static_cast<ssize_t>(sizeof h)) corrupt(path, "file too short");
    if (std::memcmp(h.magic, kMagic, 8) != 0) corrupt(path, "not a vecsift HNSW file (bad magic)");
    if (h.header_crc != header_crc(h)) corrupt(path, "header checksum mismatch");
    std::vector<char> buf(8 << 20);
    uint32_t crc = crc32c_init();
    uint64_t off = 128;
    for (;;) {
      ssize_t r = ::pread(fd, buf.data(), buf.size(), static_cast<off_t>(off));
      if (r < 0 && errno == EINTR) continue;
      if (r < 0) throw IndexIoError("cannot read " + path + ": " + std::strerror(errno));
      if (r == 0) break;
      crc = crc32c_update(crc, buf.data(), static_cast<size_t>(r));
      off += static_cast<uint64_t>(r);
    }
    if (off != h.file_bytes) corrupt(path, "file size disagrees with its header");
    if (crc32c_final(crc) != h.payload_crc) corrupt(path, "payload checksum mismatch");
    return h.payload_crc;
  }

  // verify=false (mmap only): the open checks the header and the small sections
  // (labels, levels, flags, upper links) and leaves the records on disk: no
  // payload CRC and no level-0 link check, which would page in the whole file.
  // Searches bound-check level-0 links, and the first add() runs the check, so
  // an unverified file can give wrong answers but never an out-of-bounds read;
  // verify_file() reads everything.
  static std::unique_ptr<HNSWGraph> load(const std::string& path, bool use_mmap, bool verify = true) {
    if (!use_mmap) verify = true;
    const ReadOnlyFd file(path);
    const int fd = file.fd;
    struct stat st;
    if (::fstat(fd, &st) != 0) throw IndexIoError("cannot stat " + path + ": " + std::strerror(errno));
    const uint64_t size = static_cast<uint64_t>(st.st_size);
    if (size < sizeof(HnswHeader)) corrupt(path, "file too short for a vecsift HNSW header (" + std::to_string(size) + " bytes)");

    auto read_at = [&](uint64_t off, void* dst, uint64_t bytes) {
      uint64_t done = 0;
      while (done < bytes) {
        ssize_t r = ::pread(fd, static_cast<char*>(dst) + done, std::min<uint64_t>(bytes - done, uint64_t{1} << 30),
                            static_cast<off_t>(off + done));
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) throw IndexIoError("cannot read " + path + ": " + std::strerror(errno));
        if (r == 0) corrupt(path, "file shrank while reading");
        done += static_cast<uint64_t>(r);
      }
    };
    HnswHeader h;
    read_at(0, &h, sizeof h);
    if (std::memcmp(h.magic, kMagic, 8) != 0) corrupt(path, "not a vecsift HNSW file (bad magic)");
    if (h.header_crc != header_crc(h)) corrupt(path, "header checksum mismatch");
    if (h.version != kVersion && h.version != kVersionCodes)
      corrupt(path, "unsupported format version " + std::to_string(h.version) + " (this build reads 1 and 2)");
    if (h.codes != (h.version == kVersionCodes ? 1u : 0u)) corrupt(path, "bad codes field for the format version");
    if (h.header_bytes != sizeof(HnswHeader)) corrupt(path, "bad header size");
    if (h.metric > 2) corrupt(path, "bad metric");
    std::unique_ptr<HNSWGraph> g;
    try {
      g.reset(new HNSWGraph(h.dim, static_cast<Metric>(h.metric), h.m, h.ef_construction, h.seed,
                            static_cast<int>(h.codes)));
    } catch (const std::invalid_argument& e) {
      corrupt(path, std::string("bad header: ") + e.what());
    }
    if (h.rec_bytes != g->rec_bytes_) corrupt(path, "record size does not match dim and m");
    if (h.n >= std::numeric_limits<uint32_t>::max()) corrupt(path, "bad row count");
    const uint64_t n = h.n;
    Layout l;
    if (!layout(n, h.rec_bytes, h.upper_words, &l, h.codes, h.dim)) corrupt(path, "bad section sizes");
    if (h.file_bytes != l.end) corrupt(path, "header sizes disagree with the recorded file size");
    if (size < l.end) corrupt(path, "truncated: " + std::to_string(size) + " bytes, expected " + std::to_string(l.end));
    if (size > l.end) corrupt(path, "trailing bytes after the index");
    if (h.ef_search < 1) corrupt(path, "bad ef_search");

    // Sections: with mmap the big two (records, upper links) are mapped; else
    // every section is read straight into its final buffer (no second copy).
    std::vector<uint8_t> lvv(n), delv(n);
    std::vector<float> grid(l.grid_bytes / 4);
    g->labels_.resize(n);
    const char* rec;
    const uint32_t* upper;
    uint32_t crc = crc32c_init();
    if (use_mmap) {
      auto mapping = std::make_shared<FileMapping>();
      void* p = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
      if (p == MAP_FAILED) throw IndexIoError("cannot map " + path + ": " + std::strerror(errno));
      mapping->addr = p;
      mapping->bytes = size;
      const char* base = static_cast<const char*>(p);
      if (verify) crc = crc32c_update(crc, base + 128, size - 128);
      std::memcpy(g->labels_.data(), base + l.labels, n * 8);
      std::memcpy(lvv.data(), base + l.levels, n);
      std::memcpy(delv.data(), base + l.state, n);
      g->records_.borrow(const_cast<char*>(base + l.records), n * h.rec_bytes);
      g->upper_.borrow(const_cast<char*>(base + l.upper), h.upper_words * 4);
      if (h.codes) {
        std::memcpy(grid.data(), base + l.grid, l.grid_bytes);
        g->rows_.borrow(const_cast<char*>(base + l.rows), l.rows_bytes);
      }
      g->mapping_ = mapping;
    } else {
      g->records_.reserve(n * h.rec_bytes, 0);
      g->upper_.reserve(h.upper_words * 4, 0);
      if (h.codes) g->rows_.reserve(l.rows_bytes, 0);
      struct Piece {
        uint64_t off;
        void* dst;
        uint64_t bytes;
      };
      std::vector<Piece> pieces = {{l.records, g->records_.data(), n * h.rec_bytes},
                                   {l.labels, g->labels_.data(), n * 8},
                                   {l.levels, lvv.data(), n},
                                   {l.state, delv.data(), n},
                                   {l.upper, g->upper_.data(), h.upper_words * 4}};
      if (h.codes) {
        pieces.push_back({l.grid, grid.data(), l.grid_bytes});
        pieces.push_back({l.rows, g->rows_.data(), l.rows_bytes});
      }
      char gap[64];
      uint64_t pos = 128;
      for (const Piece& pc : pieces) {
        read_at(pos, gap, pc.off - pos);
        crc = crc32c_update(crc, gap, pc.off - pos);
        if (pc.bytes) {
          read_at(pc.off, pc.dst, pc.bytes);
          crc = crc32c_update(crc, pc.dst, pc.bytes);
        }
        pos = pc.off + pc.bytes;
      }
    }
    if (verify && crc32c_final(crc) != h.payload_crc) corrupt(path, "payload checksum mismatch");
    g->file_crc_ = h.payload_crc;
    if (h.codes && n) {
      const size_t d = h.dim;
      for (size_t i = 0; i < d; ++i)
        if (!std::isfinite(grid[i]) || !std::isfinite(grid[d + i]) || !(grid[d + i] > 0))
          corrupt(path, "bad code grid");
      g->set_code_params(std::vector<float>(grid.begin(), grid.begin() + d), std::vector<float>(grid.begin() + d, grid.end()));
    }
    rec = g->records_.data();
    upper = reinterpret_cast<const uint32_t*>(g->upper_.data());
    const uint8_t* lv = lvv.data();
    const uint8_t* del = delv.data();

    g->levels_ = lvv;
    g->upper_off_.resize(n);
    uint64_t words = 0;
    const uint64_t per = g->m_ + 1;
    int maxl = -1;
    for (uint64_t i = 0; i < n; ++i) {
      if (lv[i] > kHnswMaxLevel) corrupt(path, "bad node level");
      if (del[i] > 1) corrupt(path, "bad deleted flag");
      g->upper_off_[i] = words;
      words += lv[i] * per;
      maxl = std::max<int>(maxl, lv[i]);
    }
    if (words != h.upper_words) corrupt(path, "upper link count disagrees with node levels");
    if (n == 0 ? h.entry_level != -1
               : (h.entry_id >= n || h.entry_level != maxl || lv[h.entry_id] != static_cast<uint8_t>(maxl)))
      corrupt(path, "bad entry point");

    // Graph: every count in range, every link a node that has that level.
    if (verify) check_level0(*g, rec, n, path);
    else g->unverified_ = true;
    for (uint64_t i = 0; i < n; ++i) {
      const uint32_t* up = upper + g->upper_off_[i];
      for (int lev = 1; lev <= lv[i]; ++lev, up += per) {
        if (up[0] > g->m_) corrupt(path, "bad upper link count");
        for (uint32_t j = 0; j < up[0]; ++j)
          if (up[1 + j] >= n || lv[up[1 + j]] < lev) corrupt(path, "upper link out of range");
      }
    }
    // Labels: unique, below 2**63, label_bound = max + 1.
    bool identity = true;
    uint64_t bound = 0;
    for (uint64_t i = 0; i < n; ++i) {
      if (g->labels_[i] > kMaxLabel) corrupt(path, "bad label");
      identity = identity && g->labels_[i] == i;
      bound = std::max(bound, g->labels_[i] + 1);
    }
    if (bound != h.label_bound || identity != (h.identity != 0)) corrupt(path, "label summary disagrees with labels");
    if (!identity) {
      g->label_to_id_.reserve(n);
      for (uint64_t i = 0; i < n; ++i)
        if (!g->label_to_id_.emplace(g->labels_[i], static_cast<uint32_t>(i)).second) corrupt(path, "duplicate label");
    }

    g->identity_ = identity;
    g->label_bound_ = bound;
    g->n_ = n;
    g->upper_words_ = words;
    g->state_.resize(n);
    g->live_bits_.assign((n + 63) / 64, 0);
    size_t live = 0;
    for (uint64_t i = 0; i < n; ++i) {
      g->state_[i] = HNSWGraph::kReady | (del[i] ? HNSWGraph::kDeleted : 0);
      if (!del[i]) {
        g->live_bits_[i >> 6] |= uint64_t{1} << (i & 63);
        ++live;
      }
    }
    g->live_.store(live);
    g->ef_search_.store(h.ef_search);
    if (n) g->entry_.store(HNSWGraph::pack_entry(h.entry_level, h.entry_id));
    return g;
  }
};

inline void HNSWGraph::save(const std::string& path) const { HnswFile::save(*this, path); }
inline std::unique_ptr<HNSWGraph> HNSWGraph::load(const std::string& path, bool use_mmap, bool verify) {
  return HnswFile::load(path, use_mmap, verify);
}
inline void HNSWGraph::ensure_verified() {
  if (!unverified_) return;
  HnswFile::check_level0(*this, records_.data(), n_, "the mapped index");
  unverified_ = false;
}

}  // namespace vecsift
