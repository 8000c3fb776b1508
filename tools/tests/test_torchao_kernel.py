"""tools/torchao_kernel.py: the port of csrc/da8w4/ that the kernel PR to torchao replaces its file with.

What the port is made of is checked here on text (the switches resolved, the ISA paths under their target pragmas,
no trace of our build); that it builds as torchao builds it and gives the spec's bits is
csrc/test/test_torchao_port.py's and csrc.torchao_port_da8w4_cpu's job."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from tools import torchao_kernel as tk
from tools.common import PatchsetError

REPO = Path(__file__).resolve().parents[2]


def lines(text: str) -> list[str]:
    return text.strip("\n").split("\n")


def test_unifdef_resolves_only_our_switches():
    src = lines("""
a
#if defined(DA8W4_TUNING)
tuning
#if defined(__linux__)
tuning linux
#endif
#else
plain
#endif
#if defined(__linux__)
linux
#else
other
#endif
#ifndef DA8W4_AMX_EMULATE
real tiles
#endif
#if !defined(DA8W4_HAVE_AVX2)
no avx2
#endif
#ifdef DA8W4_HAVE_AVX2
avx2
#endif
b
""")
    assert tk.unifdef(src, "x") == lines("""
a
plain
#if defined(__linux__)
linux
#else
other
#endif
real tiles
no avx2
b
""")


@pytest.mark.parametrize(
    "src,why",
    [
        (
            "#if defined(DA8W4_TUNING) && defined(__linux__)\nx\n#endif",
            "only a plain defined",
        ),
        (
            "#if defined(DA8W4_TUNING)\nx\n#elif defined(Y)\ny\n#endif",
            "#elif after a conditional",
        ),
        ("#if defined(DA8W4_TUNING)\nx\n", "not closed"),
        ("x\n#endif\n", "#endif without #if"),
    ],
)
def test_unifdef_refuses_what_it_cannot_resolve(src, why):
    with pytest.raises(PatchsetError, match=why):
        tk.unifdef(src.split("\n"), "f.cpp")


def test_committed_port_is_in_sync():
    assert tk.port_problems(REPO) == []
    assert (REPO / tk.MAIN_PORT).is_file()


def test_port_is_one_self_contained_file():
    port = tk.render(REPO / "csrc")
    assert port.startswith("// Copyright (c) Meta Platforms, Inc. and affiliates.\n")
    for gone in (
        "DA8W4_TUNING",
        "DA8W4_AMX_EMULATE",
        "DA8W4_HAVE_AVX2",
        "getenv",
        '#include "',
        "#pragma once",
        "csrc/",
        "benchmarks/",
        "kernel.h",
        "kernel_amx.cpp",
        "da8w4_linear_cpu_last_isa",
        "tile_avx2",
    ):
        assert gone not in port, gone
    # each ISA path under its guard and target pragma, popped after it
    for macro, isa in [s[1] for s in tk.SECTIONS if s[1]]:
        assert (
            f'#if defined({macro})\n#if defined(__clang__)\n#pragma clang attribute push(__attribute__((target("{isa}")))'
            in port
        )
        assert f'#pragma GCC target("{isa}")' in port
    # pushed and popped: the two ISA sections' targets, the scalar loop's and the op code's FP contraction
    assert (
        port.count("#pragma GCC push_options")
        == port.count("#pragma GCC pop_options")
        == 4
    )
    # includes first (torch's, then the standard library's), the FP-contraction pragmas after them all
    first_code = port.index("#pragma GCC optimize")
    assert max(m.start() for m in re.finditer(r"^#include", port, re.M)) < first_code
    assert port.index("#include <ATen/ATen.h>") < port.index("#include <algorithm>")
    # the layout comment of kernel.h stays, its note on our translation units goes
    assert "// Packed weight layout" in port and "ISA translation units" not in port
    assert "TORCH_LIBRARY_IMPL(torchao, CPU, m)" in port
    # one anonymous namespace around everything but the registration (the sources' own ones would nest in it),
    # and namespace da8w4 not closed just to be opened again
    assert port.count("namespace {\n") == 1 and port.index("namespace {\n") < port.index("namespace da8w4 {")
    assert not re.search(r"^}  // namespace da8w4\n+namespace da8w4 \{", port, re.M)
    depth = 0
    for line in port.splitlines():
        if re.match(r"\s*#\s*if", line):
            depth += 1
        elif re.match(r"\s*#\s*endif", line):
            depth -= 1
        assert depth >= 0
    assert depth == 0


def test_main_port_is_built_per_isa_level_and_registers_nothing():
    # torchao main compiles *_krnl.cpp once per ISA level and registers the ops in dispatch.cpp, which calls
    # torchao::<level>::da8w4_linear_prepack_impl / da8w4_linear_impl
    port = tk.render_main(REPO / "csrc")
    assert port.startswith("// Copyright (c) Meta Platforms, Inc. and affiliates.\n")
    assert "TORCH_LIBRARY_IMPL" not in port and "DA8W4_TUNING" not in port
    assert '#include "utils.h"' in port
    assert port.index('#include "utils.h"') < port.index("namespace torchao {\nnamespace CPU_CAPABILITY {\n")
    # everything of ours internal to the level's copy; only the entry points are not
    inner = port.split("namespace CPU_CAPABILITY {\n", 1)[1]
    assert inner.lstrip("\n").startswith("namespace {\n") and port.count("namespace {\n") == 1
    after = inner.split("}  // namespace\n", 1)[1]
    assert re.findall(r"^\S.*\b(da8w4_linear\w*_impl)\(", after, re.M) == [
        "da8w4_linear_prepack_impl",
        "da8w4_linear_impl",
    ]
    # the vector paths in every copy above DEFAULT (AVX512, AVX10_2; whichever CPU_CAPABILITY_* setup.py defines
    # there), AMX only where TORCHAO_CPU_DISPATCH allows it; no torch/library.h, as nothing is registered here
    gate = port[port.index("#if (defined(CPU_CAPABILITY_AVX512)") : port.index("#define DA8W4_HAVE_AVX512VNNI")]
    assert all(f"defined(CPU_CAPABILITY_{lvl})" in gate for lvl in ("AVX512", "AVX512_VNNI", "AVX10_2"))
    assert "torch/library.h" not in port and "torch/library.h" in tk.render(REPO / "csrc")
    amx = port[port.index("bool amx_usable() {") :]
    assert amx.index("if (!brgemm_enabled())") < amx.index("at::cpu::init_amx()")
    # the 0.18.0 port: the same kernel, without torchao main's switch
    assert "brgemm_enabled" not in tk.render(REPO / "csrc")


def test_drift_is_found_and_generate_fixes_it(tmp_path):
    root = tmp_path / "repo"
    shutil.copytree(REPO / "csrc" / "da8w4", root / "csrc" / "da8w4")
    assert tk.port_problems(root) == [
        (str(root / path), "missing; run `python -m tools generate`")
        for path in (tk.PORT, tk.MAIN_PORT)
    ]
    assert tk.write_port(root) is True
    assert tk.port_problems(root) == [] and tk.write_port(root) is False
    kernel = root / "csrc" / "da8w4" / "kernel_scalar.cpp"
    kernel.write_text(
        kernel.read_text().replace(
            "out[j] = p.bias ? p.bias[j] : 0.0f;", "out[j] = 0.0f;"
        )
    )
    problems = tk.port_problems(root)
    assert [where for where, _ in problems] == [
        str(root / tk.PORT),
        str(root / tk.MAIN_PORT),
    ]
    assert all("differs from" in why for _, why in problems)


def test_without_the_kernel_sources_there_is_nothing_to_port(tmp_path):
    assert not tk.has_kernel(tmp_path) and tk.port_problems(tmp_path) == []


def test_a_missing_layout_comment_is_an_error(tmp_path):
    root = tmp_path / "csrc"
    shutil.copytree(REPO / "csrc" / "da8w4", root / "da8w4")
    h = root / "da8w4" / "kernel.h"
    h.write_text(h.read_text().replace("// Packed weight layout", "// Packed layout"))
    with pytest.raises(PatchsetError, match="Packed weight layout"):
        tk.render(root)


def test_includes_move_only_where_they_can(tmp_path):
    """An include outside any #if, or a block of includes alone (nested too), moves to the top; one inside a
    conditional that also holds code is an error, not a silent unguarded include."""
    incs, body = tk._split("\n".join([
        "// a file", "#include <vector>", '#include "kernel.h"',
        "#if defined(A)", "#if defined(B)", "#include <cpuid.h>", "#endif", "#endif",
        "int f();", "#include <x86intrin.h>",
    ]), "f.cpp")
    assert incs == ["#include <vector>", "#if defined(A)", "#if defined(B)", "#include <cpuid.h>", "#endif",
                    "#endif", "#include <x86intrin.h>"]
    assert body == ["int f();"]
    assert tk._order_includes(incs)[-5:] == ["#if defined(A)", "#if defined(B)", "#include <cpuid.h>", "#endif",
                                               "#endif"]
    ordered = tk._order_includes(incs)
    k = ordered.index("#include <x86intrin.h>")  # an intrinsics header: only where the ISA sections are
    assert ordered[k - 1:k + 2] == ["#if defined(DA8W4_HAVE_AVX512VNNI)", "#include <x86intrin.h>", "#endif"]
    with pytest.raises(PatchsetError, match="inside a conditional that holds code too"):
        tk._split("\n".join(["#if defined(__linux__)", "int g();", "#include <sys/syscall.h>", "#endif"]), "g.cpp")
