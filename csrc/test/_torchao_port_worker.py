"""Worker of test_torchao_port.py, run in a process of its own: builds the kernel PR's file
(torchao_port_plugin), loads it alone, and compares each case with the spec's reference bit for
bit. ``--scalar-only`` builds a copy whose x86-64 ISA sections are compiled out (as on another
architecture), so that the scalar loop runs on any CPU. Prints one JSON object: the build's
flags and, per case, whether it matched."""

import json
import os
import sys

import torch

import torchao_port_plugin
from _torchao_pr import scratch_dir
from _da8w4_reference import make_activation, make_weight, reference_linear, SHAPES, unpack_weight


OUT_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
# Beyond the shared shapes: every row remainder of the register kernel's row blocks, the
# AMX path's 32-row m tiles (one partial) and several N blocks per work item.
LARGER = (((150,), 384, 160, 64), ((40,), 256, 256, 128), ((64,), 512, 96, 32))
ISA_GATE = "#if defined(__x86_64__) && \\"


def scalar_only_copy(build: str) -> str:
    """The port with its ISA sections' gate never true: what a build for another
    architecture compiles."""
    text = torchao_port_plugin.PORT.read_text()
    if text.count(ISA_GATE) != 1:
        raise RuntimeError(f"{torchao_port_plugin.PORT}: expected one {ISA_GATE!r} line")
    path = os.path.join(build, "da8w4_linear_scalar_only.cpp")
    with open(path, "w") as f:
        f.write(text.replace(ISA_GATE, "#if defined(DA8W4_NEVER_DEFINED) && \\"))
    return path


def main() -> None:
    scalar_only = "--scalar-only" in sys.argv
    build = os.environ.get("TORCHAO_PORT_BUILD_DIR") or str(scratch_dir("torchao-port-"))
    no_isa = os.environ.get("TORCHAO_PORT_ISA_FLAGS") == "0"
    build = os.path.join(build, ("scalar_only" if scalar_only else "as_is") + ("_no_isa_flags" if no_isa else ""))
    os.makedirs(build, exist_ok=True)
    source = scalar_only_copy(build) if scalar_only else None
    torchao_port_plugin.build_and_load(build, source)
    op = torch.ops.torchao.da8w4_linear_cpu.default
    results = {"flags": torchao_port_plugin.torchao_cpu_flags(), "cases": {}}
    gen = torch.Generator().manual_seed(3)
    w, sw, zw = make_weight(64, 256, 64, gen)
    packed = torch.ops.torchao.da8w4_linear_prepack_cpu(w, sw, zw)
    results["cases"]["prepack layout"] = bool(torch.equal(unpack_weight(packed[0]), w))
    for symmetric in (False, True):
        for out_dtype in OUT_DTYPES:
            gen = torch.Generator().manual_seed(1234)
            for i, (m_shape, k, n, group_size) in enumerate(SHAPES + LARGER):
                w, sw, zw = make_weight(n, k, group_size, gen)
                x, sa, za = make_activation(m_shape, k, symmetric, gen)
                pw, ps, pz, pc = torch.ops.torchao.da8w4_linear_prepack_cpu(w, sw, zw)
                for bias in (None, torch.randn(n, generator=gen)):
                    want = reference_linear(x, sa, za, w, sw, zw, bias, out_dtype, symmetric)
                    got = op(x, sa, za, pw, ps, pz, pc, bias, out_dtype)
                    key = (f"symmetric={symmetric} {out_dtype} #{i} {m_shape}x{k}x{n} gs={group_size} "
                           f"bias={bias is not None}")
                    results["cases"][key] = got.shape == want.shape and bool(torch.equal(got, want))
    print(json.dumps(results))


if __name__ == "__main__":
    main()
