"""The course's scaffolding: what the lessons use to demonstrate, exercise and check, beside the toolkit.

The notebooks import it as ``from gpulab import course``; your own notebooks rarely need it. It may use the
toolkit (``gpulab``); the toolkit never imports it.

- ``models``, ``training``: the reference models (MLP, CNN, Transformer block) and a plain training loop
- ``images``, ``downloads``, ``pipelines``, ``dali``: image sets on disk and the lesson's input pipelines
- ``precision``, ``accumulation``, ``batching``, ``runs``: the per-lesson demonstrations and sweeps
- ``bandwidth``: lesson 02's host-to-device copy sweep; ``oom_fixes``: lesson 09's fix ladder as training settings
- ``streams``: lesson 02's CUDA streams: copy/compute overlap, the stale read of a non-blocking copy
- ``augment``: batched image augmentation on the batch's device (lessons 06 and 08)
- ``keras``: starting TensorFlow and Keras in a lesson (Triton first, PyTorch's CUDA cache released, GPU memory on
  demand, quiet, seeded)
- ``optional``: a lesson's part that needs TensorFlow, DALI, MLflow or ONNX Runtime, skipped in one line without it
- ``compilers``: lesson 10's compile modes (what ``max-autotune`` tunes on this GPU)
- ``published``: the learner's figures beside published ones, the closing table of each lesson
- ``checks``: exercise self-checks, measured challenges, reference solutions that run only in CI
- ``narrate``: interpretations written per device and filled with the measured figures
- ``prediction``: the learner's **Predict** answers recorded in a cell and shown beside the measurement
- ``tf32``: PyTorch's TF32 switches set and restored, and the fp32 step's ceiling on Ampere+
- ``optimizer_step``: one optimizer step per effective batch (unscale, clip, schedule, uneven last window)
- ``amdahl``: lesson 00's step of a serial host part and a parallel device part, timed against Amdahl's law
- ``nvidia_smi``: lesson 01's nvidia-smi, run where it exists or shown as a labelled illustration
- ``no_sync``: DDP gradient accumulation with ``no_sync()`` checked in one process (lesson 07's exercise)
- ``comm_overlap``: how much of DDP's NCCL all-reduce ran beside compute kernels, from a profiler trace
- ``scripts``: the scripts the multi-GPU lesson launches with torchrun
- ``digits``, ``capstone``, ``capstone_torch``, ``ablation``: lesson 12's MNIST tensors, the seed loop as a
  ``Recipe`` of switches, and the ablation that keeps each change only if it helps; ``capstone_mfu``: MFU by two
  FLOP counts over the measured and the datasheet peak
- ``flash_attention``: lesson 13's FlashAttention-2 forward in Triton, its exercise check against SDPA and its timing
- ``gpt_mfu``: lesson 13's MFU against the datasheet peak, as published runs quote it, with the measured share beside
- ``sustained``: what a card sustains against its datasheet (published shares, NVML clocks and power limit)
- ``coalescing``, ``conv_levers``, ``optimizer_memory``, ``dali_install``, ``data_parallel``: lessons 11, 04, 05,
  06 and 07's demonstrations (sectors per warp load, channels_last and cudnn.benchmark alone, optimizer state,
  DALI's wheel, worker counts and noise margins)
- ``roofline_exercises``, ``setup_exercises``, ``exercise_checks``: exercise checks that work out the expected
  answer themselves (lessons 00, 01, 06, 08, 09)
- ``fresh_memory``: appendix A1's buffer-reuse challenge, its target from a clone timed against a copy_ on one thread

Example:
    >>> from gpulab import course
    >>> course.check("two plus two", 2 + 2, 4)
    [ok] two plus two: 4 is right
"""
from . import models, scripts
from .narrate import Narration, narrate
from .lesson_setup import setup
from .pricing import describe_price, lesson_price
from .prediction import (Prediction, PredictionTable, VersusPrediction, compare_predictions, predict, predictions,
                         versus_prediction)
from .amdahl import SerialParallelStep, python_work, serial_parallel_step, speedup_needed
from .nvidia_smi import CLOCK_EVENT_REASONS, SmiHeader, SmiOutput, active_reasons, nvidia_smi, smi_header
from .sustained import Achievable, DatasheetShare, GPUClocks, achievable, explain_share, gpu_clocks
from .roofline_exercises import check_linear_intensity, compute_bound_batch, linear_work
from .setup_exercises import (ARCH_CASES, VISIBLE_CASES, check_kernels, check_slowdown_reader, check_visible,
                              cuda_visible, kernels_run_on, slowdown_reasons)
from .accumulation import GradientCheck, checkpointed, compare_gradients, micro_batch_gradients
from .augment import augment_batch
from .bandwidth import TransferPoint, TransferSweep, default_ceilings, transfer_sweep
from .batching import (BatchRun, BatchSweep, batch_sweep, cosine_factor, curve_knee, scale_lr, train_at_batch_size,
                       warmup_factor)
from .batching import Knee
from .batch_figures import plot_accuracy
from .loop_watch import LoopWatch, PhaseUse, phase_utilisation, watch_loops
from .checks import SOLUTIONS_ENV, Challenge, Check, NotAnswered, challenge, check, solutions
from .dali import DaliLoader, DaliPlan, dali_available, dali_loader, dali_plan, dali_tf_available, dali_tf_dataset
from .dali import check_dali, dali_tolerance
from .no_sync import NoSyncCheck, check_no_sync, no_sync_loss, no_sync_nullcontext
from .comm_overlap import CommOverlap, comm_overlap, profile_comm_overlap
from .data_parallel import (AccumulationBench, NoiseMargin, accumulation_bench, check_allreduce_crossover,
                            check_strong_scaling, fsdp_runs_on_cpu, model_state_table, noise_margin, worker_counts)
from .downloads import real_images
from .images import CorruptDataError, ImageSet, data_dir, synthetic_images
from .keras import KerasSetup, start_keras
from .optional import OptionalPart, needs
from .compilers import AutotuneScope, CompiledTraining, TorchFeature, compiled_training, max_autotune_scope, torch_feature
from .oom_fixes import fix_settings, ladder_rungs
from .kernels import FusedChallenge, fused_challenge, matmul_global_bytes
from .coalescing import MatmulCoalescing, WarpLoad, matmul_coalescing, warp_sectors
from .streams import OverlapTiming, StaleRead, copy_compute_overlap, stale_read
from .pipelines import CachedLoader, cached_loader, tf_dataset, torch_loader
from .precision import UnderflowReport, float_formats, gradient_underflow, keras_cnn, keras_step_times, matmul_sweep
from .published import (Cited, Measured, YourNumbers, by_this_course, cite, datasheet, measured, published_curve,
                        your_numbers)
from .runs import RunComparison, compare_runs, pattern_batch, train_interleaved
from .tf32 import TF32_STATES, fp32_step_ceiling, tf32, tf32_flags, tf32_supported, under_tf32
from .conv_levers import CONV_LEVERS, conv_lever_steps, cudnn_benchmark
from .optimizer_memory import OptimizerStates, adafactor_available, compare_optimizers, optimizer_state_bytes
from .accumulation import matmul_ops
from .optimizer_step import (EpochReport, StepReport, accumulate_epoch, effective_batch_step, evaluate_autocast,
                             training_state)
from .training import TrainConfig, TrainResult, accumulated_gradients, evaluate, train, train_step
from .verdicts import VERDICT_MEANING, verdict_story
from .allocator import (AllocatorRun, TFOOM, TF_OOM_EXAMPLE, alloc_conf, allocator_probe, allowed_bytes, parse_tf_oom,
                        tf_limit_gpu_memory)
from .memory_fit import FitChallenge, fit_challenge
from .fresh_memory import ReuseTarget, reuse_target
from .dali import HW_DECODER_LOAD, has_hardware_jpeg_decoder
from .dali_install import DaliInstall, dali_install_args, dali_wheel, install_dali
from .exercise_checks import (check_bytes_per_parameter, check_calls_per_item, check_faster_loading,
                              check_loaders_that_keep_up, check_phase_bound, check_running_total,
                              check_workers_needed)
from .digits import Digits, PerSampleDigits, digits, to_features
from .capstone import Recipe, RecipeRun, digits_on_disk, recipe_stepper, seed_model, train_recipe
from .ablation import Ablation, AblationStep, Change, ablate
from .capstone_torch import interleaved_gain, largest_batch, torch_ablation, torch_changes
from .capstone_keras import KerasRecipe, KerasRun, keras_ablation, keras_changes, train_keras_recipe
from .capstone_report import check_tracked, RecipeChallenge, ResultsCard, recipe_ceiling, recipe_challenge, results_card, results_dir, runs_dir
from .capstone_report import ChallengeTarget, challenge_target
from .capstone_mfu import MFU, mfu_report
from .gpt_mfu import GPTMFU, gpt_mfu
from .capstone_energy import PrecisionCost, compare_precisions, energy_headline, precision_cost
from .gpt import generate, gpt, text_tokens, token_batch
from .attention_sweep import AttentionPoint, AttentionSweep, attention_sweep, manual_attention
from .flash_attention import (FlashCase, FlashCheck, FlashTiming, check_flash_attention, flash_attention, key_tiles,
                              time_flash_attention)
from .generation import GenerationRow, GenerationSpeed, generation_speed
from .gpt_train import (GPTRecipe, GPTRun, gpt_ablation, gpt_challenge, gpt_changes, gpt_stepper, micro_batches_that_fit,
                        train_gpt)
from .energy_lesson import (EnergyExample, PowerContrast, check_energy_reading, example_energy_trace,
                            power_contrast)

__all__ = [
    "setup", "lesson_price", "describe_price",
    "EnergyExample", "PowerContrast", "check_energy_reading", "example_energy_trace", "power_contrast",
    "FusedChallenge", "fused_challenge", "matmul_global_bytes", "MatmulCoalescing", "WarpLoad", "matmul_coalescing", "warp_sectors", "CompiledTraining", "compiled_training", "TorchFeature", "torch_feature",
    "digits", "Digits", "PerSampleDigits", "to_features", "Recipe", "RecipeRun", "train_recipe", "recipe_stepper", "seed_model",
    "digits_on_disk", "ablate", "Ablation", "AblationStep", "Change", "torch_ablation", "torch_changes", "largest_batch", "interleaved_gain",
    "KerasRecipe", "KerasRun", "train_keras_recipe", "keras_changes", "keras_ablation",
    "PrecisionCost", "precision_cost", "compare_precisions", "energy_headline",
    "gpt", "text_tokens", "token_batch", "generate", "AttentionPoint", "AttentionSweep", "attention_sweep",
    "manual_attention", "flash_attention", "check_flash_attention", "time_flash_attention", "key_tiles", "FlashCase",
    "FlashCheck", "FlashTiming", "GenerationRow", "GenerationSpeed", "generation_speed", "GPTRecipe", "GPTRun", "train_gpt",
    "gpt_stepper", "gpt_changes", "gpt_ablation", "gpt_challenge", "micro_batches_that_fit",
    "check_tracked", "recipe_ceiling", "recipe_challenge", "RecipeChallenge", "results_card", "ResultsCard", "results_dir", "runs_dir",
    "challenge_target", "ChallengeTarget",
    "MFU", "mfu_report", "GPTMFU", "gpt_mfu",
    "serial_parallel_step", "SerialParallelStep", "python_work", "speedup_needed",
    "nvidia_smi", "SmiOutput", "smi_header", "SmiHeader", "active_reasons", "CLOCK_EVENT_REASONS",
    "achievable", "Achievable", "gpu_clocks", "GPUClocks", "explain_share", "DatasheetShare",
    "check_linear_intensity", "compute_bound_batch", "linear_work",
    "cuda_visible", "check_visible", "VISIBLE_CASES", "kernels_run_on", "check_kernels", "ARCH_CASES",
    "slowdown_reasons", "check_slowdown_reader",
    "models", "scripts", "TrainConfig", "TrainResult", "train", "train_step", "accumulated_gradients", "evaluate",
    "check", "Check", "NotAnswered", "challenge", "Challenge", "solutions", "SOLUTIONS_ENV",
    "narrate", "Narration",
    "predict", "Prediction", "versus_prediction", "VersusPrediction", "compare_predictions", "predictions",
    "PredictionTable",
    "float_formats", "gradient_underflow", "UnderflowReport", "keras_cnn", "keras_step_times", "matmul_sweep",
    "micro_batch_gradients", "compare_gradients", "GradientCheck", "checkpointed",
    "train_interleaved", "compare_runs", "RunComparison", "pattern_batch",
    "batch_sweep", "BatchSweep", "scale_lr", "warmup_factor", "cosine_factor", "train_at_batch_size", "BatchRun",
    "curve_knee", "Knee", "plot_accuracy", "watch_loops", "LoopWatch", "PhaseUse", "phase_utilisation",
    "synthetic_images", "real_images", "ImageSet", "CorruptDataError", "data_dir",
    "torch_loader", "cached_loader", "CachedLoader", "tf_dataset",
    "dali_loader", "DaliLoader", "dali_plan", "DaliPlan", "dali_tf_dataset", "dali_available", "dali_tf_available",
    "augment_batch",
    "check_dali", "dali_tolerance",
    "check_no_sync", "NoSyncCheck", "no_sync_loss", "no_sync_nullcontext",
    "comm_overlap", "CommOverlap", "profile_comm_overlap",
    "worker_counts", "NoiseMargin", "noise_margin", "AccumulationBench", "accumulation_bench",
    "check_allreduce_crossover", "check_strong_scaling", "fsdp_runs_on_cpu", "model_state_table",
    "transfer_sweep", "TransferSweep", "TransferPoint", "default_ceilings",
    "start_keras", "KerasSetup", "needs", "OptionalPart", "max_autotune_scope", "AutotuneScope",
    "fix_settings", "ladder_rungs",
    "copy_compute_overlap", "OverlapTiming", "stale_read", "StaleRead",
    "tf32", "tf32_flags", "tf32_supported", "fp32_step_ceiling", "TF32_STATES", "under_tf32",
    "CONV_LEVERS", "conv_lever_steps", "cudnn_benchmark", "matmul_ops",
    "OptimizerStates", "adafactor_available", "compare_optimizers", "optimizer_state_bytes",
    "effective_batch_step", "StepReport", "accumulate_epoch", "EpochReport", "training_state", "evaluate_autocast",
    "verdict_story", "VERDICT_MEANING",
    "alloc_conf", "allowed_bytes", "allocator_probe", "AllocatorRun", "tf_limit_gpu_memory", "parse_tf_oom", "TFOOM",
    "TF_OOM_EXAMPLE", "fit_challenge", "FitChallenge", "reuse_target", "ReuseTarget",
    "HW_DECODER_LOAD", "has_hardware_jpeg_decoder", "DaliInstall", "dali_install_args", "dali_wheel", "install_dali",
    "check_faster_loading", "check_loaders_that_keep_up", "check_workers_needed", "check_phase_bound",
    "check_calls_per_item", "check_bytes_per_parameter", "check_running_total",
    "your_numbers", "YourNumbers", "measured", "Measured", "cite", "Cited", "by_this_course", "datasheet", "published_curve",
]
