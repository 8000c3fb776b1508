# Owner(s): ["module: inductor"]
"""Micro-pipeline TP through slice/cat reassembly of collectives.

Graph-level chunking can rebuild an all-gather (or a reduce-scatter's input)
with ``slice`` + ``cat`` instead of ``split`` + ``cat``.  Such a form may only
be fused into ``symm_mem.fused_all_gather_matmul`` /
``fused_matmul_reduce_scatter`` when it provably equals the canonical layout.

CPU tests: graphs from ``make_fx`` on the fake process group; the finders and
the pass are called directly.  The ``fuse_*`` functions return early without
NCCL, so rewrite tests patch ``is_nccl_available`` and use symmetric memory's
``_test_mode``; nothing is executed there, only graphs are compared.  They
need no GPU, so they stay here, where CI runs them on CPU; the end-to-end test
on two GPUs (NCCL, symmetric memory, numerics against eager) is
``MicroPipelineTPSliceCatMultiGPUTest`` in upstream's
test/distributed/tensor/parallel/test_micro_pipeline_tp.py.
"""

import unittest
from unittest import mock

import torch
import torch.distributed as dist
from torch._dynamo.utils import counters
from torch._inductor import config as inductor_config
from torch._inductor.test_case import run_tests, TestCase
from torch.testing import FileCheck
from torch.testing._internal.common_utils import (
    instantiate_parametrized_tests,
    parametrize,
)


HAS_DIST = dist.is_available()

if HAS_DIST:
    from torch._inductor.decomposition import decompositions
    from torch._inductor.fx_passes.micro_pipeline_tp import (
        find_all_gather_patterns,
        find_reduce_scatter_patterns,
        micro_pipeline_tp_pass,
    )
    from torch._inductor.fx_passes.post_grad import remove_noop_ops, view_to_reshape
    from torch.distributed._symmetric_memory import _test_mode
    from torch.fx.experimental.proxy_tensor import make_fx
    from torch.testing._internal.distributed.fake_pg import FakeStore


# Whether a rejected form reaches the range proof (counted as rejected) or is
# not a slice/cat reassembly at all for the matcher's structure checks.
PROOF = True
STRUCTURAL = False
FEATURE = "micro_pipeline_tp_slice_cat"
REJECTED = f"{FEATURE}_rejected"

aten = torch.ops.aten


def _all_gather(x, gather_dim, group_name):
    """What ``funcol.all_gather_single`` traces to, in the functional c10d ops:
    ranks stacked on dim 0, then split and concatenated along ``gather_dim``."""
    c10d = torch.ops._c10d_functional
    ws = dist.get_world_size()
    y = c10d.wait_tensor(c10d.all_gather_into_tensor(x, ws, group_name))
    return y if gather_dim == 0 else torch.cat(torch.chunk(y, ws, 0), dim=gather_dim)


def _reduce_scatter(x, reduce_op, scatter_dim, group_name):
    """What ``funcol.reduce_scatter_single`` traces to, in the functional c10d ops."""
    c10d = torch.ops._c10d_functional
    ws = dist.get_world_size()
    if scatter_dim != 0:
        x = torch.cat(torch.chunk(x, ws, scatter_dim), dim=0)
    return c10d.wait_tensor(c10d.reduce_scatter_tensor(x, reduce_op, ws, group_name))


def _make_post_grad_fx(f, *inps, tracing_mode="fake", remove_noops=True):
    gm = make_fx(f, decompositions, tracing_mode=tracing_mode)(*inps)
    if remove_noops:
        remove_noop_ops(gm.graph)
    view_to_reshape(gm)
    return gm


def _chunks(y, ws, dim=0):
    """Rank i's chunk of ``y`` along ``dim``, as graph-level chunking writes it."""
    n = y.shape[dim] // ws
    return [y.narrow(dim, i * n, n) for i in range(ws)]


# ---------------------------------------------------------------------------
# Reassembly forms. ``y`` is the all-gather result (ranks stacked on dim 0) or
# the matmul output; ``y2`` a second, different tensor of the same shape.
# ---------------------------------------------------------------------------

# name -> (form, gather_dim of the equivalent all_gather_single)
AG_PROVEN = {
    "canonical_cat_dim1": (lambda y, y2, ws: torch.cat(_chunks(y, ws), dim=1), 1),
    "cat_dim0": (lambda y, y2, ws: torch.cat(_chunks(y, ws), dim=0), 0),
    "cat_neg_dim": (lambda y, y2, ws: torch.cat(_chunks(y, ws), dim=-1), 1),
    "index_to_end": (
        lambda y, y2, ws: torch.cat(
            [y[: y.shape[0] // ws], y[y.shape[0] // ws :]], dim=1
        ),
        1,
    ),
    "negative_start": (
        lambda y, y2, ws: torch.cat(
            [y[-y.shape[0] : -y.shape[0] // ws], y[-y.shape[0] // ws :]], dim=1
        ),
        1,
    ),
}

# name -> (form, PROOF or STRUCTURAL, whether the form computes something else)
AG_REJECTED = {
    "swapped": (
        lambda y, y2, ws: torch.cat(_chunks(y, ws)[::-1], dim=1),
        PROOF,
        True,
    ),
    "duplicated": (
        # separate slice nodes: a cat of one node repeated decomposes to expand
        lambda y, y2, ws: torch.cat([_chunks(y, ws)[0] for _ in range(ws)], dim=1),
        PROOF,
        True,
    ),
    "partial": (
        lambda y, y2, ws: torch.cat(
            [
                y.narrow(0, i * (y.shape[0] // ws), y.shape[0] // ws - 1)
                for i in range(ws)
            ],
            dim=1,
        ),
        PROOF,
        True,
    ),
    "overlapping": (
        lambda y, y2, ws: torch.cat(
            [y.narrow(0, 0, y.shape[0] // ws), y.narrow(0, 1, y.shape[0] // ws)],
            dim=1,
        ),
        PROOF,
        True,
    ),
    "strided": (
        lambda y, y2, ws: torch.cat([y[0::2], y[1::2]], dim=1),
        PROOF,
        True,
    ),
    "two_sources": (
        lambda y, y2, ws: torch.cat([_chunks(y, ws)[0], _chunks(y2, ws)[1]], dim=1),
        STRUCTURAL,
        True,
    ),
    "wrong_chunk_count": (
        lambda y, y2, ws: torch.cat(_chunks(y, 2 * ws), dim=1),
        PROOF,
        True,
    ),
    # cat along the chunk dim, so this one is the identity: rejected because
    # unequal chunks are never a rank's chunk, not because it miscompiles.
    "unequal_sizes": (
        lambda y, y2, ws: torch.cat([y[:3], y[3:]], dim=0),
        PROOF,
        False,
    ),
    "sliced_on_dim1": (
        lambda y, y2, ws: torch.cat(_chunks(y, ws, dim=1), dim=0),
        STRUCTURAL,
        True,
    ),
}

# name -> (form, scatter_dim of the equivalent reduce_scatter_single)
RS_PROVEN = {
    "canonical_narrow_dim1": (lambda y, y2, ws: torch.cat(_chunks(y, ws, 1), dim=0), 1),
    "narrow_dim0": (lambda y, y2, ws: torch.cat(_chunks(y, ws, 0), dim=0), 0),
    "narrow_neg_dim": (lambda y, y2, ws: torch.cat(_chunks(y, ws, -1), dim=0), 1),
}

RS_REJECTED = {
    "swapped": (
        lambda y, y2, ws: torch.cat(_chunks(y, ws, 1)[::-1], dim=0),
        PROOF,
        True,
    ),
    "duplicated": (
        lambda y, y2, ws: torch.cat([_chunks(y, ws, 1)[0] for _ in range(ws)], dim=0),
        PROOF,
        True,
    ),
    "partial": (
        lambda y, y2, ws: torch.cat(
            [
                y.narrow(1, i * (y.shape[1] // ws), y.shape[1] // ws - 1)
                for i in range(ws)
            ],
            dim=0,
        ),
        PROOF,
        True,
    ),
    "strided": (
        lambda y, y2, ws: torch.cat([y[:, 0::2], y[:, 1::2]], dim=0),
        PROOF,
        True,
    ),
    "two_sources": (
        lambda y, y2, ws: torch.cat(
            [_chunks(y, ws, 1)[0], _chunks(y2, ws, 1)[1]], dim=0
        ),
        STRUCTURAL,
        True,
    ),
    "wrong_chunk_count": (
        lambda y, y2, ws: torch.cat(_chunks(y, 2 * ws, 1), dim=0),
        PROOF,
        True,
    ),
    "unequal_sizes": (
        lambda y, y2, ws: torch.cat([y[:3], y[3:]], dim=0),
        PROOF,
        False,
    ),
    "cat_dim1": (
        lambda y, y2, ws: torch.cat(_chunks(y, ws, 0), dim=1),
        STRUCTURAL,
        True,
    ),
}


def _canonical_all_gather(y, ws, gather_dim):
    return torch.cat(y.chunk(ws, dim=0), dim=gather_dim)


def _canonical_reduce_scatter_input(y, ws, scatter_dim):
    # reduce_scatter_tensor hands rank r chunk r of its input along dim 0, so
    # two inputs are equivalent iff these stacked per-rank chunks are equal.
    return torch.cat(y.chunk(ws, dim=scatter_dim), dim=0)


def _same(a, b):
    return a.shape == b.shape and torch.equal(a, b)


class _FakePGTestCase(TestCase):
    world_size = 2

    def setUp(self):
        super().setUp()
        counters.clear()
        dist.init_process_group(
            backend="fake", world_size=self.world_size, rank=0, store=FakeStore()
        )
        self.group_name = dist.group.WORLD.group_name

    def tearDown(self):
        dist.destroy_process_group()
        super().tearDown()

    def _all_gather_graph(self, form, shard_shape=(4, 8), ndim_b=None, **kw):
        group_name = self.group_name
        ws = self.world_size

        def f(x, w):
            y = _all_gather(x, 0, group_name)
            y2 = _all_gather(x + 1, 0, group_name)
            a = form(y, y2, ws)
            return a, a.flatten(0, -2) @ w

        x = torch.randn(shard_shape)
        y = torch.randn(ws * shard_shape[0], *shard_shape[1:])
        a = form(y, y + 1, ws)
        w = torch.randn(a.shape[-1], 16)
        return _make_post_grad_fx(f, x, w, **kw)

    def _reduce_scatter_graph(self, form, a_shape=(8, 4), n=8, **kw):
        group_name = self.group_name
        ws = self.world_size

        def f(a, b, b2):
            y = a @ b
            y2 = a @ b2
            return _reduce_scatter(form(y, y2, ws), "sum", 0, group_name)

        return _make_post_grad_fx(
            f,
            torch.randn(a_shape),
            torch.randn(a_shape[-1], n),
            torch.randn(a_shape[-1], n),
            **kw,
        )

    def _fuse(self, gm):
        with (
            mock.patch.object(dist, "is_nccl_available", return_value=True),
            _test_mode(),
        ):
            micro_pipeline_tp_pass(gm.graph)
        gm.graph.lint()
        gm.recompile()


@unittest.skipIf(not HAS_DIST, "requires torch.distributed")
@instantiate_parametrized_tests
class MicroPipelineTPSliceCatFindTest(_FakePGTestCase):
    """The finders on make_fx graphs: what is matched, and why not."""

    def _slice_cat_match(self, matches):
        return [
            m
            for m in matches
            if m.res_node.target in (aten.cat.default, aten.slice.Tensor)
        ]

    def _assert_rejected_for(self, proof, form, miscompiles, canonical):
        """Declined by the range proof (counted) or by the structure checks
        (not counted), and the rejection matters: fusing ``form`` as the
        canonical layout would compute something else (unless ``miscompiles``
        is False)."""
        self.assertEqual(counters["inductor"][REJECTED], 1 if proof else 0)
        y = torch.arange(8 * 8).reshape(8, 8)
        a = form(y, y + 1000, 2)
        canonicals = [canonical(y, 2, d) for d in range(y.ndim)]
        self.assertEqual(not any(_same(a, c) for c in canonicals), miscompiles)

    @parametrize("name", list(AG_PROVEN))
    def test_all_gather_slice_cat_proven(self, name):
        form, gather_dim = AG_PROVEN[name]
        gm = self._all_gather_graph(form)
        matches = self._slice_cat_match(find_all_gather_patterns(gm.graph))
        self.assertEqual(len(matches), 1)
        (m,) = matches
        self.assertEqual(m.gather_dim, gather_dim)
        self.assertIs(m.res_node.target, aten.cat.default)
        self.assertEqual(m.shard_node.op, "placeholder")
        self.assertEqual(m.group_name, self.group_name)
        # Counters count fusions: finding alone counts nothing.
        self.assertEqual(counters["inductor"][FEATURE], 0)
        self.assertEqual(counters["inductor"][REJECTED], 0)
        # Equal to the canonical all-gather, numerically.
        y = torch.arange(2 * 4 * 8).reshape(8, 8)
        self.assertTrue(
            _same(form(y, None, 2), _canonical_all_gather(y, 2, gather_dim))
        )

    @parametrize("name", list(AG_REJECTED))
    def test_all_gather_slice_cat_rejected(self, name):
        form, proof, miscompiles = AG_REJECTED[name]
        gm = self._all_gather_graph(form)
        matches = find_all_gather_patterns(gm.graph)
        self.assertEqual(self._slice_cat_match(matches), [])
        self.assertEqual(counters["inductor"][FEATURE], 0)
        self._assert_rejected_for(proof, form, miscompiles, _canonical_all_gather)

    @parametrize("name", list(RS_PROVEN))
    def test_reduce_scatter_slice_cat_proven(self, name):
        form, scatter_dim = RS_PROVEN[name]
        gm = self._reduce_scatter_graph(form)
        matches = find_reduce_scatter_patterns(gm.graph)
        self.assertEqual(len(matches), 1)
        (m,) = matches
        self.assertEqual(m.scatter_dim, scatter_dim)
        self.assertIs(m.input_node.target, aten.mm.default)
        self.assertEqual(m.reduce_op, "sum")
        self.assertEqual(counters["inductor"][REJECTED], 0)
        y = torch.arange(8 * 8).reshape(8, 8)
        self.assertTrue(
            _same(form(y, None, 2), _canonical_reduce_scatter_input(y, 2, scatter_dim))
        )

    @parametrize("name", list(RS_REJECTED))
    def test_reduce_scatter_slice_cat_rejected(self, name):
        form, proof, miscompiles = RS_REJECTED[name]
        gm = self._reduce_scatter_graph(form)
        matches = find_reduce_scatter_patterns(gm.graph)
        # Nothing that reduce-scatters a matmul output through the slices.
        self.assertEqual(
            [m for m in matches if m.input_node.target is aten.mm.default], []
        )
        self.assertEqual(counters["inductor"][FEATURE], 0)
        self._assert_rejected_for(
            proof, form, miscompiles, _canonical_reduce_scatter_input
        )

    def test_all_gather_slice_cat_3d(self):
        # Sequence parallel: [b, s/ws, h] gathered on the sequence dim.
        gm = self._all_gather_graph(
            AG_PROVEN["canonical_cat_dim1"][0], shard_shape=(2, 4, 8)
        )
        (m,) = self._slice_cat_match(find_all_gather_patterns(gm.graph))
        self.assertEqual(m.gather_dim, 1)
        self.assertEqual(tuple(m.res_node.meta["val"].shape), (2, 8, 8))

    def test_reduce_scatter_slice_cat_3d(self):
        def form(dim):
            return lambda y, y2, ws: torch.cat(_chunks(y, ws, dim), dim=0)

        for dim in (1, 2):
            counters.clear()
            gm = self._reduce_scatter_graph(form(dim), a_shape=(2, 8, 4))
            (m,) = find_reduce_scatter_patterns(gm.graph)
            self.assertEqual(m.scatter_dim, dim)
            # reshape -> mm -> reshape: the slices read the reshaped output.
            self.assertIs(m.input_node.target, aten.reshape.default)

    def test_all_gather_slice_cat_world_size_4(self):
        dist.destroy_process_group()
        dist.init_process_group(backend="fake", world_size=4, rank=0, store=FakeStore())
        self.world_size = 4
        self.group_name = dist.group.WORLD.group_name
        gm = self._all_gather_graph(AG_PROVEN["canonical_cat_dim1"][0])
        (m,) = self._slice_cat_match(find_all_gather_patterns(gm.graph))
        self.assertEqual(m.gather_dim, 1)
        # Two of four chunks is the wrong count for this group.
        counters.clear()
        gm = self._all_gather_graph(lambda y, y2, ws: torch.cat(_chunks(y, 2), dim=1))
        self.assertEqual(self._slice_cat_match(find_all_gather_patterns(gm.graph)), [])

    def test_all_gather_slice_cat_symbolic(self):
        # Bounds are SymInt expressions; proven without guards, or rejected.
        gm = self._all_gather_graph(
            AG_PROVEN["canonical_cat_dim1"][0], tracing_mode="symbolic"
        )
        slices = gm.graph.find_nodes(op="call_function", target=aten.slice.Tensor)
        self.assertTrue(any(isinstance(s.args[3], torch.fx.Node) for s in slices))
        (m,) = self._slice_cat_match(find_all_gather_patterns(gm.graph))
        self.assertEqual(m.gather_dim, 1)

        gm = self._all_gather_graph(AG_REJECTED["swapped"][0], tracing_mode="symbolic")
        self.assertEqual(self._slice_cat_match(find_all_gather_patterns(gm.graph)), [])

    def test_reduce_scatter_slice_cat_symbolic(self):
        group_name = self.group_name

        def make(form, even):
            def f(a, b):
                # N = 2 * s when b is two halves: provably divisible by 2.
                y = a @ (torch.cat([b, b + 1], dim=1) if even else b)
                return _reduce_scatter(form(y, None, 2), "sum", 0, group_name)

            return _make_post_grad_fx(
                f, torch.randn(8, 4), torch.randn(4, 8), tracing_mode="symbolic"
            )

        def mm_matches(gm):
            return [
                m
                for m in find_reduce_scatter_patterns(gm.graph)
                if m.input_node.target is aten.mm.default
            ]

        (m,) = mm_matches(make(RS_PROVEN["canonical_narrow_dim1"][0], even=True))
        self.assertEqual(m.scatter_dim, 1)
        self.assertEqual(mm_matches(make(RS_REJECTED["swapped"][0], even=True)), [])
        # N = s: an odd N would drop its last column, so nothing is proven.
        counters.clear()
        self.assertEqual(
            mm_matches(make(RS_PROVEN["canonical_narrow_dim1"][0], even=False)), []
        )
        self.assertEqual(counters["inductor"][REJECTED], 1)

    def test_all_gather_slice_cat_unprovable_bound(self):
        # The split point comes from another input: it may equal the shard
        # size at run time, but nothing proves it, so no match and no guard.
        group_name = self.group_name

        def f(x, w, k):
            y = _all_gather(x, 0, group_name)
            n = k.shape[0]
            return torch.cat([y[:n], y[n : 2 * n]], dim=0) @ w

        # Without duck shaping k's size is its own symbol, unrelated to x's.
        with torch.fx.experimental._config.patch(use_duck_shape=False):
            gm = _make_post_grad_fx(
                f,
                torch.randn(4, 8),
                torch.randn(8, 16),
                torch.randn(4),
                tracing_mode="symbolic",
            )
        self.assertEqual(self._slice_cat_match(find_all_gather_patterns(gm.graph)), [])
        self.assertEqual(counters["inductor"][REJECTED], 1)

    def test_all_gather_slice_cat_chunk_used_elsewhere(self):
        # Upstream's finder contract: other users do not hide the match.  The
        # fuse step then keeps the all-gather alive for them.
        group_name = self.group_name

        def f(x, w):
            y = _all_gather(x, 0, group_name)
            chunks = _chunks(y, 2)
            return torch.cat(chunks, dim=1) @ w, chunks[0] * 2

        gm = _make_post_grad_fx(f, torch.randn(4, 1024), torch.randn(2048, 16))
        (m,) = self._slice_cat_match(find_all_gather_patterns(gm.graph))
        self.assertEqual(m.gather_dim, 1)
        self._fuse(gm)
        FileCheck().check("symm_mem.fused_all_gather_matmul").check(
            "all_gather_into_tensor"
        ).check("aten.mul").run(str(gm.graph))
        self.assertEqual(counters["inductor"][FEATURE], 1)

    def test_reduce_scatter_slice_cat_input_used_elsewhere(self):
        # Found (upstream's contract), and declined where upstream declines
        # it: the fuse step, since the fused op does not return the matmul.
        group_name = self.group_name

        def f(a, b):
            y = a @ b
            z = torch.cat([y.narrow(1, 0, 8), y.narrow(1, 8, 8)], dim=0)
            return _reduce_scatter(z, "sum", 0, group_name), y.sum()

        gm = _make_post_grad_fx(f, torch.randn(64, 32), torch.randn(32, 16))
        (m,) = [
            m
            for m in find_reduce_scatter_patterns(gm.graph)
            if m.input_node.target is aten.mm.default
        ]
        self.assertEqual(m.scatter_dim, 1)
        before = str(gm.graph)
        self._fuse(gm)
        self.assertEqual(str(gm.graph), before)
        self.assertEqual(counters["inductor"][FEATURE], 0)

    def test_all_gather_trimmed_cat(self):
        # The trimmed-cat form (a slice of the reassembled cat, kept when
        # no-op slices are preserved): fusable only when the trim keeps it all.
        group_name = self.group_name

        def make(end):
            def f(x, w):
                y = _all_gather(x, 0, group_name)
                a = torch.cat(_chunks(y, 2), dim=0)[:end]
                return a @ w

            return _make_post_grad_fx(
                f, torch.randn(4, 8), torch.randn(8, 16), remove_noops=False
            )

        gm = make(8)
        (m,) = self._slice_cat_match(find_all_gather_patterns(gm.graph))
        self.assertIs(m.res_node.target, aten.slice.Tensor)
        self.assertEqual(m.gather_dim, 0)
        # A full-width trim still fuses (upstream's ..._slice_cat_trim case).
        self._fuse(gm)
        FileCheck().check("symm_mem.fused_all_gather_matmul").check_not("aten.cat").run(
            str(gm.graph)
        )
        self.assertEqual(counters["inductor"][FEATURE], 1)

        # A real trim (uneven shards): the fused op would return all 8 rows.
        # Upstream's finder matches it (test_find_all_gather_patterns'
        # all_gathers[5]); declining it is a deliberate change.
        counters.clear()
        gm = make(6)
        matches = find_all_gather_patterns(gm.graph)
        self.assertFalse(any(m.res_node.target is aten.slice.Tensor for m in matches))
        self.assertEqual(counters["inductor"][REJECTED], 1)

    def test_canonical_forms_unaffected(self):
        # funcol's own split/cat forms still go through upstream's patterns,
        # without touching the reassembly matcher.
        group_name = self.group_name

        def f(x, a, b):
            ag = _all_gather(x, 1, group_name)
            rs = _reduce_scatter(a @ b, "sum", 1, group_name)
            return ag, rs

        gm = _make_post_grad_fx(
            f, torch.randn(4, 8), torch.randn(8, 4), torch.randn(4, 8)
        )
        (ag,) = find_all_gather_patterns(gm.graph)
        (rs,) = find_reduce_scatter_patterns(gm.graph)
        self.assertEqual((ag.gather_dim, rs.scatter_dim), (1, 1))
        self.assertEqual(counters["inductor"][FEATURE], 0)
        self.assertEqual(counters["inductor"][REJECTED], 0)


@unittest.skipIf(not HAS_DIST, "requires torch.distributed")
class MicroPipelineTPSliceCatRewriteTest(_FakePGTestCase):
    """The pass on make_fx graphs: the rewritten graph, or no change."""

    def _assert_fused_graph(self, gm, fused_call, gone):
        FileCheck().check(fused_call).run(str(gm.graph))
        for op in gone:
            FileCheck().check_not(op).run(str(gm.graph))
        self.assertEqual(counters["inductor"][FEATURE], 1)

    def test_fuse_all_gather_matmul_slice_cat(self):
        # The canonical form gathered along K (K per rank >= 1024).
        group_name = self.group_name

        def f(x, w):
            y = _all_gather(x, 0, group_name)
            return torch.cat([y.narrow(0, 0, 64), y.narrow(0, 64, 64)], dim=1) @ w

        gm = _make_post_grad_fx(f, torch.randn(64, 1024), torch.randn(2048, 16))
        self._fuse(gm)
        self._assert_fused_graph(
            gm,
            "fused_all_gather_matmul.default](args = (%x_1, [%w_1], 1, 0), "
            "kwargs = {return_A: False})",
            ("all_gather_into_tensor", "aten.slice", "aten.cat", "aten.mm"),
        )

    def test_fuse_all_gather_matmul_slice_cat_3d(self):
        # Sequence parallel: gathered on dim 1, reshape -> mm -> reshape.
        group_name = self.group_name

        def f(x, w):
            y = _all_gather(x, 0, group_name)
            a = torch.cat(_chunks(y, 2), dim=1)
            return a @ w

        gm = _make_post_grad_fx(f, torch.randn(2, 4, 8), torch.randn(8, 16))
        self._fuse(gm)
        self._assert_fused_graph(
            gm,
            "fused_all_gather_matmul.default](args = (%inductor_force_stride_order_default, [%w_1], 1, 0)",
            ("all_gather_into_tensor", "aten.slice", "aten.cat", "aten.mm"),
        )

    def test_fuse_matmul_reduce_scatter_slice_cat(self):
        # The canonical form mm -> cat(narrow(1, ...), dim=0) -> reduce_scatter.
        group_name = self.group_name

        def f(a, b):
            y = a @ b
            z = torch.cat([y.narrow(1, 0, 8), y.narrow(1, 8, 8)], dim=0)
            return _reduce_scatter(z, "sum", 0, group_name)

        gm = _make_post_grad_fx(f, torch.randn(64, 32), torch.randn(32, 16))
        self._fuse(gm)
        FileCheck().check(
            "inductor_force_stride_order.default](args = (%a_1, (1, 64))"
        ).run(str(gm.graph))
        self._assert_fused_graph(
            gm,
            "fused_matmul_reduce_scatter.default]"
            "(args = (%inductor_force_stride_order_default, %b_1, sum, 1, 0)",
            ("reduce_scatter_tensor", "aten.slice", "aten.cat", "aten.mm"),
        )

    def test_fuse_matmul_reduce_scatter_slice_cat_3d(self):
        group_name = self.group_name

        def f(a, b):
            y = a @ b
            return _reduce_scatter(
                torch.cat(_chunks(y, 2, 1), dim=0), "avg", 0, group_name
            )

        gm = _make_post_grad_fx(f, torch.randn(2, 8, 4), torch.randn(4, 16))
        self._fuse(gm)
        self._assert_fused_graph(
            gm,
            "fused_matmul_reduce_scatter.default](args = (%inductor_force_stride_order_default, %b_1, avg, 1, 0)",
            ("reduce_scatter_tensor", "aten.slice", "aten.cat", "aten.mm"),
        )

    def test_unproven_forms_left_unfused(self):
        # Without the range proof each of these fuses as if it were canonical.
        group_name = self.group_name

        def all_gather_mm(form):
            def f(x, w):
                y = _all_gather(x, 0, group_name)
                y2 = _all_gather(x + 1, 0, group_name)
                a = form(y, y2, 2)
                return a @ w[: a.shape[1]]

            return f

        def mm_reduce_scatter(form):
            def f(a, b, b2):
                return _reduce_scatter(form(a @ b, a @ b2, 2), "sum", 0, group_name)

            return f

        names = ("swapped", "duplicated", "partial", "strided", "two_sources")
        cases = [
            (
                f"ag_{name}",
                all_gather_mm(AG_REJECTED[name][0]),
                (torch.randn(64, 1024), torch.randn(2048, 16)),
            )
            for name in names
        ] + [
            (
                f"rs_{name}",
                mm_reduce_scatter(RS_REJECTED[name][0]),
                (torch.randn(64, 32), torch.randn(32, 16), torch.randn(32, 16)),
            )
            for name in names
        ]
        for name, fn, args in cases:
            with self.subTest(name):
                gm = _make_post_grad_fx(fn, *args)
                before = str(gm.graph)
                self._fuse(gm)
                self.assertEqual(str(gm.graph), before)
                FileCheck().check_not("symm_mem").run(str(gm.graph))
                self.assertEqual(counters["inductor"][FEATURE], 0)


class _StopCompile(Exception):
    pass


@unittest.skipIf(not HAS_DIST, "requires torch.distributed")
class MicroPipelineTPSliceCatCompileTest(_FakePGTestCase):
    """torch.compile on CPU up to the post-grad graph: the slice/cat forms reach
    micro_pipeline_tp unchanged through dynamo, AOTAutograd and the earlier
    post-grad passes, and come out fused (or not).  Compilation stops right
    after, in a custom post-grad pass, since CPU has no symm_mem kernels."""

    def _post_grad_graph(self, fn, *args):
        graphs = []

        def snapshot(graph):
            graphs.append(str(graph))
            raise _StopCompile

        torch._dynamo.reset()
        with (
            mock.patch.object(dist, "is_nccl_available", return_value=True),
            _test_mode(),
            inductor_config.patch(
                _micro_pipeline_tp=True,
                fx_graph_cache=False,
                post_grad_custom_post_pass=snapshot,
            ),
        ):
            try:
                torch.compile(fn, fullgraph=True)(*args)
            except Exception as e:  # the sentinel, however the backend wraps it
                err = e
            else:
                self.fail("compilation was not stopped after post-grad")
        chain = []
        while err is not None and err not in chain:
            chain.append(err)
            err = err.__cause__ or err.__context__
        self.assertTrue(any(isinstance(e, _StopCompile) for e in chain), chain)
        self.assertEqual(len(graphs), 1)
        return graphs[0]

    def _all_gather_mm(self, form):
        group_name = self.group_name

        def fn(x, w):
            return form(_all_gather(x, 0, group_name), None, 2) @ w

        return fn

    def _mm_reduce_scatter(self, form):
        group_name = self.group_name

        def fn(a, b):
            return _reduce_scatter(form(a @ b, None, 2), "sum", 0, group_name)

        return fn

    def _assert_compiles_fused(self, fn, args, fused_op, collective):
        counters.clear()
        graph = self._post_grad_graph(fn, *args)
        FileCheck().check(fused_op).run(graph)
        FileCheck().check_not(collective).run(graph)
        self.assertEqual(counters["inductor"][FEATURE], 1)

    def test_compile_all_gather_matmul_slice_cat(self):
        for name, shard, w in (
            ("canonical_gather_k", (64, 1024), (2048, 32)),
            ("seq_3d", (2, 8, 16), (16, 32)),
        ):
            with self.subTest(name):
                self._assert_compiles_fused(
                    self._all_gather_mm(AG_PROVEN["canonical_cat_dim1"][0]),
                    (torch.randn(shard), torch.randn(w)),
                    "symm_mem.fused_all_gather_matmul",
                    "all_gather_into_tensor",
                )

    def test_compile_matmul_reduce_scatter_slice_cat(self):
        for name, a in (("canonical_narrow_dim1", (64, 32)), ("seq_3d", (2, 8, 32))):
            with self.subTest(name):
                self._assert_compiles_fused(
                    self._mm_reduce_scatter(
                        lambda y, y2, ws: torch.cat(_chunks(y, ws, 1), dim=0)
                    ),
                    (torch.randn(a), torch.randn(32, 16)),
                    "symm_mem.fused_matmul_reduce_scatter",
                    "reduce_scatter_tensor",
                )

    def test_compile_unproven_forms_left_unfused(self):
        for name in ("swapped", "strided"):
            with self.subTest(f"ag_{name}"):
                fn = self._all_gather_mm(AG_REJECTED[name][0])
                graph = self._post_grad_graph(
                    fn, torch.randn(64, 1024), torch.randn(2048, 32)
                )
                FileCheck().check("all_gather_into_tensor").check_not("symm_mem").run(
                    graph
                )
            with self.subTest(f"rs_{name}"):
                fn = self._mm_reduce_scatter(RS_REJECTED[name][0])
                graph = self._post_grad_graph(
                    fn, torch.randn(64, 32), torch.randn(32, 16)
                )
                FileCheck().check_not("symm_mem").run(graph)
                FileCheck().check("reduce_scatter_tensor").run(graph)


if __name__ == "__main__":
    run_tests()
