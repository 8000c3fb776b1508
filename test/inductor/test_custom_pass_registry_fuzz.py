# Owner(s): ["module: inductor"]
"""
Model-based fuzzing of the custom pass registry.

Generated sequences of register (with before=/after=), remove and
assignment to the config field are applied to the registry and to a small
reference model of the run order.
After every step the registry must agree with the model:

* ``list_custom_passes`` and ``get_custom_passes`` (what the stage's hook
  iterates) list the assigned passes first, then the registered ones;
* every before/after constraint between registered passes holds, passes
  that no constraint touches keep registration order, and a registration
  raises (changing nothing) exactly when its name is taken or its
  constraints close a cycle;
* the cache: each stage's part of the key is its passes' (name, uuid()) in
  run order, and a pass without uuid() makes the compile bypass the cache.

Real compiles are in test_custom_pass_registry.py.  The seed is fixed;
INDUCTOR_FUZZ_LONG=1 runs 10x as many cases.
"""

import contextlib
import dataclasses
import os
import unittest

from torch._inductor import config as inductor_config, custom_pass_registry as cpr
from torch._inductor.custom_graph_pass import CustomGraphPass
from torch._inductor.test_case import run_tests, TestCase


try:
    from hypothesis import given, HealthCheck, settings, strategies as st

    HAS_HYPOTHESIS = True
except ImportError:  # pragma: no cover
    HAS_HYPOTHESIS = False

LONG = os.environ.get("INDUCTOR_FUZZ_LONG", "0") == "1"
SCALE = 10 if LONG else 1

STAGES = ("post_grad_custom_pre_pass", "post_grad_custom_post_pass")
NAMES = ("a", "b", "c", "d", "e")


class TaggedPass(CustomGraphPass):
    def __init__(self, tag, log, uuid):
        self.tag = tag
        self.log = log
        self._uuid = uuid

    def __call__(self, graph):
        self.log.append(self.tag)

    def uuid(self):
        return self._uuid


class PlainPass:
    """A pass without uuid(): bypasses the FX graph cache."""

    def __init__(self, tag, log):
        self.tag = tag
        self.log = log

    def __call__(self, graph):
        self.log.append(self.tag)


@dataclasses.dataclass
class Entry:
    name: str
    tag: str
    before: tuple
    after: tuple
    seq: int


class Model:
    """What the registry should do, written from its documented contract."""

    def __init__(self):
        self.entries = {s: [] for s in STAGES}
        self.assigned = {s: [] for s in STAGES}  # tags
        self.seq = 0

    def can_register(self, stage, name, before, after):
        entries = self.entries[stage]
        if any(e.name == name for e in entries):
            return False
        return not _has_cycle([*entries, Entry(name, "", before, after, -1)])

    def register(self, stage, name, tag, before, after):
        self.seq += 1
        self.entries[stage].append(Entry(name, tag, before, after, self.seq))
        return self.seq

    def remove(self, stage, seq):
        self.entries[stage] = [e for e in self.entries[stage] if e.seq != seq]


def _edges(entries):
    names = {e.name for e in entries}
    edges = set()
    for e in entries:
        for other in e.before:
            if other in names and other != e.name:
                edges.add((e.name, other))
        for other in e.after:
            if other in names and other != e.name:
                edges.add((other, e.name))
    return edges


def _has_cycle(entries):
    edges = _edges(entries)
    nodes = {e.name for e in entries}
    while nodes:  # peel nodes without predecessors
        free = {n for n in nodes if not any(b == n and a in nodes for a, b in edges)}
        if not free:
            return True
        nodes -= free
    return False


if HAS_HYPOTHESIS:
    names = st.sampled_from(NAMES)
    constraint = st.one_of(st.none(), names, st.lists(names, max_size=2))
    op = st.one_of(
        st.tuples(
            st.just("register"),
            st.sampled_from(STAGES),
            names,
            constraint,
            constraint,
            st.integers(0, 2),  # uuid version; 0: a pass without uuid()
        ),
        st.tuples(st.just("remove"), st.integers(0, 9)),
        st.tuples(
            st.just("assign"),
            st.sampled_from(STAGES),
            st.lists(st.integers(0, 3), max_size=2),  # assigned pass ids
            st.booleans(),  # a list, or one callable
        ),
    )
    ops = st.lists(op, min_size=1, max_size=12)

    def fuzz_settings(examples):
        return settings(
            max_examples=examples,
            derandomize=True,
            deadline=None,
            database=None,
            suppress_health_check=[HealthCheck.too_slow],
        )
else:

    def given(*a, **k):
        return lambda f: unittest.skip("needs hypothesis")(f)

    def fuzz_settings(examples):
        return lambda f: f

    ops = None


class CustomPassRegistryFuzzTest(TestCase):
    def setUp(self):
        super().setUp()
        self.assertEqual(cpr.list_custom_passes(), {})

    def run_ops(self, program):
        """Apply ``program`` to the registry and the model, checking after
        every step."""
        model, log, handles = Model(), [], []
        passes = {}

        def make_pass(tag, version):
            if version == 0:
                return PlainPass(tag, log)
            return TaggedPass(tag, log, ("fuzz", tag, version))

        with contextlib.ExitStack() as cleanup:
            saved = {s: getattr(inductor_config, s) for s in STAGES}
            cleanup.callback(
                lambda: [setattr(inductor_config, s, v) for s, v in saved.items()]
            )
            cleanup.callback(lambda: [h.remove() for h, _ in handles])
            for step, o in enumerate(program):
                kind = o[0]
                if kind == "register":
                    _, stage, name, before, after, version = o
                    tag = f"{stage[-8:]}:{name}:{step}"
                    p = passes[tag] = make_pass(tag, version)
                    expect_ok = model.can_register(stage, name, _t(before), _t(after))
                    try:
                        h = cpr.register_custom_pass(
                            stage, p, name=name, before=before, after=after
                        )
                    except ValueError:
                        self.assertFalse(expect_ok, f"step {step}: {o}")
                    else:
                        self.assertTrue(expect_ok, f"step {step}: {o} should raise")
                        seq = model.register(stage, name, tag, _t(before), _t(after))
                        handles.append((h, (stage, seq)))
                elif kind == "remove":
                    if handles:
                        h, (stage, seq) = handles.pop(o[1] % len(handles))
                        h.remove()
                        h.remove()  # idempotent
                        self.assertFalse(h.active)
                        model.remove(stage, seq)
                else:
                    _, stage, ids, as_list = o
                    tags = [f"assigned{i}" for i in ids]
                    fns = [passes.setdefault(t, make_pass(t, 1)) for t in tags]
                    if as_list:
                        value = fns
                    else:
                        value = fns[0] if fns else None
                        tags = tags[:1]
                    setattr(inductor_config, stage, value)
                    model.assigned[stage] = tags
                self.check_state(model, log, step)

    def check_state(self, model, log, step):
        listing = cpr.list_custom_passes()
        for stage in STAGES:
            infos = listing.get(stage, [])
            assigned = model.assigned[stage]
            n = len(assigned)
            self.assertEqual([i.source for i in infos[:n]], ["config"] * n)
            self.assertEqual([i.custom_pass.tag for i in infos[:n]], assigned)
            registered = infos[n:]
            self.assertEqual({i.source for i in registered} - {"registry"}, set())
            order = [i.name for i in registered]
            entries = model.entries[stage]
            self.assertEqual(
                sorted(order), sorted(e.name for e in entries), f"step {step}"
            )
            by_name = {e.name: e for e in entries}
            self.assertEqual(
                [i.custom_pass.tag for i in registered], [by_name[n].tag for n in order]
            )
            pos = {name: i for i, name in enumerate(order)}
            for a, b in _edges(entries):
                self.assertLess(
                    pos[a], pos[b], f"step {step}: {a} before {b} in {order}"
                )
            touched = {x for edge in _edges(entries) for x in edge}
            free = [e.name for e in entries if e.name not in touched]
            self.assertEqual([x for x in order if x in free], free, f"step {step}")
            # what the hook iterates is the listing, in order
            del log[:]
            for p in cpr.get_custom_passes(stage):
                p(None)
            self.assertEqual(log, [i.custom_pass.tag for i in infos])
            del log[:]
        # cache: bypass exactly when some pass has no uuid(); the key's part
        # is each stage's passes, as run, by name and uuid()
        expected = {
            stage: tuple(
                (
                    i.name,
                    i.custom_pass.uuid() if hasattr(i.custom_pass, "uuid") else None,
                )
                for i in listing.get(stage, [])
            )
            for stage in STAGES
        }
        no_uuid = any(u is None for items in expected.values() for _, u in items)
        reason = cpr.custom_pass_cache_bypass_reason(include_pre_grad=True)
        self.assertEqual(reason is not None, no_uuid, f"step {step}: {reason}")
        details = dict(cpr.custom_pass_cache_details(include_pre_grad=True))
        for stage in STAGES:
            self.assertEqual(details[stage], expected[stage], f"step {step}")

    @fuzz_settings(150 * SCALE)
    @given(program=ops)
    def test_custom_pass_registry_fuzz_model(self, program):
        self.run_ops(program)


def _t(value):
    if value is None:
        return ()
    if isinstance(value, str):
        return (value,)
    return tuple(value)


if __name__ == "__main__":
    run_tests()
