"""The course's scaffolding: what the lessons use to demonstrate, exercise and check, beside the toolkit.

The notebooks import it as ``from gpulab import course``; your own notebooks rarely need it. It may use the
toolkit (``gpulab``); the toolkit never imports it.

- ``models``, ``training``: the reference models (MLP, CNN, Transformer block) and a plain training loop
- ``images``, ``downloads``, ``pipelines``, ``dali``: image sets on disk and the lesson's input pipelines
- ``precision``, ``accumulation``, ``batching``, ``runs``: the per-lesson demonstrations and sweeps
- ``bandwidth``: lesson 02's host-to-device copy sweep; ``oom_fixes``: lesson 09's fix ladder as training settings
- ``augment``: batched image augmentation on the batch's device (lessons 06 and 08)
- ``keras``: starting TensorFlow and Keras in a lesson (Triton first, GPU memory on demand, quiet, seeded)
- ``published``: the learner's figures beside published ones, the closing table of each lesson
- ``checks``: exercise self-checks
- ``scripts``: the scripts the multi-GPU lesson launches with torchrun

Example:
    >>> from gpulab import course
    >>> course.check("two plus two", 2 + 2, 4)
    [ok] two plus two: 4 is right
"""
from . import models
from .accumulation import GradientCheck, checkpointed, compare_gradients, micro_batch_gradients
from .augment import augment_batch
from .bandwidth import TransferPoint, TransferSweep, default_ceilings, transfer_sweep
from .batching import BatchRun, BatchSweep, batch_sweep, scale_lr, train_at_batch_size, warmup_factor
from .checks import Check, check
from .dali import DaliLoader, DaliPlan, dali_available, dali_loader, dali_plan, dali_tf_available, dali_tf_dataset
from .downloads import real_images
from .images import CorruptDataError, ImageSet, data_dir, synthetic_images
from .keras import KerasSetup, start_keras
from .oom_fixes import fix_settings, ladder_rungs
from .pipelines import CachedLoader, cached_loader, tf_dataset, torch_loader
from .precision import UnderflowReport, float_formats, gradient_underflow, keras_cnn, keras_step_times, matmul_sweep
from .published import Cited, Measured, YourNumbers, cite, datasheet, measured, published_curve, your_numbers
from .runs import RunComparison, compare_runs, pattern_batch, train_interleaved
from .training import TrainConfig, TrainResult, accumulated_gradients, evaluate, train, train_step

__all__ = [
    "models", "TrainConfig", "TrainResult", "train", "train_step", "accumulated_gradients", "evaluate",
    "check", "Check",
    "float_formats", "gradient_underflow", "UnderflowReport", "keras_cnn", "keras_step_times", "matmul_sweep",
    "micro_batch_gradients", "compare_gradients", "GradientCheck", "checkpointed",
    "train_interleaved", "compare_runs", "RunComparison", "pattern_batch",
    "batch_sweep", "BatchSweep", "scale_lr", "warmup_factor", "train_at_batch_size", "BatchRun",
    "synthetic_images", "real_images", "ImageSet", "CorruptDataError", "data_dir",
    "torch_loader", "cached_loader", "CachedLoader", "tf_dataset",
    "dali_loader", "DaliLoader", "dali_plan", "DaliPlan", "dali_tf_dataset", "dali_available", "dali_tf_available",
    "augment_batch",
    "transfer_sweep", "TransferSweep", "TransferPoint", "default_ceilings",
    "start_keras", "KerasSetup",
    "fix_settings", "ladder_rungs",
    "your_numbers", "YourNumbers", "measured", "Measured", "cite", "Cited", "datasheet", "published_curve",
]
