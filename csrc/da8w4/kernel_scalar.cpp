// Portable scalar reference path of the da8w4 tile kernel (see kernel.h).
#include "kernel.h"

namespace da8w4 {

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
