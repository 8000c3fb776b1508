"""Micro-pipeline TP on a Llama-style decoder layer: fused ops and layer time, off / stock / patched.

Needs two GPUs and a torch with the inductor-micro-pipeline-tp-slice-cat patch installed; run with

    NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1 \\
    torchrun --nproc_per_node 2 benchmarks/micro_pipeline_tp_decoder_gpu.py --out $OUT
    python benchmarks/micro_pipeline_tp_decoder_gpu.py --dry-run     # CPU, fake process group

(NVLink multicast stays off: the script sets those three variables when unset and refuses other
values.)  The layer is RMSNorm -> attention (q/k/v/o, RoPE, GQA, causal SDPA) -> RMSNorm -> SwiGLU
MLP, with residuals, bf16; Llama-3 8B/70B sizes (hidden 4096: 32 heads, 8 KV heads, FFN 14336;
hidden 8192: 64/8/28672; head dim 128), batch 4 x sequence 2048 by default.  Cases (``--cases``):

  layer:H:MODE   torchtitan's TP plan through ``parallelize_module``: SequenceParallel norms,
                 PrepareModuleInput Shard(1) -> Replicate, wq/wk/wv/w1/w3 ColwiseParallel, wo/w2
                 RowwiseParallel(output_layouts=Shard(1)); DTensor's collectives.
  handsp:H:MODE  the same layer, tensor + sequence parallel by hand (Megatron style, as some public
                 training code does): local shards of fused wqkv / w13 between funcol's
                 ``all_gather_tensor_autograd(x, 1)`` and ``reduce_scatter_tensor_autograd(y, 1)``.
                 In their backward, autograd of funcol's ``cat(chunk(...))`` (cat's backward slices,
                 chunk's cats) gives the slice/cat form: ``all_gather -> cat([y[0:c], y[c:2c]], 1)
                 -> mm`` and ``mm -> cat([y[:, 0:c], y[:, c:2c]], 0) -> reduce_scatter``.  Their
                 forward, and the graphs of ``layer`` we inspected (inference, training, activation
                 checkpointing), have funcol's split/getitem/cat form, which stock already fuses.

MODE ``fwd`` times the forward under ``no_grad``; ``train`` times forward + backward (input grad too,
as inside a model).  Each case compiles three variants on the same inputs, each its own code object
(no dynamo reset between them, no FX-graph / AOTAutograd cache):

  off      ``torch._inductor.config._micro_pipeline_tp = False``
  stock    ``_micro_pipeline_tp = True`` with our slice/cat matching turned off.  There is no switch:
           the patch's entry points in ``micro_pipeline_tp`` are monkeypatched to decline while the
           variant compiles: ``find_all_gather_reassembly`` / ``find_reduce_scatter_reassembly``
           (2.11 backport) or ``prove_all_gather_reassembly`` / ``prove_reduce_scatter_reassembly``
           (2.13+: no slice/cat match at all, as upstream 2.11; upstream 2.13 fuses them unproven).
  patched  ``_micro_pipeline_tp = True`` as installed.

Symmetric memory is enabled for the TP group (``enable_symm_mem_for_group``).  Fused ops are counted
in the generated code (non-comment lines calling ``symm_mem.fused_all_gather_matmul`` /
``fused_matmul_reduce_scatter``) and in the post-grad graph (read-only custom post pass), with
``counters["inductor"]["micro_pipeline_tp_slice_cat"]``.  The ``off`` compile's post-grad graphs are
also inspected: the collectives' forms, what ``find_all_gather_patterns`` /
``find_reduce_scatter_patterns`` match, and what ``micro_pipeline_tp_pass`` fuses on a copy of the
graph, stock and patched (``is_nccl_available`` patched, symmetric memory's ``_test_mode``).
Outputs (and the input grad in train mode) are compared with ``off``.  Timing reuses
``micro_pipeline_tp_slice_cat_gpu.timed_ms``: CUDA events around each step with both ranks entering
together, the same iteration count on both ranks, the slower rank's mean; ``--reps`` repetitions with
the variants rotated, medians reported.  A case is skipped when the time so far plus the last case's
passes ``--budget-s``.  JSON is rewritten
after every case to ``--out``/micro_pipeline_tp_decoder_gpu.json (``$OUT`` when set); a table is
printed last.  ``--dry-run`` runs the same flow on the CPU with the fake process group and small
sizes: no symmetric memory (nothing fuses in the compiled code), no timing; the inspection still
says what would fuse.
"""

import argparse
import contextlib
import json
import os
import platform
import re
import socket
import statistics
import sys
import time
import types
from unittest import mock

MULTICAST_OFF = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
for _k, _v in MULTICAST_OFF.items():  # before torch, NCCL or NVSHMEM read them
    if os.environ.setdefault(_k, _v) != _v:
        sys.exit(f"{_k}={os.environ[_k]}: this benchmark keeps NVLink multicast off ({_k}={_v})")

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.distributed._functional_collectives as funcol  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402
import torch._inductor.fx_passes.micro_pipeline_tp as mpt  # noqa: E402
from torch._dynamo.utils import counters  # noqa: E402
from torch._inductor import config as inductor_config  # noqa: E402
from torch._inductor.graph import GraphLowering  # noqa: E402
from torch.distributed._symmetric_memory import _test_mode  # noqa: E402
from torch.distributed.device_mesh import init_device_mesh  # noqa: E402
from torch.distributed.tensor import Replicate, Shard  # noqa: E402
from torch.distributed.tensor.parallel import (  # noqa: E402
    ColwiseParallel, PrepareModuleInput, RowwiseParallel, SequenceParallel, parallelize_module)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from micro_pipeline_tp_slice_cat_gpu import FEATURE, timed_ms  # noqa: E402

SIZES = {4096: (32, 8, 14336), 8192: (64, 8, 28672)}  # hidden -> heads, KV heads, FFN
AG, RS = "fused_all_gather_matmul", "fused_matmul_reduce_scatter"
VARIANTS = (("off", False, False), ("stock", True, True), ("patched", True, False))  # mpt, stock
c10d = torch.ops._c10d_functional
aten = torch.ops.aten


class RMSNorm(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-5)).type_as(x) * self.weight


def rope(x, cos, sin):  # x: [b, heads, s, hd]; rotate-half form
    x1, x2 = x.chunk(2, dim=-1)
    return x * cos + torch.cat([-x2, x1], dim=-1) * sin


class Attention(nn.Module):
    def __init__(self, dim, heads, kv_heads, hd, seq, fused):
        super().__init__()
        self.hd, self.split = hd, [heads * hd, kv_heads * hd, kv_heads * hd]
        if fused:  # one rank's shard of wq;wk;wv
            self.wqkv = nn.Linear(dim, sum(self.split), bias=False)
        else:
            self.wq, self.wk, self.wv = (nn.Linear(dim, n, bias=False) for n in self.split)
        self.wo = nn.Linear(heads * hd, dim, bias=False)
        freqs = torch.outer(torch.arange(seq).float(), 1e4 ** (-torch.arange(0, hd, 2).float() / hd))
        self.register_buffer("cos", torch.cat([freqs.cos()] * 2, -1), persistent=False)
        self.register_buffer("sin", torch.cat([freqs.sin()] * 2, -1), persistent=False)

    def forward(self, x):
        b, s, _ = x.shape
        if hasattr(self, "wqkv"):
            q, k, v = self.wqkv(x).split(self.split, dim=-1)
        else:
            q, k, v = self.wq(x), self.wk(x), self.wv(x)
        q, k, v = (t.reshape(b, s, -1, self.hd).transpose(1, 2) for t in (q, k, v))
        cos, sin = self.cos[:s].to(q.dtype), self.sin[:s].to(q.dtype)
        q, k = rope(q, cos, sin), rope(k, cos, sin)
        k, v = (t.repeat_interleave(q.shape[1] // k.shape[1], dim=1) for t in (k, v))
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.wo(o.transpose(1, 2).reshape(b, s, -1))


class FeedForward(nn.Module):
    def __init__(self, dim, ffn, fused):
        super().__init__()
        if fused:  # one rank's shard of w1;w3
            self.w13 = nn.Linear(dim, 2 * ffn, bias=False)
        else:
            self.w1, self.w3 = nn.Linear(dim, ffn, bias=False), nn.Linear(dim, ffn, bias=False)
        self.w2 = nn.Linear(ffn, dim, bias=False)

    def forward(self, x):
        gate, up = self.w13(x).chunk(2, -1) if hasattr(self, "w13") else (self.w1(x), self.w3(x))
        return self.w2(F.silu(gate) * up)


class DecoderLayer(nn.Module):
    """torchtitan's Llama block.  ``group`` None: full weights, for ``parallelize_module``; a group
    name: this rank's shards (``tp`` ranks), sequence parallel through funcol's autograd ops."""

    def __init__(self, dim, heads, kv_heads, ffn, seq, hd=128, group=None, tp=1):
        super().__init__()
        self.group, n = group, (tp if group else 1)
        self.attention_norm, self.ffn_norm = RMSNorm(dim), RMSNorm(dim)
        self.attention = Attention(dim, heads // n, kv_heads // n, hd, seq, fused=bool(group))
        self.feed_forward = FeedForward(dim, ffn // n, fused=bool(group))

    def forward(self, x):  # x: this rank's [b, s / tp, dim]
        ag, rs = (lambda t: t), (lambda t: t)  # DTensor: parallelize_module's hooks do the collectives
        if self.group:
            ag = lambda t: funcol.all_gather_tensor_autograd(t, 1, self.group)  # noqa: E731
            rs = lambda t: funcol.reduce_scatter_tensor_autograd(t, "sum", 1, self.group)  # noqa: E731
        h = x + rs(self.attention(ag(self.attention_norm(x))))
        return h + rs(self.feed_forward(ag(self.ffn_norm(h))))


TP_PLAN = {
    "attention_norm": SequenceParallel(),
    "attention": PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),)),
    "attention.wq": ColwiseParallel(), "attention.wk": ColwiseParallel(), "attention.wv": ColwiseParallel(),
    "attention.wo": RowwiseParallel(output_layouts=Shard(1)),
    "ffn_norm": SequenceParallel(),
    "feed_forward": PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),)),
    "feed_forward.w1": ColwiseParallel(), "feed_forward.w3": ColwiseParallel(),
    "feed_forward.w2": RowwiseParallel(output_layouts=Shard(1)),
}


def build(kind, dim, seq, mesh, ws, dtype, device, small):
    heads, kv, ffn = (4, 2, 2 * dim) if small else SIZES[dim]
    hd = dim // heads
    torch.manual_seed(0)  # same full weights on every rank; handsp: each rank its own shards
    with torch.device(device):
        if kind == "layer":
            return parallelize_module(DecoderLayer(dim, heads, kv, ffn, seq, hd).to(dtype), mesh, TP_PLAN)
        torch.manual_seed(1 + dist.get_rank())
        return DecoderLayer(dim, heads, kv, ffn, seq, hd, mesh.get_group().group_name, ws).to(dtype)


@contextlib.contextmanager
def slice_cat_off():
    """Stock: our slice/cat reassembly matching declined at its entry points (no switch exists)."""
    names = [n for n in ("find_all_gather_reassembly", "find_reduce_scatter_reassembly",  # 2.11
                         "prove_all_gather_reassembly", "prove_reduce_scatter_reassembly")  # 2.13+
             if hasattr(mpt, n)]
    if not names:
        raise SystemExit("inductor-micro-pipeline-tp-slice-cat is not installed in this torch")
    with contextlib.ExitStack() as stack:
        for n in names:
            stack.enter_context(mock.patch.object(mpt, n, lambda *a, **k: None))
        yield


def fused_nodes(graph):
    names = [str(n.target) for n in graph.nodes]
    return {"ag": sum(AG in t for t in names), "rs": sum(RS in t for t in names)}


def inspect_graph(graph):
    """The collectives' forms, the finders' matches and what the pass fuses, stock and patched."""
    forms = []
    for n in graph.nodes:
        if n.target is c10d.all_gather_into_tensor.default:
            users = {u.target for w in n.users for u in w.users}
            forms.append("ag:" + ("slice/cat" if aten.slice.Tensor in users else "split/cat"
                                  if users & {aten.split.Tensor, aten.split_with_sizes.default} else "plain"))
        elif n.target is c10d.reduce_scatter_tensor.default:
            a = n.args[0]
            ins = {x.target for x in a.args[0]} if a.target is aten.cat.default else set()
            forms.append("rs:" + ("slice/cat" if aten.slice.Tensor in ins else "split/cat" if ins else "plain"))
    out, saved = {"collectives": forms}, dict(counters["inductor"])  # the copies' fusions don't count
    for variant, ctx in (("stock", slice_cat_off), ("patched", contextlib.nullcontext)):
        with ctx():
            found = mpt.find_all_gather_patterns(graph) + mpt.find_reduce_scatter_patterns(graph)
            copy = torch.fx.Graph()
            copy.output(copy.graph_copy(graph, {}))
            with mock.patch.object(dist, "is_nccl_available", return_value=True), _test_mode():
                mpt.micro_pipeline_tp_pass(copy)
        out[variant] = {"matched": len(found), "matched_slice_cat": sum(
            any(getattr(x, "target", None) is aten.slice.Tensor for x in getattr(m.match, "nodes", m.match))
            for m in found), "would_fuse": fused_nodes(copy)}
    counters["inductor"].clear()
    counters["inductor"].update(saved)
    return out


def code_counts(code):
    lines = [ln for ln in code.splitlines() if not ln.lstrip().startswith("#")]
    return {k: sum(bool(re.search(rf"symm_mem\.{op}(\.default)?\(", ln)) for ln in lines)
            for k, op in (("ag", AG), ("rs", RS))}


def fresh(model, tag):
    def fwd(x):
        return model(x)
    # its own code object, so dynamo keeps one cache entry per variant
    return types.FunctionType(fwd.__code__.replace(co_name=f"fwd_{tag}"), fwd.__globals__, f"fwd_{tag}",
                              None, fwd.__closure__)


def run_case(spec, args, mesh, ws, dtype, device):
    kind, dim, mode = spec.split(":")
    dim = int(dim)
    model = build(kind, dim, args.seq, mesh, ws, dtype, device, args.dry_run)
    torch.manual_seed(100 + dist.get_rank())
    x = torch.randn(args.batch, args.seq // ws, dim, device=device, dtype=dtype, requires_grad=mode == "train")
    gy = torch.randn_like(x) if mode == "train" else None

    def step_of(fn):
        if mode == "train":
            return lambda x, gy: fn(x).backward(gy)
        return lambda x, gy: fn(x)

    variants = {}
    for name, on, stock in VARIANTS:
        fn, graphs, codes = torch.compile(fresh(model, f"{kind}{dim}{mode}_{name}"), fullgraph=True), [], []
        post = (lambda g: graphs.append(inspect_graph(g))) if name == "off" else (
            lambda g: graphs.append(fused_nodes(g)))
        counters.clear()
        x.grad = None
        t0 = time.perf_counter()
        with contextlib.ExitStack() as st:
            st.enter_context(inductor_config.patch(
                _micro_pipeline_tp=on, fx_graph_cache=False, post_grad_custom_post_pass=post))
            st.enter_context(torch._functorch.config.patch(enable_autograd_cache=False))
            st.enter_context(mock.patch.object(GraphLowering, "save_output_code", codes.append))
            st.enter_context(torch.no_grad() if mode == "fwd" else contextlib.nullcontext())
            if stock:
                st.enter_context(slice_cat_off())
            y = fn(x)
            if mode == "train":
                y.backward(gy)
            if device == "cuda":
                torch.cuda.synchronize()
        variants[name] = {
            "first_call_s": round(time.perf_counter() - t0, 1), "graphs": graphs,
            "code_fused": [code_counts(c) for c in codes], "slice_cat_fused": counters["inductor"][FEATURE],
            "y": y.detach(), "dx": None if x.grad is None else x.grad.clone(), "step": step_of(fn), "ms": []}
    ref = variants["off"]
    for v in variants.values():  # the fake process group's collectives return garbage: no check there
        v["max_rel_err_vs_off"] = None if args.dry_run else {
            k: ((v[k].float() - ref[k].float()).abs().max() / ref[k].float().abs().max().clamp_min(1e-30)).item()
            for k in ("y", "dx") if ref[k] is not None}
    if not args.dry_run:
        order = list(variants.values())
        with torch._dynamo.config.patch(error_on_recompile=True), (
                torch.no_grad() if mode == "fwd" else contextlib.nullcontext()):
            for rep in range(args.reps):
                for v in order[rep % len(order):] + order[:rep % len(order)]:
                    x.grad = None
                    v["ms"].append(timed_ms(v["step"], (x, gy), args.warmup, args.iters))
    med = {k: statistics.median(v["ms"]) if v["ms"] else None for k, v in variants.items()}
    return {"case": spec, "kind": kind, "hidden": dim, "mode": mode, "median_ms": med,
            "speedup_vs_off": {k: med["off"] / m for k, m in med.items() if m and med["off"]},
            **{k: {f: v[f] for f in ("first_call_s", "graphs", "code_fused", "slice_cat_fused", "ms",
                                     "max_rel_err_vs_off")} for k, v in variants.items()}}


def table(results):
    rows = [f"{'case':22} {'variant':8} {'fused ag/rs (code)':>18} {'slice/cat':>9} {'ms':>9} {'vs off':>7}"]
    for r in results:
        for v in ("off", "stock", "patched"):
            c = r[v]["code_fused"]
            ms = r["median_ms"][v]
            rows.append(f"{r['case']:22} {v:8} {sum(d['ag'] for d in c):>9}/{sum(d['rs'] for d in c):<8} "
                        f"{r[v]['slice_cat_fused']:>9} {'-' if ms is None else f'{ms:9.3f}':>9} "
                        f"{r['speedup_vs_off'].get(v, float('nan')):7.3f}")
        would = [(g["stock"]["would_fuse"], g["patched"]["would_fuse"]) for g in r["off"]["graphs"]]
        rows.append(f"{'':22} graphs {[g['collectives'] for g in r['off']['graphs']]}; would fuse "
                    f"stock/patched (ag, rs) per graph {[((s['ag'], s['rs']), (p['ag'], p['rs'])) for s, p in would]}")
    return "\n".join(rows)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cases", default="layer:4096:fwd,layer:8192:fwd,handsp:4096:train",
                   help="comma-separated KIND:HIDDEN:MODE, KIND layer|handsp, MODE fwd|train")
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--seq", type=int, default=2048)
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--iters", type=int, default=10)
    p.add_argument("--budget-s", type=float, default=150.0, help="skip a case once time so far + the last case's would pass this")
    p.add_argument("--out", default=os.environ.get("OUT") or ".", help="directory for the JSON ($OUT when set)")
    p.add_argument("--dry-run", action="store_true", help="CPU, fake process group, small sizes, no timing")
    args = p.parse_args()
    start = time.perf_counter()

    if args.dry_run:
        from torch.testing._internal.distributed.fake_pg import FakeStore
        dist.init_process_group("fake", rank=0, world_size=2, store=FakeStore())
        device, dtype = "cpu", torch.float32
        args.cases = ",".join(dict.fromkeys(f"{c.split(':')[0]}:256:{c.split(':')[2]}"
                                            for c in args.cases.split(",")))
        args.batch, args.seq = 2, 64
    else:
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
        dist.init_process_group("nccl")
        device, dtype = "cuda", torch.bfloat16
    ws, rank = dist.get_world_size(), dist.get_rank()
    mesh = init_device_mesh(device, (ws,))
    if not args.dry_run:
        from torch.distributed._symmetric_memory import enable_symm_mem_for_group
        enable_symm_mem_for_group(mesh.get_group().group_name)
    log = (lambda *a: print(*a, flush=True)) if rank == 0 else (lambda *a: None)
    machine = {"host": socket.gethostname(), "torch": torch.__version__, "python": platform.python_version(),
               "world_size": ws, "dry_run": args.dry_run, "env": {k: os.environ.get(k) for k in MULTICAST_OFF}}
    if device == "cuda":
        machine.update(gpu=torch.cuda.get_device_name(), cuda=torch.version.cuda,
                       nccl=".".join(map(str, torch.cuda.nccl.version())))
    log(f"# {machine}")
    out = os.path.join(args.out, "micro_pipeline_tp_decoder_" + ("dryrun.json" if args.dry_run else "gpu.json"))
    results, skipped, last = [], [], 0.0
    for spec in args.cases.split(","):
        t = torch.tensor([time.perf_counter() - start], device=device)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)  # both ranks take the same decision
        if t.item() + last > args.budget_s:
            skipped.append(spec)
            log(f"[{t.item():6.1f}s] skipping {spec}: the last case took {last:.0f} s, past --budget-s")
            continue
        t0 = time.perf_counter()
        try:
            results.append(run_case(spec, args, mesh, ws, dtype, device))
        except Exception as e:  # noqa: BLE001 - recorded; the next case may still run
            results.append({"case": spec, "error": f"{type(e).__name__}: {e}"})
        last = time.perf_counter() - t0
        r = results[-1]
        log(f"[{time.perf_counter() - start:6.1f}s] {spec}: " + (r.get("error") or
            f"median ms {r['median_ms']}, fused in code "
            f"{ {v: r[v]['code_fused'] for v in ('stock', 'patched')} }, took {last:.0f} s"))
        if rank == 0 and args.out:
            os.makedirs(args.out, exist_ok=True)
            with open(out, "w") as f:
                json.dump({"machine": machine, "args": vars(args), "results": results, "skipped": skipped},
                          f, indent=1)
    log(f"# wrote {out}\n" + table([r for r in results if "error" not in r]))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
