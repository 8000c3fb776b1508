"""Subcommand dispatch. Each subcommand module exposes ``register(subparsers)``; the parser it adds
sets ``func`` to a callable taking the parsed args and returning an exit code."""

from __future__ import annotations

import argparse
import importlib
import signal
import sys

from tools import interrupt
from tools.common import PatchsetError

# each registers its subcommand(s), in this order
SUBCOMMAND_MODULES = [
    "tools.bases",  # bases: fetch wheels, build pristine git trees
    "tools.baseenv",  # venv: each base's virtual environment from requirements/base-<base>.txt
    "tools.generate",  # generate
    "tools.check",  # check
    "tools.apply",  # apply onto a PyTorch checkout
    "tools.install_cli",  # install, uninstall, status onto the current env's torch
    "tools.wheel",  # wheel: patched torch wheel
    "tools.export_pr",  # export-pr
    "tools.demo",  # demo: show each landed pass firing
    "tools.port_cli",  # port: carry the hooks to a new torch release
    "tools.gpu_test",  # gpu-test: every GPU test on a GPU machine
]


DESCRIPTION = """\
The inductor patch set's one CLI: make and check the patch series (bases, generate, check), put it onto a
PyTorch checkout (apply), onto this environment's torch (install, uninstall, status) or into a torch wheel
(wheel), export upstream PRs (export-pr), run the feature demos (demo) and, on a GPU machine, every GPU test (gpu-test).
`python -m tools <subcommand> --help` describes each one. Errors say `error: <file>: <reason>` and exit with 2.
`python -m tools` works in the repo root, and from any directory with the python of a venv that
`bash scripts/dev.sh setup` (`python -m tools venv`) made (.venv/bin/python -m tools ...); with another python,
from anywhere else: `python /path/to/repo/tools <subcommand>`."""


def build_parser(prog: str | None = None) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=prog or "python -m tools", description=DESCRIPTION,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    for name in SUBCOMMAND_MODULES:
        importlib.import_module(name).register(sub)
    return parser


def main(argv: list[str] | None = None, prog: str | None = None, exiting: bool = False) -> int:
    """Run one subcommand. SIGINT/SIGTERM end it with one line and exit status 128 + the signal's number, no
    traceback: for a command that sets ``atomic`` (``apply``, ``install``, ``uninstall``, ``wheel``) that line is
    ``interrupted; nothing changed``, and ``tools.interrupt`` makes it true."""
    atomic = started = False
    with interrupt.guard(exiting):
        try:
            args = build_parser(prog).parse_args(argv)
            atomic = bool(getattr(args, "atomic", False))
            started = True
            if not atomic:
                interrupt.loosen()
            return int(args.func(args) or 0)
        except PatchsetError as e:
            interrupt.commit_point()
            print(f"error: {e}", file=sys.stderr)
            return 2
        except KeyboardInterrupt as e:  # interrupt.Interrupted, or a KeyboardInterrupt raised by other code
            interrupt.commit_point()
            interrupt.run_cleanups()
            # before the subcommand started nothing can have changed either
            print(interrupt.MESSAGE if atomic or not started else "interrupted", file=sys.stderr)
            return 128 + getattr(e, "signum", signal.SIGINT)
