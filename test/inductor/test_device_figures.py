# Owner(s): ["module: inductor"]
"""Inductor's device figures under the names GPUs report.

``torch.cuda.get_device_name()`` reports e.g. "NVIDIA H100 80GB HBM3" or
"NVIDIA H200", which the datasheet table (keyed "NVIDIA H100") missed, so
``get_device_tflops`` fell back to Triton's estimate.  Two tests guard what
older releases also got wrong: the clock Triton's estimate is given (kHz),
and ``get_gpu_dram_gbps`` reading the datasheet first.  No GPU is needed: the
device is mocked, in each of the ways ``datasheet_tops`` and
``get_device_tflops`` ask which one it is, and so is ``triton.testing``
(absent from CPU builds).
"""

import contextlib
import sys
import types
from unittest import mock

import torch
import torch._inductor.utils as inductor_utils
from torch._dynamo.device_interface import CudaInterface
from torch._inductor.analysis import device_info
from torch._inductor.analysis.device_info import datasheet_tops, lookup_device_info
from torch._inductor.test_case import run_tests, TestCase
from torch.testing._internal.common_utils import (
    instantiate_parametrized_tests,
    parametrize,
)


# reported name -> dense datasheet figures (bf16, fp32, tf32, DRAM bandwidth);
# Tensor Core rows of the Hopper and Blackwell datasheets are with sparsity
REPORTED = {
    "NVIDIA H100 80GB HBM3": (1979 / 2, 67, 989 / 2, 3350),
    "NVIDIA H100 PCIe": (1513 / 2, 51, 756 / 2, 2000),
    "NVIDIA H100 NVL": (1671 / 2, 60, 835 / 2, 3900),
    "NVIDIA H200": (1979 / 2, 67, 989 / 2, 4800),
    "NVIDIA H200 NVL": (1671 / 2, 60, 835 / 2, 4800),
    "NVIDIA A100-SXM4-80GB": (312, 19.5, 156, 2039),
    "NVIDIA A100-SXM4-40GB": (312, 19.5, 156, 1555),
    "NVIDIA A100 80GB PCIe": (312, 19.5, 156, 1935),
    "NVIDIA A100-PCIE-40GB": (312, 19.5, 156, 1555),
    "NVIDIA B200": (4500 / 2, 75, 2250 / 2, 7700),
}

# names no known part reports: a variant, a MIG slice, a family's neighbour
UNKNOWN = (
    "NVIDIA H100 XYZ",
    "NVIDIA H100 80GB HBM3 MIG 1g.10gb",
    "NVIDIA H200 PCIe",
    "NVIDIA H20",
)


def _clear_figure_caches():
    # get_device_tflops is functools.cache'd; where it takes a device, the
    # per-device function behind it is
    for fn in (
        inductor_utils.get_device_tflops,
        getattr(inductor_utils, "_get_device_tflops", None),
        inductor_utils.get_gpu_dram_gbps,
    ):
        if hasattr(fn, "cache_clear"):
            fn.cache_clear()


@contextlib.contextmanager
def _reported_device(name, capability=(9, 0)):
    """A CUDA device that reports ``name``, however the code under test asks."""
    props = types.SimpleNamespace(name=name, major=capability[0], minor=capability[1])
    with contextlib.ExitStack() as stack:
        for target, value in (
            ("torch.cuda.is_available", lambda: True),
            ("torch.cuda.get_device_name", lambda *a, **k: name),
            ("torch.cuda.get_device_capability", lambda *a, **k: capability),
            ("torch.cuda.get_device_properties", lambda *a, **k: props),
            (
                "torch.accelerator.current_accelerator",
                lambda *a, **k: torch.device("cuda"),
            ),
            ("torch.accelerator.current_device_index", lambda: 0),
        ):
            stack.enter_context(mock.patch(target, value))
        stack.enter_context(
            mock.patch.object(
                CudaInterface.Worker,
                "get_device_properties",
                staticmethod(lambda device=None: props),
            )
        )
        _clear_figure_caches()
        stack.callback(_clear_figure_caches)
        yield


@contextlib.contextmanager
def _triton_dram_estimate(gbps=None):
    """Triton's DRAM estimate (None: absent, so asking Triton fails)."""
    testing = types.ModuleType("triton.testing")
    if gbps is not None:
        testing.get_dram_gbps = lambda *a, **k: gbps
    with mock.patch.dict(sys.modules, {"triton.testing": testing}):
        yield


@contextlib.contextmanager
def _triton_estimate(clock_mhz):
    """Triton's tflops helpers, recording the clock they are given."""
    clocks = []

    def get_max_tensorcore_tflops(dtype, clock_rate, device=None):
        clocks.append(clock_rate)
        return 1.0

    def get_max_simd_tflops(dtype, clock_rate, device=None):
        clocks.append(clock_rate)
        return 2.0

    testing = types.ModuleType("triton.testing")
    testing.get_max_tensorcore_tflops = get_max_tensorcore_tflops
    testing.get_max_simd_tflops = get_max_simd_tflops
    with (
        mock.patch.dict(sys.modules, {"triton.testing": testing}),
        mock.patch("torch._utils_internal.max_clock_rate", lambda *a: clock_mhz),
    ):
        yield clocks


class TestDeviceFigures(TestCase):
    @parametrize("name", list(REPORTED))
    def test_reported_name_gets_its_parts_datasheet_figures(self, name):
        bf16, fp32, tf32, dram = REPORTED[name]
        info = lookup_device_info(name)
        self.assertIsNotNone(info)
        self.assertEqual(info.dram_bw_gbs, dram)
        with _reported_device(name):
            self.assertEqual(datasheet_tops(torch.bfloat16), bf16)
            self.assertEqual(datasheet_tops(torch.float16), bf16)
            self.assertEqual(datasheet_tops(torch.float32), fp32)
            self.assertEqual(datasheet_tops(torch.float32, is_tf32=True), tf32)

    @parametrize("name", ["NVIDIA H100 80GB HBM3", "NVIDIA H100 PCIe", "NVIDIA H200"])
    def test_get_device_tflops_reads_the_reported_part(self, name):
        with _reported_device(name), _triton_estimate(1980) as clocks:
            self.assertEqual(
                inductor_utils.get_device_tflops(torch.bfloat16), REPORTED[name][0]
            )
        self.assertEqual(clocks, [])

    @parametrize("name", ["NVIDIA H100 80GB HBM3", "NVIDIA H100 PCIe", "NVIDIA H200"])
    def test_get_gpu_dram_gbps_reads_the_reported_part(self, name):
        # the datasheet's figure, without Triton's estimate (which builds
        # Triton's CUDA driver module in a cold cache)
        with _reported_device(name), _triton_dram_estimate():
            self.assertEqual(inductor_utils.get_gpu_dram_gbps(), REPORTED[name][3])

    def test_get_gpu_dram_gbps_of_an_unknown_part_is_tritons_estimate(self):
        with _reported_device("NVIDIA H100 XYZ"), _triton_dram_estimate(1234):
            self.assertEqual(inductor_utils.get_gpu_dram_gbps(), 1234)

    def test_parts_of_one_family_keep_their_own_figures(self):
        sxm = lookup_device_info("NVIDIA H100 80GB HBM3")
        for other in ("NVIDIA H100 PCIe", "NVIDIA H100 NVL"):
            self.assertNotEqual(
                lookup_device_info(other).tops[torch.bfloat16],
                sxm.tops[torch.bfloat16],
            )
        self.assertEqual(
            lookup_device_info("NVIDIA H200 NVL").tops,
            lookup_device_info("NVIDIA H100 NVL").tops,
        )

    def test_case_and_spacing_do_not_matter(self):
        for name in ("nvidia h100 pcie", "  NVIDIA  H200 NVL "):
            self.assertIsNotNone(lookup_device_info(name), name)

    @parametrize("name", UNKNOWN)
    def test_unknown_name_gets_none(self, name):
        self.assertIsNone(lookup_device_info(name))
        with _reported_device(name):
            self.assertIsNone(datasheet_tops(torch.bfloat16))

    def test_variant_suffix_of_a_reported_name(self):
        # where the table ignores a trailing variant suffix (the " VF" of an
        # SR-IOV virtual function), a reported part's name keeps its figures
        suffixes = getattr(device_info, "_DEVICE_NAME_VARIANT_SUFFIXES", None)
        if not suffixes:
            self.skipTest("this table does not strip variant suffixes")
        for name in ("NVIDIA H100 80GB HBM3", "NVIDIA H200"):
            for suffix in suffixes:
                self.assertIs(
                    lookup_device_info(f"{name} {suffix}"), lookup_device_info(name)
                )

    def test_names_that_matched_before_keep_their_entry(self):
        for key, info in device_info._device_mapping.items():
            self.assertIs(lookup_device_info(key), info, key)

    @parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
    def test_triton_fallback_gets_the_clock_in_khz(self, dtype):
        with _reported_device("NVIDIA H100 XYZ"), _triton_estimate(1980) as clocks:
            self.assertIn(inductor_utils.get_device_tflops(dtype), (1.0, 2.0))
        self.assertEqual(clocks, [1980 * 1e3])


instantiate_parametrized_tests(TestDeviceFigures)


if __name__ == "__main__":
    run_tests()
