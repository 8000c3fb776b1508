// AMX path of the da8w4 linear (see kernel.h for the layout and the math).
//
// Built with -mamx-tile -mamx-int8 -mavx512f -mavx512bw -mavx512vl -mavx512vnni
// -ffp-contract=off and only called after the run-time check in da8w4_linear_cpu.cpp
// (CPU flags, OS support and the ARCH_REQ_XCOMP_PERM request for tile data). Must not
// include torch headers (see kernel.h).
//
// With DA8W4_AMX_EMULATE defined (CMake option of the same name) the tile instructions
// are replaced by plain C++ with the same semantics, so that everything but the tile
// instructions themselves (unpacking, tiling, partial tiles, the epilogue, the output
// casts) can be tested on a CPU without AMX. Never used for timing.
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "kernel.h"

namespace da8w4 {
namespace {

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

#if defined(DA8W4_AMX_EMULATE)
struct EmuTile {
  int rows = 0;
  int colsb = 0;
  uint8_t d[16][64];
};
thread_local EmuTile emu[8];

inline void tile_config(const TileConfig& cfg) {
  for (int t = 0; t < 8; ++t) {
    emu[t].rows = cfg.rows[t];
    emu[t].colsb = cfg.colsb[t];
  }
}
inline void tile_release() {}
template <int T>
inline void tile_zero() {
  std::memset(emu[T].d, 0, sizeof(emu[T].d));
}
template <int T>
inline void tile_load(const void* p, int64_t stride) {
  for (int r = 0; r < emu[T].rows; ++r) {
    std::memcpy(emu[T].d[r], static_cast<const uint8_t*>(p) + r * stride, emu[T].colsb);
  }
}
template <int T>
inline void tile_store(void* p, int64_t stride) {
  for (int r = 0; r < emu[T].rows; ++r) {
    std::memcpy(static_cast<uint8_t*>(p) + r * stride, emu[T].d[r], emu[T].colsb);
  }
}
template <int C, int A, int B, bool kSignedA>
inline void tile_dp() {
  for (int m = 0; m < emu[C].rows; ++m) {
    for (int n = 0; n < emu[C].colsb / 4; ++n) {
      int32_t acc;
      std::memcpy(&acc, emu[C].d[m] + 4 * n, 4);
      for (int k4 = 0; k4 < emu[A].colsb / 4; ++k4) {
        for (int q = 0; q < 4; ++q) {
          const uint8_t a = emu[A].d[m][4 * k4 + q];
          const int32_t av = kSignedA ? static_cast<int32_t>(static_cast<int8_t>(a)) : a;
          acc += av * static_cast<int32_t>(static_cast<int8_t>(emu[B].d[k4][4 * n + q]));
        }
      }
      std::memcpy(emu[C].d[m] + 4 * n, &acc, 4);
    }
  }
}
#else
inline void tile_config(const TileConfig& cfg) {
  _tile_loadconfig(&cfg);
}
inline void tile_release() {
  _tile_release();
}
#endif

#if defined(DA8W4_AMX_EMULATE)
#define TILE_ZERO(t) tile_zero<t>()
#define TILE_LOAD(t, p, stride) tile_load<t>(p, stride)
#define TILE_STORE(t, p, stride) tile_store<t>(p, stride)
#define TILE_DP(sym, c, a, b) tile_dp<c, a, b, sym>()
#else
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
#endif

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

#if defined(DA8W4_TUNING)
// Benchmarks only: torchao main's route for the block products. Each (N block, k block)
// weight tile is unpacked to VNNI4 rows of all 32 columns ([BK / 4][32][4], as brgemm
// reads B), each block's int32 product comes from p.block_product (ATen's brgemm, one call
// of up to 32 rows) in row-major C, laid out as the tiles store it, and the epilogue,
// acc init and stores are the kernel's. Same bits as the tile route.
inline void unpack_tile_vnni4(const uint8_t* src, const int8_t* zw, int64_t BK, int8_t* dst) {
  const __m512i nibble = _mm512_set1_epi8(0x0F);
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
  for (int64_t k4 = 0; k4 < BK / 4; ++k4) {
    const __m512i v = _mm512_loadu_si512(src + k4 * 64);
    _mm512_storeu_si512(dst + k4 * 128, _mm512_sub_epi8(_mm512_and_si512(v, nibble), z_lo));
    _mm512_storeu_si512(dst + k4 * 128 + 64,
                        _mm512_sub_epi8(_mm512_and_si512(_mm512_srli_epi16(v, 4), nibble), z_hi));
  }
}

template <bool kSym, bool kFloatZp>
void m_tile_by_product(const AmxParams& p, Scratch& s, int64_t R, const uint8_t* a, const int32_t* za,
                       const float* sa, int8_t* panel, bool whole_panel, float* acc, int64_t ncols) {
  const int64_t BK = p.BK;
  const int64_t Kc = p.Kc;
  const int64_t tile_bytes = BK * kBlockN;
  const int64_t packed_tile = BK * kBlockN / 2;
  alignas(64) int32_t c[kTileM * kBlockN];
  for (int64_t i = 0; i < Kc * p.nblk; ++i) {
    const int64_t kc = i / p.nblk;
    const int64_t nb = i % p.nblk;
    const int64_t g = kc / p.blocks_per_group;
    const int8_t* bt = panel + (nb * Kc + kc) * tile_bytes;
    if (!whole_panel) {
      unpack_tile_vnni4(p.w + (nb * Kc + kc) * packed_tile, p.zw + (nb * p.G + g) * kBlockN, BK, panel);
      bt = panel;
    }
    p.block_product(a + kc * BK, p.lda, R, bt, BK, c, p.symmetric);
    for (int64_t r = 0; r < R; ++r) {  // row-major C to the tiles' layout
      _mm512_store_si512(s.cbuf[0][(r / 16) * 2][r % 16], _mm512_load_si512(c + r * kBlockN));
      _mm512_store_si512(s.cbuf[0][(r / 16) * 2 + 1][r % 16], _mm512_load_si512(c + r * kBlockN + 16));
    }
    epilogue<kSym, kFloatZp>(Pending{s.cbuf[0], p.sw + (nb * p.G + g) * kBlockN,
                                     kSym ? nullptr : p.comp + (nb * Kc + kc) * kBlockN, acc + nb * kBlockN},
                             R, za, sa, ncols);
  }
}
#endif

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
#if defined(DA8W4_TUNING)
        if (p.block_product != nullptr) {
          unpack_tile_vnni4(p.w + (nb * Kc + c) * packed_tile, p.zw + (nb * p.G + g) * kBlockN, BK,
                            panel + (nb * Kc + c) * tile_bytes);
          continue;
        }
#endif
        unpack_tile(p.w + (nb * Kc + c) * packed_tile, p.zw + (nb * p.G + g) * kBlockN, BK,
                    panel + (nb * Kc + c) * tile_bytes);
      }
    }
  }
  float* acc = s.acc;
#if defined(DA8W4_TUNING)
  if (p.block_product != nullptr) {  // no configure(): brgemm loads its own tile configuration
    for (int64_t m0 = 0; m0 < p.M; m0 += kTileM) {
      const int64_t R = std::min<int64_t>(kTileM, p.M - m0);
      for (int64_t r = 0; r < R; ++r) {
        for (int64_t j = 0; j < ncols; j += 16) {
          _mm512_storeu_ps(acc + r * ncols + j, p.bias ? _mm512_loadu_ps(p.bias + j) : _mm512_setzero_ps());
        }
      }
      const int32_t* za = kSym ? nullptr : p.za + m0;
      if (!kSym && fp_zero_point_ok(BK, za, R)) {
        m_tile_by_product<kSym, true>(p, s, R, p.a + m0 * p.lda, za, p.sa + m0, panel, whole_panel, acc, ncols);
      } else {
        m_tile_by_product<kSym, false>(p, s, R, p.a + m0 * p.lda, za, p.sa + m0, panel, whole_panel, acc, ncols);
      }
      for (int64_t r = 0; r < R; ++r) {
        store_row(acc + r * ncols, ncols, p, m0 + r);
      }
    }
    return true;
  }
#endif
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

#if !defined(DA8W4_AMX_KEEP_TILE_MACROS)  // a benchmark including this file issues tiles too
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
#endif

}  // namespace

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
