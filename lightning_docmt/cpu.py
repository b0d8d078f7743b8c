"""What this machine's CPU is and can do: its name (a run's provenance) and native bf16 arithmetic
(how runs are set up).

Read from `/proc/cpuinfo`; where it cannot be read, the CPU is taken to have none.
"""

from __future__ import annotations

from pathlib import Path

CPUINFO = Path("/proc/cpuinfo")
CPU_BF16_FLAGS = ("avx512_bf16", "amx_bf16")  # cpuinfo flags of native bf16 arithmetic


def cpuinfo_field(name: str) -> str:
    """The first processor's cpuinfo field `name` ("" where /proc/cpuinfo cannot be read or lacks it)."""
    try:
        text = CPUINFO.read_text()
    except OSError:
        return ""
    return next((value.strip() for key, _, value in (line.partition(":") for line in text.splitlines())
                 if key.strip() == name), "")


def cpu_flags() -> set[str]:
    """The first processor's cpuinfo flags."""
    return set(cpuinfo_field("flags").split())


def cpu_name() -> str:
    """The CPU's model name, e.g. "AMD EPYC 7B13" ("unknown" where /proc/cpuinfo does not say)."""
    return cpuinfo_field("model name") or "unknown"


def cpu_has_native_bf16() -> bool:
    """Whether the CPU computes bf16 natively (AVX512-BF16 or AMX). Elsewhere bf16 autocast is
    emulated and slower than float32 (56 s against 2.6 s an update of the Chinese BERT's pretraining
    on an AMD EPYC with AVX2 only)."""
    return any(flag in cpu_flags() for flag in CPU_BF16_FLAGS)
