"""sample.py and export_hf.py on a tiny checkpoint written by train_gpt2.py itself (one step
on tiny shakespeare)."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import tiktoken
import tiktoken.load
import torch

import hellaswag
import helpers
from fixtures import synthetic_examples
from helpers import ROOT
from tools import export_hf, preflight, sample
from train_gpt2 import GPT

# the training run's own prompt, so its printed samples are the oracle
PROMPT = "Hello, I'm a language model,"
TINY = ["--data", "input.txt", *helpers.TINY, "--max-steps", "1", "--sample-every", "1"]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """(checkpoint path, the sample lines the run printed at its last step, with those weights)."""
    log_dir = tmp_path_factory.mktemp("log")
    cmd = [sys.executable, "train_gpt2.py", *TINY, "--log-dir", str(log_dir)]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    printed = [line for line in proc.stdout.splitlines() if line.startswith("sample ")]
    assert len(printed) == 4, proc.stdout
    return log_dir / "model_00001.pt", printed


def run_sample(capsys, *argv):
    rc = sample.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return rc, out.splitlines(), err.splitlines()


# ---- tools/sample.py


def test_sample_prints_what_training_printed(capsys, trained):
    checkpoint, printed = trained
    # the defaults: the run's prompt, 4 x 32, seed 42
    rc, out, _ = run_sample(capsys, checkpoint, "--device", "cpu")
    assert rc == 0
    assert out == printed


def test_sample_is_seeded(capsys, trained):
    checkpoint, _ = trained
    argv = (checkpoint, "--prompt", "To be", "--num", 2, "--length", 12, "--device", "cpu")
    first, again, other = (run_sample(capsys, *argv, "--seed", seed)[1] for seed in (7, 7, 8))
    assert len(first) == 2 and all(
        line.startswith(("sample 0: 'To be", "sample 1: 'To be")) for line in first
    )
    assert first == again
    assert first != other


def test_sample_top_k(capsys, trained):
    """--top-k 1 is greedy decoding: every sample and every seed give the one most
    likely continuation."""
    checkpoint, _ = trained
    argv = (
        checkpoint,
        "--prompt",
        "To be",
        "--num",
        2,
        "--length",
        12,
        "--device",
        "cpu",
        "--top-k",
    )
    greedy = [run_sample(capsys, *argv, 1, "--seed", seed)[1] for seed in (7, 8)]
    texts = {line.split(": ", 1)[1] for lines in greedy for line in lines}
    assert len(texts) == 1
    # the default samples among 50
    assert run_sample(capsys, *argv, 50, "--seed", 7)[1] != greedy[0]


@pytest.mark.parametrize(
    "argv, words",
    [
        (["missing.pt"], ["no checkpoint at missing.pt"]),
        (["input.txt"], ["input.txt is not a readable checkpoint"]),
        (
            ["CHECKPOINT", "--prompt", "to be or not " * 300],
            ["the prompt is 1201 tokens", "at most 1024"],
        ),
        (["CHECKPOINT", "--prompt", "the end<|endoftext|>"], ["--prompt:", "<|endoftext|>"]),
        (["CHECKPOINT", "--length", 3], ["the prompt is already 8 tokens", "--length"]),
        (["CHECKPOINT", "--num", 0], ["--num", "at least 1"]),
        (["CHECKPOINT", "--top-k", 60000], ["--top-k 60000", "only 50304 tokens"]),
    ],
)
def test_sample_bad_input_is_one_line(capsys, trained, monkeypatch, argv, words):
    monkeypatch.chdir(ROOT)
    argv = [trained[0] if a == "CHECKPOINT" else a for a in argv]
    try:
        rc, out, err = run_sample(capsys, *argv, "--device", "cpu")
    except SystemExit as e:  # argparse
        rc, err = e.code, capsys.readouterr().err.splitlines()
    assert rc == 1 and len(err) == 1, err
    for word in words:
        assert word in err[0], (word, err[0])


# ---- tools/export_hf.py


@pytest.fixture(scope="module")
def exported(trained, tmp_path_factory):
    folder = tmp_path_factory.mktemp("export") / "gpt2-ours"
    assert export_hf.main([str(trained[0]), str(folder)]) == 0
    return folder


def test_export_logits_equal_ours_through_transformers(trained, exported):
    from transformers import GPT2LMHeadModel

    ours = GPT.from_checkpoint(trained[0]).eval()
    theirs = GPT2LMHeadModel.from_pretrained(exported).eval()
    assert ours.config.vocab_size == 50304 and theirs.config.vocab_size == 50257
    # still one tied matrix
    assert theirs.lm_head.weight.data_ptr() == theirs.transformer.wte.weight.data_ptr()
    idx = torch.randint(50257, (2, 64), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        torch.testing.assert_close(theirs(idx).logits, ours(idx)[0][..., :50257], atol=1e-5, rtol=0)


def test_export_round_trip_through_from_pretrained(trained, exported):
    ours = GPT.from_checkpoint(trained[0]).state_dict()
    # --pretrained's loader: transposes the Conv1D weights
    back = GPT.from_pretrained(str(exported)).state_dict()
    assert back.keys() == ours.keys()
    for key, value in back.items():
        # the same numbers, the padding rows cut
        assert torch.equal(value, ours[key][: len(value)]), key


def test_export_tokenizer_is_tiktokens(exported):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(exported)
    text = "Hello, I'm a language model,  two  spaces\n\n\tcafé 東京 🙂 don't<|endoftext|>The end"
    assert tokenizer(text)["input_ids"] == tiktoken.get_encoding("gpt2").encode(
        text, allowed_special="all"
    )
    assert tokenizer.eos_token_id == 50256 and tokenizer.model_max_length == 1024


def test_export_replaces_only_an_export_and_only_when_forced(capsys, trained, tmp_path):
    folder = tmp_path / "out"
    assert export_hf.main([str(trained[0]), str(folder)]) == 0
    assert export_hf.main([str(trained[0]), str(folder)]) == 1
    err = capsys.readouterr().err.strip()
    assert err.endswith(
        f"export_hf.py: error: {folder} is not empty: "
        "choose another folder, or --force to replace it"
    )
    (folder / "config.json").write_text("{}")  # changed: --force writes it again
    assert export_hf.main([str(trained[0]), str(folder), "--force"]) == 0
    assert json.loads((folder / "config.json").read_text())["n_layer"] == 2
    assert [p.name for p in tmp_path.iterdir()] == ["out"]  # no temporary folder left beside it


def test_export_force_never_deletes_a_folder_it_did_not_make(capsys, trained, tmp_path):
    """--force into a run's own log folder: its checkpoints, log and lock stay, and so does
    anything else's folder."""
    run = trained[0].parent
    before = {p.name: p.read_bytes() for p in run.iterdir() if p.is_file()}
    assert export_hf.main([str(trained[0]), str(run), "--force"]) == 1
    err = capsys.readouterr().err.strip()
    assert err.endswith(
        f"{run} was not made by export_hf.py: "
        "--force replaces only an export, choose another folder"
    )
    assert {p.name: p.read_bytes() for p in run.iterdir() if p.is_file()} == before


def test_a_killed_exports_leftovers_are_cleaned_by_the_next(capsys, trained, tmp_path):
    """Killed while writing: its FOLDER.PID.tmp stays. Killed between its two renames: the folder is
    gone, the export it replaced is FOLDER.PID.tmp.old. The next export, whatever its pid, puts the
    old one back and removes the rest."""
    folder = tmp_path / "out"
    assert export_hf.main([str(trained[0]), str(folder)]) == 0
    dead = 2**22 + 1  # above Linux's default pid_max: no process has it
    (tmp_path / f"out.{dead}.tmp").mkdir()
    (tmp_path / f"out.{dead}.tmp" / "model.safetensors").write_bytes(b"half")
    folder.rename(tmp_path / f"out.{dead + 1}.tmp.old")
    # the old export is back: not empty, so refused
    assert export_hf.main([str(trained[0]), str(folder)]) == 1
    assert "is not empty" in capsys.readouterr().err and (folder / "config.json").exists()
    assert [p.name for p in tmp_path.iterdir()] == ["out"]


def test_a_full_disk_during_the_export_is_one_line_and_leaves_nothing(
    capsys, trained, tmp_path, monkeypatch
):
    """safetensors reports a full disk as its own error, in Rust's words: one line naming the
    folder being written."""
    import transformers

    def full(self, folder, **kwargs):
        (Path(folder) / "model.safetensors").write_bytes(b"half")
        raise RuntimeError(
            "Error while serializing: I/O error: No space left on device (os error 28)"
        )

    monkeypatch.setattr(transformers.GPT2LMHeadModel, "save_pretrained", full)
    folder = tmp_path / "out"
    assert export_hf.main([str(trained[0]), str(folder)]) == 1
    assert (
        capsys.readouterr().err
        == f"export_hf.py: error: {folder}.{os.getpid()}.tmp: No space left on device\n"
    )
    assert list(tmp_path.iterdir()) == []


def test_export_offline_without_tiktokens_files_says_how_to_add_them(
    capsys, trained, tmp_path, monkeypatch
):
    def offline(*args, **kwargs):
        raise OSError("no network")

    monkeypatch.setattr(tiktoken.load, "read_file_cached", offline)
    assert export_hf.main([str(trained[0]), str(tmp_path / "out")]) == 0
    out = capsys.readouterr().out
    assert "GPT2TokenizerFast.from_pretrained('gpt2').save_pretrained(" in out, out
    assert not list((tmp_path / "out").glob("tokenizer*"))


def test_sample_from_the_exported_folder(capsys, exported):
    rc, out, _ = run_sample(capsys, exported, "--num", 2, "--length", 12, "--device", "cpu")
    assert rc == 0 and len(out) == 2, out
    assert all(line.startswith(f'sample {i}: "{PROMPT}') for i, line in enumerate(out)), out


def test_lm_eval_hf_model_scores_the_exported_folder_as_ours_does(exported, tmp_path):
    # lm-eval's own `hf` model (transformers + accelerate, the [eval] extra) against our model
    # registered in lm-eval (hellaswag.py --harness), both on the folder: the same task, the same
    # log-likelihoods. (The checkpoint itself scores a little differently: its softmax also spans
    # the 47 padding rows the export cuts.)
    from lm_eval import simple_evaluate

    data = tmp_path / "val.jsonl"
    data.write_text("".join(json.dumps(row) + "\n" for row in synthetic_examples(5)))
    task = hellaswag.file_task(data)
    theirs = simple_evaluate(
        model="hf", model_args=f"pretrained={exported}", tasks=[task], device="cpu"
    )
    ours = hellaswag.run_harness(task, pretrained=str(exported))
    for results in (theirs, ours):
        assert len(results["samples"]["hellaswag_file"]) == 5
    lls = [
        torch.tensor(
            [
                [ll for ll, _ in s["filtered_resps"]]
                for s in sorted(r["samples"]["hellaswag_file"], key=lambda s: s["doc_id"])
            ]
        )
        for r in (theirs, ours)
    ]
    torch.testing.assert_close(lls[0], lls[1], rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize(
    "flags, words",
    [(["--prompt", ""], "--prompt is empty"), (["--num", "1e12"], "at most 4,096 samples")],
)
def test_sample_refuses_what_cannot_be_sampled_in_one_line(capsys, trained, flags, words):
    with pytest.raises(SystemExit) as exit:
        sample.main([str(trained[0]), *flags])
    err = capsys.readouterr().err.strip().splitlines()
    assert exit.value.code != 0 and len(err) == 1 and words in err[0], err


@pytest.mark.parametrize(
    "script, what",
    [(export_hf, "export"), (sample, "run"), (hellaswag, "run"), (preflight, "preflight")],
)
def test_ctrl_c_is_one_line_and_status_130(capsys, trained, tmp_path, monkeypatch, script, what):
    def interrupted(*args):
        raise KeyboardInterrupt

    monkeypatch.setattr(script, what, interrupted)
    argv = {
        export_hf: [str(trained[0]), str(tmp_path / "out")],
        sample: [str(trained[0])],
        hellaswag: ["--checkpoint", str(trained[0]), "--device", "cpu"],
        preflight: ["--preset", "cpu", "--log-dir", str(tmp_path / "log")],
    }[script]
    assert script.main(argv) == 130
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(
        f"{script.__name__.split('.')[-1]}.py: interrupted: "
    )


@pytest.mark.parametrize("damage", ["cut short", "other sizes"])
def test_a_broken_transformers_folder_ends_in_our_one_line_error(
    capsys, exported, tmp_path, damage
):
    folder = tmp_path / "broken"
    shutil.copytree(exported, folder)
    if damage == "cut short":
        weights = folder / "model.safetensors"
        weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    else:
        config = json.loads((folder / "config.json").read_text())
        (folder / "config.json").write_text(json.dumps(config | {"n_embd": 2 * config["n_embd"]}))
    rc, out, err = run_sample(capsys, folder, "--device", "cpu")
    assert (
        rc == 1
        and err[-1].startswith(f"sample.py: error: cannot load model {str(folder)!r}: ")
        and not out
    )
