"""The spec's math in pure PyTorch (shared/specs/da8w4_linear_cpu.md, section 3), the data the
tests feed it, and the inverse of our packed layout: shared by the tests of our library
(test_da8w4_linear_cpu.py) and of the kernel PR's file (test_torchao_port.py)."""

import torch


BN = 32


def make_weight(n, k, group_size, gen):
    g = k // group_size
    w = torch.randint(0, 16, (n, k), dtype=torch.uint8, generator=gen)
    scales = torch.rand(n, g, generator=gen) * 0.02 + 1e-3
    qzeros = torch.randint(0, 16, (n, g), dtype=torch.int8, generator=gen)
    return w, scales, qzeros


def make_activation(m_shape, k, symmetric, gen):
    m = 1
    for d in m_shape:
        m *= d
    if symmetric:
        x = torch.randint(-128, 128, (*m_shape, k), dtype=torch.int8, generator=gen)
        zeros = torch.zeros(m, dtype=torch.int32)
    else:
        x = torch.randint(0, 256, (*m_shape, k), dtype=torch.uint8, generator=gen)
        zeros = torch.randint(0, 256, (m,), dtype=torch.int32, generator=gen)
    scales = torch.rand(m, generator=gen) * 0.05 + 1e-3
    return x, scales, zeros


def reference_linear(x, sa, za, w, sw, zw, bias, out_dtype, symmetric):
    """Spec section 3 on the unpacked weight [N, K], scales/zeros [N, G]."""
    n, k = w.shape
    g = sw.shape[1]
    group_size = k // g
    bk = min(group_size, 128)
    a = x.reshape(-1, k).to(torch.float64)
    if not symmetric:
        a = a - za.reshape(-1, 1).to(torch.float64)
    wd = w.to(torch.float64) - zw.to(torch.float64).repeat_interleave(group_size, dim=1)
    sa = sa.reshape(-1, 1).to(torch.float32)
    acc = (
        torch.zeros(a.shape[0], n)
        if bias is None
        else bias.expand(a.shape[0], n).clone()
    )
    for c in range(k // bk):
        blk = slice(c * bk, (c + 1) * bk)
        # Integers below 2**53: exact in float64, then the int32 the kernel holds, modulo
        # 2**32 where the product overflows (|za| near 2**31 / (BK * 127) and beyond).
        p = (a[:, blk] @ wd[:, blk].T).to(torch.int64)
        p = (p + 2**31).remainder(2**32).sub(2**31).to(torch.int32)
        acc = acc + (p.to(torch.float32) * sa) * sw[:, (c * bk) // group_size].reshape(
            1, n
        )
    return acc.to(out_dtype).reshape(*x.shape[:-1], n)


def unpack_weight(packed):
    """Inverse of our documented packed layout (csrc/da8w4/kernel.h)."""
    nc, kc, bk, half = packed.shape
    t = packed.view(torch.uint8).reshape(nc, kc, bk // 4, 16, 4)  # [nb, c, k4, j, ki]
    lo = (t & 0xF).permute(0, 3, 1, 2, 4).reshape(nc, 16, kc * bk)
    hi = (t >> 4).permute(0, 3, 1, 2, 4).reshape(nc, 16, kc * bk)
    return torch.cat([lo, hi], dim=1).reshape(nc * BN, kc * bk)


# (M shape, K, N, group_size): M=1, M=3, 3-D, K a multiple of 32 but not 128,
# group sizes 32/64/128, 256 (two k blocks per group) and 36.
SHAPES = (
    ((1,), 128, 32, 32),
    ((3,), 96, 64, 32),
    ((2, 5), 192, 32, 64),
    ((17,), 256, 96, 128),
    ((9,), 512, 64, 256),
    ((1,), 160, 32, 32),
    ((2,), 72, 32, 36),  # BK=36: k not a multiple of 16 (AVX2 sums 16 k in int16)
)
