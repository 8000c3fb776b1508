# Owner(s): ["module: inductor"]
"""
Differential fuzzing of micro-pipeline TP's slice/cat finders.

Random slice/cat reassemblies are built around an all-gather (and in front of a
reduce-scatter) on the fake process group, for world sizes 2, 4 and 8: chunk
counts, orders, duplicates, gaps, overlaps, steps and uneven sizes, the cat
dim, trims, 2-D and 3-D tensors.  The graphs go through ``make_fx`` and the
post-grad clean-ups that run before ``micro_pipeline_tp_pass``, then through
``find_all_gather_patterns`` / ``find_reduce_scatter_patterns``.

Every match *through* a reassembly is a claim: the reassembled tensor equals
the collective's tensor along the claimed dim (``all_gather_single(shard,
gather_dim)``, or the input ``reduce_scatter_single(x, scatter_dim)``
expects).  The claim is checked numerically against simulated shards; a false
claim fails the test.  Generated canonical reassemblies that are *not* found
are counted and must be none.

The seed is fixed; INDUCTOR_FUZZ_LONG=1 runs 10x as many cases.
"""

import itertools
import os
import unittest

import torch
import torch.distributed as dist
from torch._inductor.test_case import run_tests, TestCase
from torch.testing._internal.common_utils import (
    instantiate_parametrized_tests,
    parametrize,
)


try:
    from hypothesis import given, HealthCheck, settings, strategies as st

    HAS_HYPOTHESIS = True
except ImportError:  # pragma: no cover
    HAS_HYPOTHESIS = False

HAS_DIST = dist.is_available()
if HAS_DIST:
    from torch._inductor.fx_passes.micro_pipeline_tp import (
        find_all_gather_patterns,
        find_reduce_scatter_patterns,
    )
    from torch.testing._internal.distributed.fake_pg import FakeStore

    # The collectives as funcol traces them, and make_fx + the post-grad
    # clean-ups, are the patch's main test file's (one copy).
    try:
        from .test_micro_pipeline_tp_slice_cat import (
            _all_gather,
            _make_post_grad_fx,
            _reduce_scatter,
        )
    except ImportError:
        from test_micro_pipeline_tp_slice_cat import (  # type: ignore[no-redef]
            _all_gather,
            _make_post_grad_fx,
            _reduce_scatter,
        )


HAS_MATCHER = HAS_DIST and HAS_HYPOTHESIS
LONG = os.environ.get("INDUCTOR_FUZZ_LONG", "0") == "1"
EXAMPLES = 25 * (10 if LONG else 1)

aten = torch.ops.aten


# name -> slice bounds builder for chunk i of ws chunks of a dim of size n:
# how the fuzzer perturbs the canonical [i * c, (i + 1) * c).
PERTURBATIONS = ("canonical", "swap", "duplicate", "gap", "overlap", "step", "uneven")


def _slices(n, ws, kind, count):
    """``count`` (start, end, step) triples for a dim of size ``n``."""
    c = n // ws
    canon = [(i * c, (i + 1) * c, 1) for i in range(ws)]
    if kind == "canonical":
        return canon
    if kind == "swap":
        out = list(canon)
        out[0], out[-1] = out[-1], out[0]
        return out
    if kind == "duplicate":
        return [canon[0]] * count
    if kind == "gap":
        return [(s, max(s + 1, e - 1), 1) for s, e, _ in canon]
    if kind == "overlap":
        return [(max(0, s - 1), e, 1) for s, e, _ in canon]
    if kind == "step":
        return [(s, e, 2) for s, e, _ in canon]
    # uneven: count chunks of unequal widths that still cover the dim
    cuts = sorted(
        {
            0,
            n,
            *[max(1, min(n - 1, (i * n) // count + (i % 2))) for i in range(1, count)],
        }
    )
    return [(a, b, 1) for a, b in itertools.pairwise(cuts)]


def _apply(y, dim, bounds):
    return [y[(slice(None),) * dim + (slice(s, e, st),)] for s, e, st in bounds]


if HAS_MATCHER:

    @st.composite
    def reassemblies(draw):
        ndim = draw(st.sampled_from([2, 3]))
        # canonical forms weighted up, so that claims are made and checked
        kind = draw(st.sampled_from(("canonical",) * 3 + PERTURBATIONS))
        count = draw(st.integers(1, 9))
        cat_dim = draw(st.integers(-ndim, ndim - 1))
        trim = draw(st.sampled_from([None, "full", "partial"]))
        reshape = draw(st.booleans())
        return ndim, kind, count, cat_dim, trim, reshape

    # Fixed seed, no example database: CI runs the same cases every time.
    FUZZ_SETTINGS = settings(
        max_examples=EXAMPLES,
        derandomize=True,
        database=None,
        deadline=None,
        # each example traces a graph with make_fx
        suppress_health_check=[HealthCheck.too_slow],
    )


def _canonical_all_gather(y, ws, gather_dim):
    return torch.cat(torch.chunk(y, ws, 0), dim=gather_dim)


def _canonical_rs_input(y, ws, scatter_dim):
    return torch.cat(torch.chunk(y, ws, scatter_dim), dim=0)


@unittest.skipUnless(HAS_MATCHER, "needs torch.distributed and hypothesis")
@instantiate_parametrized_tests
class MicroPipelineTPSliceCatFuzzTest(TestCase):
    def _init_pg(self, ws):
        dist.init_process_group(
            backend="fake", world_size=ws, rank=0, store=FakeStore()
        )
        self.addCleanup(dist.destroy_process_group)
        return dist.group.WORLD.group_name

    def _form(self, ws, ndim, kind, count, cat_dim, trim, source_dim):
        """The reassembly as a function of the sliced tensor ``y``; None when
        the generated bounds do not make a valid cat."""

        def form(y, untrimmed=False):
            n = y.shape[source_dim]
            bounds = _slices(
                n, ws, kind, count if kind in ("duplicate", "uneven") else ws
            )
            a = torch.cat(_apply(y, source_dim, bounds), dim=cat_dim)
            if trim is not None and not untrimmed:
                d = cat_dim % a.ndim
                end = a.shape[d] if trim == "full" else a.shape[d] - 1
                a = a.narrow(d, 0, end)
            return a

        return form

    @parametrize("ws", [2, 4, 8])
    def test_all_gather_claims_hold(self, ws):
        group_name = self._init_pg(ws)
        stats = {"cases": 0, "claims": 0, "canonical": 0, "missed": 0}

        @FUZZ_SETTINGS
        @given(reassemblies(), st.sampled_from([0, 0, 1]))
        def check(case, source_dim):
            ndim, kind, count, cat_dim, trim, reshape = case
            shard_shape = (2, 4, 3)[:ndim] if ndim == 3 else (2, 6)
            shard = torch.randn(shard_shape)
            y_full = torch.randn(ws * shard_shape[0], *shard_shape[1:])
            # The all-gather stacks ranks on dim 0: slicing another dim is a
            # look-alike that must never be claimed.
            form = self._form(ws, ndim, kind, count, cat_dim, trim, source_dim)
            try:
                a_ref = form(y_full)
                cat_ref = form(y_full, untrimmed=True)
            except RuntimeError:
                return  # e.g. cat of mismatched shapes: nothing to trace
            stats["cases"] += 1

            def f(x):
                a = form(_all_gather(x, 0, group_name))
                return a.flatten(0, -2) if reshape else a * 1.0

            gm = _make_post_grad_fx(f, shard)
            through = [
                m
                for m in find_all_gather_patterns(gm.graph)
                if m.res_node.target in (aten.cat.default, aten.slice.Tensor)
            ]
            canonicals = {
                d: _canonical_all_gather(y_full, ws, d) for d in range(y_full.ndim)
            }
            is_canonical = (
                any(
                    a_ref.shape == c.shape and torch.equal(a_ref, c)
                    for c in canonicals.values()
                )
                and kind == "canonical"
                and source_dim == 0
            )
            stats["canonical"] += is_canonical
            for m in through:
                stats["claims"] += 1
                claimed = canonicals[m.gather_dim]
                # The claim is about the match's result node: the trim, or the
                # cat inside it (then the trim stays and reads the fused result).
                got = cat_ref if m.res_node.target is aten.cat.default else a_ref
                self.assertTrue(
                    got.shape == claimed.shape and torch.equal(got, claimed),
                    f"false claim: {case} matched as gather_dim={m.gather_dim}",
                )
            if is_canonical and trim != "partial" and not through:
                stats["missed"] += 1

        check()
        self.assertEqual(stats["missed"], 0, stats)
        self.assertGreater(stats["claims"], 0, stats)

    @parametrize("ws", [2, 4, 8])
    def test_reduce_scatter_claims_hold(self, ws):
        group_name = self._init_pg(ws)
        stats = {"cases": 0, "claims": 0, "canonical": 0, "missed": 0}

        @FUZZ_SETTINGS
        @given(reassemblies(), st.integers(0, 2))
        def check(case, source_dim):
            ndim, kind, count, _, _, _ = case
            source_dim %= ndim
            a_shape = (3, 2 * ws, 4)[: ndim - 1] + (4,) if ndim == 3 else (2 * ws, 4)
            n = 2 * ws
            a = torch.randn(a_shape)
            b = torch.randn(4, n)
            y_full = a @ b
            # The reduce-scatter input is always cat(..., dim=0).
            form = self._form(ws, ndim, kind, count, 0, None, source_dim=source_dim)
            try:
                z_ref = form(y_full)
                if z_ref.shape[0] % ws:
                    return
            except RuntimeError:
                return
            stats["cases"] += 1

            def f(a, b):
                return _reduce_scatter(form(a @ b), "sum", 0, group_name)

            gm = _make_post_grad_fx(f, a, b)
            through = [
                m
                for m in find_reduce_scatter_patterns(gm.graph)
                if any(
                    n.target is aten.slice.Tensor
                    for n in (m.match if isinstance(m.match, list) else m.match.nodes)
                )
            ]
            canonicals = {
                d: _canonical_rs_input(y_full, ws, d)
                for d in range(y_full.ndim)
                if y_full.shape[d] % ws == 0
            }
            is_canonical = kind == "canonical" and any(
                z_ref.shape == c.shape and torch.equal(z_ref, c)
                for c in canonicals.values()
            )
            stats["canonical"] += is_canonical
            for m in through:
                stats["claims"] += 1
                claimed = canonicals.get(m.scatter_dim)
                self.assertTrue(
                    claimed is not None
                    and z_ref.shape == claimed.shape
                    and torch.equal(z_ref, claimed),
                    f"false claim: {case}, source_dim={source_dim} matched as "
                    f"scatter_dim={m.scatter_dim}",
                )
            if is_canonical and not through:
                stats["missed"] += 1

        check()
        self.assertEqual(stats["missed"], 0, stats)
        self.assertGreater(stats["claims"], 0, stats)


if __name__ == "__main__":
    run_tests()
