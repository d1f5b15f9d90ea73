"""
Sample text from a trained GPT-2: one of our checkpoints, or OpenAI's weights.

    python -m tools.sample log/model_19073.pt --prompt "Hello, I'm a language model," \
        --num 4 --length 32 --top-k 50 --seed 42
    python -m tools.sample gpt2 --prompt "The meaning of life is"   # OpenAI's 124M (needs .[hf])

The text comes from train_gpt2.py's own sample(): with the training run's prompt, --num 4, --length
32, --top-k 50 and seed 42 (the defaults) it prints what the run printed at the checkpoint's step,
on the same device.
"""

import os
import sys

import tiktoken

from longrun.common import ArgumentParser, UserError, count, run_cli
from longrun.flags import device_name, random_seed
from train_gpt2 import load_model, pick_device, precision, sample

OPENAI_MODELS = ("gpt2", "gpt2-medium", "gpt2-large", "gpt2-xl")
MAX_SAMPLES = 4096  # all samples are one batch: 1e12 of them would fail to allocate, deep in torch


def run(args):
    device = pick_device(args.device)
    # else transformers' weights
    checkpoint = args.model not in OPENAI_MODELS and not os.path.isdir(args.model)
    model = (
        load_model(checkpoint=args.model) if checkpoint else load_model(pretrained=args.model)
    ).to(device)
    try:
        prompt_tokens = len(tiktoken.get_encoding("gpt2").encode(args.prompt))
    except ValueError as e:
        # tiktoken refuses special tokens such as <|endoftext|> written out in the text
        raise UserError(f"--prompt: {str(e).splitlines()[0]}") from None
    if prompt_tokens > model.config.block_size:
        raise UserError(
            f"the prompt is {prompt_tokens} tokens, the model reads at most "
            f"{model.config.block_size}"
        )
    if prompt_tokens >= args.length:
        raise UserError(
            f"the prompt is already {prompt_tokens} tokens: --length must be more to sample any"
        )
    if args.top_k > model.config.vocab_size:
        raise UserError(
            f"--top-k {args.top_k}: the model has only {model.config.vocab_size} tokens to choose "
            "among"
        )

    device_type = device.split(":")[0]
    # as the run's default: bfloat16 on a GPU
    _, autocast = precision(None, device_type)
    texts = sample(
        model, args.prompt, args.num, args.length, device, args.seed, autocast, args.top_k
    )
    for i, text in enumerate(texts):
        print(f"sample {i}: {text!r}")


def parse_args(argv=None):
    p = ArgumentParser(description="Sample text from a GPT-2.")
    p.add_argument(
        "model",
        help="a checkpoint from train_gpt2.py (log/model_19073.pt), gpt2 ... gpt2-xl, "
        "or a transformers folder",
    )
    p.add_argument(
        "--prompt", default="Hello, I'm a language model,", help="the text every sample continues"
    )
    p.add_argument("--num", type=count, default=4, help="how many samples")
    p.add_argument(
        "--length", type=count, default=32, help="tokens per sample, the prompt's included"
    )
    p.add_argument(
        "--top-k",
        type=count,
        default=50,
        help="sample among the k likeliest tokens (training uses 50)",
    )
    p.add_argument(
        "--seed",
        type=random_seed,
        default=42,
        help="the same seed gives the same samples on one device",
    )
    p.add_argument(
        "--device", type=device_name, default="auto", help="auto, cpu, cuda, cuda:N or mps"
    )
    args = p.parse_args(argv)
    if not args.prompt:
        p.error("--prompt is empty: a sample continues some text")
    if args.num > MAX_SAMPLES:
        p.error(f"--num {args.num:,}: at most {MAX_SAMPLES:,} samples, one batch on the device")
    return args


def main(argv=None):
    args = parse_args(argv)
    return run_cli("sample.py", lambda: run(args), interrupted="no more samples")


if __name__ == "__main__":
    sys.exit(main())
