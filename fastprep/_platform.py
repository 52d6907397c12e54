"""What machine a measurement ran on: CPU model and the x86 ISA level the kernels can use.

Every benchmark prints :func:`describe` so a figure is never read as the package's on
another CPU (AVX2-only and AVX-512 machines of the same kind differ several-fold on some
kernels).
"""

from __future__ import annotations

import functools
import os
import platform

from ._threads import usable_cpus

# Feature sets that define the x86-64 micro-architecture levels (psABI); AVX-512 here means
# the F/BW/VL/DQ/CD subset every AVX-512 server CPU has.
_LEVELS = (
    ("AVX-512", ("avx512f", "avx512bw", "avx512vl", "avx512dq", "avx512cd")),
    ("AVX2", ("avx2", "fma", "bmi1", "bmi2", "f16c", "movbe")),
    ("SSE4.2", ("sse4_2", "ssse3", "popcnt")),
)


@functools.cache
def _cpuinfo() -> tuple[str, frozenset[str]]:
    model = platform.processor() or platform.machine()
    flags: frozenset[str] = frozenset()
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                key, _, value = line.partition(":")
                key = key.strip()
                if key == "model name" and model in ("", platform.machine(), platform.processor()):
                    model = value.strip()
                elif key == "flags" and not flags:
                    flags = frozenset(value.split())
                if flags and key == "model name":
                    break
    except OSError:
        pass
    return model or "unknown CPU", flags


def cpu_model() -> str:
    """The CPU's model name, e.g. ``"AMD EPYC 7R13 Processor"``."""
    return _cpuinfo()[0]


def cpu_flags() -> frozenset[str]:
    """The CPU feature flags the kernel reports (empty where ``/proc/cpuinfo`` is absent)."""
    return _cpuinfo()[1]


def isa_level() -> str:
    """The highest x86-64 vector level this CPU supports: ``AVX-512``, ``AVX2``, ``SSE4.2``
    or ``baseline`` (also for non-x86 CPUs)."""
    flags = cpu_flags()
    for name, needed in _LEVELS:
        if all(f in flags for f in needed):
            return name
    return "baseline"


def describe() -> str:
    """One line naming the CPU, its ISA level and how many CPUs this process may use, plus
    the Numba target when ``NUMBA_CPU_NAME`` overrides it (used to emulate an AVX2 CPU)."""
    ncpu = usable_cpus()
    line = f"CPU: {cpu_model()} ({platform.machine()}, {isa_level()}, {ncpu} CPUs usable)"
    numba_cpu = os.environ.get("NUMBA_CPU_NAME")
    if numba_cpu:
        line += f"; Numba target forced to {numba_cpu}"
    return line
