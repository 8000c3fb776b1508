"""The install transaction's state in torch, its lock and its journal.

``<site-packages>/torch/_inductor/.patchset/`` holds ``manifest.json`` (what is installed), ``backup/<path>``
(the pristine bytes of every file we modified, and of their bytecode) and, only while a transaction runs,
``journal.json``. It sits inside the package it changes, so ``rm -rf torch`` takes it along, and its dotted
name is not an importable module, so neither ``import`` nor Inductor's ``torch_key()`` ever sees it. The lock
is an ``flock`` on the site-packages directory itself (no lock file).

A journal is fsynced before any torch file is touched; backups are written, then each target is replaced
atomically; the manifest is written last and the journal removed. If anything fails, or the process is
killed, the journal tells the next ``install``/``uninstall``/``status`` (``recover``) to put every journaled
file back to its pristine bytes. An interrupted ``uninstall`` is completed the same way (its goal is the
pristine state too), so after a kill torch is stock, byte for byte.

SIGINT and SIGTERM (``tools/interrupt.py``) are handled in the process itself: each transaction runs with them
deferred and checks for one at its commit point; one that came is rolled back at once, to the state before the
command (for ``uninstall`` and ``install --replace``: the installed patch set, exactly, from a ``FileSnapshot``).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import sys
from pathlib import Path

from tools import interrupt
from tools.common import PatchsetError, progress
from tools.fsutil import FileSnapshot, fsync_dir, sha256_file, write_atomic, write_json

STATE_DIR = "torch/_inductor/.patchset"
MANIFEST_FORMAT = 1
# Fault injection for tests: exit abruptly (like SIGKILL) after this many target files were replaced.
CRASH_ENV = "TORCH_PATCHSET_CRASH_AFTER"


@contextlib.contextmanager
def lock(site: Path):
    """An exclusive flock on the site-packages directory itself: no lock file to leave behind."""
    import fcntl

    try:
        fd = os.open(site, os.O_RDONLY | os.O_DIRECTORY)
    except OSError as e:
        raise PatchsetError(site, f"cannot open site-packages: {e.strerror}") from e
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise PatchsetError(site, "another install/uninstall/status is running on this torch") from None
        yield
    finally:
        os.close(fd)


# ----------------------------------------------------------------------------- state


class State:
    def __init__(self, site: Path):
        self.site = site
        self.dir = site / STATE_DIR
        self.manifest_path = self.dir / "manifest.json"
        self.journal_path = self.dir / "journal.json"
        self.backup_dir = self.dir / "backup"

    def _load(self, p: Path):
        if not p.exists():
            return None
        try:
            return json.loads(p.read_text())
        except (OSError, ValueError) as e:
            raise PatchsetError(p, f"unreadable ({e}); remove it only after restoring torch by reinstalling it") from e

    def manifest(self):
        m = self._load(self.manifest_path)
        if m is not None and m.get("format") != MANIFEST_FORMAT:
            raise PatchsetError(self.manifest_path, f"manifest format {m.get('format')} is not {MANIFEST_FORMAT}")
        return m

    def journal(self):
        return self._load(self.journal_path)


def _remove_pycache_for(target: Path) -> None:
    cache = target.parent / "__pycache__"
    if target.suffix == ".py" and cache.is_dir():
        for pyc in cache.glob(f"{target.stem}.*.pyc"):
            with contextlib.suppress(FileNotFoundError):
                pyc.unlink()
        with contextlib.suppress(OSError):
            cache.rmdir()  # only succeeds if our .pyc was all it held


def pycs_of(site: Path, rel: str) -> list[Path]:
    """The bytecode caches of module ``rel`` (``__pycache__/<stem>.<tag>[.opt-N].pyc``)."""
    target = site / rel
    cache = target.parent / "__pycache__"
    if target.suffix != ".py" or not cache.is_dir():
        return []
    return sorted(cache.glob(f"{target.stem}.*.pyc"))


def _restore_pycs(st: State, e: dict) -> None:
    """A modified module's bytecode back to what it was before install: the .pyc files compiled from the patched
    source go, the ones that existed before come back from the backup (a missing or damaged backup: the .pyc is
    just removed, Python rebuilds it from the restored source)."""
    before = {p["path"]: p["sha256"] for p in e.get("pyc_before", [])}
    for pyc in pycs_of(st.site, e["path"]):
        rel = pyc.relative_to(st.site).as_posix()
        if before.get(rel) != sha256_file(pyc):
            with contextlib.suppress(FileNotFoundError):
                pyc.unlink()
    for rel, h in before.items():
        target, backup = st.site / rel, st.backup_dir / rel
        if sha256_file(target) != h and sha256_file(backup) == h:
            write_atomic(target, backup.read_bytes(), mode=os.stat(backup).st_mode & 0o7777, mtime_from=backup)


def restore_to_pristine(st: State, files: list[dict], created_dirs: list[str]) -> None:
    """Make every listed file equal its 'before' state; idempotent, safe to rerun after a crash."""
    for e in files:
        target = st.site / e["path"]
        tmp = target.with_name(f".{target.name}.patchset-tmp")
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        before = e["sha256_before"]
        if before is None:
            if target.exists() or target.is_symlink():
                target.unlink()
            _remove_pycache_for(target)
            continue
        if sha256_file(target) != before:
            backup = st.backup_dir / e["path"]
            if sha256_file(backup) != before:
                raise PatchsetError(target, f"cannot restore: backup {backup} is missing or does not match the recorded sha256")
            write_atomic(target, backup.read_bytes(), mode=os.stat(backup).st_mode & 0o7777, mtime_from=backup)
        _restore_pycs(st, e)
    for d in sorted(created_dirs, key=lambda p: -p.count("/")):
        p = st.site / d
        with contextlib.suppress(FileNotFoundError):
            pc = p / "__pycache__"
            if pc.is_dir() and not any(f for f in pc.iterdir() if not f.name.endswith(".pyc")):
                shutil.rmtree(pc)
        with contextlib.suppress(OSError):
            p.rmdir()


def clear_state(st: State) -> None:
    with contextlib.suppress(FileNotFoundError):
        st.manifest_path.unlink()
    shutil.rmtree(st.backup_dir, ignore_errors=True)
    with contextlib.suppress(FileNotFoundError):
        st.journal_path.unlink()
    with contextlib.suppress(OSError):
        st.dir.rmdir()


def recover(st: State, quiet: bool = False) -> bool:
    """Finish or roll back an interrupted transaction. Returns True if one was found."""
    with interrupt.deferred():
        j = st.journal()
        if j is None:
            if st.dir.exists() and st.manifest() is None:
                # died before its journal was durable: no target was touched yet, only our own dir holds leftovers
                shutil.rmtree(st.dir, ignore_errors=True)
            return False
        if not quiet:
            progress(f"found an interrupted {j['op']} ({st.journal_path}); restoring {len(j['files'])} file(s) to "
                     "stock torch")
        restore_to_pristine(st, j["files"], j.get("created_dirs", []))
        clear_state(st)
        if not quiet:
            progress("recovered: torch is stock again")
        return True


def maybe_crash(done: int) -> None:
    n = os.environ.get(CRASH_ENV)
    if n is not None and done >= int(n):
        sys.stderr.write(f"[patchset] {CRASH_ENV}={n}: simulating a crash\n")
        sys.stderr.flush()
        os._exit(86)


def commit_install(st: State, plan: dict) -> None:
    """Write ``plan`` (``tools.install.plan_install``) into torch. Runs with SIGINT/SIGTERM deferred; one that came
    meanwhile is acted on just before the manifest is written: everything is rolled back and ``Interrupted``
    raised."""
    with interrupt.deferred():
        _commit_install(st, plan)


def _commit_install(st: State, plan: dict) -> None:
    m = plan["manifest"]
    files = m["files"]
    st.dir.mkdir(parents=True, exist_ok=True)
    journal = {"op": "install", "files": files, "created_dirs": m["created_dirs"]}
    write_json(st.journal_path, journal)  # from here on, any interruption is rolled back
    interrupt.step()
    try:
        progress(f"backing up and staging {len(files)} file(s) in {st.dir}")
        for e in files:
            rel = e["path"]
            if e["sha256_before"] is not None:
                src = st.site / rel
                b = st.backup_dir / rel
                b.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(src, b)  # keeps mode and mtime, so uninstall restores them too
                if sha256_file(b) != e["sha256_before"]:
                    raise PatchsetError(b, "backup does not match the file it copies (disk error?)")
                for pyc in e.get("pyc_before", []):  # stock bytecode (pip compiles it): restored by uninstall
                    b = st.backup_dir / pyc["path"]
                    b.parent.mkdir(parents=True, exist_ok=True)
                    with contextlib.suppress(FileNotFoundError):
                        shutil.copy2(st.site / pyc["path"], b)
        for i, e in enumerate(files, 1):
            rel = e["path"]
            target = st.site / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            mode = (os.stat(target).st_mode & 0o7777) if target.exists() else 0o644
            write_atomic(target, plan["contents"][rel], mode=mode)
            for pyc in pycs_of(st.site, rel):  # stale: compiled from the stock source
                with contextlib.suppress(FileNotFoundError):
                    pyc.unlink()
            progress(f"  [{i}/{len(files)}] {e['action']:8} {rel}")
            interrupt.step()
            maybe_crash(i)
        interrupt.check()  # the commit point: a signal that came while writing rolls it all back
        interrupt.commit_point()
        write_json(st.manifest_path, m)
        st.journal_path.unlink()
        fsync_dir(st.dir)
    except BaseException as exc:
        if not isinstance(exc, interrupt.Interrupted):
            progress(f"install failed ({exc!r}); rolling back")
        recover(st, quiet=isinstance(exc, interrupt.Interrupted))
        if isinstance(exc, OSError):
            raise PatchsetError(exc.filename or st.dir, f"install failed and was rolled back: {exc.strerror or exc}") from exc
        raise


def snapshot_installed(st: State, m: dict) -> FileSnapshot:
    """The installed patch set ``m`` as it is now: its files, their bytecode (and the stock bytecode that an
    uninstall would bring back, absent now) and our state dir, to put back exactly (bytes, modes, mtimes) when an
    uninstall (or the uninstall half of ``install --replace``) must be undone after ``recover``."""
    paths = [p for p in sorted(st.dir.rglob("*")) if not p.is_dir()] if st.dir.is_dir() else []
    for e in m["files"]:
        paths.append(st.site / e["path"])
        paths += pycs_of(st.site, e["path"])
        paths += [st.site / p["path"] for p in e.get("pyc_before", [])]
    return FileSnapshot(list(dict.fromkeys(paths)))


def commit_uninstall(st: State, m: dict, final: bool = True) -> None:
    """Restore stock torch. Runs with SIGINT/SIGTERM deferred; with ``final``, a signal that came meanwhile is
    raised (``Interrupted``) before the state is cleared, with the journal in place (the caller undoes the
    uninstall: ``recover``, then ``commit_install(reinstall_plan(...))``). Not ``final``: the first step of
    ``install --replace``, whose own commit point comes later."""
    files = m["files"]
    with interrupt.deferred():
        write_json(st.journal_path, {"op": "uninstall", "files": files, "created_dirs": m.get("created_dirs", [])})
        interrupt.step()
        try:
            for i, e in enumerate(files, 1):
                restore_to_pristine(st, [e], [])
                progress(f"  [{i}/{len(files)}] {'removed' if e['sha256_before'] is None else 'restored':8} {e['path']}")
                interrupt.step()
                maybe_crash(i)
            restore_to_pristine(st, [], m.get("created_dirs", []))
            if final:
                interrupt.check()
                interrupt.commit_point()
            clear_state(st)
        except interrupt.Interrupted:
            raise
        except BaseException:
            progress("uninstall interrupted; the journal stays so the next command completes it")
            raise


def verify_manifest(st: State, m: dict, allow_stock: bool) -> list[str]:
    """Files that match neither the installed state (nor, if allow_stock, the stock state)."""
    bad = []
    for e in m["files"]:
        cur = sha256_file(st.site / e["path"])
        ok = {e["sha256_after"]} | ({e["sha256_before"]} if allow_stock else set())
        if cur not in ok:
            bad.append(e["path"])
        elif e["sha256_before"] is not None and sha256_file(st.backup_dir / e["path"]) != e["sha256_before"]:
            bad.append(f"{STATE_DIR}/backup/{e['path']}")
    return bad
