"""``torch.profiler`` trace files of a CUDA run, written as kineto exports them (``prof.export_chrome_trace``), for the
tests of what reads trace files (Holistic Trace Analysis through ``gl.profiling.trace_breakdown``).

What such a file holds:

- top-level ``schemaVersion``, ``deviceProperties`` (one entry per GPU), ``distributedInfo`` (``backend``, ``rank``,
  ``world_size``) when ``torch.distributed`` was initialised, ``traceEvents``, ``displayTimeUnit`` and
  ``baseTimeNanoseconds``; times (``ts``, ``dur``) in microseconds;
- kineto's copies of the host's ranges on the GPU's timeline (``gpu_user_annotation``, drawn on a stream's row),
  spanning the kernels launched under them, with no ``stream`` argument: not kernels;
- on the host: ``ProfilerStep#N`` ranges (``cat`` ``user_annotation``), operators (``cpu_op``, ``args["External id"]``)
  and the CUDA runtime calls that launch work (``cuda_runtime``: ``cudaLaunchKernel``, ``cudaMemcpyAsync``), whose
  ``args["correlation"]`` is CUPTI's correlation id;
- on the device (``pid`` the GPU, ``tid`` the stream): kernels (``kernel``) and copies (``gpu_memcpy``), each with
  ``args["device"]``, ``args["stream"]`` and the correlation id of the runtime call that launched it, and a flow
  (``ph`` ``s`` then ``f``, ``cat`` ``ac2g``) from the launch to the kernel.

Example:
    >>> t = TraceFile(rank=1, world_size=2)
    >>> t.step(0, 1000, 2000); t.launch("sm90_gemm", runtime_us=1010, start_us=1020, dur_us=100)
    >>> sorted({e["cat"] for e in t.events})
    ['ac2g', 'cpu_op', 'cuda_runtime', 'kernel', 'user_annotation']
"""
from __future__ import annotations

import gzip
import json
from pathlib import Path

HOST_PID, HOST_TID, GPU = 4242, 4242, 0
GEMM = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel"
NCCL = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevComm*, unsigned long, ncclWork*)"
COPY = "Memcpy HtoD (Pageable -> Device)"


class TraceFile:
    """One rank's trace, built event by event; :meth:`write` saves it as ``.json`` or ``.json.gz``."""

    def __init__(self, rank: int | None = None, world_size: int = 1, device: str = "NVIDIA H100 80GB HBM3"):
        self.rank, self.world_size, self.device = rank, world_size, device
        self.events: list[dict] = []
        self._corr = 1

    def step(self, n: int, start_us: float, end_us: float) -> None:
        """``prof.step()``'s ``ProfilerStep#n`` range on the host."""
        self.events.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{n}", "pid": HOST_PID,
                            "tid": HOST_TID, "ts": start_us, "dur": end_us - start_us,
                            "args": {"External id": 10_000 + n, "Record function id": 0, "Ev Idx": len(self.events)}})

    def device_annotation(self, name: str, start_us: float, end_us: float, stream: int = 7) -> None:
        """kineto's copy of a host range on the GPU's timeline (``gpu_user_annotation``), spanning the first to the last
        kernel launched under it on ``stream`` (its ``tid``). kineto's ``createUserGpuSpan`` adds no metadata, so its
        only argument is the host range's id ("External id"): no ``stream`` argument, which keeps HTA from counting it
        as a kernel. It starts 1 ns early and ends 1 ns late (``output_json.cpp``)."""
        self.events.append({"ph": "X", "cat": "gpu_user_annotation", "name": name, "pid": GPU, "tid": stream,
                            "ts": start_us - 0.001, "dur": end_us - start_us + 0.002,
                            "args": {"External id": 10_000 + len(self.events)}})

    def launch(self, name: str, *, runtime_us: float, start_us: float, dur_us: float, stream: int = 7,
               copy: bool = False, driver: bool = False) -> None:
        """An operator whose runtime call at ``runtime_us`` launches ``name`` on ``stream``, running from ``start_us``
        for ``dur_us`` (a copy: ``cudaMemcpyAsync`` and a ``gpu_memcpy`` event; ``driver``: launched through the
        driver API, as Triton's kernels are: ``cuLaunchKernel``, category ``cuda_driver``)."""
        corr = self._corr
        self._corr += 1
        self.events.append({"ph": "X", "cat": "cpu_op", "name": "aten::copy_" if copy else "aten::mm", "pid": HOST_PID,
                            "tid": HOST_TID, "ts": runtime_us - 2, "dur": 8,
                            "args": {"External id": corr, "Record function id": 0, "Ev Idx": len(self.events)}})
        call = "cudaMemcpyAsync" if copy else "cuLaunchKernel" if driver else "cudaLaunchKernel"
        self.events.append({"ph": "X", "cat": "cuda_driver" if driver else "cuda_runtime", "name": call,
                            "pid": HOST_PID, "tid": HOST_TID, "ts": runtime_us, "dur": 4,
                            "args": {"External id": corr, "cbid": 41 if copy else 211, "correlation": corr}})
        device = {"ph": "X", "cat": "gpu_memcpy" if copy else "kernel", "name": name, "pid": GPU, "tid": stream,
                  "ts": start_us, "dur": dur_us,
                  "args": {"External id": corr, "device": GPU, "stream": stream, "correlation": corr,
                           **({"bytes": 1 << 20, "memory bandwidth (GB/s)": 20.0} if copy else
                              {"registers per thread": 128, "shared memory": 49152, "blocks per SM": 1.0,
                               "warps per SM": 4.0, "grid": [132, 1, 1], "block": [128, 1, 1],
                               "est. achieved occupancy %": 6})}}
        self.events.append(device)
        self.events.append({"ph": "s", "id": corr, "pid": HOST_PID, "tid": HOST_TID, "ts": runtime_us, "cat": "ac2g",
                            "name": "ac2g"})
        self.events.append({"ph": "f", "id": corr, "pid": GPU, "tid": stream, "ts": start_us, "cat": "ac2g",
                            "name": "ac2g", "bp": "e"})

    def document(self) -> dict:
        doc = {"schemaVersion": 1,
               "deviceProperties": [{"id": GPU, "name": self.device, "totalGlobalMem": 85_029_158_912,
                                     "computeMajor": 9, "computeMinor": 0, "maxThreadsPerBlock": 1024,
                                     "maxThreadsPerMultiprocessor": 2048, "regsPerBlock": 65536,
                                     "regsPerMultiprocessor": 65536, "warpSize": 32, "sharedMemPerBlock": 49152,
                                     "sharedMemPerMultiprocessor": 233472, "numSms": 132,
                                     "sharedMemPerBlockOptin": 232448}],
               "traceEvents": self.events, "traceName": "trace.json", "displayTimeUnit": "ms",
               "baseTimeNanoseconds": 1_795_000_000_000_000_000}
        if self.rank is not None:
            doc["distributedInfo"] = {"backend": "nccl", "rank": self.rank, "world_size": self.world_size}
        return doc

    def write(self, path: str | Path) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        text = json.dumps(self.document())
        if path.name.endswith(".gz"):
            with gzip.open(path, "wt") as f:
                f.write(text)
        else:
            path.write_text(text)
        return path


def host_bound(rank: int | None = 0, world_size: int = 1, steps: int = 3) -> TraceFile:
    """A step the host paces: per 1,000 us step, a 100 us GEMM, a second one launched 380 us after the first ended,
    and a 20 us copy launched after that: the GPU waits for every launch. Over 3 steps: span 2,705 us, 600 us
    computing, 60 us copying, 2,045 us idle, all of it waiting for the host."""
    t = TraceFile(rank, world_size)
    for s in range(steps):
        base = 1000 * (s + 1)
        t.step(s, base, base + 1000)
        t.launch(GEMM, runtime_us=base + 10, start_us=base + 20, dur_us=100)
        t.launch(GEMM, runtime_us=base + 500, start_us=base + 510, dur_us=100)
        t.launch(COPY, runtime_us=base + 700, start_us=base + 705, dur_us=20, copy=True)
        t.device_annotation(f"ProfilerStep#{s}", base + 20, base + 725)
    return t


def busy_with_overlapped_comm(rank: int | None = 1, world_size: int = 2, steps: int = 3) -> TraceFile:
    """A step whose work is queued at its start: three 300 us GEMMs 5 us apart on stream 7 and a 200 us all-reduce
    on stream 13 from 470 us to 670 us, over the second and third GEMM. Over 3 steps: span 2,910 us, 2,700 us
    computing, 15 us communicating alone (the all-reduce across the 5 us gap), 195 us idle; of the all-reduce's
    200 us, 195 us overlap a GEMM."""
    t = TraceFile(rank, world_size)
    for s in range(steps):
        base = 1000 * (s + 1)
        t.step(s, base, base + 1000)
        for i, start in enumerate((20, 325, 630)):
            t.launch(GEMM, runtime_us=base + 1 + 2 * i, start_us=base + start, dur_us=300)
        t.launch(NCCL, runtime_us=base + 9, start_us=base + 470, dur_us=200, stream=13)
        t.device_annotation(f"ProfilerStep#{s}", base + 20, base + 930)
    return t


def tiny_kernels(rank: int | None = None, steps: int = 3, per_step: int = 40) -> TraceFile:
    """A step of ``per_step`` 5 us Triton kernels (launched through the driver API) 10 us apart, all queued at the
    step's start: the GPU idles between back-to-back kernels, never for the host (until the next step)."""
    t = TraceFile(rank)
    for s in range(steps):
        base = 1000 * (s + 1)
        t.step(s, base, base + 1000)
        for i in range(per_step):
            t.launch("triton_poi_fused_add_mul_0", runtime_us=base + 1 + 0.1 * i, start_us=base + 20 + 15 * i, dur_us=5,
                     driver=True)
    return t
