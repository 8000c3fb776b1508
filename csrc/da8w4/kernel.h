// Tile kernels for torchao::da8w4_linear_cpu: plain C++ interface, no torch headers.
//
// The ISA translation units (kernel_avx2.cpp, kernel_avx512vnni.cpp) are compiled with
// their own -m flags. They must not include any torch/c10/ATen header: an inline
// function instantiated in such a TU could be picked by the linker for every caller
// and execute AVX-512 instructions on a CPU without them (ODR). All torch work
// (argument checks, threading, output casts) lives in da8w4_linear_cpu.cpp.
//
// Packed weight layout (what prepack writes; the AMX path unpacks it per work item)
// ---------------------------------------------------------------------------
// weight: int8 [Nc, Kc, BK, 16] with BN = 32 columns per N block, BK % 4 == 0. The shape
// is torchao 0.18's; its weights are uint8 with the nibbles in another order, so int8 marks
// this layout and da8w4_linear_cpu refuses those instead of misreading them.
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

// Every path does the fp32 dequantise-accumulate as separate IEEE multiplies and adds,
// in the op's order, so that all of them give the same bits, whatever -ffp-contract the
// build uses: the AVX-512 paths use the round-to-nearest forms of the multiply and add
// (the same results as the plain ones), which compilers do not fuse into an FMA; the
// scalar loop and the op's own code (output casts) forbid contraction with pragmas
// scoped to them (clang: not under an explicit -ffp-contract=fast).

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
// is exact and the fp32 part is the same sequence of IEEE operations (nothing is fused
// into an FMA: see below).
void tile_scalar(const TileParams& p);
#if defined(DA8W4_HAVE_AVX2)
void tile_avx2(const TileParams& p);
#endif
#if defined(DA8W4_HAVE_AVX512VNNI)
void tile_avx512vnni(const TileParams& p);
#endif

// AMX (int8 TMUL) path: a whole work item, `nblk` consecutive N blocks times `M`
// rows, written straight to the output. The weight is unpacked to
// int8 (w - zw) in the VNNI layout of the B tiles, so every zw must satisfy
// -112 <= zw <= 127 (w - zw fits int8; the caller checks). Same math and fp32 order
// as the tile kernels, so the results are bit-identical to theirs.
enum class OutKind : int { kFloat = 0, kBFloat16 = 1, kHalf = 2 };

#if defined(DA8W4_TUNING)
// Benchmarks only (DA8W4_AMX_BLOCKS=brgemm): the int32 product of one block, `rows` (<= 32)
// x 32 columns x BK, of activation rows `a` (stride lda) and a weight tile `b` in VNNI4
// rows of all 32 columns ([BK / 4][32][4]), into row-major `c` (32 int32 per row).
using AmxBlockProduct = void (*)(const uint8_t* a, int64_t lda, int64_t rows, const int8_t* b, int64_t BK,
                                 int32_t* c, bool symmetric);
#endif

struct AmxParams {
  const uint8_t* a;  // row 0 of the item, stride lda
  int64_t lda;
  // Or nullptr: the item's rows packed by pack_a_amx, one 32 * K block per m tile.
  const uint8_t* a_packed;
  int64_t M;
  const int32_t* za;  // [M]; asymmetric only
  const float* sa;  // [M]
  const uint8_t* w;  // packed tiles of the first N block: [nblk][Kc][BK][16]
  const float* sw;  // [nblk][G][32]
  const int8_t* zw;  // [nblk][G][32]
  const int32_t* comp;  // [nblk][Kc][32]; asymmetric only
  const float* bias;  // [nblk * 32] or nullptr
  int64_t nblk;
  int64_t Kc;
  int64_t BK;
  int64_t G;
  int64_t blocks_per_group;
  bool symmetric;
  OutKind out_kind;
  void* out;  // element (row 0, column 0) of the item in the output
  int64_t ldo;  // in elements
  // The calling thread's working memory, 64-byte aligned: amx_scratch_bytes() bytes
  // for this item's nblk and Kc, or more.
  uint8_t* scratch;
#if defined(DA8W4_TUNING)
  AmxBlockProduct block_product = nullptr;  // nullptr: the kernel's own tiles
#endif
};
#if defined(DA8W4_HAVE_AMX)
// Rows per AMX m tile (two 16-row tiles).
constexpr int64_t kTileM = 32;
// False (nothing written) when some zw of the item is below -112.
bool gemm_amx(const AmxParams& p);
// The working memory of an item of up to `nblk` N blocks (a multiple of 64 bytes):
// its unpacked weight and fp32 accumulators; `several_m_tiles`: items of more than
// kTileM rows, which unpack the whole panel once.
int64_t amx_scratch_bytes(int64_t nblk, int64_t Kc, int64_t BK, bool several_m_tiles);
// The k bytes per tile row for a k block of BK (a multiple of 4 dividing BK, <= 64).
int64_t amx_k_step(int64_t BK);
// Packs rows [0, rows) (rows <= 32, the rest zero) of a [*, K] activation (stride
// lda) into one m tile's tile layout: k chunk q of kstep bytes at dst + q * 32 * kstep,
// 32 rows of kstep bytes each.
void pack_a_amx(const uint8_t* a, int64_t lda, int64_t rows, int64_t K, int64_t kstep, uint8_t* dst);
// Releases the calling thread's tile state (call at the end of a thread's work).
void amx_release();
#endif

}  // namespace da8w4
