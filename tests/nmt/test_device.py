"""resolve_device: the device a command runs on, or a ValueError naming the option."""

import pytest
import torch

from attnkit.nmt.device import resolve_device


def test_cpu_and_auto_without_a_gpu_are_the_cpu(monkeypatch):
    assert resolve_device("cpu") == torch.device("cpu")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert resolve_device("auto") == torch.device("cpu")


def test_auto_takes_the_gpu_when_there_is_one(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert resolve_device("auto") == torch.device("cuda")
    assert resolve_device("cuda:1") == torch.device("cuda", 1)


@pytest.mark.parametrize("name", ["gpu", "", "cuda:x", "cpu:0:1", "tpu", "meta"])
def test_unknown_names_raise_naming_the_option_and_the_value(name):
    with pytest.raises(ValueError) as info:
        resolve_device(name, "--device")
    assert str(info.value) == (
        f"--device must be one of auto, cpu, cuda, cuda:N or mps, got {name!r}"
    )


def test_the_default_option_named_is_train_device():
    with pytest.raises(ValueError, match=r"^train\.device must be one of"):
        resolve_device("gpu")


@pytest.mark.parametrize("name", ["cuda", "cuda:0"])
def test_cuda_without_a_gpu_says_so_and_suggests_cpu(monkeypatch, name):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ValueError, match=rf"^--device is '{name}' but no CUDA device .*; use cpu$"):
        resolve_device(name, "--device")


def test_a_gpu_index_past_the_last_gpu_is_refused(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    with pytest.raises(ValueError, match=r"is 'cuda:1' but there are only 1 CUDA device\(s\)"):
        resolve_device("cuda:1", "--device")


def test_mps_where_it_is_missing_is_refused(monkeypatch):
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)
    with pytest.raises(ValueError, match="MPS is not available here; use cpu"):
        resolve_device("mps")
