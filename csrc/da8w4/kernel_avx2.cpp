// AVX2 path of the da8w4 tile kernel (see kernel.h for the layout and math).
// Built with -mavx2 -mfma -ffp-contract=off and only called after a run-time CPU
// check. Must not include torch headers (see kernel.h).
#include <immintrin.h>

#include <cstring>

#include "kernel.h"

// No FMA contraction in this file (kernel.h), whatever the flags.
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#else
#pragma GCC push_options
#pragma GCC optimize("fp-contract=off")
#endif

namespace da8w4 {
namespace {

inline int32_t load4(const uint8_t* p) {
  int32_t v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

// vpmaddubsw (u8 x s8 -> adjacent pairs summed into s16) gives two products per 16-bit
// lane. Operands are 0..15 against 0..255 (or -128..127), so a pair is within
// [-3840, 7650] and never saturates; up to four such results (16 k) are summed in s16
// (|sum| <= 30600 < 32767) before vpmaddwd with ones widens them to int32. Exact.
template <bool kSym, int R>
inline void block_rows(const TileParams& p, int64_t c, int64_t m0) {
  const uint8_t* wt = p.w + c * p.BK * 16;
  const uint8_t* a0 = p.a + m0 * p.lda + c * p.BK;
  const __m256i nibble = _mm256_set1_epi8(0x0F);
  const __m256i ones = _mm256_set1_epi16(1);
  // acc[r][q] holds columns 8q..8q+7: q = 0, 1 from the low nibbles of the two 32-byte
  // halves of a 64-byte row, q = 2, 3 from their high nibbles.
  __m256i acc[R][4];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) {
    for (int q = 0; q < 4; ++q) {
      acc[r][q] = _mm256_setzero_si256();
    }
  }
  const int64_t nk4 = p.BK / 4;
  for (int64_t k4_0 = 0; k4_0 < nk4; k4_0 += 4) {
    const int64_t k4_end = k4_0 + 4 < nk4 ? k4_0 + 4 : nk4;
    __m256i acc16[R][4];
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      for (int q = 0; q < 4; ++q) {
        acc16[r][q] = _mm256_setzero_si256();
      }
    }
    for (int64_t k4 = k4_0; k4 < k4_end; ++k4) {
      __m256i ab[R];
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) {
        ab[r] = _mm256_set1_epi32(load4(a0 + r * p.lda + k4 * 4));
      }
#pragma GCC unroll 2
      for (int h = 0; h < 2; ++h) {
        const __m256i v =
            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wt + k4 * 64 + h * 32));
        const __m256i lo = _mm256_and_si256(v, nibble);
        const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), nibble);
#pragma GCC unroll 4
        for (int r = 0; r < R; ++r) {
          const __m256i plo = kSym ? _mm256_maddubs_epi16(lo, ab[r]) : _mm256_maddubs_epi16(ab[r], lo);
          const __m256i phi = kSym ? _mm256_maddubs_epi16(hi, ab[r]) : _mm256_maddubs_epi16(ab[r], hi);
          acc16[r][h] = _mm256_add_epi16(acc16[r][h], plo);
          acc16[r][2 + h] = _mm256_add_epi16(acc16[r][2 + h], phi);
        }
      }
    }
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      for (int q = 0; q < 4; ++q) {
        acc[r][q] = _mm256_add_epi32(acc[r][q], _mm256_madd_epi16(acc16[r][q], ones));
      }
    }
  }
  const int64_t g = c / p.blocks_per_group;
  const int8_t* zw = p.zw + g * kBlockN;
  const float* sw = p.sw + g * kBlockN;
#pragma GCC unroll 4
  for (int q = 0; q < 4; ++q) {
    const __m256i zwq =
        _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(zw + 8 * q)));
    const __m256 swq = _mm256_loadu_ps(sw + 8 * q);
    __m256i compq = _mm256_setzero_si256();
    if (!kSym) {
      compq = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p.comp + c * kBlockN + 8 * q));
    }
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      const int64_t m = m0 + r;
      const __m256i s = _mm256_set1_epi32(p.rowsum[m * p.Kc + c]);
      __m256i P = _mm256_sub_epi32(acc[r][q], _mm256_mullo_epi32(zwq, s));
      if (!kSym) {
        P = _mm256_sub_epi32(P, _mm256_mullo_epi32(_mm256_set1_epi32(p.za[m]), compq));
      }
      float* out = p.out + m * p.ldo + 8 * q;
      const __m256 d = _mm256_mul_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(P), _mm256_set1_ps(p.sa[m])), swq);
      _mm256_storeu_ps(out, _mm256_add_ps(_mm256_loadu_ps(out), d));
    }
  }
}

template <bool kSym>
void tile_impl(const TileParams& p) {
  // One row at a time: 4 int32 + 4 s16 accumulators, 2 weight, broadcast and constants
  // fit the 16 ymm registers (two rows spill and measured slower).
  constexpr int kRows = 1;
  for (int64_t m = 0; m < p.rows; ++m) {
    float* out = p.out + m * p.ldo;
    for (int q = 0; q < 4; ++q) {
      _mm256_storeu_ps(out + 8 * q, p.bias ? _mm256_loadu_ps(p.bias + 8 * q) : _mm256_setzero_ps());
    }
  }
  for (int64_t c = 0; c < p.Kc; ++c) {
    int64_t m0 = 0;
    for (; m0 + kRows <= p.rows; m0 += kRows) {
      block_rows<kSym, kRows>(p, c, m0);
    }
  }
}

}  // namespace

void tile_avx2(const TileParams& p) {
  if (p.symmetric) {
    tile_impl<true>(p);
  } else {
    tile_impl<false>(p);
  }
}

}  // namespace da8w4

#if !defined(__clang__)
#pragma GCC pop_options
#endif
