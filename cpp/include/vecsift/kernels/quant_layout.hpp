// Where a row's code lives inside a block of 32 rows.
//
// Rows travel as row-major planes (encode, add_codes, QuantizedIndex files,
// the collection's rows): bits x D/8 bytes, bit t of byte j of plane p = bit
// p of u[8j + t] (pack_planes, quant_codes.hpp). Inside a block a row is
// stored in one of two layouts (IVF files of format 4 hold nibble blocks as
// they are, since they are mapped):
//
//   Planes  (1, 2 and 8 bits): byte i of the row's planes at blk[i*32 + lane],
//           scanned with nibble lookup tables (quant_scan.hpp).
//   Nibbles (4 bits): the values themselves, two per byte. Word w of a row
//           (dimensions 8w..8w+7, 4 bytes) sits at blk[(w*32 + lane)*4 + b];
//           byte b holds u[8w+2b] in its low and u[8w+2b+1] in its high nibble.
//           Eight rows' words fill a 256-bit register, so a byte multiply-add
//           against the query scores them directly (quant_nibble_scan.hpp):
//           half the heavy instructions of the 4 planes x 2 table passes an
//           8-bit query costs in the plane layout.
//   Pairs   (1 bit): blocks 2m and 2m+1 interleaved: byte j of row `lane` of
//           block b at data[(b & ~1) * stride + j*64 + (b & 1)*32 + lane], so
//           byte j of 64 rows fills a 512-bit register and one 7-bit lookup
//           (vpermt2b) serves it whole (quant_pair_scan.hpp). Storage holds an
//           even number of blocks.
//
// All layouts take bits * D/8 bytes a row, so a block has the same size.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "vecsift/kernels/quant_scan.hpp"  // kQuantBlockRows

namespace vecsift {

enum class QuantLayout : int { Planes = 0, Nibbles = 1, Pairs = 2 };

// The layout a QuantizedIndex keeps in memory. Pairs only where the CPU has AVX-512 VBMI: elsewhere
// 1-bit codes scan as fast or faster in the plane layout (the AVX-512 BW plane kernel reads two bytes
// of a block per register, which the pair layout does not give it). Files hold planes either way.
inline QuantLayout quant_layout_for(int bits) {
  if (bits == 4) return QuantLayout::Nibbles;
  return bits == 1 && cpu_has_vbmi() ? QuantLayout::Pairs : QuantLayout::Planes;
}

// Blocks a layout's storage holds for nblocks blocks of rows.
inline size_t quant_storage_blocks(QuantLayout layout, size_t nblocks) {
  return layout == QuantLayout::Pairs ? (nblocks + 1) & ~size_t{1} : nblocks;
}

// Row planes (4 x J bytes) -> the row's 4J nibble bytes.
inline void planes_to_nibbles(const uint8_t* planes, size_t J, uint8_t* out) {
  for (size_t j = 0; j < J; ++j) {
    uint8_t u[8] = {0};
    for (int p = 0; p < 4; ++p) {
      const uint8_t byte = planes[p * J + j];
      for (int t = 0; t < 8; ++t) u[t] |= static_cast<uint8_t>(((byte >> t) & 1u) << p);
    }
    for (int b = 0; b < 4; ++b) out[4 * j + b] = static_cast<uint8_t>(u[2 * b] | (u[2 * b + 1] << 4));
  }
}

// The inverse of planes_to_nibbles.
inline void nibbles_to_planes(const uint8_t* nib, size_t J, uint8_t* planes) {
  for (size_t j = 0; j < J; ++j) {
    uint8_t u[8];
    for (int b = 0; b < 4; ++b) u[2 * b] = nib[4 * j + b] & 15u, u[2 * b + 1] = nib[4 * j + b] >> 4;
    for (int p = 0; p < 4; ++p) {
      uint8_t byte = 0;
      for (int t = 0; t < 8; ++t) byte |= static_cast<uint8_t>(((u[t] >> p) & 1u) << t);
      planes[p * J + j] = byte;
    }
  }
}

// Row `lane` of block b of `data` (blocks of bits x J x 32 bytes) is given as planes (bits x J bytes).
inline void quant_put_row(uint8_t* data, size_t b, size_t lane, int bits, size_t J, QuantLayout layout,
                          const uint8_t* planes) {
  const size_t cb = static_cast<size_t>(bits) * J, stride = cb * kQuantBlockRows;
  const bool paired = layout == QuantLayout::Pairs;
  uint8_t* blk = data + quant_block_offset(paired, b, stride);
  if (layout != QuantLayout::Nibbles) {  // byte i of the row's planes, 32 (pairs: 64) bytes apart
    const size_t ps = paired ? 2 * kQuantBlockRows : kQuantBlockRows;
    for (size_t i = 0; i < cb; ++i) blk[i * ps + lane] = planes[i];
    return;
  }
  uint8_t nib[4 * 512];  // J <= 512 (D <= 4096)
  planes_to_nibbles(planes, J, nib);
  for (size_t w = 0; w < J; ++w)
    for (int b4 = 0; b4 < 4; ++b4) blk[(w * kQuantBlockRows + lane) * 4 + b4] = nib[4 * w + b4];
}

// Row `lane` of block b as planes (bits x J bytes).
inline void quant_get_row(const uint8_t* data, size_t b, size_t lane, int bits, size_t J, QuantLayout layout,
                          uint8_t* planes) {
  const size_t cb = static_cast<size_t>(bits) * J, stride = cb * kQuantBlockRows;
  const bool paired = layout == QuantLayout::Pairs;
  const uint8_t* blk = data + quant_block_offset(paired, b, stride);
  if (layout != QuantLayout::Nibbles) {
    const size_t ps = paired ? 2 * kQuantBlockRows : kQuantBlockRows;
    for (size_t i = 0; i < cb; ++i) planes[i] = blk[i * ps + lane];
    return;
  }
  uint8_t nib[4 * 512];
  for (size_t w = 0; w < J; ++w)
    for (int b4 = 0; b4 < 4; ++b4) nib[4 * w + b4] = blk[(w * kQuantBlockRows + lane) * 4 + b4];
  nibbles_to_planes(nib, J, planes);
}

// Copies nblocks blocks from one layout to another (the same bytes when the layouts agree); dst
// holds quant_storage_blocks(to, nblocks) blocks.
inline void quant_relayout(const uint8_t* src, QuantLayout from, uint8_t* dst, QuantLayout to, size_t nblocks,
                           int bits, size_t J) {
  const size_t cb = static_cast<size_t>(bits) * J, stride = cb * kQuantBlockRows;
  if (!nblocks) return;
  if (from == to) {  // a pair's blocks interleave: copy whole pairs
    std::memcpy(dst, src, quant_storage_blocks(to, nblocks) * stride);
    return;
  }
  uint8_t row[8 * 512];  // bits <= 8
  for (size_t b = 0; b < nblocks; ++b)
    for (size_t l = 0; l < kQuantBlockRows; ++l) {
      quant_get_row(src, b, l, bits, J, from, row);
      quant_put_row(dst, b, l, bits, J, to, row);
    }
}

}  // namespace vecsift
