"""Tests of ``gpulab.course.training``."""
