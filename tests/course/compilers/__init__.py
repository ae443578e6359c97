"""Tests of ``gpulab.course.compilers``."""
