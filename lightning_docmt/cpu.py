"""What this machine's CPU can do that changes how runs are set up: native bf16 arithmetic.

Read from `/proc/cpuinfo`; where it cannot be read, the CPU is taken to have none.
"""

from __future__ import annotations

from pathlib import Path

CPUINFO = Path("/proc/cpuinfo")
CPU_BF16_FLAGS = ("avx512_bf16", "amx_bf16")  # cpuinfo flags of native bf16 arithmetic


def cpu_flags() -> set[str]:
    """The first processor's cpuinfo flags (empty where /proc/cpuinfo cannot be read)."""
    try:
        text = CPUINFO.read_text()
    except OSError:
        return set()
    return next((set(line.split(":", 1)[1].split()) for line in text.splitlines() if line.startswith("flags")),
                set())


def cpu_has_native_bf16() -> bool:
    """Whether the CPU computes bf16 natively (AVX512-BF16 or AMX). Elsewhere bf16 autocast is
    emulated and slower than float32 (56 s against 2.6 s an update of the Chinese BERT's pretraining
    on an AMD EPYC with AVX2 only)."""
    return any(flag in cpu_flags() for flag in CPU_BF16_FLAGS)
