"""Model.generate against the CLI's `generate --json`, the GIL, threads, and bad input."""

import json
import subprocess
import threading
import time

import pytest

import seqtape

INPUTS = ["今天天气", "我爱你", "天气很好今天", "你好", "好天", "我今天很好", "爱", "天天天"]
# Wall-clock fields: everything else in a result must be equal.
CLOCK = ("seconds", "tokens_per_second")


def without_clock(results):
    return [{k: v for k, v in r.items() if k not in CLOCK} for r in results]


def cli_generate(cli, run, tmp_path, flags):
    inputs = tmp_path / "inputs.txt"
    inputs.write_text("".join(s + "\n" for s in INPUTS), encoding="utf-8")
    out = subprocess.run([cli, "generate", "--model", run, "--input-file", str(inputs), "--json",
                          "--batch-size", "32"] + flags, check=True, capture_output=True)
    return [json.loads(line) for line in out.stdout.decode().splitlines()]


@pytest.mark.parametrize("options, flags", [
    ({}, []),
    ({"beam": 3, "n_best": 2, "length_penalty": 0.6}, ["--beam", "3", "--n-best", "2",
                                                       "--length-penalty", "0.6"]),
    ({"sample": True, "seed": 7, "temperature": 0.9, "top_k": 5, "num_samples": 2},
     ["--sample", "--seed", "7", "--temperature", "0.9", "--top-k", "5", "--num-samples", "2"]),
], ids=["greedy", "beam", "sampling"])
def test_generate_equals_the_cli_json(cli, trained, model, tmp_path, options, flags):
    ours = model.generate(INPUTS, max_new=12, **options)
    theirs = cli_generate(cli, trained["run"], tmp_path, flags + ["--max-new", "12"])
    assert len(ours) == len(INPUTS)
    assert without_clock(ours) == without_clock(theirs)
    assert all(set(CLOCK) <= set(r) for r in ours)


@pytest.mark.parametrize("compute_type", ["int8", "bf16"])
def test_compute_type_decodes_as_the_cli_does(cli, trained, tmp_path, compute_type):
    flags = ["--compute-type", compute_type, "--max-new", "12"]
    try:
        theirs = cli_generate(cli, trained["run"], tmp_path, flags)
    except subprocess.CalledProcessError as e:  # a CPU without the units: a usage error there
        assert e.returncode == 2
        with pytest.raises(ValueError):
            seqtape.Model.load(trained["run"], compute_type=compute_type)
        return
    ours = seqtape.Model.load(trained["run"], compute_type=compute_type).generate(INPUTS,
                                                                                  max_new=12)
    assert without_clock(ours) == without_clock(theirs)
    with pytest.raises(ValueError):
        seqtape.Model.load(trained["run"], compute_type="int4")


def test_a_single_string_is_a_list_of_one_for_the_list_options(model):
    # The list-valued options come from the server's table of decoding options.
    for field, value in [("stop", "好"), ("end", "好"), ("suppress", "好")]:
        one = without_clock(model.generate(INPUTS, max_new=12, **{field: value}))
        assert one == without_clock(model.generate(INPUTS, max_new=12, **{field: [value]})), field


def test_batches_give_the_answers_of_one_batch(model):
    assert without_clock(model.generate(INPUTS, batch_size=3, max_new=8)) == \
        without_clock(model.generate(INPUTS, max_new=8))


def test_four_threads_get_the_answers_each_gets_alone(model):
    jobs = [(INPUTS, {}), (INPUTS[::-1], {"beam": 2}),
            (INPUTS[2:], {"sample": True, "seed": 3}), (INPUTS[:5], {"max_new": 5})]
    alone = [without_clock(model.generate(texts, **o)) for texts, o in jobs]
    together = [None] * len(jobs)

    def work(k):
        for _ in range(3):
            got = without_clock(model.generate(jobs[k][0], **jobs[k][1]))
            together[k] = got if together[k] in (None, got) else "differs"

    threads = [threading.Thread(target=work, args=(k,)) for k in range(len(jobs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert together == alone


def test_the_gil_is_released_while_decoding(model):
    """Another Python thread runs while generate decodes: the main thread's loop stamps the
    clock, and some stamp must fall well inside the decoding call."""
    span = {}

    def decode():
        span["start"] = time.monotonic()
        # one batch, one call into C++: between batches the worker runs Python anyway
        model.generate(INPUTS * 32, batch_size=256, beam=4, max_new=40, min_new=40)
        span["end"] = time.monotonic()

    stamps = []
    worker = threading.Thread(target=decode)
    worker.start()
    while worker.is_alive():
        stamps.append(time.monotonic())
        time.sleep(0.001)
    worker.join()
    margin = 0.05  # ten switch intervals: more than a thread waits to take the GIL back
    assert span["end"] - span["start"] > 4 * margin, "decoding too short to tell"
    inside = [s for s in stamps if span["start"] + margin < s < span["end"] - margin]
    assert inside, "the main thread never ran while generate decoded"


def test_bad_inputs_raise_the_right_exceptions(model, tmp_path):
    with pytest.raises(FileNotFoundError, match="no-such-model"):
        seqtape.Model.load(tmp_path / "no-such-model")
    not_a_model = tmp_path / "notes.txt"
    not_a_model.write_text("hello")
    with pytest.raises(ValueError, match="notes.txt"):
        seqtape.Model.load(not_a_model)
    with pytest.raises(ValueError, match="beam"):
        model.generate(["你好"], beam=0)
    with pytest.raises(ValueError, match="top_p"):
        model.generate(["你好"], sample=True, top_p=1.5)
    with pytest.raises(ValueError, match="seed needs sample"):
        model.generate(["你好"], seed=3)
    with pytest.raises(ValueError, match="unknown field 'beams'"):
        model.generate(["你好"], beams=2)
    with pytest.raises(ValueError, match="max_new must be an integer"):
        model.generate(["你好"], max_new="ten")
    with pytest.raises(ValueError, match=r"inputs\[1\]"):
        model.generate(["你好", ""])
    with pytest.raises(ValueError, match="batch_size"):
        model.generate(["你好"], batch_size=0)
    assert model.generate([]) == []


def test_a_checkpoint_file_and_an_export_directory_load_too(trained, model, tmp_path):
    exported = tmp_path / "exported"
    assert seqtape.command("export", "--model", trained["run"], "--out", exported) == 0
    want = without_clock(model.generate(INPUTS, beam=2))
    for path in (f"{trained['run']}/checkpoint.bin", exported):
        assert without_clock(seqtape.Model.load(path).generate(INPUTS, beam=2)) == want
