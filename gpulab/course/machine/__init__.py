"""The machine under the lessons: lessons 00 (why GPUs), 01 (setup) and appendix A1 (a shared CPU).

Amdahl's law measured (``amdahl``), the roofline exercise (``roofline_exercises``), what a GPU sustains against its
datasheet (``sustained``) and its clocks and power sampled while it works (``under_load``), ``nvidia-smi`` read or
illustrated (``nvidia_smi``), lesson 01's exercise checks (``setup_exercises``) and energy (``energy``), TF32's switches (``tf32``), A1's buffer-reuse target
(``fresh_memory``) and the machine under a CPU timer: cores, SMT, clock and pinning (``topology``).
"""
