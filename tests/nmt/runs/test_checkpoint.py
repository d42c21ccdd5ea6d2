"""Checkpoints: safetensors + JSON round trip, optimizer resume, atomic writes, corruption."""

import hashlib
import json
import os
import stat
import threading

import pytest
import torch
from torch import nn

from attnkit.atomic import atomic_write_bytes
from attnkit.nmt.runs import checkpoint as ckpt_module
from attnkit.nmt.runs.checkpoint import load_checkpoint, save_checkpoint


def tiny_model(seed=0):
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Embedding(10, 4), nn.Linear(4, 10))
    model[1].weight = model[0].weight  # tied weights share storage
    return model


def trained_optimizer(model):
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    for _ in range(3):
        opt.zero_grad()
        model(torch.tensor([1, 2, 3])).sum().backward()
        opt.step()
    return opt


def test_round_trip_restores_weights_state_and_extras(tmp_path):
    model = tiny_model()
    rng = torch.get_rng_state()
    path = save_checkpoint(tmp_path, "best", model.state_dict(), {"step": 7}, extra={"rng": rng})
    assert path == tmp_path / "best.json"
    loaded = load_checkpoint(path)
    assert loaded.state == {"step": 7}
    assert torch.equal(loaded.extra["rng"], rng)
    fresh = tiny_model(seed=1)
    fresh.load_state_dict(loaded.model)
    x = torch.tensor([0, 5, 9])
    assert torch.equal(fresh(x), model(x))


def test_optimizer_state_resumes_exactly(tmp_path):
    model = tiny_model()
    opt = trained_optimizer(model)
    save_checkpoint(tmp_path, "last", model.state_dict(), {}, optimizer=opt)
    loaded = load_checkpoint(tmp_path / "last.json")
    model2 = tiny_model(seed=3)
    model2.load_state_dict(loaded.model)
    opt2 = torch.optim.Adam(model2.parameters(), lr=0.5)
    opt2.load_state_dict(loaded.optimizer)
    assert opt2.param_groups[0]["lr"] == 0.01
    for m, o in ((model, opt), (model2, opt2)):  # one more identical step on both
        o.zero_grad()
        m(torch.tensor([4, 4])).sum().backward()
        o.step()
    for a, b in zip(model.parameters(), model2.parameters(), strict=True):
        assert torch.equal(a, b)


def test_files_are_json_and_safetensors_never_pickle(tmp_path):
    save_checkpoint(tmp_path, "best", tiny_model().state_dict(), {"bleu": 1.5})
    record = json.loads((tmp_path / "best.json").read_text())
    weights = tmp_path / record["weights"]
    assert weights.suffix == ".safetensors" and weights.is_file()
    assert b"pickle" not in weights.read_bytes()[:200] and weights.read_bytes()[8:9] == b"{"


def test_resaving_replaces_the_old_weights_file(tmp_path):
    save_checkpoint(tmp_path, "last", tiny_model().state_dict(), {"step": 1})
    save_checkpoint(tmp_path, "last", tiny_model(2).state_dict(), {"step": 2})
    assert len(list(tmp_path.glob("last.*.safetensors"))) == 1
    assert load_checkpoint(tmp_path / "last.json").state == {"step": 2}


def test_reader_caught_mid_save_loads_the_new_checkpoint_whole(tmp_path, monkeypatch):
    # A training saves between the reader's look at the record and at its weights:
    # the weights that record named are deleted, and the reader takes the new record.
    save_checkpoint(tmp_path, "best", tiny_model(0).state_dict(), {"step": 1})
    read_record = ckpt_module._read_record

    def record_then_concurrent_save(path):
        record = read_record(path)
        if record["state"] == {"step": 1}:
            save_checkpoint(tmp_path, "best", tiny_model(2).state_dict(), {"step": 2})
        return record

    monkeypatch.setattr(ckpt_module, "_read_record", record_then_concurrent_save)
    loaded = load_checkpoint(tmp_path / "best.json")
    assert loaded.state == {"step": 2}
    assert all(torch.equal(loaded.model[k], v) for k, v in tiny_model(2).state_dict().items())


@pytest.mark.parametrize("fail_on_call", [1, 2])
def test_crash_mid_write_leaves_previous_checkpoint_intact(tmp_path, monkeypatch, fail_on_call):
    old = tiny_model(0)
    save_checkpoint(tmp_path, "best", old.state_dict(), {"step": 1})
    real_replace, calls = os.replace, []

    def crashing_replace(src, dst):
        calls.append(dst)
        if len(calls) == fail_on_call:  # 1: weights file, 2: the JSON record
            raise OSError("simulated crash")
        real_replace(src, dst)

    monkeypatch.setattr(ckpt_module.os, "replace", crashing_replace)
    with pytest.raises(OSError, match="simulated crash"):
        save_checkpoint(tmp_path, "best", tiny_model(5).state_dict(), {"step": 2})
    monkeypatch.undo()
    loaded = load_checkpoint(tmp_path / "best.json")
    assert loaded.state == {"step": 1}
    for key, value in old.state_dict().items():
        assert torch.equal(loaded.model[key], value)
    assert not list(tmp_path.glob(".*.tmp"))  # temporary files cleaned up


def test_truncated_weights_file_is_a_clear_error_naming_it(tmp_path):
    save_checkpoint(tmp_path, "best", tiny_model().state_dict(), {})
    weights = tmp_path / json.loads((tmp_path / "best.json").read_text())["weights"]
    weights.write_bytes(weights.read_bytes()[:-20])
    with pytest.raises(ValueError, match=rf"{weights.name}.*truncated or corrupt"):
        load_checkpoint(tmp_path / "best.json")


def test_corrupt_safetensors_with_matching_checksum_is_named(tmp_path):
    save_checkpoint(tmp_path, "best", tiny_model().state_dict(), {})
    record = json.loads((tmp_path / "best.json").read_text())
    weights = tmp_path / record["weights"]
    data = weights.read_bytes()[:50]
    weights.write_bytes(data)
    record["sha256"] = hashlib.sha256(data).hexdigest()
    (tmp_path / "best.json").write_text(json.dumps(record))
    with pytest.raises(ValueError, match=rf"{weights.name}: not a readable safetensors file"):
        load_checkpoint(tmp_path / "best.json")


def test_a_weights_file_linked_to_a_device_is_refused_unread(tmp_path):
    # a downloaded run's best.X.safetensors linked to /dev/zero was read until memory ran
    # out (a MemoryError traceback, or the machine swapping), a named pipe waited for ever;
    # /dev/null stands for them here: it was read, and called a truncated file
    save_checkpoint(tmp_path, "best", tiny_model().state_dict(), {})
    weights = tmp_path / json.loads((tmp_path / "best.json").read_text())["weights"]
    weights.unlink()
    weights.symlink_to(os.devnull)
    with pytest.raises(ValueError, match=rf"{weights.name} is not a regular file \(a device"):
        load_checkpoint(tmp_path / "best.json")


def test_bad_records_are_clear_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="best.json"):
        load_checkpoint(tmp_path / "best.json")
    (tmp_path / "x.json").write_text("{not json")
    with pytest.raises(ValueError, match="x.json: not a valid checkpoint record"):
        load_checkpoint(tmp_path / "x.json")
    (tmp_path / "y.json").write_text('{"a": 1}')
    with pytest.raises(ValueError, match="y.json: not an attnkit checkpoint"):
        load_checkpoint(tmp_path / "y.json")


def test_atomic_write_bytes_writes_into_a_named_pipe_instead_of_replacing_it(tmp_path):
    pipe = tmp_path / "pipe"  # as /dev/stdout: translate --html /dev/stdout
    os.mkfifo(pipe)
    read = {}
    reader = threading.Thread(target=lambda: read.update(data=pipe.read_bytes()), daemon=True)
    reader.start()
    atomic_write_bytes(pipe, b"page")
    reader.join(timeout=10)
    assert read == {"data": b"page"}
    assert stat.S_ISFIFO(os.stat(pipe).st_mode) and os.listdir(tmp_path) == ["pipe"]


def test_atomic_write_bytes_replaces_whole_file(tmp_path):
    target = tmp_path / "sub" / "f.bin"
    atomic_write_bytes(target, b"old")
    atomic_write_bytes(target, b"new contents")
    assert target.read_bytes() == b"new contents"
    assert sorted(p.name for p in target.parent.iterdir()) == ["f.bin"]
