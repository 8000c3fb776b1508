"""``gpu-test``: every GPU test of the patch set on a GPU machine, in one command (CI has no GPU, so there they skip).

What it does, in order (``--dry-run``: the same checks, then prints the plan and runs nothing):

1. Sets ``NCCL_NVLS_ENABLE=0``, ``TORCH_SYMM_MEM_DISABLE_MULTICAST=1`` and ``NVSHMEM_DISABLE_NVLS=1`` for
   itself and everything it runs (NVLink multicast stays off on the shared GPU machines).
2. Asks this Python's torch for its version and CUDA devices. Without a CUDA device every suite is a SKIPPED
   row ("no CUDA device"), nothing is installed, and the exit status is 0.
3. Modules the suites import and the machine lacks (``expecttest``, ``pytest``, ``hypothesis``) come from
   ``--wheels DIR`` (no network): ``pip install --no-index --no-deps --target`` into a scratch dir put on
   ``PYTHONPATH`` (pure-Python wheels are unzipped there when this Python has no pip). Fill DIR on a machine
   with network: ``python -m pip download --no-deps --only-binary=:all: --python-version 3.12
   --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux2014_x86_64 --platform any -d .whl
   expecttest==0.3.0`` (PyTorch's CI pin, pure Python).
4. Installs this checkout's series into this Python's torch (``python -m tools install --replace``: a no-op when it
   is already there, another series installed before is swapped out; a torch version without a series is refused before anything changes).
5. Runs, each under pytest with a junit report, and with pytest-xdist workers where the suite allows it:
   the GPU tests of the ``test/inductor/test_*.py`` files the base ships (the files that use a GPU marker,
   ``requires_cuda_and_triton`` and the like, and in them the tests whose name says ``cuda``/``gpu``; CI runs
   the rest on its CPUs; ``--all-tests`` runs every file and test), and,
   with ``--upstream-tests DIR`` (upstream's test files at this torch's version, laid out as ``test/...``;
   they are never part of this repo), each upstream test file a patch's ``hooks/<patch>/upstream-tests.diff``
   changes: copied to a scratch dir, the hunks applied, and every test class the patch's
   ``[[patch.upstream.test-change]]`` entries name run. The hunks are made against upstream's newest release;
   on an older file a hunk is applied exactly where it can be, else with one line of context (as
   ``git apply -C1``; the row says so), and a hunk that still does not apply is a NOT-APPLIED row naming the
   hunk and the class it changes (e.g. an assertion that upstream's file at 2.11 does not have yet); that
   class then runs as upstream has it at this version. A class run in several processes
   (``MultiProcessTestCase``, ``MultiProcContinuousTest``) needs two GPUs: with one it is a SKIPPED row.
6. With ``--stock-first``, before step 4: the series is uninstalled where ``install`` put it, and the same upstream
   classes run from upstream's files as they are (no hunks) on that stock torch, as ``[stock]`` rows. Upstream's
   contract is "no test fails patched where it passes on stock": a patched row whose every failing test fails on
   stock too is ``STOCK-FAILS`` (a file of another version than the torch tests newer code), not ``FAILED``.
7. Prints one row per suite (passed, failed, skipped, errors, time), every skip reason with its count, and each
   failing test; with ``--out DIR`` the table, the junit files and each suite's log are written there.
   Exit status 1 when any suite but a ``[stock]`` one fails or runs past its time (``--timeout`` per suite,
   ``--budget`` in all, the ``--stock-first`` runs included).
"""

from __future__ import annotations

import collections
import concurrent.futures
import dataclasses
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path
from xml.etree import ElementTree

from tools.common import PATCHES_DIR, PATCHSET_TOML, REPO_ROOT, PatchsetError, add_subcommand, base_of_version, load_patchset, tests_not_on
from tools.patchapply import find_hunk
from tools.patchfile import FileDiff, Hunk, parse_diffs, split_lines
from tools.sources import UPSTREAM_TESTS

# NVLink multicast must stay off on the GPU machines (NCCL NVLS, symmetric memory, NVSHMEM)
MULTICAST_OFF = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
# module -> distribution whose wheel provides it; every suite imports these
NEEDED = {"pytest": "pytest", "expecttest": "expecttest", "hypothesis": "hypothesis"}
WHEELS_HINT = ("python -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp "
               "--platform manylinux_2_28_x86_64 --platform manylinux2014_x86_64 --platform any -d .whl expecttest==0.3.0")
MULTI_PROCESS_BASES = ("MultiProcessTestCase", "MultiProcContinuousTest")

_PROBE = """
import importlib.util, json, sys
out = {"python": sys.executable, "modules": {m: importlib.util.find_spec(m) is not None for m in sys.argv[1:]}}
try:
    import torch
    out["torch"] = torch.__version__
    out["cuda"] = bool(torch.cuda.is_available())
    out["gpus"] = torch.cuda.device_count() if out["cuda"] else 0
    out["names"] = [torch.cuda.get_device_name(i) for i in range(out["gpus"])]
except Exception as e:
    out["torch_error"] = f"{type(e).__name__}: {e}"
print(json.dumps(out))
"""


@dataclasses.dataclass
class Suite:
    name: str
    cmd: list[str] = dataclasses.field(default_factory=list)  # empty: not run (skip says why)
    cwd: Path = REPO_ROOT
    skip: str = ""
    note: str = ""  # shown under the table, e.g. which hunks applied with reduced context
    gpus: int = 1
    xdist: bool = True
    parts: tuple[str, ...] = ()  # one pytest run over several files: one row per file (a stem of each)
    stock: bool = False  # an upstream class on upstream's file as it is, on stock torch (--stock-first)


@dataclasses.dataclass
class Result:
    suite: Suite
    status: str  # passed | FAILED | SKIPPED | NOT-APPLIED
    counts: dict[str, int] = dataclasses.field(default_factory=dict)
    skips: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    failures: list[str] = dataclasses.field(default_factory=list)
    seconds: float = 0.0
    per_case: dict[str, tuple[str, float, str]] = dataclasses.field(default_factory=dict)  # id -> (kind, s, detail)


def probe(python: str, env: dict[str, str]) -> dict:
    r = subprocess.run([python, "-c", _PROBE, *NEEDED, "xdist"], capture_output=True, text=True, env=env, timeout=300)
    if r.returncode != 0:
        raise PatchsetError(python, f"cannot ask it for torch and its devices: {r.stderr.strip()[-2000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def provide_modules(missing: list[str], wheels: Path | None, site: Path, python: str, env: dict[str, str]) -> None:
    """Install the wheels of ``missing`` modules from ``wheels`` into ``site`` (put on PYTHONPATH by the caller)."""
    if wheels is None:
        raise PatchsetError("--wheels", f"this Python lacks {', '.join(missing)} and there is no network here: "
                            f"pass --wheels DIR holding their wheels (fill DIR where there is network: {WHEELS_HINT})")
    found = []
    for mod in missing:
        dist = NEEDED.get(mod, mod).replace("-", "_").lower()
        whl = sorted(p for p in wheels.glob("*.whl") if p.name.lower().split("-")[0] == dist)
        if not whl:
            raise PatchsetError(wheels, f"no wheel for {mod} (want {dist}-*.whl; fill it with: {WHEELS_HINT})")
        found.append(whl[-1])
    site.mkdir(parents=True, exist_ok=True)
    has_pip = subprocess.run([python, "-m", "pip", "--version"], capture_output=True, env=env).returncode == 0
    if has_pip:
        r = subprocess.run([python, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--disable-pip-version-check",
                            "--target", str(site), *map(str, found)], capture_output=True, text=True, env=env)
        if r.returncode != 0:
            raise PatchsetError(found[0], f"pip install --no-index --no-deps --target {site} failed: {r.stderr.strip()[-1500:]}")
    else:
        for w in found:
            if not w.name.endswith("-none-any.whl"):
                raise PatchsetError(w, "this Python has no pip, and only a pure-Python wheel (*-none-any.whl) can be unpacked without it")
            with zipfile.ZipFile(w) as z:
                z.extractall(site)
    print(f"[gpu-test] from {wheels}: {', '.join(p.name for p in found)} -> {site}", flush=True)


# ---------------------------------------------------------------------------------------------------- upstream hunks


def _trimmed(h: Hunk, keep: int) -> Hunk:
    """``h`` with at most ``keep`` lines of leading and trailing context (``git apply -C<keep>``)."""
    lead = 0
    while lead < min(len(h.old), len(h.new)) and h.old[lead] == h.new[lead]:
        lead += 1
    trail = 0
    while trail < min(len(h.old), len(h.new)) - lead and h.old[-1 - trail] == h.new[-1 - trail]:
        trail += 1
    cut_l, cut_t = max(0, lead - keep), max(0, trail - keep)
    return Hunk(h.old_start + cut_l, h.old[cut_l : len(h.old) - cut_t], h.new[cut_l : len(h.new) - cut_t], h.at)


def apply_upstream_hunks(content: bytes, fd: FileDiff) -> tuple[bytes, list[tuple[int, Hunk, str]]]:
    """Apply each hunk of ``fd``: exactly where it matches, else with one line of context. Returns the text and
    (number, hunk, how) per hunk, how being "exact", "context reduced to 1 line" or "not applied"."""
    lines = split_lines(content)
    delta = 0
    out = []
    for k, h in enumerate(fd.hunks, 1):
        for how, cand in (("exact", h), ("context reduced to 1 line", _trimmed(h, 1))):
            want = cand.old_start - 1 + delta
            pos = find_hunk(lines, cand, want) if cand.old else None
            if pos is not None:
                lines[pos : pos + len(cand.old)] = cand.new
                delta += (pos - want) + len(cand.new) - len(cand.old)
                out.append((k, h, how))
                break
        else:
            out.append((k, h, "not applied"))
    return b"".join(lines), out


def _hunk_class(h: Hunk) -> str:
    """The class a hunk's section line names (``@@ ... @@ class Foo(TestCase):``), else ""."""
    section = h.at.split("@@")[-1].strip()
    return section.split()[1].split("(")[0].rstrip(":") if section.startswith("class ") else ""


def _classes(tests: list[str]) -> list[str]:
    """Class names from ``[[patch.upstream.test-change]]`` ``test`` fields ("Cls.test_x, test_y (new)", "Cls (...)")."""
    out: list[str] = []
    for t in tests:
        name = t.strip().split(".")[0].split(" ")[0].split(",")[0]
        if name and name not in out:
            out.append(name)
    return out


def _multi_process(source: str, cls: str) -> bool:
    """Whether class ``cls`` of ``source`` runs its tests in several processes (text, not ast: a patched file that
    does not parse is still run, and fails there)."""
    m = re.search(rf"^class {re.escape(cls)}\(([^)]*)\)", source, re.M)
    return bool(m) and any(b.strip().split(".")[-1] in MULTI_PROCESS_BASES for b in m.group(1).split(","))


def upstream_suites(base: str, upstream: Path | None, scratch: Path, pytest_cmd: list[str], log) -> list[Suite]:
    ps = load_patchset(PATCHSET_TOML)
    suites: list[Suite] = []
    for p in ps.series(base):
        diff = REPO_ROOT / "hooks" / p.name / UPSTREAM_TESTS
        if not diff.is_file() or p.upstream is None:
            continue
        for fd in parse_diffs(diff.read_bytes(), str(diff)):
            classes = _classes([c.test for c in p.upstream.test_changes if c.file == fd.path])
            row = f"upstream {fd.path.removeprefix('test/')}"
            src = upstream / fd.path if upstream else None
            if src is None or not src.is_file():
                why = ("no --upstream-tests DIR: upstream's test files are not in this repo" if upstream is None
                       else f"{src} is missing: --upstream-tests holds no upstream {fd.path} at torch {base}")
                suites.append(Suite(f"{row} ({p.name})", skip=why))
                continue
            patched, hunks = apply_upstream_hunks(src.read_bytes(), fd)
            bad = [(k, h) for k, h, how in hunks if how == "not applied"]
            if len(bad) == len(hunks):
                suites.append(Suite(f"{row} ({p.name})", skip=f"none of the {len(hunks)} hunks of {diff.relative_to(REPO_ROOT)} "
                                    f"applies to upstream's file at torch {base} (it has not the code they change)"))
                continue
            dest = scratch / p.name / fd.path
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_bytes(patched)
            (scratch / p.name / "pytest.ini").write_text("[pytest]\n")  # rootdir here, no config from above
            reduced = [f"#{k}" for k, h, how in hunks if how.startswith("context")]
            note = f"hunk(s) {', '.join(reduced)} applied with 1 line of context" if reduced else ""
            for k, h in bad:
                suites.append(Suite(f"{row} hunk #{k} ({_hunk_class(h) or 'module level'})",
                                    skip=f"NOT-APPLIED: {h.at.split('@@')[1].strip()} of {diff.relative_to(REPO_ROOT)}: upstream's "
                                    f"file at torch {base} has not the lines it changes; the class runs as upstream has it there"))
            text = patched.decode("utf-8", "replace")
            for cls in classes:
                multi = _multi_process(text, cls)
                suites.append(Suite(f"{row}::{cls}", cmd=[*pytest_cmd, f"{fd.path}::{cls}"], cwd=scratch / p.name,
                                    note=note, gpus=2 if multi else 1, xdist=not multi))
            log(f"{fd.path}: {len(hunks) - len(bad)} of {len(hunks)} hunks applied ({', '.join(how for _, _, how in hunks)}); "
                f"classes {', '.join(classes)} -> {dest}")
    return suites


def stock_twin(s: Suite, upstream: Path, scratch: Path) -> Suite:
    """``s`` (an upstream class's suite) on upstream's file as it is, in a scratch tree of its own."""
    path = s.cmd[-1].split("::")[0]
    dest = scratch / s.cwd.name / path
    dest.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(upstream / path, dest)
    (scratch / s.cwd.name / "pytest.ini").write_text("[pytest]\n")
    return dataclasses.replace(s, name=f"{s.name} [stock]", cwd=scratch / s.cwd.name, note="", stock=True)


def against_stock(res: Result, stock: Result) -> None:
    """A patched upstream row whose failing tests all fail on stock too becomes ``STOCK-FAILS``; a note says
    how many of its tests fail there."""
    bad = {"failed", "error"}
    failing = [case for case, (kind, _, _) in res.per_case.items() if kind in bad]
    on_stock = [case for case in failing if stock.per_case.get(case, ("absent",))[0] in bad]
    res.suite.note = "; ".join(filter(None, [res.suite.note, f"{len(on_stock)} of its {len(failing)} failing tests fail on stock too"
                                             if failing else ""]))
    if res.status == "FAILED" and failing and len(on_stock) == len(failing) and len(res.failures) == len(failing):
        res.status = "STOCK-FAILS"


# ---------------------------------------------------------------------------------------------------- running


# a test/inductor file with GPU tests uses one of these; its GPU tests name the device (``cuda``/``gpu``)
GPU_TEST_MARKERS = re.compile(r"requires_cuda|requires_gpu|HAS_GPU|HAS_CUDA|device=\"cuda\"")
GPU_TEST_SELECTION = "cuda or gpu"


def inductor_suites(base: str, pytest_cmd: list[str], all_tests: bool = False) -> list[Suite]:
    """The test/inductor files the base ships that have GPU tests, and of them the tests whose name says
    ``cuda``/``gpu`` (pytest ``-k``; CI runs every other test on its CPUs); with ``all_tests`` every file and
    every test. One pytest run (xdist balances the tests over its workers), reported one row per file."""
    not_here = set(tests_not_on(base))
    files = [f for f in sorted(p.relative_to(REPO_ROOT).as_posix() for p in (REPO_ROOT / "test" / "inductor").glob("test_*.py"))
             if f not in not_here and (all_tests or GPU_TEST_MARKERS.search((REPO_ROOT / f).read_text()))]
    if not files:
        return []
    select = [] if all_tests else ["-k", GPU_TEST_SELECTION]
    return [Suite("inductor", cmd=[*pytest_cmd, *select, *files], parts=tuple(Path(f).stem for f in files))]


def split_rows(res: Result) -> list[Result]:
    """One Result per file of a suite that ran several (``Suite.parts``), from the junit test ids."""
    rows = {stem: Result(Suite(f"{res.suite.name} {stem}", cmd=res.suite.cmd), res.status if res.status != "FAILED" else "passed")
            for stem in res.suite.parts}
    first = rows[res.suite.parts[0]]
    for case_id, (kind, seconds, detail) in res.per_case.items():
        row = next((r for stem, r in rows.items() if f".{stem}." in f".{case_id}." or f"/{stem}.py" in case_id), first)
        row.counts[kind] = row.counts.get(kind, 0) + 1
        row.seconds += seconds
        if kind == "skipped":
            row.skips[detail] += 1
        elif kind in ("failed", "error"):
            row.failures.append(f"{case_id}: {detail}")
            row.status = "FAILED"
    if res.status == "FAILED" and not any(r.status == "FAILED" for r in rows.values()):
        first.status = "FAILED"
        first.failures += res.failures or ["(the run failed; see its log)"]
    for r in rows.values():
        if res.status == "FAILED" and any("timed out" in f for f in res.failures):
            r.status = "FAILED"
            r.failures.append(next(f for f in res.failures if "timed out" in f))
    return list(rows.values())


def parse_junit(path: Path, res: Result) -> None:
    root = ElementTree.parse(path).getroot()
    for case in root.iter("testcase"):
        name = f"{case.get('classname', '')}.{case.get('name', '')}".strip(".")
        kinds = {child.tag for child in case}
        seconds = float(case.get("time") or 0)
        if "failure" in kinds or "error" in kinds:
            key = "failed" if "failure" in kinds else "error"
            el = case.find("failure") if "failure" in kinds else case.find("error")
            msg = (el.get("message") or "").strip().splitlines() if el is not None else []
            detail = msg[0][:200] if msg else key
            res.failures.append(f"{name}: {detail}")
        elif "skipped" in kinds:
            key = "skipped"
            el = case.find("skipped")
            detail = ((el.get("message") or "").strip() if el is not None else "").split("\n")[0][:160] or "(no reason)"
            res.skips[detail] += 1
        else:
            key, detail = "passed", ""
        res.counts[key] = res.counts.get(key, 0) + 1
        res.per_case[name] = (key, seconds, detail)


def run_suite(s: Suite, env: dict[str, str], out: Path, timeout: float, workers: int, slug: str) -> Result:
    junit = out / f"{slug}.xml"
    logf = out / f"{slug}.log"
    parallel = s.xdist and workers > 1
    cmd = [*s.cmd, f"--junitxml={junit}"] + (["-n", str(workers)] if parallel else [])
    if parallel:  # each worker compiles in-process on its share of the cores (not a pool of cpu_count each)
        env = {**env, "TORCHINDUCTOR_COMPILE_THREADS": "1", "OMP_NUM_THREADS": str(max(1, (os.cpu_count() or 1) // workers))}
    res = Result(s, "passed")
    t = time.monotonic()
    with open(logf, "w") as fh:
        fh.write(f"$ cd {s.cwd} && {' '.join(cmd)}\n")
        fh.flush()
        proc = subprocess.Popen(cmd, cwd=s.cwd, env=env, stdout=fh, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            rc = proc.wait(timeout=max(1.0, timeout))
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)  # the suite's whole process group: pytest, xdist workers, ranks
            proc.wait()
            rc = None
    res.seconds = time.monotonic() - t
    if junit.is_file():
        try:
            parse_junit(junit, res)
        except ElementTree.ParseError as e:
            res.failures.append(f"(junit report unreadable: {e})")
    if rc is None:
        res.status = "FAILED"
        res.failures.append(f"(timed out after {timeout:.0f}s; killed; see {logf.name})")
    elif rc != 0 or res.counts.get("failed") or res.counts.get("error"):
        res.status = "FAILED"
        if not res.failures:
            res.failures.append(f"(pytest exit status {rc}{': no tests collected' if rc == 5 else ''}; see {logf.name})")
    return res


def render(results: list[Result], header: str) -> str:
    w = max([5, *(len(r.suite.name) for r in results)])
    lines = [header, "", f"{'suite':<{w}} {'status':<11} {'passed':>6} {'failed':>6} {'skipped':>7} {'error':>5} {'time':>7}"]
    for r in results:
        c = r.counts
        cells = [str(c.get(k, 0)) if r.suite.cmd and r.status != "SKIPPED" else "-" for k in ("passed", "failed", "skipped", "error")]
        lines.append(f"{r.suite.name:<{w}} {r.status:<11} {cells[0]:>6} {cells[1]:>6} {cells[2]:>7} {cells[3]:>5} {r.seconds:>6.0f}s")
    extra = []
    for r in results:
        if r.suite.skip:
            extra.append(f"  {r.suite.name}: {r.suite.skip if r.suite.skip.startswith(r.status) else r.status + ': ' + r.suite.skip}")
        if r.suite.note:
            extra.append(f"  {r.suite.name}: note: {r.suite.note}")
        for reason, n in sorted(r.skips.items(), key=lambda kv: -kv[1]):
            extra.append(f"  {r.suite.name}: {n} skipped: {reason}")
        for f in r.failures:
            extra.append(f"  {r.suite.name}: FAILED {f}")
    failed = [r for r in results if r.status == "FAILED" and not r.suite.stock]
    on_stock = sum(r.status == "FAILED" for r in results) - len(failed)
    tot = collections.Counter()
    for r in results:
        tot.update(r.counts)
    lines += ["", "skips, notes and failures:" if extra else "nothing skipped", *extra, "",
              f"{len(results)} suites: {len(failed)} failed{f' (and {on_stock} [stock])' if on_stock else ''}, "
              f"{sum(r.status in ('SKIPPED', 'NOT-APPLIED') for r in results)} "
              f"not run; {tot['passed']} passed, {tot['failed']} failed, {tot['skipped']} skipped, {tot['error']} errors"]
    return "\n".join(lines)


def gpu_test(wheels: Path | None, upstream: Path | None, out: Path | None, dry_run: bool, workers: int,
             timeout: int, budget: int, python: str = sys.executable, all_tests: bool = False,
             stock_first: bool = False) -> int:
    """Run the suites; the scratch directory (wheels' site, upstream's test tree, logs without --out) is removed
    however the run ends."""
    work = Path(tempfile.mkdtemp(prefix="patchset-gpu-test-"))
    try:
        return _gpu_test(work, wheels, upstream, out, dry_run, workers, timeout, budget, python, all_tests, stock_first)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _gpu_test(work: Path, wheels: Path | None, upstream: Path | None, out: Path | None, dry_run: bool, workers: int,
              timeout: int, budget: int, python: str, all_tests: bool, stock_first: bool) -> int:
    t0 = time.monotonic()
    os.environ.update(MULTICAST_OFF)
    logdir = out or work / "out"
    logdir.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, **MULTICAST_OFF, "PYTHONUNBUFFERED": "1"}

    def log(msg: str) -> None:
        print(f"[gpu-test] {msg}", flush=True)

    log("environment: " + " ".join(f"{k}={v}" for k, v in MULTICAST_OFF.items()))
    info = probe(python, env)
    if "torch_error" in info:
        raise PatchsetError(python, f"cannot import torch: {info['torch_error']}")
    base = base_of_version(info["torch"], load_patchset(PATCHSET_TOML), where=f"torch {info['torch']} of {python}")
    header = (f"gpu-test: torch {info['torch']} (series v{base}) at {python}; "
              f"{info['gpus']} CUDA device(s){': ' + ', '.join(info['names']) if info['names'] else ''}")
    log(header)
    if not info["cuda"]:
        log("no CUDA device: every suite is left out (CI runs test/inductor on CPU); nothing is installed")
    site = work / "site"
    missing = [m for m in NEEDED if not info["modules"][m]]
    if missing and info["cuda"]:
        if dry_run:
            log(f"would install {', '.join(missing)} from {wheels} into {site} (on PYTHONPATH)")
        else:
            provide_modules(missing, wheels, site, python, env)
            env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(site), env.get("PYTHONPATH")]))
            info = {**probe(python, env), "gpus": info["gpus"], "cuda": info["cuda"]}
            if still := [m for m in NEEDED if not info["modules"][m]]:
                raise PatchsetError(wheels or "--wheels", f"still missing after installing the wheels: {', '.join(still)}")
    use_xdist = bool(info["modules"].get("xdist")) and workers > 1
    pytest_cmd = [python, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider"]
    ups = upstream_suites(base, upstream, work / "upstream", pytest_cmd, log)
    stock: dict[str, Result] = {}
    if info["cuda"]:
        from tools.distinfo import find_site_packages
        from tools.install import install, uninstall

        twins = [(s, stock_twin(s, upstream, work / "stock")) for s in ups
                 if stock_first and upstream is not None and s.cmd and not s.skip and s.gpus <= info["gpus"]]
        if twins and not dry_run:
            uninstall(find_site_packages())
            stock = dict(zip((s.name for s, _ in twins), _run_all([t for _, t in twins], "stock", env, logdir, workers,
                                                                   use_xdist, timeout, budget, t0, log)))
        elif twins:
            log(f"would uninstall the series, then run {len(twins)} upstream class(es) unchanged on stock torch")
        install(find_site_packages(), PATCHES_DIR, PATCHSET_TOML, replace=True, dry_run=dry_run)
    # the GPU-only suites first, so that a slow CPU suite cannot eat their time
    suites = sorted(ups, key=lambda s: -s.gpus) + inductor_suites(base, pytest_cmd, all_tests)
    if upstream is None:
        log("no --upstream-tests DIR: upstream's test files are not in this repo, so their suites are left out")
    plan: list[Suite] = []
    results: list[Result] = []
    for s in suites:
        if not s.skip and not info["cuda"]:
            s.skip = "no CUDA device"
        elif not s.skip and s.gpus > info["gpus"]:
            s.skip = f"needs {s.gpus} GPUs ({info['gpus']} here)"
        how = f"-n {workers}" if use_xdist and s.xdist else "one process"
        if s.cmd and (dry_run or s.skip):
            log(f"would run{'' if not s.skip else f' on a machine with {s.gpus} GPU(s)'} ({how}): cd {s.cwd} && {' '.join(s.cmd)}")
        if dry_run and not s.skip:
            s.skip = "--dry-run"
        if s.skip:
            for part in s.parts or (None,):
                row = s if part is None else Suite(f"{s.name} {part}", cmd=s.cmd, skip=s.skip)
                results.append(Result(row, "NOT-APPLIED" if s.skip.startswith("NOT-APPLIED") else "SKIPPED"))
        else:
            plan.append(s)

    for s, r in zip(plan, _run_all(plan, "", env, logdir, workers, use_xdist, timeout, budget, t0, log)):
        for row in split_rows(r) if s.parts else [r]:
            if s.name in stock:
                against_stock(row, stock[s.name])
                results.append(stock[s.name])
            results.append(row)
    return _finish(results, header, out, 1 if any(r.status == "FAILED" and not r.suite.stock for r in results) else 0)


def _run_all(plan: list[Suite], tag: str, env: dict[str, str], logdir: Path, workers: int, use_xdist: bool,
             timeout: int, budget: int, t0: float, log) -> list[Result]:
    """Run ``plan``'s suites, every one at once (they share the GPUs; a multi-process suite needs little CPU):
    one suite's length, not their sum, bounds the run. The xdist suites split the workers between them."""
    per_suite = max(1, workers // max(1, sum(s.xdist for s in plan)))

    def run(i: int, s: Suite) -> Result:
        left = budget - (time.monotonic() - t0)
        if left < 10:
            s.skip = f"the --budget of {budget}s was spent before it started"
            return Result(s, "FAILED")
        slug = f"{tag}{i:02d}-" + "".join(ch if ch.isalnum() else "_" for ch in s.name)[:80]
        log(f"[{tag}{i}/{len(plan)}] start {s.name} (up to {min(timeout, left):.0f}s)")
        r = run_suite(s, env, logdir, min(timeout, left), per_suite if use_xdist else 1, slug)
        log(f"[{tag}{i}/{len(plan)}] {s.name}: {r.status} {dict(r.counts)} in {r.seconds:.0f}s")
        return r

    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, len(plan))) as pool:
        futures = [pool.submit(run, i, s) for i, s in enumerate(plan, 1)]
        return [f.result() for f in futures]


def _finish(results: list[Result], header: str, out: Path | None, rc: int) -> int:
    table = render(results, header)
    print("\n" + table, flush=True)
    if out:
        (out / "gpu-test-summary.txt").write_text(table + "\n")
    return rc


def register(subparsers) -> None:
    p = add_subcommand(subparsers, "gpu-test", "run every GPU test (test/inductor, upstream test hunks, two-GPU) on a GPU machine",
                       __doc__, lambda a: gpu_test(a.wheels, a.upstream_tests, a.out, a.dry_run, a.workers, a.timeout, a.budget,
                                                      all_tests=a.all_tests, stock_first=a.stock_first))
    p.add_argument("--wheels", type=Path, default=None, help="wheels of the modules the machine lacks (expecttest ...)")
    p.add_argument("--upstream-tests", type=Path, default=None,
                   help="upstream's test files at this torch's version, laid out as test/... (not in this repo)")
    p.add_argument("--out", type=Path, default=None, help="write the table, junit reports and logs here")
    p.add_argument("--dry-run", action="store_true", help="check and plan; install and run nothing")
    p.add_argument("--stock-first", action="store_true",
                   help="first run upstream's classes unchanged on stock torch (the series uninstalled), then compare")
    p.add_argument("--all-tests", action="store_true",
                   help="every test/inductor file and test, CPU tests included (default: the GPU tests only)")
    p.add_argument("--workers", type=int, default=min(16, os.cpu_count() or 1), help="pytest-xdist workers per suite (default: %(default)s)")
    p.add_argument("--timeout", type=int, default=480, help="seconds per suite (default: %(default)s)")
    p.add_argument("--budget", type=int, default=570, help="seconds for all suites together (default: %(default)s)")
