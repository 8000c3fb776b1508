"""Zip plumbing for ``wheel``: copy members as raw compressed bytes (CRC-32 checked on the way), write new
ones, publish the output only when complete, and check a wheel against its RECORD.

The output is an unnamed temporary file in the output directory (Linux ``O_TMPFILE``; elsewhere
``<name>.whl.part``, removed on any error and by the next run after a kill) that gets its name only through
``publish()``: the directory never holds a partial or unverified wheel.
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import os
import struct
import zipfile
import zlib
from pathlib import Path

from tools import interrupt
from tools.common import PatchsetError, progress
from tools.distinfo import parse_record

_CHUNK = 1 << 20


def corrupt(src: Path, info: zipfile.ZipInfo, why: str) -> PatchsetError:
    return PatchsetError(f"{src}:{info.filename}", f"corrupt member in the source wheel ({why}); "
                         "download the wheel again")


def raw_copy(zin: zipfile.ZipFile, zout: zipfile.ZipFile, info: zipfile.ZipInfo, new_name: str | None = None,
              src: Path | None = None) -> None:
    """Copy one member's compressed bytes as they are (Python's zipfile has no API for this), checking the
    CRC-32 of the uncompressed bytes on the way (stored and deflated members; others are read through zipfile)."""
    src = src or Path(str(zin.filename))
    if info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
        try:
            with zin.open(info) as f:
                while f.read(_CHUNK):
                    pass
        except (zipfile.BadZipFile, OSError, EOFError, zlib.error) as e:
            raise corrupt(src, info, str(e)) from e
    inflate = zlib.decompressobj(-15) if info.compress_type == zipfile.ZIP_DEFLATED else None
    crc = size = 0
    fp = zin.fp
    fp.seek(info.header_offset)
    h = fp.read(zipfile.sizeFileHeader)
    if len(h) != zipfile.sizeFileHeader or h[:4] != zipfile.stringFileHeader:
        raise PatchsetError(info.filename, "bad local file header in the source wheel")
    fh = struct.unpack(zipfile.structFileHeader, h)
    fp.seek(info.header_offset + zipfile.sizeFileHeader + fh[zipfile._FH_FILENAME_LENGTH] + fh[zipfile._FH_EXTRA_FIELD_LENGTH])
    new = copy.copy(info)
    if new_name is not None:
        new.filename = new.orig_filename = new_name
    new.flag_bits &= ~0x08  # sizes and CRC go in the local header; no data descriptor
    new.extra = b""
    new.header_offset = zout.fp.tell()
    zout.fp.write(new.FileHeader(zip64=None))
    left = info.compress_size
    while left:
        buf = fp.read(min(_CHUNK, left))
        if not buf:
            raise PatchsetError(f"{src}:{info.filename}", "source wheel is truncated; download the wheel again")
        zout.fp.write(buf)
        left -= len(buf)
        if inflate is not None:
            try:
                buf = inflate.decompress(buf)
            except zlib.error as e:
                raise corrupt(src, info, f"bad deflate data: {e}") from e
        if info.compress_type in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
            crc = zlib.crc32(buf, crc)
            size += len(buf)
    if inflate is not None:
        tail = inflate.flush()
        crc, size = zlib.crc32(tail, crc), size + len(tail)
    if info.compress_type in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED) and (crc != info.CRC or size != info.file_size):
        raise corrupt(src, info, f"Bad CRC-32 or size: {crc:08x}/{size} bytes, the zip directory says "
                       f"{info.CRC:08x}/{info.file_size}")
    zout.filelist.append(new)
    zout.NameToInfo[new.filename] = new
    zout.start_dir = zout.fp.tell()
    zout._didModify = True


def write_member(zout: zipfile.ZipFile, name: str, data: bytes, like: zipfile.ZipInfo | None) -> None:
    info = zipfile.ZipInfo(name, date_time=like.date_time if like else (2000, 1, 1, 0, 0, 0))
    info.external_attr = like.external_attr if like else (0o100644 << 16)
    info.create_system = like.create_system if like else 3
    info.compress_type = zipfile.ZIP_DEFLATED
    zout.writestr(info, data, compress_type=zipfile.ZIP_DEFLATED, compresslevel=6)


@contextlib.contextmanager
def staged_output(out: Path):
    """A writable file object for ``out`` that appears under that name only through ``publish()``. Setup, the
    publish step and the cleanup run with SIGINT/SIGTERM deferred (``tools.interrupt``): an interrupt anywhere
    leaves ``--out`` as it was."""
    import fcntl

    created = []  # the directories of --out this call makes: removed again if no wheel appears there
    f = named = None

    def publish():
        # the commit step: a signal that came before it is acted on before the name appears
        with interrupt.deferred():
            f.flush()
            os.fsync(f.fileno())
            interrupt.step()
            interrupt.check()
            interrupt.commit_point()
            if named is not None:
                os.replace(named, out)
                return
            link = out.with_name(f".{out.name}.{os.getpid()}.tmp")
            with contextlib.suppress(FileNotFoundError):
                link.unlink()
            # linkat(AT_SYMLINK_FOLLOW) on /proc/self/fd/N names the unnamed file (os.link uses plain link()
            # unless a dir fd is given)
            proc = os.open("/proc/self/fd", os.O_RDONLY | os.O_DIRECTORY)
            try:
                os.link(str(f.fileno()), link, src_dir_fd=proc, follow_symlinks=True)
            finally:
                os.close(proc)
            os.replace(link, out)

    try:
        with interrupt.deferred():
            d = out.parent
            while not d.exists():
                created.append(d)
                d = d.parent
            out.parent.mkdir(parents=True, exist_ok=True)
            part = out.with_name(out.name + ".part")
            if part.exists():  # left by a killed run (or by the fallback below): remove it unless a build is writing it
                try:
                    with open(part, "rb") as g:
                        fcntl.flock(g, fcntl.LOCK_EX | fcntl.LOCK_NB)
                        part.unlink()
                    progress(f"removed {part}, left by an interrupted run")
                except BlockingIOError:
                    raise PatchsetError(part, "another `wheel` run is writing this wheel") from None
            try:  # unnamed until published: a kill -9 leaves nothing behind
                f = os.fdopen(os.open(out.parent, os.O_TMPFILE | os.O_RDWR, 0o644), "w+b")
            except (AttributeError, OSError):
                named = part
                f = open(part, "w+b")
                fcntl.flock(f, fcntl.LOCK_EX)
        yield f, publish
    finally:
        with interrupt.deferred():
            if f is not None:
                f.close()
            if named is not None:
                with contextlib.suppress(FileNotFoundError):
                    named.unlink()
            if not out.exists():
                for d in created:  # deepest first; only while empty
                    with contextlib.suppress(OSError):
                        d.rmdir()


def verify_wheel(path: Path, fileobj=None) -> None:
    """Every member hashes to its RECORD row and every member is listed (RECORD itself unhashed).
    ``fileobj``: read the wheel from there (named ``path`` in errors)."""
    with zipfile.ZipFile(fileobj or path) as z:
        rec_name = [n for n in z.namelist() if n.endswith(".dist-info/RECORD")]
        if len(rec_name) != 1:
            raise PatchsetError(path, "expected exactly one .dist-info/RECORD")
        rec = parse_record(z.read(rec_name[0]).decode())
        members = [i for i in z.infolist() if not i.is_dir()]
        for i in members:
            if i.filename == rec_name[0]:
                if rec.get(i.filename, (None, ""))[0] is not None:
                    raise PatchsetError(f"{path}:{i.filename}", "RECORD must not hash itself")
                continue
            if i.filename not in rec:
                raise PatchsetError(f"{path}:{i.filename}", "member missing from RECORD")
            h = hashlib.sha256()
            with z.open(i) as f:
                while buf := f.read(_CHUNK):
                    h.update(buf)
            want, size = rec[i.filename]
            if h.hexdigest() != want or str(i.file_size) != size:
                raise PatchsetError(f"{path}:{i.filename}", "sha256 or size differs from RECORD")
        extra = set(rec) - {i.filename for i in members}
        if extra:
            raise PatchsetError(path, f"RECORD lists members not in the wheel: {sorted(extra)[:5]}")
