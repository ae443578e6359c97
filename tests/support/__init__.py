"""What the tests share, in one place.

- Fakes built from the real libraries and held to them by ``tests/project/test_fakes_match_real.py``: NVML
  (``fake_nvml``: pynvml's structs, errors and constants, a scripted three-GPU machine), torch.cuda's allocator
  (``fake_cuda``), kineto's events and trace files (``fake_kineto``, ``fake_trace``) and DALI (``fake_dali``).
- The bad-input sweep (``badinput``: every public call given a table of bad values) and the snapshot of global
  state it takes around each call (``globalstate``).
- ``course_tool``: ``tools/course.py`` loaded as a module; ``kernel_for_sweep``: a Triton kernel for the sweep.
- ``fixtures/``: the scripts the distributed tests launch (one that says hello, one that raises, one that hangs).
"""
