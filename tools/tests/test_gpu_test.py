"""``gpu-test`` without a GPU: the hunk application, the table, the wheels, and the run itself with the device probe,
``install`` and the suites faked (issue #39)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import zipfile

import pytest

from tools import gpu_test as gt
from tools.common import REPO_ROOT
from tools.patchfile import parse_diffs

UPSTREAM = "test/distributed/tensor/parallel/test_micro_pipeline_tp.py"


def _diff(old: str, new: str, path: str = "test/x/test_up.py") -> bytes:
    """A git diff of ``old`` -> ``new`` (``git diff --no-index``; both as files under a tmp dir)."""
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as d:
        a, b = Path(d) / "a", Path(d) / "b"
        a.write_text(old)
        b.write_text(new)
        r = subprocess.run(["git", "diff", "--no-index", "a", "b"], cwd=d, capture_output=True)
    return r.stdout.replace(b"a/a", f"a/{path}".encode()).replace(b"b/b", f"b/{path}".encode())


def test_hunks_apply_exactly_then_with_one_line_of_context_else_not():
    lines = [f"line{i}\n" for i in range(40)]
    old = "".join(lines)
    new = lines.copy()
    new[5] = "CHANGED5\n"  # hunk 1
    new[20] = "CHANGED20\n"  # hunk 2
    new[33] = "CHANGED33\n"  # hunk 3
    fd = parse_diffs(_diff(old, "".join(new)), "t")[0]
    assert len(fd.hunks) == 3
    # another version: hunk 1 as made, hunk 2's outer context differs (line 18 and 22), hunk 3's changed line is gone
    other = lines.copy()
    other[18], other[22], other[33] = "x18\n", "x22\n", "gone\n"
    text, hunks = gt.apply_upstream_hunks("".join(other).encode(), fd)
    assert [how for _, _, how in hunks] == ["exact", "context reduced to 1 line", "not applied"]
    out = text.decode().splitlines()
    assert out[5] == "CHANGED5" and out[20] == "CHANGED20" and out[33] == "gone" and out[18] == "x18"


def test_the_micro_pipeline_tp_hunk_names_its_classes():
    diff = REPO_ROOT / "hooks/inductor-micro-pipeline-tp-slice-cat/upstream-tests.diff"
    fd = parse_diffs(diff.read_bytes(), str(diff))[0]
    assert fd.path == UPSTREAM
    assert [gt._hunk_class(h) for h in fd.hunks] == ["", "", "MicroPipelineTPTest", "MicroPipelineTP4GPUTest"]
    new = "".join(b.decode() for h in fd.hunks for b in h.new)
    # the two-GPU class: one process group for every case, each rank's inputs on its own device
    assert "class MicroPipelineTPSliceCatMultiGPUTest(MultiProcContinuousTest):" in new
    assert 'device=f"cuda:{self.rank}"' in new and 'device="cuda")' not in new
    assert "torch.cuda.set_device(rank)" in new and "destroy_process_group" not in new
    for case in ("canonical_cat_dim0", "canonical_cat_dim1", "canonical_index_to_end", "canonical_seq_3d", "swapped",
                 "duplicated", "strided", "canonical_narrow_dim1", "canonical_narrow_dim0", "partial"):
        assert f'"{case}": (' in new, case


def test_classes_from_test_change_entries():
    assert gt._classes(["MicroPipelineTPTest.test_find_all_gather_patterns",
                        "MicroPipelineTPSliceCatMultiGPUTest.test_a, test_b (new)",
                        "TestCatLinearFusion (_fires, test_x)", "TestCatLinearFusion.test_y"]) == [
        "MicroPipelineTPTest", "MicroPipelineTPSliceCatMultiGPUTest", "TestCatLinearFusion"]
    src = "class A(TestCase):\n    pass\nclass B(common_distributed.MultiProcContinuousTest):\n    pass\n"
    assert not gt._multi_process(src, "A") and gt._multi_process(src, "B")


def test_upstream_suites_say_why_they_are_left_out(tmp_path):
    cmd = ["python", "-m", "pytest"]
    rows = gt.upstream_suites("2.11.0", None, tmp_path / "s", cmd, print)
    assert rows and all(r.skip.startswith("no --upstream-tests DIR") and not r.cmd for r in rows)
    assert any("test_micro_pipeline_tp.py" in r.name for r in rows)
    rows = gt.upstream_suites("2.11.0", tmp_path, tmp_path / "s", cmd, print)
    assert all("is missing" in r.skip for r in rows)


def test_upstream_suites_run_the_classes_and_list_a_hunk_that_does_not_apply(tmp_path):
    """An upstream file where the hook's hunks find their lines (built from the hunks themselves, as the file the
    hunks were made from would be), except the one changing MicroPipelineTPTest: a NOT-APPLIED row, both classes
    run, the two-process one on two GPUs without xdist."""
    diff = REPO_ROOT / "hooks/inductor-micro-pipeline-tp-slice-cat/upstream-tests.diff"
    fd = parse_diffs(diff.read_bytes(), str(diff))[0]
    pieces = []
    for h in fd.hunks:
        old = b"".join(h.old).decode()
        pieces.append(old.replace("torch.ops.aten.slice.Tensor", "torch.ops.aten.view.dtype"))
    f = tmp_path / "up" / UPSTREAM
    f.parent.mkdir(parents=True)
    f.write_text("\n# gap\n\n\n\n".join(pieces))
    rows = gt.upstream_suites("2.11.0", tmp_path / "up", tmp_path / "s", ["py", "-m", "pytest"], print)
    rows = [r for r in rows if "micro_pipeline_tp" in r.name]
    by = {r.name.rsplit("::", 1)[-1] if "::" in r.name else r.name: r for r in rows}
    bad = [r for r in rows if r.skip.startswith("NOT-APPLIED")]
    assert len(bad) == 1 and "hunk #3 (MicroPipelineTPTest)" in bad[0].name
    multi = by["MicroPipelineTPSliceCatMultiGPUTest"]
    assert multi.gpus == 2 and not multi.xdist and multi.cmd[-1] == f"{UPSTREAM}::MicroPipelineTPSliceCatMultiGPUTest"
    assert by["MicroPipelineTPTest"].gpus == 1 and by["MicroPipelineTPTest"].xdist
    patched = (tmp_path / "s" / "inductor-micro-pipeline-tp-slice-cat" / UPSTREAM).read_text()
    assert "class MicroPipelineTPSliceCatMultiGPUTest" in patched and "enable_symm_mem_for_group" in patched


def _wheel(path, name="fakemod_gt", version="1.0"):
    whl = path / f"{name}-{version}-py3-none-any.whl"
    info = f"{name}-{version}.dist-info"
    with zipfile.ZipFile(whl, "w") as z:
        z.writestr(f"{name}/__init__.py", "VALUE = 39\n")
        z.writestr(f"{info}/METADATA", f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
        z.writestr(f"{info}/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        z.writestr(f"{info}/RECORD", "")
    return whl


def test_missing_modules_come_from_the_wheels_dir(tmp_path):
    wheels = tmp_path / "whl"
    wheels.mkdir()
    _wheel(wheels)
    site = tmp_path / "site"
    gt.provide_modules(["fakemod_gt"], wheels, site, sys.executable, {})
    r = subprocess.run([sys.executable, "-c", "import fakemod_gt; print(fakemod_gt.VALUE)"], capture_output=True,
                       text=True, env={"PYTHONPATH": str(site)})
    assert r.stdout.strip() == "39", r.stderr
    with pytest.raises(gt.PatchsetError, match="pass --wheels DIR"):
        gt.provide_modules(["expecttest"], None, site, sys.executable, {})
    with pytest.raises(gt.PatchsetError, match="no wheel for expecttest"):
        gt.provide_modules(["expecttest"], wheels, site, sys.executable, {})


def _fake_machine(monkeypatch, tmp_path, gpus: int, torch_version: str = "2.11.0+cu130"):
    info = {"python": sys.executable, "torch": torch_version, "cuda": gpus > 0, "gpus": gpus,
            "names": ["NVIDIA H200"] * gpus, "modules": {"pytest": True, "expecttest": True, "hypothesis": True, "xdist": False}}
    monkeypatch.setattr(gt, "probe", lambda python, env: dict(info))
    installed = []
    import tools.install

    monkeypatch.setattr(tools.install, "install", lambda *a, **k: installed.append(k))
    suite_dir = tmp_path / "suite"
    suite_dir.mkdir()
    (suite_dir / "pytest.ini").write_text("[pytest]\n")
    (suite_dir / "test_fake.py").write_text(textwrap.dedent("""
        import os, unittest
        def test_multicast_off():
            assert os.environ["NCCL_NVLS_ENABLE"] == "0"
            assert os.environ["TORCH_SYMM_MEM_DISABLE_MULTICAST"] == "1"
            assert os.environ["NVSHMEM_DISABLE_NVLS"] == "1"
        @unittest.skip("needs a thing")
        def test_skipped():
            pass
        def test_fails():
            assert os.environ.get("GT_FAIL") != "1", "asked to fail"
    """))
    (suite_dir / "test_fake2.py").write_text("def test_two():\n    pass\n")
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
    monkeypatch.setattr(gt, "inductor_suites", lambda base, c, all_tests=False: [
        gt.Suite("inductor", cmd=[*cmd, "test_fake.py", "test_fake2.py"], cwd=suite_dir, parts=("test_fake", "test_fake2"))])
    monkeypatch.setattr(gt, "upstream_suites", lambda base, up, scratch, c, log: [
        gt.Suite("upstream fake::TwoGPU", cmd=[*cmd, "test_fake.py"], cwd=suite_dir, gpus=2, xdist=False),
        gt.Suite("upstream fake hunk #3 (X)", skip="NOT-APPLIED: -1,2 +1,2 of d: not there")])
    return installed


def test_run_on_one_gpu_table_and_exit_status(monkeypatch, tmp_path, capsys):
    installed = _fake_machine(monkeypatch, tmp_path, gpus=1)
    out = tmp_path / "out"
    out.mkdir()
    monkeypatch.setenv("GT_FAIL", "1")
    rc = gt.gpu_test(None, tmp_path, out, dry_run=False, workers=4, timeout=120, budget=300)
    table = (out / "gpu-test-summary.txt").read_text()
    assert rc == 1 and installed == [{"replace": True, "dry_run": False}]
    row = next(line for line in table.splitlines() if line.startswith("inductor test_fake "))
    assert row.split()[2:7] == ["FAILED", "1", "1", "1", "0"], row
    row = next(line for line in table.splitlines() if line.startswith("inductor test_fake2 "))
    assert row.split()[2:7] == ["passed", "1", "0", "0", "0"], row
    assert "inductor test_fake: 1 skipped: needs a thing" in table
    assert "inductor test_fake: FAILED test_fake.test_fails: AssertionError: asked to fail" in table
    assert "upstream fake::TwoGPU: SKIPPED: needs 2 GPUs (1 here)" in table
    assert "upstream fake hunk #3 (X): NOT-APPLIED: -1,2" in table
    assert list(out.glob("*inductor.xml")) and list(out.glob("*inductor.log"))


def test_run_on_two_gpus_passes(monkeypatch, tmp_path):
    _fake_machine(monkeypatch, tmp_path, gpus=2)
    monkeypatch.delenv("GT_FAIL", raising=False)
    out = tmp_path / "out"
    out.mkdir()
    assert gt.gpu_test(None, tmp_path, out, dry_run=False, workers=1, timeout=120, budget=300) == 0
    table = (out / "gpu-test-summary.txt").read_text()
    assert "upstream fake::TwoGPU" in table and "needs 2 GPUs" not in table


def test_no_cuda_device_skips_everything_and_installs_nothing(monkeypatch, tmp_path, capsys):
    installed = _fake_machine(monkeypatch, tmp_path, gpus=0)
    assert gt.gpu_test(None, None, None, dry_run=False, workers=4, timeout=120, budget=300) == 0
    out = capsys.readouterr().out
    assert not installed and "inductor test_fake2: SKIPPED: no CUDA device" in out and "0 failed" in out


def test_dry_run_plans_and_runs_nothing(monkeypatch, tmp_path, capsys):
    installed = _fake_machine(monkeypatch, tmp_path, gpus=2)
    monkeypatch.setenv("GT_FAIL", "1")
    assert gt.gpu_test(None, None, None, dry_run=True, workers=4, timeout=120, budget=300) == 0
    out = capsys.readouterr().out
    assert installed == [{"replace": True, "dry_run": True}]
    assert "would run (one process): cd" in out and "test_fake.py" in out


def test_a_torch_without_a_series_is_refused(monkeypatch, tmp_path):
    _fake_machine(monkeypatch, tmp_path, gpus=1, torch_version="2.12.0+cu130")
    with pytest.raises(gt.PatchsetError, match="unsupported torch version 2.12.0"):
        gt.gpu_test(None, None, None, dry_run=False, workers=1, timeout=60, budget=60)


@pytest.mark.parametrize("how", ["out", "dry_run", "refused"])
def test_the_scratch_directory_is_removed_however_the_run_ends(monkeypatch, tmp_path, how):
    import tempfile

    _fake_machine(monkeypatch, tmp_path, gpus=1, **({"torch_version": "2.12.0+cu130"} if how == "refused" else {}))
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    out = tmp_path / "out"
    out.mkdir()
    if how == "refused":
        with pytest.raises(gt.PatchsetError):
            gt.gpu_test(None, None, out, dry_run=False, workers=1, timeout=60, budget=60)
    else:
        gt.gpu_test(None, tmp_path, out, dry_run=how == "dry_run", workers=1, timeout=120, budget=300)
        assert (out / "gpu-test-summary.txt").is_file()
    assert list(scratch.iterdir()) == []


def test_gpu_test_is_a_subcommand():
    from tools.tests import faketorch as ft

    r = ft.run_tools("gpu-test", "--help")
    assert r.returncode == 0 and "NCCL_NVLS_ENABLE=0" in r.stdout and "--upstream-tests" in r.stdout


def test_every_gpu_marked_test_is_selected_by_name():
    # gpu-test runs the tests that pytest's ``-k "cuda or gpu"`` selects; a test behind a GPU marker whose name (and
    # class's) says neither would skip in CI and never run on a GPU either
    import ast

    unselected = []
    for path in sorted((REPO_ROOT / "test" / "inductor").glob("test_*.py")):
        tree = ast.parse(path.read_text())
        for cls in [n for n in tree.body if isinstance(n, ast.ClassDef)]:
            for fn in [n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name.startswith("test")]:
                marks = [*cls.decorator_list, *fn.decorator_list]
                gpu = any(gt.GPU_TEST_MARKERS.search(ast.unparse(d)) for d in marks)
                if gpu and not any(w in f"{cls.name}.{fn.name}".lower() for w in ("cuda", "gpu")):
                    unselected.append(f"{path.name}::{cls.name}::{fn.name}")
    assert unselected == []


def test_inductor_suites_select_the_gpu_tests():
    # by default the files with GPU tests, and in them the tests that name the device; --all-tests: every file
    pytest_cmd = ["python", "-m", "pytest"]
    (gpu,) = gt.inductor_suites("2.13.0", pytest_cmd)
    assert gpu.cmd[3:5] == ["-k", gt.GPU_TEST_SELECTION]
    assert "test/inductor/test_cat_linear_fused.py" in gpu.cmd
    assert "test/inductor/test_custom_pass_registry.py" not in gpu.cmd
    (every,) = gt.inductor_suites("2.13.0", pytest_cmd, all_tests=True)
    assert "-k" not in every.cmd and "test/inductor/test_custom_pass_registry.py" in every.cmd


@pytest.mark.parametrize("regress", [False, True])
def test_stock_first_runs_upstream_unchanged_on_stock_then_compares(monkeypatch, tmp_path, regress):
    """``--stock-first``: the series is uninstalled, upstream's class runs from its file as it is (a ``[stock]``
    row), then the series is installed and the class runs with the hunks. A test failing in both runs leaves the
    patched row ``STOCK-FAILS`` (exit status 0); one that passes on stock and fails patched leaves it ``FAILED``."""
    calls = _fake_machine(monkeypatch, tmp_path, gpus=1)
    import tools.install

    monkeypatch.setattr(tools.install, "uninstall", lambda site, **k: calls.append("uninstall"))
    path = "test/x/test_up.py"
    stock_src = textwrap.dedent("""
        import unittest
        class TestUp(unittest.TestCase):
            def test_a(self):
                pass
            def test_newer_code(self):
                self.fail("upstream's file tests code this torch lacks")
    """)
    (tmp_path / "up" / path).parent.mkdir(parents=True)
    (tmp_path / "up" / path).write_text(stock_src)
    patched = tmp_path / "s" / "some-patch"
    (patched / path).parent.mkdir(parents=True)
    (patched / "pytest.ini").write_text("[pytest]\n")
    (patched / path).write_text(stock_src.replace("pass", "self.fail('ours')" if regress else "pass"))
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"{path}::TestUp"]
    monkeypatch.setattr(gt, "upstream_suites", lambda *a: [gt.Suite("upstream x/test_up.py::TestUp", cmd=cmd, cwd=patched)])
    monkeypatch.setattr(gt, "inductor_suites", lambda *a, **k: [])
    out = tmp_path / "out"
    out.mkdir()
    rc = gt.gpu_test(None, tmp_path / "up", out, dry_run=False, workers=1, timeout=120, budget=300, stock_first=True)
    table = (out / "gpu-test-summary.txt").read_text()
    assert calls == ["uninstall", {"replace": True, "dry_run": False}]
    row = next(line for line in table.splitlines() if line.startswith("upstream x/test_up.py::TestUp [stock] "))
    assert row.split()[3:6] == ["FAILED", "1", "1"], row
    row = next(line for line in table.splitlines() if line.startswith("upstream x/test_up.py::TestUp ") and "[stock]" not in line)
    if regress:
        assert rc == 1 and row.split()[2:5] == ["FAILED", "0", "2"], row
        assert "1 of its 2 failing tests fail on stock too" in table
    else:
        assert rc == 0 and row.split()[2:5] == ["STOCK-FAILS", "1", "1"], row
        assert "1 of its 1 failing tests fail on stock too" in table and "2 suites: 0 failed (and 1 [stock])" in table
