// CRC-32C (Castagnoli) for file checksums. Three implementations, all giving
// identical values, so a file written on one machine verifies on another:
//
//   table        one byte at a time from a 256-entry table (any CPU)
//   serial       the SSE4.2 crc32 instruction, 8 bytes at a time, one stream
//   interleaved  the same instruction on three independent streams at once,
//                combined with a carry-less multiply (SSE4.2 + PCLMULQDQ)
//
// Why interleave: crc32 has a latency of 3 cycles but a throughput of one per
// cycle, and a single stream is a chain of dependent instructions, so it runs
// at a third of what the CPU can do. Cutting a buffer into three runs A|B|C of
// L bytes and computing their CRCs side by side fills the pipeline; the three
// results are then merged with the algebra below.
//
// The algebra. CRC-32C in the reflected convention: a 32-bit register r stands
// for the polynomial R(x) over GF(2) whose coefficient of x^(31-i) is bit i of r
// (bit 0 is the highest power). Feeding a message M of m bits to the register
// gives R' = (R * x^m + M(x) * x^32) mod P, P the Castagnoli polynomial (its
// x^32 term dropped and reflected: 0x82F63B78). This is linear in (R, M), so
//
//   crc(r, A|B) = crc(r, A) * x^(8|B|)  +  crc(0, B)        (mod P)
//
// i.e. the CRC of A, "shifted" over |B| zero bytes, xor the CRC of B from a zero
// register. For three runs of L bytes:
//
//   crc(r, A|B|C) = shift(crcA, 2L) ^ shift(crcB, L) ^ crcC,  crcA = crc(r, A)
//
// The shift by n bytes is a multiplication by the constant K = x^(8n) mod P. With
// pclmulqdq it costs one multiply and one reduction, and the crc32 instruction
// itself does the reduction: crc32_u64(0, w) = W(x) * x^32 mod P, where the 64-bit
// word w stands for W(x) with bit i the coefficient of x^(63-i). A carry-less
// product of two reflected 32-bit values a, b has bit k = sum of a_i b_j over
// i + j = k, a term of degree (31-i)+(31-j) = 62-k; read as such a 64-bit word it
// is therefore A(x) * B(x) * x. So crc32_u64(0, clmul(a, b)) = A * B * x^33 mod P,
// and shifting r by n bytes is crc32_u64(0, clmul(r, x^(8n-33) mod P)). The
// constants x^(8n-33) mod P, for the few run lengths used, are computed once, in
// portable code (gf2_mul, x_pow_mod below).
#pragma once

#include <nmmintrin.h>
#include <wmmintrin.h>

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace vecsift {

namespace crc32c_detail {

constexpr uint32_t kPoly = 0x82F63B78u;  // reflected Castagnoli polynomial, without its x^32 term

// R(x) * x mod P, reflected: the coefficient of x^31 (bit 0) becomes x^32, which is P's lower terms.
inline uint32_t mul_x(uint32_t v) { return (v >> 1) ^ (kPoly & (0u - (v & 1u))); }

// A(x) * B(x) mod P, reflected, by Horner's rule from A's highest power (bit 0) down.
inline uint32_t gf2_mul(uint32_t a, uint32_t b) {
  uint32_t r = 0;
  for (int i = 0; i < 32; ++i) {
    r = mul_x(r);
    if ((a >> i) & 1u) r ^= b;
  }
  return r;
}

// x^n mod P, reflected (x^0 is bit 31), by repeated squaring.
inline uint32_t x_pow_mod(uint64_t n) {
  uint32_t result = 0x80000000u, square = 0x40000000u;  // 1 and x
  for (; n; n >>= 1) {
    if (n & 1u) result = gf2_mul(result, square);
    square = gf2_mul(square, square);
  }
  return result;
}

// Run lengths of the interleaved loop, longest first: a buffer takes as many rounds of three runs of the
// longest length as fit, then of the next, ...; what is left (under 3 * 128 bytes) goes serially. The
// long runs keep the merges rare; the short ones keep the serial tail of a 64 KiB block small.
constexpr size_t kRuns[] = {4096, 512, 128};
constexpr int kNumRuns = sizeof(kRuns) / sizeof(kRuns[0]);

struct ShiftConstants {
  uint64_t one[kNumRuns];  // x^(8L - 33) mod P: shifts a register over L zero bytes
  uint64_t two[kNumRuns];  // x^(16L - 33) mod P: over 2L zero bytes
  ShiftConstants() {
    for (int i = 0; i < kNumRuns; ++i) {
      one[i] = x_pow_mod(8 * kRuns[i] - 33);
      two[i] = x_pow_mod(16 * kRuns[i] - 33);
    }
  }
};

inline const ShiftConstants& shift_constants() {
  static const ShiftConstants k;
  return k;
}

inline uint64_t load64(const uint8_t* p) {
  uint64_t w;
  std::memcpy(&w, p, 8);
  return w;
}

}  // namespace crc32c_detail

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

// The register-level functions below take and return the raw register (no initial or final inversion).

inline uint32_t crc32c_scalar(uint32_t crc, const uint8_t* p, size_t n) {
  const uint32_t* t = crc32c_table();
  for (size_t i = 0; i < n; ++i) crc = t[(crc ^ p[i]) & 0xFFu] ^ (crc >> 8);
  return crc;
}

__attribute__((target("sse4.2"))) inline uint32_t crc32c_hw(uint32_t crc, const uint8_t* p, size_t n) {
  uint64_t c = crc;
  size_t i = 0;
  for (; i + 8 <= n; i += 8) c = _mm_crc32_u64(c, crc32c_detail::load64(p + i));
  uint32_t c32 = static_cast<uint32_t>(c);
  for (; i < n; ++i) c32 = _mm_crc32_u8(c32, p[i]);
  return c32;
}

// The register r shifted over the zero bytes whose constant is k (see the algebra at the top).
__attribute__((target("sse4.2,pclmul"))) inline uint64_t crc32c_shift(uint64_t r, uint64_t k) {
  const __m128i prod = _mm_clmulepi64_si128(_mm_cvtsi64_si128(static_cast<long long>(r)),
                                            _mm_cvtsi64_si128(static_cast<long long>(k)), 0x00);
  return _mm_crc32_u64(0, static_cast<uint64_t>(_mm_cvtsi128_si64(prod)));
}

__attribute__((target("sse4.2,pclmul"))) inline uint32_t crc32c_hw3(uint32_t crc, const uint8_t* p, size_t n) {
  using namespace crc32c_detail;
  const ShiftConstants& k = shift_constants();
  uint64_t c = crc;
  for (int t = 0; t < kNumRuns; ++t) {
    const size_t len = kRuns[t];
    while (n >= 3 * len) {
      const uint8_t* a = p;
      const uint8_t* b = p + len;
      const uint8_t* d = p + 2 * len;
      uint64_t ca = c, cb = 0, cd = 0;
      for (size_t i = 0; i < len; i += 8) {
        ca = _mm_crc32_u64(ca, load64(a + i));
        cb = _mm_crc32_u64(cb, load64(b + i));
        cd = _mm_crc32_u64(cd, load64(d + i));
      }
      c = crc32c_shift(ca, k.two[t]) ^ crc32c_shift(cb, k.one[t]) ^ cd;
      p += 3 * len;
      n -= 3 * len;
    }
  }
  return crc32c_hw(static_cast<uint32_t>(c), p, n);
}

enum class Crc32cImpl : int { Table = 0, Serial = 1, Interleaved = 2 };

inline Crc32cImpl crc32c_best_impl() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("sse4.2")) {
    return __builtin_cpu_supports("pclmul") ? Crc32cImpl::Interleaved : Crc32cImpl::Serial;
  }
#endif
  return Crc32cImpl::Table;
}

// Whether this CPU can run `impl` (the table always).
inline bool crc32c_impl_supported(Crc32cImpl impl) {
  return static_cast<int>(impl) <= static_cast<int>(crc32c_best_impl());
}

// Register update with a chosen implementation (tests and benchmarks; the caller checks support).
inline uint32_t crc32c_update_with(Crc32cImpl impl, uint32_t crc, const void* data, size_t n) {
  const uint8_t* p = static_cast<const uint8_t*>(data);
  switch (impl) {
    case Crc32cImpl::Interleaved: return crc32c_hw3(crc, p, n);
    case Crc32cImpl::Serial: return crc32c_hw(crc, p, n);
    default: return crc32c_scalar(crc, p, n);
  }
}

// Running form: start with crc32c_init(), feed pieces, finish with crc32c_final().
inline uint32_t crc32c_init() { return 0xFFFFFFFFu; }
inline uint32_t crc32c_final(uint32_t crc) { return crc ^ 0xFFFFFFFFu; }

inline uint32_t crc32c_update(uint32_t crc, const void* data, size_t n) {
  static const Crc32cImpl impl = crc32c_best_impl();
  return crc32c_update_with(impl, crc, data, n);
}

inline uint32_t crc32c(const void* data, size_t n) { return crc32c_final(crc32c_update(crc32c_init(), data, n)); }

}  // namespace vecsift
