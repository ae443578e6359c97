"""What a GPU sustains against its datasheet (lesson 00): the published achievable share of each card, the clocks
and power limit a card runs at (read through NVML), and the measured share of the datasheet explained from both.

A datasheet's tensor-core peak assumes every SM at its boost clock. Large matmuls on an A100 or H100 reach 80-86%
of it; a T4 sustains about 37%, because its 70 W power limit holds its clocks far below the boost clock under a
continuous matmul. :func:`achievable` gives each card's published figure, :func:`gpu_clocks` reads the clocks and
the power limit (now, or right after a timed run), and :func:`explain_share` sets a measured rate against the
datasheet and the published figure and says why it differs.

Example:
    >>> from gpulab import course
    >>> a = course.achievable("T4")
    >>> a.precision, f"{a.share:.0%}", round(a.flops / 1e12)
    ('fp16', '37%', 24)
    >>> course.gpu_clocks("cpu").available
    False
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from ...reference import PUBLISHED, GPUSpec, Published, gpu_spec

__all__ = ["ACHIEVABLE", "Achievable", "GPUClocks", "DatasheetShare", "achievable", "gpu_clocks", "explain_share"]

# Each card's published achievable 16-bit matmul share (keys of gl.published), by its name in gl.gpu_specs().
ACHIEVABLE: dict[str, str] = {"T4": "t4-fp16-sustained", "A100 40GB SXM": "mamf-a100", "A100 80GB SXM": "mamf-a100",
                              "H100 SXM": "mamf-h100"}
# A card at or above this share of its power limit is running at the limit; near these shares it matches a figure.
_AT_LIMIT, _BELOW_MAX_CLOCK, _AS_PUBLISHED = 0.95, 0.97, (0.85, 1.15)


def _tflops(x: float | None) -> str:
    return "N/A" if x is None else f"{x / 1e12:.3g} TFLOP/s"


def _sixteen_bit(spec: GPUSpec) -> tuple[str, float]:
    return ("bf16", spec.bf16_tensor_flops) if spec.bf16_tensor_flops else ("fp16", spec.fp16_tensor_flops)


@dataclass(frozen=True)
class Achievable:
    """A card's datasheet 16-bit tensor-core peak beside what large matmuls are published to sustain on it."""

    gpu: str
    precision: Literal["fp16", "bf16"]
    datasheet_flops: float
    figure: Published

    @property
    def share(self) -> float:
        """The published share of the datasheet peak that large matmuls sustain."""
        return float(self.figure.high)

    @property
    def flops(self) -> float:
        """The sustained rate: the datasheet peak times the published share."""
        return self.share * self.datasheet_flops

    def __repr__(self) -> str:
        return (f"{self.gpu}: {self.precision} {_tflops(self.datasheet_flops)} on the datasheet, about "
                f"{_tflops(self.flops)} sustained ({self.share:.0%}; {self.figure.source}, {self.figure.date})")

    def _repr_html_(self) -> str:
        import html

        return (f"{html.escape(repr(self).split(' (')[0])} (<a href=\"{self.figure.url}\" target=\"_blank\">"
                f"{html.escape(self.figure.source)}</a>, {self.figure.date})")


def achievable(gpu: str) -> Achievable:
    """The published sustained 16-bit matmul rate of ``gpu`` (any name :func:`gpulab.gpu_spec` accepts; a MIG
    slice gets its card's share of the slice's peak): bf16 where the card has bf16 tensor cores, else fp16.

    Example:
        >>> achievable("NVIDIA H100 80GB HBM3").figure.key
        'mamf-h100'
    """
    if not isinstance(gpu, str):
        raise TypeError(f"gpu must be a GPU name such as 'T4', got {gpu!r}")
    spec = gpu_spec(gpu)
    key = ACHIEVABLE.get(spec.parent or spec.name)
    if key is None:
        raise ValueError(f"no published sustained matmul rate for the {spec.name} (gpu={gpu!r}); cards with one: "
                         f"{', '.join(ACHIEVABLE)}")
    precision, peak = _sixteen_bit(spec)
    return Achievable(spec.name, precision, float(peak), PUBLISHED[key])   # type: ignore[arg-type]


@dataclass(frozen=True)
class GPUClocks:
    """NVML's reading of one GPU: SM clock (now and the card's maximum), power draw, the enforced power limit and
    the clock event ("throttle") reasons; ``available=False`` with ``reason`` where there is no GPU to read."""

    gpu: str | None
    when: str
    sm_clock_mhz: float | None = None
    max_sm_clock_mhz: float | None = None
    power_w: float | None = None
    power_limit_w: float | None = None
    throttle_reasons: int | None = None
    reason: str = ""

    @property
    def available(self) -> bool:
        return self.gpu is not None

    @property
    def clock_share(self) -> float | None:
        """SM clock over the card's maximum SM clock."""
        if self.sm_clock_mhz is None or not self.max_sm_clock_mhz:
            return None
        return self.sm_clock_mhz / self.max_sm_clock_mhz

    @property
    def power_share(self) -> float | None:
        """Power draw over the enforced power limit."""
        if self.power_w is None or not self.power_limit_w:
            return None
        return self.power_w / self.power_limit_w

    @property
    def reasons(self) -> list[str]:
        """NVML's clock event reasons set in the reading, e.g. ``["sw_power_cap"]``."""
        from ...telemetry.gpu import throttle_names

        return throttle_names(self.throttle_reasons)

    @property
    def slowed_by(self) -> list[str]:
        """The reasons that mean heat or hardware protection (not the power cap)."""
        from ...telemetry.gpu import slowdown_names

        return slowdown_names(self.throttle_reasons)

    @property
    def power_capped(self) -> bool | None:
        """True when NVML names the software power cap, or the draw is at the limit; None when unknown."""
        from ...telemetry.gpu import POWER_CAP_MASK

        if self.throttle_reasons is not None and self.throttle_reasons & POWER_CAP_MASK:
            return True
        share = self.power_share
        if share is not None and share >= _AT_LIMIT:
            return True
        return None if self.throttle_reasons is None and share is None else False

    def __repr__(self) -> str:
        if not self.available:
            return f"No GPU to read clocks and power from ({self.reason})"
        num = lambda v, unit: "N/A" if v is None else f"{v:,.0f} {unit}"   # noqa: E731
        clock = f"SM clock {num(self.sm_clock_mhz, 'MHz')} of {num(self.max_sm_clock_mhz, 'MHz')} max"
        clock += "" if self.clock_share is None else f" ({self.clock_share:.0%})"
        power = f"power {num(self.power_w, 'W')} of its {num(self.power_limit_w, 'W')} limit"
        power += "" if self.power_share is None else f" ({self.power_share:.0%})"
        reasons = ", ".join(self.reasons) or ("none" if self.throttle_reasons is not None else "N/A")
        return f"{self.gpu}, {self.when}: {clock}; {power}; clock event reasons: {reasons}"

    def _repr_html_(self) -> str:
        import html

        return f"<div>{html.escape(repr(self))}</div>"


def _gpu_name(device: str) -> str:
    import torch

    return torch.cuda.get_device_name(torch.device(device))


def _cuda_index(device: str) -> int:
    if ":" in device:
        return int(device.split(":")[1])
    import torch

    return int(torch.cuda.current_device())


def gpu_clocks(device: Any = None, *, after: Any = None) -> GPUClocks:
    """NVML's reading of the CUDA ``device`` (default: the device lessons run on) now, or, with ``after`` (a
    :class:`gpulab.Measurement` of a CUDA run), the reading :func:`gpulab.benchmark` took right after its timed
    runs, while the card still ran at the clocks the load gave it. On a CPU, Apple GPU or without NVML the result
    says there is nothing to read.

    Example:
        >>> gpu_clocks("cpu")
        No GPU to read clocks and power from (the device is cpu: NVML reads NVIDIA GPUs only)
    """
    if after is not None:
        state = getattr(after, "gpu_state", "missing")
        if state == "missing":
            raise TypeError(f"after must be a gpulab.Measurement (from gl.benchmark), got {type(after).__name__}")
        dev = str(after.device)
        if state is None:
            why = (f"the device is {dev}: NVML reads NVIDIA GPUs only" if not dev.startswith("cuda")
                   else "NVML gave no reading for this run")
            return GPUClocks(None, "", reason=why)
        return GPUClocks(after.env.device_name, f"right after {after.label}", state.get("sm_clock_mhz"),
                         state.get("max_sm_clock_mhz"), state.get("power_w"), state.get("power_limit_w"),
                         state.get("throttle_reasons"))
    from ..._check import device_arg
    from ...system import device as pick_device

    picked = pick_device() if device is None else device_arg("device", device)
    dev = f"cuda:{picked}" if isinstance(picked, int) else str(picked)
    if not dev.startswith("cuda"):
        return GPUClocks(None, "", reason=f"the device is {dev}: NVML reads NVIDIA GPUs only")
    from ...telemetry.gpu import clock_state

    state = clock_state(_cuda_index(dev))
    if state is None:
        return GPUClocks(None, "", reason="NVML is not available (nvidia-ml-py or the NVIDIA driver missing)")
    return GPUClocks(_gpu_name(dev), "now", state["sm_clock_mhz"], state["max_sm_clock_mhz"], state["power_w"],
                     state["power_limit_w"], state["throttle_reasons"])


Cause = Literal["heat", "power-cap", "as-published", "below-published", "above-published", "no-figure"]


@dataclass(frozen=True)
class DatasheetShare:
    """A measured 16-bit matmul rate against the card's datasheet peak and its published sustained share, with the
    clocks NVML read; :attr:`cause` and :attr:`explanation` say why the share is what it is."""

    gpu: str
    precision: str
    measured_flops: float
    datasheet_flops: float | None
    achievable: Achievable | None
    clocks: GPUClocks | None

    @property
    def share(self) -> float | None:
        """Measured rate over the datasheet peak."""
        return None if not self.datasheet_flops else self.measured_flops / self.datasheet_flops

    @property
    def vs_achievable(self) -> float | None:
        """Measured rate over the published sustained rate."""
        return None if self.achievable is None else self.measured_flops / self.achievable.flops

    @property
    def cause(self) -> Cause:
        """``heat`` (NVML saw thermal or hardware slowdown), ``power-cap`` (at the power limit with the clock below
        its maximum), else how the rate compares with the published one (within 15%: ``as-published``)."""
        c = self.clocks
        if c is not None and c.available and c.slowed_by:
            return "heat"
        if (c is not None and c.available and c.power_capped and c.clock_share is not None
                and c.clock_share < _BELOW_MAX_CLOCK):
            return "power-cap"
        ratio = self.vs_achievable
        if ratio is None:
            return "no-figure"
        lo, hi = _AS_PUBLISHED
        return "as-published" if lo <= ratio <= hi else "below-published" if ratio < lo else "above-published"

    @property
    def explanation(self) -> str:
        """Markdown: the share, the clocks and the published figure, worded from the numbers."""
        if self.share is None:
            return (f"gpulab has no {self.precision} datasheet peak for the {self.gpu}: its measured "
                    f"{_tflops(self.measured_flops)} has no datasheet to be set against.")
        text = (f"Your {self.gpu} ran its best {self.precision} matmul at **{_tflops(self.measured_flops)}**, "
                f"**{self.share:.0%}** of the datasheet's {_tflops(self.datasheet_flops)}. ")
        c, a = self.clocks, self.achievable
        cause = self.cause
        if cause == "heat":
            text += (f"NVML saw its clocks lowered for heat or hardware protection ({', '.join(c.slowed_by)}): "
                     "cooling, not code, is the limit here. ")
        elif cause == "power-cap":
            draw = "" if c.power_w is None else f" (drawing {c.power_w:.0f} W)"
            limit = "its power limit" if c.power_limit_w is None else f"its {c.power_limit_w:.0f} W power limit"
            text += (f"Right after the run it was at {limit}{draw}, with the SM clock at {c.clock_share:.0%} of its "
                     f"maximum ({c.sm_clock_mhz:,.0f} of {c.max_sm_clock_mhz:,.0f} MHz): the datasheet peak "
                     "assumes the maximum clock on every SM, and the card lowers its clocks to stay within its "
                     "power budget. ")
        elif c is not None and c.available and c.clock_share is not None:
            text += f"Right after the run its SM clock was at {c.clock_share:.0%} of its maximum. "
        if a is not None:
            text += (f"Published for this card: about {a.share:.0%} ({_tflops(a.flops)}, {a.figure.source}); yours is "
                     f"{self.vs_achievable:.2f}x that")
            text += {"below-published": ": below it, so something else costs too (another process on the GPU, "
                                        "a matrix too small to fill the card, or clocks held low).",
                     "above-published": ": above it (a cooler card, a higher power limit, or a newer library)."
                     }.get(self._vs_word(), ", as careful measurements find.")
        return text

    def _vs_word(self) -> str:
        lo, hi = _AS_PUBLISHED
        r = self.vs_achievable
        return "as-published" if r is None or lo <= r <= hi else "below-published" if r < lo else "above-published"

    def __repr__(self) -> str:
        return self.explanation.replace("**", "")

    def _repr_markdown_(self) -> str:
        return self.explanation


def explain_share(measured_flops: float, gpu: str, precision: str, *, clocks: GPUClocks | None = None
                    ) -> DatasheetShare:
    """Set a measured ``precision`` (``"fp16"`` or ``"bf16"``) matmul rate on ``gpu`` (a name :func:`gpulab.gpu_spec`
    accepts, e.g. ``torch.cuda.get_device_name()``) against its datasheet peak and its published sustained share,
    explained with ``clocks`` (from :func:`gpu_clocks`) where given. A card gpulab has no datasheet for gets a
    result that says so.

    Example:
        >>> s = explain_share(24.5e12, "Tesla T4", "fp16")
        >>> f"{s.share:.0%}", s.cause
        ('38%', 'as-published')
    """
    if isinstance(measured_flops, bool) or not isinstance(measured_flops, (int, float)) or not measured_flops > 0:
        raise ValueError(f"measured_flops must be a rate in FLOP/s > 0, e.g. limits.peak_flops('float16'), "
                         f"got {measured_flops!r}")
    if not isinstance(gpu, str):
        raise TypeError(f"gpu must be a GPU name such as 'Tesla T4', got {gpu!r}")
    if precision not in ("fp16", "bf16"):
        raise ValueError(f"precision must be 'fp16' or 'bf16', got {precision!r}")
    if clocks is not None and not isinstance(clocks, GPUClocks):
        raise TypeError(f"clocks must come from course.gpu_clocks(...), got {type(clocks).__name__}")
    try:
        spec = gpu_spec(gpu)
    except KeyError:
        return DatasheetShare(gpu, precision, float(measured_flops), None, None, clocks)
    peak = spec.fp16_tensor_flops if precision == "fp16" else spec.bf16_tensor_flops
    try:
        figure = achievable(gpu)
    except ValueError:
        figure = None
    if figure is not None and figure.precision != precision:
        figure = None
    return DatasheetShare(spec.name, precision, float(measured_flops), None if peak is None else float(peak), figure,
                          clocks)
