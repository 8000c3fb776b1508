"""CPU demo of the seed PR's explicit ``cat_linear`` entry points, a fork-only patch (run by
`python -m tools demo` in a venv with the patch set installed).

The ``cat_linear`` fusion Inductor runs is the post-grad lowering (examples/cat_linear_fused.py).
These entry points are for callers that rewrite pre-grad graphs by hand:
``fuse_cat_linear_in_graph(graph) -> int`` rewrites ``linear(cat(parts, -1), W, b)`` into
per-piece linears on column views of ``W``, summed, and ``cat_linear_fused_pre_grad_pass`` does
the same as a pre-grad custom pass (assigned to ``config.pre_grad_custom_pass`` here).  The demo
shows the counter (``cat_linear_fused``), the rewritten graph without its cat, and that a site
under ``no_grad`` with producers that need gradients is declined (above autograd the rewrite
cannot prove it safe).  It does not time anything: benchmarks/README.md has the measurements.
"""

import torch
import torch.nn.functional as F
from torch._dynamo.utils import counters
from torch._inductor import config as inductor_config
from torch.testing import FileCheck


def site(a, b, w):
    return F.linear(torch.cat([torch.relu(a), b * 2.0], -1), w)


def frozen_cat(a, b, w):
    with torch.no_grad():
        x = torch.cat([torch.relu(a), b * 2.0], -1)
    return F.linear(x, w)


def main():
    try:
        from torch._inductor.fx_passes import cat_linear_fused
    except ImportError:
        raise SystemExit("the inductor-cat-linear-seed patch is not installed in this torch") from None
    torch.manual_seed(0)
    a, b, w = torch.randn(8, 32), torch.randn(8, 32), torch.randn(16, 64) / 8

    graphs = []

    def capture(gm, example_inputs):
        graphs.append(gm)
        return gm

    torch._dynamo.reset()
    torch.compile(site, backend=capture)(a, b, w)
    gm = graphs[0]
    rewritten = cat_linear_fused.fuse_cat_linear_in_graph(gm.graph)
    gm.recompile()
    print(f"fuse_cat_linear_in_graph: {rewritten} site(s) rewritten")
    print(gm.code)
    FileCheck().check_not("torch.cat").run(gm.code)
    (out,) = gm(a, b, w)
    torch.testing.assert_close(out, site(a, b, w))

    p = cat_linear_fused.cat_linear_fused_pre_grad_pass
    for fn, grad in ((site, False), (frozen_cat, True)):
        args = [t.clone().requires_grad_(grad) for t in (a, b, w)]
        counters.clear()
        torch._dynamo.reset()
        with inductor_config.patch(pre_grad_custom_pass=p):
            out = torch.compile(fn)(*args)
        torch.testing.assert_close(out, fn(a, b, w), atol=1e-4, rtol=1e-4)
        print(f"{fn.__name__} (inputs need grad: {grad}): cat_linear_fused = "
              f"{counters['inductor']['cat_linear_fused']}")
    print("\nmeasurements: benchmarks/README.md (the seed's forms: results/history.md)")


if __name__ == "__main__":
    main()
