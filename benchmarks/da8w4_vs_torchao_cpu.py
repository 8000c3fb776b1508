"""Side by side: our torchao::da8w4_linear_cpu kernel vs torchao's own, same data.

torchao's kernel is built from a torchao source tree given by --torchao-src (the file
torchao/csrc/cpu/aten_kernels/da8w4_linear.cpp, or a directory holding it): it is
third-party code and is never copied into this repo. Both kernels register the same op
(and their packed layouts differ), so each runs in its own process ("worker"); the
parent alternates the two workers over --rounds rounds and takes, per shape, the median
over rounds of each worker's median time. Every worker builds the same data from the
same seed (int4 weight, group scales/zero points, bias, a bf16 activation quantised per
token to asymmetric uint8, as torchao's flow does), prepacks it with its own prepack op
and writes its bf16 outputs, which the parent compares: max difference in bf16 ulps of
the result, share of bit-identical elements, relative error norm between the two.
The weights stay warm in the cache (the same tensors every call), as in the issue's
measurement. After timing, each worker counts the minor page faults of one more call
(getrusage): an output of 32 MiB or more is a fresh mmap on every call (glibc), so its
pages fault again each time. % of peak is 2*M*N*K / time against threads * 1024 int8 MAC/cycle (AMX
TMUL, per core) * 2 * the clock in --clock-ghz (default: the largest "cpu MHz" in
/proc/cpuinfo, which is stated in the output), or against --peak-tops (for example the
in-register TDPBUSD throughput that benchmarks/da8w4_amx_breakdown.sh measures on the host).
"identical" is the share of output elements equal bit for bit ("all" only when every one is).

    python benchmarks/da8w4_vs_torchao_cpu.py --torchao-src /path/to/torchao \\
        --threads 16 [--variant amx_all:DA8W4_ISA=amx --variant vnni:DA8W4_ISA=avx512vnni]

--variant NAME:VAR=VALUE[,VAR=VALUE] adds a run of our kernel with those environment
variables (for example a forced ISA path), reported as one more ratio column.
--port adds the kernel PR's file (upstream-prs/pytorch-ao/da8w4_linear.cpp, our kernel as the
one file torchao builds), built with torchao's flags below: a "port ratio" column, and "port =
ours", the share of its outputs equal bit for bit to our library's.
--main-src DIR (a torchao main checkout, instead of --torchao-src) measures main's layout:
torchao's kernel is main's da8w4_linear_krnl.cpp and the PR's is
upstream-prs/pytorch-ao/da8w4_linear_krnl.cpp, each built per ISA level with main's dispatch.cpp
and its setup.py's flags (csrc/test/torchao_main_plugin.py) and run at the level
TORCHAO_CPU_DISPATCH picks (default: the highest).

A reference at small M: "weight read" is the time to read as many bytes as the packed
weight, its scales, zero points and compensation hold (one int64 ``sum`` over a buffer of that
size, warm, on the same threads, timed in our worker). At M = 1 the op streams those bytes and
does little else, so a call far above it spends its time elsewhere. ATen's sum is
not the machine's read limit, though: a call below it shows only that.

The ceiling beside both: a dense int8 GEMM of the same M x K x N on the same threads,
``torch._int_mm`` (int8 x int8 -> int32, ATen's CPU implementation) in a third worker,
alternated with the others; its % of peak is printed next to ours. Which library ran it is
read from one call under ONEDNN_VERBOSE=1 (oneDNN prints each primitive it runs, with its
ISA, e.g. brgemm:avx512_core_amx); "ATen (no oneDNN primitive)" when none is printed.
torchao's build flags are those of its setup.py on an AVX512-VNNI host:
-O3 -march=native -fopenmp -DCPU_CAPABILITY_AVX512 -DCPU_CAPABILITY_AVX512_VNNI.
"""

import argparse
import json
import os
import pathlib
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time

import torch


REPO = pathlib.Path(__file__).resolve().parents[1]
SHAPES = {"qkv": (4096, 6144), "gate_up": (4096, 28672), "down": (14336, 4096)}
MS = (1, 4, 16, 32, 128, 512)
PREPACK_SCHEMA = (
    "da8w4_linear_prepack_cpu(Tensor weight, Tensor scales, Tensor qzeros) "
    "-> (Tensor, Tensor, Tensor, Tensor)"
)
LINEAR_SCHEMA = (
    "da8w4_linear_cpu(Tensor input, Tensor input_scales, Tensor input_qzeros, "
    "Tensor weight, Tensor weight_scales, Tensor weight_qzeros, Tensor compensation, "
    "Tensor? bias, ScalarType output_dtype) -> Tensor"
)
TORCHAO_FILE = "torchao/csrc/cpu/aten_kernels/da8w4_linear.cpp"
MAIN_FILE = "torchao/csrc/cpu/aten_kernels/da8w4_linear_krnl.cpp"  # torchao main's, with --main-src
PORT = REPO / "upstream-prs" / "pytorch-ao" / "da8w4_linear.cpp"  # the kernel PR's file (tools/torchao_kernel.py)
TORCHAO_FLAGS = ["-O3", "-march=native", "-fopenmp", "-DCPU_CAPABILITY_AVX512", "-DCPU_CAPABILITY_AVX512_VNNI"]


def torchao_source(src: str) -> pathlib.Path:
    p = pathlib.Path(src)
    for cand in (p, p / TORCHAO_FILE, p / "da8w4_linear.cpp"):
        if cand.is_file():
            return cand
    sys.exit(f"error: {src}: no da8w4_linear.cpp there (expected {TORCHAO_FILE} under it)")


# --------------------------------------------------------------------------------------
# worker side
# --------------------------------------------------------------------------------------
def load_torchao(src: pathlib.Path, build_dir: str, name: str = "torchao_da8w4") -> None:
    from torch.utils import cpp_extension

    lib = torch.library.Library("torchao", "FRAGMENT")  # noqa: F841 (kept alive below)
    # Only what is not defined yet: an imported torchao (its ops.py) defines both schemas.
    for name, schema in (("da8w4_linear_prepack_cpu", PREPACK_SCHEMA), ("da8w4_linear_cpu", LINEAR_SCHEMA)):
        try:
            torch._C._dispatch_find_schema_or_throw(f"torchao::{name}", "")
        except RuntimeError:
            lib.define(schema)
    load_torchao.lib = lib
    os.makedirs(build_dir, exist_ok=True)
    cpp_extension.load(
        name=name, sources=[str(src)], is_python_module=False, build_directory=build_dir,
        extra_cflags=TORCHAO_FLAGS, extra_ldflags=["-fopenmp"], verbose=False,
    )


def load_ours() -> None:
    sys.path.insert(0, str(REPO / "csrc"))
    import da8w4_linear_cpu as mod

    if not mod.load():
        sys.exit(f"error: {mod.default_path()}: our kernel is not built")


def quantize_per_token(x):
    """torchao's asymmetric per-token uint8 activation quantisation (csrc's)."""
    sys.path.insert(0, str(REPO / "csrc"))
    import da8w4_linear_cpu

    return da8w4_linear_cpu.quantize_activation(x)


def make_data(k, n, group_size, seed):
    gen = torch.Generator().manual_seed(seed)
    w = torch.randint(0, 16, (n, k), dtype=torch.uint8, generator=gen)
    g = k // group_size
    sw = torch.rand(n, g, generator=gen) * 0.01 + 1e-3
    zw = torch.randint(0, 16, (n, g), dtype=torch.int8, generator=gen)
    bias = torch.randn(n, generator=gen)
    return w, sw, zw, bias


def time_op(fn, min_time, reps):
    for _ in range(3):
        fn()
    t0 = time.perf_counter()
    fn()
    iters = max(1, int(min_time / max(time.perf_counter() - t0, 1e-7)))
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        for _ in range(iters):
            fn()
        times.append((time.perf_counter() - t0) / iters)
    return statistics.median(times)


def dense_worker(args):
    """torch._int_mm on int8 operands of each shape's M x K x N: the dense int8 GEMM
    ceiling (no int4 unpacking, no per-group rescale, no activation quantization)."""
    results = {}
    for name in args.shapes:
        k, n = SHAPES[name]
        gen = torch.Generator().manual_seed(k + n)
        b = torch.randint(-128, 128, (k, n), dtype=torch.int8, generator=gen)
        for m in args.ms:
            # _int_mm asks M > 16 on some paths: pad small M up, time the padded call
            a = torch.randint(-128, 128, (max(m, 17), k), dtype=torch.int8, generator=gen)
            results[f"{name}:{m}"] = time_op(lambda: torch._int_mm(a, b), args.min_time, args.reps)  # noqa: B023
    with open(args.result, "w") as f:
        json.dump(results, f)


def dense_library(args) -> str:
    """Which library runs torch._int_mm here: one call under ONEDNN_VERBOSE=1."""
    k, n = SHAPES[args.shapes[0]]
    code = (f"import torch; torch.set_num_threads({args.threads}); "
            f"torch._int_mm(torch.ones(64, {k}, dtype=torch.int8), torch.ones({k}, {n}, dtype=torch.int8))")
    out = subprocess.run([sys.executable, "-c", code], env=dict(os.environ, ONEDNN_VERBOSE="1"),
                         capture_output=True, text=True).stdout
    # onednn_verbose,v1,primitive,exec,cpu,<kind>,<implementation>,...
    rows = [line.split(",") for line in out.splitlines() if line.startswith("onednn_verbose")]
    prims = sorted({f"{r[5]}:{r[6] or '-'}" for r in rows if len(r) > 6 and r[2:5] == ["primitive", "exec", "cpu"]})
    return "oneDNN " + " ".join(prims) if prims else "ATen (no oneDNN primitive)"


def worker(args):
    torch.set_num_threads(args.threads)
    if args.worker == "dense":
        return dense_worker(args)
    if args.main_src and args.worker in ("torchao", "port"):
        # main's layout: the krnl file per ISA level with main's dispatch.cpp, main's flags
        os.environ["TORCHAO_MAIN_SRC"] = args.main_src
        sys.path.insert(0, str(REPO / "csrc" / "test"))
        import torchao_main_plugin as main_build

        src = main_build.main_sources()
        if args.worker == "torchao":
            main_build.build_and_load(args.build_dir + "_main", krnl=src / "da8w4_linear_krnl.cpp")
        else:
            main_build.build_and_load(args.build_dir + "_main_port")
    elif args.worker == "torchao":
        load_torchao(torchao_source(args.torchao_src), args.build_dir)
    elif args.worker == "port":
        # the kernel PR's file, built with torchao's flags as torchao's own is
        load_torchao(PORT, args.build_dir + "_port", name="torchao_da8w4_port")
    else:
        load_ours()
    if args.build_only:
        return
    op = torch.ops.torchao.da8w4_linear_cpu.default
    results = {}
    for name in args.shapes:
        k, n = SHAPES[name]
        w, sw, zw, bias = make_data(k, n, args.group_size, seed=7 * k + n)
        packed = torch.ops.torchao.da8w4_linear_prepack_cpu(w, sw, zw)
        if args.worker == "ours":  # the small-M floor: read as many bytes as the weight side holds
            nbytes = sum(t.numel() * t.element_size() for t in packed)
            buf = torch.ones((nbytes + 7) // 8, dtype=torch.int64)
            results[f"read:{name}"] = time_op(buf.sum, args.min_time, args.reps)
        for m in args.ms:
            gen = torch.Generator().manual_seed(m * 31 + k)
            x = torch.randn(m, k, generator=gen).to(torch.bfloat16).float()
            xq, sa, za = quantize_per_token(x)
            call = lambda: op(xq, sa, za, *packed, bias, torch.bfloat16)  # noqa: E731
            t = time_op(call, args.min_time, args.reps)
            results[f"{name}:{m}"] = t
            f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
            call()
            results[f"minflt:{name}:{m}"] = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0
            if args.save_outputs:
                torch.save(call(), os.path.join(args.save_outputs, f"{name}_{m}.pt"))
    with open(args.result, "w") as f:
        json.dump(results, f)


# --------------------------------------------------------------------------------------
# parent side
# --------------------------------------------------------------------------------------
def clock_ghz() -> float:
    mhz = []
    try:
        with open("/proc/cpuinfo") as f:
            mhz = [float(line.split(":")[1]) for line in f if line.startswith("cpu MHz")]
    except OSError:
        pass
    return max(mhz) / 1000 if mhz else 2.0


def machine(threads) -> str:
    model, flags = platform.processor() or platform.machine(), set()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                elif line.startswith("flags"):
                    flags = set(line.split(":", 1)[1].split())
    except OSError:
        pass
    isa = ",".join(x for x in ("amx_int8", "amx_bf16", "avx512_vnni") if x in flags) or "no AMX/VNNI"
    return f"{model} ({isa}), {os.cpu_count()} logical CPUs, torch {torch.__version__}, {threads} threads"


def run_worker(kind, args, tmp, tag, env_extra=None, save=False):
    result = os.path.join(tmp, f"{tag}.json")
    cmd = [sys.executable, __file__, "--worker", kind, "--threads", str(args.threads), "--result", result,
           "--group-size", str(args.group_size), "--min-time", str(args.min_time), "--reps", str(args.reps),
           "--build-dir", args.build_dir, "--shapes", *args.shapes, "--ms", *map(str, args.ms)]
    if args.torchao_src:
        cmd += ["--torchao-src", args.torchao_src]
    if args.main_src:
        cmd += ["--main-src", args.main_src]
    if save:
        out = os.path.join(tmp, f"out_{tag}")
        os.makedirs(out, exist_ok=True)
        cmd += ["--save-outputs", out]
    env = dict(os.environ, **(env_extra or {}))
    subprocess.run(cmd, env=env, check=True)
    with open(result) as f:
        return json.load(f)


def compare(a_dir, b_dir, name, m):
    a = torch.load(os.path.join(a_dir, f"{name}_{m}.pt")).float()
    b = torch.load(os.path.join(b_dir, f"{name}_{m}.pt")).float()
    ulp = torch.maximum(a.abs(), b.abs()).clamp_min(1e-30)
    ulp = torch.exp2(torch.floor(torch.log2(ulp)) - 7)  # bf16: 8 significant bits
    max_ulps = ((a - b).abs() / ulp).max().item()
    same = (a == b).float().mean().item()
    rel = ((a - b).norm() / a.norm().clamp_min(1e-30)).item()
    return max_ulps, same, rel


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--torchao-src", help="torchao source tree (or its da8w4_linear.cpp)")
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--shapes", nargs="*", default=list(SHAPES),
                        help=f"of {list(SHAPES)}, or NAME=K,N for another shape")
    parser.add_argument("--ms", nargs="*", type=int, default=list(MS))
    parser.add_argument("--group-size", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--min-time", type=float, default=0.05)
    parser.add_argument("--clock-ghz", type=float, default=None)
    parser.add_argument("--peak-tops", type=float, default=None, help="the peak for %% of peak (default: assumed)")
    parser.add_argument("--variant", action="append", default=[], help="NAME:VAR=VALUE[,VAR=VALUE]")
    parser.add_argument("--build-dir", default=os.path.join(tempfile.gettempdir(), "torchao_da8w4_build"))
    parser.add_argument("--json", help="also write the results here (and each finished worker's times to JSON.partial)")
    parser.add_argument("--port", action="store_true",
                        help="also time the kernel PR's file (upstream-prs/pytorch-ao/da8w4_linear.cpp), built with "
                             "torchao's flags: column 'port ratio'")
    parser.add_argument("--main-src", help="a torchao main checkout: time main's layout (see above)")
    parser.add_argument("--worker", choices=("ours", "torchao", "dense", "port"), help=argparse.SUPPRESS)
    parser.add_argument("--result", help=argparse.SUPPRESS)
    parser.add_argument("--save-outputs", help=argparse.SUPPRESS)
    parser.add_argument("--build-only", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    for spec in args.shapes:
        name, eq, kn = spec.partition("=")
        if eq:
            try:
                SHAPES[spec] = tuple(int(x) for x in kn.split(","))
                assert len(SHAPES[spec]) == 2
            except (ValueError, AssertionError):
                sys.exit(f"error: --shapes {spec}: expected NAME=K,N")
        elif spec not in SHAPES:
            sys.exit(f"error: --shapes {spec}: not one of {list(SHAPES)} (or NAME=K,N)")
    if args.worker:
        return worker(args)
    if bool(args.torchao_src) == bool(args.main_src):
        sys.exit("error: give one of --torchao-src (a torchao 0.18 source tree) and --main-src (a main checkout)")
    if args.main_src:
        if not (pathlib.Path(args.main_src) / MAIN_FILE).is_file():
            sys.exit(f"error: --main-src {args.main_src}: no {MAIN_FILE} there")
    else:
        torchao_source(args.torchao_src)
    variants = []
    for v in args.variant:
        name, _, envs = v.partition(":")
        variants.append((name, dict(e.split("=", 1) for e in envs.split(",") if e)))
    if args.port:
        variants.append(("port", None))

    clock = args.clock_ghz or clock_ghz()
    peak = args.peak_tops * 1e12 if args.peak_tops else args.threads * 1024 * 2 * clock * 1e9
    peak_text = (f"peak given: {args.peak_tops:.1f} TOPS" if args.peak_tops else
                 f"peak assumed: {args.threads} cores x 1024 int8 MAC/cycle x {clock:.2f} GHz = {peak / 1e12:.1f} TOPS")
    with tempfile.TemporaryDirectory() as tmp:
        print("building torchao's kernel ...", file=sys.stderr, flush=True)
        t0 = time.time()
        src = ["--main-src", args.main_src] if args.main_src else ["--torchao-src", args.torchao_src]
        subprocess.run([sys.executable, __file__, "--worker", "torchao", "--build-only", "--threads", "1",
                        *src, "--build-dir", args.build_dir, "--result", "-"], check=True)
        print(f"  built in {time.time() - t0:.0f} s", file=sys.stderr, flush=True)
        runs = {"torchao": [], "ours": [], "dense": [], **{name: [] for name, _ in variants}}
        for r in range(args.rounds):
            order = [("torchao", "torchao", None), ("ours", "ours", None), ("dense", "dense", None)] + [
                (name, "port" if env is None else "ours", env) for name, env in variants]
            if r % 2:
                order.reverse()
            for tag, kind, env in order:
                print(f"round {r}: {tag}", file=sys.stderr, flush=True)
                runs[tag].append(run_worker(kind, args, tmp, f"{tag}_{r}", env, save=(r == 0 and tag in ("torchao", "ours", "port"))))
                if args.json:  # every finished worker's times (s per call), in case the run is cut short
                    with open(args.json + ".partial", "w") as f:
                        json.dump(runs, f)
        med = {tag: {key: statistics.median(run[key] for run in rs) for key in rs[0]} for tag, rs in runs.items()}

        print(f"Machine: {machine(args.threads)}; group_size {args.group_size}; bf16 output; asymmetric uint8 "
              f"activation; warm cache; {args.rounds} rounds of alternating processes, medians; {peak_text}")
        if args.main_src:
            level = os.environ.get("TORCHAO_CPU_DISPATCH", "AUTO")
            print(f"Layout: torchao main's ({MAIN_FILE} of {args.main_src} as 'torchao', the PR's krnl as 'port'), "
                  f"per ISA level with main's dispatch.cpp and setup.py flags, TORCHAO_CPU_DISPATCH={level}")
        library = dense_library(args)
        print(f"dense int8 GEMM: torch._int_mm, run by {library}")
        print()
        extra = "".join(f" {name} ratio |" for name, _ in variants) + (" port = ours |" if args.port else "")
        port_identical = {}
        print(f"| shape | M | torchao (us) | ours (us) | weight read (us) | torchao / ours |{extra} torchao % peak | ours % peak "
              "| int8 GEMM % peak | max diff (bf16 ulp) | identical | rel. diff | page faults per call, torchao / ours |")
        print("|---|---:|---:|---:|---:|---:|" + "---:|" * (len(variants) + args.port) + "---:|---:|---:|---:|---:|---:|---:|")
        table = []
        for name in args.shapes:
            k, n = SHAPES[name]
            for m in args.ms:
                key = f"{name}:{m}"
                ta, to, td = med["torchao"][key], med["ours"][key], med["dense"][key]
                ops = 2 * m * n * k
                ulps, same, rel = compare(os.path.join(tmp, "out_torchao_0"), os.path.join(tmp, "out_ours_0"), name, m)
                vcols = "".join(f" {ta / med[v][key]:.2f}x |" for v, _ in variants)
                if args.port:  # the kernel PR's file must give our library's bits
                    _, port_same, _ = compare(os.path.join(tmp, "out_ours_0"), os.path.join(tmp, "out_port_0"), name, m)
                    vcols += f" {'all' if port_same == 1.0 else f'{100 * port_same:.3f}%'} |"
                    port_identical[key] = port_same
                fa, fo = med["torchao"].get("minflt:" + key, -1), med["ours"].get("minflt:" + key, -1)
                tr = med["ours"].get(f"read:{name}", float("nan"))
                print(f"| {name} {k}->{n} | {m} | {ta * 1e6:.0f} | {to * 1e6:.0f} | {tr * 1e6:.0f} | **{ta / to:.2f}x** |{vcols} "
                      f"{100 * ops / ta / peak:.1f}% | {100 * ops / to / peak:.1f}% | {100 * ops / td / peak:.1f}% | "
                      f"{ulps:.0f} | {'all' if same == 1.0 else f'{100 * same:.3f}%'} | "
                      f"{rel:.1e} | {fa:.0f} / {fo:.0f} |", flush=True)
                table.append(dict(shape=name, m=m, k=k, n=n, torchao_s=ta, ours_s=to, dense_int8_s=td, weight_read_s=tr,
                                  ulps=ulps,
                                  identical=same,
                                  rel=rel, torchao_minflt=fa, ours_minflt=fo,
                                  **{f"{v}_s": med[v][key] for v, _ in variants},
                                  **{f"{v}_minflt": med[v].get("minflt:" + key, -1) for v, _ in variants},
                                  **({"port_identical_to_ours": port_identical[key]} if args.port else {})))
        if args.json:
            with open(args.json, "w") as f:
                json.dump(dict(machine=machine(args.threads), clock_ghz=clock, dense_library=library, rows=table), f,
                          indent=1)


if __name__ == "__main__":
    main()
