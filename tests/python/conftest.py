"""Fixtures of the Python module's tests: the seqtape binary (SEQTAPE_BIN, set by ctest), the
copy task's data made by `seqtape gen-copy`, and one model trained from Python (100 steps),
shared by the whole session."""

import os
import subprocess

import pytest

import seqtape


def seqtape_bin():
    path = os.environ.get("SEQTAPE_BIN")
    if not path or not os.path.exists(path):
        pytest.skip("SEQTAPE_BIN (the built seqtape binary) is not set: run through ctest")
    return path


@pytest.fixture(scope="session")
def cli():
    return seqtape_bin()


@pytest.fixture(scope="session")
def copy_data(tmp_path_factory, cli):
    out = tmp_path_factory.mktemp("copy")
    subprocess.run([cli, "gen-copy", "--out", str(out), "--train", "2000", "--valid", "50",
                    "--max-len", "8", "--seed", "3"], check=True, capture_output=True)
    return out


# The session's model: 100 steps on the copy task, with every step's loss seen by the callback.
TRAIN_STEPS = 100


@pytest.fixture(scope="session")
def trained(tmp_path_factory, copy_data):
    out = tmp_path_factory.mktemp("run") / "copy-model"
    losses = []
    run = seqtape.train(data=copy_data / "train.tsv", valid=copy_data / "valid.tsv",
                        vocab=copy_data / "vocab.txt", preset="default", steps=TRAIN_STEPS,
                        batch=32, lr=3e-3, warmup=10, eval_max=10, threads=1, no_progress=True,
                        out=out, callback=lambda step, loss, lr, tps: losses.append(
                            (step, loss, lr, tps)))
    return {"run": run, "losses": losses}


@pytest.fixture(scope="session")
def model(trained):
    return seqtape.Model.load(trained["run"])
