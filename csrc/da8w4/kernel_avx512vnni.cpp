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

}  // namespace

void tile_avx512vnni(const TileParams& p) {
  if (p.symmetric) {
    tile_impl<true>(p);
  } else {
    tile_impl<false>(p);
  }
}

}  // namespace da8w4
