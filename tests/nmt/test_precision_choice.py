"""train.precision / --precision: auto from the CPU flags, explicit settings, autocast."""

import contextlib

import pytest
import torch

from attnkit.nmt import precision as precision_module
from attnkit.nmt.precision import cpu_bf16_flag, resolve_precision

CPU = torch.device("cpu")
ICE_LAKE = "flags\t\t: fpu vme sse avx2 avx512f avx512bw avx512_vnni avx512_vbmi2 sha_ni"
ZEN4 = "flags\t\t: fpu avx2 avx512f avx512_vnni avx512_bf16 avx512_vbmi2"
SAPPHIRE = "flags\t\t: avx512f avx512_bf16 amx_bf16 amx_tile amx_int8"


@pytest.fixture(autouse=True)
def auto_from_the_cpu(monkeypatch):
    """The suite sets ATTNKIT_PRECISION=fp32 (tests/conftest.py); here auto decides."""
    monkeypatch.delenv(precision_module.AUTO_ENV, raising=False)


@pytest.mark.parametrize(
    ("flags", "found"),
    [(ICE_LAKE, None), (ZEN4, "avx512_bf16"), (SAPPHIRE, "amx_bf16"), ("", None)],
)
def test_the_fast_bf16_flag_is_read_from_cpuinfo_text(flags, found):
    assert cpu_bf16_flag(flags) == found


def test_a_flag_must_be_a_whole_word():
    assert cpu_bf16_flag("flags: avx512_bf16x xamx_bf16") is None


def test_an_unreadable_cpuinfo_finds_no_flag(monkeypatch, tmp_path):
    monkeypatch.setattr(precision_module, "_CPUINFO", tmp_path / "missing")
    assert cpu_bf16_flag() is None


def test_auto_is_fp32_on_a_cpu_without_fast_bf16_and_says_why():
    chosen = resolve_precision("auto", CPU, cpu_flags=ICE_LAKE)
    assert (chosen.name, chosen.setting, chosen.dtype) == ("fp32", "auto", torch.float32)
    assert chosen.reason == (
        "fp32: this CPU lacks avx512_bf16/amx_bf16 (bf16 matrix products would be slower than fp32)"
    )


@pytest.mark.parametrize(("flags", "flag"), [(ZEN4, "avx512_bf16"), (SAPPHIRE, "amx_bf16")])
def test_auto_is_bf16_on_a_cpu_with_fast_bf16(flags, flag):
    chosen = resolve_precision("auto", CPU, cpu_flags=flags)
    assert (chosen.name, chosen.dtype) == ("bf16", torch.bfloat16)
    assert chosen.reason == f"bf16: this CPU has {flag}"


@pytest.mark.parametrize("forced", ["fp32", "bf16"])
def test_the_environment_decides_for_auto_only(monkeypatch, forced):
    monkeypatch.setenv("ATTNKIT_PRECISION", forced)
    chosen = resolve_precision("auto", CPU, cpu_flags=ZEN4 if forced == "fp32" else ICE_LAKE)
    assert (chosen.name, chosen.setting) == (forced, "auto")
    assert chosen.reason.startswith(f"{forced}: ATTNKIT_PRECISION is {forced}")
    other = "bf16" if forced == "fp32" else "fp32"
    assert resolve_precision(other, CPU, cpu_flags=ZEN4).name == other  # explicit wins
    monkeypatch.setenv("ATTNKIT_PRECISION", "fp16")
    with pytest.raises(ValueError, match="ATTNKIT_PRECISION must be one of auto, fp32, bf16"):
        resolve_precision("auto", CPU)
    monkeypatch.setenv("ATTNKIT_PRECISION", "")  # set but empty: as if unset
    assert resolve_precision("auto", CPU, cpu_flags=ICE_LAKE).reason.startswith("fp32: this CPU")


def test_explicit_settings_win_and_name_their_option():
    assert resolve_precision("fp32", CPU, cpu_flags=ZEN4).reason == "fp32: train.precision is fp32"
    slow = resolve_precision("bf16", CPU, option="--precision", cpu_flags=ICE_LAKE)
    assert slow.name == "bf16"
    assert slow.reason == (
        "bf16: --precision is bf16; this CPU lacks avx512_bf16/amx_bf16, so PyTorch emulates "
        "bf16: its matrix products run 3 to 50 times slower than fp32 (auto would choose fp32)"
    )
    assert slow.record() == {"setting": "bf16", "precision": "bf16", "reason": slow.reason}


def test_bad_settings_and_devices_are_named():
    with pytest.raises(ValueError, match="--precision must be one of auto, fp32, bf16, got 'fp16'"):
        resolve_precision("fp16", CPU, option="--precision")
    with pytest.raises(
        ValueError, match="train.precision is bf16 but attnkit does not use bf16 on mps"
    ):
        resolve_precision("bf16", torch.device("mps"))
    assert resolve_precision("auto", torch.device("mps")).name == "fp32"


def test_autocast_runs_matrix_products_in_bf16_only_for_bf16():
    layer = torch.nn.Linear(4, 3)
    x = torch.randn(2, 4)
    with resolve_precision("fp32", CPU).autocast():
        assert layer(x).dtype == torch.float32
    with resolve_precision("bf16", CPU, cpu_flags=ICE_LAKE).autocast():
        assert layer(x).dtype == torch.bfloat16
    assert layer.weight.dtype == torch.float32  # autocast casts copies, never the weights
    assert layer(x).dtype == torch.float32  # and ends with its block


@pytest.fixture
def gpu(monkeypatch):
    """A CUDA GPU of the given compute capability, as torch describes it: its
    ``is_bf16_supported()`` is True on any GPU that emulates bf16 (capability >= 7 here)."""

    def make(name, capability):
        cuda = torch.cuda
        monkeypatch.setattr(cuda, "get_device_name", lambda device=None: name)
        monkeypatch.setattr(cuda, "get_device_capability", lambda device=None: capability)
        monkeypatch.setattr(
            cuda,
            "is_bf16_supported",
            lambda including_emulation=True: (
                capability[0] >= 8 or (including_emulation and capability[0] >= 7)
            ),
        )
        monkeypatch.setattr(cuda, "device", lambda device: contextlib.nullcontext())
        monkeypatch.setattr(torch.version, "hip", None)
        return torch.device("cuda")

    return make


def test_auto_is_fp32_on_a_gpu_that_only_emulates_bf16(gpu):
    t4 = gpu("Tesla T4", (7, 5))
    chosen = resolve_precision("auto", t4)
    assert chosen.name == "fp32"
    assert chosen.reason == (
        "fp32: Tesla T4 (compute capability 7.5) has no bf16 tensor cores, so bf16 is "
        "emulated, no faster than fp32"
    )
    explicit = resolve_precision("bf16", t4, option="--precision")
    assert explicit.name == "bf16"
    assert explicit.reason.endswith("emulated, no faster than fp32 (auto would choose fp32)")


def test_auto_is_bf16_on_an_ampere_gpu_and_bf16_is_refused_where_it_cannot_run(gpu):
    chosen = resolve_precision("auto", gpu("NVIDIA A100", (8, 0)))
    assert (chosen.name, chosen.reason) == ("bf16", "bf16: NVIDIA A100 supports bf16")
    p100 = gpu("Tesla P100", (6, 0))
    assert resolve_precision("auto", p100).reason == "fp32: Tesla P100 does not support bf16"
    with pytest.raises(ValueError, match="train.precision is bf16 but Tesla P100 does not"):
        resolve_precision("bf16", p100)
