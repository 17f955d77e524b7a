// CRC-32C (Castagnoli) for file checksums: the SSE4.2 crc32 instruction when
// the CPU has it, a table otherwise. Both give identical values, so a file
// written on one machine verifies on another.
#pragma once

#include <nmmintrin.h>

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace vecsift {

inline const uint32_t* crc32c_table() {
  static const struct Table {
    uint32_t t[256];
    Table() {
      for (uint32_t i = 0; i < 256; ++i) {
        uint32_t c = i;
        for (int k = 0; k < 8; ++k) c = (c >> 1) ^ (0x82F63B78u & (0u - (c & 1u)));
        t[i] = c;
      }
    }
  } table;
  return table.t;
}

inline uint32_t crc32c_scalar(uint32_t crc, const uint8_t* p, size_t n) {
  const uint32_t* t = crc32c_table();
  for (size_t i = 0; i < n; ++i) crc = t[(crc ^ p[i]) & 0xFFu] ^ (crc >> 8);
  return crc;
}

__attribute__((target("sse4.2"))) inline uint32_t crc32c_hw(uint32_t crc, const uint8_t* p, size_t n) {
  uint64_t c = crc;
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t w;
    std::memcpy(&w, p + i, 8);
    c = _mm_crc32_u64(c, w);
  }
  uint32_t c32 = static_cast<uint32_t>(c);
  for (; i < n; ++i) c32 = _mm_crc32_u8(c32, p[i]);
  return c32;
}

// Running form: start with crc32c_init(), feed pieces, finish with crc32c_final().
inline uint32_t crc32c_init() { return 0xFFFFFFFFu; }
inline uint32_t crc32c_final(uint32_t crc) { return crc ^ 0xFFFFFFFFu; }

inline uint32_t crc32c_update(uint32_t crc, const void* data, size_t n) {
  static const bool hw = __builtin_cpu_supports("sse4.2");
  const uint8_t* p = static_cast<const uint8_t*>(data);
  return hw ? crc32c_hw(crc, p, n) : crc32c_scalar(crc, p, n);
}

inline uint32_t crc32c(const void* data, size_t n) { return crc32c_final(crc32c_update(crc32c_init(), data, n)); }

}  // namespace vecsift
