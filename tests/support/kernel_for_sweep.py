"""A Triton kernel the bad-input sweep compiles (gl.kernels.kernel_resources' valid call): a file of its own, so its
source can be read and compiled in a child process."""
import triton
import triton.language as tl


@triton.jit
def scale_kernel(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * 2.0, mask=offs < n)
