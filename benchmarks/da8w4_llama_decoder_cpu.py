"""
da8w4 on CPU, a Llama-3-8B-shaped decoder: stock torch with torchao's kernel, the patch
set's concat-linear pass with torchao's kernel, and the pass with our kernel; prefill and
decode, paired in one run.

Model (own module, HF Llama's layout and math): embedding, --layers decoder layers
(RMSNorm; q/k/v/o projections, RoPE theta 5e5 without llama3 scaling, grouped-query
attention over a KV cache; SwiGLU MLP), final RMSNorm, lm_head. Hidden 4096, 32 heads,
8 KV heads (QKV 4096 -> 4096 + 1024 + 1024), MLP 14336, vocab 128256, bf16. Weights are
random (seeded, the same in every variant), shapes real. Every nn.Linear (lm_head too)
is quantised by torchao's own flow, quantize_(model,
Int8DynamicActivationInt4WeightConfig(group_size)) (per-token asymmetric uint8
activation, int4 weights prepacked by the loaded kernel's prepack op), then compiled with
torch.compile(dynamic=False) under config.freezing, one compile per case and thread count.

Cases: prefill, batch 1 at each --prefill length (empty cache, causal; logits of the last
token only, as generate does); decode, one token per sequence at each --decode batch with
--past cached tokens (the cache has past+1 slots and the step writes slot `past`, so every
timed step is the same step). The query heads that share a KV head are the rows of one
SDPA call (no repeated K/V).

Variants, each in its own worker process (each kernel registers torchao::da8w4_linear_cpu
with its own packed layout):
  stock+torchao   torchao's kernel, built from --torchao-src as
                  benchmarks/da8w4_vs_torchao_cpu.py builds it (its flags); the pass is
                  not registered and cpp.enable_concat_linear stays off
  concat+torchao  torchao's kernel; register_da8w4_concat_linear_cpu_pass() and
                  cpp.enable_concat_linear (QKV and gate/up fuse where the pass's gates allow)
  concat+ours     our kernel (csrc/, built here with CMake + Ninja unless
                  DA8W4_LINEAR_CPU_LIB names a build); the pass on
  stock+ours      (--variants; added when torchao's kernel does not build) our kernel, pass off
fusion = stock+torchao / concat+torchao, kernel = concat+torchao / concat+ours,
total = stock+torchao / concat+ours = fusion x kernel.

Method: both kernels build in parallel while the workers start (import, random weights);
each worker then loads its kernel and quantises. Per case all workers compile at once
(compilation is not timed), then measuring is sequential: a warm-up step per variant, then
--rounds rounds in alternating variant order, each timing N single steps per variant (N
from --round-s, the same for all) after one discarded step (none for steps over 0.1 s).
Reported: per variant the median over rounds of each round's median step (decode: per
token of each sequence), spread = [min, max] of the round medians; ratios are medians
[min, max] of the per-round ratios. Correctness: each variant's logits from its first call
against the first variant's (same quantised weights, the kernels differ in fp32 order):
max abs diff. --out is rewritten after every measurement. --budget-s: no compile or
measurement is started that would end past it (estimated from the last compile and the
measured step times); a compile still running at the limit is abandoned.

    python benchmarks/da8w4_llama_decoder_cpu.py --torchao-src <torchao tree> --out r.json
    python benchmarks/da8w4_llama_decoder_cpu.py --small --out /tmp/small.json   # CPU dry run
"""

import time

_T0 = time.time()  # the budget counts from here (before torch is imported)

import argparse
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

import da8w4_vs_torchao_cpu as vs  # torchao's kernel: source lookup, build flags, loading
from da8w4_concat_linear_cpu import machine  # the lscpu line


FULL = dict(layers=4, hidden=4096, heads=32, kv_heads=8, mlp=14336, vocab=128256)
SMALL = dict(layers=2, hidden=256, heads=4, kv_heads=2, mlp=768, vocab=1024)
VARIANTS = {  # name: (kernel, concat-linear pass)
    "stock+torchao": ("torchao", False),
    "concat+torchao": ("torchao", True),
    "concat+ours": ("ours", True),
    "stock+ours": ("ours", False),
}
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
        # key j is visible to the token at position p iff j <= p; rows repeat per query head of a group
        mask = (torch.arange(caches[0].size(2)) <= pos[:, None]).repeat(self.group, 1)
        for i, layer in enumerate(self.layers):
            x = layer(x, cos, sin, mask, pos, caches[2 * i], caches[2 * i + 1])
        return self.lm_head(self.norm(x[:, -1:]))


def build_model(c, seed, threads):
    """bf16, random N(0, 0.02) weights filled in parallel chunks, each chunk seeded by name."""
    with torch.device("meta"):
        model = Decoder(c).to(torch.bfloat16).eval()
    model = model.to_empty(device="cpu")
    hd = c["hidden"] // c["heads"]
    model.register_buffer("inv_freq", 1.0 / 500000.0 ** (torch.arange(0, hd, 2).float() / hd), persistent=False)
    jobs = []
    for name, p in model.named_parameters():
        if name.endswith("norm.weight"):
            p.data.fill_(1.0)
            continue
        flat = p.data.view(-1)
        for i, s in enumerate(range(0, flat.numel(), 1 << 22)):
            jobs.append((flat[s:s + (1 << 22)], zlib.crc32(name.encode()) * 1000003 + i + seed))
    with ThreadPoolExecutor(threads) as ex:
        list(ex.map(lambda j: j[0].normal_(0, 0.02, generator=torch.Generator().manual_seed(j[1])), jobs))
    return model


def make_inputs(c, case, seed):
    gen = torch.Generator().manual_seed(seed + 7 * case["batch"] + case["tokens"])
    b, t, past = case["batch"], case["tokens"], case["past"]
    shape = (b, c["kv_heads"], past + t, c["hidden"] // c["heads"])
    caches = [torch.randn(shape, generator=gen).to(torch.bfloat16) for _ in range(2 * c["layers"])]
    tokens = torch.randint(0, c["vocab"], (b, t), generator=gen)
    return tokens, torch.arange(past, past + t), caches


# --------------------------------------------------------------------------------------
# worker: one variant; JSON commands on stdin, one JSON reply line each on the real stdout
# --------------------------------------------------------------------------------------
def worker(args):
    reply = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # anything else printed goes to the worker's log
    kernel, concat = VARIANTS[args.worker]
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

    # A compile pool of this worker's share of the CPUs, started now (in the shadow of the builds)
    # and never shut down when idle, so that no pool starts or stops while another worker measures.
    inductor_config.compile_threads = share
    inductor_config.quiesce_async_compile_pool = False
    AsyncCompile.use_process_pool()
    model = build_model(c, args.seed, share)
    reply.write(json.dumps({"init_s": time.perf_counter() - t0}) + "\n")
    state = {"threads": None}
    for line in sys.stdin:
        cmd = json.loads(line)
        try:
            t0 = time.perf_counter()
            if cmd["op"] == "load":
                if kernel == "torchao":
                    vs.load_torchao(vs.torchao_source(args.torchao_src), os.path.join(args.build_dir, "torchao"))
                    isa = "torchao (AMX brgemm where cpublas can pack)"
                else:
                    vs.load_ours()
                    isa = "ours: " + sys.modules["da8w4_linear_cpu"].best_isa()
                t1 = time.perf_counter()
                with torch.no_grad():
                    quantize_(model, Int8DynamicActivationInt4WeightConfig(group_size=args.group_size,
                                                                           set_inductor_config=False))
                out = {"load_s": t1 - t0, "quantize_s": time.perf_counter() - t1, "kernel": isa}
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
                torch.save(logits.float(), os.path.join(cmd["save_dir"], f"logits_{args.worker}.pt"))
                out = {"compile_s": time.perf_counter() - t0, "fused_groups": counters["inductor"]["da8w4_concat_linear"],
                       "fused_calls": counters["inductor"]["da8w4_concat_linear_nodes"]}
            elif cmd["op"] == "run":
                times = []
                with torch.no_grad():
                    for i in range(cmd["warmup"] + cmd["steps"]):
                        t0 = time.perf_counter()
                        state["fn"](*state["inputs"])
                        times.append(time.perf_counter() - t0)
                out = {"times": times[cmd["warmup"]:]}
            else:
                return
        except Exception as e:  # reported to the parent, which drops this variant
            import traceback

            traceback.print_exc()
            out = {"error": f"{type(e).__name__}: {e}"}
        reply.write(json.dumps(out) + "\n")


# --------------------------------------------------------------------------------------
# parent
# --------------------------------------------------------------------------------------
class Worker:
    def __init__(self, name, args, log):
        cmd = [sys.executable, os.path.abspath(__file__), "--worker", name, "--n-workers", str(len(args.variants)),
               "--group-size", str(args.group_size), "--layers", str(args.layers), "--seed", str(args.seed),
               "--build-dir", args.build_dir] + (["--small"] if args.small else []) + (
                   ["--torchao-src", args.torchao_src] if args.torchao_src else [])
        self.name, self.log = name, log
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=open(log, "w"), text=True)

    def send(self, **cmd):
        self.proc.stdin.write(json.dumps(cmd) + "\n")
        self.proc.stdin.flush()

    def recv(self, deadline):
        if not select.select([self.proc.stdout], [], [], max(0.0, deadline - time.time()))[0]:
            raise TimeoutError(f"{self.name}: no reply before the budget's end")
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"{self.name}: worker died; log {self.log}:\n{tail(self.log)}")
        out = json.loads(line)
        if "error" in out:
            raise RuntimeError(f"{self.name}: {out['error']}; log {self.log}")
        return out


def tail(path, n=15):
    with open(path, errors="replace") as f:
        return "".join(f.readlines()[-n:])


def start_builds(args, variants):
    """torchao's kernel (as da8w4_vs_torchao_cpu.py builds it) and ours (CMake + Ninja), in parallel."""
    procs = {}
    if any(VARIANTS[v][0] == "torchao" for v in variants):
        cmd = [sys.executable, vs.__file__, "--worker", "torchao", "--build-only", "--threads", "1", "--torchao-src",
               args.torchao_src, "--build-dir", os.path.join(args.build_dir, "torchao"), "--result", "-"]
        procs["torchao"] = cmd
    lib = os.environ.get("DA8W4_LINEAR_CPU_LIB")
    if any(VARIANTS[v][0] == "ours" for v in variants) and not (lib and os.path.isfile(lib)):
        out = os.path.join(args.build_dir, "ours")
        prefix = torch.utils.cmake_prefix_path
        procs["ours"] = ["sh", "-c", f"cmake -G Ninja -S {shlex.quote(str(vs.REPO / 'csrc'))} -B {shlex.quote(out)} "
                         f"-DCMAKE_PREFIX_PATH={shlex.quote(prefix)} && cmake --build {shlex.quote(out)}"]
        os.environ["DA8W4_LINEAR_CPU_LIB"] = os.path.join(out, "libda8w4_linear_cpu.so")  # workers inherit it
    logs = {k: os.path.join(args.build_dir, f"build_{k}.log") for k in procs}
    return {k: (subprocess.Popen(cmd, stdout=open(logs[k], "w"), stderr=subprocess.STDOUT), logs[k], time.time())
            for k, cmd in procs.items()}


def ratio_stats(rounds, a, b, n):
    r = [x / y for x, y in zip(rounds[a][:n], rounds[b][:n])]
    return [statistics.median(r), min(r), max(r)] if r else None


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--torchao-src", help="torchao source tree (or its da8w4_linear.cpp)")
    p.add_argument("--out", default="da8w4_llama_decoder_cpu.json", help="JSON, rewritten after every measurement")
    p.add_argument("--budget-s", type=float, default=225.0, help="wall-clock budget of the whole run, builds included")
    p.add_argument("--threads", type=int, nargs="+", default=None, help="default: 16 32 (--small: all CPUs)")
    p.add_argument("--decode", type=int, nargs="*", default=None, help="decode batches (default 1 4 16; --small: 4)")
    p.add_argument("--past", type=int, default=None, help="cached tokens for decode (default 512; --small 64)")
    p.add_argument("--prefill", type=int, nargs="*", default=None, help="prefill lengths (default 512 2048; --small: 32)")
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--group-size", type=int, default=128)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--round-s", type=float, default=0.3, help="seconds of steps per variant per round (1-50 steps)")
    p.add_argument("--variants", nargs="+", default=["stock+torchao", "concat+torchao", "concat+ours"],
                   choices=list(VARIANTS))
    p.add_argument("--small", action="store_true", help="tiny dry run: 2 layers, hidden 256, short sequences")
    p.add_argument("--build-dir", default=os.path.join("/tmp", "da8w4_llama_decoder_cpu"))
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--worker", choices=list(VARIANTS), help=argparse.SUPPRESS)
    p.add_argument("--n-workers", type=int, default=3, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        return worker(args)
    start = _T0
    deadline = start + args.budget_s
    small = args.small
    args.threads = args.threads or ([os.cpu_count()] if small else [16, 32])
    args.decode = ([4] if small else [1, 4, 16]) if args.decode is None else args.decode
    args.past = args.past or (64 if small else 512)
    args.prefill = ([32] if small else [512, 2048]) if args.prefill is None else args.prefill
    os.makedirs(args.build_dir, exist_ok=True)
    notes = []
    flags = open("/proc/cpuinfo").read()
    if not args.torchao_src or not os.path.exists(args.torchao_src) or "avx512_vnni" not in flags:
        notes.append(f"torchao's kernel skipped: no --torchao-src ({args.torchao_src})" if "avx512_vnni" in flags
                     else "torchao's kernel skipped: its build flags need AVX512-VNNI, which this CPU lacks")
        args.variants = [v for v in args.variants if VARIANTS[v][0] != "torchao"]
    threads = [t for t in args.threads if t <= os.cpu_count()]
    notes += [f"{t} threads skipped: {os.cpu_count()} CPUs" for t in args.threads if t > os.cpu_count()]
    cases = [dict(phase="decode", batch=b, tokens=1, past=args.past) for b in args.decode] + [
        dict(phase="prefill", batch=1, tokens=t, past=0) for t in args.prefill]
    res = dict(machine=machine(), torch=torch.__version__, command=" ".join(map(shlex.quote, [sys.executable] + sys.argv)),
               model=SMALL if small else dict(FULL, layers=args.layers), dtype="bfloat16", group_size=args.group_size,
               budget_s=args.budget_s, load_avg_start=os.getloadavg(), notes=notes, builds={}, variants={}, cases=[])

    def save():
        res["elapsed_s"] = time.time() - start
        with open(args.out + ".tmp", "w") as f:
            json.dump(res, f, indent=1)
        os.replace(args.out + ".tmp", args.out)

    def note(msg):
        print(f"# {msg}", flush=True)
        notes.append(msg)

    print(f"# {res['machine']}\n# torch {res['torch']}; {res['command']}", flush=True)
    builds = start_builds(args, args.variants)
    workers = {v: Worker(v, args, os.path.join(args.build_dir, f"worker_{v}.log")) for v in args.variants}

    def drop(v, why):
        note(f"{v} dropped: {why}")
        workers.pop(v).proc.kill()

    if not builds.get("ours") and any(VARIANTS[v][0] == "ours" for v in workers):
        res["builds"]["ours"] = dict(prebuilt=os.environ["DA8W4_LINEAR_CPU_LIB"])
    for kind, (proc, log, t0) in builds.items():
        try:
            rc = proc.wait(timeout=max(1.0, deadline - time.time()))
        except subprocess.TimeoutExpired:
            proc.kill()
            rc = "killed at the budget's end"
        res["builds"][kind] = dict(seconds=time.time() - t0, rc=rc, log=log)
        print(f"# build {kind}: rc {rc}, {time.time() - t0:.1f} s", flush=True)
        if rc:
            for v in [v for v in workers if VARIANTS[v][0] == kind]:
                drop(v, f"{kind} kernel did not build (log {log}):\n{tail(log, 5)}")
    if len(workers) < 2 and "stock+ours" not in workers and any(VARIANTS[v][0] == "ours" for v in workers):
        note("added stock+ours, so that a pair is left")
        workers["stock+ours"] = Worker("stock+ours", args, os.path.join(args.build_dir, "worker_stock+ours.log"))
    for v, w in list(workers.items()):
        try:
            res["variants"][v] = w.recv(deadline)
            w.send(op="load")
        except (RuntimeError, TimeoutError) as e:
            drop(v, str(e))
    for v, w in list(workers.items()):
        try:
            res["variants"][v].update(w.recv(deadline))
        except (RuntimeError, TimeoutError) as e:
            drop(v, str(e))
    res["setup_s"] = time.time() - start
    print(f"# setup (builds, weights, quantize_) done at {res['setup_s']:.0f} s: {json.dumps(res['variants'])}", flush=True)
    save()

    def ask(vs_, **cmd):  # send to every variant in vs_ at once, then collect; a failing one is dropped
        out = {}
        for v in vs_:
            try:
                workers[v].send(**cmd)
            except OSError as e:
                drop(v, f"worker gone ({e}); log {workers[v].log}")
        for v in [v for v in vs_ if v in workers]:
            try:
                out[v] = workers[v].recv(deadline)
            except (RuntimeError, TimeoutError) as e:
                drop(v, str(e))
        return out

    names = sorted(workers, key=["stock+torchao", "stock+ours", "concat+torchao", "concat+ours"].index)
    ratios = [k for k, (a, b) in RATIOS.items() if a in names and b in names]
    print("\n| threads | case | " + " | ".join(f"{v} ms [spread]" for v in names) + "".join(f" | {k}" for k in ratios) +
          " | fused groups | max abs diff | compile s |", flush=True)
    print("|---|---|" + "---:|" * (len(names) + len(ratios) + 3), flush=True)
    compile_wall = 0.0
    for t, case in [(t, case) for t in threads for case in cases]:
        label = (f"decode b={case['batch']} past={case['past']}" if case["phase"] == "decode"
                 else f"prefill {case['tokens']} tok")
        if len(workers) < 2 or time.time() + 1.2 * compile_wall + 1 > deadline:
            note(f"{t} threads, {label}: not started ({'budget' if len(workers) > 1 else 'no pair left'})")
            continue
        rec = dict(case, threads=t, label=label, max_abs_diff={}, rounds={})
        res["cases"].append(rec)
        t0 = time.time()
        out = ask(list(workers), op="compile", threads=t, case=case,
                  save_dir=args.build_dir)
        compile_wall = time.time() - t0
        rec.update(compile_s={v: o["compile_s"] for v, o in out.items()},
                   fused_groups={v: o["fused_groups"] for v, o in out.items()})
        names = [v for v in names if v in workers]
        if len(names) < 2:
            continue
        ref = torch.load(os.path.join(args.build_dir, f"logits_{names[0]}.pt"))
        rec["ref_max_abs"] = ref.abs().max().item()
        for v in names[1:]:
            rec["max_abs_diff"][v] = (torch.load(os.path.join(args.build_dir, f"logits_{v}.pt")) - ref).abs().max().item()
        est = {}
        for v in names:  # two warm-up steps each; the second sizes the rounds
            est.update({v: o["times"][0] for v, o in ask([v], op="run", steps=1, warmup=1).items()})
        steps = max(1, min(50, int(args.round_s / max(est.values()))))
        rec.update(steps_per_round=steps, rounds={v: [] for v in names})
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
                    rec["rounds"][v].append(est[v])
                    save()
        done = [v for v in names if rec["rounds"].get(v)]
        n = min(len(rec["rounds"][v]) for v in done) if done else 0
        rec["median_s"] = {v: statistics.median(rec["rounds"][v]) for v in done}
        rec["ratios"] = {k: ratio_stats(rec["rounds"], a, b, n) for k, (a, b) in RATIOS.items() if a in done and b in done}
        save()
        cells = [f"{1e3 * rec['median_s'][v]:.2f} [{1e3 * min(rec['rounds'][v]):.2f}, {1e3 * max(rec['rounds'][v]):.2f}]"
                 if v in done else "-" for v in names]
        cells += [("%.3fx [%.2f, %.2f]" % tuple(rec["ratios"][k])) if rec["ratios"].get(k) else "-" for k in ratios]
        cells += [", ".join(f"{v}: {g}" for v, g in rec["fused_groups"].items()),
                  ", ".join(f"{v}: {d:.3g}" for v, d in rec["max_abs_diff"].items()) + f" (ref max {rec['ref_max_abs']:.3g})",
                  ", ".join(f"{s:.0f}" for s in rec["compile_s"].values())]
        print(f"| {t} | {label} | " + " | ".join(cells) + " |", flush=True)
    for w in workers.values():
        w.proc.stdin.close()
    for w in workers.values():
        try:
            w.proc.wait(timeout=max(1.0, min(10.0, deadline - time.time())))
        except subprocess.TimeoutExpired:
            w.proc.kill()
    res["load_avg_end"] = os.getloadavg()
    save()
    print(f"# ratios: fusion = stock+torchao / concat+torchao, kernel = concat+torchao / concat+ours, total = "
          f"stock+torchao / concat+ours (median [min, max] over rounds); {time.time() - start:.0f} s; {args.out}")


if __name__ == "__main__":
    main()
