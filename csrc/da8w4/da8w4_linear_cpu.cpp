// CPU kernels for torchao::da8w4_linear_prepack_cpu and torchao::da8w4_linear_cpu.
//
// Only implementations are registered here (TORCH_LIBRARY_IMPL(torchao, CPU)): the
// schemas and the fake kernels come from torchao/ops.py or, without torchao, from
// csrc/da8w4_linear_cpu.py, which also loads this library. Contract and math:
// shared/specs/da8w4_linear_cpu.md; packed layout: kernel.h and csrc/README.md.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/native/CPUBlas.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>
#include <torch/library.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <tuple>
#include <vector>

#include "kernel.h"

#if defined(DA8W4_HAVE_AMX)
#include <ATen/cpu/Utils.h>
#include <cpuid.h>
#include <unistd.h>
#endif

// No FMA contraction in the output casts either: c10's software fp32 -> fp16
// conversion (builds without F16C) adds to a product.
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC push_options
#pragma GCC optimize("fp-contract=off")
#endif

namespace da8w4 {
namespace {

// ---------------------------------------------------------------------------
// ISA selection: the best supported at run time.
// ---------------------------------------------------------------------------
enum class Isa : int {
  kScalar,
#if defined(DA8W4_HAVE_AVX2)
  kAvx2,
#endif
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

#if defined(DA8W4_TUNING)
const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::kAmx:
      return "amx";
    case Isa::kAvx512Vnni:
      return "avx512vnni";
#if defined(DA8W4_HAVE_AVX2)
    case Isa::kAvx2:
      return "avx2";
#endif
    default:
      return "scalar";
  }
}
#endif

#if defined(DA8W4_HAVE_AMX)
// AMX int8 usable: the CPU has AMX-INT8 and ATen's at::cpu::init_amx() succeeds (it
// checks AMX-TILE and asks Linux for the tile data state, arch_prctl
// ARCH_REQ_XCOMP_PERM, without which the first tile instruction faults). Checked once
// per process.
bool amx_usable() {
#if defined(DA8W4_AMX_EMULATE)
  return true;  // tile instructions emulated in C++ (tests on CPUs without AMX)
#else
  unsigned eax, ebx, ecx, edx;
  const bool amx_int8 =
      __get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) && (edx & (1u << 25));
#if defined(DA8W4_TORCHAO_DISPATCH)
  if (!brgemm_enabled()) {  // torchao's utils.h: TORCHAO_CPU_DISPATCH below AMX
    return false;
  }
#endif
  return amx_int8 && at::cpu::init_amx();
#endif
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
#if defined(DA8W4_HAVE_AVX2)
    case Isa::kAvx2:
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#endif
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
#if defined(DA8W4_HAVE_AVX2)
    if (isa_supported(Isa::kAvx2)) {
      return Isa::kAvx2;
    }
#endif
    return Isa::kScalar;
  }();
  return best;
}

#if defined(DA8W4_TUNING)
// Tests and benchmarks of this library (built with DA8W4_TUNING) can force a path with
// DA8W4_ISA and ask which one the last call used.
std::atomic<int> g_last_isa{-1};

// `forced` tells whether DA8W4_ISA named the path (then it is used for every M).
Isa select_isa(bool* forced) {
  *forced = false;
  const char* env = std::getenv("DA8W4_ISA");
  if (env == nullptr || env[0] == '\0' || std::strcmp(env, "auto") == 0) {
    return best_isa();
  }
  *forced = true;
  for (Isa isa : {
           Isa::kScalar,
#if defined(DA8W4_HAVE_AVX2)
           Isa::kAvx2,
#endif
           Isa::kAvx512Vnni,
           Isa::kAmx}) {
    if (std::strcmp(env, isa_name(isa)) == 0) {
      TORCH_CHECK(
          isa_supported(isa),
          "da8w4_linear_cpu: DA8W4_ISA=",
          env,
          " but this CPU or this build does not support it (best available: ",
          isa_name(best_isa()),
          ")");
      return isa;
    }
  }
  TORCH_CHECK(
      false,
      "da8w4_linear_cpu: unknown DA8W4_ISA=",
      env,
      "; expected one of auto, scalar, avx2, avx512vnni, amx");
}
#endif

using TileFn = void (*)(const TileParams&);

TileFn tile_fn(Isa isa) {
  switch (isa) {
#if defined(DA8W4_HAVE_AVX512VNNI)
    case Isa::kAmx:  // rows the AMX path does not take (see da8w4_linear_cpu)
    case Isa::kAvx512Vnni:
      return &tile_avx512vnni;
#endif
#if defined(DA8W4_HAVE_AVX2)
    case Isa::kAvx2:
      return &tile_avx2;
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

#if defined(DA8W4_TUNING)
// For benchmarks: DA8W4_SCHED=static restores equal ranges and the coarser AMX items of
// an earlier kernel, and DA8W4_SCHED=dynamic:N asks for N AMX items per thread; read once.
struct Schedule {
  bool is_static = false;
  int64_t amx_items_per_thread = 0;  // 0: kAmxItemsPerThread
};

const Schedule& schedule() {
  static const Schedule v = [] {
    Schedule s;
    const char* env = std::getenv("DA8W4_SCHED");
    if (env && std::strcmp(env, "static") == 0) {
      s.is_static = true;
      s.amx_items_per_thread = 2;
    } else if (env && std::strncmp(env, "dynamic:", 8) == 0) {
      s.amx_items_per_thread = std::max<int64_t>(1, std::atoll(env + 8));
    } else if (env && env[0]) {
      // a paired benchmark of a dropped schedule must not time the default twice
      TORCH_CHECK(false, "DA8W4_SCHED=", env, ": not a schedule (static or dynamic:N)");
    }
    return s;
  }();
  return v;
}
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
#if defined(DA8W4_TUNING)
  if (schedule().is_static) {
    at::parallel_for(0, n, 1, [&](int64_t begin, int64_t end) {
      int64_t i = begin;
      worker([&]() -> int64_t { return i < end ? i++ : -1; });
    });
    return;
  }
#endif
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

#if defined(DA8W4_TUNING)
// DA8W4_AMX_MIN_M overrides it (benchmarks); read once.
int64_t amx_min_m() {
  static const int64_t v = [] {
    const char* env = std::getenv("DA8W4_AMX_MIN_M");
    return env && env[0] ? std::max<int64_t>(1, std::atoll(env)) : kAmxMinM;
  }();
  return v;
}
#endif

#if defined(DA8W4_TUNING)
// DA8W4_AMX_BLOCKS=brgemm (benchmarks): each block's int32 product from ATen's brgemm, as
// torchao main's file computes it, instead of the kernel's own tiles (read once).
void brgemm_block(const uint8_t* a, int64_t lda, int64_t rows, const int8_t* b, int64_t BK, int32_t* c,
                  bool symmetric) {
  if (symmetric) {
    at::native::cpublas::brgemm(rows, kBlockN, BK, lda, kBlockN, kBlockN, false, reinterpret_cast<const int8_t*>(a),
                                b, c, true);
  } else {
    at::native::cpublas::brgemm(rows, kBlockN, BK, lda, kBlockN, kBlockN, false, a, b, c, true);
  }
}

AmxBlockProduct amx_block_product() {
  static const AmxBlockProduct v = [] {
    const char* env = std::getenv("DA8W4_AMX_BLOCKS");
    if (env == nullptr || env[0] == '\0' || std::strcmp(env, "tiles") == 0) {
      return AmxBlockProduct{nullptr};
    }
    TORCH_CHECK(std::strcmp(env, "brgemm") == 0, "DA8W4_AMX_BLOCKS=", env, ": not tiles or brgemm");
    return &brgemm_block;
  }();
  return v;
}
#endif

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

#if defined(DA8W4_TUNING)
// For benchmarks and tests, read on every call: DA8W4_AMX_CHUNK_ROWS=R, at most R rows
// per item (at least one 32-row m tile), or 0, an earlier blocking where every item
// covers all `rows` rows (each re-reads the whole packed A). Else `chunk_rows`.
int64_t amx_chunk_rows(int64_t rows, int64_t chunk_rows) {
  const char* env = std::getenv("DA8W4_AMX_CHUNK_ROWS");
  if (env == nullptr || env[0] == '\0') {
    return chunk_rows;
  }
  const int64_t r = std::max<int64_t>(0, std::atoll(env));
  return r > 0 ? r : rows;
}
#endif

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
#if defined(DA8W4_TUNING)
  const int64_t per_thread =
      schedule().amx_items_per_thread > 0 ? schedule().amx_items_per_thread : kAmxItemsPerThread;
#else
  const int64_t per_thread = kAmxItemsPerThread;
#endif
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
#if defined(DA8W4_TUNING)
  chunk_rows = amx_chunk_rows(mtiles * kTileM, chunk_rows);
#endif
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
#if defined(DA8W4_TUNING)
  const AmxBlockProduct block_product = amx_block_product();
#endif
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
#if !defined(DA8W4_AMX_EMULATE)
        at::native::cpublas::brgemm_release();
#endif
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
#if defined(DA8W4_TUNING)
      p.block_product = block_product;
#endif
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
#if defined(DA8W4_TUNING)
  bool forced = false;
  Isa isa = select_isa(&forced);
#else
  Isa isa = best_isa();
#endif
#if defined(DA8W4_HAVE_AMX)
  // Below kAmxMinM rows the AVX512-VNNI register kernel is faster. Items whose zero
  // points do not fit the AMX path's int8 (w - zw) go to the AVX512-VNNI kernel inside
  // run_amx.
#if defined(DA8W4_TUNING)
  if (isa == Isa::kAmx && !forced && M < amx_min_m()) {  // forced: AMX for every M
#else
  if (isa == Isa::kAmx && M < kAmxMinM) {
#endif
    isa = Isa::kAvx512Vnni;
  }
  if (isa == Isa::kAmx) {
#if defined(DA8W4_TUNING)
    g_last_isa.store(static_cast<int>(isa));
#endif
    run_amx(a_ptr, K, M, symmetric ? nullptr : za.data_ptr<int32_t>(), sa.data_ptr<float>(),
            static_cast<const uint8_t*>(w.data_ptr()), sw.data_ptr<float>(), zw.data_ptr<int8_t>(),
            symmetric ? nullptr : comp.data_ptr<int32_t>(), b.defined() ? b.data_ptr<float>() : nullptr,
            Nc, Kc, BK, G, symmetric, output_dtype, y);
    return y;
  }
#endif
  const TileFn fn = tile_fn(isa);
#if defined(DA8W4_TUNING)
  g_last_isa.store(static_cast<int>(isa));
#endif

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

}  // namespace
}  // namespace da8w4

#if defined(DA8W4_TUNING)
// For tests and benchmarks (ctypes): which tile kernel the last call used / the best.
extern "C" __attribute__((visibility("default"))) const char* da8w4_linear_cpu_last_isa() {
  const int v = da8w4::g_last_isa.load();
  return v < 0 ? "none" : da8w4::isa_name(static_cast<da8w4::Isa>(v));
}

extern "C" __attribute__((visibility("default"))) const char* da8w4_linear_cpu_best_isa() {
  return da8w4::isa_name(da8w4::best_isa());
}
#endif

TORCH_LIBRARY_IMPL(torchao, CPU, m) {
  m.impl("da8w4_linear_prepack_cpu", &da8w4::da8w4_linear_prepack_cpu);
  m.impl("da8w4_linear_cpu", &da8w4::da8w4_linear_cpu);
}

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC pop_options
#endif
