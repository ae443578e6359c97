"""gpulab.course.lesson.keras: TensorFlow/Keras start-up for the lessons. TensorFlow is never imported into the test
process (imported before Triton it crashes PyTorch later): bad arguments are refused before any import, and the
real start-up runs in a fresh Python."""
from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpulab.course.lesson.keras import POLICIES, KerasSetup, start_keras

ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.parametrize("kwargs, error, match", [
    (dict(policy="mixed_fp8"), ValueError, "'mixed_fp8'"),
    (dict(policy="float16"), ValueError, "mixed_bfloat16"),
    (dict(seed=-1), ValueError, "-1"),
    (dict(seed=1.5), TypeError, "1.5"),
    (dict(seed=True), TypeError, "True"),
    (dict(memory_growth="yes"), TypeError, "memory_growth"),
    (dict(quiet=0), TypeError, "quiet"),
])
def test_bad_arguments_are_refused_before_tensorflow_is_imported(kwargs, error, match):
    had_tf = "tensorflow" in sys.modules
    with pytest.raises(error, match=match):
        start_keras(**kwargs)
    assert ("tensorflow" in sys.modules) == had_tf


def test_banner_of_a_setup():
    fake = KerasSetup(tf=os, keras=os, tensorflow_version="2.21.0", keras_version="3.15.1",
                      gpus=("/physical_device:GPU:0",), memory_growth=True, policy="mixed_float16", seed=0,
                      notes=("a note",))
    assert repr(fake) == ("TensorFlow 2.21.0, Keras 3.15.1: 1 GPU(s), GPU memory on demand; policy mixed_float16; "
                          "seed 0\na note")
    assert "a note" in fake._repr_html_() and "<div" in fake._repr_html_()
    assert POLICIES == ("float32", "mixed_float16", "mixed_bfloat16")


SCRIPT = r"""
import json, os, random, sys
import numpy as np
from gpulab.course.lesson.keras import start_keras
ks = start_keras(seed=3, policy="mixed_bfloat16")
tf, keras = ks.tf, ks.keras
cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)  # not started yet
r, n = random.random(), float(np.random.rand())
random.seed(3); np.random.seed(3)
print(json.dumps({
    "logical_cpus": len(tf.config.list_logical_devices("CPU")),
    "policy": keras.mixed_precision.global_policy().name,
    "seeded": [r == random.random(), n == float(np.random.rand())],
    "triton_loaded": "triton" in sys.modules,
    "same_modules": [tf is sys.modules["tensorflow"], keras is sys.modules["keras"]],
    "allow_growth": os.environ.get("TF_FORCE_GPU_ALLOW_GROWTH"),
    "log_level": os.environ.get("TF_CPP_MIN_LOG_LEVEL"),
    "logger": tf.get_logger().level,
    "gpus": list(ks.gpus), "growth": ks.memory_growth, "seed": ks.seed, "banner": ks.banner,
}))
"""


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("tensorflow") is None, reason="TensorFlow is not installed")
def test_start_keras_in_a_fresh_process():
    env = {k: v for k, v in os.environ.items() if k not in ("TF_FORCE_GPU_ALLOW_GROWTH", "TF_CPP_MIN_LOG_LEVEL")}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    done = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=240, env=env,
                          cwd=ROOT)
    assert done.returncode == 0, done.stderr[-2000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["logical_cpus"] == 2                   # start_keras did not start TensorFlow's devices
    assert out["policy"] == "mixed_bfloat16"
    assert out["seeded"] == [True, True]
    assert out["same_modules"] == [True, True]
    assert out["allow_growth"] == "true" and out["log_level"] == "3" and out["logger"] == 40   # logging.ERROR
    assert out["seed"] == 3 and ("policy mixed_bfloat16; seed 3" in out["banner"])
    if importlib.util.find_spec("triton") is not None:
        assert out["triton_loaded"]                   # loaded before TensorFlow
    if not out["gpus"]:
        assert out["growth"] is None and "CPU only" in out["banner"]
