// Copyright (c) Meta Platforms, Inc. and affiliates.
// All rights reserved.
//
// This source code is licensed under the BSD 3-Clause license found in the
// LICENSE file in the root directory of this source tree.

// CPU kernels for torchao::da8w4_linear_prepack_cpu and torchao::da8w4_linear_cpu:
// int8 dynamic activations times int4 weights (group-wise scales and zero points).
// Three paths, the best the CPU runs picked at run time: AMX int8 (TMUL tiles, from 8
// rows), AVX512-VNNI register tiles (fewer rows, and a CPU without AMX), and a portable
// scalar loop. Each path is compiled for its ISA by a target pragma, whatever -march the
// build gets, and every one gives the same bits: the int32 block products are exact
// (modulo 2^32, as int32 wraps) and the fp32 epilogue is the same sequence of IEEE
// operations, an FMA only where its result is provably the same.

// The AVX512-VNNI and AMX paths: x86-64 with a compiler that has their intrinsics (AMX:
// GCC 11, clang 13); AMX also needs Linux, which grants a process the tile state.
#if defined(__x86_64__) && \
    ((defined(__clang__) && __clang_major__ >= 13) || (!defined(__clang__) && defined(__GNUC__) && __GNUC__ >= 11))
#define DA8W4_HAVE_AVX512VNNI 1
#if defined(__linux__)
#define DA8W4_HAVE_AMX 1
#endif
#endif

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/native/CPUBlas.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>
#include <torch/library.h>
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <tuple>
#include <vector>
#if defined(DA8W4_HAVE_AVX512VNNI)
#include <immintrin.h>
#endif
#if defined(DA8W4_HAVE_AMX)
#include <ATen/cpu/Utils.h>
#include <cpuid.h>
#include <unistd.h>
#endif

namespace {

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

// Every path does the fp32 dequantise-accumulate as separate IEEE multiplies and adds,
// in the op's order, so that all of them give the same bits, whatever -ffp-contract the
// build uses: the AVX-512 paths use the round-to-nearest forms of the multiply and add
// (the same results as the plain ones), which compilers do not fuse into an FMA; the
// scalar loop and the op's own code (output casts) forbid contraction with pragmas
// scoped to them (clang: not under an explicit -ffp-contract=fast).

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
#if defined(DA8W4_HAVE_AVX512VNNI)
void tile_avx512vnni(const TileParams& p);
#endif

// AMX (int8 TMUL) path: a whole work item, `nblk` consecutive N blocks times `M`
// rows, written straight to the output. The weight is unpacked to
// int8 (w - zw) in the VNNI layout of the B tiles, so every zw must satisfy
// -112 <= zw <= 127 (w - zw fits int8; the caller checks). Same math and fp32 order
// as the tile kernels, so the results are bit-identical to theirs.
enum class OutKind : int { kFloat = 0, kBFloat16 = 1, kHalf = 2 };

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

// No FMA contraction in this function, whatever the flags.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC push_options
#pragma GCC optimize("fp-contract=off")
#endif
void tile_scalar(const TileParams& p) {
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif
  for (int64_t m = 0; m < p.rows; ++m) {
    float* out = p.out + m * p.ldo;
    for (int64_t j = 0; j < kBlockN; ++j) {
      out[j] = p.bias ? p.bias[j] : 0.0f;
    }
  }
  for (int64_t c = 0; c < p.Kc; ++c) {
    const uint8_t* wt = p.w + c * p.BK * 16;
    const int64_t g = c / p.blocks_per_group;
    const float* sw = p.sw + g * kBlockN;
    const int8_t* zw = p.zw + g * kBlockN;
    for (int64_t m = 0; m < p.rows; ++m) {
      const uint8_t* arow = p.a + m * p.lda + c * p.BK;
      int32_t dot[kBlockN] = {0};
      for (int64_t k = 0; k < p.BK; ++k) {
        // u8 (asymmetric) or s8 (symmetric) activation byte.
        const int32_t av = p.symmetric ? static_cast<int32_t>(static_cast<int8_t>(arow[k]))
                                       : static_cast<int32_t>(arow[k]);
        const uint8_t* wk = wt + (k / 4) * 64 + (k % 4);
        for (int64_t j = 0; j < 16; ++j) {
          const uint8_t b = wk[j * 4];
          dot[j] += av * static_cast<int32_t>(b & 0xF);
          dot[j + 16] += av * static_cast<int32_t>(b >> 4);
        }
      }
      // sum a*(w - zw) = sum a*w - zw * sum a; asymmetric subtracts za * comp. In uint32:
      // modulo 2^32 where a large za makes it wrap, as the vector paths' int32 lanes do
      // (signed overflow would be undefined).
      const uint32_t s = static_cast<uint32_t>(p.rowsum[m * p.Kc + c]);
      const float sa = p.sa[m];
      float* out = p.out + m * p.ldo;
      for (int64_t j = 0; j < kBlockN; ++j) {
        uint32_t P = static_cast<uint32_t>(dot[j]) - static_cast<uint32_t>(static_cast<int32_t>(zw[j])) * s;
        if (!p.symmetric) {
          P -= static_cast<uint32_t>(p.za[m]) * static_cast<uint32_t>(p.comp[c * kBlockN + j]);
        }
        out[j] = out[j] + (static_cast<float>(static_cast<int32_t>(P)) * sa) * sw[j];
      }
    }
  }
}
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC pop_options
#endif

}  // namespace da8w4

#if defined(DA8W4_HAVE_AVX512VNNI)
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512vnni")
#endif

namespace da8w4 {

inline int32_t load4(const uint8_t* p) {
  int32_t v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

// Software prefetch distances, in bytes ahead of the k block being computed. At small M
// the kernel streams the packed weight, scales and compensation from memory with little
// work per byte, and with the hardware prefetcher alone each miss stalls the compute
// that could overlap it; 2-4 KiB is a few hundred ns of DRAM traffic per core. Reading
// past the end of a tile prefetches the next N block, which this thread computes next
// (or, past the tensor, nothing: prefetches do not fault).
constexpr int64_t kPrefetchWeight = 4096;
constexpr int64_t kPrefetchScales = 2048;

// Prefetches the lines `dist` bytes ahead of k block c's weight, and of its group's
// scales and its compensation (the latter only when used).
template <bool kSym>
inline void prefetch_ahead(const TileParams& p, int64_t c, int64_t g) {
  const char* wt = reinterpret_cast<const char*>(p.w + c * p.BK * 16) + kPrefetchWeight;
  for (int64_t off = 0; off < p.BK * 16; off += 64) {
    _mm_prefetch(wt + off, _MM_HINT_T0);
  }
  const char* sw = reinterpret_cast<const char*>(p.sw + g * kBlockN) + kPrefetchScales;
  _mm_prefetch(sw, _MM_HINT_T0);
  _mm_prefetch(sw + 64, _MM_HINT_T0);
  if (!kSym) {
    const char* comp = reinterpret_cast<const char*>(p.comp + c * kBlockN) + kPrefetchScales;
    _mm_prefetch(comp, _MM_HINT_T0);
    _mm_prefetch(comp + 64, _MM_HINT_T0);
  }
}

// R (<= kRegRows) rows of one N block over all k blocks. Per k block c: exact int32
// dot products with vpdpbusd (u8 x s8, four products per 32-bit lane), then the fp32
// dequantise-accumulate. Asymmetric: the activation is the unsigned operand and the
// nibble (0..15) the signed one. Symmetric: the nibble is the unsigned operand and the
// int8 activation the signed one. Either way no product can saturate and the zero
// points are applied afterwards.
//
// The fp32 accumulators of all R rows (2 zmm per row) stay in registers across the k
// blocks and are stored once at the end: with 4 rows, 8 fp32 + 8 int32 accumulators
// and the per-block operands fit the 32 zmm registers. The fp32 operations and their
// order are those of the op's math (and of the scalar path), so the result is
// bit-identical. With fewer than 4 rows the int32 dot products of even and odd k4 go
// to separate accumulators (summed at the end of the block: exact), so that the
// vpdpbusd latency chains do not limit the loop. Re-unpacking the nibbles per 4 rows
// (3 ops per 64 weight bytes) costs less than storing and reloading the fp32 output
// once per k block, which sharing one unpacking between more rows would need.
constexpr int kRegRows = 4;

template <bool kSym, int R>
void tile_rows(const TileParams& p) {
  constexpr int kSplit = R < 4 ? 2 : 1;
  const __m512i nibble = _mm512_set1_epi8(0x0F);
  __m512 f_lo[R];
  __m512 f_hi[R];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) {
    f_lo[r] = p.bias ? _mm512_loadu_ps(p.bias) : _mm512_setzero_ps();
    f_hi[r] = p.bias ? _mm512_loadu_ps(p.bias + 16) : _mm512_setzero_ps();
  }
  const int64_t nk4 = p.BK / 4;
  int64_t g = 0;
  int64_t left_in_group = p.blocks_per_group;
  for (int64_t c = 0; c < p.Kc; ++c) {
    const uint8_t* wt = p.w + c * p.BK * 16;
    const uint8_t* a0 = p.a + c * p.BK;
    prefetch_ahead<kSym>(p, c, g);
    __m512i acc_lo[kSplit][R];
    __m512i acc_hi[kSplit][R];
#pragma GCC unroll 4
    for (int s = 0; s < kSplit; ++s) {
      for (int r = 0; r < R; ++r) {
        acc_lo[s][r] = _mm512_setzero_si512();
        acc_hi[s][r] = _mm512_setzero_si512();
      }
    }
    int64_t k4 = 0;
    for (; k4 + kSplit <= nk4; k4 += kSplit) {
#pragma GCC unroll 2
      for (int s = 0; s < kSplit; ++s) {
        const __m512i v = _mm512_loadu_si512(wt + (k4 + s) * 64);
        const __m512i lo = _mm512_and_si512(v, nibble);
        const __m512i hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), nibble);
#pragma GCC unroll 4
        for (int r = 0; r < R; ++r) {
          const __m512i ab = _mm512_set1_epi32(load4(a0 + r * p.lda + (k4 + s) * 4));
          if (kSym) {
            acc_lo[s][r] = _mm512_dpbusd_epi32(acc_lo[s][r], lo, ab);
            acc_hi[s][r] = _mm512_dpbusd_epi32(acc_hi[s][r], hi, ab);
          } else {
            acc_lo[s][r] = _mm512_dpbusd_epi32(acc_lo[s][r], ab, lo);
            acc_hi[s][r] = _mm512_dpbusd_epi32(acc_hi[s][r], ab, hi);
          }
        }
      }
    }
    for (; k4 < nk4; ++k4) {  // odd number of k4 steps (BK % 8 == 4)
      const __m512i v = _mm512_loadu_si512(wt + k4 * 64);
      const __m512i lo = _mm512_and_si512(v, nibble);
      const __m512i hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), nibble);
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) {
        const __m512i ab = _mm512_set1_epi32(load4(a0 + r * p.lda + k4 * 4));
        if (kSym) {
          acc_lo[0][r] = _mm512_dpbusd_epi32(acc_lo[0][r], lo, ab);
          acc_hi[0][r] = _mm512_dpbusd_epi32(acc_hi[0][r], hi, ab);
        } else {
          acc_lo[0][r] = _mm512_dpbusd_epi32(acc_lo[0][r], ab, lo);
          acc_hi[0][r] = _mm512_dpbusd_epi32(acc_hi[0][r], ab, hi);
        }
      }
    }
    const int8_t* zw = p.zw + g * kBlockN;
    const float* sw = p.sw + g * kBlockN;
    const __m512i zw_lo =
        _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(zw)));
    const __m512i zw_hi =
        _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(zw + 16)));
    const __m512 sw_lo = _mm512_loadu_ps(sw);
    const __m512 sw_hi = _mm512_loadu_ps(sw + 16);
    __m512i comp_lo = _mm512_setzero_si512();
    __m512i comp_hi = _mm512_setzero_si512();
    if (!kSym) {
      comp_lo = _mm512_loadu_si512(p.comp + c * kBlockN);
      comp_hi = _mm512_loadu_si512(p.comp + c * kBlockN + 16);
    }
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      __m512i d_lo = acc_lo[0][r];
      __m512i d_hi = acc_hi[0][r];
      if (kSplit == 2) {
        d_lo = _mm512_add_epi32(d_lo, acc_lo[kSplit - 1][r]);
        d_hi = _mm512_add_epi32(d_hi, acc_hi[kSplit - 1][r]);
      }
      const __m512i s = _mm512_set1_epi32(p.rowsum[r * p.Kc + c]);
      __m512i P_lo = _mm512_sub_epi32(d_lo, _mm512_mullo_epi32(zw_lo, s));
      __m512i P_hi = _mm512_sub_epi32(d_hi, _mm512_mullo_epi32(zw_hi, s));
      if (!kSym) {
        const __m512i za = _mm512_set1_epi32(p.za[r]);
        P_lo = _mm512_sub_epi32(P_lo, _mm512_mullo_epi32(za, comp_lo));
        P_hi = _mm512_sub_epi32(P_hi, _mm512_mullo_epi32(za, comp_hi));
      }
      const __m512 sa = _mm512_set1_ps(p.sa[r]);
      constexpr int kRn = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;  // these are never fused into FMAs
      const __m512 e_lo = _mm512_mul_round_ps(_mm512_mul_round_ps(_mm512_cvtepi32_ps(P_lo), sa, kRn), sw_lo, kRn);
      const __m512 e_hi = _mm512_mul_round_ps(_mm512_mul_round_ps(_mm512_cvtepi32_ps(P_hi), sa, kRn), sw_hi, kRn);
      f_lo[r] = _mm512_add_round_ps(f_lo[r], e_lo, kRn);
      f_hi[r] = _mm512_add_round_ps(f_hi[r], e_hi, kRn);
    }
    if (--left_in_group == 0) {
      ++g;
      left_in_group = p.blocks_per_group;
    }
  }
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) {
    _mm512_storeu_ps(p.out + r * p.ldo, f_lo[r]);
    _mm512_storeu_ps(p.out + r * p.ldo + 16, f_hi[r]);
  }
}

template <bool kSym>
void tile_impl(const TileParams& p) {
  TileParams q = p;
  for (int64_t m0 = 0; m0 < p.rows; m0 += kRegRows) {
    q.a = p.a + m0 * p.lda;
    q.rowsum = p.rowsum + m0 * p.Kc;
    q.za = kSym ? nullptr : p.za + m0;
    q.sa = p.sa + m0;
    q.out = p.out + m0 * p.ldo;
    switch (p.rows - m0) {
      case 1: tile_rows<kSym, 1>(q); break;
      case 2: tile_rows<kSym, 2>(q); break;
      case 3: tile_rows<kSym, 3>(q); break;
      default: tile_rows<kSym, 4>(q); break;
    }
  }
}

void tile_avx512vnni(const TileParams& p) {
  if (p.symmetric) {
    tile_impl<true>(p);
  } else {
    tile_impl<false>(p);
  }
}

}  // namespace da8w4

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif
#endif  // defined(DA8W4_HAVE_AVX512VNNI)

#if defined(DA8W4_HAVE_AMX)
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,amx-tile,amx-int8"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512vnni,amx-tile,amx-int8")
#endif

namespace da8w4 {

// ---------------------------------------------------------------------------
// Tile register allocation (8 tiles):
//   C0, C1: int32 results of rows 0-15 of the m tile, columns 0-15 / 16-31
//   C2, C3: the same for rows 16-31
//   A0, A1: activation rows 0-15 / 16-31, kstep bytes of k each
//   B0, B1: weight (w - zw) columns 0-15 / 16-31, kstep / 4 rows of 4 k (VNNI)
// ---------------------------------------------------------------------------
// Macros, not constants: GCC's tile intrinsics paste the tile number into the assembly
// text, so it must be a literal after macro expansion.
#define kC0 0
#define kC1 1
#define kC2 2
#define kC3 3
#define kA0 4
#define kA1 5
#define kB0 6
#define kB1 7

struct alignas(64) TileConfig {
  uint8_t palette_id;
  uint8_t start_row;
  uint8_t reserved0[14];
  uint16_t colsb[16];
  uint8_t rows[16];
};
static_assert(sizeof(TileConfig) == 64, "AMX tile configuration is 64 bytes");

inline void tile_config(const TileConfig& cfg) {
  _tile_loadconfig(&cfg);
}
inline void tile_release() {
  _tile_release();
}

#define TILE_ZERO(t) _tile_zero(t)
#define TILE_LOAD(t, p, stride) _tile_loadd(t, p, stride)
#define TILE_STORE(t, p, stride) _tile_stored(t, p, stride)
#define TILE_DP(sym, c, a, b) \
  do {                        \
    if (sym) {                \
      _tile_dpbssd(c, a, b);  \
    } else {                  \
      _tile_dpbusd(c, a, b);  \
    }                         \
  } while (0)

// The calling thread's tile configuration as last loaded (a mirror of its CPU state), so
// that LDTILECFG runs only when the configuration changes.
struct TileState {
  TileConfig cfg{};
  bool loaded = false;
};
thread_local TileState tile_state;

// One item's working memory: the unpacked weight panel and the fp32 accumulators, in
// the caller's buffer (amx_scratch_bytes), and the int32 results of three blocks.
struct Scratch {
  int8_t* panel;
  float* acc;
  alignas(64) int32_t cbuf[3][4][16][16];  // see m_tile
};

int64_t round64(int64_t bytes) {
  return (bytes + 63) / 64 * 64;
}

// The unpacked panel: the item's whole weight (several m tiles), else three rotating
// tiles (see gemm_impl).
int64_t panel_bytes(int64_t nblk, int64_t Kc, int64_t BK, bool whole_panel) {
  return round64((whole_panel ? nblk * Kc : 3) * BK * kBlockN);
}

// Largest multiple of 4 that divides BK and is at most 64 (the k bytes of one tile row).
int64_t k_step(int64_t BK) {
  for (int64_t d = 64; d >= 4; d -= 4) {
    if (BK % d == 0) {
      return d;
    }
  }
  return 4;
}

// Unpacks one (N block, k block) tile of packed nibbles to int8 (w - zw) in the VNNI
// layout the B tiles read: [half][BK / 4][64], byte j * 4 + q of row k4 = column
// half * 16 + j at k = 4 * k4 + q. The packed row (k4) is exactly that layout for both
// halves at once (low / high nibbles), so unpacking is two ands, a shift and two
// subtractions per 64 bytes.
inline void unpack_tile(const uint8_t* src, const int8_t* zw, int64_t BK, int8_t* dst) {
  const __m512i nibble = _mm512_set1_epi8(0x0F);
  // zw of columns 0-15 (16-31), each repeated in the 4 bytes of its 32-bit lane.
  const __m512i rep = _mm512_set1_epi32(0x01010101);
  const __m512i z_lo = _mm512_mullo_epi32(
      _mm512_and_si512(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(zw))),
                       _mm512_set1_epi32(0xFF)),
      rep);
  const __m512i z_hi = _mm512_mullo_epi32(
      _mm512_and_si512(
          _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(zw + 16))),
          _mm512_set1_epi32(0xFF)),
      rep);
  const int64_t nk4 = BK / 4;
  int8_t* lo_dst = dst;
  int8_t* hi_dst = dst + nk4 * 64;
  for (int64_t k4 = 0; k4 < nk4; ++k4) {
    const __m512i v = _mm512_loadu_si512(src + k4 * 64);
    const __m512i lo = _mm512_sub_epi8(_mm512_and_si512(v, nibble), z_lo);
    const __m512i hi = _mm512_sub_epi8(_mm512_and_si512(_mm512_srli_epi16(v, 4), nibble), z_hi);
    _mm512_storeu_si512(lo_dst + k4 * 64, lo);
    _mm512_storeu_si512(hi_dst + k4 * 64, hi);
  }
}

// Round-to-nearest-even fp32 -> bf16 with c10::BFloat16's rule (NaN -> 0x7FC0).
inline __m256i to_bf16(__m512 x) {
  const __m512i bits = _mm512_castps_si512(x);
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(bits, 16), _mm512_set1_epi32(1));
  __m512i r = _mm512_srli_epi32(_mm512_add_epi32(bits, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7FFF))), 16);
  const __mmask16 nan = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
  r = _mm512_mask_blend_epi32(nan, r, _mm512_set1_epi32(0x7FC0));
  return _mm512_cvtepi32_epi16(r);
}

inline void store_row(const float* src, int64_t cols, const AmxParams& p, int64_t m) {
  switch (p.out_kind) {
    case OutKind::kFloat: {
      float* dst = static_cast<float*>(p.out) + m * p.ldo;
      for (int64_t j = 0; j < cols; j += 16) {
        _mm512_storeu_ps(dst + j, _mm512_loadu_ps(src + j));
      }
      break;
    }
    case OutKind::kBFloat16: {
      uint16_t* dst = static_cast<uint16_t*>(p.out) + m * p.ldo;
      for (int64_t j = 0; j < cols; j += 16) {
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + j), to_bf16(_mm512_loadu_ps(src + j)));
      }
      break;
    }
    case OutKind::kHalf: {
      uint16_t* dst = static_cast<uint16_t*>(p.out) + m * p.ldo;
      for (int64_t j = 0; j < cols; j += 16) {
        _mm256_storeu_si256(
            reinterpret_cast<__m256i*>(dst + j),
            _mm512_cvtps_ph(_mm512_loadu_ps(src + j), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
      }
      break;
    }
  }
}

void configure(int64_t r0, int64_t r1, int64_t kstep) {
  TileConfig cfg{};
  cfg.palette_id = 1;
  for (int t : {kC0, kC1}) {
    cfg.rows[t] = static_cast<uint8_t>(r0);
    cfg.colsb[t] = 64;
  }
  cfg.rows[kA0] = static_cast<uint8_t>(r0);
  cfg.colsb[kA0] = static_cast<uint16_t>(kstep);
  if (r1 > 0) {
    for (int t : {kC2, kC3}) {
      cfg.rows[t] = static_cast<uint8_t>(r1);
      cfg.colsb[t] = 64;
    }
    cfg.rows[kA1] = static_cast<uint8_t>(r1);
    cfg.colsb[kA1] = static_cast<uint16_t>(kstep);
  }
  for (int t : {kB0, kB1}) {
    cfg.rows[t] = static_cast<uint8_t>(kstep / 4);
    cfg.colsb[t] = 64;
  }
  TileState& state = tile_state;
  if (!state.loaded || std::memcmp(&cfg, &state.cfg, sizeof(cfg)) != 0) {
    tile_config(cfg);
    state.cfg = cfg;
    state.loaded = true;
  }
}

// C tiles of one (m tile, N block, k block) from the unpacked weight tile `bt`.
// A rows: tile rows of k chunk q (kstep bytes) start at a + q * chunk and are `lda`
// apart; rows 16-31 start 16 * lda further. Strided input: chunk = kstep, lda = K.
// Packed (pack_a_amx): chunk = 32 * kstep, lda = kstep.
struct ATiles {
  const uint8_t* a;  // k chunk 0 of this m tile
  int64_t chunk;
  int64_t lda;
};

template <bool kSym, bool kTwo>
inline void tile_block(const ATiles& at, int64_t c, const int8_t* bt, int64_t BK, int64_t kstep) {
  const int64_t nk4 = BK / 4;
  TILE_ZERO(kC0);
  TILE_ZERO(kC1);
  if (kTwo) {
    TILE_ZERO(kC2);
    TILE_ZERO(kC3);
  }
  const int64_t lda = at.lda;
  for (int64_t k = 0; k < BK; k += kstep) {
    const uint8_t* a = at.a + ((c * BK + k) / kstep) * at.chunk;
    TILE_LOAD(kA0, a, lda);
    TILE_LOAD(kB0, bt + (k / 4) * 64, 64);
    TILE_LOAD(kB1, bt + (nk4 + k / 4) * 64, 64);
    TILE_DP(kSym, kC0, kA0, kB0);
    TILE_DP(kSym, kC1, kA0, kB1);
    if (kTwo) {
      TILE_LOAD(kA1, a + 16 * lda, lda);
      TILE_DP(kSym, kC2, kA1, kB0);
      TILE_DP(kSym, kC3, kA1, kB1);
    }
  }
}

template <bool kTwo>
inline void tile_store_c(int32_t (*cb)[16][16]) {
  TILE_STORE(kC0, cb[0], 64);
  TILE_STORE(kC1, cb[1], 64);
  if (kTwo) {
    TILE_STORE(kC2, cb[2], 64);
    TILE_STORE(kC3, cb[3], 64);
  }
}

// One finished block waiting for its epilogue.
struct Pending {
  int32_t (*cb)[16][16];
  const float* sw;
  const int32_t* comp;
  float* acc;
};

// acc[r][0:32] += (float(P) * sa[r]) * sw for the R rows of the m tile, where
// P = C - za[r] * comp (asymmetric) or C (symmetric): the op's per-k-block update,
// in its order (the same IEEE operations as every other path).
//
// kFloatZp (asymmetric, the usual case): float(P) is computed as one FMA,
// fnmadd(float(za), float(comp), float(C)). That is exactly float(P): C, za and comp
// are integers of magnitude below 2^24 (|C| <= BK * 255 * 127, see fp_zero_point_ok),
// so float(C), float(za) and float(comp) are exact, and the FMA rounds the exact
// C - za * comp = P once, to nearest, as the int32 -> fp32 conversion of P does (P
// does not wrap in int32 there, also fp_zero_point_ok's). One
// vector operation fewer per 16 results than the int32 route (a multiply, a subtract
// and the conversion), in an epilogue that is bound by its vector operations. Otherwise
// P is taken in int32 and converted, as in the other paths.
template <bool kSym, bool kFloatZp>
inline void epilogue(const Pending& b, int64_t R, const int32_t* za, const float* sa, int64_t ldacc) {
  const __m512 sw_lo = _mm512_loadu_ps(b.sw);
  const __m512 sw_hi = _mm512_loadu_ps(b.sw + 16);
  __m512i comp_lo = _mm512_setzero_si512();
  __m512i comp_hi = _mm512_setzero_si512();
  __m512 fcomp_lo = _mm512_setzero_ps();
  __m512 fcomp_hi = _mm512_setzero_ps();
  if (!kSym) {
    comp_lo = _mm512_loadu_si512(b.comp);
    comp_hi = _mm512_loadu_si512(b.comp + 16);
    fcomp_lo = _mm512_cvtepi32_ps(comp_lo);
    fcomp_hi = _mm512_cvtepi32_ps(comp_hi);
  }
  for (int64_t r = 0; r < R; ++r) {
    const int32_t* c_lo = b.cb[(r / 16) * 2][r % 16];
    const int32_t* c_hi = b.cb[(r / 16) * 2 + 1][r % 16];
    __m512 P_lo;
    __m512 P_hi;
    if (kSym) {
      P_lo = _mm512_cvtepi32_ps(_mm512_loadu_si512(c_lo));
      P_hi = _mm512_cvtepi32_ps(_mm512_loadu_si512(c_hi));
    } else if (kFloatZp) {
      const __m512 z = _mm512_set1_ps(static_cast<float>(za[r]));
      P_lo = _mm512_fnmadd_ps(z, fcomp_lo, _mm512_cvtepi32_ps(_mm512_loadu_si512(c_lo)));
      P_hi = _mm512_fnmadd_ps(z, fcomp_hi, _mm512_cvtepi32_ps(_mm512_loadu_si512(c_hi)));
    } else {
      const __m512i z = _mm512_set1_epi32(za[r]);
      P_lo = _mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_loadu_si512(c_lo), _mm512_mullo_epi32(z, comp_lo)));
      P_hi = _mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_loadu_si512(c_hi), _mm512_mullo_epi32(z, comp_hi)));
    }
    const __m512 a = _mm512_set1_ps(sa[r]);
    float* out = b.acc + r * ldacc;
    constexpr int kRn = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;  // these are never fused into FMAs
    const __m512 d_lo = _mm512_mul_round_ps(_mm512_mul_round_ps(P_lo, a, kRn), sw_lo, kRn);
    const __m512 d_hi = _mm512_mul_round_ps(_mm512_mul_round_ps(P_hi, a, kRn), sw_hi, kRn);
    _mm512_storeu_ps(out, _mm512_add_round_ps(_mm512_loadu_ps(out), d_lo, kRn));
    _mm512_storeu_ps(out + 16, _mm512_add_round_ps(_mm512_loadu_ps(out + 16), d_hi, kRn));
  }
}

// Whether the FMA route of the epilogue gives the int32 route's bits for this k block
// and these rows: |C| <= BK * 255 * 127 (uint8 activation, |w - zw| <= 127) below 2^24,
// and |za * comp| <= |za| * BK * 127 small enough that C - za * comp does not wrap in
// int32 (the other paths take it modulo 2^32, the FMA exactly). That bound also keeps
// |za| below 2^24, where float(za) is exact.
inline bool fp_zero_point_ok(int64_t BK, const int32_t* za, int64_t R) {
  const int64_t c_max = BK * 255 * 127;
  if (c_max >= (int64_t{1} << 24)) {
    return false;
  }
  const int64_t za_max = ((int64_t{1} << 31) - 1 - c_max) / (BK * 127);
  for (int64_t r = 0; r < R; ++r) {
    if (za[r] < -za_max || za[r] > za_max) {
      return false;
    }
  }
  return true;
}

// One m tile (R <= 32 rows) over all k blocks and the item's N blocks, block i being
// (k block i / nblk, N block i % nblk). Software pipelined so that no load waits on a
// store just issued (vector loads of tile-stored results and tile loads of
// vector-stored weights): iteration i unpacks the weight of block i + 1 (one m tile
// only), issues block i's tile instructions, runs the vector epilogue of block i - 2
// (its results were stored a whole iteration earlier) and stores block i's results.
// Three rotating buffers each for results and unpacked weight. The epilogues still run
// in block order, so each N block's k blocks are accumulated in order.
template <bool kSym, bool kTwo, bool kFloatZp>
void m_tile(const AmxParams& p, Scratch& s, int64_t R, const ATiles& at, const int32_t* za,
            const float* sa, int8_t* panel, bool whole_panel, int64_t kstep, float* acc,
            int64_t ncols) {
  const int64_t BK = p.BK;
  const int64_t Kc = p.Kc;
  const int64_t tile_bytes = BK * kBlockN;
  const int64_t packed_tile = BK * kBlockN / 2;
  const int64_t T = Kc * p.nblk;
  Pending pend[3];
  auto unpack = [&](int64_t i) {
    const int64_t c = i / p.nblk;
    const int64_t nb = i % p.nblk;
    unpack_tile(p.w + (nb * Kc + c) * packed_tile, p.zw + (nb * p.G + c / p.blocks_per_group) * kBlockN,
                BK, panel + (i % 3) * tile_bytes);
  };
  if (!whole_panel) {
    unpack(0);
  }
  for (int64_t i = 0; i < T; ++i) {
    const int64_t c = i / p.nblk;
    const int64_t nb = i % p.nblk;
    const int64_t g = c / p.blocks_per_group;
    if (!whole_panel && i + 1 < T) {
      unpack(i + 1);
    }
    const int8_t* bt = whole_panel ? panel + (nb * Kc + c) * tile_bytes : panel + (i % 3) * tile_bytes;
    tile_block<kSym, kTwo>(at, c, bt, BK, kstep);
    if (i >= 2) {
      epilogue<kSym, kFloatZp>(pend[(i - 2) % 3], R, za, sa, ncols);
    }
    tile_store_c<kTwo>(s.cbuf[i % 3]);
    pend[i % 3] = Pending{s.cbuf[i % 3], p.sw + (nb * p.G + g) * kBlockN,
                          kSym ? nullptr : p.comp + (nb * Kc + c) * kBlockN, acc + nb * kBlockN};
  }
  for (int64_t i = std::max<int64_t>(0, T - 2); i < T; ++i) {
    epilogue<kSym, kFloatZp>(pend[i % 3], R, za, sa, ncols);
  }
}

template <bool kSym>
bool gemm_impl(const AmxParams& p) {
  // w - zw must fit int8: zw >= -112 (w <= 15, zw <= 127 as int8).
  {
    __m512i mn = _mm512_set1_epi8(127);
    const int64_t nz = p.nblk * p.G * kBlockN;  // a multiple of 32
    int64_t i = 0;
    for (; i + 64 <= nz; i += 64) {
      mn = _mm512_min_epi8(mn, _mm512_loadu_si512(p.zw + i));
    }
    if (i < nz) {  // 32 bytes left
      mn = _mm512_min_epi8(mn, _mm512_mask_loadu_epi8(_mm512_set1_epi8(127), __mmask64{0xFFFFFFFFull}, p.zw + i));
    }
    if (_mm512_cmplt_epi8_mask(mn, _mm512_set1_epi8(-112)) != 0) {
      return false;
    }
  }
  const int64_t BK = p.BK;
  const int64_t Kc = p.Kc;
  const int64_t kstep = k_step(BK);
  const int64_t tile_bytes = BK * kBlockN;  // unpacked (w - zw) of one (N block, k block)
  const int64_t packed_tile = BK * kBlockN / 2;
  const int64_t ncols = p.nblk * kBlockN;
  // Several m tiles: unpack the item's whole weight panel once (kept in L2) and reuse it
  // for every m tile. One m tile: unpack each (N block, k block) tile just before use,
  // into three rotating buffers (see m_tile: no tile load reads bytes just stored).
  const bool whole_panel = p.M > kTileM;
  Scratch s;
  s.panel = reinterpret_cast<int8_t*>(p.scratch);
  s.acc = reinterpret_cast<float*>(p.scratch + panel_bytes(p.nblk, Kc, BK, whole_panel));
  int8_t* panel = s.panel;
  if (whole_panel) {
    for (int64_t nb = 0; nb < p.nblk; ++nb) {
      for (int64_t c = 0; c < Kc; ++c) {
        const int64_t g = c / p.blocks_per_group;
        unpack_tile(p.w + (nb * Kc + c) * packed_tile, p.zw + (nb * p.G + g) * kBlockN, BK,
                    panel + (nb * Kc + c) * tile_bytes);
      }
    }
  }
  float* acc = s.acc;
  for (int64_t m0 = 0; m0 < p.M; m0 += kTileM) {
    const int64_t R = std::min<int64_t>(kTileM, p.M - m0);
    const int64_t r0 = std::min<int64_t>(16, R);
    const int64_t r1 = R - r0;
    configure(r0, r1, kstep);
    for (int64_t r = 0; r < R; ++r) {
      for (int64_t j = 0; j < ncols; j += 16) {
        _mm512_storeu_ps(acc + r * ncols + j, p.bias ? _mm512_loadu_ps(p.bias + j) : _mm512_setzero_ps());
      }
    }
    const ATiles at = p.a_packed ? ATiles{p.a_packed + m0 * p.lda, kTileM * kstep, kstep}
                                 : ATiles{p.a + m0 * p.lda, kstep, p.lda};
    const int32_t* za = kSym ? nullptr : p.za + m0;
    const float* sa = p.sa + m0;
    const bool fzp = !kSym && fp_zero_point_ok(BK, za, R);
#define DA8W4_M_TILE(TWO, FZP) m_tile<kSym, TWO, FZP>(p, s, R, at, za, sa, panel, whole_panel, kstep, acc, ncols)
    if (r1 > 0) {
      if (fzp) {
        DA8W4_M_TILE(true, true);
      } else {
        DA8W4_M_TILE(true, false);
      }
    } else {
      if (fzp) {
        DA8W4_M_TILE(false, true);
      } else {
        DA8W4_M_TILE(false, false);
      }
    }
#undef DA8W4_M_TILE
    for (int64_t r = 0; r < R; ++r) {
      store_row(acc + r * ncols, ncols, p, m0 + r);
    }
  }
  return true;
}

#undef TILE_ZERO
#undef TILE_LOAD
#undef TILE_STORE
#undef TILE_DP
#undef kC0
#undef kC1
#undef kC2
#undef kC3
#undef kA0
#undef kA1
#undef kB0
#undef kB1

bool gemm_amx(const AmxParams& p) {
  return p.symmetric ? gemm_impl<true>(p) : gemm_impl<false>(p);
}

int64_t amx_k_step(int64_t BK) {
  return k_step(BK);
}

void pack_a_amx(const uint8_t* a, int64_t lda, int64_t rows, int64_t K, int64_t kstep, uint8_t* dst) {
  for (int64_t q = 0; q < K / kstep; ++q) {
    uint8_t* d = dst + q * 32 * kstep;
    for (int64_t r = 0; r < 32; ++r) {
      if (r < rows) {
        std::memcpy(d + r * kstep, a + r * lda + q * kstep, kstep);
      } else {
        std::memset(d + r * kstep, 0, kstep);
      }
    }
  }
}

int64_t amx_scratch_bytes(int64_t nblk, int64_t Kc, int64_t BK, bool several_m_tiles) {
  const int64_t panel = std::max(panel_bytes(nblk, Kc, BK, several_m_tiles), panel_bytes(nblk, Kc, BK, false));
  return panel + round64(kTileM * nblk * kBlockN * static_cast<int64_t>(sizeof(float)));
}

void amx_release() {
  tile_state.loaded = false;
  tile_release();
}

}  // namespace da8w4

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif
#endif  // defined(DA8W4_HAVE_AMX)

// No FMA contraction in the output casts either: c10's software fp32 -> fp16
// conversion (builds without F16C) adds to a product.
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC push_options
#pragma GCC optimize("fp-contract=off")
#endif

namespace da8w4 {

// ---------------------------------------------------------------------------
// ISA selection: the best supported at run time.
// ---------------------------------------------------------------------------
enum class Isa : int {
  kScalar,
  kAvx512Vnni,
  kAmx,
};

// Error messages format numbers and shapes with snprintf, never through
// std::ostream: in torch's CUDA wheels several shared objects export their own
// copies of libstdc++ symbols, and an extension's ostream integer formatting bound
// across those copies was seen to crash the process instead of raising.
std::string num(int64_t v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%lld", static_cast<long long>(v));
  return buf;
}

std::string shape(at::IntArrayRef sizes) {
  std::string out = "[";
  for (size_t i = 0; i < sizes.size(); ++i) {
    out += (i ? ", " : "") + num(sizes[i]);
  }
  return out + "]";
}

#if defined(DA8W4_HAVE_AMX)
// AMX int8 usable: the CPU has AMX-INT8 and ATen's at::cpu::init_amx() succeeds (it
// checks AMX-TILE and asks Linux for the tile data state, arch_prctl
// ARCH_REQ_XCOMP_PERM, without which the first tile instruction faults). Checked once
// per process.
bool amx_usable() {
  unsigned eax, ebx, ecx, edx;
  const bool amx_int8 =
      __get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) && (edx & (1u << 25));
  return amx_int8 && at::cpu::init_amx();
}
#endif

bool isa_supported(Isa isa) {
  switch (isa) {
    case Isa::kAmx:
#if defined(DA8W4_HAVE_AMX)
    {
      static const bool ok = isa_supported(Isa::kAvx512Vnni) && amx_usable();
      return ok;
    }
#else
      return false;
#endif
    case Isa::kScalar:
      return true;
    case Isa::kAvx512Vnni:
#if defined(DA8W4_HAVE_AVX512VNNI)
      return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
          __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni");
#else
      return false;
#endif
  }
  return false;
}

Isa best_isa() {
  static const Isa best = [] {
    if (isa_supported(Isa::kAmx)) {
      return Isa::kAmx;
    }
    if (isa_supported(Isa::kAvx512Vnni)) {
      return Isa::kAvx512Vnni;
    }
    return Isa::kScalar;
  }();
  return best;
}

using TileFn = void (*)(const TileParams&);

TileFn tile_fn(Isa isa) {
  switch (isa) {
#if defined(DA8W4_HAVE_AVX512VNNI)
    case Isa::kAmx:  // rows the AMX path does not take (see da8w4_linear_cpu)
    case Isa::kAvx512Vnni:
      return &tile_avx512vnni;
#endif
    default:
      return &tile_scalar;
  }
}

// ---------------------------------------------------------------------------
// Prepack
// ---------------------------------------------------------------------------
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> da8w4_linear_prepack_cpu(
    const at::Tensor& weight,
    const at::Tensor& scales,
    const at::Tensor& qzeros) {
  TORCH_CHECK(
      weight.dim() == 2 && weight.scalar_type() == at::kByte,
      "da8w4_linear_prepack_cpu: expected a 2-D uint8 weight [N, K], got ",
      weight.scalar_type(),
      " of shape ",
      shape(weight.sizes()));
  const int64_t N = weight.size(0);
  const int64_t K = weight.size(1);
  at::Tensor s = scales.dim() == 1 ? scales.unsqueeze(-1) : scales;
  at::Tensor z = qzeros.dim() == 1 ? qzeros.unsqueeze(-1) : qzeros;
  TORCH_CHECK(
      s.dim() == 2 && s.size(0) == N && s.size(1) >= 1,
      "da8w4_linear_prepack_cpu: expected scales [N, G] (or [N]) with N=",
      num(N),
      ", got ",
      shape(scales.sizes()));
  TORCH_CHECK(
      z.sizes() == s.sizes(),
      "da8w4_linear_prepack_cpu: qzeros must have the shape of scales ",
      shape(scales.sizes()),
      ", got ",
      shape(qzeros.sizes()));
  const int64_t G = s.size(1);
  TORCH_CHECK(
      N % kBlockN == 0,
      "da8w4_linear_prepack_cpu: N=",
      num(N),
      " must be a multiple of ",
      num(kBlockN));
  TORCH_CHECK(
      K > 0 && K % G == 0,
      "da8w4_linear_prepack_cpu: K=",
      num(K),
      " must be a positive multiple of the number of groups G=",
      num(G));
  const int64_t group_size = K / G;
  const int64_t BK = std::min<int64_t>(group_size, 128);
  TORCH_CHECK(
      group_size % BK == 0,
      "da8w4_linear_prepack_cpu: group_size=",
      num(group_size),
      " must be a multiple of the k block ",
      num(BK));
  TORCH_CHECK(
      BK % 4 == 0,
      "da8w4_linear_prepack_cpu: group_size=",
      num(group_size),
      " must be a multiple of 4 for this kernel's packed layout");
  at::Tensor w = weight.contiguous();
  if (w.numel() > 0) {
    TORCH_CHECK(
        w.max().item<uint8_t>() <= 15,
        "da8w4_linear_prepack_cpu: weight values must be int4 in [0, 15]");
  }
  const int64_t Nc = N / kBlockN;
  const int64_t Kc = K / BK;
  const int64_t bpg = group_size / BK;

  at::Tensor sf = s.to(at::kFloat).contiguous();
  at::Tensor zi = z.to(at::kChar).contiguous();
  // [N, G] -> [Nc, G, 32]
  at::Tensor packed_scales = sf.view({Nc, kBlockN, G}).permute({0, 2, 1}).contiguous();
  at::Tensor packed_qzeros = zi.view({Nc, kBlockN, G}).permute({0, 2, 1}).contiguous();
  // int8, not uint8: the bytes hold two nibbles each, as before, in another order
  // than earlier versions' uint8 weights, which da8w4_linear_cpu therefore refuses.
  at::Tensor packed = at::empty({Nc, Kc, BK, kBlockN / 2}, weight.options().dtype(at::kChar));
  at::Tensor comp = at::empty({Nc, Kc, kBlockN}, weight.options().dtype(at::kInt));

  const uint8_t* wp = w.data_ptr<uint8_t>();
  const int8_t* zp = zi.data_ptr<int8_t>();
  uint8_t* pp = static_cast<uint8_t*>(packed.data_ptr());
  int32_t* cp = comp.data_ptr<int32_t>();
  at::parallel_for(0, Nc * Kc, 1, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      const int64_t nb = t / Kc;
      const int64_t c = t % Kc;
      const int64_t g = c / bpg;
      uint8_t* tile = pp + t * BK * 16;
      for (int64_t k = 0; k < BK; ++k) {
        for (int64_t j = 0; j < 16; ++j) {
          const uint8_t lo = wp[(nb * kBlockN + j) * K + c * BK + k];
          const uint8_t hi = wp[(nb * kBlockN + 16 + j) * K + c * BK + k];
          tile[(k / 4) * 64 + j * 4 + (k % 4)] = static_cast<uint8_t>(lo | (hi << 4));
        }
      }
      for (int64_t j = 0; j < kBlockN; ++j) {
        const int64_t n = nb * kBlockN + j;
        const int32_t zpv = zp[n * G + g];
        int32_t sum = 0;
        for (int64_t k = 0; k < BK; ++k) {
          sum += static_cast<int32_t>(wp[n * K + c * BK + k]) - zpv;
        }
        cp[t * kBlockN + j] = sum;
      }
    }
  });
  return std::make_tuple(packed, packed_scales, packed_qzeros, comp);
}

// ---------------------------------------------------------------------------
// Linear
// ---------------------------------------------------------------------------
template <typename T>
void store_tile(const float* src, int64_t rows, T* dst, int64_t ldd) {
  for (int64_t m = 0; m < rows; ++m) {
    for (int64_t j = 0; j < kBlockN; ++j) {
      dst[m * ldd + j] = static_cast<T>(src[m * kBlockN + j]);  // round to nearest even
    }
  }
}

void check_shape(const at::Tensor& t, at::IntArrayRef expected, const char* name) {
  TORCH_CHECK(
      t.sizes() == expected,
      "da8w4_linear_cpu: expected ",
      name,
      " of shape ",
      shape(expected),
      ", got ",
      shape(t.sizes()));
}

void check_dtype(const at::Tensor& t, at::ScalarType expected, const char* name) {
  TORCH_CHECK(
      t.scalar_type() == expected,
      "da8w4_linear_cpu: expected ",
      name,
      " of dtype ",
      expected,
      ", got ",
      t.scalar_type());
}

// ---------------------------------------------------------------------------
// Work distribution. Items go to the intra-op threads as they ask for them (see
// parallel_items), so a thread that runs slower (a vCPU sharing its core, a busy
// neighbour) takes fewer of them: with at::parallel_for's equal contiguous ranges alone
// the slowest thread took several times as long as the fastest on equal work on an AMX
// host.
// ---------------------------------------------------------------------------
#if defined(DA8W4_HAVE_AMX)
constexpr int64_t kAmxItemsPerThread = 8;
#endif

// Calls worker(next) once on each of up to at::get_num_threads() threads; next()
// returns the thread's next item in [0, n), or -1 when none is left.
// kOne (few large items, the AMX path): one item at a time from a shared counter.
// kOwned (many small items, the register-tile paths): thread t owns the t-th of
// `threads` equal contiguous ranges and takes its items in order, then takes what is
// left of the others' ranges, one item at a time (a finished thread reads each other
// range's line once: cheaper, measured, than keeping a shared count of open ranges that
// every take would read). A thread so streams one long run of
// consecutive items (many small items taken from a shared counter lost the hardware
// prefetcher's streams: on 2 threads at M = 1-4, slower than equal ranges), a slower
// thread is evened out by the others, and, in OpenMP builds at a given thread count, the
// same thread reads the same weight blocks on every call (at::parallel_for gives OpenMP
// thread t the index t): a weight that fits in the threads' L2 caches together can stay
// there from call to call, as long as the threads stay on their cores.
enum class Chunks { kOne, kOwned };

template <typename Worker>
void parallel_items(int64_t n, Chunks chunks, const Worker& worker) {
  const int64_t threads = std::min<int64_t>(n, at::get_num_threads());
  if (chunks == Chunks::kOne) {
    std::atomic<int64_t> counter{0};
    at::parallel_for(0, threads, 1, [&](int64_t, int64_t) {
      worker([&]() -> int64_t {
        const int64_t i = counter.fetch_add(1, std::memory_order_relaxed);
        return i < n ? i : -1;
      });
    });
    return;
  }
  struct alignas(64) Range {  // one cache line each: the owner's takes stay local
    std::atomic<int64_t> next;
    int64_t end;
  };
  std::vector<Range> ranges(threads);
  for (int64_t t = 0; t < threads; ++t) {
    ranges[t].next.store(t * n / threads, std::memory_order_relaxed);
    ranges[t].end = (t + 1) * n / threads;
  }
  at::parallel_for(0, threads, 1, [&](int64_t own, int64_t) {
    int64_t r = own;  // the range taken from: its own first, then the next ones in turn
    worker([&]() -> int64_t {
      for (; r < own + threads; ++r) {
        Range& range = ranges[r % threads];
        if (range.next.load(std::memory_order_relaxed) < range.end) {
          const int64_t i = range.next.fetch_add(1, std::memory_order_relaxed);
          if (i < range.end) {
            return i;
          }
        }
      }
      return -1;
    });
  });
}

#if defined(DA8W4_HAVE_AMX)
// Rows below which the auto-selected AMX path hands over to the AVX512-VNNI register
// kernel.
constexpr int64_t kAmxMinM = 8;

// An AMX work item whose zero points do not fit the AMX path (zw < -112): the
// AVX512-VNNI tile kernel does it instead (same results).
void vnni_item(const AmxParams& p, at::ScalarType output_dtype) {
  std::vector<int32_t> rowsum(p.M * p.Kc);
  for (int64_t m = 0; m < p.M; ++m) {
    for (int64_t c = 0; c < p.Kc; ++c) {
      int32_t sum = 0;
      for (int64_t k = 0; k < p.BK; ++k) {
        const uint8_t v = p.a[m * p.lda + c * p.BK + k];
        sum += p.symmetric ? static_cast<int32_t>(static_cast<int8_t>(v)) : static_cast<int32_t>(v);
      }
      rowsum[m * p.Kc + c] = sum;
    }
  }
  std::vector<float> buf(p.M * kBlockN);
  for (int64_t nb = 0; nb < p.nblk; ++nb) {
    TileParams q;
    q.a = p.a;
    q.lda = p.lda;
    q.rows = p.M;
    q.rowsum = rowsum.data();
    q.za = p.za;
    q.sa = p.sa;
    q.w = p.w + nb * p.Kc * p.BK * (kBlockN / 2);
    q.sw = p.sw + nb * p.G * kBlockN;
    q.zw = p.zw + nb * p.G * kBlockN;
    q.comp = p.comp ? p.comp + nb * p.Kc * kBlockN : nullptr;
    q.bias = p.bias ? p.bias + nb * kBlockN : nullptr;
    q.Kc = p.Kc;
    q.BK = p.BK;
    q.blocks_per_group = p.blocks_per_group;
    q.symmetric = p.symmetric;
    q.out = buf.data();
    q.ldo = kBlockN;
    tile_avx512vnni(q);
    if (output_dtype == at::kFloat) {
      store_tile(buf.data(), p.M, static_cast<float*>(p.out) + nb * kBlockN, p.ldo);
    } else if (output_dtype == at::kBFloat16) {
      store_tile(buf.data(), p.M, static_cast<at::BFloat16*>(p.out) + nb * kBlockN, p.ldo);
    } else {
      store_tile(buf.data(), p.M, static_cast<at::Half*>(p.out) + nb * kBlockN, p.ldo);
    }
  }
}

// Blocking of the AMX path over M and N, anchored on Inductor's CPU GEMM template
// (cpp_gemm_template.py, its cache blocking): the A block of an item is kept L2-sized and
// reused along N, and the threads write the output they first touch in row bands of their
// own.

// Per-core L2 in bytes (sysconf; 2 MiB, Sapphire Rapids', where the system does not say).
int64_t l2_bytes() {
  static const int64_t v = [] {
    const long s = sysconf(_SC_LEVEL2_CACHE_SIZE);
    return s > 0 ? static_cast<int64_t>(s) : int64_t{2} << 20;
  }();
  return v;
}

// Writes one byte into every page that starts inside [begin, end): the page faults of a
// freshly mapped output are taken here, by the thread that owns these rows, instead of by
// every thread at once in the GEMM (see run_amx).
void touch_pages(char* begin, char* end) {
  static const int64_t page = [] {
    const long s = sysconf(_SC_PAGESIZE);
    return s > 0 ? static_cast<int64_t>(s) : int64_t{4096};
  }();
  const uintptr_t first = (reinterpret_cast<uintptr_t>(begin) + page - 1) / page * page;
  for (uintptr_t p = first; p < reinterpret_cast<uintptr_t>(end); p += page) {
    *reinterpret_cast<volatile char*>(p) = 0;
  }
}

// Work items of the AMX path: groups of `nblk` consecutive N blocks times chunks of m
// tiles. Each item unpacks its weight panel once and reuses it for all of its rows.
void run_amx(const uint8_t* a, int64_t K, int64_t M, const int32_t* za, const float* sa,
             const uint8_t* w, const float* sw, const int8_t* zw, const int32_t* comp,
             const float* bias, int64_t Nc, int64_t Kc, int64_t BK, int64_t G, bool symmetric,
             at::ScalarType output_dtype, at::Tensor& y) {
  const int64_t N = Nc * kBlockN;
  const int64_t threads = at::get_num_threads();
  const int64_t mtiles = (M + kTileM - 1) / kTileM;
  const int64_t kstep = amx_k_step(BK);
  // N: one m tile: one N block per item (most parallelism; nothing to reuse). Several: up
  // to 4 N blocks per item, as many as keep the unpacked panel (nblk * K * 32 bytes)
  // within 1 MiB of L2 and leave >= `per_thread` items per thread (enough for the
  // shared counter to even out threads of unequal speed).
  const int64_t per_thread = kAmxItemsPerThread;
  int64_t nblk = 1;
  if (mtiles > 1) {
    nblk = std::clamp<int64_t>((int64_t{1} << 20) / (K * kBlockN), 1, 4);
    while (nblk > 1 && (Nc + nblk - 1) / nblk < per_thread * threads) {
      --nblk;
    }
  }
  const int64_t ngroups = (Nc + nblk - 1) / nblk;
  // M: chunks of at most `chunk_rows` rows per item. As in Inductor's cache blocking
  // (A block in half of L2, reused along N), an item's packed A (rows x K bytes) is kept
  // within L2 / 2, but at least 256 rows, so that the panel is unpacked once per 8 m tiles
  // or more (its cost per block grows as the chunk shrinks). Without the cap every item
  // streamed all M x K bytes of A (at M=8192, 32-112 MiB per item, from L3 or DRAM).
  int64_t chunk_rows = std::max<int64_t>(256, l2_bytes() / 2 / K / kTileM * kTileM);
  int64_t mchunks = (mtiles * kTileM + chunk_rows - 1) / chunk_rows;
  // Too few items for the threads: split the rows further (each chunk unpacks its panel).
  if (mtiles > 1 && ngroups * mchunks < per_thread * threads) {
    mchunks = std::min(mtiles, (per_thread * threads + ngroups - 1) / ngroups);
  }
  const int64_t tiles_per_chunk = (mtiles + mchunks - 1) / mchunks;
  mchunks = (mtiles + tiles_per_chunk - 1) / tiles_per_chunk;
  // Items are ordered chunk by chunk (all N groups of chunk 0 first, ...): the threads
  // then work on one A chunk at a time, which stays in L3 for all of them, and a thread's
  // next item mostly reuses the chunk it has in L2.
  // Several m tiles: the activation is first packed into the tiles' layout (each tile
  // row load then reads 1 KiB in a row instead of 16 lines a row of K apart). The same
  // pass touches the output rows of each m tile (touch_pages): an output of 32 MiB or more
  // is a fresh mmap on every call (glibc's largest mmap threshold), and in the GEMM the
  // threads write neighbouring column strips of the same rows, so that without this all of
  // them fault on the same page at once, page after page.
  at::Tensor a_packed;
  const int64_t esize = y.element_size();
  char* out = static_cast<char*>(y.data_ptr());
  if (mtiles > 1) {
    a_packed = at::empty({mtiles * kTileM * K}, y.options().dtype(at::kByte));
    uint8_t* ap = a_packed.data_ptr<uint8_t>();
    at::parallel_for(0, mtiles, 1, [&](int64_t begin, int64_t end) {
      for (int64_t mt = begin; mt < end; ++mt) {
        const int64_t rows = std::min(kTileM, M - mt * kTileM);
        pack_a_amx(a + mt * kTileM * K, K, rows, K, kstep, ap + mt * kTileM * K);
        char* row0 = out + mt * kTileM * N * esize;
        touch_pages(row0, row0 + rows * N * esize);
      }
    });
  }
  const uint8_t* ap = a_packed.defined() ? a_packed.data_ptr<uint8_t>() : nullptr;
  const OutKind kind = output_dtype == at::kFloat ? OutKind::kFloat
      : output_dtype == at::kBFloat16             ? OutKind::kBFloat16
                                                  : OutKind::kHalf;
  // Each thread's working memory (unpacked weight, accumulators), freed with the call.
  const int64_t scratch_bytes = amx_scratch_bytes(nblk, Kc, BK, mtiles > 1);
  at::Tensor scratch = at::empty({threads * scratch_bytes}, y.options().dtype(at::kByte));
  parallel_items(ngroups * mchunks, Chunks::kOne, [&](const auto& next) {
    const int64_t slot = at::get_thread_num();
    TORCH_CHECK(slot >= 0 && slot < threads, "da8w4_linear_cpu: thread number ", num(slot), " of ", num(threads));
    uint8_t* own_scratch = scratch.data_ptr<uint8_t>() + slot * scratch_bytes;
    // The tile state is released however the worker leaves: vnni_item may throw
    // after an item has configured the tiles, and a thread that kept them configured would
    // skip the next call's LDTILECFG after other code on it released them. ATen's brgemm
    // (oneDNN) also skips its LDTILECFG while it believes its own configuration is loaded
    // on the thread: brgemm_release() tells it that it is not.
    struct ReleaseTiles {
      ~ReleaseTiles() {
        amx_release();
        at::native::cpublas::brgemm_release();
      }
    } release_tiles;
    for (int64_t t = next(); t >= 0; t = next()) {
      const int64_t ng = t % ngroups;
      const int64_t mc = t / ngroups;
      const int64_t nb0 = ng * nblk;
      const int64_t m0 = mc * tiles_per_chunk * kTileM;
      AmxParams p;
      p.a = a + m0 * K;
      p.lda = K;
      p.a_packed = ap ? ap + m0 * K : nullptr;
      p.M = std::min(M, m0 + tiles_per_chunk * kTileM) - m0;
      p.za = za ? za + m0 : nullptr;
      p.sa = sa + m0;
      p.w = w + nb0 * Kc * BK * (kBlockN / 2);
      p.sw = sw + nb0 * G * kBlockN;
      p.zw = zw + nb0 * G * kBlockN;
      p.comp = comp ? comp + nb0 * Kc * kBlockN : nullptr;
      p.bias = bias ? bias + nb0 * kBlockN : nullptr;
      p.nblk = std::min(nblk, Nc - nb0);
      p.Kc = Kc;
      p.BK = BK;
      p.G = G;
      p.blocks_per_group = Kc / G;
      p.symmetric = symmetric;
      p.out_kind = kind;
      p.out = out + (m0 * N + nb0 * kBlockN) * esize;
      p.ldo = N;
      p.scratch = own_scratch;
      if (p.M > 0 && !gemm_amx(p)) {
        vnni_item(p, output_dtype);
      }
    }
  });
}
#endif

at::Tensor da8w4_linear_cpu(
    const at::Tensor& input,
    const at::Tensor& input_scales,
    const at::Tensor& input_qzeros,
    const at::Tensor& weight,
    const at::Tensor& weight_scales,
    const at::Tensor& weight_qzeros,
    const at::Tensor& compensation,
    const std::optional<at::Tensor>& bias,
    at::ScalarType output_dtype) {
  TORCH_CHECK(
      input.scalar_type() == at::kByte || input.scalar_type() == at::kChar,
      "da8w4_linear_cpu: input must be uint8 (asymmetric) or int8 (symmetric), got ",
      input.scalar_type());
  TORCH_CHECK(
      output_dtype == at::kFloat || output_dtype == at::kBFloat16 || output_dtype == at::kHalf,
      "da8w4_linear_cpu: output_dtype must be float32, bfloat16 or float16, got ",
      output_dtype);
  TORCH_CHECK(input.dim() >= 1, "da8w4_linear_cpu: input must have at least one dimension");
  TORCH_CHECK(
      weight.scalar_type() != at::kByte,
      "da8w4_linear_cpu: the weight is uint8, packed by an earlier version of da8w4_linear_prepack_cpu ",
      "whose byte order this kernel does not read; pack the unpacked weight again with this version");
  TORCH_CHECK(
      weight.dim() == 4 && weight.scalar_type() == at::kChar,
      "da8w4_linear_cpu: expected a prepacked int8 weight [Nc, Kc, BK, 16], got ",
      weight.scalar_type(),
      " of shape ",
      shape(weight.sizes()));
  TORCH_CHECK(
      weight.size(3) * 2 == kBlockN,
      "da8w4_linear_cpu: weight.size(3) * 2 must be the block size ",
      num(kBlockN),
      ", got weight of shape ",
      shape(weight.sizes()));
  const bool symmetric = input.scalar_type() == at::kChar;
  const int64_t Nc = weight.size(0);
  const int64_t Kc = weight.size(1);
  const int64_t BK = weight.size(2);
  const int64_t N = Nc * kBlockN;
  const int64_t K = Kc * BK;
  TORCH_CHECK(
      BK > 0 && BK % 4 == 0 && BK <= 128,
      "da8w4_linear_cpu: the k block weight.size(2)=",
      num(BK),
      " must be a positive multiple of 4, at most 128 (weights from da8w4_linear_prepack_cpu); the int32 block "
      "products are exact only up to that");
  TORCH_CHECK(
      input.size(-1) == K,
      "da8w4_linear_cpu: input.size(-1)=",
      num(input.size(-1)),
      " does not match the weight's K=",
      num(K),
      " (Kc=",
      num(Kc),
      " * BK=",
      num(BK),
      ")");
  const int64_t M = c10::multiply_integers(input.sizes().begin(), input.sizes().end() - 1);
  TORCH_CHECK(
      input_scales.numel() == M,
      "da8w4_linear_cpu: input_scales must have one scale per row (",
      num(M),
      "), got ",
      num(input_scales.numel()));
  TORCH_CHECK(
      input_qzeros.sizes() == input_scales.sizes(),
      "da8w4_linear_cpu: input_qzeros must have the shape of input_scales ",
      shape(input_scales.sizes()),
      ", got ",
      shape(input_qzeros.sizes()));
  check_dtype(input_scales, at::kFloat, "input_scales");
  TORCH_CHECK(
      weight_scales.dim() == 3 && weight_scales.size(0) == Nc &&
          weight_scales.size(2) == kBlockN && weight_scales.size(1) >= 1,
      "da8w4_linear_cpu: expected weight_scales of shape [",
      num(Nc),
      ", G, ",
      num(kBlockN),
      "], got ",
      shape(weight_scales.sizes()));
  const int64_t G = weight_scales.size(1);
  TORCH_CHECK(
      Kc % G == 0,
      "da8w4_linear_cpu: the number of k blocks Kc=",
      num(Kc),
      " must be a multiple of the number of groups G=",
      num(G));
  check_dtype(weight_scales, at::kFloat, "weight_scales");
  check_shape(weight_qzeros, weight_scales.sizes(), "weight_qzeros");
  check_dtype(weight_qzeros, at::kChar, "weight_qzeros");
  if (!symmetric) {
    check_dtype(input_qzeros, at::kInt, "input_qzeros");
    check_shape(compensation, {Nc, Kc, kBlockN}, "compensation");
    check_dtype(compensation, at::kInt, "compensation");
  }
  if (bias.has_value()) {
    TORCH_CHECK(
        bias->dim() == 1 && bias->size(0) == N,
        "da8w4_linear_cpu: expected bias of shape [",
        num(N),
        "], got ",
        shape(bias->sizes()));
    check_dtype(*bias, at::kFloat, "bias");
  }
  for (const at::Tensor* t : {&input, &input_scales, &input_qzeros, &weight, &weight_scales, &weight_qzeros}) {
    TORCH_CHECK(t->device().is_cpu(), "da8w4_linear_cpu: all tensors must be on CPU");
  }
  TORCH_CHECK(
      (symmetric || compensation.device().is_cpu()) && (!bias.has_value() || bias->device().is_cpu()),
      "da8w4_linear_cpu: all tensors must be on CPU");

  std::vector<int64_t> out_sizes(input.sizes().begin(), input.sizes().end() - 1);
  out_sizes.push_back(N);
  at::Tensor y = at::empty(out_sizes, input.options().dtype(output_dtype));
  if (M == 0 || N == 0) {
    return y;
  }
  if (K == 0) {
    return bias.has_value() ? y.copy_(bias->expand_as(y)) : y.zero_();
  }

  const at::Tensor a = input.contiguous();
  const at::Tensor sa = input_scales.contiguous();
  const at::Tensor za = symmetric ? at::Tensor() : input_qzeros.contiguous();
  const at::Tensor w = weight.contiguous();
  const at::Tensor sw = weight_scales.contiguous();
  const at::Tensor zw = weight_qzeros.contiguous();
  const at::Tensor comp = symmetric ? at::Tensor() : compensation.contiguous();
  const at::Tensor b = bias.has_value() ? bias->contiguous() : at::Tensor();

  const uint8_t* a_ptr = static_cast<const uint8_t*>(a.data_ptr());
  Isa isa = best_isa();
#if defined(DA8W4_HAVE_AMX)
  // Below kAmxMinM rows the AVX512-VNNI register kernel is faster. Items whose zero
  // points do not fit the AMX path's int8 (w - zw) go to the AVX512-VNNI kernel inside
  // run_amx.
  if (isa == Isa::kAmx && M < kAmxMinM) {
    isa = Isa::kAvx512Vnni;
  }
  if (isa == Isa::kAmx) {
    run_amx(a_ptr, K, M, symmetric ? nullptr : za.data_ptr<int32_t>(), sa.data_ptr<float>(),
            static_cast<const uint8_t*>(w.data_ptr()), sw.data_ptr<float>(), zw.data_ptr<int8_t>(),
            symmetric ? nullptr : comp.data_ptr<int32_t>(), b.defined() ? b.data_ptr<float>() : nullptr,
            Nc, Kc, BK, G, symmetric, output_dtype, y);
    return y;
  }
#endif
  const TileFn fn = tile_fn(isa);

  // Per-row, per-k-block sums of the activation bytes (as unsigned or signed values).
  std::vector<int32_t> rowsum(M * Kc);
  at::parallel_for(0, M, 16, [&](int64_t begin, int64_t end) {
    for (int64_t m = begin; m < end; ++m) {
      const uint8_t* row = a_ptr + m * K;
      for (int64_t c = 0; c < Kc; ++c) {
        int32_t s = 0;
        if (symmetric) {
          const int8_t* srow = reinterpret_cast<const int8_t*>(row) + c * BK;
          for (int64_t k = 0; k < BK; ++k) {
            s += srow[k];
          }
        } else {
          for (int64_t k = 0; k < BK; ++k) {
            s += row[c * BK + k];
          }
        }
        rowsum[m * Kc + c] = s;
      }
    }
  });

  // Work items: (block of up to kBlockM rows) x (N block of 32 columns). A thread's
  // range walks consecutive N blocks, so the packed weight streams in order.
  constexpr int64_t kBlockM = 64;
  const int64_t Mc = (M + kBlockM - 1) / kBlockM;
  const bool fp32_out = output_dtype == at::kFloat;
  parallel_items(Mc * Nc, Chunks::kOwned, [&](const auto& next) {
    // A tile's fp32 result before its 16-bit store: 8 KiB, on the stack (not one more
    // malloc and free per thread and call).
    alignas(64) float buf[kBlockM * kBlockN];
    for (int64_t t = next(); t >= 0; t = next()) {
      const int64_t mb = t / Nc;
      const int64_t nb = t % Nc;
      const int64_t m0 = mb * kBlockM;
      const int64_t rows = std::min(kBlockM, M - m0);
      TileParams p;
      p.a = a_ptr + m0 * K;
      p.lda = K;
      p.rows = rows;
      p.rowsum = rowsum.data() + m0 * Kc;
      p.za = symmetric ? nullptr : za.data_ptr<int32_t>() + m0;
      p.sa = sa.data_ptr<float>() + m0;
      p.w = static_cast<const uint8_t*>(w.data_ptr()) + nb * Kc * BK * 16;
      p.sw = sw.data_ptr<float>() + nb * G * kBlockN;
      p.zw = zw.data_ptr<int8_t>() + nb * G * kBlockN;
      p.comp = symmetric ? nullptr : comp.data_ptr<int32_t>() + nb * Kc * kBlockN;
      p.bias = b.defined() ? b.data_ptr<float>() + nb * kBlockN : nullptr;
      p.Kc = Kc;
      p.BK = BK;
      p.blocks_per_group = Kc / G;
      p.symmetric = symmetric;
      if (fp32_out) {
        p.out = y.data_ptr<float>() + m0 * N + nb * kBlockN;
        p.ldo = N;
        fn(p);
      } else {
        p.out = buf;
        p.ldo = kBlockN;
        fn(p);
        if (output_dtype == at::kBFloat16) {
          store_tile(buf, rows, y.data_ptr<at::BFloat16>() + m0 * N + nb * kBlockN, N);
        } else {
          store_tile(buf, rows, y.data_ptr<at::Half>() + m0 * N + nb * kBlockN, N);
        }
      }
    }
  });
  return y;
}

}  // namespace da8w4

}  // namespace

TORCH_LIBRARY_IMPL(torchao, CPU, m) {
  m.impl("da8w4_linear_prepack_cpu", &da8w4::da8w4_linear_prepack_cpu);
  m.impl("da8w4_linear_cpu", &da8w4::da8w4_linear_cpu);
}

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC pop_options
#endif
