"""The profiling lesson's verdict story (gpulab.course.profiling.verdicts) and the script Nsight runs
(gpulab.course.scripts.profile_train)."""
from types import SimpleNamespace as S

import pytest
import torch

from gpulab import course
from gpulab.course.scripts import profile_train


def summary(label, code, message):
    return S(label=label, verdict=S(verdict=code, findings=(S(code="host-syncs", message="2 .item()"),
                                                            S(code=code, message=message))))


def test_story_is_built_from_the_verdicts_measured():
    a = summary("slow loop", "input-bound", "61% of step time in data loading")
    b = summary("fix 1", "compute-bound", "the step's time goes to its operators' own work")
    c = summary("fix 2", "compute-bound", "the step's time goes to its operators' own work")
    cpu = str(course.verdict_story([a, b, c], kind="cpu"))
    assert "- **slow loop**: *input-bound*: 61% of step time in data loading" in cpu
    assert "*fix 1* moved the verdict from *input-bound* to *compute-bound*" in cpu
    assert "*fix 2* left it at *compute-bound*" in cpu and "On a CPU" in cpu
    gpu = str(course.verdict_story([summary("slow", "input-bound", "x"), summary("f", "overhead-bound", "y"),
                                    summary("g", "healthy", "z")], kind="cuda"))
    assert "*input-bound* → *overhead-bound* → *healthy*" in gpu and "On a GPU" in gpu
    assert "input-bound → overhead-bound → compute-bound" not in cpu.replace("*", "")
    assert "no conclusion" in str(course.verdict_story([a, b], kind="cpu", noisy=True))


def test_story_checks_its_input():
    with pytest.raises(ValueError):
        course.verdict_story([])
    with pytest.raises(TypeError):
        course.verdict_story([object()])


def test_profile_train_script_trains_on_cpu(capsys):
    result = profile_train.main(["--steps", "2", "--warmup", "1", "--batch", "8", "--images", "32", "--width", "4",
                                 "--device", "cpu"])
    assert result["steps"] == 2 and result["captured"] is False and result["median_step_s"] > 0
    assert "capture range inactive" in capsys.readouterr().out
    slow = profile_train.main(["--steps", "1", "--warmup", "0", "--batch", "8", "--images", "32", "--width", "4",
                               "--device", "cpu", "--slow"])
    assert slow["slow"] and abs(slow["mean_loss"]) < 100


def test_profile_train_arguments():
    with pytest.raises(SystemExit):
        profile_train.parse_args(["--steps", "0"])
    with pytest.raises(SystemExit):
        profile_train.main(["--batch", "64", "--images", "8", "--device", "cpu"])


def test_profile_train_step_has_the_lesson_phases(monkeypatch):
    names = []
    import gpulab as gl
    from contextlib import contextmanager

    @contextmanager
    def fake_phase(name):
        names.append(name)
        yield

    monkeypatch.setattr(gl, "phase", fake_phase)
    model = course.models.small_cnn(width=4)
    step, running = profile_train.make_step(model, torch.optim.SGD(model.parameters(), lr=0.01),
                                            torch.randint(0, 256, (16, 3, 32, 32), dtype=torch.uint8),
                                            torch.randint(0, 10, (16,)), 8, torch.device("cpu"))
    step()
    assert names == ["data", "forward", "backward", "optimizer"] and running[0] > 0
