"""Thin, deterministic wrappers around the git command line, shared by bases/generate/check/apply/export-pr.

Two environments:

* ``isolated_env()`` for everything whose *output* we keep (pristine trees, generated patches, PR branches):
  no system/global git config, C locale, fixed author/committer, so a developer's ``diff.algorithm``,
  ``format.signature``, ``core.autocrlf`` ... can never change a byte of ``patches/``.
* the caller's own environment for ``apply`` onto a user's checkout (their identity, their hooks).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import re
import subprocess
from pathlib import Path

from tools import interrupt
from tools.common import PatchsetError

# A fixed identity for commits that are ours (pristine bases, generated patches, PR branches).
PATCHSET_AUTHOR = ("inductor-patchset", "inductor-patchset@users.noreply.github.com")
PRISTINE_DATE = "2000-01-01T00:00:00+0000"
# pristine base commits have their own identity, so that a change to PATCHSET_AUTHOR never changes them
PRISTINE_AUTHOR = ("pristine", "pristine@torch-patchset.invalid")

# Electron's export flags plus the ones that pin the remaining heuristics: output is a function of
# the commit alone (no dates of export, no stats, no commit ids, no git version signature).
FORMAT_PATCH_FLAGS = (
    "--zero-commit",
    "--full-index",
    "--no-signature",
    "--keep-subject",
    "--no-stat",
    "--no-numbered",
    "--no-renames",
    "--encoding=UTF-8",
)


def isolated_env(*, date: str | None = None, extra: dict[str, str] | None = None, author: tuple[str, str] = PATCHSET_AUTHOR) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(
        GIT_CONFIG_NOSYSTEM="1",
        GIT_CONFIG_GLOBAL=os.devnull,
        LC_ALL="C",
        LANG="C",
        TZ="UTC",
        GIT_AUTHOR_NAME=author[0],
        GIT_AUTHOR_EMAIL=author[1],
        GIT_COMMITTER_NAME=author[0],
        GIT_COMMITTER_EMAIL=author[1],
        GIT_TERMINAL_PROMPT="0",
    )
    if date:
        env["GIT_AUTHOR_DATE"] = date
        env["GIT_COMMITTER_DATE"] = date
    if extra:
        env.update(extra)
    return env


def user_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ)
    env["LC_ALL"] = "C"  # we parse git's messages
    env["GIT_TERMINAL_PROMPT"] = "0"
    if extra:
        env.update(extra)
    return env


@dataclasses.dataclass
class GitResult:
    args: list[str]
    returncode: int
    stdout: str
    stderr: str

    @property
    def ok(self) -> bool:
        return self.returncode == 0

    @property
    def output(self) -> str:
        return (self.stdout + self.stderr).strip()


def git(
    *args: str | os.PathLike,
    cwd: str | os.PathLike,
    env: dict[str, str] | None = None,
    check: bool = True,
    input: str | bytes | None = None,
    binary: bool = False,
    what: str | os.PathLike | None = None,
) -> GitResult:
    """Run ``git args`` in ``cwd``. With ``check``, a failure is a PatchsetError naming ``what`` (or cwd)."""
    argv = ["git", *map(str, args)]
    if isinstance(input, str):
        input = input.encode()
    # git never sees SIGINT/SIGTERM (blocked when it starts, inherited across exec): a Ctrl-C cannot stop it half-way
    # through writing a file or the index. In a guarded command (tools.interrupt) the signal takes effect once git
    # is done; elsewhere it interrupts the wait and git is killed (as subprocess.run does on KeyboardInterrupt).
    with interrupt.deferred() if interrupt.active() else contextlib.nullcontext():
        try:
            with interrupt.blocked_for_child():
                proc = subprocess.Popen(argv, cwd=cwd, env=env if env is not None else isolated_env(),
                                        stdin=subprocess.PIPE if input is not None else subprocess.DEVNULL,
                                        stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        except FileNotFoundError as e:
            raise PatchsetError("git", "git is not installed or not on PATH") from e
        with proc:
            interrupt.step()
            try:
                stdout, stderr = proc.communicate(input)
            except BaseException:
                proc.kill()
                raise
    out = stdout if binary else stdout.decode("utf-8", "replace")
    res = GitResult(argv, proc.returncode, out, stderr.decode("utf-8", "replace"))
    if check and not res.ok:
        raise PatchsetError(what or cwd, f"`{' '.join(argv[:4])}{' ...' if len(argv) > 4 else ''}` failed: {res.output}")
    return res


def rev_parse(repo: Path, rev: str = "HEAD", env: dict[str, str] | None = None) -> str | None:
    r = git("rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}", cwd=repo, env=env, check=False)
    return r.stdout.strip() if r.ok else None


def is_git_repo(path: Path) -> bool:
    if not path.is_dir():
        return False
    r = git("rev-parse", "--show-toplevel", cwd=path, check=False, env=user_env())
    return r.ok and Path(r.stdout.strip()).resolve() == path.resolve()


def status_porcelain(repo: Path, env: dict[str, str] | None = None, untracked: bool = True) -> list[str]:
    """Dirty entries as ``'XY path'`` lines (tracked changes, and untracked files unless ``untracked=False``).
    Submodules are ignored: no patch of ours touches one, and a built checkout has dirty submodules."""
    r = git(
        "--no-optional-locks",  # a read: never rewrite the user's index (git status refreshes it otherwise)
        "status",
        "--porcelain=v1",
        "--ignore-submodules=all",
        f"--untracked-files={'normal' if untracked else 'no'}",
        cwd=repo,
        env=env,
    )
    return [line for line in r.stdout.splitlines() if line.strip()]


def clone_local(src: Path, dst: Path, *, checkout: bool = True, shared: bool = True) -> None:
    """A fast local clone. ``shared`` borrows src's objects (scratch use only: the clone breaks if src goes);
    otherwise objects are hard-linked so the clone stands alone."""
    args = ["clone", "--quiet", "--shared" if shared else "--local"]
    if not checkout:
        args.append("--no-checkout")
    git(*args, src, dst, cwd=dst.parent, what=src)


_FAILED_AT = [
    re.compile(r"error: patch failed: (?P<file>[^\s:]+):(?P<line>\d+)"),
    re.compile(r"error: (?P<file>[^\s:]+): (?P<why>does not exist in index|already exists in (?:working directory|index)|No such file or directory|does not match index|patch does not apply)"),
    re.compile(r"error: (?P<why>corrupt patch|patch with only garbage|No valid patches in input|unrecognized input).*?(?:line (?P<line>\d+))?$", re.M),
]


def explain_apply_failure_files(output: str) -> tuple[list[str], str]:
    """(every file git apply/am names as failing, in order; short reason) out of its stderr."""
    files: list[str] = []
    reasons = []
    for line in output.splitlines():
        line = line.strip()
        m = _FAILED_AT[0].search(line)
        if m:
            files.append(m.group("file"))
            reasons.append(f"hunk at {m.group('file')}:{m.group('line')} does not match (no fuzz is allowed)")
            continue
        m = _FAILED_AT[1].search(line)
        if m:
            files.append(m.group("file"))
            if m.group("why") != "patch does not apply":
                reasons.append(f"{m.group('file')} {m.group('why')}")
            continue
        m = _FAILED_AT[2].search(line)
        if m:
            reasons.append(line.removeprefix("error: "))
    if not reasons:
        reasons = [output.strip().splitlines()[0] if output.strip() else "git reported no reason"]
    return list(dict.fromkeys(files)), "; ".join(dict.fromkeys(reasons))


def explain_apply_failure(output: str) -> tuple[str | None, str]:
    """(first file, short reason) out of git apply/am's stderr."""
    files, reason = explain_apply_failure_files(output)
    return (files[0] if files else None), reason


def apply_failure_text(output: str) -> str:
    """explain_apply_failure as one phrase: 'reason [file]'."""
    file, reason = explain_apply_failure(output)
    return reason + (f" [{file}]" if file else "")


def format_patch(repo: Path, commit: str) -> bytes:
    """``commit`` as a byte-stable ``git format-patch`` file (FORMAT_PATCH_FLAGS, isolated config)."""
    return git("format-patch", *FORMAT_PATCH_FLAGS, "--stdout", "-1", commit, cwd=repo, env=isolated_env(), binary=True).stdout
