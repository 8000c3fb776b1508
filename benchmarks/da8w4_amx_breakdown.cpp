// Breakdown microbenchmark for the da8w4 AMX path (csrc/da8w4/kernel_amx.cpp, issue #15).
//
// Includes the repo's kernel_amx.cpp as source, so every stage below runs the kernel's own
// inline functions (tile_block, m_tile, epilogue, unpack_tile, configure) on the same
// work-item decomposition and static thread partition as run_amx / at::parallel_for
// (OpenMP backend). Stages, per (shape, M, threads):
//   peak        in-register TDPBUSD only (4 accumulators, A/B loaded once): the real TMUL rate
//   full        gemm_amx per item (the whole kernel minus torch: zw check, unpack, acc init,
//               m_tile, bf16 store), + amx_release per thread, as the op does
//   tmul        (b) tile_block only on the pre-unpacked weight: zero C, per k step load A0/B0/B1/A1,
//               4 TDPBUSD; no store, no epilogue (the C tiles are stored once per m tile)
//   tmul_bL1    tmul with every block reading the same B tile (B from L1, not the L2 panel)
//   tmul_store  tmul + the per-block store of the 4 C tiles (no vector epilogue)
//   tmul_epi    (c) m_tile with whole_panel=true: tmul + per-block C store + fp32 epilogue of
//               block i-2, exactly as the kernel runs it (no unpack, no acc init, no final store)
//   epi_only    the fp32 epilogue alone on results that were not just tile-stored (vector only)
//   unpack      (d) the whole-panel unpack of each item (once per item per call, as the kernel)
//   valu_only   the epilogue's vector arithmetic per block on registers only (no memory)
//   tmul_valu   tmul + that arithmetic after each block, and tmul_mem: tmul + the epilogue's loads and
//               stores per block without arithmetic. tmul_epi adds up tmul and epi_only (results/); these
//               say whether the tile unit competes with the vector arithmetic or with the memory traffic
// Times: median over reps of the parallel region's wall time. Per stage: us, GOPS (2*M*N*K /
// t), % of the assumed peak (threads * 1024 MAC/cycle * --ghz), % of the measured `peak`
// stage, cycles per 32x32x128 block at --ghz (t * ghz * threads / blocks).
//
// Build and run: benchmarks/da8w4_amx_breakdown.sh. Needs -mavx512f -mavx512bw -mavx512vl
// -mavx512vnni -mamx-tile -mamx-int8 -fopenmp -ffp-contract=off; -DDA8W4_AMX_EMULATE for the
// emulated build (numbers meaningless; only shows that the stages run).
#include <omp.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#define DA8W4_AMX_KEEP_TILE_MACROS  // the peak stage and the permission check issue tile instructions
#include "kernel_amx.cpp"

namespace {

using namespace da8w4;

template <typename T>
struct Buf {
  T* p = nullptr;
  size_t n = 0;
  explicit Buf(size_t n_ = 0) { resize(n_); }
  void resize(size_t n_) {
    std::free(p);
    n = n_;
    p = n ? static_cast<T*>(std::aligned_alloc(64, ((n * sizeof(T) + 63) / 64) * 64)) : nullptr;
  }
  ~Buf() { std::free(p); }
  Buf(const Buf&) = delete;
  Buf& operator=(const Buf&) = delete;
  T* data() const { return p; }
};

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

struct Problem {
  std::string name;
  int64_t M, K, N, Nc, Kc, BK, G, bpg, kstep, mtiles;
  Buf<uint8_t> a, ap, w;
  Buf<int8_t> wu, zw;
  Buf<int32_t> za, comp;
  Buf<float> sa, sw, bias;
  Buf<uint16_t> out;
};

void make_weight(Problem& P, int64_t K, int64_t N, int64_t group) {
  P.K = K;
  P.N = N;
  P.BK = std::min<int64_t>(group, 128);
  P.Nc = N / kBlockN;
  P.Kc = K / P.BK;
  P.G = K / group;
  P.bpg = group / P.BK;
  P.kstep = k_step(P.BK);
  std::mt19937 gen(1234);
  P.w.resize(P.Nc * P.Kc * P.BK * 16);
  P.zw.resize(P.Nc * P.G * kBlockN);
  P.sw.resize(P.Nc * P.G * kBlockN);
  P.comp.resize(P.Nc * P.Kc * kBlockN);
  P.bias.resize(N);
#pragma omp parallel
  {
    std::mt19937 g2(1234 + omp_get_thread_num());
#pragma omp for schedule(static)
    for (int64_t i = 0; i < (int64_t)P.w.n; ++i) {
      P.w.p[i] = static_cast<uint8_t>(g2());
    }
  }
  for (size_t i = 0; i < P.zw.n; ++i) {
    P.zw.p[i] = static_cast<int8_t>(gen() % 16);
    P.sw.p[i] = 0.001f + 0.01f * (gen() % 1000) / 1000.f;
  }
  for (size_t i = 0; i < P.comp.n; ++i) {
    P.comp.p[i] = static_cast<int32_t>(gen() % 2001) - 1000;
  }
  for (int64_t i = 0; i < N; ++i) {
    P.bias.p[i] = 0.01f * (static_cast<int>(gen() % 200) - 100);
  }
  // Pre-unpacked weight, [Nc][Kc][BK*32] in the kernel's panel layout (so an item's panel
  // is one contiguous slice, as in gemm_impl's whole-panel buffer).
  const int64_t tile_bytes = P.BK * kBlockN;
  P.wu.resize(P.Nc * P.Kc * tile_bytes);
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < P.Nc * P.Kc; ++t) {
    const int64_t nb = t / P.Kc, c = t % P.Kc;
    unpack_tile(P.w.p + t * P.BK * 16, P.zw.p + (nb * P.G + c / P.bpg) * kBlockN, P.BK, P.wu.p + t * tile_bytes);
  }
}

void make_act(Problem& P, int64_t M) {
  P.M = M;
  P.mtiles = (M + 31) / 32;
  std::mt19937 gen(99);
  P.a.resize(M * P.K);
  for (size_t i = 0; i < P.a.n; ++i) {
    P.a.p[i] = static_cast<uint8_t>(gen());
  }
  P.za.resize(M);
  P.sa.resize(M);
  for (int64_t m = 0; m < M; ++m) {
    P.za.p[m] = static_cast<int32_t>(gen() % 256);
    P.sa.p[m] = 0.01f + 0.02f * (gen() % 1000) / 1000.f;
  }
  P.ap.resize(P.mtiles * 32 * P.K);
  for (int64_t mt = 0; mt < P.mtiles; ++mt) {
    pack_a_amx(P.a.p + mt * 32 * P.K, P.K, std::min<int64_t>(32, M - mt * 32), P.K, P.kstep, P.ap.p + mt * 32 * P.K);
  }
  P.out.resize(M * P.N);
  std::memset(P.out.p, 0, P.out.n * sizeof(uint16_t));
}

// run_amx's decomposition (csrc/da8w4/da8w4_linear_cpu.cpp), for `threads` threads.
struct Decomp {
  int64_t nblk, ngroups, mchunks, tpc, items;
};
Decomp decompose(const Problem& P, int64_t threads) {
  Decomp d;
  d.nblk = 1;
  if (P.mtiles > 1) {
    d.nblk = std::clamp<int64_t>((int64_t{1} << 20) / (P.K * kBlockN), 1, 4);
    while (d.nblk > 1 && (P.Nc + d.nblk - 1) / d.nblk < 2 * threads) {
      --d.nblk;
    }
  }
  d.ngroups = (P.Nc + d.nblk - 1) / d.nblk;
  d.mchunks = 1;
  if (P.mtiles > 1 && d.ngroups < 2 * threads) {
    d.mchunks = std::min(P.mtiles, (2 * threads + d.ngroups - 1) / d.ngroups);
  }
  d.tpc = (P.mtiles + d.mchunks - 1) / d.mchunks;
  d.mchunks = (P.mtiles + d.tpc - 1) / d.tpc;
  d.items = d.ngroups * d.mchunks;
  return d;
}

AmxParams item_params(const Problem& P, const Decomp& d, int64_t t) {
  const int64_t ng = t / d.mchunks, mc = t % d.mchunks;
  const int64_t nb0 = ng * d.nblk;
  const int64_t m0 = mc * d.tpc * 32;
  AmxParams p;
  p.a = P.a.p + m0 * P.K;
  p.lda = P.K;
  p.a_packed = P.mtiles > 1 ? P.ap.p + m0 * P.K : nullptr;
  p.M = std::min(P.M, m0 + d.tpc * 32) - m0;
  p.za = P.za.p + m0;
  p.sa = P.sa.p + m0;
  p.w = P.w.p + nb0 * P.Kc * P.BK * (kBlockN / 2);
  p.sw = P.sw.p + nb0 * P.G * kBlockN;
  p.zw = P.zw.p + nb0 * P.G * kBlockN;
  p.comp = P.comp.p + nb0 * P.Kc * kBlockN;
  p.bias = P.bias.p + nb0 * kBlockN;
  p.nblk = std::min(d.nblk, P.Nc - nb0);
  p.Kc = P.Kc;
  p.BK = P.BK;
  p.G = P.G;
  p.blocks_per_group = P.bpg;
  p.symmetric = false;
  p.out_kind = OutKind::kBFloat16;
  p.out = P.out.p + m0 * P.N + nb0 * kBlockN;
  p.ldo = P.N;
  return p;
}

enum Stage {
  kFull, kTmul, kTmulBL1, kTmulStore, kTmulEpi, kEpiOnly, kUnpack, kValuOnly, kTmulValu, kTmulMem, kNumStages
};
const char* kStageName[] = {"full", "tmul", "tmul_bL1", "tmul_store", "tmul_epi", "epi_only", "unpack",
                            "valu_only", "tmul_valu", "tmul_mem"};
const char* kStageDesc[] = {
    "(a) whole kernel (gemm_amx per item)",
    "(b) TMUL only, pre-unpacked B from the L2 panel",
    "(b') TMUL only, B always the same tile (L1)",
    "(b) + per-block store of the 4 C tiles",
    "(c) (b) + C store + fp32 epilogue (m_tile)",
    "fp32 epilogue only (vector)",
    "(d) int4->int8 unpack of each item's panel",
    "the epilogue's vector arithmetic per block, on registers only (no memory)",
    "(b) + that register arithmetic after each block: ~tmul if TMUL and vector ALU overlap, ~sum if not",
    "(b) + the epilogue's loads and stores per block (C results, fp32 acc), no arithmetic",
};

struct ThreadBufs {
  Buf<uint8_t> scratch;  // gemm_amx's working memory (stage full)
  Buf<int8_t> panel;
  Buf<float> acc;
  alignas(64) int32_t sink[4][16][16];
};

// The epilogue's vector arithmetic for R rows (per row and half: convert, fnmadd, two multiplies, add, and
// the two per-row broadcasts), on registers only; 8 independent accumulators, as the epilogue's rows are
// independent. The result goes to `sink` so that nothing is optimised away.
inline void valu_rows(int64_t R, float* sink) {
  const __m512 a = _mm512_set1_ps(1.0001f);
  const __m512 z = _mm512_set1_ps(0.5f);
  __m512 f[8];
  for (int j = 0; j < 8; ++j) {
    f[j] = _mm512_set1_ps(float(j));
  }
  for (int64_t r = 0; r < R; ++r) {
    const __m512i c = _mm512_set1_epi32(int32_t(r));
    const __m512 s = _mm512_set1_ps(float(r));
    const __m512 p0 = _mm512_fnmadd_ps(z, a, _mm512_cvtepi32_ps(c));
    const __m512 p1 = _mm512_fnmadd_ps(s, a, _mm512_cvtepi32_ps(c));
    f[(2 * r) % 8] = _mm512_add_ps(f[(2 * r) % 8], _mm512_mul_ps(_mm512_mul_ps(p0, s), z));
    f[(2 * r + 1) % 8] = _mm512_add_ps(f[(2 * r + 1) % 8], _mm512_mul_ps(_mm512_mul_ps(p1, s), a));
  }
  __m512 t = f[0];
  for (int j = 1; j < 8; ++j) {
    t = _mm512_add_ps(t, f[j]);
  }
  _mm512_storeu_ps(sink, _mm512_add_ps(_mm512_loadu_ps(sink), t));
}

// The epilogue's memory traffic for R rows: the two 64-byte halves of each C result row read, the fp32
// accumulator row (two halves) read and written back, no arithmetic. The stores keep the accumulator's
// values (the mask is 0, but read at run time, so the result loads stay).
volatile uint16_t g_mem_mask = 0;
inline void mem_rows(int64_t R, int32_t (*cb)[16][16], float* acc, int64_t ldacc) {
  const __mmask16 keep = g_mem_mask;
  for (int64_t r = 0; r < R; ++r) {
    const __m512i lo = _mm512_loadu_si512(cb[(r / 16) * 2][r % 16]);
    const __m512i hi = _mm512_loadu_si512(cb[(r / 16) * 2 + 1][r % 16]);
    float* out = acc + r * ldacc;
    const __m512 o0 = _mm512_loadu_ps(out);
    const __m512 o1 = _mm512_loadu_ps(out + 16);
    _mm512_storeu_ps(out, _mm512_mask_mov_ps(o0, keep, _mm512_castsi512_ps(lo)));
    _mm512_storeu_ps(out + 16, _mm512_mask_mov_ps(o1, keep, _mm512_castsi512_ps(hi)));
  }
}

// One m tile of stages tmul / tmul_bL1 / tmul_store / epi_only / valu_only / tmul_valu / tmul_mem.
template <bool kTwo>
void mtile_partial(Stage st, const AmxParams& p, Scratch& s, int64_t R, const ATiles& at, const int8_t* panel,
                   int64_t kstep, float* acc, int64_t ncols, ThreadBufs& tb) {
  const int64_t BK = p.BK, Kc = p.Kc, T = Kc * p.nblk;
  const int64_t tile_bytes = BK * kBlockN;
  if (st == kEpiOnly) {
    for (int64_t i = 0; i < T; ++i) {
      const int64_t c = i / p.nblk, nb = i % p.nblk, g = c / p.blocks_per_group;
      Pending b{s.cbuf[i % 3], p.sw + (nb * p.G + g) * kBlockN, p.comp + (nb * Kc + c) * kBlockN, acc + nb * kBlockN};
      epilogue<false, true>(b, R, p.za, p.sa, ncols);
    }
    return;
  }
  if (st == kValuOnly) {
    for (int64_t i = 0; i < T; ++i) {
      valu_rows(R, acc);
    }
    return;
  }
  for (int64_t i = 0; i < T; ++i) {
    const int64_t c = i / p.nblk, nb = i % p.nblk;
    const int8_t* bt = st == kTmulBL1 ? panel : panel + (nb * Kc + c) * tile_bytes;
    tile_block<false, kTwo>(at, c, bt, BK, kstep);
    if (st == kTmulStore) {
      tile_store_c<kTwo>(s.cbuf[i % 3]);
    } else if (st == kTmulValu) {
      valu_rows(R, acc);
    } else if (st == kTmulMem) {
      mem_rows(R, s.cbuf[(i + 1) % 3], acc + nb * kBlockN, ncols);
    }
  }
  tile_store_c<kTwo>(tb.sink);
}

void run_item(Stage st, const Problem& P, const AmxParams& p, ThreadBufs& tb) {
  if (st == kFull) {
    const int64_t bytes = amx_scratch_bytes(p.nblk, P.Kc, P.BK, P.mtiles > 1);
    if ((int64_t)tb.scratch.n < bytes) {
      tb.scratch.resize(bytes);
    }
    AmxParams q = p;
    q.scratch = tb.scratch.p;
    gemm_amx(q);
    return;
  }
  const int64_t tile_bytes = P.BK * kBlockN;
  const int64_t packed_tile = P.BK * kBlockN / 2;
  if (st == kUnpack) {
    const int64_t want = p.nblk * P.Kc * tile_bytes;
    if ((int64_t)tb.panel.n < want) {
      tb.panel.resize(want);
    }
    for (int64_t nb = 0; nb < p.nblk; ++nb) {
      for (int64_t c = 0; c < P.Kc; ++c) {
        unpack_tile(p.w + (nb * P.Kc + c) * packed_tile, p.zw + (nb * P.G + c / P.bpg) * kBlockN, P.BK,
                    tb.panel.p + (nb * P.Kc + c) * tile_bytes);
      }
    }
    return;
  }
  const int8_t* panel = P.wu.p + (p.w - P.w.p) * 2;  // the item's slice of the pre-unpacked weight
  const int64_t ncols = p.nblk * kBlockN;
  if ((int64_t)tb.acc.n < 32 * ncols) {
    tb.acc.resize(32 * ncols);
    std::memset(tb.acc.p, 0, tb.acc.n * sizeof(float));
  }
  Scratch s;  // the C results of three blocks (its panel and acc are tb's here)
  for (int64_t m0 = 0; m0 < p.M; m0 += 32) {
    const int64_t R = std::min<int64_t>(32, p.M - m0);
    const int64_t r0 = std::min<int64_t>(16, R), r1 = R - r0;
    configure(r0, r1, P.kstep);
    const ATiles at = p.a_packed ? ATiles{p.a_packed + m0 * p.lda, 32 * P.kstep, P.kstep}
                                 : ATiles{p.a + m0 * p.lda, P.kstep, p.lda};
    AmxParams q = p;
    q.za = p.za + m0;
    q.sa = p.sa + m0;
    if (st == kTmulEpi) {
      if (r1 > 0) {
        m_tile<false, true, true>(p, s, R, at, q.za, q.sa, const_cast<int8_t*>(panel), true, P.kstep, tb.acc.p, ncols);
      } else {
        m_tile<false, false, true>(p, s, R, at, q.za, q.sa, const_cast<int8_t*>(panel), true, P.kstep, tb.acc.p, ncols);
      }
    } else if (r1 > 0) {
      mtile_partial<true>(st, q, s, R, at, panel, P.kstep, tb.acc.p, ncols, tb);
    } else {
      mtile_partial<false>(st, q, s, R, at, panel, P.kstep, tb.acc.p, ncols, tb);
    }
  }
}

// One timed pass of a stage: at::parallel_for's OpenMP partition of [0, items).
double run_pass(Stage st, const Problem& P, const Decomp& d, int threads, std::vector<ThreadBufs>& tbs,
                std::vector<double>& thread_s) {
  const int64_t nt = std::min<int64_t>(threads, d.items);
  const double t0 = now();
#pragma omp parallel num_threads(nt)
  {
    const int tid = omp_get_thread_num();
    const int64_t chunk = (d.items + nt - 1) / nt;
    const int64_t b = tid * chunk;
    const double ts = now();
    if (b < d.items) {
      const int64_t e = std::min(d.items, b + chunk);
      for (int64_t t = b; t < e; ++t) {
        run_item(st, P, item_params(P, d, t), tbs[tid]);
      }
    }
    amx_release();
    thread_s[tid] = now() - ts;
  }
  return now() - t0;
}

// In-register TDPBUSD rate: n iterations of 4 independent 16x16x64 TDPBUSD per thread.
double tdp_peak(int threads, int64_t n) {
  const double t0 = now();
#pragma omp parallel num_threads(threads)
  {
    alignas(64) static thread_local uint8_t buf[4][1024];
    std::memset(buf, 1, sizeof(buf));
    configure(16, 16, 64);
    TILE_ZERO(kC0);
    TILE_ZERO(kC1);
    TILE_ZERO(kC2);
    TILE_ZERO(kC3);
    TILE_LOAD(kA0, buf[0], 64);
    TILE_LOAD(kA1, buf[1], 64);
    TILE_LOAD(kB0, buf[2], 64);
    TILE_LOAD(kB1, buf[3], 64);
    for (int64_t i = 0; i < n; ++i) {
      TILE_DP(false, kC0, kA0, kB0);
      TILE_DP(false, kC1, kA0, kB1);
      TILE_DP(false, kC2, kA1, kB0);
      TILE_DP(false, kC3, kA1, kB1);
    }
    alignas(64) static thread_local int32_t out[16][16];
    TILE_STORE(kC0, out, 64);
    amx_release();
  }
  return now() - t0;
}

// Dependent add chain: 8 adds (8 cycles) per iteration.
double chain_ghz(int threads, int64_t n) {
  std::vector<double> ghz(threads);
#pragma omp parallel num_threads(threads)
  {
    uint64_t x = 0;
    const double t0 = now();
    for (int64_t i = 0; i < n; ++i) {
      asm volatile(
          "add $1, %0\n\tadd $1, %0\n\tadd $1, %0\n\tadd $1, %0\n\t"
          "add $1, %0\n\tadd $1, %0\n\tadd $1, %0\n\tadd $1, %0"
          : "+r"(x));
    }
    ghz[omp_get_thread_num()] = 8.0 * n / (now() - t0) / 1e9;
  }
  std::sort(ghz.begin(), ghz.end());
  return ghz[threads / 2];
}

void check_perm(int threads) {
#if defined(DA8W4_AMX_EMULATE)
  std::printf("# AMX permission: emulated build, not checked\n");
  (void)threads;
#else
  constexpr long kGet = 0x1022, kReq = 0x1023;
  unsigned long before = 0, after = 0;
  syscall(SYS_arch_prctl, kGet, &before);
  const long rc = syscall(SYS_arch_prctl, kReq, 18L);
  syscall(SYS_arch_prctl, kGet, &after);
  std::printf("# main thread: ARCH_GET_XCOMP_PERM before 0x%lx, ARCH_REQ_XCOMP_PERM(18) rc %ld, after 0x%lx\n",
              before, rc, after);
  std::vector<unsigned long> m(threads);
  std::vector<long> rcs(threads);
#pragma omp parallel num_threads(threads)
  {
    unsigned long v = 0;
    rcs[omp_get_thread_num()] = syscall(SYS_arch_prctl, kGet, &v);
    m[omp_get_thread_num()] = v;
  }
  int ok = 0;
  for (int t = 0; t < threads; ++t) {
    ok += rcs[t] == 0 && (m[t] & (1ul << 18));
  }
  std::printf("# worker threads with XTILEDATA (bit 18) permitted: %d of %d (first mask 0x%lx)\n", ok, threads, m[0]);
  // and each thread can run a tile instruction (a fault would kill the process here)
#pragma omp parallel num_threads(threads)
  {
    configure(16, 16, 64);
    TILE_ZERO(kC0);
    amx_release();
  }
  std::printf("# every worker thread executed ldtilecfg + tilezero + tilerelease\n");
#endif
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int> thread_list = {omp_get_max_threads(), 1};
  std::vector<int64_t> ms = {128, 512};
  std::vector<std::string> shapes = {"qkv:4096x6144", "gate_up:4096x28672", "down:14336x4096"};
  double ghz = 2.1, min_time = 0.15;
  int min_reps = 3, group = 128;
  int64_t peak_n = 200000;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto list = [&](auto f) {
      while (i + 1 < argc && argv[i + 1][0] != '-') f(std::string(argv[++i]));
    };
    if (a == "--threads") {
      thread_list.clear();
      list([&](const std::string& v) { thread_list.push_back(std::stoi(v)); });
    } else if (a == "--m") {
      ms.clear();
      list([&](const std::string& v) { ms.push_back(std::stoll(v)); });
    } else if (a == "--shapes") {
      shapes.clear();
      list([&](const std::string& v) { shapes.push_back(v); });
    } else if (a == "--ghz") {
      ghz = std::stod(argv[++i]);
    } else if (a == "--min-time") {
      min_time = std::stod(argv[++i]);
    } else if (a == "--reps") {
      min_reps = std::stoi(argv[++i]);
    } else if (a == "--group") {
      group = std::stoi(argv[++i]);
    } else if (a == "--peak-n") {
      peak_n = std::stoll(argv[++i]);
    } else {
      std::fprintf(stderr, "unknown argument %s\n", a.c_str());
      return 2;
    }
  }
  const int max_threads = *std::max_element(thread_list.begin(), thread_list.end());
#if defined(DA8W4_AMX_EMULATE)
  std::printf("# EMULATED build: tile instructions are C++ loops, every number below is meaningless\n");
#endif
  std::printf("# assumed clock %.2f GHz, peak = threads x 1024 int8 MAC/cycle; group_size %d; bf16 output, asymmetric\n",
              ghz, group);
  check_perm(max_threads);
  for (int th : thread_list) {
    const double g = chain_ghz(th, 20000000);
    std::printf("# add-chain clock, %d threads: %.2f GHz (median thread)\n", th, g);
  }
  std::vector<double> peak_macs_per_s(max_threads + 1, 0);
  for (int th : thread_list) {
    tdp_peak(th, peak_n / 10);  // warm-up
    const double t = tdp_peak(th, peak_n);
    const double macs = 4.0 * 16 * 16 * 64 * peak_n * th;
    peak_macs_per_s[th] = macs / t;
    std::printf("# peak (in-register TDPBUSD), %d threads: %.1f TOPS = %.0f MAC/cycle/core at %.2f GHz "
                "(%.1f%% of assumed), %.1f cycles per TDPBUSD\n",
                th, 2 * macs / t / 1e12, macs / t / th / (ghz * 1e9), ghz, 100 * macs / t / (th * 1024 * ghz * 1e9),
                t * ghz * 1e9 / (4.0 * peak_n));
  }
  std::fflush(stdout);
  std::printf("\n| threads | shape | M | stage | us (median) | us min | GOPS | %% assumed peak | %% measured peak | "
              "cycles/block @%.1fGHz | thread max/min | items (nblk x mchunks) |\n|---:|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---|\n",
              ghz);
  for (const std::string& sh : shapes) {
    Problem P;
    const auto colon = sh.find(':');
    P.name = sh.substr(0, colon);
    const std::string dims = sh.substr(colon + 1);
    const auto x = dims.find('x');
    make_weight(P, std::stoll(dims.substr(0, x)), std::stoll(dims.substr(x + 1)), group);
    for (int64_t M : ms) {
      make_act(P, M);
      for (int th : thread_list) {
        const Decomp d = decompose(P, th);
        std::vector<ThreadBufs> tbs(th);
        std::vector<double> thread_s(th, 0);
        const double blocks = double(P.mtiles) * P.Nc * P.Kc;
        const double macs = double(M) * P.N * P.K;
        for (int st = 0; st < kNumStages; ++st) {
          run_pass(Stage(st), P, d, th, tbs, thread_s);  // warm-up
          std::vector<double> ts;
          double total = 0, tmax = 0, tmin = 1e30;
          while ((int)ts.size() < min_reps || total < min_time) {
            const double t = run_pass(Stage(st), P, d, th, tbs, thread_s);
            ts.push_back(t);
            total += t;
            const int64_t nt = std::min<int64_t>(th, d.items);
            tmax = std::max(tmax, *std::max_element(thread_s.begin(), thread_s.begin() + nt));
            tmin = std::min(tmin, *std::min_element(thread_s.begin(), thread_s.begin() + nt));
            if (ts.size() > 1000) break;
          }
          std::sort(ts.begin(), ts.end());
          const double med = ts[ts.size() / 2];
          std::printf("| %d | %s %ldx%ld | %ld | %s | %.0f | %.0f | %.0f | %.1f%% | %.1f%% | %.0f | %.2f | %ld (%ld x %ld) |\n",
                      th, P.name.c_str(), (long)P.K, (long)P.N, (long)M, kStageName[st], med * 1e6, ts[0] * 1e6,
                      2 * macs / med / 1e9, 100 * macs / med / (th * 1024 * ghz * 1e9),
                      100 * macs / med / peak_macs_per_s[th], med * ghz * 1e9 * th / blocks, tmax / tmin,
                      (long)d.items, (long)d.nblk, (long)d.mchunks);
          std::fflush(stdout);
        }
      }
    }
  }
  std::printf("\nStages:\n");
  for (int st = 0; st < kNumStages; ++st) {
    std::printf("  %-10s %s\n", kStageName[st], kStageDesc[st]);
  }
  std::printf("cycles/block = median time x assumed clock x threads / (M/32 x N/32 x K/128) blocks; "
              "thread max/min = slowest / fastest thread's time over the reps (imbalance)\n");
  return 0;
}
