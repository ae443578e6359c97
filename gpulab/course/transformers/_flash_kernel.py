"""The course's FlashAttention-2 forward kernel in Triton (lesson 13), in a module of its own: importing it imports
Triton, which on a CPU must come after ``TRITON_INTERPRET=1`` is set (``gl.setup()`` or
``gl.kernels.triton_backend("cpu")`` does it). :func:`gpulab.course.transformers.flash_attention` imports it when it first runs.

The algorithm is FlashAttention-2's forward pass (Dao 2023, arXiv:2307.08691, Algorithm 1): one program per block of
``BLOCK_M`` queries of one (batch, head); it keeps its queries, a running maximum ``m_i`` and a running sum ``l_i`` per
query (fp32), and an fp32 output accumulator on chip, and walks the keys and values in tiles of ``BLOCK_N``. For each
tile it computes the scores, raises the running maximum, rescales what it has summed so far by
``exp2(m_old - m_new)`` and adds the tile's ``exp2(s - m_new)`` and their product with V; the division by the sum
happens once, at the end. Under a causal mask the tiles entirely above the diagonal are never loaded: the loop stops
at the block's last query. Scores are kept in base 2 (``exp(x) = exp2(x * log2(e))``), as the GPU's ``exp2`` is the
fast one.
"""
import triton
import triton.language as tl

__all__ = ["flash_attention_kernel"]


@triton.jit
def flash_attention_kernel(q_ptr, k_ptr, v_ptr, o_ptr, seq_len, sm_scale,
                           HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                           CAUSAL: tl.constexpr):
    # q, k, v, o: contiguous (batch, heads, seq_len, HEAD_DIM); grid (query blocks, batch x heads)
    base = tl.program_id(1).to(tl.int64) * seq_len * HEAD_DIM        # this (batch, head)'s first element
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)       # this program's queries
    dims = tl.arange(0, HEAD_DIM)
    q = tl.load(q_ptr + base + rows[:, None] * HEAD_DIM + dims[None, :], mask=rows[:, None] < seq_len, other=0.0)
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)             # running max of each query's scores
    l_i = tl.zeros([BLOCK_M], tl.float32)                           # running sum of exp2(score - m_i)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)                 # running sum of exp2(score - m_i) * v
    qk_scale = sm_scale * 1.4426950408889634                        # 1/sqrt(d) and log2(e): scores in base 2
    if CAUSAL:   # causal block skipping: key tiles past this block's last query are never loaded
        end = tl.minimum((tl.program_id(0) + 1) * BLOCK_M, seq_len)
    else:
        end = seq_len
    for start_n in range(0, end, BLOCK_N):
        cols = start_n + tl.arange(0, BLOCK_N)                      # this tile's keys
        k = tl.load(k_ptr + base + cols[None, :] * HEAD_DIM + dims[:, None], mask=cols[None, :] < seq_len,
                    other=0.0)                                      # K^T: (HEAD_DIM, BLOCK_N)
        v = tl.load(v_ptr + base + cols[:, None] * HEAD_DIM + dims[None, :], mask=cols[:, None] < seq_len,
                    other=0.0)
        s = tl.dot(q, k) * qk_scale                                 # (BLOCK_M, BLOCK_N) scores, fp32
        keep = cols[None, :] < seq_len
        if CAUSAL:
            keep = keep & (rows[:, None] >= cols[None, :])          # query i sees keys 0..i
        s = tl.where(keep, s, float("-inf"))
        # the online softmax: raise the max, rescale what was summed under the old one, add this tile
        m_new = tl.maximum(m_i, tl.max(s, 1))
        alpha = tl.math.exp2(m_i - m_new)
        p = tl.math.exp2(s - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
        m_i = m_new
    acc = acc / l_i[:, None]                                        # FlashAttention-2: divide once, at the end
    tl.store(o_ptr + base + rows[:, None] * HEAD_DIM + dims[None, :], acc.to(o_ptr.dtype.element_ty),
             mask=rows[:, None] < seq_len)
