"""Our da8w4 CPU kernel (``csrc/da8w4/``) as the one file torchao 0.18.0 builds it from.

torchao 0.18.0 implements ``torchao::da8w4_linear_prepack_cpu`` and ``torchao::da8w4_linear_cpu`` in one file,
``torchao/csrc/cpu/aten_kernels/da8w4_linear.cpp``, which its ``setup.py`` compiles into ``torchao._C`` with every
other kernel, on Linux with ``USE_CPU_KERNELS=1``: ``-O3``, and where the build machine has AVX-512
``-DCPU_CAPABILITY_AVX512 -march=native -mfma -fopenmp`` (``-DCPU_CAPABILITY_AVX512_VNNI`` with VNNI). Our kernel is
several translation units, each ISA path compiled with its own ``-m`` flags and chosen at run time. ``render`` joins
them into that one file, which the kernel PR to torchao replaces whole:

- each ISA path is compiled for its ISA by a target pragma around it (GCC's ``push_options``/``target``, clang's
  ``attribute push``) instead of by its file's flags, so the AVX512-VNNI and AMX paths exist whatever ``-march``
  the build machine gets, and the run-time checks pick one as in our build. The AVX2 path stays ours: torchao builds
  its CPU kernels with no ISA flags where AVX-512 is missing;
- the build's own switches are resolved as that file is built: no ``DA8W4_TUNING`` (the environment overrides and
  the "which ISA ran" query our tests and benchmarks use), no ``DA8W4_AMX_EMULATE`` (tile instructions emulated for
  tests), no ``DA8W4_AMX_KEEP_TILE_MACROS`` (the AMX breakdown benchmark's), no AVX2 path;
- every ``#include <...>`` moves to the top, ahead of the FP-contraction pragma; ``#include "kernel.h"`` and
  ``#pragma once`` go, as do each file's opening comment (about its place in our build), except the packed-layout
  part of ``kernel.h``'s.

The result is ``upstream-prs/pytorch-ao/da8w4_linear.cpp``: ``python -m tools generate`` writes it and ``python -m
tools check`` fails where it differs from ``render()``. ``csrc/test/torchao_port_plugin.py`` builds it with
torchao's flags and runs torchao's own da8w4 tests against it.

torchao's main branch has moved the kernel: setup.py builds ``aten_kernels/da8w4_linear_krnl.cpp`` once per ISA
level and ``dispatch.cpp`` registers the ops. ``render_main`` writes the same kernel for it,
``upstream-prs/pytorch-ao/da8w4_linear_krnl.cpp`` (kept in sync the same way; ``csrc/test/test_torchao_main_port.py``
builds it per level, ``csrc/test/torchao_main_plugin.py`` with main's own dispatch.cpp).
"""

from __future__ import annotations

import re
from pathlib import Path

from tools.common import PatchsetError

PORT = Path("upstream-prs/pytorch-ao/da8w4_linear.cpp")
TORCHAO_PATH = "torchao/csrc/cpu/aten_kernels/da8w4_linear.cpp"
# In this order: the interface, the ISA paths, then the operators that call them.
KERNEL_H = "kernel.h"
LAYOUT_COMMENT = "// Packed weight layout"
SECTIONS = (
    (KERNEL_H, None),
    ("kernel_scalar.cpp", None),
    ("kernel_avx512vnni.cpp", ("DA8W4_HAVE_AVX512VNNI", "avx512f,avx512bw,avx512vl,avx512vnni")),
    ("kernel_amx.cpp", ("DA8W4_HAVE_AMX", "avx512f,avx512bw,avx512vl,avx512vnni,amx-tile,amx-int8")),
    ("da8w4_linear_cpu.cpp", None),
)
REGISTRATION = "TORCH_LIBRARY_IMPL(torchao, CPU"
ANON_OPEN = "namespace {"
ANON_CLOSE = "}  // namespace"
NS_OPEN = "namespace da8w4 {"
NS_CLOSE = "}  // namespace da8w4"
# Switches of our build that the port resolves as undefined.
UNDEFINED = ("DA8W4_TUNING", "DA8W4_AMX_EMULATE", "DA8W4_HAVE_AVX2", "DA8W4_AMX_KEEP_TILE_MACROS")
# Defined in the port for torchao's main branch: AMX only where TORCHAO_CPU_DISPATCH allows it (its utils.h).
TORCHAO_DISPATCH = "DA8W4_TORCHAO_DISPATCH"

HEADER = """\
// Copyright (c) Meta Platforms, Inc. and affiliates.
// All rights reserved.
//
// This source code is licensed under the BSD 3-Clause license found in the
// LICENSE file in the root directory of this source tree.

// CPU kernels for torchao::da8w4_linear_prepack_cpu and torchao::da8w4_linear_cpu:
// int8 dynamic activations times int4 weights (group-wise scales and zero points).
// Three paths, the best the CPU runs picked at run time: AMX int8 (TMUL tiles, from 8
// rows), AVX512-VNNI register tiles (fewer rows, and a CPU without AMX), and a portable
// scalar loop. Each path is compiled for its ISA by a target pragma, whatever -march the
// build gets, and every one gives the same bits: the int32 block products are exact
// (modulo 2^32, as int32 wraps) and the fp32 epilogue is the same sequence of IEEE
// operations, an FMA only where its result is provably the same.
"""

ISA_MACROS = """\
// The AVX512-VNNI and AMX paths: x86-64 with a compiler that has their intrinsics (AMX:
// GCC 11, clang 13); AMX also needs Linux, which grants a process the tile state.
#if defined(__x86_64__) && \\
    ((defined(__clang__) && __clang_major__ >= 13) || (!defined(__clang__) && defined(__GNUC__) && __GNUC__ >= 11))
#define DA8W4_HAVE_AVX512VNNI 1
#if defined(__linux__)
#define DA8W4_HAVE_AMX 1
#endif
#endif
"""

MAIN_PORT = Path("upstream-prs/pytorch-ao/da8w4_linear_krnl.cpp")
MAIN_TORCHAO_PATH = "torchao/csrc/cpu/aten_kernels/da8w4_linear_krnl.cpp"

MAIN_HEADER = """\
// Copyright (c) Meta Platforms, Inc. and affiliates.
// All rights reserved.
//
// This source code is licensed under the BSD 3-Clause license found in the
// LICENSE file in the root directory of this source tree.

// CPU kernels for torchao::da8w4_linear_prepack_cpu and torchao::da8w4_linear_cpu:
// int8 dynamic activations times int4 weights (group-wise scales and zero points).
// setup.py builds this file once per ISA level and dispatch.cpp registers the ops,
// calling the level TORCHAO_CPU_DISPATCH picks. Three paths: AMX int8 (TMUL tiles, from
// 8 rows, where TORCHAO_CPU_DISPATCH allows AMX), AVX512-VNNI register tiles (fewer
// rows, and without AMX), both at the levels above DEFAULT, and a portable scalar loop
// (DEFAULT).
// Every level packs weights alike (int8, one layout) and every path gives the same bits:
// the int32 block products are exact (modulo 2^32, as int32 wraps) and the fp32 epilogue
// is the same sequence of IEEE operations, an FMA only where its result is provably the
// same.
"""

MAIN_ISA_MACROS = """\
// The AVX512-VNNI and AMX paths: in every copy setup.py builds above DEFAULT (the AVX512
// and AVX10_2 levels), never in the DEFAULT copy, which is the scalar loop. Target pragmas
// compile them, so they need no -m flags of the level; AMX on Linux (which grants a
// process the tile state) with a compiler that has its intrinsics (GCC 11, clang 13).
#if (defined(CPU_CAPABILITY_AVX512) || defined(CPU_CAPABILITY_AVX512_VNNI) || \\
     defined(CPU_CAPABILITY_AVX10_2)) && defined(__x86_64__)
#define DA8W4_HAVE_AVX512VNNI 1
#if defined(__linux__) && \\
    ((defined(__clang__) && __clang_major__ >= 13) || (!defined(__clang__) && defined(__GNUC__) && __GNUC__ >= 11))
#define DA8W4_HAVE_AMX 1
#endif
#endif
"""

MAIN_ENTRY_POINTS = """\
// The entry points dispatch.cpp declares for each ISA level.
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> da8w4_linear_prepack_impl(
    const at::Tensor& weight,
    const at::Tensor& scales,
    const at::Tensor& qzeros) {
  return da8w4::da8w4_linear_prepack_cpu(weight, scales, qzeros);
}

at::Tensor da8w4_linear_impl(
    const at::Tensor& input,
    const at::Tensor& input_scales,
    const at::Tensor& input_qzeros,
    const at::Tensor& weight,
    const at::Tensor& weight_scales,
    const at::Tensor& weight_qzeros,
    const at::Tensor& compensation,
    const std::optional<at::Tensor>& bias,
    at::ScalarType output_dtype) {
  return da8w4::da8w4_linear_cpu(
      input, input_scales, input_qzeros, weight, weight_scales, weight_qzeros, compensation, bias, output_dtype);
}
"""


_IF = re.compile(r"\s*#\s*(if|ifdef|ifndef|elif|else|endif)\b(.*)")
_OPENS = ("if", "ifdef", "ifndef")
_INCLUDE = re.compile(r"\s*#\s*include\s*([<\"])(.*)[>\"]")


def _depth_change(m: re.Match[str] | None) -> int:
    """How a line that ``_IF`` matched (or not: ``m`` None) changes the conditional nesting depth."""
    if m is None:
        return 0
    return 1 if m.group(1) in _OPENS else -1 if m.group(1) == "endif" else 0


def _resolved(kind: str, cond: str, where: str, defined: tuple[str, ...] = ()) -> bool | None:
    """The value of an ``#if``/``#ifdef``/``#ifndef`` on one of ``UNDEFINED`` or ``defined`` (None: on neither)."""
    cond = cond.split("//")[0].strip()
    known = tuple(dict.fromkeys((*UNDEFINED, TORCHAO_DISPATCH, *defined)))
    names = [n for n in known if re.search(rf"\b{n}\b", cond)]
    if not names:
        return None
    if kind in ("ifdef", "ifndef") and cond == names[0]:
        return (kind == "ifdef") == (names[0] in defined)
    m = re.fullmatch(r"(!?)\s*defined\s*\(?\s*(\w+)\s*\)?", cond)
    if kind == "if" and m and m.group(2) in known:
        return (m.group(2) in defined) != bool(m.group(1))
    raise PatchsetError(where, f"#{kind} {cond}: only a plain defined(X) or !defined(X) on {', '.join(known)} "
                               "can be resolved for the torchao port")


def unifdef(lines: list[str], where: str, defined: tuple[str, ...] = ()) -> list[str]:
    """``lines`` with every conditional on ``UNDEFINED`` (those macros undefined) or ``defined`` (defined)
    resolved: the lines of the branch taken stay, the directives and the other branch go. Other conditionals stay
    as they are."""
    out: list[str] = []
    stack: list[tuple[bool, bool]] = []  # (ours, this branch is taken); for other conditionals (False, True)
    for i, line in enumerate(lines, 1):
        m = _IF.match(line)
        live = all(taken for _, taken in stack)
        if m:
            kind, cond = m.group(1), m.group(2)
            if kind in _OPENS:
                value = _resolved(kind, cond, f"{where}:{i}", defined)
                if value is not None:
                    stack.append((True, value))
                    continue
                stack.append((False, True))
            elif not stack:
                raise PatchsetError(f"{where}:{i}", f"#{kind} without #if")
            elif stack[-1][0]:
                if kind == "elif":
                    raise PatchsetError(f"{where}:{i}", "#elif after a conditional on a switch the port resolves")
                if kind == "else":
                    stack[-1] = (True, not stack[-1][1])
                else:
                    stack.pop()
                continue
            elif kind == "endif":
                stack.pop()
            if live:
                out.append(line)
            continue
        if live:
            out.append(line)
    if stack:
        raise PatchsetError(where, "an #if is not closed")
    return out


def _split(text: str, name: str) -> tuple[list[str], list[str]]:
    """A source file as (its ``#include <...>`` lines, a block of them that was conditional kept in its ``#if``; the
    rest), its opening comment dropped (``kernel.h``: all but the packed-layout part), ``#pragma once`` and local
    includes too. An include inside a conditional that also holds code cannot be hoisted alone: an error."""
    lines = text.splitlines()
    i = 0
    comment: list[str] = []
    while i < len(lines) and lines[i].startswith("//"):
        comment.append(lines[i])
        i += 1
    kept: list[str] = []
    if name == KERNEL_H:
        starts = [k for k, line in enumerate(comment) if line.startswith(LAYOUT_COMMENT)]
        if not starts:
            raise PatchsetError(name, f"no {LAYOUT_COMMENT!r} paragraph in its opening comment")
        kept = comment[starts[0]:]
    includes: list[str] = []
    body: list[str] = list(kept)
    rest = lines[i:]
    j = depth = 0
    while j < len(rest):
        line = rest[j]
        inc = _INCLUDE.match(line)
        if line.strip() == "#pragma once" or (inc and inc.group(1) == '"'):
            j += 1
            continue
        if inc and depth:
            raise PatchsetError(f"{name}:{i + j + 1}", f"{line.strip()} inside a conditional that holds code too: "
                                                       "only an include outside any #if, or an #if block of "
                                                       "includes alone, can move to the port's top")
        if inc:
            includes.append(line)
            j += 1
            continue
        block = _include_block(rest, j) if depth == 0 else []
        if block:
            includes += block
            j += len(block)
            continue
        depth += _depth_change(_IF.match(line))
        body.append(line)
        j += 1
    return includes, body


def _include_block(lines: list[str], j: int) -> list[str]:
    """The ``#if ... #endif`` block at ``j`` (nested ones inside it too) when it holds only includes and
    conditionals, else []."""
    if _depth_change(_IF.match(lines[j])) != 1:
        return []
    depth = 0
    for k in range(j, len(lines)):
        m = _IF.match(lines[k])
        if m:
            depth += _depth_change(m)
            if depth == 0:
                block = lines[j:k + 1]
                return block if any(_INCLUDE.match(x) for x in block) else []
        elif not _INCLUDE.match(lines[k]):
            return []
    return []


def _target(isa: str, body: list[str], macro: str) -> list[str]:
    return [
        f"#if defined({macro})",
        "#if defined(__clang__)",
        f'#pragma clang attribute push(__attribute__((target("{isa}"))), apply_to = function)',
        "#else",
        "#pragma GCC push_options",
        f'#pragma GCC target("{isa}")',
        "#endif",
        "",
        *body,
        "",
        "#if defined(__clang__)",
        "#pragma clang attribute pop",
        "#else",
        "#pragma GCC pop_options",
        "#endif",
        f"#endif  // defined({macro})",
    ]


def _sections(csrc: Path, defined: tuple[str, ...] = ()) -> tuple[list[str], list[str]]:
    """(the includes, the code) of ``SECTIONS`` joined, each ISA path under its target pragma, the code's
    registration block at its end as in ``da8w4_linear_cpu.cpp``."""
    includes: list[str] = []
    code: list[str] = []
    for name, isa in SECTIONS:
        path = csrc / "da8w4" / name
        try:
            text = path.read_text()
        except OSError as e:
            raise PatchsetError(path, f"cannot read the kernel source: {e}") from e
        incs, body = _split(text, name)
        body = unifdef(body, str(path), defined)
        includes += unifdef(incs, str(path), defined)
        if isa is not None:
            body = _target(isa[1], body, isa[0])
        code += [*body, ""]
    registrations = [k for k, line in enumerate(code) if line.startswith(REGISTRATION)]
    if len(registrations) != 1:
        raise PatchsetError(csrc / "da8w4", f"expected one {REGISTRATION}...) block, found {len(registrations)}")
    return includes, code


def _registration(code: list[str]) -> tuple[int, int]:
    """[start, end) of the ``TORCH_LIBRARY_IMPL`` block in ``code``."""
    r = next(k for k, line in enumerate(code) if line.startswith(REGISTRATION))
    end = next(k for k in range(r, len(code)) if code[k] == "}") + 1
    return r, end


def _finish(out: list[str]) -> str:
    text = "\n".join(out).rstrip("\n") + "\n"
    return re.sub(r"\n{3,}", "\n\n", text)


def render(csrc: Path) -> str:
    """The port of ``csrc/da8w4/`` (see the module docstring)."""
    includes, code = _sections(csrc)
    # everything but the registration in one anonymous namespace: nothing the file defines is visible to (or
    # interposable by) the other files of torchao._C; the sources' own anonymous namespaces would nest in it
    r, _ = _registration(code)
    body = _join_namespaces([x for x in code[:r] if x not in (ANON_OPEN, ANON_CLOSE)])
    code = [ANON_OPEN, "", *body, ANON_CLOSE, "", *code[r:]]
    return _finish([HEADER.rstrip("\n"), "", ISA_MACROS.rstrip("\n"), "", *_order_includes(includes), "", *code])


def render_main(csrc: Path) -> str:
    """The same kernel as ``render``'s, for torchao's main branch, whose setup.py compiles each
    ``aten_kernels/*_krnl.cpp`` once per ISA level (``-DCPU_CAPABILITY=DEFAULT``; ``AVX512`` with
    ``-DCPU_CAPABILITY_AVX512`` and AVX-512 ``-m`` flags; ``AVX10_2`` likewise) and whose ``dispatch.cpp`` registers the
    ops, calling ``torchao::<level>::da8w4_linear_prepack_impl`` / ``da8w4_linear_impl`` of the level it picks
    (``TORCHAO_CPU_DISPATCH``). So: no registration; the two entry points in ``torchao::CPU_CAPABILITY``,
    everything else in an anonymous namespace inside it; the AVX512-VNNI and AMX paths only in the AVX512 (and
    AVX10.2) copies, AMX only where ``brgemm_enabled()`` (``TORCHAO_CPU_DISPATCH`` at ``AMX`` or above) holds.
    The DEFAULT copy is the scalar loop. Every path packs weights alike, so the level does not change the layout."""
    includes, code = _sections(csrc, (TORCHAO_DISPATCH,))
    r, end = _registration(code)
    body = _join_namespaces([x for x in code[:r] if x not in (ANON_OPEN, ANON_CLOSE)])
    code = [
        "namespace torchao {", "namespace CPU_CAPABILITY {", "", ANON_OPEN, "", *body, ANON_CLOSE, "",
        *MAIN_ENTRY_POINTS.rstrip("\n").splitlines(), "", "}  // namespace CPU_CAPABILITY", "}  // namespace torchao",
        "", *code[end:],
    ]
    # the registration is dispatch.cpp's: nothing here needs torch/library.h
    torch_includes = [x for x in _order_includes(includes) if x.strip() != "#include <torch/library.h>"]
    return _finish([MAIN_HEADER.rstrip("\n"), "", MAIN_ISA_MACROS.rstrip("\n"), "", *torch_includes,
                    '#include "utils.h"', "", *code])


def _join_namespaces(lines: list[str]) -> list[str]:
    """``namespace da8w4`` closed and opened again with only blank lines between (one file's end, the next one's
    start) stays open instead."""
    out: list[str] = []
    for line in lines:
        if line == NS_OPEN:
            k = len(out)
            while k and not out[k - 1].strip():
                k -= 1
            if k and out[k - 1] == NS_CLOSE:
                del out[k - 1:]
                out.append("")
                continue
        out.append(line)
    return out


def _order_includes(lines: list[str]) -> list[str]:
    """Each include once: torch's headers, then the standard library's, then the intrinsics (x86-64 only: the
    ISA paths' guard), then the blocks that were conditional in their file, as they were."""
    plain: list[str] = []
    blocks: list[str] = []
    depth = 0
    for line in lines:
        m = _IF.match(line)
        depth += _depth_change(m)
        if m or depth:
            blocks.append(line)
        elif line not in plain:
            plain.append(line)
    intrinsics = [x for x in plain if _INCLUDE.match(x).group(2).endswith("intrin.h")]
    torch_ = [x for x in plain if _INCLUDE.match(x).group(2).split("/")[0] in ("ATen", "c10", "torch")]
    std = sorted(x for x in plain if x not in intrinsics and x not in torch_)
    guarded = ["#if defined(DA8W4_HAVE_AVX512VNNI)", *intrinsics, "#endif"] if intrinsics else []
    return [*torch_, *std, *guarded, *blocks]


def has_kernel(root: Path) -> bool:
    """Whether ``root`` holds the kernel's sources (a copy of the patch sources alone, as in tools/tests, does not)."""
    return (root / "csrc" / "da8w4").is_dir()


PORTS = ((PORT, render), (MAIN_PORT, render_main))


def port_problems(root: Path) -> list[tuple[str, str]]:
    """(where, why) for each committed port that differs from its render; [] when in sync or without the kernel."""
    if not has_kernel(root):
        return []
    problems = []
    for rel, fn in PORTS:
        port = root / rel
        if not port.is_file():
            problems.append((str(port), "missing; run `python -m tools generate`"))
        elif port.read_text() != fn(root / "csrc"):
            problems.append((str(port), "differs from what tools/torchao_kernel.py renders from csrc/da8w4/; run "
                                        "`python -m tools generate`"))
    return problems


def write_port(root: Path) -> bool:
    """Write the ports; whether one changed."""
    changed = False
    for rel, fn in PORTS:
        port = root / rel
        want = fn(root / "csrc")
        if port.is_file() and port.read_text() == want:
            continue
        port.parent.mkdir(parents=True, exist_ok=True)
        port.write_text(want)
        changed = True
    return changed
