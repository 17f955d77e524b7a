// Kernel probe for 1-bit scans (not part of the build): the grouped plane kernel of the product
// (quant_block_queries_avx512) against a prototype "words" layout, where a row's four bytes of a
// word share a dword and are scanned with vpermb (tables as memory operands) and vpdpbusd.
// Checks that every variant gives the scalar scan's integers, then times 30k rows x 512-bit codes
// in 256 KiB chunks, 20 queries a chunk. Needs a CPU with AVX-512 VBMI and VNNI.
//
//   g++ -std=c++17 -O3 -ffp-contract=off -Icpp/include bench/quant_kernel_probe.cpp -o /tmp/probe
//   for m in 0 1 2 3; do /tmp/probe 30000 $m; done
//
// Modes: 0 plane layout, four queries a pass; 1 words layout, four; 2 plane layout, one query (the
// product's single-query scan); 3 words layout, one. Measured 2026-12-07 on an Intel Xeon model 106
// (docs/quantised.md, "Batches of 1- and 2-bit queries"): the words layout was no faster.
#include "vecsift/kernels/quant_scan.hpp"
#include <chrono>
#include <cstdio>
#include <random>
#include <algorithm>
using namespace vecsift;
template <int Q>
__attribute__((target("avx512f,avx512bw,avx512vbmi,avx512vnni"))) inline void words_block(const uint8_t* blk, const uint8_t* const* tw, size_t J, uint32_t* S) {
  const __m512i m0f = _mm512_set1_epi8(0x0f), ones = _mm512_set1_epi8(1);
  const __m512i pos = _mm512_set1_epi32(0x30201000);
  __m512i A0[Q], A1[Q];
  for (int g = 0; g < Q; ++g) A0[g] = A1[g] = _mm512_setzero_si512();
  for (size_t w = 0; w < J / 4; ++w) {
    const __m512i d0 = _mm512_loadu_si512(blk + w * 128), d1 = _mm512_loadu_si512(blk + w * 128 + 64);
    const __m512i l0 = _mm512_ternarylogic_epi32(d0, m0f, pos, 0xEA), h0 = _mm512_ternarylogic_epi32(_mm512_srli_epi16(d0, 4), m0f, pos, 0xEA);
    const __m512i l1 = _mm512_ternarylogic_epi32(d1, m0f, pos, 0xEA), h1 = _mm512_ternarylogic_epi32(_mm512_srli_epi16(d1, 4), m0f, pos, 0xEA);
    for (int g = 0; g < Q; ++g) {
      const uint8_t* t = tw[g] + w * 128;
      const __m512i TL = _mm512_loadu_si512(t), TH = _mm512_loadu_si512(t + 64);
      A0[g] = _mm512_dpbusd_epi32(A0[g], _mm512_add_epi8(_mm512_permutexvar_epi8(l0, TL), _mm512_permutexvar_epi8(h0, TH)), ones);
      A1[g] = _mm512_dpbusd_epi32(A1[g], _mm512_add_epi8(_mm512_permutexvar_epi8(l1, TL), _mm512_permutexvar_epi8(h1, TH)), ones);
    }
  }
  for (int g = 0; g < Q; ++g) { _mm512_store_si512(S + g * 32, A0[g]); _mm512_store_si512(S + g * 32 + 16, A1[g]); }
}
struct SumSink { uint64_t acc = 0; void block(size_t, uint32_t, const uint32_t* S, Level) { for (int l = 0; l < 32; ++l) acc += S[l]; } };
int main(int argc, char** argv) {
  size_t n = argc > 1 ? atol(argv[1]) : 30000, D = 512, J = D / 8, nb = (n + 31) / 32;
  int mode = argc > 2 ? atoi(argv[2]) : 0;  // 0 planes grouped Q=4, 1 words Q=4, 2 planes Q=1 (production single), 3 words Q=1
  std::mt19937 gen(1);
  std::vector<uint8_t> data(nb * J * 32), luts(J * 32), words(nb * J * 32);
  for (auto& c : data) c = gen();
  for (size_t j = 0; j < J; ++j) for (int h = 0; h < 2; ++h) { uint8_t q[4]; for (auto& v : q) v = gen() % 16; for (int x = 0; x < 16; ++x) { int s = 0; for (int b = 0; b < 4; ++b) if (x >> b & 1) s += q[b]; luts[j * 32 + h * 16 + x] = s; } }
  // words layout: byte j of row `lane` of block b at b*J*32 + ((j/4)*32 + lane)*4 + j%4
  for (size_t b = 0; b < nb; ++b) for (size_t j = 0; j < J; ++j) for (size_t l = 0; l < 32; ++l)
    words[b * J * 32 + ((j / 4) * 32 + l) * 4 + j % 4] = data[b * J * 32 + j * 32 + l];
  AlignedBytes wide; quant_wide_tables(Level::AVX512, luts.data(), J, 1, wide);
  AlignedBytes tw(J * 32);  // per word w: lo tables of bytes 4w..4w+3, then hi tables
  for (size_t w = 0; w < J / 4; ++w) for (int k = 0; k < 4; ++k) { std::memcpy(&tw[w * 128 + k * 16], &luts[(4 * w + k) * 32], 16); std::memcpy(&tw[w * 128 + 64 + k * 16], &luts[(4 * w + k) * 32 + 16], 16); }
  QuantBlocks s{data.data(), 1, J, nb, 0xFFFFFFFFu, nullptr};
  SumSink ref; quant_sums(Level::Scalar, s, luts.data(), 1, 0, nb, ref);
  const int Q = (mode == 0 || mode == 1) ? 4 : 1, QR = 20;
  std::vector<double> ts; bool ok = true;
  alignas(64) uint32_t S[4 * 32];
  for (int r = 0; r < 15; ++r) {
    uint64_t acc = 0; auto t0 = std::chrono::steady_clock::now();
    for (size_t b0 = 0; b0 < nb; b0 += 128) for (int q = 0; q < QR; q += Q) {
      const size_t b1 = std::min(nb, b0 + 128);
      if (mode == 0) { const uint8_t* ws[4] = {wide.data(), wide.data(), wide.data(), wide.data()};
        for (size_t b = b0; b < b1; ++b) { quant_block_queries_avx512<1, 4>(data.data() + b * J * 32, ws, J, S); for (int l = 0; l < 128; ++l) acc += S[l]; } }
      else if (mode == 1) { const uint8_t* ws[4] = {tw.data(), tw.data(), tw.data(), tw.data()};
        for (size_t b = b0; b < b1; ++b) { words_block<4>(words.data() + b * J * 32, ws, J, S); for (int l = 0; l < 128; ++l) acc += S[l]; } }
      else if (mode == 2) { SumSink sk; quant_sums(Level::AVX512, s, luts.data(), 1, b0, b1, sk, wide.data()); acc += sk.acc; }
      else { const uint8_t* ws[1] = {tw.data()};
        for (size_t b = b0; b < b1; ++b) { words_block<1>(words.data() + b * J * 32, ws, J, S); for (int l = 0; l < 32; ++l) acc += S[l]; } }
    }
    ts.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / QR * 1e6);
    ok = ok && acc == ref.acc * QR;
  }
  std::sort(ts.begin(), ts.end());
  printf("mode %d: min %.1f us median %.1f us (%.2f ns/row/query) %s\n", mode, ts[0], ts[7], ts[7] * 1000 / n, ok ? "exact" : "NOT EXACT");
}
