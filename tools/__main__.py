"""``python -m tools <subcommand>`` from the repo root, or ``python /path/to/repo/tools <subcommand>`` from anywhere.

Run as a directory (the second form), Python puts ``tools/`` itself first on ``sys.path``, where none of this
package's modules may be imported as top-level ones (``wheel``, ``install`` ... would shadow real packages):
that entry is replaced by the repo root, so ``tools`` is imported as the package it is.
"""

import signal
import sys


def _early_interrupt(signum, frame):  # until tools.cli takes over (imports, argument parsing): nothing has run yet
    sys.stderr.write("interrupted; nothing changed\n")
    sys.stderr.flush()
    raise SystemExit(128 + signum)


for _sig in (signal.SIGINT, signal.SIGTERM):
    signal.signal(_sig, _early_interrupt)

from pathlib import Path  # noqa: E402

if not __package__:  # python path/to/tools ...
    _here = Path(__file__).resolve().parent
    sys.path[:] = [str(_here.parent)] + [p for p in sys.path if Path(p or ".").resolve() != _here]

from tools.cli import main  # noqa: E402

sys.exit(main(prog=None if __package__ else f"python {Path(__file__).resolve().parent}", exiting=True))
