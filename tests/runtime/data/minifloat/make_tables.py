#!/usr/bin/env python3
"""Writes the reference tables of campo's FP8/FP6/FP4/E8M0 conversions and MX blocks
(runtime/minifloat.h, runtime/mx.h), computed with ml_dtypes, not with campo. The C++ tests
(tests/runtime/minifloat_test.cc, mx_test.cc) read them, so CI needs no Python.

    python3 -m venv /tmp/mf && /tmp/mf/bin/pip install ml_dtypes numpy
    /tmp/mf/bin/python tests/runtime/data/minifloat/make_tables.py

rewrites, next to this script (deterministic: the same versions give the same bytes):

decode.txt     every code of e4m3, e5m2, e2m3, e3m2, e2m1 and e8m0: "format code f32-bits"
               (hex), the code viewed as the ml_dtypes type and cast to float32.
encode_f32.bin "CMFENC32", u32 count, then count records of u32 input bits + 7 codes.
encode_bf16.bin "CMFENC16", u32 count (65536), then 7 codes per bf16 value, in the order of
               its bits 0x0000..0xffff: every bf16 value.
mx.bin         "CMFMX001", u32 count, then count tensors: u8 format, u32 n, n u32 inputs,
               ceil(n/32) E8M0 scales, n element codes, n u32 dequantized values.

The 7 code columns (COLUMNS below) are, per format, round to nearest even from float32:
  non-saturating: x.astype(fmt), ml_dtypes' own cast (e4m3fn overflows to NaN, e5m2 to inf);
  saturating:     np.clip(x, -max, max).astype(fmt), clip then cast (ml_dtypes has no
                  saturating cast; clip keeps NaN and maps +-inf to +-max).
FP6/FP4 (e2m3, e3m2, e2m1) have no inf/NaN and ml_dtypes saturates them natively; the script
checks that clip-then-cast gives the same codes and stores one column each. bf16 codes are
ml_dtypes' cast of the bfloat16 array itself (clipped in bfloat16 for the saturating
columns), checked here to equal the float32 path.

MX: the scale follows the OCP MX v1.0 rule, s = floor(log2(amax)) - emax_elem (computed here
with np.frexp, exactly), clamped below to -127, NaN (0xFF) for a block with inf/NaN, and
-127 for an all-zero block; elements are ml_dtypes casts of clip(V / 2^s, -max, max) with
V / 2^s formed in float64 (exact); dequantized = float32(decode(P) * 2^s in float64).
Elements of a NaN-scaled block are written as code 0 (campo's convention, runtime/mx.h).
"""

import struct
import sys
from pathlib import Path

import ml_dtypes
import numpy as np

HERE = Path(__file__).resolve().parent

FORMATS = {  # campo name -> (ml_dtypes type, bits, max finite, emax_elem), runtime/minifloat.h order
    "e4m3": (ml_dtypes.float8_e4m3fn, 8, 448.0, 8),
    "e5m2": (ml_dtypes.float8_e5m2, 8, 57344.0, 15),
    "e2m3": (ml_dtypes.float6_e2m3fn, 6, 7.5, 2),
    "e3m2": (ml_dtypes.float6_e3m2fn, 6, 28.0, 4),
    "e2m1": (ml_dtypes.float4_e2m1fn, 4, 6.0, 2),
}
FORMAT_INDEX = {name: i for i, name in enumerate(FORMATS)}
COLUMNS = [("e4m3", True), ("e4m3", False), ("e5m2", True), ("e5m2", False),
           ("e2m3", True), ("e3m2", True), ("e2m1", True)]  # (format, saturating)


def f32(bits):
    return np.asarray(bits, dtype=np.uint32).view(np.float32)


def bits_of(x):
    return np.asarray(x, dtype=np.float32).view(np.uint32)


def cast_codes(x, name, saturating):
    dtype, bits, max_finite, _ = FORMATS[name]
    with np.errstate(invalid="ignore", over="ignore"):
        y = np.clip(x, -max_finite, max_finite) if saturating else x
        codes = np.asarray(y).astype(dtype).view(np.uint8)
    return codes & np.uint8((1 << bits) - 1)


def code_columns(x):
    x = np.asarray(x, dtype=np.float32)
    columns = []
    for name, saturating in COLUMNS:
        codes = cast_codes(x, name, saturating)
        if FORMATS[name][1] < 8:  # FP6/FP4 saturate natively: both ways agree
            assert np.array_equal(codes, cast_codes(x, name, False)), name
        columns.append(codes)
    return np.stack(columns, axis=1)


def decode_table():
    lines = []
    for name, (dtype, bits, _, _) in FORMATS.items():
        codes = np.arange(1 << bits, dtype=np.uint8)
        values = codes.view(dtype).astype(np.float32)
        lines += [f"{name} {c:02x} {b:08x}" for c, b in zip(codes, bits_of(values))]
    codes = np.arange(256, dtype=np.uint8)
    values = codes.view(ml_dtypes.float8_e8m0fnu).astype(np.float32)
    lines += [f"e8m0 {c:02x} {b:08x}" for c, b in zip(codes, bits_of(values))]
    return "\n".join(lines) + "\n"


def f32_inputs(rng):
    """Ties at every exponent of every format, their neighbours, subnormals, the edges of the
    range and beyond, specials, and random values."""
    values = []
    for name, (dtype, bits, max_finite, emax) in FORMATS.items():
        grid = np.arange(1 << (bits - 1), dtype=np.uint8).view(dtype).astype(np.float64)
        grid = np.unique(grid[np.isfinite(grid)])
        # The grid continued one binade above max (where rounding decides overflow).
        step = grid[-1] - grid[-2]
        above = grid[-1] + step * np.arange(1, 1 << 4)
        grid = np.concatenate([grid, above, [2.0 ** (emax + 1), 2.0 ** (emax + 2)]])
        mids = (grid[:-1] + grid[1:]) / 2  # exact ties (<= 6 significant bits)
        quarter = grid[:-1] + (grid[1:] - grid[:-1]) / 4
        points = np.concatenate([grid, mids, quarter]).astype(np.float32)
        values += [points, np.nextafter(points, np.float32(np.inf)),
                   np.nextafter(points, np.float32(0))]
        # Half the smallest subnormal and just around it (rounds to zero or up).
        tiny = np.float32(grid[1] / 2)
        values.append(np.array([tiny, np.nextafter(tiny, np.float32(1)),
                                np.nextafter(tiny, np.float32(0))], dtype=np.float32))
    specials = f32([0x00000000, 0x80000000, 0x7f800000, 0xff800000,  # zeros, infinities
                    0x7fc00000, 0xffc00000, 0x7f800001, 0x7fa00000, 0x7fe00000, 0xff900001,
                    0x7fffffff, 0x7fbfffff,  # NaNs: quiet, signalling, payloads, signs
                    0x7f7fffff, 0x00800000, 0x00000001, 0x007fffff, 0x00400000])
    values.append(specials)
    values.append(f32(rng.integers(0, 1 << 32, size=3000, dtype=np.uint64)))  # any bits
    # Random values where the formats live: exponents -20..18, random mantissas.
    exponents = rng.integers(-20, 19, size=6000)
    mantissas = rng.integers(0, 1 << 23, size=6000)
    values.append(f32(((exponents + 127) << 23) | mantissas))
    values.append(f32(rng.integers(1, 1 << 23, size=500)))  # f32 subnormals
    x = np.concatenate(values).astype(np.float32)
    x = np.concatenate([x, -x])
    _, first = np.unique(bits_of(x), return_index=True)
    return x[np.sort(first)]


def encode_f32_table(rng):
    x = f32_inputs(rng)
    codes = code_columns(x)
    out = bytearray(b"CMFENC32" + struct.pack("<I", len(x)))
    records = np.zeros(len(x), dtype=[("bits", "<u4"), ("codes", "u1", len(COLUMNS))])
    records["bits"] = bits_of(x)
    records["codes"] = codes
    out += records.tobytes()
    return bytes(out), len(x)


def encode_bf16_table():
    bf = np.arange(1 << 16, dtype=np.uint16).view(ml_dtypes.bfloat16)
    columns = []
    for name, saturating in COLUMNS:
        dtype, bits, max_finite, _ = FORMATS[name]
        with np.errstate(invalid="ignore", over="ignore"):
            y = np.clip(bf, ml_dtypes.bfloat16(-max_finite), ml_dtypes.bfloat16(max_finite)) \
                if saturating else bf
            codes = y.astype(dtype).view(np.uint8) & np.uint8((1 << bits) - 1)
        columns.append(codes)
    codes = np.stack(columns, axis=1)
    via_f32 = code_columns(bf.astype(np.float32))
    assert np.array_equal(codes, via_f32), "bf16 casts differ from the float32 path"
    return b"CMFENC16" + struct.pack("<I", 1 << 16) + codes.astype(np.uint8).tobytes()


def mx_reference(name, v):
    """Scales, codes and dequantized values of the float32 array v, by the MX v1.0 rule."""
    dtype, bits, max_finite, emax = FORMATS[name]
    n = len(v)
    scales, codes, dequantized = [], np.zeros(n, np.uint8), np.zeros(n, np.float32)
    for begin in range(0, n, 32):
        block = v[begin:begin + 32].astype(np.float64)
        if not np.all(np.isfinite(block)):
            scales.append(0xFF)
            dequantized[begin:begin + len(block)] = np.nan
            continue
        amax = np.max(np.abs(block))
        if amax == 0:
            shared = -127
        else:
            _, e = np.frexp(amax)  # amax = m * 2^e, m in [0.5, 1): floor(log2 amax) = e - 1
            shared = max(int(e) - 1 - emax, -127)
        assert shared <= 127
        scales.append(shared + 127)
        exact = np.clip(block * 2.0 ** -shared, -max_finite, max_finite)  # float64: exact
        scaled = exact.astype(np.float32)
        # float32 rounds V/X only far below every element's smallest subnormal.
        rounded = scaled.astype(np.float64) != exact
        assert np.all(np.abs(exact[rounded]) < 2.0 ** -100), "V/X was rounded"
        element = scaled.astype(dtype)
        codes[begin:begin + len(block)] = element.view(np.uint8) & np.uint8((1 << bits) - 1)
        dequantized[begin:begin + len(block)] = (
            element.astype(np.float64) * 2.0 ** shared).astype(np.float32)
    return np.array(scales, np.uint8), codes, dequantized


def mx_tensors(rng):
    tensors = []
    for name in FORMATS:
        blocks = [
            np.zeros(32, np.float32),
            np.array([0.0, -0.0] * 16, np.float32),
            rng.normal(size=32).astype(np.float32),
            (rng.normal(size=32) * 1e-3).astype(np.float32),
            (rng.standard_cauchy(size=32) * 100).astype(np.float32),  # outliers
            np.exp(rng.uniform(-30, 30, size=32)).astype(np.float32),  # a wide range
            np.full(32, np.float32(3.4028235e38)),  # huge amax
            f32(rng.integers(1, 1 << 23, size=32)),  # all f32 subnormals
            f32(np.full(32, 1, np.uint32)),  # the smallest f32 subnormal
            np.array([1e-40, 1e-30, 2.0 ** -120, 2.0 ** -130] * 8, np.float32),  # tiny amax
            np.array([2.0 ** 20] + [1.0] * 31, np.float32),  # amax an exact power of two
            np.array([np.nextafter(np.float32(2.0 ** 20), np.float32(0))] + [1.0] * 31,
                     np.float32),  # just below it
            np.array([-448.0, 464.0, 480.0, 57344.0] * 8, np.float32),
            np.concatenate([[np.nan], rng.normal(size=31)]).astype(np.float32),
            np.concatenate([rng.normal(size=31), [np.inf]]).astype(np.float32),
            np.concatenate([[-np.inf], rng.normal(size=31)]).astype(np.float32),
        ]
        # Element grids: every code times a power of two, and the ties between codes.
        dtype = FORMATS[name][0]
        grid = np.arange(1 << (FORMATS[name][1] - 1), dtype=np.uint8).view(dtype).astype(
            np.float32)
        grid = grid[np.isfinite(grid)]
        for scale in (1.0, 2.0 ** -20, 2.0 ** 30):
            g = np.resize(grid, (len(grid) + 31) // 32 * 32) * np.float32(scale)
            mids = (g[:-1] + g[1:]) / 2
            blocks += list(g.reshape(-1, 32)) + [np.resize(mids, 32).astype(np.float32)]
        for _ in range(40):
            blocks.append((rng.normal(size=32) * np.exp(rng.uniform(-40, 40))).astype(np.float32))
        for block in blocks:
            tensors.append((name, np.asarray(block, np.float32)))
        # Tensors of several blocks with a partial last one.
        for n in (1, 5, 31, 33, 64, 95, 100):
            tensors.append((name, (rng.normal(size=n) * np.exp(rng.uniform(-10, 10, size=n)))
                            .astype(np.float32)))
    return tensors


def mx_table(rng):
    tensors = mx_tensors(rng)
    out = bytearray(b"CMFMX001" + struct.pack("<I", len(tensors)))
    for name, v in tensors:
        scales, codes, dequantized = mx_reference(name, v)
        out += struct.pack("<BI", FORMAT_INDEX[name], len(v))
        out += bits_of(v).astype("<u4").tobytes() + scales.tobytes() + codes.tobytes()
        out += bits_of(dequantized).astype("<u4").tobytes()
    return bytes(out), len(tensors)


def main():
    rng = np.random.default_rng(20260518)
    (HERE / "decode.txt").write_text(decode_table())
    data, n_f32 = encode_f32_table(rng)
    (HERE / "encode_f32.bin").write_bytes(data)
    (HERE / "encode_bf16.bin").write_bytes(encode_bf16_table())
    data, n_mx = mx_table(rng)
    (HERE / "mx.bin").write_bytes(data)
    (HERE / "VERSIONS").write_text(
        f"ml_dtypes {ml_dtypes.__version__}\nnumpy {np.__version__}\n"
        f"python {sys.version.split()[0]}\n")
    print(f"make_tables: ml_dtypes {ml_dtypes.__version__}, numpy {np.__version__}: "
          f"{n_f32} f32 inputs, 65536 bf16 inputs, {n_mx} MX tensors")


if __name__ == "__main__":
    main()
