"""Demo: two "libraries" register post-grad passes; both run, in order, and the
FX graph cache still hits on the second compile.

Run in an environment with the patch set installed:
    python -m tools demo            (or: python examples/custom_pass_registry.py)
"""

import logging

import torch
from torch._dynamo.utils import counters
from torch._inductor import config
from torch._inductor.custom_graph_pass import CustomGraphPass, get_hash_for_files
from torch._inductor.custom_pass_registry import (
    list_custom_passes,
    register_custom_pass,
)
from torch._inductor.utils import fresh_cache


aten = torch.ops.aten


class FoldMulByTwo(CustomGraphPass):
    """ "Library A": x * 2 -> x + x (same numbers)."""

    def __call__(self, graph):
        for node in graph.find_nodes(op="call_function", target=aten.mul.Tensor):
            if node.args[1] == 2:
                node.target, node.args = aten.add.Tensor, (node.args[0], node.args[0])
                counters["demo"]["lib_a_fold_mul"] += 1

    def uuid(self):
        return get_hash_for_files((__file__,), "lib_a")


class CountNodes(CustomGraphPass):
    """ "Library B": counts call_function nodes (sees library A's result)."""

    def __call__(self, graph):
        counters["demo"]["lib_b_runs"] += 1
        counters["demo"]["lib_b_muls_seen"] += len(
            graph.find_nodes(op="call_function", target=aten.mul.Tensor)
        )

    def uuid(self):
        return get_hash_for_files((__file__,), "lib_b")


def f(x):
    return torch.sin(x) * 2 + 1


def compile_once(x):
    torch._dynamo.reset()
    counters.clear()
    out = torch.compile(f)(x)
    torch.testing.assert_close(out, f(x))
    return dict(counters["demo"]), {
        k: counters["inductor"][k]
        for k in ("fxgraph_cache_miss", "fxgraph_cache_hit", "fxgraph_cache_bypass")
    }


def main():
    logging.basicConfig(format="%(levelname)s %(name)s: %(message)s")
    x = torch.randn(64)
    with (
        fresh_cache(),
        config.patch(fx_graph_cache=True, fx_graph_remote_cache=False),
        torch._functorch.config.patch(enable_autograd_cache=False),
    ):
        a = register_custom_pass(
            "post_grad_custom_post_pass", FoldMulByTwo(), name="lib_a.fold_mul"
        )
        b = register_custom_pass(
            "post_grad_custom_post_pass", CountNodes(), name="lib_b.count"
        )
        try:
            for stage, infos in list_custom_passes().items():
                print(f"{stage}: " + ", ".join(f"{i.name} [{i.source}]" for i in infos))

            demo, cache = compile_once(x)
            print("first compile :", demo, cache)
            # both ran, A before B: B no longer sees the mul that A rewrote
            assert demo == {
                "lib_a_fold_mul": 1,
                "lib_b_runs": 1,
                "lib_b_muls_seen": 0,
            }, demo
            assert cache["fxgraph_cache_miss"] == 1, cache

            demo, cache = compile_once(x)
            print(
                "second compile:",
                demo or "(no pass ran: served from the FX graph cache)",
                cache,
            )
            assert cache["fxgraph_cache_hit"] == 1 and not demo, (demo, cache)

            print("adding a pass without uuid() (expect one warning, then bypass):")
            with register_custom_pass(
                "post_grad_custom_post_pass", lambda graph: None, name="lib_c.no_uuid"
            ):
                demo, cache = compile_once(x)
                print("third compile :", demo, cache)
                assert cache["fxgraph_cache_bypass"] >= 1 and demo["lib_b_runs"] == 1, (
                    cache
                )
        finally:
            a.remove()
            b.remove()
    print("ok: both libraries' passes ran in order; second compile was a cache hit")


if __name__ == "__main__":
    main()
