"""hellaswag_scoring.py and hellaswag.py against oracles: the lecture's one-example-at-a-time scorer
(reference.py), transformers' GPT-2, lm-eval, torch's gloo all-reduce.

Everything runs offline on a synthetic HellaSwag-format file and a small random model.
"""

import json
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn import functional as F

import hellaswag
from fixtures import synthetic_examples
from longrun import common, hellaswag_scoring, run_folder
from reference import lecture_losses, lecture_predictions
from train_gpt2 import GPT, GPTConfig

N_EXAMPLES = 11  # odd: ranks get unequal shares and batches of 4 leave a partial one
# padded vocab, as trained
CONFIG = GPTConfig(block_size=128, vocab_size=50304, n_layer=2, n_head=2, n_embd=32)


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return write_jsonl(
        tmp_path_factory.mktemp("data") / "val.jsonl", synthetic_examples(N_EXAMPLES)
    )


@pytest.fixture(scope="module")
def examples(data):
    return hellaswag_scoring.load_examples(data)


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    model = GPT(CONFIG).eval()
    with torch.no_grad():
        # confident logits: the endings' losses differ by far more than float noise
        model.lm_head.weight.mul_(30)
    return model


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory, model):
    path = tmp_path_factory.mktemp("log") / "model_00000.pt"
    state = {"model": model.state_dict(), "config": asdict(CONFIG), "step": 0}
    torch.save(state | {"sha256": run_folder.tensor_digest(state["model"])}, path)
    return path


def run_main(capsys, *argv):
    rc = hellaswag.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return rc, out, err


def printed(out, name):
    return float(
        next(line.split()[1] for line in out.splitlines()[::-1] if line.split()[:1] == [name])
    )


# ---- 1. the batched scorer equals the one-at-a-time reference


@pytest.mark.parametrize("batch_size, fixed_shape", [(1, False), (4, False), (4, True), (16, True)])
def test_batched_equals_reference(model, examples, batch_size, fixed_shape):
    ours = hellaswag_scoring.predict(
        model, examples, device="cpu", batch_size=batch_size, fixed_shape=fixed_shape
    )
    assert ours == lecture_predictions(model, examples)


@pytest.mark.parametrize("padding", [0, 3])
def test_losses_equal_reference(model, examples, padding):
    # padding: dummy rows, padded rows and dummy scored positions on top of what the pairs need
    pairs = [pair for ex in examples for pair in hellaswag_scoring.render(ex)]
    shape = tuple(n + padding for n in hellaswag_scoring.batch_shape(pairs))
    sum_loss, count = hellaswag_scoring.continuation_losses(model, pairs, device="cpu", shape=shape)
    expected = torch.stack([lecture_losses(model, ex)[0] for ex in examples]).flatten()
    torch.testing.assert_close(sum_loss, expected, rtol=1e-5, atol=1e-4)
    assert count.tolist() == [len(ending) for _, ending in pairs]


def test_harness_greedy_continuation(checkpoint):
    # lm-eval's is_greedy: a continuation made of the model's own argmax choices is greedy; change
    # its last token and it is not
    lm = hellaswag.HarnessLM(checkpoint=str(checkpoint))
    ctx = [464, 3290, 318]
    with torch.no_grad():
        cont = lm.model.generate(torch.tensor([ctx]), max_new_tokens=3, top_k=1)[
            0, len(ctx) :
        ].tolist()
    results = lm._loglikelihoods([(ctx, cont), (ctx, cont[:-1] + [cont[-1] ^ 1])])
    assert [is_greedy for _, is_greedy in results] == [True, False]


def test_evaluate_counts_and_training_mode(model, examples):
    model.train()
    correct, correct_norm, total = hellaswag_scoring.evaluate(
        model, examples, device="cpu", batch_size=4
    )
    assert model.training  # restored for the training loop
    model.eval()
    reference = lecture_predictions(model, examples)
    assert total == len(examples)
    assert correct == sum(p == ex["label"] for (p, _), ex in zip(reference, examples))
    assert correct_norm == sum(p == ex["label"] for (_, p), ex in zip(reference, examples))


def test_cli_on_checkpoint(capsys, checkpoint, data, model, examples):
    rc, out, _ = run_main(
        capsys, "--checkpoint", checkpoint, "--data", data, "--batch-size", 3, "--device", "cpu"
    )
    assert rc == 0
    reference, n = lecture_predictions(model, examples), len(examples)
    assert printed(out, "acc") == round(
        sum(p == ex["label"] for (p, _), ex in zip(reference, examples)) / n, 4
    )
    assert printed(out, "acc_norm") == round(
        sum(p == ex["label"] for (_, p), ex in zip(reference, examples)) / n, 4
    )


def test_cli_on_transformers_folder(capsys, tmp_path, data, examples):
    # --model takes a local transformers folder; transformers' own GPT-2 is the oracle
    # for the predictions
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(1)
    hf = GPT2LMHeadModel(GPT2Config(n_positions=128, n_embd=32, n_layer=2, n_head=2)).eval()
    with torch.no_grad():
        hf.lm_head.weight.mul_(30)  # tied to wte, as in ours: confident logits
    hf.save_pretrained(tmp_path / "tiny-gpt2")
    rc, out, _ = run_main(
        capsys, "--model", tmp_path / "tiny-gpt2", "--data", data, "--limit", 6, "--device", "cpu"
    )
    assert rc == 0
    expected = lecture_predictions(lambda idx: (hf(idx).logits, None), examples[:6])
    assert printed(out, "acc") == round(
        sum(p == ex["label"] for (p, _), ex in zip(expected, examples)) / 6, 4
    )
    assert printed(out, "acc_norm") == round(
        sum(p == ex["label"] for (_, p), ex in zip(expected, examples)) / 6, 4
    )


# ---- 2. lm-eval, on a task over the same file (file_task), agrees with us where
# the definitions agree


def test_lm_eval_agrees(checkpoint, data, model, examples):
    results = hellaswag.run_harness(hellaswag.file_task(data), checkpoint=str(checkpoint))
    samples = sorted(results["samples"]["hellaswag_file"], key=lambda s: s["doc_id"])
    assert len(samples) == len(examples)
    ours = hellaswag_scoring.predict(model, examples, device="cpu")
    for sample, example, (pred, _) in zip(samples, examples, ours):
        # the same log-likelihoods: lm-eval's context + " ending" requests are our rows
        lls = torch.tensor([ll for ll, _ in sample["filtered_resps"]])
        torch.testing.assert_close(-lls, lecture_losses(model, example)[0], rtol=1e-5, atol=1e-4)
        # acc (summed log-likelihood) is the same metric
        assert sample["acc"] == float(pred == example["label"])
        # lm-eval's acc_norm divides by the ending's length in characters, not in tokens
        chars = torch.tensor([float(len(ending)) for ending in example["endings"]])
        assert sample["acc_norm"] == float(int((lls / chars).argmax()) == example["label"])


def test_cli_harness_scores_our_file_named_not_a_pattern(capsys, checkpoint, data, tmp_path):
    # the file's name holds [1], beside a file that the name would match as a glob pattern
    odd = tmp_path / "val[1].jsonl"
    odd.write_text(Path(data).read_text())
    (tmp_path / "val1.jsonl").write_text("what the name would match as a pattern\n")
    flags = ["--checkpoint", checkpoint, "--data", odd, "--limit", 4, "--device", "cpu"]
    rc, out, _ = run_main(capsys, *flags, "--harness")
    assert rc == 0
    assert "|hellaswag_file|" in out and "acc_norm" in out
    rc, ours, _ = run_main(capsys, *flags)
    assert printed(out, "acc") == printed(ours, "acc")


def test_rolling_loglikelihood(checkpoint, model):
    from lm_eval.api.instance import Instance
    from lm_eval.utils import get_rolling_token_windows

    lm = hellaswag.HarnessLM(checkpoint=str(checkpoint))
    texts = ["A short text.", " ".join(synthetic_examples(20, seed=1)[i]["ctx"] for i in range(20))]
    got = lm.loglikelihood_rolling(
        [Instance("loglikelihood_rolling", {}, (text,), 0) for text in texts]
    )
    tokens = [lm.enc.encode_ordinary(text) for text in texts]
    # one window, then several
    assert len(tokens[0]) < CONFIG.block_size < 2 * CONFIG.block_size < len(tokens[1])
    for ll, text_tokens in zip(got, tokens):
        # lm-eval's definition: each window's input through the model, its last
        # len(preds) positions scored
        expected = 0.0
        for inputs, preds in get_rolling_token_windows(
            text_tokens, common.EOT, CONFIG.block_size, context_len=1
        ):
            with torch.no_grad():
                logits, _ = model(torch.tensor([inputs]))
            expected -= F.cross_entropy(
                logits[0, -len(preds) :], torch.tensor(preds), reduction="sum"
            ).item()
        assert ll == pytest.approx(expected, rel=1e-5)


# ---- 3. two gloo ranks, counts summed, equal one process


def _rank(rank, world_size, init_file, checkpoint, data, out):
    dist.init_process_group(
        "gloo", init_method=f"file://{init_file}", rank=rank, world_size=world_size
    )
    model, examples = (
        hellaswag.load_model(checkpoint=checkpoint),
        hellaswag_scoring.load_examples(data),
    )
    counts = hellaswag_scoring.evaluate(
        model,
        examples,
        device="cpu",
        batch_size=2,
        rank=rank,
        world_size=world_size,
        fixed_shape=True,
    )
    counts = torch.tensor(counts)
    dist.all_reduce(counts)
    if rank == 0:
        torch.save(counts, out)
    dist.destroy_process_group()


def test_two_ranks_sum_to_single_process(tmp_path, checkpoint, data, model, examples):
    out = tmp_path / "counts.pt"
    mp.spawn(_rank, args=(2, tmp_path / "init", str(checkpoint), str(data), out), nprocs=2)
    single = hellaswag_scoring.evaluate(model, examples, device="cpu", batch_size=2)
    assert torch.load(out).tolist() == list(single)


def test_ranks_split_examples(model, examples):
    shares = [
        hellaswag_scoring.evaluate(model, examples, device="cpu", rank=r, world_size=3)[2]
        for r in range(3)
    ]
    assert shares == [4, 4, 3]


# ---- 4. a compiled model predicts what the eager one does


def test_compiled_equals_eager(model, examples):
    torch._dynamo.reset()
    compiled = torch.compile(model, dynamic=False)
    got = hellaswag_scoring.predict(
        compiled, examples, device="cpu", batch_size=4, fixed_shape=True
    )
    assert got == hellaswag_scoring.predict(model, examples, device="cpu", batch_size=4)
    # one shape for every batch, the partial last one included: compiled once
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] == 1


def test_cli_compile(capsys, checkpoint, data):
    # the same shapes as above (batches of 4, the longest row), so inductor's cache spares most of
    # a second compile
    rc, compiled, _ = run_main(
        capsys,
        "--checkpoint",
        checkpoint,
        "--data",
        data,
        "--batch-size",
        4,
        "--compile",
        "--device",
        "cpu",
    )
    assert rc == 0
    rc, eager, _ = run_main(
        capsys, "--checkpoint", checkpoint, "--data", data, "--batch-size", 4, "--device", "cpu"
    )
    for metric in ("acc", "acc_norm"):
        assert printed(compiled, metric) == printed(eager, metric)


# ---- 5. bad input: one line, a non-zero exit


GOOD = synthetic_examples(1)[0]


@pytest.mark.parametrize(
    "line, message",
    [
        ("{not json", "not valid JSON"),
        ("[1, 2]", "expected a JSON object"),
        (json.dumps({k: v for k, v in GOOD.items() if k != "endings"}), "missing field endings"),
        (json.dumps({**GOOD, "ctx": 3}), "ctx must be a string"),
        (
            json.dumps({**GOOD, "endings": GOOD["endings"][:3]}),
            "endings must be a list of 4 strings",
        ),
        (json.dumps({**GOOD, "label": 4}), "label must be an integer 0..3"),
        (json.dumps({**GOOD, "label": -1}), "label must be an integer 0..3"),
        (json.dumps({**GOOD, "label": "2"}), "label must be an integer 0..3"),
        (json.dumps({**GOOD, "label": True}), "label must be an integer 0..3"),
    ],
)
def test_bad_data_names_the_line(tmp_path, capsys, line, message):
    path = tmp_path / "bad.jsonl"
    # the blank line 2 is skipped, line 3 is bad
    path.write_text(json.dumps(GOOD) + "\n\n" + line + "\n")
    with pytest.raises(common.UserError, match=f"bad.jsonl:3: {message}"):
        hellaswag_scoring.load_examples(path)
    rc, out, err = run_main(capsys, "--data", path, "--device", "cpu")
    assert rc == 1 and out == ""
    assert err.count("\n") == 1 and "bad.jsonl:3:" in err and "Traceback" not in err


def test_empty_data_file(tmp_path):
    with pytest.raises(common.UserError, match="no examples"):
        hellaswag_scoring.load_examples(write_jsonl(tmp_path / "empty.jsonl", []))


def test_checkpoint_errors(tmp_path, capsys, checkpoint, data):
    state = torch.load(checkpoint, weights_only=True)
    del state["model"]["lm_head.weight"]
    state["sha256"] = run_folder.tensor_digest(state["model"])  # the checksum of what it now holds
    torch.save(state, tmp_path / "missing_key.pt")
    state = torch.load(checkpoint, weights_only=True)
    state["config"]["n_layer"] = 3
    torch.save(state, tmp_path / "other_size.pt")
    state["config"]["n_experts"] = 8
    torch.save(state, tmp_path / "unknown_field.pt")
    (tmp_path / "garbage.pt").write_bytes(b"not a checkpoint")
    torch.save({"weights": 1}, tmp_path / "not_ours.pt")
    cases = {
        "nowhere.pt": "no checkpoint at",
        "garbage.pt": "is not a readable checkpoint",
        "not_ours.pt": "is not a train_gpt2.py checkpoint",
        "missing_key.pt": "does not match the model of its config: missing lm_head.weight",
        "other_size.pt": "does not match the model of its config: missing transformer.h.2.",
        "unknown_field.pt": "its config does not fit GPTConfig",
    }
    for name, message in cases.items():
        rc, out, err = run_main(
            capsys, "--checkpoint", tmp_path / name, "--data", data, "--device", "cpu"
        )
        assert rc == 1 and out == "", name
        assert err.count("\n") == 1 and message in err, (name, err)


def test_model_that_does_not_exist(tmp_path, capsys, data):
    rc, _, err = run_main(
        capsys, "--model", tmp_path / "no-such-folder", "--data", data, "--device", "cpu"
    )
    assert rc == 1 and err.count("\n") == 1 and "cannot load model" in err


@pytest.mark.parametrize("short", range(3))
def test_shape_too_small(model, examples, short):
    pairs = hellaswag_scoring.render(examples[0])
    shape = list(hellaswag_scoring.batch_shape(pairs))
    shape[short] -= 1  # one row, one position or one scored position fewer than the pairs need
    with pytest.raises(common.UserError, match=r"does not fit \("):
        hellaswag_scoring.continuation_losses(model, pairs, device="cpu", shape=tuple(shape))


def test_harness_checks_the_file_first(capsys, checkpoint, tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"ctx": "a", "endings": ["b"], "label": 0}\n')
    rc, _, err = run_main(
        capsys, "--checkpoint", checkpoint, "--harness", "--data", bad, "--device", "cpu"
    )
    assert rc == 1 and err.count("\n") == 1 and "bad.jsonl" in err


def test_harness_unknown_task(capsys, checkpoint):
    rc, _, err = run_main(
        capsys, "--checkpoint", checkpoint, "--harness", "no_such_task", "--device", "cpu"
    )
    assert rc == 1 and err.count("\n") == 1 and "no task 'no_such_task'" in err


def test_flag_conflicts(capsys, data):
    for argv in (
        ["--harness", "arc_easy", "--data", data],
        ["--harness", "--compile"],
        ["--model", "gpt2", "--checkpoint", "x.pt"],
        ["--limit", "0"],
    ):
        with pytest.raises(SystemExit) as e:
            hellaswag.main([str(a) for a in argv])
        assert e.value.code == 1  # one line and exit code 1, like every user mistake


# ---- the download: atomic, size and checksum checked (from a file:// URL: no network)


@pytest.fixture
def source(tmp_path, monkeypatch):
    """A stand-in for the real file, served from a file:// URL, with its size and sha256 pinned."""
    path = write_jsonl(tmp_path / "served.jsonl", synthetic_examples(3))
    monkeypatch.setattr(hellaswag_scoring, "VAL_URL", path.as_uri())
    monkeypatch.setattr(hellaswag_scoring, "VAL_BYTES", path.stat().st_size)
    monkeypatch.setattr(hellaswag_scoring, "VAL_SHA256", common.sha256_file(path))
    return path


def test_download_once(tmp_path, monkeypatch, source):
    cache = tmp_path / "cache"
    path = hellaswag_scoring.download(cache)
    assert path.read_bytes() == source.read_bytes()
    assert [p.name for p in cache.iterdir()] == ["hellaswag_val.jsonl"]
    monkeypatch.setattr(hellaswag_scoring, "VAL_URL", (tmp_path / "gone.jsonl").as_uri())
    assert hellaswag_scoring.download(cache) == path  # cached: not fetched again


def test_download_checksum_mismatch_leaves_nothing(tmp_path, monkeypatch, source):
    monkeypatch.setattr(hellaswag_scoring, "VAL_SHA256", "0" * 64)
    with pytest.raises(common.UserError, match="is not the expected file"):
        hellaswag_scoring.download(tmp_path / "cache")
    assert list((tmp_path / "cache").iterdir()) == []


def test_download_unreachable(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(hellaswag_scoring, "VAL_URL", (tmp_path / "gone.jsonl").as_uri())
    rc, _, err = run_main(capsys, "--cache-dir", tmp_path / "cache", "--device", "cpu")
    assert rc == 1 and err.count("\n") == 1 and "could not download" in err
    # the source's failure, not our temporary file's name
    assert "No such file" in err and ".tmp" not in err, err
    assert list((tmp_path / "cache").iterdir()) == []


def test_script_reports_errors_raised_through_lm_eval(tmp_path):
    # run as a script, the file is loaded twice (__main__ and hellaswag): an error raised in the
    # copy lm-eval's registry imports must still be one line, not a traceback
    script = hellaswag.__file__
    result = subprocess.run(
        [sys.executable, script, "--harness", "--checkpoint", str(tmp_path / "nowhere.pt")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 1
    assert (
        result.stderr.strip().splitlines()[-1]
        == f"hellaswag.py: error: no checkpoint at {tmp_path / 'nowhere.pt'}"
    )
    assert "Traceback" not in result.stderr
