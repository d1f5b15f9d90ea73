"""
Export one of our checkpoints as a transformers GPT2LMHeadModel folder, which lm-eval's hf model,
the Hugging Face Hub and any code that loads GPT-2 through transformers can read (pip install -e
".[hf]").

    python -m tools.export_hf log/model_19073.pt gpt2-ours
    lm-eval --model hf --model_args pretrained=gpt2-ours --tasks hellaswag
"""

import os
import re
import shutil
import sys

import torch

from longrun.common import EOT, ArgumentParser, UserError, disk_error, process_running, run_cli
from train_gpt2 import CONV1D, GPT

# GPT-2's 50,257 tokens: the ids from 50,257 up are padding that no token ever uses
N_VOCAB = EOT + 1
# where tiktoken reads GPT-2's BPE
BPE_FILES = "https://openaipublic.blob.core.windows.net/gpt-2/encodings/main/"


def to_transformers(model):
    """The GPT2LMHeadModel with our model's weights: GPT.from_pretrained, backwards."""
    from transformers import GPT2Config, GPT2LMHeadModel

    c = model.config
    config = GPT2Config(
        vocab_size=N_VOCAB,
        n_positions=c.block_size,
        n_embd=c.n_embd,
        n_layer=c.n_layer,
        n_head=c.n_head,
        # we trained without dropout; transformers' defaults would add it to any fine-tuning
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
    )
    state = {}
    for key, value in model.state_dict().items():
        if key.endswith(CONV1D):
            value = value.t()
        # one tied matrix; transformers ties it again
        if key in ("transformer.wte.weight", "lm_head.weight"):
            value = value[:N_VOCAB]
        state[key] = value.contiguous()
    hf_model = GPT2LMHeadModel(config)
    # strict: every weight of the one model is a weight of the other
    hf_model.load_state_dict(state)
    return hf_model.eval()


def save_tokenizer(folder, block_size):
    """GPT-2's tokenizer, as transformers files. tiktoken reads GPT-2's BPE from OpenAI's original
    encoder.json and vocab.bpe, which are exactly the vocabulary and merges of transformers' GPT-2
    tokenizer: its cached copies make them offline. False if neither the cache nor the network has
    them."""
    from tiktoken.load import read_file_cached
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    try:
        files = {name: read_file_cached(BPE_FILES + name) for name in ("encoder.json", "vocab.bpe")}
    except (OSError, ValueError):  # offline with an empty cache (requests' errors are OSErrors)
        return False
    for name, data in files.items():
        with open(os.path.join(folder, name), "wb") as f:
            f.write(data)
    bpe = Tokenizer(
        models.BPE.from_file(
            os.path.join(folder, "encoder.json"), os.path.join(folder, "vocab.bpe")
        )
    )
    # GPT-2's regex split, bytes as characters
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    for name in files:
        os.remove(os.path.join(folder, name))  # tokenizer.json below holds them
    end = "<|endoftext|>"
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=bpe,
        bos_token=end,
        eos_token=end,
        unk_token=end,
        model_max_length=block_size,
    )
    tokenizer.save_pretrained(folder)
    return True


@torch.no_grad()
def max_logit_difference(model, folder):
    """The largest difference between our logits and those of the model transformers loads from
    folder, on the real vocabulary, for a fixed random sequence as long as the context."""
    from transformers import GPT2LMHeadModel

    hf_model = GPT2LMHeadModel.from_pretrained(folder).eval()
    idx = torch.randint(
        N_VOCAB, (1, model.config.block_size), generator=torch.Generator().manual_seed(0)
    )
    ours, _ = model.eval()(idx)
    return (ours[..., :N_VOCAB] - hf_model(idx).logits).abs().max().item()


# in every folder an export writes: --force replaces such a folder, and no other
MARK = ".export_hf"


def write_folder_atomically(folder, write, force):
    """write(tmp) into a temporary folder beside folder, then renamed into place: a crash or Ctrl-C
    leaves no half-written folder. A folder with files in it is replaced only with force, and only
    if an export made it (a run's log folder, say, is never deleted); what a killed export left
    beside it is cleaned up first."""
    if os.path.exists(folder) and not os.path.isdir(folder):
        raise UserError(f"{folder} is a file, not a folder")
    clean_leftovers(folder)
    if os.path.isdir(folder) and os.listdir(folder):
        if not force:
            raise UserError(
                f"{folder} is not empty: choose another folder, or --force to replace it"
            )
        if not os.path.isfile(os.path.join(folder, MARK)):
            raise UserError(
                f"{folder} was not made by export_hf.py: --force replaces only an export, choose "
                "another folder"
            )
    # beside it: a rename never crosses file systems
    tmp = f"{os.path.normpath(folder)}.{os.getpid()}.tmp"
    os.makedirs(tmp)
    try:
        result = write(tmp)
        with open(os.path.join(tmp, MARK), "w") as f:
            f.write("written by export_hf.py: its --force may replace this folder\n")
        # --force: the old folder goes only once the new one is whole
        if os.path.isdir(folder) and os.listdir(folder):
            old = f"{tmp}.old"
            os.replace(folder, old)
            os.replace(tmp, folder)
            shutil.rmtree(old)
        else:
            os.replace(tmp, folder)  # an empty folder is replaced in place
        return result
    except Exception as e:  # a full disk, in save_pretrained's words or the file system's
        if (reported := disk_error(e, tmp)) is None or reported is e:
            raise
        raise reported from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def clean_leftovers(folder):
    """What an export that was killed left beside folder: its temporary folder (FOLDER.PID.tmp),
    and, killed between its two renames, the export it was replacing (FOLDER.PID.tmp.old), put back
    if nothing took its place."""
    parent, name = os.path.split(os.path.normpath(folder))
    leftover = re.compile(re.escape(name) + r"\.(\d+)\.tmp(\.old)?")
    for entry in sorted(os.listdir(parent or ".")):
        if not (m := leftover.fullmatch(entry)) or process_running(int(m[1])):
            continue
        path = os.path.join(parent, entry)
        if m[2] and not os.path.exists(folder):
            os.replace(path, folder)  # the export being replaced: back where it was
        else:
            shutil.rmtree(path, ignore_errors=True)


def export(args):
    try:
        from transformers.utils import logging
    except ImportError:
        raise UserError("the export needs transformers: pip install -e '.[hf]'") from None
    logging.disable_progress_bar()  # a small model is written and read back in a blink
    model = GPT.from_checkpoint(args.checkpoint)
    if model.config.vocab_size < N_VOCAB:
        raise UserError(
            f"{args.checkpoint}: a vocabulary of {model.config.vocab_size}, fewer than GPT-2's "
            f"{N_VOCAB}"
        )

    def write(tmp):
        to_transformers(model).save_pretrained(tmp)
        # what is on disk, read back as any user of it will
        difference = max_logit_difference(model, tmp)
        if difference > 1e-4:
            raise AssertionError(
                f"transformers' logits differ from ours by {difference:.2e}: an export bug"
            )
        return difference, save_tokenizer(tmp, model.config.block_size)

    difference, with_tokenizer = write_folder_atomically(args.folder, write, args.force)
    n_params = (
        sum(p.numel() for p in model.parameters())
        - (model.config.vocab_size - N_VOCAB) * model.config.n_embd
    )
    print(
        f"{args.folder}: GPT2LMHeadModel, {n_params / 1e6:.2f}M parameters (vocabulary "
        f"{model.config.vocab_size:,} cut to {N_VOCAB:,}); its logits equal ours to "
        f"{difference:.1e}"
    )
    if with_tokenizer:
        print("with GPT-2's tokenizer (tokenizer.json)")
    else:
        print(
            "no tokenizer files (tiktoken's cache is empty and the network is out of reach): add "
            "them with "
            f'python -c "from transformers import GPT2TokenizerFast; '
            f"GPT2TokenizerFast.from_pretrained('gpt2').save_pretrained('{args.folder}')\""
        )
    print(
        f"evaluate it: lm-eval --model hf --model_args pretrained={args.folder} --tasks hellaswag"
    )


def parse_args(argv=None):
    p = ArgumentParser(
        description="Export a train_gpt2.py checkpoint as a transformers GPT2LMHeadModel folder."
    )
    p.add_argument("checkpoint", help="a checkpoint from train_gpt2.py, e.g. log/model_19073.pt")
    p.add_argument(
        "folder", help="the folder to write (config.json, model.safetensors, the tokenizer's files)"
    )
    p.add_argument(
        "--force", action="store_true", help="replace the folder if it already holds files"
    )
    return p.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    return run_cli(
        "export_hf.py", lambda: export(args), interrupted="no half-written folder is left"
    )


if __name__ == "__main__":
    sys.exit(main())
