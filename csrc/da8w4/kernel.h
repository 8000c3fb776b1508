// Tile kernels for torchao::da8w4_linear_cpu: plain C++ interface, no torch headers.
//
// The ISA translation units (kernel_avx2.cpp, kernel_avx512vnni.cpp) are compiled with
// their own -m flags. They must not include any torch/c10/ATen header: an inline
// function instantiated in such a TU could be picked by the linker for every caller
// and execute AVX-512 instructions on a CPU without them (ODR). All torch work
// (argument checks, threading, output casts) lives in da8w4_linear_cpu.cpp.
//
// Packed weight layout (the non-AMX layout of this library; see csrc/README.md)
// ---------------------------------------------------------------------------
// weight: uint8 [Nc, Kc, BK, 16] with BN = 32 columns per N block, BK % 4 == 0.
// Inside one (nb, c) tile of BK * 16 bytes, for k in [0, BK) and j in [0, 16):
//     byte (k / 4) * 64 + j * 4 + (k % 4)
//         low  nibble = w[nb * 32 + j,      c * BK + k]
//         high nibble = w[nb * 32 + 16 + j, c * BK + k]
// So one 64-byte row of a tile holds 4 consecutive k of all 32 columns, 4 k per
// 32-bit lane: `v & 0xF` is the VNNI operand for columns 0..15 and `(v >> 4) & 0xF`
// the one for columns 16..31 (vpdpbusd / vpmaddubsw consume 4 / 2 bytes per lane).
// The other prepacked tensors follow torchao exactly:
//     weight_scales  fp32  [Nc, G, 32]   [n / 32, g, n % 32] = scale[n, g]
//     weight_qzeros  int8  [Nc, G, 32]   same indexing
//     compensation   int32 [Nc, Kc, 32]  sum over k in block c of (w[n, k] - zp[n, g(c)])
#pragma once

#include <cstdint>

namespace da8w4 {

constexpr int64_t kBlockN = 32;

// One N block (32 output columns) times `rows` activation rows.
struct TileParams {
  const uint8_t* a;  // activation rows (uint8 asymmetric / int8 symmetric bytes), stride lda
  int64_t lda;
  int64_t rows;
  // Per-row, per-k-block sum of the activation bytes, [rows][Kc]: sum of the uint8
  // values (asymmetric) or of the int8 values (symmetric).
  const int32_t* rowsum;
  const int32_t* za;  // [rows] activation zero points; asymmetric only
  const float* sa;  // [rows] activation scales
  const uint8_t* w;  // [Kc][BK][16] packed nibbles of this N block
  const float* sw;  // [G][32]
  const int8_t* zw;  // [G][32]
  const int32_t* comp;  // [Kc][32]; asymmetric only
  const float* bias;  // [32] or nullptr
  int64_t Kc;
  int64_t BK;
  int64_t blocks_per_group;  // group_size / BK, so g(c) = c / blocks_per_group
  bool symmetric;
  float* out;  // [rows][ldo] fp32 result
  int64_t ldo;
};

// Each computes, for every row m and column j of the tile,
//   P_c   = sum_{k in c} (a[m,k] - za[m]) * (w[j,k] - zw[j,g(c)])      exact int32
//   acc   = bias[j] (or 0);  for c in order: acc += (float(P_c) * sa[m]) * sw[j,g(c)]
// and stores acc (fp32) to out. All paths give bit-identical results: the int32 part
// is exact and the fp32 part is the same sequence of IEEE operations (these TUs are
// built with -ffp-contract=off so nothing is fused into an FMA).
void tile_scalar(const TileParams& p);
#if defined(DA8W4_HAVE_AVX2)
void tile_avx2(const TileParams& p);
#endif
#if defined(DA8W4_HAVE_AVX512VNNI)
void tile_avx512vnni(const TileParams& p);
#endif

}  // namespace da8w4
