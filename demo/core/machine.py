"""This machine's facts: CPU model, ISA flags, cores, memory, library versions, and the
fingerprint that keys what was measured or proven here (calibration, the native safety record)."""

from __future__ import annotations

import functools
import hashlib
import json
import os
import platform
import time
from typing import Optional

from .settings import cpu_cores

# The flags that decide which OpenVINO kernels run (and, on some CPUs, whether they run).
ISA_FLAGS = ("sse4_2", "avx", "avx2", "fma", "f16c", "avx_vnni", "avx512f", "avx512bw", "avx512vl",
             "avx512_vnni", "avx512_bf16", "avx512_fp16", "amx_tile", "amx_bf16", "amx_int8")


_CPU_IDS = {"vendor_id": "vendor", "cpu family": "family", "model": "model"}


def _number(text: Optional[str]) -> Optional[int]:
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None


def machine_info() -> dict:
    model, flags, ids = None, set(), {}
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                key, _, value = line.partition(":")
                key = key.strip()
                if key == "model name" and model is None:
                    model = value.strip()
                elif key == "flags" and not flags:
                    flags = set(value.split())
                elif key in _CPU_IDS and _CPU_IDS[key] not in ids:
                    ids[_CPU_IDS[key]] = value.strip()
                if model and flags and len(ids) == len(_CPU_IDS):
                    break
    except OSError:
        pass
    memory_gb = None
    try:
        with open("/proc/meminfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    memory_gb = round(int(line.split()[1]) / (1 << 20), 1)
                    break
    except (OSError, ValueError, IndexError):
        pass
    return {
        "cpu_model": model or platform.processor() or None,
        # The model name alone does not tell a Zen 4 from a Zen 5 ("AMD EPYC" on both, in VMs).
        "cpu_vendor": ids.get("vendor"),
        "cpu_family": _number(ids.get("family")),
        "cpu_model_number": _number(ids.get("model")),
        "cores": cpu_cores(),          # usable by this process (affinity / cgroup)
        "cpu_count": os.cpu_count(),   # all logical CPUs of the machine
        "isa_flags": [f for f in ISA_FLAGS if f in flags],
        "memory_gb": memory_gb,
        "platform": platform.platform(),
        "machine": platform.machine(),
    }


@functools.lru_cache(maxsize=1)
def fingerprint() -> tuple:
    """What native behaviour depends on: CPU (vendor, family, model number, name), ISA flags,
    cores, RAM, OpenVINO version (read once)."""
    import openvino

    from .memory import total_bytes

    info = machine_info()
    return (("cpu", info.get("cpu_model")), ("cpu_vendor", info.get("cpu_vendor")),
            ("cpu_family", info.get("cpu_family")), ("cpu_model", info.get("cpu_model_number")),
            ("isa_flags", tuple(info.get("isa_flags") or ())),
            ("cores", info.get("cores")), ("memory_bytes", total_bytes()), ("openvino", openvino.__version__))


def fingerprint_key() -> str:
    """A short name for this machine's fingerprint, for file names."""
    return hashlib.sha256(json.dumps(fingerprint(), sort_keys=True).encode()).hexdigest()[:12]


def versions() -> dict:
    """The versions a measurement or a recording depends on: Python, this demo, OpenVINO's
    libraries (None for one that is missing or broken)."""
    from .. import __version__

    found = {"python": platform.python_version(), "demo": __version__}
    for name in ("openvino", "openvino_genai", "openvino_tokenizers"):
        try:
            module = __import__(name)
            get = getattr(module, "get_version", None)
            found[name] = get() if callable(get) else getattr(module, "__version__", None)
        except Exception:  # not installed, or broken: record it as missing
            found[name] = None
    return found


def others_busy(seconds: float = 1.0) -> Optional[float]:
    """Share of all cores that other processes kept busy over `seconds` (Linux), or None.

    Not the load average: right after this process converted weights that still reads
    high, although the machine is quiet for the measurement about to start.
    """
    def sample():
        with open("/proc/stat") as f:
            fields = [int(x) for x in f.readline().split()[1:]]
        with open("/proc/self/stat") as f:
            own = f.read().rsplit(")", 1)[1].split()
        return sum(fields), fields[3] + fields[4], int(own[11]) + int(own[12])  # total, idle+iowait, utime+stime

    try:
        total0, idle0, own0 = sample()
        time.sleep(seconds)
        total1, idle1, own1 = sample()
    except (OSError, ValueError, IndexError):
        return None
    elapsed = total1 - total0
    return max(0.0, (elapsed - (idle1 - idle0) - (own1 - own0)) / elapsed) if elapsed else None
