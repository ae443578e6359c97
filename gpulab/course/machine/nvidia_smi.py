"""Reading ``nvidia-smi`` (lesson 01): run it where it exists, or show an illustration clearly labelled as such.

:func:`nvidia_smi` runs ``nvidia-smi`` with the given arguments when the NVIDIA driver's tool is on the PATH;
elsewhere (a laptop, a CPU runtime) it returns an *illustration* of what the tool prints on a Colab T4 runtime,
written in nvidia-smi's documented layout (not a measurement of any machine), and says so in its first line.
:func:`smi_header` reads the versions in the report's header: the driver's version and the highest CUDA version
that driver supports (not the CUDA toolkit installed). :func:`active_reasons` lists the clock event ("throttle")
reasons that ``nvidia-smi -q -d PERFORMANCE`` marks Active, and :data:`CLOCK_EVENT_REASONS` says what each means.

Example:
    >>> from gpulab import course
    >>> out = course.nvidia_smi(which=lambda _: None)
    >>> out.ran
    False
    >>> course.smi_header(out.text).cuda_version
    '13.0'
"""
from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass
from typing import Callable, Sequence

__all__ = ["SmiOutput", "SmiHeader", "nvidia_smi", "smi_header", "ILLUSTRATION_GPU", "CLOCK_EVENT_REASONS",
           "active_reasons"]

ILLUSTRATION_GPU = "Tesla T4 on a Colab GPU runtime"

# nvidia-smi's default report (driver 535 and later layout), for one T4 while a PyTorch process holds memory; its
# driver (R580) supports CUDA 13.0, which the course's PyTorch wheels (cu130) need.
_SMI = """\
Tue Nov 24 01:00:00 2026
+-----------------------------------------------------------------------------------------+
| NVIDIA-SMI 580.65.06              Driver Version: 580.65.06      CUDA Version: 13.0     |
|-----------------------------------------+------------------------+----------------------+
| GPU  Name                 Persistence-M | Bus-Id          Disp.A | Volatile Uncorr. ECC |
| Fan  Temp   Perf          Pwr:Usage/Cap |           Memory-Usage | GPU-Util  Compute M. |
|                                         |                        |               MIG M. |
|=========================================+========================+======================|
|   0  Tesla T4                       Off |   00000000:00:04.0 Off |                    0 |
| N/A   52C    P0             31W /   70W |    1362MiB /  15360MiB |     41%      Default |
|                                         |                        |                  N/A |
+-----------------------------------------+------------------------+----------------------+

+-----------------------------------------------------------------------------------------+
| Processes:                                                                              |
|  GPU   GI   CI        PID   Type   Process name                              GPU Memory |
|        ID   ID                                                               Usage      |
|=========================================================================================|
|    0   N/A  N/A      2817      C   /usr/bin/python3                             1358MiB |
+-----------------------------------------------------------------------------------------+
"""

# `nvidia-smi dmon -s pucm -c 5`: one line per second (power/temperature, utilisation, clocks, memory), while a long
# fp16 matmul starts, runs and ends. Under it the T4 reaches its 70 W limit within a second and its SM clock (pclk)
# falls far below the 1590 MHz boost to stay within it: how it sustains only about a third of its datasheet peak
# (lesson 00).
_DMON = """\
# gpu    pwr  gtemp  mtemp     sm    mem    enc    dec    jpg    ofa   mclk   pclk     fb   bar1   ccpm
# Idx      W      C      C      %      %      %      %      %      %    MHz    MHz     MB     MB     MB
    0     31     52      -     41     18      0      0      -      -   5000   1590   1362      5      0
    0     69     55      -    100     47      0      0      -      -   5000   1110   1362      5      0
    0     70     58      -    100     46      0      0      -      -   5000    975   1362      5      0
    0     70     60      -    100     46      0      0      -      -   5000    945   1362      5      0
    0     34     58      -     10      3      0      0      -      -   5000   1590   1362      5      0
"""

# `nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv`
_APPS = """\
pid, process_name, used_memory [MiB]
2817, /usr/bin/python3, 1358 MiB
"""

# `nvidia-smi -q -d PERFORMANCE` (drivers 535 and later say "Clocks Event Reasons", older ones "Clocks Throttle
# Reasons"), for the same T4 running a long matmul at its power limit.
_PERFORMANCE = """\
==============NVSMI LOG==============

Timestamp                                 : Tue Nov 24 01:00:05 2026
Driver Version                            : 580.65.06
CUDA Version                              : 13.0

Attached GPUs                             : 1
GPU 00000000:00:04.0
    Performance State                     : P0
    Clocks Event Reasons
        Idle                              : Not Active
        Applications Clocks Setting       : Not Active
        SW Power Cap                      : Active
        HW Slowdown                       : Not Active
            HW Thermal Slowdown           : Not Active
            HW Power Brake Slowdown       : Not Active
        Sync Boost                        : Not Active
        SW Thermal Slowdown               : Not Active
        Display Clock Setting             : Not Active
"""

# What each reason means (NVML's nvmlClocksEventReason* documentation, as nvidia-smi names them).
CLOCK_EVENT_REASONS: dict[str, str] = {
    "Idle": "nothing runs on the GPU, so its clocks drop to the idle state",
    "Applications Clocks Setting": "the clocks are held at the application clocks someone set (nvidia-smi -ac)",
    "SW Power Cap": "the driver lowers the clocks to keep the board's power draw within its power limit "
                    "(nvidia-smi -pl): how a card runs under heavy load, not a fault",
    "HW Slowdown": "the hardware cut the clocks sharply (by half or more): too hot, an external power brake, or a "
                   "power spike (it can also show briefly while the clocks change)",
    "HW Thermal Slowdown": "the hardware slowdown above, caused by temperature",
    "HW Power Brake Slowdown": "the hardware slowdown above, asserted by the system's power supply (power brake)",
    "Sync Boost": "the GPU is in a sync-boost group and runs at the clocks of its slowest member",
    "SW Thermal Slowdown": "the driver lowers the clocks because the GPU or its memory is above its maximum "
                           "operating temperature",
    "Display Clock Setting": "the clocks are held by the display clock setting",
}

_SAMPLES = {"": _SMI, "dmon": _DMON, "--query-compute-apps": _APPS, "-q": _PERFORMANCE}


@dataclass(frozen=True)
class SmiOutput:
    """What ``nvidia-smi <args>`` printed here (``ran=True``), or an illustration (``ran=False``)."""

    command: str
    text: str
    ran: bool
    source: str          # "this machine" or what the illustration shows

    def __repr__(self) -> str:
        head = f"$ {self.command}" + ("" if self.ran else
                                      f"\n[ILLUSTRATION, not your machine: what this prints on a {self.source}, "
                                      "written in nvidia-smi's documented format; there is no nvidia-smi here]")
        return head + "\n" + self.text.rstrip("\n")

    def _repr_html_(self) -> str:
        import html

        return f"<pre>{html.escape(repr(self))}</pre>"


def _sample_for(args: Sequence[str]) -> str:
    key = next((a.split("=")[0] for a in args if a.split("=")[0] in _SAMPLES), "")
    text = _SAMPLES[key]
    if key == "dmon" and "-c" in args[:-1] and args[args.index("-c") + 1].isdigit():   # -c N: N samples
        lines = text.splitlines()
        text = "\n".join(lines[:2 + int(args[args.index("-c") + 1])]) + "\n"
    return text


def nvidia_smi(args: Sequence[str] = (), *, timeout_s: float = 30.0,
               which: Callable[[str], str | None] = shutil.which) -> SmiOutput:
    """Run ``nvidia-smi`` with ``args`` where it exists; elsewhere return the labelled T4 illustration for the
    default report, ``dmon``, ``--query-compute-apps=...`` or ``-q -d PERFORMANCE``. ``which`` finds the tool
    (tests replace it).

    Example:
        >>> nvidia_smi(["dmon", "-c", "5"], which=lambda _: None).text.startswith("# gpu")
        True
    """
    args = [str(a) for a in args]
    command = " ".join(["nvidia-smi", *args])
    exe = which("nvidia-smi")
    if exe is None:
        return SmiOutput(command, _sample_for(args), False, ILLUSTRATION_GPU)
    try:
        done = subprocess.run([exe, *args], capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return SmiOutput(command, f"(no answer within {timeout_s:g} s: the driver may be hung)", True, "this machine")
    text = done.stdout if done.returncode == 0 else (done.stdout + done.stderr)
    return SmiOutput(command, text, True, "this machine")


@dataclass(frozen=True)
class SmiHeader:
    """The versions in nvidia-smi's header. ``cuda_version`` is the highest CUDA the *driver* supports."""

    driver_version: str | None
    cuda_version: str | None


_HEADER = re.compile(r"Driver Version:\s*(?P<driver>[\w.]+)\s+CUDA Version:\s*(?P<cuda>[\w./]+)")


def smi_header(text: str) -> SmiHeader:
    """The driver version and the driver's highest supported CUDA version from ``nvidia-smi``'s report
    (``None`` where the report has none, e.g. ``"N/A"``).

    Example:
        >>> smi_header("| NVIDIA-SMI 550.54.15   Driver Version: 550.54.15   CUDA Version: 12.4 |")
        SmiHeader(driver_version='550.54.15', cuda_version='12.4')
    """
    if not isinstance(text, str):
        raise TypeError(f"text must be nvidia-smi's output as a string, got {type(text).__name__}")
    m = _HEADER.search(text)
    if m is None:
        return SmiHeader(None, None)
    clean = lambda v: None if v.upper() == "N/A" else v   # noqa: E731
    return SmiHeader(clean(m["driver"]), clean(m["cuda"]))


_REASON_LINE = re.compile(r"^\s*(?P<name>[A-Za-z][A-Za-z ]*?)\s*:\s*(?P<state>Active|Not Active)\s*$")


def active_reasons(text: str) -> list[str]:
    """The clock event reasons ``nvidia-smi -q -d PERFORMANCE`` marks ``Active``, in the report's order (one GPU's
    report; names as in :data:`CLOCK_EVENT_REASONS`).

    Example:
        >>> active_reasons(nvidia_smi(["-q", "-d", "PERFORMANCE"], which=lambda _: None).text)
        ['SW Power Cap']
    """
    if not isinstance(text, str):
        raise TypeError(f"text must be nvidia-smi's output as a string, got {type(text).__name__}")
    found = [m for m in map(_REASON_LINE.match, text.splitlines()) if m]
    return [m["name"] for m in found if m["state"] == "Active" and m["name"] in CLOCK_EVENT_REASONS]
