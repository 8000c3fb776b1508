"""Demo: Q, K and V as three ``torchao::da8w4_linear_cpu`` calls on one
quantized activation become one call on concatenated weights plus a split,
with ``config.cpp.enable_concat_linear`` and freezing.  The pass is a client of
the custom pass registry: ``register_da8w4_concat_linear_cpu_pass()`` adds it at
the post-grad stage next to any other pass (what torchao's quantization flow
would call), and it acts only with that config.

Uses our CPU kernel (csrc/, loaded through csrc/da8w4_linear_cpu.py) when it
is built, at Llama-3.1-8B QKV shapes; otherwise the pure-PyTorch reference
from the pass's test at small shapes. Shows what fired (counters, the
generated call and split); timings live in benchmarks/README.md.

Run in an environment with the patch set installed:
    python -m tools demo            (or: python examples/da8w4_concat_linear.py)
"""

import importlib.util
import os

import torch
from torch._dynamo.utils import counters
from torch._inductor import config
from torch._inductor.utils import run_and_get_code


REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OP_STR = "torch.ops.torchao.da8w4_linear_cpu.default("


def _load_path(name, rel):
    spec = importlib.util.spec_from_file_location(name, os.path.join(REPO, rel))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _ops():
    """(backend description, test module with the model and quantizer)."""
    loader = _load_path("da8w4_linear_cpu", "csrc/da8w4_linear_cpu.py")
    loaded = loader.load()
    test = _load_path("test_da8w4_concat_linear", "test/inductor/test_da8w4_concat_linear.py")
    backend = test._ensure_ops()
    if loaded:
        return f"csrc kernel ({loader.best_isa()})", test, True
    return f"{backend} (kernel not built: cmake -G Ninja -S . -B build)", test, False


def _compile(mod, x, concat):
    torch._dynamo.reset()
    counters.clear()
    with config.patch({"freezing": True, "cpp.enable_concat_linear": concat}):
        fn = torch.compile(mod, dynamic=False)
        out, (code,) = run_and_get_code(fn, x)
    return fn, out, code, dict(counters["inductor"])


def main():
    from torch._inductor.fx_passes.da8w4_concat_linear import (
        register_da8w4_concat_linear_cpu_pass,
    )

    register_da8w4_concat_linear_cpu_pass()
    backend, test, real = _ops()
    k, ns, m = (4096, [4096, 1024, 1024], 4) if real else (256, [128, 64, 64], 4)
    print(f"da8w4_linear_cpu: {backend}; {torch.get_num_threads()} threads")
    print(f"QKV: K={k} -> N={ns}, M={m}, int8 dynamic activation, int4 weight (group 32)")
    torch.manual_seed(0)
    mod = test.Da8w4Linears(k, ns, bias=False).eval()
    x = torch.randn(m, k)
    with torch.no_grad():
        stock, stock_out, stock_code, _ = _compile(mod, x, concat=False)
        fused, fused_out, code, ctrs = _compile(mod, x, concat=True)
        print(
            "counters:",
            {key: v for key, v in ctrs.items() if key.startswith("da8w4_concat_linear")},
        )
        print(
            f"op calls in generated code: stock {stock_code.count(OP_STR)}, "
            f"fused {code.count(OP_STR)}"
        )
        lines = code.splitlines()
        start = next(i for i, line in enumerate(lines) if OP_STR in line)
        print("generated code (fused call, then the split outputs):")
        shown = [
            line.strip()
            for line in lines[start:]
            if not line.strip().startswith(("del ", "assert_", "#"))
        ]
        for line in shown[:7]:
            print("   ", line[:200])
        same = all(torch.equal(a, b) for a, b in zip(stock_out, fused_out))
        print(f"outputs bit-identical to the unfused compile: {same}")
    print(
        "speed: not measured here (one run on shared cores says nothing); paired, repeated "
        "measurements: benchmarks/README.md, section da8w4 concat-linear"
    )


if __name__ == "__main__":
    main()
