"""``demo``: run each feature's demo script with this interpreter, after checking the patch set is installed.

A feature's demo is ``examples/<patch name without 'inductor-', dashes as underscores>.py`` (for example
``inductor-cat-linear-fused`` -> ``examples/cat_linear_fused.py``). Each script defines ``main()`` (what fired: counters, a FileCheck-able snippet of the
generated code; no timings, those are in benchmarks/README.md); it is run in its own process as ``runpy.run_path(script)["main"]()``. A missing demo is reported, not
fatal (unless ``--strict``); other ``examples/*.py`` are run after the features'.
"""

from __future__ import annotations

import logging
import os
import re
import subprocess
import sys
import time
from pathlib import Path

from tools.common import PATCHSET_TOML, REPO_ROOT, PatchsetError, add_subcommand, load_patchset
from tools.distinfo import find_site_packages
from tools.journal import State, verify_manifest

EXAMPLES_DIR = REPO_ROOT / "examples"
RUNNER = ("import runpy, sys; from tools.demo import quiet_known_harmless_logs; quiet_known_harmless_logs(); "
          "m = runpy.run_path(sys.argv[1]); m['main']() if 'main' in m else sys.exit('no main()')")
# Warnings the demos cause on purpose and that say nothing about the patch set (PYTHONWARNINGS syntax). Anything
# else, torch's own log lines and the warnings the demos are about, is left alone.
KNOWN_HARMLESS_WARNINGS = (
    # demos compile with force_disable_caches so every variant really compiles
    "ignore:dynamo_pgo force disabled by torch.compiler.config.force_disable_caches:UserWarning",
)
# Log records (not warnings: PYTHONWARNINGS cannot reach them) that third-party code emits while a demo imports it,
# and that say nothing about the patch set: (logger, regex of the message, a path part one of the calling frames must
# have, or None). Each is dropped by a filter on that one logger in the demo's process; everything else is printed.
KNOWN_HARMLESS_LOGS = (
    # torchao 0.18 loads every _C*.so it ships: its mxfp8 one is built for CPython 3.10, its cutlass one for sm90a
    # GPUs; neither is used on a CPU, and the da8w4 ops come from csrc/ (or the tests' reference kernel)
    ("torchao", r"^Failed to load \S*/torchao/_C_(mxfp8|cutlass)\w*\.\S*\.so: ", None),
    # torchao registers its enums (KernelPreference ...) as pytree constants, which torch 2.13 deprecates for Enum
    # subclasses: torchao's call, logged by torch; only when a torchao frame made it
    ("torch.utils._pytree", r"is an Enum subclass and is now natively supported by torch\.compile", "/torchao/"),
)


class _DropKnown:
    def __init__(self, pattern: str, caller: str | None):
        self.pattern = re.compile(pattern)
        self.caller = caller

    def filter(self, record) -> bool:
        if not self.pattern.search(record.getMessage()):
            return True
        if self.caller is None:
            return False
        f = sys._getframe()
        while f is not None:
            if self.caller in f.f_code.co_filename.replace(os.sep, "/"):
                return False
            f = f.f_back
        return True


def quiet_known_harmless_logs() -> None:
    """Install KNOWN_HARMLESS_LOGS' filters (the demo's process calls this before it runs the script)."""
    for name, pattern, caller in KNOWN_HARMLESS_LOGS:
        logging.getLogger(name).addFilter(_DropKnown(pattern, caller))


def demo_scripts(metadata: Path = PATCHSET_TOML, examples: Path = EXAMPLES_DIR) -> list[tuple[str, Path]]:
    ps = load_patchset(metadata)
    out = [(p.name, examples / (p.name.removeprefix("inductor-").replace("-", "_") + ".py")) for p in ps.patches]
    known = {path.resolve() for _, path in out}
    for extra in sorted(examples.glob("*.py")) if examples.is_dir() else []:
        if extra.resolve() not in known and not extra.name.startswith("_"):
            out.append((f"(example) {extra.stem}", extra))
    return out


def run_demos(strict: bool = False, timeout: int = 900, only: list[str] | None = None,
              metadata: Path = PATCHSET_TOML, examples: Path = EXAMPLES_DIR) -> int:
    site = find_site_packages()
    st = State(site)
    m = st.manifest()
    if m is None:
        raise PatchsetError(site / "torch", "the patch set is not installed in this environment "
                            f"({sys.executable}); run `python -m tools install` (or `bash scripts/dev.sh demo`)")
    bad = verify_manifest(st, m, allow_stock=False)
    if bad:
        raise PatchsetError(site / bad[0], "installed patch set has drifted; see `python -m tools status`")
    scripts = demo_scripts(metadata, examples)
    if only:
        scripts = [(n, s) for n, s in scripts if any(o in n for o in only)]
        if not scripts:
            names = ", ".join(n.removeprefix("(example) ") for n, _ in demo_scripts(metadata, examples))
            raise PatchsetError(f"demo {' '.join(only)}", f"no demo's name contains {' or '.join(map(repr, only))}; "
                                f"the demos: {names}")
    print(f"{m['patchset']['name']} {m['patchset']['version']} on torch {m['torch_version']} ({sys.executable})")
    results = []
    for name, script in scripts:
        print(f"\n{'=' * 100}\n== {name}: {script.relative_to(REPO_ROOT) if script.is_relative_to(REPO_ROOT) else script}"
              f"\n{'=' * 100}", flush=True)
        if not script.is_file():
            print("   (no demo script yet)")
            results.append((name, "missing", 0.0))
            continue
        t = time.monotonic()
        try:
            warn = ",".join(filter(None, [os.environ.get("PYTHONWARNINGS"), *KNOWN_HARMLESS_WARNINGS]))
            r = subprocess.run([sys.executable, "-c", RUNNER, str(script)], cwd=REPO_ROOT, timeout=timeout,
                               env={**os.environ, "PYTHONWARNINGS": warn})
            status = "ok" if r.returncode == 0 else f"FAILED (exit {r.returncode})"
        except subprocess.TimeoutExpired:
            status = f"FAILED (timeout {timeout}s)"
        results.append((name, status, time.monotonic() - t))
    print(f"\n{'=' * 100}\nsummary")
    for name, status, secs in results:
        print(f"  {name:45} {status:22} {secs:6.1f}s")
    failed = [r for r in results if r[1].startswith("FAILED")]
    missing = [r for r in results if r[1] == "missing"]
    print(f"{len(results) - len(failed) - len(missing)} ok, {len(failed)} failed, {len(missing)} missing")
    return 1 if failed or (strict and missing) else 0


def register(subparsers) -> None:
    p = add_subcommand(subparsers, "demo", "run each feature's examples/*.py demo on the installed patch set", __doc__,
                       lambda a: run_demos(a.strict, a.timeout, a.only))
    p.add_argument("--strict", action="store_true", help="a missing demo script is an error")
    p.add_argument("--timeout", type=int, default=900, help="seconds per demo (default: %(default)s)")
    p.add_argument("only", nargs="*", help="run only the demos whose name contains one of these")
