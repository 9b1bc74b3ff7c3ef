#!/usr/bin/python3
"""Deterministic weights for the model-zoo fixtures (numpy only; runs under any python3 with numpy).

make_tensor(seed, shape, mean, std) gives the same float32 bits on every numpy version and
platform: element i of the flattened tensor is

    x = splitmix64(seed * 0x9E3779B97F4A7C15 + i)          (uint64 arithmetic, mod 2**64)
    u = ((x >> 11) * 2**-53 * 2 - 1) * sqrt(3)             (float64, uniform in [-sqrt 3, sqrt 3))
    value = float32(mean + std * u)                        (float64 arithmetic, one rounding)

where splitmix64(z) adds 0x9E3779B97F4A7C15 to z and applies its finalizer. With std == 0 every
element is exactly float32(mean). A fixture directory's weights.json lists each tensor stored as
external data by its .onnx files: {"name", "shape", "mean", "std", "seed", "file", "offset"}.
materialize(dir) writes those files (raw little-endian float32 at the given byte offsets, zero
bytes between tensors); tests/models/export.py checks that this reproduces the exported bytes.

Usage: python3 tests/models/weights.py FIXTURE_DIR...
"""
import json
import os
import sys

import numpy as np

GOLDEN = 0x9E3779B97F4A7C15
MASK64 = (1 << 64) - 1
SQRT3 = 1.7320508075688772


def splitmix64(z):
    """splitmix64's output for the uint64 array of states `z` (before its increment)."""
    with np.errstate(over="ignore"):
        x = z + np.uint64(GOLDEN)
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return x ^ (x >> np.uint64(31))


def make_tensor(seed, shape, mean, std):
    """float32 array of `shape`: mean + std * uniform(-sqrt 3, sqrt 3), a function of `seed` only."""
    shape = tuple(int(d) for d in shape)
    if std == 0:
        return np.full(shape, mean, dtype=np.float32)
    count = int(np.prod(shape, dtype=np.int64))
    base = np.uint64((int(seed) * GOLDEN) & MASK64)
    with np.errstate(over="ignore"):
        x = splitmix64(base + np.arange(count, dtype=np.uint64))
    u = ((x >> np.uint64(11)).astype(np.float64) * 2.0**-53 * 2.0 - 1.0) * SQRT3
    return (np.float64(mean) + np.float64(std) * u).astype(np.float32).reshape(shape)


def tensor_bytes(entry):
    """The little-endian float32 bytes of one weights.json entry."""
    array = make_tensor(entry["seed"], entry["shape"], entry["mean"], entry["std"])
    return array.astype("<f4").tobytes()


def file_sizes(entries):
    """{file name: its size in bytes} for the external data files named by `entries`."""
    sizes = {}
    for e in entries:
        end = e["offset"] + 4 * int(np.prod(e["shape"], dtype=np.int64))
        sizes[e["file"]] = max(sizes.get(e["file"], 0), end)
    return sizes


def write_file(path, entries, size):
    """Writes `size` bytes to `path`: every entry's tensor at its offset, zeros elsewhere."""
    data = bytearray(size)
    for e in entries:
        raw = tensor_bytes(e)
        data[e["offset"]:e["offset"] + len(raw)] = raw
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


def materialize(fixture_dir):
    """Writes the external data files of `fixture_dir` (unless present with the right size).
    Returns the paths of the files it wrote."""
    with open(os.path.join(fixture_dir, "weights.json")) as f:
        entries = json.load(f)
    written = []
    for name, size in sorted(file_sizes(entries).items()):
        path = os.path.join(fixture_dir, name)
        if os.path.isfile(path) and os.path.getsize(path) == size:
            continue
        write_file(path, [e for e in entries if e["file"] == name], size)
        written.append(path)
    return written


def main(argv):
    if not argv:
        sys.exit(__doc__.strip().splitlines()[-1])
    for d in argv:
        for path in materialize(d):
            print("wrote", path)


if __name__ == "__main__":
    main(sys.argv[1:])
