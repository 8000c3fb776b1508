"""SIGINT and SIGTERM for the commands that change a user's tree or environment (``apply``, ``install``,
``uninstall``, ``wheel``): an interrupt at any moment leaves everything as it was, and the command prints one line,
``interrupted; nothing changed``, and exits 130 (no traceback).

How (``tools.cli`` calls ``guard()`` for those commands):

* A signal raises ``Interrupted`` (a ``KeyboardInterrupt``) in Python code; the ``finally``/rollback code on the way
  out runs inside ``deferred()``, so a second signal cannot cut it short.
* Inside ``deferred()`` a signal is only recorded; it takes effect when the outermost ``deferred()`` ends (or at an
  explicit ``check()``). The steps that must not be cut in two run inside it: every git child process, the
  creation and removal of the scratch worktree, and each command's commit step, which ends with ``check()``: a
  signal that came during the commit step rolls the commit back before the command stops.
* Every git child is started with SIGINT and SIGTERM blocked (``blocked_for_child()``; the mask is inherited across
  ``exec``), so a terminal's Ctrl-C or ``timeout``/``kill`` of the process group never kills git half-way through
  writing a file or the index; the parent decides, after git is done.
* A scratch resource (apply's worktree; the staged directory of ``fsutil.replacing_dir``, in every command) is
  also registered with ``on_interrupt()``: a signal that lands just before its ``finally`` enters ``deferred()``
  (or, in a command that is not atomic, one that cuts that ``finally`` short) pre-empts that cleanup, and the
  command's end (``run_cleanups()``, before the line is printed) runs it instead.
* Once a command passes its commit point (``commit_point()``), later signals are ignored: what is left is printing
  the result of a change that is complete.

SIGKILL cannot be caught: ``install``/``uninstall`` recover from it with their journal (``tools.journal``),
``wheel`` writes an unnamed file until it is complete, and ``apply`` changes the checkout only in its commit step
(a few ``git`` calls long).

Test hook: ``TORCH_PATCHSET_INTERRUPT_AT=N:INT`` (or ``N:TERM``) sends that signal to this process's group at the
N-th step (``step()``: each git child while it runs, each file the transactions write) of a run.
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Callable

SIGNALS = (signal.SIGINT, signal.SIGTERM)
EXIT_CODE = 130
MESSAGE = "interrupted; nothing changed"
HOOK_ENV = "TORCH_PATCHSET_INTERRUPT_AT"


class Interrupted(KeyboardInterrupt):
    """SIGINT or SIGTERM arrived while a guarded command was running."""

    def __init__(self, signum: int = signal.SIGINT):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


class _State:
    active = False  # guard() installed the handlers, and the command is atomic (not loosen()ed)
    guarded = False  # inside guard(), atomic or not
    depth = 0  # nesting of deferred()
    pending: int | None = None  # a signal that came while deferred
    committed = False  # past the commit point: signals are ignored
    steps = 0  # test hook: steps seen so far
    cleanups: list[Callable[[], None]] = []  # on_interrupt(): to run if the command ends before they are done


_s = _State()


def _handler(signum, frame):
    if _s.committed:
        return
    if not _s.active:
        raise Interrupted(signum)
    if _s.depth > 0:
        _s.pending = _s.pending or signum
        return
    raise Interrupted(signum)


@contextlib.contextmanager
def guard(exiting: bool = False):
    """Install the handlers for one command; restore the previous ones after it (``exiting``: the process ends
    next, so signals stay ignored: one that comes after the result was printed does not change the exit status)."""
    old = {s: signal.getsignal(s) for s in SIGNALS}
    _s.active, _s.depth, _s.pending, _s.committed, _s.steps = True, 0, None, False, 0
    _s.cleanups, _s.guarded = [], True
    for s in SIGNALS:
        signal.signal(s, _handler)
    try:
        yield
    finally:
        run_cleanups()
        for s, h in old.items():
            signal.signal(s, signal.SIG_IGN if exiting else h)
        _s.active = _s.guarded = False


def loosen() -> None:
    """For a command that changes nothing of the user's: a signal raises at once, even while git runs (git is
    killed then), and the test hook is off."""
    _s.active = False


def active() -> bool:
    return _s.active


def pending() -> bool:
    return _s.pending is not None and not _s.committed


def check() -> None:
    """Raise ``Interrupted`` now if a signal came while deferred (the caller rolls back)."""
    if pending():
        signum, _s.pending = _s.pending, None
        raise Interrupted(signum)


@contextlib.contextmanager
def deferred():
    """Signals inside are recorded, not raised; on a normal exit of the outermost block a recorded one is."""
    _s.depth += 1
    try:
        yield
    finally:
        _s.depth -= 1
    if _s.depth == 0:
        check()


def on_interrupt(cleanup: Callable[[], None]) -> None:
    """Have ``cleanup`` run when the command ends before ``done(cleanup)``. For a scratch resource whose own
    ``finally`` a signal can pre-empt: the handler runs between two bytecodes, so one can land after the ``with``
    body and before that ``finally`` enters ``deferred()``. ``cleanup`` must be safe to run twice."""
    if _s.guarded:
        _s.cleanups.append(cleanup)


def done(cleanup: Callable[[], None]) -> None:
    """``cleanup`` ran in its own ``finally``; the command's end need not run it."""
    with contextlib.suppress(ValueError):
        _s.cleanups.remove(cleanup)


def run_cleanups() -> None:
    """Run what ``on_interrupt`` registered and is not done, newest first, with signals ignored meanwhile."""
    committed, _s.committed = _s.committed, True
    try:
        while _s.cleanups:
            _s.cleanups.pop()()
    finally:
        _s.committed = committed


def commit_point() -> None:
    """The change is complete: from here on the command finishes whatever comes (signals are ignored)."""
    if _s.active:
        _s.committed = True
        _s.pending = None


@contextlib.contextmanager
def blocked_for_child():
    """Block SIGINT/SIGTERM while a child process is started: it inherits the mask and never sees them."""
    old = signal.pthread_sigmask(signal.SIG_BLOCK, SIGNALS)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def step() -> None:
    """One step of a guarded command, for the test hook."""
    if not _s.active:
        return
    _s.steps += 1
    spec = os.environ.get(HOOK_ENV)
    if not spec:
        return
    n, _, name = spec.partition(":")
    if int(n) != _s.steps:
        return
    sig = getattr(signal, f"SIG{name or 'INT'}")
    # the whole process group, as a terminal's Ctrl-C or `timeout` does (only when we lead it: never the caller's)
    if os.getpgrp() == os.getpid():
        os.killpg(os.getpgrp(), sig)
    else:
        os.kill(os.getpid(), sig)
