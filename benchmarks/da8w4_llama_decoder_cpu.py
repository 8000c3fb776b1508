"""
da8w4 on CPU, a Llama-3-8B-shaped decoder, paired in one run: stock torch with torchao's
kernel, the concat-linear pass with torchao's kernel, and the pass with our kernel.

Model (own module, HF Llama's layout and math): embedding, --layers decoder layers (RMSNorm;
q/k/v/o with RoPE theta 5e5, no llama3 scaling, grouped-query attention over a KV cache, the 4
query heads of a KV head as the rows of one SDPA call; SwiGLU MLP), RMSNorm, lm_head. Hidden
4096, 32 heads, 8 KV heads (QKV 4096 -> 4096 + 1024 + 1024), MLP 14336, vocab 128256, bf16;
random weights (seeded per tensor, the same in every variant), real shapes. Every nn.Linear,
lm_head too, goes through torchao's own flow, quantize_(module,
Int8DynamicActivationInt4WeightConfig(--group-size)): per-token asymmetric uint8 activation,
int4 weight prepacked by the loaded kernel. Then torch.compile(dynamic=False) with freezing,
one compile per case and thread count. Cases: prefill, batch 1 at each --prefill length (logits
of the last token only, as generate does); decode, one token per sequence at each --decode
batch over --past cached tokens (the step writes cache slot `past`, so every step is the same).

Variants, one worker process each (both kernels register torchao::da8w4_linear_cpu, with
different packed layouts):
  stock+torchao   torchao's kernel, built from --torchao-src by da8w4_vs_torchao_cpu.py (its
                  flags); our pass not registered, cpp.enable_concat_linear off
  concat+torchao  torchao's kernel; register_da8w4_concat_linear_cpu_pass(), enable_concat_linear
  concat+ours     our kernel (csrc/, built here by CMake + Ninja unless DA8W4_LINEAR_CPU_LIB
                  names a build); the pass on
  stock+ours      (--variants; added when torchao's kernel is missing) our kernel, pass off
fusion = stock+torchao / concat+torchao, kernel = concat+torchao / concat+ours, total =
stock+torchao / concat+ours = fusion x kernel; fusion_ours = stock+ours / concat+ours.
  concat+ours:NAME  (--ours-variant NAME:VAR=VALUE[,...]) concat+ours with those environment
                  variables (our build's tuning knobs, e.g. DA8W4_AMX_MIN_M=4); the
                  ratio NAME = concat+ours:NAME / concat+ours (above 1: the default is faster).

Method: the kernels build in parallel while the workers import; each worker makes and
quantises its model once its kernel is built. Per case the workers compile at once (not
timed); then one worker at a time: two warm-up steps each, then --rounds rounds in alternating
variant order, each timing N single steps per variant (N from --round-s) after one discarded
step (none for steps over 0.1 s). Per variant: median over rounds of the round's median step
(decode: time per token of each sequence), [min, max] of those; ratios: median [min, max] of
the per-round ratios. Correctness: max abs diff of each variant's logits against the stock
variant's (same quantised weights; kernels differ in fp32 summation order). --profile N: after a
case's rounds, N steps per variant under torch.profiler (where a step's time goes). --out is rewritten
after every measurement. --budget-s counts from the script's start: no compile, warm-up or
round starts that would end past it (estimates: the last compile, the measured steps). Order:
the first decode and the first prefill case, the other decode, the other prefill cases; one
thread count after the other (a 32-core run of ~240 s reaches few 32-thread cases: run
--threads 32 on its own).

    python benchmarks/da8w4_llama_decoder_cpu.py --torchao-src <torchao tree> --out r.json
    python benchmarks/da8w4_llama_decoder_cpu.py --small --out /tmp/small.json   # dry run
"""

import time

_T0 = time.time()  # --budget-s counts from here, before torch is imported

import argparse
import importlib.util
import json
import os
import select
import shlex
import statistics
import subprocess
import sys
import zlib
from concurrent.futures import ThreadPoolExecutor

import torch
import torch.nn as nn
import torch.nn.functional as F

import da8w4_vs_torchao_cpu as vs  # torchao's kernel: its source, build flags and loading
from da8w4_concat_linear_cpu import machine


FULL = dict(layers=4, hidden=4096, heads=32, kv_heads=8, mlp=14336, vocab=128256)
SMALL = dict(layers=2, hidden=256, heads=4, kv_heads=2, mlp=768, vocab=1024)
VARIANTS = {  # name: (kernel, concat-linear pass); the first one present is the reference
    "stock+torchao": ("torchao", False), "stock+ours": ("ours", False),
    "concat+torchao": ("torchao", True), "concat+ours": ("ours", True)}
VARIANT_ENV = {}  # --ours-variant: worker name -> environment variables
RATIOS = {"fusion": ("stock+torchao", "concat+torchao"), "kernel": ("concat+torchao", "concat+ours"),
          "total": ("stock+torchao", "concat+ours"), "fusion_ours": ("stock+ours", "concat+ours")}


class RMSNorm(nn.Module):
    def __init__(self, d, eps=1e-5):
        super().__init__()
        self.weight, self.eps = nn.Parameter(torch.ones(d)), eps

    def forward(self, x):
        xf = x.float()
        return self.weight * (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)).to(x.dtype)


def rope(x, cos, sin):
    x1, x2 = x.chunk(2, -1)
    return x * cos + torch.cat((-x2, x1), -1) * sin


class Layer(nn.Module):
    def __init__(self, c):
        super().__init__()
        h, self.nh, self.nkv = c["hidden"], c["heads"], c["kv_heads"]
        self.hd = h // self.nh
        lin = lambda i, o: nn.Linear(i, o, bias=False)  # noqa: E731
        self.q_proj, self.k_proj, self.v_proj = lin(h, h), lin(h, self.nkv * self.hd), lin(h, self.nkv * self.hd)
        self.o_proj = lin(h, h)
        self.gate_proj, self.up_proj, self.down_proj = lin(h, c["mlp"]), lin(h, c["mlp"]), lin(c["mlp"], h)
        self.input_layernorm, self.post_attention_layernorm = RMSNorm(h), RMSNorm(h)

    def forward(self, x, cos, sin, mask, pos, kc, vc):
        b, t, _ = x.shape
        h = self.input_layernorm(x)
        q = rope(self.q_proj(h).view(b, t, self.nh, self.hd).transpose(1, 2), cos, sin)
        kc.index_copy_(2, pos, rope(self.k_proj(h).view(b, t, self.nkv, self.hd).transpose(1, 2), cos, sin))
        vc.index_copy_(2, pos, self.v_proj(h).view(b, t, self.nkv, self.hd).transpose(1, 2))
        o = F.scaled_dot_product_attention(q.reshape(b, self.nkv, -1, self.hd), kc, vc, attn_mask=mask)
        x = x + self.o_proj(o.view(b, self.nh, t, self.hd).transpose(1, 2).reshape(b, t, -1))
        h = self.post_attention_layernorm(x)
        return x + self.down_proj(F.silu(self.gate_proj(h)) * self.up_proj(h))


class Decoder(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.embed_tokens = nn.Embedding(c["vocab"], c["hidden"])
        self.layers = nn.ModuleList(Layer(c) for _ in range(c["layers"]))
        self.norm, self.lm_head = RMSNorm(c["hidden"]), nn.Linear(c["hidden"], c["vocab"], bias=False)
        self.group = c["heads"] // c["kv_heads"]

    def forward(self, tokens, pos, caches):
        x = self.embed_tokens(tokens)
        f = pos[:, None].float() * self.inv_freq
        emb = torch.cat((f, f), -1)
        cos, sin = emb.cos().to(x.dtype), emb.sin().to(x.dtype)
        # key j is visible to the token at position p iff j <= p; one row per query head of a group
        mask = (torch.arange(caches[0].size(2)) <= pos[:, None]).repeat(self.group, 1)
        for i, layer in enumerate(self.layers):
            x = layer(x, cos, sin, mask, pos, caches[2 * i], caches[2 * i + 1])
        return self.lm_head(self.norm(x[:, -1:]))


def build_model(c, seed, threads, quantize):
    """bf16 N(0, 0.02) weights (norms 1), filled in parallel 4M-element chunks seeded by name;
    one top-level module at a time is made and quantised, so the fp weights never all exist."""
    with torch.device("meta"):
        model = Decoder(c).to(torch.bfloat16).eval()
    hd = c["hidden"] // c["heads"]
    model.register_buffer("inv_freq", 1.0 / 500000.0 ** (torch.arange(0, hd, 2).float() / hd), persistent=False)
    fill = lambda j: j[0].normal_(0, 0.02, generator=torch.Generator().manual_seed(j[1]))  # noqa: E731
    with ThreadPoolExecutor(threads) as ex:
        for prefix, mod in model.named_children():
            for i, sub in enumerate(mod if prefix == "layers" else [mod]):
                sub.to_empty(device="cpu")
                jobs = []
                for name, p in sub.named_parameters(prefix=f"layers.{i}" if prefix == "layers" else prefix):
                    if name.endswith("norm.weight"):
                        p.data.fill_(1.0)
                        continue
                    flat = p.data.view(-1)
                    for k, s in enumerate(range(0, flat.numel(), 1 << 22)):
                        jobs.append((flat[s:s + (1 << 22)], zlib.crc32(name.encode()) * 1000003 + k + seed))
                list(ex.map(fill, jobs))
                quantize(sub)
    return model


def make_inputs(c, case, seed):
    gen = torch.Generator().manual_seed(seed + 7 * case["batch"] + case["tokens"])
    b, t, past = case["batch"], case["tokens"], case["past"]
    shape = (b, c["kv_heads"], past + t, c["hidden"] // c["heads"])
    caches = [torch.randn(shape, generator=gen).to(torch.bfloat16) for _ in range(2 * c["layers"])]
    return torch.randint(0, c["vocab"], (b, t), generator=gen), torch.arange(past, past + t), caches


def profile_steps(state, steps):
    """Where a step's time goes: per operator, the self CPU time per step on the calling thread
    (an operator's OpenMP region runs inside it), top 12; `other` is the step's time that no
    operator accounts for (Inductor's generated kernels, the Python wrapper); minor page faults
    per step, all threads."""
    import resource

    from torch.profiler import profile, ProfilerActivity

    with torch.no_grad():
        state["fn"](*state["inputs"])
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            faults, t0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt, time.perf_counter()
            for _ in range(steps):
                state["fn"](*state["inputs"])
            wall = (time.perf_counter() - t0) / steps
            faults = (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults) / steps
    ops = sorted(((e.key, e.self_cpu_time_total / steps * 1e-6, e.count / steps) for e in prof.key_averages()),
                 key=lambda x: -x[1])
    ops = [(k, s, c) for k, s, c in ops if not k.startswith("ProfilerStep")]
    return {"step_s": wall, "minor_faults": faults, "ops": [dict(op=k, self_s=s, calls=c) for k, s, c in ops[:12]],
            "other_s": wall - sum(s for _, s, _ in ops)}


def worker(args):
    """One variant. JSON commands on stdin; one JSON reply line each on the original stdout."""
    reply = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # anything else printed goes to the worker's log
    kernel, concat = VARIANTS[args.worker.split(":")[0]]  # concat+ours:NAME is concat+ours
    c = SMALL if args.small else dict(FULL, layers=args.layers)
    share = max(1, (os.cpu_count() or 1) // args.n_workers)
    torch.set_num_threads(share)
    t0 = time.perf_counter()
    import torchao  # noqa: F401  (defines the torchao:: schemas; its wheel has no CPU kernel)
    from torch._dynamo.utils import counters
    from torch._inductor import config as inductor_config
    from torch._inductor.async_compile import AsyncCompile
    from torchao.prototype.quantization.int4 import Int8DynamicActivationInt4WeightConfig
    from torchao.quantization import quantize_

    # A compile pool of this worker's share of the CPUs, started now and never shut down when
    # idle, so that no pool starts or stops while another worker measures.
    inductor_config.compile_threads = share
    inductor_config.quiesce_async_compile_pool = False
    AsyncCompile.use_process_pool()
    reply.write(json.dumps({"import_s": time.perf_counter() - t0}) + "\n")
    config = Int8DynamicActivationInt4WeightConfig(group_size=args.group_size, set_inductor_config=False)
    state = {"threads": None}
    for line in sys.stdin:
        cmd = json.loads(line)
        try:
            t0 = time.perf_counter()
            if cmd["op"] == "load":
                if kernel == "torchao":
                    vs.load_torchao(vs.torchao_source(args.torchao_src), os.path.join(args.build_dir, "torchao"))
                    name = f"torchao's (cpu capability {torch.backends.cpu.get_cpu_capability()})"
                else:
                    vs.load_ours()
                    name = "ours (best ISA " + sys.modules["da8w4_linear_cpu"].best_isa() + ")"
                t1 = time.perf_counter()
                with torch.no_grad():
                    model = build_model(c, args.seed, share, lambda m: quantize_(m, config))
                out = {"load_s": t1 - t0, "weights_and_quantize_s": time.perf_counter() - t1, "kernel": name}
            elif cmd["op"] == "compile":
                AsyncCompile.wait_pool_ready()
                if cmd["threads"] != state["threads"]:  # generated code bakes in the thread count
                    torch.set_num_threads(cmd["threads"])
                    torch._dynamo.reset()
                    state.update(threads=cmd["threads"], fn=torch.compile(model, dynamic=False))
                if concat:
                    from torch._inductor.fx_passes.da8w4_concat_linear import register_da8w4_concat_linear_cpu_pass

                    register_da8w4_concat_linear_cpu_pass()
                state["inputs"] = make_inputs(c, cmd["case"], args.seed)
                counters.clear()
                with torch.no_grad(), inductor_config.patch(
                        {"freezing": True, "cpp.enable_concat_linear": concat, "fx_graph_cache": False}):
                    logits = state["fn"](*state["inputs"])
                torch.save(logits.float(), os.path.join(args.build_dir, f"logits_{args.worker}.pt"))
                out = {"compile_s": time.perf_counter() - t0, "fused_groups": counters["inductor"]["da8w4_concat_linear"]}
                t0 = time.perf_counter()
                with torch.no_grad():  # one more step (the others may still compile): an upper bound for the budget
                    state["fn"](*state["inputs"])
                out["step_s"] = time.perf_counter() - t0
            elif cmd["op"] == "run":
                times = []
                with torch.no_grad():
                    for _ in range(cmd["warmup"] + cmd["steps"]):
                        t0 = time.perf_counter()
                        state["fn"](*state["inputs"])
                        times.append(time.perf_counter() - t0)
                out = {"times": times[cmd["warmup"]:]}
            elif cmd["op"] == "profile":
                out = profile_steps(state, cmd["steps"])
        except Exception as e:  # the parent drops this variant
            import traceback

            traceback.print_exc()
            out = {"error": f"{type(e).__name__}: {e}"}
        reply.write(json.dumps(out) + "\n")


class Worker:
    def __init__(self, name, args):
        self.name, self.log = name, os.path.join(args.build_dir, f"worker_{name}.log")
        cmd = [sys.executable, os.path.abspath(__file__), "--worker", name, "--n-workers", str(len(args.variants)),
               "--group-size", str(args.group_size), "--layers", str(args.layers), "--seed", str(args.seed),
               "--build-dir", args.build_dir, "--torchao-src", str(args.torchao_src)] + ["--small"] * args.small
        # Unbuffered: a buffered readline could take two replies at once and leave select() waiting.
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=open(self.log, "w"),
                                     bufsize=0, env={**os.environ, **VARIANT_ENV.get(name, {})})

    def send(self, **cmd):
        self.proc.stdin.write((json.dumps(cmd) + "\n").encode())

    def recv(self, deadline):
        if not select.select([self.proc.stdout], [], [], max(0.0, deadline - time.time()))[0]:
            raise TimeoutError(f"{self.name}: no reply before the budget's end")
        line = self.proc.stdout.readline()
        out = json.loads(line) if line else {"error": "worker died"}
        if "error" in out:
            raise RuntimeError(f"{self.name}: {out['error']}; log {self.log}:\n{tail(self.log)}")
        return out


def tail(path, n=8):
    with open(path, errors="replace") as f:
        return "".join(f.readlines()[-n:])


def start_builds(args):
    """torchao's kernel (as da8w4_vs_torchao_cpu.py builds it) and ours (CMake + Ninja), in parallel."""
    cmds = {}
    if any(VARIANTS[v][0] == "torchao" for v in args.variants):
        cmds["torchao"] = [sys.executable, vs.__file__, "--worker", "torchao", "--build-only", "--threads", "1",
                           "--torchao-src", args.torchao_src, "--build-dir", os.path.join(args.build_dir, "torchao"),
                           "--result", "-"]
    lib = os.environ.get("DA8W4_LINEAR_CPU_LIB")
    if not (lib and os.path.isfile(lib)) and any(VARIANTS[v][0] == "ours" for v in args.variants):
        out = shlex.quote(os.path.join(args.build_dir, "ours"))
        cmds["ours"] = ["sh", "-c", f"cmake -G Ninja -S {shlex.quote(str(vs.REPO / 'csrc'))} -B {out} -DCMAKE_PREFIX_PATH="
                        f"{shlex.quote(torch.utils.cmake_prefix_path)} && cmake --build {out}"]
        os.environ["DA8W4_LINEAR_CPU_LIB"] = os.path.join(args.build_dir, "ours", "libda8w4_linear_cpu.so")
    logs = {k: os.path.join(args.build_dir, f"build_{k}.log") for k in cmds}
    return {k: (subprocess.Popen(c, stdout=open(logs[k], "w"), stderr=subprocess.STDOUT), logs[k], time.time())
            for k, c in cmds.items()}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--torchao-src", help="torchao source tree (or its da8w4_linear.cpp)")
    p.add_argument("--out", default="da8w4_llama_decoder_cpu.json", help="JSON, rewritten after every measurement")
    p.add_argument("--budget-s", type=float, default=230.0, help="wall-clock budget of the whole run, builds included")
    p.add_argument("--threads", type=int, nargs="+", help="default 16 32 (--small: 1)")
    p.add_argument("--decode", type=int, nargs="*", help="decode batches (default 1 4 16; --small: 4)")
    p.add_argument("--past", type=int, help="cached tokens in decode (default 512; --small: 64)")
    p.add_argument("--prefill", type=int, nargs="*", help="prefill lengths (default 512 2048; --small: 32)")
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--group-size", type=int, default=128)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--round-s", type=float, default=0.3, help="seconds of steps per variant and round (1-50 steps)")
    p.add_argument("--variants", nargs="+", choices=list(VARIANTS),
                   default=["stock+torchao", "concat+torchao", "concat+ours"])
    p.add_argument("--small", action="store_true", help="dry run: 2 layers, hidden 256, vocab 1024, short sequences")
    p.add_argument("--build-dir", default="/tmp/da8w4_llama_decoder_cpu", help="builds, worker logs, logits")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--ours-variant", action="append", default=[], metavar="NAME:VAR=VALUE[,VAR=VALUE]",
                   help="one more worker: concat+ours with these environment variables (for example a tuning knob "
                        "of our kernel's build), reported as concat+ours:NAME and NAME = its time / concat+ours's")
    p.add_argument("--profile", type=int, default=0, metavar="STEPS",
                   help="after each case's rounds, profile STEPS steps per variant (torch.profiler, CPU): "
                        "self time per step of the top operators and what no operator accounts for")
    p.add_argument("--worker", help=argparse.SUPPRESS)
    p.add_argument("--n-workers", type=int, default=3, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        return worker(args)
    for spec in args.ours_variant:
        name, _, env = spec.partition(":")
        pairs = [kv.partition("=") for kv in env.split(",") if kv]
        if not name or name in RATIOS or not pairs or any(not k or not eq for k, eq, _ in pairs):
            sys.exit(f"error: --ours-variant {spec}: expected NAME:VAR=VALUE[,VAR=VALUE]")
        VARIANTS[f"concat+ours:{name}"] = ("ours", True)
        RATIOS[name] = (f"concat+ours:{name}", "concat+ours")
        VARIANT_ENV[f"concat+ours:{name}"] = {k: v for k, _, v in pairs}
        args.variants.append(f"concat+ours:{name}")
    deadline, small = _T0 + args.budget_s, args.small
    # --small: one thread, so that a busy 2-core machine does not stall the OpenMP barriers.
    args.threads = args.threads or ([1] if small else [16, 32])
    args.decode = ([4] if small else [1, 4, 16]) if args.decode is None else args.decode
    args.past = args.past or (64 if small else 512)
    args.prefill = ([32] if small else [512, 2048]) if args.prefill is None else args.prefill
    if any(VARIANTS[v][1] for v in args.variants) and importlib.util.find_spec(
            "torch._inductor.fx_passes.da8w4_concat_linear") is None:
        sys.exit("error: this torch has no concat-linear pass: install the patch set first "
                 "(python -m tools install --replace)")
    os.makedirs(args.build_dir, exist_ok=True)
    notes = []
    avx512_vnni = "avx512_vnni" in open("/proc/cpuinfo").read()
    if not (args.torchao_src and os.path.exists(args.torchao_src) and avx512_vnni):
        notes.append(f"torchao's kernel left out: {'no --torchao-src' if avx512_vnni else 'its flags need AVX512-VNNI'}")
        args.variants = [v for v in args.variants if VARIANTS[v][0] != "torchao"]
        if len(args.variants) < 2 and "stock+ours" not in args.variants:
            args.variants.insert(0, "stock+ours")
            notes.append("stock+ours added, so that a pair is left")
    threads = [t for t in args.threads if t <= os.cpu_count()]
    notes += [f"{t} threads left out: {os.cpu_count()} CPUs" for t in args.threads if t > os.cpu_count()]
    dec = [dict(phase="decode", batch=b, tokens=1, past=args.past) for b in args.decode]
    pre = [dict(phase="prefill", batch=1, tokens=t, past=0) for t in args.prefill]
    cases = dec[:1] + pre[:1] + dec[1:] + pre[1:]  # one of each first, in case the budget ends early
    res = dict(machine=machine(), torch=torch.__version__, command=shlex.join([sys.executable] + sys.argv),
               model=SMALL if small else dict(FULL, layers=args.layers), dtype="bfloat16", group_size=args.group_size,
               threads=threads, planned=cases, budget_s=args.budget_s, load_avg_start=os.getloadavg(), notes=notes,
               builds={}, variants={}, cases=[])

    def save():
        res["elapsed_s"] = time.time() - _T0
        with open(args.out + ".tmp", "w") as f:
            json.dump(res, f, indent=1)
        os.replace(args.out + ".tmp", args.out)

    def note(msg):
        print(f"# {msg}", flush=True)
        notes.append(msg)

    print("\n".join(f"# {n}" for n in [res["machine"], f"torch {res['torch']}; {res['command']}"] + notes), flush=True)
    builds = start_builds(args)
    workers = {v: Worker(v, args) for v in args.variants}

    def drop(v, why):
        note(f"{v} dropped: {why}")
        workers.pop(v).proc.kill()

    def ask(names, **cmd):  # to every worker named at once, then collect; a failing one is dropped
        for v in names:
            try:
                workers[v].send(**cmd)
            except OSError as e:
                drop(v, f"worker gone ({e}); log {workers[v].log}")
        out = {}
        for v in [v for v in names if v in workers]:
            try:
                out[v] = workers[v].recv(deadline)
            except (RuntimeError, TimeoutError) as e:
                drop(v, str(e))
        return out

    def load(kind):  # each worker makes and quantises its model as soon as its kernel is built
        for v in [v for v in workers if VARIANTS[v][0] == kind]:
            workers[v].send(op="load")

    if "ours" not in builds and "DA8W4_LINEAR_CPU_LIB" in os.environ:
        res["builds"]["ours"] = dict(prebuilt=os.environ["DA8W4_LINEAR_CPU_LIB"])
        load("ours")
    while builds:
        for kind, (proc, log, t0) in list(builds.items()):
            rc = proc.poll()
            if rc is None and time.time() < deadline:
                continue
            if rc is None:
                proc.kill()
                rc = "killed at the budget's end"
            del builds[kind]
            res["builds"][kind] = dict(seconds=time.time() - t0, rc=rc, log=log)
            print(f"# build {kind}: rc {rc}, {time.time() - t0:.1f} s", flush=True)
            for v in [v for v in workers if VARIANTS[v][0] == kind and rc]:
                drop(v, f"{kind} kernel did not build (log {log}):\n{tail(log, 5)}")
            load(kind)
        time.sleep(0.2)
    if len(workers) < 2 and "concat+ours" in workers and "stock+ours" not in workers:
        note("stock+ours added, so that a pair is left")
        workers["stock+ours"] = Worker("stock+ours", args)
        workers["stock+ours"].send(op="load")
    for v in list(workers):  # the import reply, then the load reply
        try:
            res["variants"][v] = workers[v].recv(deadline)
            res["variants"][v].update(workers[v].recv(deadline))
        except (RuntimeError, TimeoutError) as e:
            drop(v, str(e))
    res["setup_s"] = time.time() - _T0
    print(f"# setup done at {res['setup_s']:.0f} s: {json.dumps(res['variants'])}", flush=True)
    save()

    names = [v for v in VARIANTS if v in workers]
    ratios = [k for k, (a, b) in RATIOS.items() if a in names and b in names]
    print("\n| threads | case | " + " | ".join(f"{v} ms [spread]" for v in names) + "".join(f" | {k}" for k in ratios)
          + " | fused groups | max abs diff | compile s |\n|---|---|" + "---:|" * (len(names) + len(ratios) + 3),
          flush=True)
    compile_wall = 0.0
    for t, case in [(t, case) for t in threads for case in cases]:
        label = f"decode b={case['batch']} past={case['past']}" if case["phase"] == "decode" else \
            f"prefill {case['tokens']}"
        if len(workers) < 2 or time.time() + 1.2 * compile_wall + 1 > deadline:
            note(f"{t} threads, {label}: not started ({'budget' if len(workers) > 1 else 'no pair left'})")
            continue
        rec = dict(case, threads=t, label=label, load_1m=os.getloadavg()[0], max_abs_diff={}, rounds={}, raw={})
        res["cases"].append(rec)
        t0 = time.time()
        out = ask(list(workers), op="compile", threads=t, case=case)
        compile_wall = time.time() - t0
        rec.update(compile_s={v: o["compile_s"] for v, o in out.items()},
                   fused_groups={v: o["fused_groups"] for v, o in out.items()})
        names = [v for v in names if v in workers]
        if len(names) < 2 or time.time() + 2 * sum(o["step_s"] for o in out.values()) > deadline:
            note(f"{t} threads, {label}: compiled, not measured ({'budget' if len(names) > 1 else 'no pair left'})")
            continue
        ref = torch.load(os.path.join(args.build_dir, f"logits_{names[0]}.pt"))
        rec.update(reference=names[0], ref_max_abs=ref.abs().max().item())
        for v in names[1:]:
            rec["max_abs_diff"][v] = (torch.load(os.path.join(args.build_dir, f"logits_{v}.pt")) - ref).abs().max().item()
        est = {}
        for v in names:  # two steps each, one discarded; the other sizes the rounds
            est.update({v: o["times"][0] for v, o in ask([v], op="run", steps=1, warmup=1).items()})
        names = [v for v in names if v in est]
        if len(names) < 2:
            continue
        steps = max(1, min(50, int(args.round_s / max(est.values()))))
        rec["steps_per_round"] = steps
        for r in range(args.rounds):
            order = [v for v in (names if r % 2 == 0 else names[::-1]) if v in workers]
            warm = 1 if max(est.values()) < 0.1 else 0
            if time.time() + sum((steps + warm) * est[v] for v in order) > deadline:
                note(f"{t} threads, {label}: stopped after {r} rounds (budget)")
                break
            for v in order:
                o = ask([v], op="run", steps=steps, warmup=warm).get(v)
                if o:
                    est[v] = statistics.median(o["times"])
                    rec["rounds"].setdefault(v, []).append(est[v])
                    rec["raw"].setdefault(v, []).append(o["times"])
                    save()
        alive = [v for v in names if v in workers]  # a worker dropped in the rounds is gone
        if args.profile and time.time() + sum(3 * (args.profile + 1) * est[v] for v in alive) < deadline:
            rec["profile"] = {v: o for v, o in ((v, ask([v], op="profile", steps=args.profile).get(v)) for v in alive) if o}
            for v, o in rec["profile"].items():
                top = ", ".join(f"{x['op']} {1e3 * x['self_s']:.2f}" for x in o["ops"][:4])
                print(f"# profile {t} threads, {label}, {v}: step {1e3 * o['step_s']:.2f} ms; {top}; "
                      f"other {1e3 * o['other_s']:.2f}; {o['minor_faults']:.0f} minor faults", flush=True)
            save()
        done = [v for v in names if rec["rounds"].get(v)]
        n = min((len(rec["rounds"][v]) for v in done), default=0)
        rec["median_s"] = {v: statistics.median(rec["rounds"][v]) for v in done}
        rec["ratios"] = {}
        for k, (a, b) in RATIOS.items():
            if a in done and b in done and n:
                rs = [x / y for x, y in zip(rec["rounds"][a][:n], rec["rounds"][b][:n])]
                rec["ratios"][k] = [statistics.median(rs), min(rs), max(rs)]
        save()
        cells = [f"{1e3 * rec['median_s'][v]:.2f} [{1e3 * min(rec['rounds'][v]):.2f}, {1e3 * max(rec['rounds'][v]):.2f}]"
                 if v in done else "-" for v in names]
        cells += [("%.3fx [%.2f, %.2f]" % tuple(rec["ratios"][k])) if k in rec["ratios"] else "-" for k in ratios]
        cells += [", ".join(f"{v}: {g}" for v, g in rec["fused_groups"].items()),
                  ", ".join(f"{v}: {d:.3g}" for v, d in rec["max_abs_diff"].items()) + f" (ref max {rec['ref_max_abs']:.3g})",
                  ", ".join(f"{s:.0f}" for s in rec["compile_s"].values())]
        print(f"| {t} | {label} | " + " | ".join(cells) + " |", flush=True)
    for w in workers.values():
        w.proc.stdin.close()  # the worker's loop ends
    for w in workers.values():
        try:
            w.proc.wait(timeout=max(1.0, min(10.0, deadline - time.time())))
        except subprocess.TimeoutExpired:
            w.proc.kill()
    res["load_avg_end"] = os.getloadavg()
    save()
    print(f"# ms: median over rounds of each round's median step [min, max of those]; ratios: median [min, max] over "
          f"rounds of {', '.join(f'{k} = {a} / {b}' for k, (a, b) in RATIOS.items() if k in ratios)}; "
          f"{time.time() - _T0:.0f} s in all; {args.out}", flush=True)


if __name__ == "__main__":
    main()
