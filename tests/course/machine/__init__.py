"""Tests of ``gpulab.course.machine``."""
