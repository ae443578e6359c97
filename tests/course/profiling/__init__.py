"""Tests of ``gpulab.course.profiling``."""
