"""ATen's int8 brgemm on da8w4's blocks, for comparison with the kernel's own tile loop.

da8w4 scales each group of K (128) separately, so the int32 product of every 32-row x 32-column x
group block must be taken on its own before the per-group rescale. torchao main's
``da8w4_linear_krnl.cpp`` gets it from ``at::native::cpublas::brgemm`` (oneDNN's ukernel), one call
per block; our kernel (``csrc/da8w4/kernel_amx.cpp``) issues the tile instructions itself.
This times that brgemm route alone, on an already unpacked int8 weight (no int4 unpack, no
rescale): one call per ``--rows`` x 32 x ``--group`` block (``--rows`` 32, or main's 128),
u8 x s8 -> s32, ``add_C`` off, the result stored (``ldc`` 32). The walk is like the kernel's:
each thread takes an equal share of the N blocks, in panels of at most 1 MiB of unpacked weight
(kept in L2) that every m tile reads in turn. Its cycles per 32x32x128 block compare with the ``tmul_store`` stage of
``da8w4_amx_breakdown.sh`` (the kernel's tile loop with the same C stores, same walk), run on
the same host::

    python benchmarks/da8w4_brgemm_blocks_cpu.py --threads 1 16 --ms 256 1024
    bash benchmarks/da8w4_amx_breakdown.sh /tmp/bd -- --threads 1 16 --m 256 1024

Prints one table: per (threads, shape, M) how many threads took a share ("ran on"), the median time over ``--reps`` calls, the cycles per
block at ``--ghz`` (time x GHz x threads / blocks) and the share of the assumed AMX peak
(threads x 1024 int8 MAC/cycle x GHz). Whether brgemm used AMX is ATen's
``cpublas::could_pack(kByte)``, printed; without it the numbers are not AMX's.
"""

import argparse
import statistics
import tempfile
import time

import torch
import torch.utils.cpp_extension


SHAPES = {"qkv": (4096, 6144), "gate_up": (4096, 28672), "down": (14336, 4096)}

SOURCE = r"""
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/native/CPUBlas.h>

#include <atomic>
#include <vector>

bool can_pack() { return at::native::cpublas::could_pack(at::kByte); }

// a: [M, K] uint8; b: [N / 32, K / bk, bk / 4, 32, 4] int8 (VNNI4 per block); mrows rows per
// call. Each thread's results land in its own mrows x 32 int32 buffer (stored, as the kernel
// stores its tiles) and are not returned. Returns how many threads took a share.
int64_t brgemm_blocks(const at::Tensor& a, const at::Tensor& b, int64_t bk, int64_t mrows) {
  const int64_t M = a.size(0), K = a.size(1), Nb = b.size(0), Kc = K / bk;
  const int64_t block_bytes = bk * 32;
  const int64_t panel_blocks = std::max<int64_t>(1, (int64_t{1} << 20) / (Kc * block_bytes));
  const uint8_t* A = a.data_ptr<uint8_t>();
  const int8_t* B = b.data_ptr<int8_t>();
  const int nt = at::get_num_threads();
  std::atomic<int64_t> ran{0};
  at::parallel_for(0, nt, 1, [&](int64_t t0, int64_t t1) {
    ran += 1;
    std::vector<int32_t> c(mrows * 32);
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t n0 = Nb * t / nt, n1 = Nb * (t + 1) / nt;
      for (int64_t p0 = n0; p0 < n1; p0 += panel_blocks) {
        const int64_t p1 = std::min(n1, p0 + panel_blocks);
        for (int64_t m = 0; m < M; m += mrows) {
          const int64_t rows = std::min<int64_t>(mrows, M - m);
          for (int64_t nb = p0; nb < p1; ++nb) {
            for (int64_t kc = 0; kc < Kc; ++kc) {
              at::native::cpublas::brgemm(rows, 32, bk, K, 32, 32, false, A + m * K + kc * bk,
                                          B + (nb * Kc + kc) * block_bytes, c.data(), true);
            }
          }
        }
      }
    }
    at::native::cpublas::brgemm_release();
  });
  return ran.load();
}
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--threads", type=int, nargs="+", default=[1, torch.get_num_threads()]
    )
    parser.add_argument(
        "--shapes", nargs="+", default=list(SHAPES), choices=list(SHAPES)
    )
    parser.add_argument("--ms", type=int, nargs="+", default=[256, 1024])
    parser.add_argument("--group", type=int, default=128)
    parser.add_argument("--ghz", type=float, default=2.1)
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument(
        "--rows",
        type=int,
        default=32,
        help="rows per brgemm call (main's file: up to 128)",
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as build:
        ext = torch.utils.cpp_extension.load_inline(
            "da8w4_brgemm_blocks",
            cpp_sources=[SOURCE],
            functions=["can_pack", "brgemm_blocks"],
            build_directory=build,
            # at::parallel_for's OpenMP loop is compiled into this extension: without
            # -fopenmp its pragma is ignored and every thread count runs serially
            extra_cflags=["-O3", "-fopenmp"],
            extra_ldflags=["-fopenmp"],
        )
    print(
        f"torch {torch.__version__}; brgemm on AMX (cpublas::could_pack(kByte)): {ext.can_pack()}"
    )
    print(
        f"group {args.group}; cycles at {args.ghz} GHz; medians of {args.reps} calls after one warm-up\n"
    )
    print(
        "| threads | ran on | shape | M | us (median) | us min | cycles / 32x32x128 block | % assumed peak |"
    )
    print("|---:|---:|---|---:|---:|---:|---:|---:|")
    gen = torch.Generator().manual_seed(0)
    for threads in args.threads:
        torch.set_num_threads(threads)
        for name in args.shapes:
            k, n = SHAPES[name]
            b = torch.randint(
                -8,
                8,
                (n // 32, k // args.group, args.group // 4, 32, 4),
                dtype=torch.int8,
                generator=gen,
            )
            for m in args.ms:
                a = torch.randint(0, 256, (m, k), dtype=torch.uint8, generator=gen)
                ran = ext.brgemm_blocks(a, b, args.group, args.rows)
                times = []
                for _ in range(args.reps):
                    t0 = time.perf_counter()
                    ext.brgemm_blocks(a, b, args.group, args.rows)
                    times.append(time.perf_counter() - t0)
                med = statistics.median(times)
                blocks = (m / 32) * (n / 32) * (k / 128)
                macs = m * n * k
                print(
                    f"| {threads} | {ran} | {name} {k}->{n} | {m} | {med * 1e6:.0f} | {min(times) * 1e6:.0f} | "
                    f"{med * args.ghz * 1e9 * threads / blocks:.0f} | "
                    f"{100 * macs / med / (threads * 1024 * args.ghz * 1e9):.1f}% |",
                    flush=True,
                )


if __name__ == "__main__":
    main()
