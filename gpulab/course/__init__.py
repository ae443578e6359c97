"""The course's scaffolding: what the lessons use to demonstrate, exercise and check, beside the toolkit.

The notebooks import it as ``from gpulab import course``; your own notebooks rarely need it. It may use the
toolkit (``gpulab``); the toolkit never imports it.

Its parts, one folder each (the sub-package paths are the way in for a contributor; a lesson reaches every name as
``course.X``):

- ``lesson``: what every lesson uses: setup, narration, predictions, published figures, checks and challenges,
  prices, Keras start-up, the reference models, the plain training loop, runs side by side, energy per step
- ``machine`` (lessons 00, 01, A1): Amdahl, the roofline exercise, sustained vs datasheet, nvidia-smi, setup
  checks, energy, TF32, buffer reuse on a shared CPU
- ``training`` (02-05, 09): copies and streams, batch sizes, 16-bit formats and convolution levers, accumulation,
  the optimizer step and its memory, the memory challenge, the allocator and the out-of-memory fix ladder
- ``data`` (06): image sets on disk, augmentation, the input pipelines, DALI and its install
- ``profiling`` (08): the profiling session's story told from its verdicts
- ``distributed`` (07): data parallelism's counts and checks, ``no_sync()``, communication overlap
- ``compilers`` (10, 11): compile modes, compile time (regional, cached), compiled recipes checked, kernels' bytes,
  coalescing
- ``capstone`` (12): MNIST, the recipe, its ablation per framework, energy, MFU, the report
- ``transformers`` (13): the small GPT, its training and ablation, MFU and HFU, each lever's Amdahl bound,
  generation, attention, FlashAttention-2
- ``scripts``: what lessons 07 and 13 launch with torchrun

Example:
    >>> from gpulab import course
    >>> course.check("two plus two", 2 + 2, 4)
    [ok] two plus two: 4 is right
"""
from . import scripts
from .lesson import models, step_energy
from .lesson.narrate import Narration, narrate
from .lesson.setup import setup
from .lesson.pricing import describe_price, lesson_price
from .lesson.prediction import (Prediction, PredictionTable, VersusPrediction, compare_predictions, predict, predictions,
                                versus_prediction)
from .machine.amdahl import SerialParallelStep, python_work, serial_parallel_step, speedup_needed
from .machine.nvidia_smi import CLOCK_EVENT_REASONS, SmiHeader, SmiOutput, active_reasons, nvidia_smi, smi_header
from .machine.topology import CPUTopology, cpu_topology, pinned
from .machine.sustained import Achievable, DatasheetShare, GPUClocks, achievable, explain_share, gpu_clocks
from .machine.under_load import LoadClocks, clocks_under_load
from .machine.roofline_exercises import check_linear_intensity, compute_bound_batch, linear_work
from .machine.setup_exercises import (ARCH_CASES, VISIBLE_CASES, check_kernels, check_slowdown_reader, check_visible,
                                      cuda_visible, kernels_run_on, slowdown_reasons)
from .training.accumulation import GradientCheck, checkpointed, compare_gradients, micro_batch_gradients
from .data.augment import augment_batch
from .training.bandwidth import TransferPoint, TransferSweep, default_ceilings, transfer_sweep
from .training.batching import (BatchRun, BatchSweep, batch_sweep, cosine_factor, curve_knee, scale_lr, train_at_batch_size,
                                warmup_factor)
from .training.batching import Knee
from .training.batch_figures import plot_accuracy
from .training.noise_scale import NoiseScale, gradient_noise_scale
from .training.loop_watch import LoopWatch, PhaseUse, phase_utilisation, watch_loops
from .lesson.checks import SOLUTIONS_ENV, CannotRunHere, Challenge, Check, NotAnswered, challenge, check, solutions
from .data.dali import DaliLoader, DaliPlan, dali_available, dali_loader, dali_plan, dali_tf_available, dali_tf_dataset
from .data.dali import check_dali, dali_tolerance
from .distributed.no_sync import NoSyncCheck, check_no_sync, no_sync_loss, no_sync_nullcontext
from .distributed.alpha_beta import AlphaBeta, fit_alpha_beta
from .distributed.comm_overlap import CommOverlap, comm_overlap, profile_comm_overlap
from .distributed.data_parallel import (AccumulationBench, NoiseMargin, accumulation_bench, check_allreduce_crossover,
                                        check_strong_scaling, fsdp_runs_on_cpu, model_state_table, noise_margin, worker_counts)
from .data.downloads import real_images
from .data.images import CorruptDataError, ImageSet, data_dir, synthetic_images
from .lesson.keras import KerasSetup, start_keras
from .lesson.optional import OptionalPart, needs
from .compilers.modes import AutotuneScope, CompiledTraining, TorchFeature, compiled_training, max_autotune_scope, torch_feature
from .compilers.triton_part import TritonPart, triton_part
from .training.oom_fixes import fix_settings, ladder_rungs
from .compilers.compile_time import CompileTimes, FirstCall, compile_time
from .compilers.kernels import FusedChallenge, fused_challenge, matmul_global_bytes
from .compilers.coalescing import MatmulCoalescing, WarpLoad, matmul_coalescing, warp_sectors
from .training.streams import OverlapTiming, StaleRead, copy_compute_overlap, stale_read
from .data.pipelines import CachedLoader, cached_loader, tf_dataset, torch_loader
from .training.precision import UnderflowReport, float_formats, gradient_underflow, keras_cnn, keras_step_times, matmul_sweep
from .lesson.published import (Cited, Measured, YourNumbers, by_this_course, cite, datasheet, measured, published_curve,
                               your_numbers)
from .lesson.runs import RunComparison, compare_runs, pattern_batch, train_interleaved
from .machine.tf32 import TF32_STATES, fp32_step_ceiling, tf32, tf32_flags, tf32_supported, under_tf32
from .training.conv_levers import CONV_LEVERS, conv_lever_steps, cudnn_benchmark
from .training.optimizer_memory import OptimizerStates, adafactor_available, compare_optimizers, optimizer_state_bytes
from .training.accumulation import matmul_ops
from .training.optimizer_step import (EpochReport, StepReport, accumulate_epoch, effective_batch_step, evaluate_autocast,
                                      training_state)
from .lesson.loop import TrainConfig, TrainResult, accumulated_gradients, evaluate, train, train_step
from .profiling.verdicts import VERDICT_MEANING, verdict_story
from .training.allocator import (AllocatorRun, TFOOM, TF_OOM_EXAMPLE, alloc_conf, allocator_probe, allowed_bytes, parse_tf_oom,
                                 tf_limit_gpu_memory)
from .training.memory_fit import FitChallenge, fit_challenge
from .machine.fresh_memory import ReuseTarget, reuse_target
from .data.dali import HW_DECODER_LOAD, has_hardware_jpeg_decoder
from .data.dali_install import DaliInstall, dali_install_args, dali_wheel, install_dali
from .lesson.exercise_checks import (check_bytes_per_parameter, check_calls_per_item, check_faster_loading,
                                     check_loaders_that_keep_up, check_phase_bound, check_running_total,
                                     check_workers_needed)
from .capstone.digits import Digits, PerSampleDigits, digits, to_features
from .capstone.recipe import Recipe, RecipeRun, digits_on_disk, recipe_stepper, seed_model, train_recipe
from .capstone.ablation import Ablation, AblationStep, Change, ablate
from .capstone.torch_ablation import interleaved_gain, largest_batch, torch_ablation, torch_changes
from .capstone.keras_ablation import KerasRecipe, KerasRun, keras_ablation, keras_changes, train_keras_recipe
from .capstone.report import check_tracked, RecipeChallenge, ResultsCard, recipe_ceiling, recipe_challenge, results_card, results_dir, runs_dir
from .capstone.report import ChallengeTarget, challenge_target
from .capstone.mfu import MFU, mfu_report
from .transformers.mfu import GPTMFU, gpt_mfu
from .capstone.energy import PrecisionCost, compare_precisions, energy_headline, precision_cost
from .transformers.gpt import (StaticKV, checkpoint_blocks, counted_flops_per_token, generate, gpt, static_caches,
                               text_tokens, token_batch)
from .transformers.attention_sweep import AttentionPoint, AttentionSweep, attention_sweep, manual_attention
from .transformers.flash_attention import (FlashCase, FlashCheck, FlashTiming, check_flash_attention, flash_attention, key_tiles,
                                           time_flash_attention)
from .transformers.heldout import Unigram, unigram_baseline
from .transformers.levers import LeverBound, LeverBounds, LeverGains, lever_bounds
from .transformers.activations import ActivationMemory, activation_memory
from .transformers.generation import GenerationRow, GenerationSpeed, generation_speed
from .transformers.challenge import gpt_challenge
from .transformers.train import GPTRecipe, GPTRun, gpt_stepper, train_gpt
from .transformers.lever_ablation import gpt_ablation, gpt_changes, micro_batches_that_fit
from .machine.energy import (EnergyExample, PowerContrast, check_energy_reading, example_energy_trace,
                             power_contrast)

__all__ = [
    "setup", "lesson_price", "describe_price",
    "EnergyExample", "PowerContrast", "check_energy_reading", "example_energy_trace", "power_contrast",
    "FusedChallenge", "fused_challenge", "matmul_global_bytes", "MatmulCoalescing", "WarpLoad", "matmul_coalescing", "warp_sectors", "CompiledTraining", "compiled_training", "CompileTimes", "FirstCall", "compile_time", "LeverBound", "LeverBounds", "LeverGains", "lever_bounds", "checkpoint_blocks", "counted_flops_per_token", "TorchFeature", "torch_feature",
    "digits", "Digits", "PerSampleDigits", "to_features", "Recipe", "RecipeRun", "train_recipe", "recipe_stepper", "seed_model",
    "digits_on_disk", "ablate", "Ablation", "AblationStep", "Change", "torch_ablation", "torch_changes", "largest_batch", "interleaved_gain",
    "KerasRecipe", "KerasRun", "train_keras_recipe", "keras_changes", "keras_ablation",
    "PrecisionCost", "precision_cost", "compare_precisions", "energy_headline",
    "gpt", "text_tokens", "token_batch", "generate", "StaticKV", "static_caches", "AttentionPoint", "AttentionSweep", "attention_sweep",
    "manual_attention", "flash_attention", "check_flash_attention", "time_flash_attention", "key_tiles", "FlashCase",
    "FlashCheck", "FlashTiming", "GenerationRow", "GenerationSpeed", "generation_speed", "GPTRecipe", "GPTRun", "train_gpt",
    "gpt_stepper", "gpt_changes", "gpt_ablation", "gpt_challenge", "micro_batches_that_fit", "unigram_baseline", "Unigram", "activation_memory", "ActivationMemory",
    "check_tracked", "recipe_ceiling", "recipe_challenge", "RecipeChallenge", "results_card", "ResultsCard", "results_dir", "runs_dir",
    "challenge_target", "ChallengeTarget",
    "MFU", "mfu_report", "GPTMFU", "gpt_mfu",
    "serial_parallel_step", "SerialParallelStep", "python_work", "speedup_needed",
    "clocks_under_load", "LoadClocks",
    "nvidia_smi", "SmiOutput", "smi_header", "SmiHeader", "active_reasons", "CLOCK_EVENT_REASONS",
    "achievable", "Achievable", "gpu_clocks", "GPUClocks", "explain_share", "DatasheetShare",
    "check_linear_intensity", "compute_bound_batch", "linear_work",
    "cuda_visible", "check_visible", "VISIBLE_CASES", "kernels_run_on", "check_kernels", "ARCH_CASES",
    "slowdown_reasons", "check_slowdown_reader",
    "models", "scripts", "TrainConfig", "TrainResult", "train", "train_step", "accumulated_gradients", "evaluate",
    "check", "Check", "NotAnswered", "CannotRunHere", "triton_part", "TritonPart", "challenge", "Challenge", "solutions", "SOLUTIONS_ENV",
    "narrate", "Narration",
    "predict", "Prediction", "versus_prediction", "VersusPrediction", "compare_predictions", "predictions",
    "PredictionTable",
    "float_formats", "gradient_underflow", "UnderflowReport", "keras_cnn", "keras_step_times", "matmul_sweep",
    "micro_batch_gradients", "compare_gradients", "GradientCheck", "checkpointed",
    "train_interleaved", "compare_runs", "RunComparison", "pattern_batch",
    "batch_sweep", "BatchSweep", "scale_lr", "warmup_factor", "cosine_factor", "train_at_batch_size", "BatchRun",
    "curve_knee", "Knee", "plot_accuracy", "gradient_noise_scale", "NoiseScale", "watch_loops", "LoopWatch", "PhaseUse", "phase_utilisation",
    "synthetic_images", "real_images", "ImageSet", "CorruptDataError", "data_dir",
    "torch_loader", "cached_loader", "CachedLoader", "tf_dataset",
    "dali_loader", "DaliLoader", "dali_plan", "DaliPlan", "dali_tf_dataset", "dali_available", "dali_tf_available",
    "augment_batch",
    "check_dali", "dali_tolerance",
    "check_no_sync", "NoSyncCheck", "no_sync_loss", "no_sync_nullcontext",
    "comm_overlap", "CommOverlap", "profile_comm_overlap", "fit_alpha_beta", "AlphaBeta",
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
    "TF_OOM_EXAMPLE", "fit_challenge", "FitChallenge", "reuse_target", "ReuseTarget", "cpu_topology", "CPUTopology", "pinned",
    "HW_DECODER_LOAD", "has_hardware_jpeg_decoder", "DaliInstall", "dali_install_args", "dali_wheel", "install_dali",
    "check_faster_loading", "check_loaders_that_keep_up", "check_workers_needed", "check_phase_bound",
    "check_calls_per_item", "check_bytes_per_parameter", "check_running_total",
    "your_numbers", "YourNumbers", "measured", "Measured", "cite", "Cited", "by_this_course", "datasheet", "published_curve",
]
