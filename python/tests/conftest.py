"""Shared fixtures of the Python tests: the command-line tool (the numpy API's oracle for
byte-for-byte checks) and seeded data."""

import os
import pathlib
import subprocess

import numpy as np
import pytest


def _cli_path():
    env = os.environ.get("MXTRAIN_CLI")
    if env:
        return env
    here = pathlib.Path(__file__).resolve().parent
    candidate = here.parent.parent / "build" / "release" / "mxtrain"
    return str(candidate) if candidate.exists() else None


@pytest.fixture(scope="session")
def cli():
    """run(*args) runs the mxtrain CLI and returns its stdout; skips without a built CLI."""
    path = _cli_path()
    if path is None or not os.path.exists(path):
        pytest.skip("no mxtrain CLI: set MXTRAIN_CLI or build the release preset")

    def run(*args):
        r = subprocess.run([path, *map(str, args)], capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        return r.stdout

    return run


@pytest.fixture
def rng():
    return np.random.default_rng(20261203)


def bf16_bits(x):
    """float32 -> bf16 bit patterns (uint16), round to nearest even."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    rounded = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    return rounded.astype(np.uint16)


def bf16_values(bits):
    """bf16 bit patterns (uint16) -> float32."""
    return (np.asarray(bits, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)


def sqnr_db(reference, actual):
    reference = np.asarray(reference, dtype=np.float64)
    noise = reference - np.asarray(actual, dtype=np.float64)
    return 10 * np.log10(np.sum(reference**2) / max(np.sum(noise**2), 1e-300))
