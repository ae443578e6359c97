"""Tests of ``gpulab.course.lesson``."""
