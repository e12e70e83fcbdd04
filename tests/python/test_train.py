"""seqtape.train: the CLI's train command from Python, its callback, and its errors."""

import os

import pytest

import seqtape

from conftest import TRAIN_STEPS


def test_100_steps_lower_the_loss(trained):
    losses = trained["losses"]
    assert [s for s, *_ in losses] == list(range(1, TRAIN_STEPS + 1))
    first = sum(loss for _, loss, _, _ in losses[:10]) / 10
    last = sum(loss for _, loss, _, _ in losses[-10:]) / 10
    assert last < 0.8 * first
    assert all(lr > 0 and tps > 0 for _, _, lr, tps in losses)
    assert os.path.isfile(os.path.join(trained["run"], "checkpoint.bin"))


def short_run(copy_data, out, callback, **extra):
    return seqtape.train({"data": copy_data / "train.tsv", "vocab": copy_data / "vocab.txt",
                          "preset": "seed", "steps": 50, "eval_max": 2, "valid_max": 10,
                          "no_progress": True, "out": out}, callback=callback, **extra)


@pytest.mark.parametrize("how", ["true", "stop_iteration"])
def test_the_callback_stops_the_run(copy_data, tmp_path, how):
    seen = []

    def callback(step, loss, lr, tokens_per_second):
        seen.append(step)
        if step == 5:
            if how == "true":
                return True
            raise StopIteration
        return None

    run = short_run(copy_data, tmp_path / "run", callback)
    assert seen == [1, 2, 3, 4, 5]
    assert run == str(tmp_path / "run")
    assert os.path.isfile(os.path.join(run, "checkpoint.bin"))
    # A stopped run resumes: the checkpoint is step 5's.
    later = []
    short_run(copy_data, tmp_path / "run", lambda s, *_: later.append(s) or s == 7, resume=True)
    assert later == [6, 7]


def test_an_exception_in_the_callback_is_raised_after_saving(copy_data, tmp_path):
    def callback(step, *_):
        if step == 3:
            raise KeyError("from the callback")

    with pytest.raises(KeyError, match="from the callback"):
        short_run(copy_data, tmp_path / "run", callback)
    assert os.path.isfile(tmp_path / "run" / "checkpoint.bin")


def test_bad_options_raise_value_error_with_the_cli_message(copy_data, tmp_path):
    with pytest.raises(ValueError, match="--steps and --epochs must be >= 0"):
        short_run(copy_data, tmp_path / "a", None, steps=-1)
    with pytest.raises(ValueError, match="--batch: must be an integer >= 1, got 0"):
        short_run(copy_data, tmp_path / "b", None, batch=0)
    with pytest.raises(ValueError, match="--no-such-option"):
        short_run(copy_data, tmp_path / "c", None, no_such_option=3)
    with pytest.raises(ValueError, match="--lr must be a finite number > 0"):
        short_run(copy_data, tmp_path / "d", None, lr=float("nan"))
    with pytest.raises(TypeError, match="callback must be callable"):
        short_run(copy_data, tmp_path / "e", 42)


def test_bad_files_raise_os_or_value_errors(copy_data, tmp_path):
    with pytest.raises(FileNotFoundError, match="missing.tsv"):
        seqtape.train(data=tmp_path / "missing.tsv", preset="seed", steps=2, out=tmp_path / "a")
    bad = tmp_path / "bad.tsv"
    bad.write_text("no tab on this line\n")
    with pytest.raises(ValueError, match="bad.tsv:1"):
        seqtape.train(data=bad, preset="seed", steps=2, out=tmp_path / "b", no_progress=True)
    (tmp_path / "file").write_text("x")
    with pytest.raises(OSError):
        short_run(copy_data, tmp_path / "file", None)
