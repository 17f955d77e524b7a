// CPU feature detection and the kernel level chosen once per process.
//
// Kernels for AVX2 and AVX-512 are compiled with per-function target
// attributes, so the module itself runs on any x86-64; the level is picked at
// first use from what the CPU (and OS) support, capped by VECSIFT_SIMD.
#pragma once

#include <cstdlib>
#include <cstring>
#include <string>

namespace vecsift {

enum class Level : int { Scalar = 0, AVX2 = 1, AVX512 = 2 };

inline const char* level_name(Level l) {
  switch (l) {
    case Level::AVX512: return "avx512";
    case Level::AVX2: return "avx2";
    default: return "scalar";
  }
}

struct CpuFeatures {
  bool popcnt = false;
  bool fma = false;
  bool avx2 = false;
  bool avx512f = false;
  bool avx512bw = false;
  bool avx512vpopcntdq = false;
  bool avx512vbmi = false;  // vpermt2b: the pair-layout 1-bit scan (quant_pair_scan.hpp)
};

inline CpuFeatures detect_cpu() {
  CpuFeatures f;
#if defined(__x86_64__) || defined(__i386__)
  // __builtin_cpu_supports also checks that the OS saves the wide registers.
  __builtin_cpu_init();
  f.popcnt = __builtin_cpu_supports("popcnt");
  f.fma = __builtin_cpu_supports("fma");
  f.avx2 = __builtin_cpu_supports("avx2");
  f.avx512f = __builtin_cpu_supports("avx512f");
  f.avx512bw = __builtin_cpu_supports("avx512bw");
  f.avx512vpopcntdq = __builtin_cpu_supports("avx512vpopcntdq");
  f.avx512vbmi = __builtin_cpu_supports("avx512vbmi");
#endif
  return f;
}

inline Level best_level(const CpuFeatures& f) {
  if (f.avx512f && f.avx512bw && f.avx512vpopcntdq && f.fma && f.popcnt) return Level::AVX512;
  if (f.avx2 && f.fma && f.popcnt) return Level::AVX2;
  return Level::Scalar;
}

// Parses VECSIFT_SIMD; returns false for an unknown value.
inline bool parse_level(const char* s, Level* out) {
  if (!s || !*s) return false;
  if (!std::strcmp(s, "scalar")) { *out = Level::Scalar; return true; }
  if (!std::strcmp(s, "avx2")) { *out = Level::AVX2; return true; }
  if (!std::strcmp(s, "avx512")) { *out = Level::AVX512; return true; }
  return false;
}

inline Level min_level(Level a, Level b) {
  return static_cast<int>(a) < static_cast<int>(b) ? a : b;
}

inline Level compute_active_level() {
  Level best = best_level(detect_cpu());
  Level cap;
  if (parse_level(std::getenv("VECSIFT_SIMD"), &cap)) return min_level(best, cap);
  return best;
}

// The level every kernel call uses unless one is passed explicitly.
inline Level active_level() {
  static const Level level = compute_active_level();
  return level;
}

// The best level this CPU supports, ignoring VECSIFT_SIMD.
inline Level hardware_level() {
  static const Level level = best_level(detect_cpu());
  return level;
}

// AVX-512 VBMI, an extra of the AVX-512 level (Ice Lake and Zen 4 have it, Skylake-X not): kernels
// that use it check here and otherwise run their AVX-512 or AVX2 form.
inline bool cpu_has_vbmi() {
  static const bool v = detect_cpu().avx512vbmi;
  return v;
}

// A requested level is honoured only as far as the CPU allows.
inline Level clamp_level(Level requested) { return min_level(requested, hardware_level()); }

}  // namespace vecsift
