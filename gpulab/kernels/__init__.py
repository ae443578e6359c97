"""Your own kernels: Triton and Numba's CUDA target compiled on an NVIDIA GPU and simulated on a CPU, checked
against PyTorch, timed the right way for where they run, their memory traffic counted and placed on a roofline;
C++/CUDA source built into PyTorch with ``load_inline``; a Triton kernel's registers, spills and shared memory
per compiled architecture and the occupancy they allow, read without a GPU.

Example:
    >>> import gpulab as gl
    >>> gl.kernels.triton_backend("cpu").simulated
    True
"""
from .backends import KernelBackend, numba_backend, triton_backend
from .extension import BuildSupport, Extension, cpp_extension, cuda_build_support
from .resources import KernelResources, Occupancy, kernel_resources, occupancy
from .measure import KernelCheck, Traffic, Tuning, autotune, bench_kernel, check_kernel, traffic, tuning
from .roofline import KernelPoint, KernelRoofline, KernelWork, kernel_roofline

__all__ = ["KernelBackend", "triton_backend", "numba_backend", "KernelCheck", "check_kernel", "bench_kernel",
           "Traffic", "traffic", "autotune", "Tuning", "tuning", "KernelWork", "KernelPoint", "KernelRoofline",
           "kernel_roofline", "BuildSupport", "cuda_build_support", "Extension", "cpp_extension", "kernel_resources",
           "KernelResources", "occupancy", "Occupancy"]
