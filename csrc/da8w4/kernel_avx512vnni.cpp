// AVX512-VNNI path of the da8w4 tile kernel (see kernel.h for the layout and math).
// Built with -mavx512f -mavx512bw -mavx512vl -mavx512vnni -ffp-contract=off and only
// called after a run-time CPU check. Must not include torch headers (see kernel.h).
#include <immintrin.h>

#include <cstring>

#include "kernel.h"

namespace da8w4 {
namespace {

inline int32_t load4(const uint8_t* p) {
  int32_t v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

// Software prefetch distances, in bytes ahead of the k block being computed. At small M
// the kernel streams the packed weight, scales and compensation from DRAM with little
// work per byte; the hardware prefetcher alone left one core at ~25 GB/s (gate/up,
// M=1) against ~38 GB/s for a plain read, because each miss stalls the compute that
// could overlap it. Measured on Zen 5 (gate/up M=1, one thread: 3.1 -> 2.4 ms, the
// DRAM read rate); 2-4 KiB is a few hundred ns of DRAM traffic at that rate. Reading
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

// Rows [m0, m0 + R) of k-block c: exact int32 dot products with vpdpbusd (u8 x s8,
// four products per 32-bit lane), then the fp32 dequantise-accumulate into p.out.
// Asymmetric: the activation is the unsigned operand and the nibble (0..15) the signed
// one. Symmetric: the nibble is the unsigned operand and the int8 activation the signed
// one. Either way no product can saturate and the zero points are applied afterwards.
// `unpacked`, when given, holds the tile's nibbles already split (lo, hi per k4 row) so
// that many row blocks share one unpacking.
template <bool kSym, int R>
inline void block_rows(const TileParams& p, int64_t c, int64_t m0, const __m512i* unpacked) {
  const uint8_t* wt = p.w + c * p.BK * 16;
  const uint8_t* a0 = p.a + m0 * p.lda + c * p.BK;
  const __m512i nibble = _mm512_set1_epi8(0x0F);
  __m512i acc_lo[R];
  __m512i acc_hi[R];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
    acc_lo[r] = _mm512_setzero_si512();
    acc_hi[r] = _mm512_setzero_si512();
  }
  const int64_t nk4 = p.BK / 4;
  for (int64_t k4 = 0; k4 < nk4; ++k4) {
    __m512i lo, hi;
    if (unpacked != nullptr) {
      lo = _mm512_load_si512(unpacked + 2 * k4);
      hi = _mm512_load_si512(unpacked + 2 * k4 + 1);
    } else {
      const __m512i v = _mm512_loadu_si512(wt + k4 * 64);
      lo = _mm512_and_si512(v, nibble);  // columns 0..15
      hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), nibble);  // columns 16..31
    }
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const __m512i ab = _mm512_set1_epi32(load4(a0 + r * p.lda + k4 * 4));
      if (kSym) {
        acc_lo[r] = _mm512_dpbusd_epi32(acc_lo[r], lo, ab);
        acc_hi[r] = _mm512_dpbusd_epi32(acc_hi[r], hi, ab);
      } else {
        acc_lo[r] = _mm512_dpbusd_epi32(acc_lo[r], ab, lo);
        acc_hi[r] = _mm512_dpbusd_epi32(acc_hi[r], ab, hi);
      }
    }
  }
  const int64_t g = c / p.blocks_per_group;
  const int8_t* zw = p.zw + g * kBlockN;
  const float* sw = p.sw + g * kBlockN;
  const __m512i zw_lo = _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(zw)));
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
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
    const int64_t m = m0 + r;
    const __m512i s = _mm512_set1_epi32(p.rowsum[m * p.Kc + c]);
    __m512i P_lo = _mm512_sub_epi32(acc_lo[r], _mm512_mullo_epi32(zw_lo, s));
    __m512i P_hi = _mm512_sub_epi32(acc_hi[r], _mm512_mullo_epi32(zw_hi, s));
    if (!kSym) {
      const __m512i za = _mm512_set1_epi32(p.za[m]);
      P_lo = _mm512_sub_epi32(P_lo, _mm512_mullo_epi32(za, comp_lo));
      P_hi = _mm512_sub_epi32(P_hi, _mm512_mullo_epi32(za, comp_hi));
    }
    const __m512 sa = _mm512_set1_ps(p.sa[m]);
    float* out = p.out + m * p.ldo;
    const __m512 d_lo = _mm512_mul_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(P_lo), sa), sw_lo);
    const __m512 d_hi = _mm512_mul_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(P_hi), sa), sw_hi);
    _mm512_storeu_ps(out, _mm512_add_ps(_mm512_loadu_ps(out), d_lo));
    _mm512_storeu_ps(out + 16, _mm512_add_ps(_mm512_loadu_ps(out + 16), d_hi));
  }
}

// Tiles of at most kRegRows rows (decode, small batches): the fp32 accumulators of the
// whole tile (2 zmm per row) stay in registers across all k blocks instead of being
// loaded and stored in p.out once per k block as in block_rows; the fp32 operations and
// their order are exactly those of block_rows, so the result is bit-identical. With
// fewer than 4 rows the int32 dot products of even and odd k4 go to separate
// accumulators (summed at the end of the block: exact), so the vpdpbusd chains are
// short enough for the loads to be the limit, not the latency.
constexpr int kRegRows = 4;

template <bool kSym, int R>
void tile_small(const TileParams& p) {
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
      f_lo[r] = _mm512_add_ps(f_lo[r], _mm512_mul_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(P_lo), sa), sw_lo));
      f_hi[r] = _mm512_add_ps(f_hi[r], _mm512_mul_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(P_hi), sa), sw_hi));
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
  switch (p.rows) {
    case 1: tile_small<kSym, 1>(p); return;
    case 2: tile_small<kSym, 2>(p); return;
    case 3: tile_small<kSym, 3>(p); return;
    case 4: tile_small<kSym, 4>(p); return;
    default: break;
  }
  constexpr int kRows = 8;  // 16 int32 accumulators + 2 weight + 1 broadcast zmm
  for (int64_t m = 0; m < p.rows; ++m) {
    float* out = p.out + m * p.ldo;
    const __m512 b_lo = p.bias ? _mm512_loadu_ps(p.bias) : _mm512_setzero_ps();
    const __m512 b_hi = p.bias ? _mm512_loadu_ps(p.bias + 16) : _mm512_setzero_ps();
    _mm512_storeu_ps(out, b_lo);
    _mm512_storeu_ps(out + 16, b_hi);
  }
  // With several row blocks, split the tile's nibbles once per k block (BK <= 128:
  // at most 64 zmm, 4 KiB) instead of once per row block.
  alignas(64) __m512i unpacked[2 * 128 / 4];
  const bool share = p.rows > kRows && p.BK <= 128;
  const __m512i nibble = _mm512_set1_epi8(0x0F);
  for (int64_t c = 0; c < p.Kc; ++c) {
    prefetch_ahead<kSym>(p, c, c / p.blocks_per_group);
    const __m512i* u = nullptr;
    if (share) {
      const uint8_t* wt = p.w + c * p.BK * 16;
      for (int64_t k4 = 0; k4 < p.BK / 4; ++k4) {
        const __m512i v = _mm512_loadu_si512(wt + k4 * 64);
        unpacked[2 * k4] = _mm512_and_si512(v, nibble);
        unpacked[2 * k4 + 1] = _mm512_and_si512(_mm512_srli_epi16(v, 4), nibble);
      }
      u = unpacked;
    }
    int64_t m0 = 0;
    for (; m0 + kRows <= p.rows; m0 += kRows) {
      block_rows<kSym, kRows>(p, c, m0, u);
    }
    switch (p.rows - m0) {
      case 7: block_rows<kSym, 7>(p, c, m0, u); break;
      case 6: block_rows<kSym, 6>(p, c, m0, u); break;
      case 5: block_rows<kSym, 5>(p, c, m0, u); break;
      case 4: block_rows<kSym, 4>(p, c, m0, u); break;
      case 3: block_rows<kSym, 3>(p, c, m0, u); break;
      case 2: block_rows<kSym, 2>(p, c, m0, u); break;
      case 1: block_rows<kSym, 1>(p, c, m0, u); break;
      default: break;
    }
  }
}

}  // namespace

void tile_avx512vnni(const TileParams& p) {
  if (p.symmetric) {
    tile_impl<true>(p);
  } else {
    tile_impl<false>(p);
  }
}

}  // namespace da8w4
