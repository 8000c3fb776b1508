# Owner(s): ["module: inductor"]
import pickle
from unittest import mock

import torch
import torch._dynamo
from torch._dynamo.utils import counters
from torch._inductor import config as inductor_config, custom_pass_registry as cpr
from torch._inductor.custom_graph_pass import (
    CustomGraphPass,
    CustomSchedulerPass,
    get_hash_for_files,
)
from torch._inductor.test_case import run_tests, TestCase
from torch._inductor.utils import run_and_get_code
from torch.testing import FileCheck
from torch.testing._internal.common_utils import (
    instantiate_parametrized_tests,
    parametrize,
)


aten = torch.ops.aten
REGISTRY_LOG = "torch._inductor.custom_pass_registry"


class RecordingPass(CustomGraphPass):
    """Appends its tag to ``log`` each time it runs; changes nothing."""

    def __init__(self, tag, log, uuid="v1"):
        self.tag = tag
        self.log = log
        self._uuid = uuid

    def __call__(self, graph):
        self.log.append(self.tag)

    def uuid(self):
        return (get_hash_for_files((__file__,)), self.tag, self._uuid)


class SinToCos(CustomGraphPass):
    """Rewrites aten.sin into aten.cos: makes a rewrite visible in the output."""

    def __init__(self, log):
        self.log = log

    def __call__(self, graph):
        self.log.append("sin_to_cos")
        for node in graph.nodes:
            if node.target is aten.sin.default:
                node.target = aten.cos.default

    def uuid(self):
        return (get_hash_for_files((__file__,)), "sin_to_cos")


class RecordingSchedulerPass(CustomSchedulerPass):
    def __init__(self, tag, log):
        self.tag = tag
        self.log = log

    def __call__(self, nodes):
        self.log.append(self.tag)
        return nodes

    def uuid(self):
        return (get_hash_for_files((__file__,)), self.tag)


def fn(x):
    return torch.sin(x) * 2 + 1


@instantiate_parametrized_tests
class CustomPassRegistryTest(TestCase):
    def setUp(self):
        super().setUp()
        # A fresh registry: no registrations, no memory of earlier warnings, so
        # a test sees its own warnings however often it runs in one process.
        cpr._reset_for_tests()
        self.addCleanup(cpr._reset_for_tests)
        counters.clear()

    def register(self, *args, **kwargs):
        handle = cpr.register_custom_pass(*args, **kwargs)
        self.addCleanup(handle.remove)
        return handle

    def compile_and_run(self, f, *inputs, dynamic=False):
        torch._dynamo.reset()
        return torch.compile(f, dynamic=dynamic)(*inputs)

    # -- the motivating scenario -------------------------------------------

    def test_custom_pass_registry_two_libraries_both_run(self):
        # Library A rewrites sin into cos, library B only records; with
        # assignment the second would have replaced the first.
        log = []
        self.register(
            "post_grad_custom_post_pass", SinToCos(log), name="lib_a.sin_to_cos"
        )
        self.register(
            "post_grad_custom_post_pass",
            RecordingPass("lib_b", log),
            name="lib_b.record",
        )
        x = torch.randn(16)
        out, (code,) = run_and_get_code(torch.compile(fn), x)
        self.assertEqual(log, ["sin_to_cos", "lib_b"])
        self.assertEqual(out, torch.cos(x) * 2 + 1)
        # the kernel keeps the node's name; its body computes cos, not sin
        FileCheck().check_regex(r"cos\(").run(code)
        FileCheck().check_not("sin(").run(code)

    @parametrize("dynamic", [False, True])
    def test_custom_pass_registry_forward_backward_order(self, dynamic):
        log = []
        self.register(
            "post_grad_custom_post_pass", RecordingPass("a", log), name="lib_a.record"
        )
        self.register(
            "post_grad_custom_post_pass", RecordingPass("b", log), name="lib_b.record"
        )
        x = torch.randn(8, 4, requires_grad=True)
        x_ref = x.detach().clone().requires_grad_(True)
        out = self.compile_and_run(fn, x, dynamic=dynamic)
        out.sum().backward()
        ref = fn(x_ref)
        ref.sum().backward()
        self.assertEqual(out, ref)
        self.assertEqual(x.grad, x_ref.grad)
        # forward graph then backward graph, each running a before b
        self.assertEqual(log, ["a", "b", "a", "b"])

    def test_custom_pass_registry_every_stage_runs(self):
        log = []
        stages = list(cpr.CustomPassStage)
        for stage in stages:
            if stage.value.endswith("fusion_custom_pass"):
                p = RecordingSchedulerPass(stage.value, log)
            else:
                p = RecordingPass(stage.value, log)
            self.register(stage, p, name=f"test.{stage.value}")
        x = torch.randn(8, requires_grad=True)
        self.compile_and_run(fn, x).sum().backward()
        for stage in stages:
            self.assertIn(stage.value, log)
        self.assertLess(
            log.index("joint_custom_pre_pass"), log.index("joint_custom_post_pass")
        )
        self.assertLess(
            log.index("post_grad_custom_pre_pass"),
            log.index("post_grad_custom_post_pass"),
        )

    # -- removal, scope, ordering ------------------------------------------

    def test_custom_pass_registry_remove(self):
        log = []
        handle = cpr.register_custom_pass(
            "post_grad_custom_post_pass", SinToCos(log), name="lib_a.sin_to_cos"
        )
        self.assertTrue(handle.active)
        handle.remove()
        handle.remove()  # idempotent
        self.assertFalse(handle.active)
        x = torch.randn(16)
        self.assertEqual(self.compile_and_run(fn, x), fn(x))
        self.assertEqual(log, [])
        self.assertEqual(cpr.list_custom_passes(), {})

    def test_custom_pass_registry_scope_exit(self):
        log = []
        x = torch.randn(16)
        with cpr.register_custom_pass(
            "post_grad_custom_post_pass", SinToCos(log), name="scoped.sin_to_cos"
        ):
            self.assertEqual(self.compile_and_run(fn, x), torch.cos(x) * 2 + 1)
            self.assertIn("post_grad_custom_post_pass", cpr.list_custom_passes())
        self.assertEqual(cpr.list_custom_passes(), {})
        self.assertEqual(self.compile_and_run(fn, x), fn(x))
        self.assertEqual(log, ["sin_to_cos"])

        with self.assertRaises(RuntimeError):
            with cpr.register_custom_pass(
                "post_grad_custom_post_pass", SinToCos(log), name="scoped.sin_to_cos"
            ):
                raise RuntimeError("boom")
        self.assertEqual(cpr.list_custom_passes(), {})

    @parametrize(
        "constraints,expected",
        [
            ({}, ["a", "b", "c"]),
            ({"c": {"before": "a"}}, ["c", "a", "b"]),
            ({"a": {"after": "c"}}, ["b", "c", "a"]),
            ({"a": {"after": "b"}, "c": {"before": "b"}}, ["c", "b", "a"]),
            ({"a": {"after": ["b", "c"]}, "b": {"before": "c"}}, ["b", "c", "a"]),
            # a name that is not registered is ignored
            ({"b": {"before": "not_installed.pass"}}, ["a", "b", "c"]),
        ],
    )
    def test_custom_pass_registry_order_by_name(self, constraints, expected):
        log = []
        for tag in ["a", "b", "c"]:
            self.register(
                "post_grad_custom_pre_pass",
                RecordingPass(tag, log),
                name=tag,
                **constraints.get(tag, {}),
            )
        names = [i.name for i in cpr.list_custom_passes()["post_grad_custom_pre_pass"]]
        self.assertEqual(names, expected)
        # what the post-grad hook iterates (compiles in the tests above prove
        # the hooks run exactly this sequence)
        for p in cpr.get_custom_passes("post_grad_custom_pre_pass"):
            p(None)
        self.assertEqual(log, expected)

    def test_custom_pass_registry_rejects_cycles_duplicates_and_bad_stages(self):
        log = []
        self.register(
            "post_grad_custom_pre_pass", RecordingPass("a", log), name="a", before="b"
        )
        with self.assertRaisesRegex(ValueError, "cycle"):
            cpr.register_custom_pass(
                "post_grad_custom_pre_pass",
                RecordingPass("b", log),
                name="b",
                before="a",
            )
        with self.assertRaisesRegex(ValueError, "already registered"):
            cpr.register_custom_pass(
                "post_grad_custom_pre_pass", RecordingPass("a", log), name="a"
            )
        with self.assertRaisesRegex(ValueError, "unknown custom pass stage"):
            cpr.register_custom_pass(
                "post_grad_pass_that_does_not_exist", RecordingPass("x", log)
            )
        with self.assertRaises(TypeError):
            cpr.register_custom_pass("post_grad_custom_pre_pass", object())
        with self.assertRaisesRegex(TypeError, "is a class; register an instance"):
            cpr.register_custom_pass("post_grad_custom_pre_pass", RecordingPass)
        bad = [
            ("name", {"name": ""}),
            ("name", {"name": 123}),
            ("name", {"name": ["x"]}),
            ("before", {"before": 5}),
            ("before", {"before": {"a": 1}}),
            ("after", {"after": [None]}),
            ("after", {"after": ["a", ""]}),
        ]
        for arg, kwargs in bad:
            with self.assertRaisesRegex(TypeError, f"{arg}=", msg=kwargs):
                cpr.register_custom_pass(
                    "post_grad_custom_pre_pass", RecordingPass("x", log), **kwargs
                )
        names = [i.name for i in cpr.list_custom_passes()["post_grad_custom_pre_pass"]]
        self.assertEqual(names, ["a"])

    # -- backward compatibility with assignment ----------------------------

    @parametrize("as_list", [False, True])
    def test_custom_pass_registry_assignment_alongside_registration(self, as_list):
        log = []
        assigned = RecordingPass("assigned", log)
        self.register(
            "post_grad_custom_post_pass",
            RecordingPass("registered", log),
            name="lib.reg",
        )
        value = [assigned] if as_list else assigned
        with inductor_config.patch(post_grad_custom_post_pass=value):
            # assigning while passes are registered is how users migrate: it is
            # logged at DEBUG, never warned about
            with (
                self.assertNoLogs(REGISTRY_LOG, level="WARNING"),
                self.assertLogs(REGISTRY_LOG, level="DEBUG") as logs,
            ):
                self.compile_and_run(fn, torch.randn(4))
        self.assertEqual(log, ["assigned", "registered"])
        composed = [r for r in logs.output if "is assigned" in r]
        self.assertTrue(composed, logs.output)
        self.assertTrue(all(r.startswith("DEBUG:") for r in composed), composed)
        self.assertIn("post_grad_custom_post_pass", composed[0])
        self.assertIn("lib.reg", composed[0])
        # leaving config.patch restores the field and keeps the registration
        self.assertEqual(
            [
                (i.name, i.source)
                for i in cpr.list_custom_passes()["post_grad_custom_post_pass"]
            ],
            [("lib.reg", "registry")],
        )

    def test_custom_pass_registry_reset_forgets_warnings(self):
        # A pass without uuid() is warned about once per stage, and again after
        # a reset (what lets the tests run twice in one process).
        def check(expect_warning):
            logs = (
                self.assertLogs(REGISTRY_LOG, level="WARNING")
                if expect_warning
                else self.assertNoLogs(REGISTRY_LOG, level="WARNING")
            )
            with logs as got:
                reason = cpr.custom_pass_cache_bypass_reason(include_pre_grad=True)
            self.assertEqual(
                reason, "custom pass lib.plain at joint_custom_pre_pass has no uuid()"
            )
            if expect_warning:
                self.assertEqual(len(got.output), 1, got.output)

        def register():
            return cpr.register_custom_pass(
                "joint_custom_pre_pass", lambda graph: None, name="lib.plain"
            )

        with register():
            check(expect_warning=True)
            check(expect_warning=False)  # remembered
        cpr._reset_for_tests()
        self.assertEqual(cpr.list_custom_passes(), {})
        with register():
            check(expect_warning=True)

    @torch._functorch.config.patch(enable_autograd_cache=False)
    @inductor_config.patch(fx_graph_cache=True, fx_graph_remote_cache=False)
    def test_custom_pass_registry_assigned_plain_callable_not_warned(self):
        # Assigning a plain function bypassed the cache silently before this
        # registry: it still bypasses, logged at INFO, not warned about.
        log = []

        def plain(graph):
            log.append("plain")

        with (
            inductor_config.patch(post_grad_custom_post_pass=plain),
            self.assertNoLogs(REGISTRY_LOG, level="WARNING"),
            self.assertLogs(REGISTRY_LOG, level="INFO") as logs,
        ):
            counters.clear()
            self.compile_and_run(fn, torch.randn(8))
        self.assertEqual(log, ["plain"])
        self.assertGreater(counters["inductor"]["fxgraph_cache_bypass"], 0)
        missing = [r for r in logs.output if "has no uuid()" in r]
        self.assertEqual(len(missing), 1, logs.output)
        self.assertTrue(missing[0].startswith("INFO:"), missing)

    def test_custom_pass_registry_assignment_alone_is_unchanged(self):
        # No registrations: an assigned pass runs as upstream runs it, no warning.
        log = []
        with inductor_config.patch(
            post_grad_custom_post_pass=RecordingPass("only", log)
        ):
            with self.assertNoLogs(REGISTRY_LOG, level="WARNING"):
                self.compile_and_run(fn, torch.randn(4))
        self.assertEqual(log, ["only"])

    def test_custom_pass_registry_not_in_config(self):
        # Registrations live outside config: saving config with an unpicklable
        # pass registered works, and neither the saved nor the copied config
        # holds a registered pass.
        registered = [
            RecordingPass("r", []),
            lambda graph: None,  # unpicklable: save_config would raise on it
        ]
        self.register("post_grad_custom_post_pass", registered[0], name="lib.r")
        self.register(
            "joint_custom_pre_pass", registered[1], name="lib.lambda_without_uuid"
        )
        saved = pickle.loads(inductor_config.save_config())
        copied = inductor_config.get_config_copy()
        pickle.dumps(inductor_config.save_config_portable())
        for values in (saved, copied):
            for value in values.values():
                held = value if isinstance(value, (list, tuple)) else (value,)
                self.assertFalse(any(v is p for v in held for p in registered))
        self.assertIsNone(inductor_config.post_grad_custom_post_pass)
        self.assertIsNone(inductor_config.joint_custom_pre_pass)

    # -- FX graph cache ----------------------------------------------------

    def _cached_compile(self, x):
        counters.clear()
        self.compile_and_run(fn, x)
        return counters["inductor"]["fxgraph_cache_hit"], counters["inductor"][
            "fxgraph_cache_miss"
        ]

    @torch._functorch.config.patch(enable_autograd_cache=False)
    @inductor_config.patch(fx_graph_cache=True, fx_graph_remote_cache=False)
    def test_custom_pass_registry_cache_hit_and_miss(self):
        x = torch.randn(8)
        log = []
        a = RecordingPass("a", log)
        b = RecordingPass("b", log)
        handle_a = cpr.register_custom_pass("post_grad_custom_post_pass", a, name="a")
        handle_b = cpr.register_custom_pass("post_grad_custom_post_pass", b, name="b")
        self.assertEqual(self._cached_compile(x), (0, 1))
        self.assertEqual(log, ["a", "b"])
        log.clear()
        # same passes, same uuids: hit, and the passes do not run again
        self.assertEqual(self._cached_compile(x), (1, 0))
        self.assertEqual(log, [])
        # a new uuid for one pass: miss
        b._uuid = "v2"
        self.assertEqual(self._cached_compile(x), (0, 1))
        self.assertEqual(log, ["a", "b"])
        # another order of the same passes: miss
        handle_a.remove()
        handle_a = cpr.register_custom_pass("post_grad_custom_post_pass", a, name="a")
        log.clear()
        self.assertEqual(self._cached_compile(x), (0, 1))
        self.assertEqual(log, ["b", "a"])
        # one pass fewer: miss; back to the first set and order: hit
        handle_a.remove()
        self.assertEqual(self._cached_compile(x), (0, 1))
        handle_b.remove()
        handle_a = cpr.register_custom_pass("post_grad_custom_post_pass", a, name="a")
        handle_b = cpr.register_custom_pass("post_grad_custom_post_pass", b, name="b")
        self.addCleanup(handle_a.remove)
        self.addCleanup(handle_b.remove)
        self.assertEqual(self._cached_compile(x), (1, 0))

    @torch._functorch.config.patch(enable_autograd_cache=False)
    @inductor_config.patch(fx_graph_cache=True, fx_graph_remote_cache=False)
    def test_custom_pass_registry_assigned_and_registered_share_the_key(self):
        # The key covers assigned passes too: changing an assigned uuid misses.
        x = torch.randn(8)
        log = []
        assigned = RecordingPass("assigned", log)
        self.register("post_grad_custom_post_pass", RecordingPass("r", log), name="r")
        with inductor_config.patch(post_grad_custom_post_pass=assigned):
            self.assertEqual(self._cached_compile(x), (0, 1))
            self.assertEqual(self._cached_compile(x), (1, 0))
            assigned._uuid = "v2"
            self.assertEqual(self._cached_compile(x), (0, 1))

    @torch._functorch.config.patch(enable_autograd_cache=False)
    @inductor_config.patch(fx_graph_cache=True, fx_graph_remote_cache=False)
    def test_custom_pass_registry_pre_grad_pass_never_stale(self):
        # Whether pre-grad passes run before the cache lookup (their output is
        # what gets hashed) or after it (their uuid() is in the key), an
        # unchanged pass hits and a new uuid() is never served a stale entry:
        # the pass runs on that compile.
        x = torch.randn(8)
        log = []
        pre = RecordingPass("pre", log)
        self.register("pre_grad_custom_pass", pre, name="lib.pre")
        self.assertEqual(self._cached_compile(x), (0, 1))
        self.assertEqual(log, ["pre"])
        self.assertEqual(self._cached_compile(x), (1, 0))
        pre._uuid = "v2"
        log.clear()
        self._cached_compile(x)
        self.assertEqual(log, ["pre"])

    @torch._functorch.config.patch(enable_autograd_cache=False)
    @inductor_config.patch(fx_graph_cache=True, fx_graph_remote_cache=False)
    def test_custom_pass_registry_pass_without_uuid_bypasses_cache(self):
        x = torch.randn(8)
        log = []

        def plain_function_pass(graph):
            log.append("plain")

        self.register("post_grad_custom_post_pass", RecordingPass("a", log), name="a")
        self.register(
            "post_grad_custom_post_pass",
            plain_function_pass,
            name="test.plain_without_uuid",
        )
        with self.assertLogs(REGISTRY_LOG, level="WARNING") as logs:
            for _ in range(2):
                counters.clear()
                self.assertEqual(self.compile_and_run(fn, x), fn(x))
                self.assertEqual(counters["inductor"]["fxgraph_cache_hit"], 0)
                self.assertGreater(counters["inductor"]["fxgraph_cache_bypass"], 0)
                self.assertGreater(counters["inductor"]["custom_pass_cache_bypass"], 0)
        # never a stale hit: the pass ran on both compiles
        self.assertEqual(log, ["a", "plain", "a", "plain"])
        # one clear line, naming the pass and the stage
        missing = [r for r in logs.output if "has no uuid()" in r]
        self.assertEqual(len(missing), 1, logs.output)
        self.assertIn("test.plain_without_uuid", missing[0])
        self.assertIn("post_grad_custom_post_pass", missing[0])

    @inductor_config.patch(fx_graph_cache=True, fx_graph_remote_cache=False)
    @torch._functorch.config.patch(enable_autograd_cache=True)
    def test_custom_pass_registry_joint_pass_autograd_cache(self):
        # Joint passes run before the AOTAutograd cache would be filled; the
        # AOTAutograd key must change with their uuid too.
        x = torch.randn(8, requires_grad=True)
        log = []
        joint = RecordingPass("joint", log)
        self.register("joint_custom_pre_pass", joint, name="lib.joint")

        def compile_once():
            counters.clear()
            self.compile_and_run(fn, x).sum().backward()
            return (
                counters["aot_autograd"]["autograd_cache_hit"],
                counters["aot_autograd"]["autograd_cache_miss"],
            )

        self.assertEqual(compile_once(), (0, 1))
        self.assertEqual(compile_once(), (1, 0))
        joint._uuid = "v2"
        log.clear()
        self.assertEqual(compile_once(), (0, 1))
        self.assertEqual(log, ["joint"])

    @torch._functorch.config.patch(enable_autograd_cache=False)
    @inductor_config.patch(fx_graph_cache=True, fx_graph_remote_cache=False)
    def test_custom_pass_registry_uuid_calls_per_compile(self):
        # Post-grad and joint passes: uuid() once for the cache check and once
        # for the key, not once per stage that is looked at; the key sees a
        # pass registered after the check.
        calls = []

        class CountingPass(RecordingPass):
            def uuid(self):
                calls.append(self.tag)
                return super().uuid()

        self.register("post_grad_custom_post_pass", CountingPass("a", []), name="lib.a")
        self.register("joint_custom_pre_pass", CountingPass("j", []), name="lib.j")
        self.compile_and_run(fn, torch.randn(8))
        self.assertEqual(sorted(calls), ["a", "a", "j", "j"])
        calls.clear()
        self.assertIsNone(cpr.custom_pass_cache_bypass_reason(include_pre_grad=True))
        with cpr.register_custom_pass(
            "post_grad_custom_post_pass", CountingPass("b", []), name="lib.b"
        ):
            details = cpr.custom_pass_cache_details(include_pre_grad=True)
        self.assertEqual(sorted(calls), ["a", "a", "b", "j", "j"])
        self.assertEqual(
            [n for n, _ in dict(details)["post_grad_custom_post_pass"]],
            ["lib.a", "lib.b"],
        )

    @parametrize("stage", ["pre_grad_custom_pass", "post_grad_custom_post_pass"])
    def test_custom_pass_registry_uuid_none_is_the_only_missing_uuid(self, stage):
        # One rule for the check, the key and pre-grad timing: a uuid() that
        # is falsy but not None identifies the pass; None does not.  (A torch
        # without pre-grad timing runs its pre-grad passes before the lookup.)
        from torch._inductor import codecache

        timing = getattr(codecache, "resolve_pre_grad_pass_timing", None)
        falsy = RecordingPass("falsy", [])
        falsy.uuid = lambda: 0
        with self.register(stage, falsy, name="lib.falsy"):
            self.assertIsNone(cpr.custom_pass_cache_bypass_reason(True))
            self.assertEqual(
                dict(cpr.custom_pass_cache_details(True))[stage], (("lib.falsy", 0),)
            )
            if timing is not None:
                self.assertEqual(timing(), "late")
        missing = RecordingPass("missing", [])
        missing.uuid = lambda: None
        with self.register(stage, missing, name="lib.missing"):
            self.assertEqual(
                cpr.custom_pass_cache_bypass_reason(True),
                f"custom pass lib.missing at {stage} has no uuid()",
            )
            if timing is not None:
                self.assertEqual(
                    timing(), "early" if stage == "pre_grad_custom_pass" else "late"
                )

    def test_custom_pass_registry_uuid_error_names_the_pass(self):
        broken = RecordingPass("broken", [])

        def uuid():
            raise KeyError("no version file")

        broken.uuid = uuid
        with self.register("post_grad_custom_post_pass", broken, name="lib.broken"):
            with self.assertRaisesRegex(RuntimeError, "lib.broken.*no version file"):
                cpr.list_custom_passes()

    def test_custom_pass_registry_subprocess_compile_bypasses_cache(self):
        # A subprocess compile runs no post-grad pass, so its graph must not be
        # cached under a key that names one (registered or assigned); a joint
        # pass runs before the compile is handed over.
        from torch._inductor import compile_fx

        with self.register(
            "post_grad_custom_post_pass", RecordingPass("a", []), name="lib.a"
        ):
            self.assertIsNone(cpr.custom_pass_cache_bypass_reason(True))
            with mock.patch.object(
                compile_fx, "fx_compile_mode", compile_fx.FxCompileMode.SUBPROCESS
            ):
                reason = cpr.custom_pass_cache_bypass_reason(True)
        self.assertRegex(reason, "lib.a.*subprocess")
        with mock.patch.object(
            compile_fx, "fx_compile_mode", compile_fx.FxCompileMode.SUBPROCESS
        ):
            self.assertIsNone(cpr.custom_pass_cache_bypass_reason(True))
            with inductor_config.patch(post_grad_custom_pre_pass=SinToCos([])):
                reason = cpr.custom_pass_cache_bypass_reason(True)
            with self.register(
                "joint_custom_pre_pass", RecordingPass("j", []), name="lib.j"
            ):
                self.assertIsNone(cpr.custom_pass_cache_bypass_reason(True))
        self.assertRegex(reason, "SinToCos.*subprocess")

    def test_custom_pass_registry_cache_details_order_and_uuid(self):
        log = []
        a = RecordingPass("a", log)
        b = RecordingPass("b", log)
        with cpr.register_custom_pass("post_grad_custom_post_pass", a, name="a"):
            with cpr.register_custom_pass("post_grad_custom_post_pass", b, name="b"):
                first = cpr.custom_pass_cache_details(include_pre_grad=True)
                self.assertIsNone(
                    cpr.custom_pass_cache_bypass_reason(include_pre_grad=True)
                )
        with cpr.register_custom_pass("post_grad_custom_post_pass", b, name="b"):
            with cpr.register_custom_pass("post_grad_custom_post_pass", a, name="a"):
                swapped = cpr.custom_pass_cache_details(include_pre_grad=True)
        self.assertNotEqual(first, swapped)
        self.assertEqual(
            dict(first)["post_grad_custom_post_pass"],
            (("a", a.uuid()), ("b", b.uuid())),
        )


if __name__ == "__main__":
    run_tests()
