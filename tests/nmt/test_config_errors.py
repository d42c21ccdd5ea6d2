"""Configs: impossible values give one clear message (key, value, what is allowed), on
the CLI as exit status 2 without a traceback; random configs give a valid config or
a ValueError, never another exception."""

import math
from pathlib import Path

import pytest
import torch
import yaml
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from attnkit.cli import main
from attnkit.nmt.config import RunConfig, leaf_keys

REVERSE = str(Path(__file__).resolve().parents[2] / "configs" / "reverse.yaml")
BASE = {"data": {"toy": {"task": "copy", "train_size": 10}}, "tokenizer": {"kind": "word"}}
SECTIONS = ["data", "tokenizer", "model", "train", "decode", "name"]
KEYS = sorted(leaf_keys())


@pytest.mark.parametrize(
    ("option", "value", "expected"),
    [
        ("--model.hidden_size", "0", "model.hidden_size: must be > 0, got 0"),
        ("--model.dropout", "1.5", "model.dropout: must be < 1, got 1.5"),
        ("--decode.beam_size", "0", "decode.beam_size: must be > 0, got 0"),
        (
            "--model.score",
            "cosine",
            "model.score: must be 'dot', 'scaled_dot', 'general', 'concat' or 'additive', "
            "got 'cosine'",
        ),
        ("--train.lr", ".inf", "train.lr: must be a finite number, got inf"),
        ("--train.batch_size", "many", "train.batch_size: must be a valid integer"),
        ("--set", "train.lr_rate=1", "train.lr_rate: unknown key (allowed here: batch_size, lr,"),
        ("--set", "model=3", "model: must be a valid dictionary"),
        ("--train.max_steps", "-5", "train.max_steps: must be > 0 or 'auto', got -5"),
        ("--train.threads", "x", "train.threads: must be a valid integer or 'auto', got 'x'"),
    ],
)
def test_impossible_value_is_one_clear_message_and_exit_2(option, value, expected, capsys):
    assert main(["train", REVERSE, option, value]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "Traceback" not in captured.err
    assert captured.err.startswith("attnkit train: error: invalid ")
    assert expected in captured.err
    assert len(captured.err.strip().splitlines()) == 2  # "invalid FILE:" + the one problem


@pytest.mark.parametrize("key", ["train.seed", "data.toy.seed"])
def test_a_seed_torch_cannot_take_is_a_config_error(key):
    # 2**64 trained on until the first step failed with "Overflow when unpacking long long"
    with pytest.raises(ValueError, match=rf"{key}: must be < 9223372036854775808, got {2**64}$"):
        RunConfig.from_dict(BASE, [f"{key}={2**64}"])
    with pytest.raises(ValueError, match=rf"{key}: must be >= -9223372036854775808, got -"):
        RunConfig.from_dict(BASE, [f"{key}={-(2**63) - 1}"])
    for seed in (-(2**63), 2**63 - 1):  # the extremes, with a rank or split index added
        config = RunConfig.from_dict(BASE, [f"{key}={seed}"])
        chosen = config.train.seed if key == "train.seed" else config.data.toy.seed
        for added in (0, 2):
            torch.Generator().manual_seed(chosen + added)


@pytest.mark.parametrize(
    ("betas", "expected"),
    [("[2, 0.999]", "train.adam_betas.0: must be < 1, got 2"), ("[0.9, -1]", ".1: must be >= 0")],
)
def test_adam_betas_outside_0_1_are_a_config_error(betas, expected):
    with pytest.raises(ValueError, match=expected.replace(".", r"\.")):
        RunConfig.from_dict(BASE, [f"train.adam_betas={betas}"])
    assert RunConfig.from_dict(BASE, ["train.adam_betas=[0, 0.98]"]).train.adam_betas == (0, 0.98)


@pytest.mark.parametrize("betas", ["0.9,0.98", "[0.9]", "[0.9, 0.98, 0.5]", "0.9"])
def test_adam_betas_that_are_not_two_numbers_say_how_to_write_them(betas):
    # pydantic said "must be a valid tuple" or "train.adam_betas.1: required key is missing"
    with pytest.raises(ValueError) as err:
        RunConfig.from_dict(BASE, [f"train.adam_betas={betas}"])
    problem = str(err.value).splitlines()[1]
    assert problem.startswith("  train.adam_betas: must be two numbers [beta1, beta2] in [0, 1)")
    assert problem.endswith(f"got {yaml.safe_load(betas)!r}")


@pytest.mark.parametrize(("a", "b"), [(0, 0), (0.25, 0), (0.49, 0)])
def test_a_length_limit_that_allows_no_output_is_a_config_error(a, b):
    # it was accepted, and the first validation, after an epoch of training, failed with
    # "max_len_a=0.0 and max_len_b=0 give a length limit 0 < 1 for a source of length 13"
    with pytest.raises(ValueError) as err:
        RunConfig.from_dict(BASE, [f"decode.max_len_a={a}", f"decode.max_len_b={b}"])
    problem = str(err.value).splitlines()[1]
    assert f"decode.max_len_a ({float(a)}) and decode.max_len_b ({b}) give a one-token" in problem


@pytest.mark.parametrize(("a", "b"), [(0, 1), (0.5, 0), (1, 0), (0.25, 1)])
def test_the_smallest_accepted_length_limits_give_a_one_token_source_one_step(a, b):
    from attnkit.nmt.decoding.steps import max_lengths

    decode = RunConfig.from_dict(BASE, [f"decode.max_len_a={a}", f"decode.max_len_b={b}"]).decode
    limits = max_lengths(torch.tensor([2, 4]), decode.max_len_a, decode.max_len_b)  # </s> in
    assert limits.tolist() == [int(2 * a + b), int(4 * a + b)] and limits.min() >= 1


def test_a_position_table_without_room_for_a_token_is_a_config_error():
    # max_positions 1 lowered data.max_src_len/max_tgt_len to 0, values the data section
    # refuses: no pair could train, and the run folder's config.yaml did not load again
    transformer = ["model.arch=transformer", "model.d_model=8", "model.heads=2"]
    with pytest.raises(ValueError, match=r"model\.max_positions: must be >= 2, got 1$"):
        RunConfig.from_dict(BASE, [*transformer, "model.max_positions=1"])
    config = RunConfig.from_dict(BASE, [*transformer, "model.max_positions=2"])
    assert (config.data.max_src_len, config.data.max_tgt_len) == (1, 1)
    assert RunConfig.from_dict(yaml.safe_load(config.to_yaml())) == config


def test_unreadable_config_files_are_named(tmp_path, capsys):
    binary = tmp_path / "binary.yaml"
    binary.write_bytes(b"\x89PNG\r\n\x1a\n\x00\xff")
    loop = tmp_path / "loop.yaml"
    loop.write_text("data: &a {toy: *a}\n")
    utf16 = tmp_path / "notepad.yaml"  # Notepad's "Unicode", PowerShell 5's Out-File
    utf16.write_text("data: {toy: {task: copy}}\n", encoding="utf-16")
    for path, message in [
        (binary, "not UTF-8 text (byte 0: invalid start byte)\n"),
        (utf16, "not UTF-8 text (byte 0: invalid start byte); it starts with a UTF-16 byte "),
        (loop, "a value refers to itself (a YAML alias loop)"),
    ]:
        assert main(["train", str(path)]) == 2
        err = capsys.readouterr().err
        assert f"{path}: {message}" in err and "Traceback" not in err


def leaf_values():
    return (
        st.none()
        | st.booleans()
        | st.integers(-3, 10**6)
        | st.floats(allow_nan=True, allow_infinity=True)
        | st.text(max_size=6)
        | st.sampled_from(["gru", "lstm", "dot", "additive", "copy", "word", "1e-3", "null"])
    )


def any_values():
    keys = st.sampled_from(SECTIONS + ["toy", "task", "hidden_size", "lr"]) | st.text(max_size=4)
    return st.recursive(
        leaf_values(),
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(keys, inner, max_size=4),
        max_leaves=12,
    )


def check_outcome(raw, overrides=()):
    """A RunConfig, or a ValueError whose lines each say where the problem is."""
    try:
        config = RunConfig.from_dict(raw, overrides)
    except ValueError as err:
        lines = str(err).splitlines()
        assert lines and lines[0].startswith(
            ("invalid config:", "config:", "override", "invalid override ")
        )
        assert all(": " in line for line in lines[1:])
        return str(err)
    assert RunConfig.from_dict(yaml.safe_load(config.to_yaml())) == config  # round trip
    return None


@settings(max_examples=150, deadline=None)
@given(st.dictionaries(st.sampled_from(SECTIONS) | st.text(max_size=4), any_values(), max_size=6))
def test_random_config_is_valid_or_a_validation_error(raw):
    check_outcome(raw)


@settings(max_examples=150, deadline=None)
@given(st.sampled_from(KEYS + ["model.heads", "train.lr.x", "data.toy.task.x"]), leaf_values())
@example(key="data.bundled", value="\n")  # a newline in the value, escaped in the message
def test_one_changed_value_is_valid_or_names_its_key(key, value):
    text = yaml.safe_dump(value).removesuffix("\n...\n").strip()
    message = check_outcome(BASE, [f"{key}={text}"])
    if message is not None:
        parent = key.rsplit(".", 1)[0]
        # the key itself, its section, or a key of the section the override created
        # (train.guided_alignment.layer=1 alone: "train.guided_alignment.file: required")
        named = any(name in message for name in (key, f"{parent}:", f"{parent} "))
        created = f"{parent}." in message and "required key is missing" in message
        assert named or created, message


@settings(
    max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.text(max_size=80) | st.binary(max_size=40).map(lambda b: b.decode("latin-1")))
def test_random_yaml_text_loads_or_is_a_value_error(tmp_path, text):
    path = tmp_path / "random.yaml"
    path.write_text(text, encoding="utf-8", errors="surrogatepass")
    try:
        config = RunConfig.load(path)
    except ValueError as err:
        assert str(err)
    else:
        assert config.name == "random"


def test_nan_and_infinity_are_rejected_everywhere_floats_are():
    for key in ("train.lr", "train.clip", "decode.length_penalty", "model.dropout"):
        for bad in (math.nan, math.inf):
            with pytest.raises(ValueError, match=key.replace(".", r"\.")):
                RunConfig.from_dict(BASE, [f"{key}={yaml.safe_dump(bad).split()[0]}"])


def test_a_yaml_boolean_is_refused_wherever_a_boolean_is_not_the_key_s_type():
    # pydantic alone reads true as 1: max_steps=yes trained one step, hidden_size=on one unit
    overrides = ["train.max_steps=yes", "model.hidden_size=on", "train.lr=true"]
    overrides += ["train.threads=off", "decode.beam_size=false"]
    for override in overrides:
        key = override.split("=")[0]
        with pytest.raises(ValueError, match=rf"{key}: must not be a boolean, got (True|False)"):
            RunConfig.from_dict(BASE, [override])
    config = RunConfig.from_dict(BASE, ["model.input_feeding=yes", "model.query_timing=current"])
    assert config.model.input_feeding is True
    # in a file, src_lang: no is YAML's False (an override of a text key is its text)
    with pytest.raises(ValueError, match=r"data.src_lang: must not be a boolean, got False"):
        RunConfig.from_dict({**BASE, "data": {**BASE["data"], "src_lang": False}})
    quoted = RunConfig.from_dict(BASE, ["data.src_lang='no'"]).data.src_lang
    assert quoted == "no"


def test_a_key_missing_from_a_section_an_override_made_blames_that_override():
    with pytest.raises(ValueError) as err:
        RunConfig.from_dict(BASE, ["train.guided_alignment.full_context=true"], source="my.yaml")
    assert str(err.value).splitlines() == [
        "invalid override train.guided_alignment.full_context=true:",
        "  train.guided_alignment.file: required key is missing",
    ]


def test_overrides_given_as_one_string_are_refused_saying_to_pass_a_list():
    # read character by character, it was "override must look like section.key=value, got 't'"
    with pytest.raises(TypeError, match=r"got one string 'train.max_steps=3'; pass \['train"):
        RunConfig.preset("reverse", "train.max_steps=3")
    with pytest.raises(TypeError, match="got one string"):
        RunConfig.from_dict(BASE, "train.max_steps=3")
    with pytest.raises(TypeError, match="got tuple"):
        RunConfig.from_dict(BASE, [("train.max_steps", 3)])


def test_overrides_may_be_any_iterable_of_strings():
    lazily = (f"train.{key}=3" for key in ("max_steps", "seed"))
    config = RunConfig.load(REVERSE, lazily)
    assert (config.train.max_steps, config.train.seed) == (3, 3)


def test_a_check_across_keys_blames_the_overrides_its_message_names():
    # --tokenizer.joint false on a Transformer file said "invalid my.yaml", a file that is fine
    transformer = {**BASE, "model": {"arch": "transformer"}}
    with pytest.raises(ValueError) as err:
        RunConfig.from_dict(transformer, ["tokenizer.joint=false", "train.seed=3"], "my.yaml")
    assert str(err.value).splitlines()[0] == "invalid override tokenizer.joint=false:"
    # a section's own check blamed every override of the section, train.seed=3 included
    linear = ["train.lr_schedule=linear", "train.warmup_steps=100", "train.max_steps=30"]
    with pytest.raises(ValueError) as err:
        RunConfig.from_dict(BASE, [*linear, "train.seed=3"], "my.yaml")
    first = str(err.value).splitlines()[0]
    assert first == "invalid override train.warmup_steps=100 train.max_steps=30:"
    # the file's own conflict, with an override it does not name, still blames the file
    unjoint = {**transformer, "tokenizer": {"kind": "word", "joint": False}}
    with pytest.raises(ValueError) as err:
        RunConfig.from_dict(unjoint, ["train.seed=3"], "my.yaml")
    assert str(err.value).splitlines()[0] == "invalid my.yaml:"


@pytest.mark.parametrize(
    "override",
    [
        "train.subword_sampling.alpha=0.1",  # README's way to turn sampling on
        "train={subword_sampling: {}}",
        "train.guided_alignment={file: a.txt, full_context: true}",
    ],
)
def test_a_check_across_keys_blames_the_override_of_a_section_around_or_inside_its_key(override):
    # the message names train.subword_sampling (train.guided_alignment.full_context), which
    # only the override set, yet the error said "invalid my.yaml", a file without it
    with pytest.raises(ValueError) as err:
        RunConfig.from_dict(BASE, [override, "train.seed=3"], "my.yaml")
    assert str(err.value).splitlines()[0] == f"invalid override {override}:"


def test_a_folder_given_as_the_config_is_named_a_folder(tmp_path):
    # RunConfig.load(folder) said "config file not found" of a path that exists
    from attnkit.nmt.config import RunConfig

    with pytest.raises(FileNotFoundError, match=f"{tmp_path} is a folder, not a config file"):
        RunConfig.load(tmp_path)


def test_a_value_of_nested_yaml_aliases_is_shown_cut_short(tmp_path):
    # aliases of lists of aliases: a few hundred bytes of YAML that are 9**5 strings here
    # (9**9, 387 million, in as few bytes) and the message spelt every one of them out:
    # gigabytes of error text from a config.yaml a run folder brought along
    anchors = ['a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    anchors += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" for i in range(1, 5)]
    text = "anchors:\n" + "".join(f"  {line}\n" for line in anchors)
    path = tmp_path / "bomb.yaml"
    path.write_text(text + "name: *a4\ndata: {toy: {task: copy}}\ntrain: {adam_betas: *a4}\n")
    with pytest.raises(ValueError) as err:
        RunConfig.load(path)
    lines = str(err.value).splitlines()
    keys = sorted(line.split(":")[0].strip() for line in lines[1:])
    assert keys == ["anchors", "name", "train.adam_betas"]
    assert "name: must be a valid string, got [[[[...], [...], [...]" in str(err.value)
    assert all(len(line) < 500 for line in lines), [len(line) for line in lines]
