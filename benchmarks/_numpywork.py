"""Worker functions of bench_numpy.py and examples: the same numpy code on every contender.

Imported inside interpreters (from a private copy of numpy, ``fallback="copy"``),
in worker processes and in the main interpreter: it imports neither asyncio
nor uvloop.

The task, ``window_features(seed)``, is picked to look like the numpy code a
service or a data pipeline runs per request or per record, not like one big
vectorised kernel (which would spend its time in C, where threads already run
in parallel and where a pool only adds transport): a 20,480-sample signal is
made and cut into 160 windows of 128 samples (vectorised); each window goes
through a Python-level loop of small-array calls (detrend, taper, real FFT,
std, argmax, band energy, 90th percentile, zero crossings); the 160 x 5
feature matrix is then standardised and summarised by the eigenvalues of its
covariance (vectorised, LAPACK). About 6 ms of CPU on this machine (AMD EPYC), most
of it in numpy's per-call overhead, which runs Python and holds the GIL.
"""

from __future__ import annotations

import os
import sys
import threading
import time

import numpy as np

WINDOWS = 160
WIDTH = 128


def window_features(seed: int) -> float:
    """One task: per-window features of a random-walk signal, then a vectorised summary."""
    rng = np.random.default_rng(seed)
    signal = np.cumsum(rng.standard_normal(WINDOWS * WIDTH))
    taper = np.hanning(WIDTH)
    features = np.empty((WINDOWS, 5))
    for i in range(WINDOWS):
        w = signal[i * WIDTH : (i + 1) * WIDTH]
        w = (w - w.mean()) * taper
        spectrum = np.abs(np.fft.rfft(w))
        features[i] = (
            w.std(),
            spectrum.argmax(),
            spectrum[1:8].sum() / spectrum.sum(),
            np.percentile(w, 90),
            np.count_nonzero(np.diff(np.sign(w))),
        )
    z = (features - features.mean(axis=0)) / (features.std(axis=0) + 1e-12)
    eigenvalues = np.linalg.eigvalsh(z.T @ z / WINDOWS)
    return round(float(eigenvalues.sum() + 10 * eigenvalues.max()), 6)


def first_result(n: int) -> int:
    """The first numpy call of a fresh pool (cold start): small, so start-up dominates."""
    return int(np.arange(n, dtype=np.int64).sum())


def warm(seed: int, pause: float) -> str:
    """The task once, then a pause (so the next concurrent call goes to another worker);
    returns which worker ran it: process, interpreter (its own ``sys`` module), thread."""
    window_features(seed)
    time.sleep(pause)
    return f"{os.getpid()}:{id(sys)}:{threading.get_ident()}"


def double(a: np.ndarray) -> np.ndarray:
    """16 MiB in and out: a new array of the same size (``a * 2``), as a real task returns."""
    return a * 2


def echo(a: np.ndarray) -> np.ndarray:
    """The array itself back: the transport alone."""
    return a
