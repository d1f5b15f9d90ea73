"""The speed steps' checks (walkthrough/checks/speed.py) on edited checkouts of the series: correct
changes written differently from ours pass, plausible mistakes fail with a line that names them.

Trees at the vocabulary step, one process each: one with three correct alternatives (the causal mask
built with `torch.tril` and passed to scaled_dot_product_attention, TF32 switched on through
`allow_tf32`, the model compiled in place with `model.compile()`); and six mistakes, in four trees:
the preset overriding the flags in one, four others (each in a different step's code) in the second,
and the loss taken outside autocast, as bfloat16 or cast to float32 afterwards, in one tree each.
"""

from pathlib import Path

import pytest

from check_tags import edit, edited
from walkthrough import checks


def results(tree: Path, slugs: list[str]) -> dict[str, checks.Result]:
    return {result.slug: result for result in checks.run(tree, slugs)}


@pytest.fixture(scope="module")
def alternatives(series_history, tmp_path_factory) -> dict[str, checks.Result]:
    tree = edited(series_history, "vocab", tmp_path_factory.mktemp("alternatives"))
    edit(
        tree,
        (
            "y = F.scaled_dot_product_attention(q, k, v, is_causal=True)",
            "mask = torch.tril(torch.ones(T, T, dtype=torch.bool, device=x.device))"
            "  # True: may attend\n"
            "        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)",
        ),
    )
    edit(
        tree,
        (
            'torch.set_float32_matmul_precision("high")',
            "torch.backends.cuda.matmul.allow_tf32 = True",
        ),
    )
    edit(tree, ("model = torch.compile(model)", "model.compile()"))
    return results(tree, ["flash", "tf32", "compile"])


@pytest.mark.parametrize("slug", ["flash", "tf32", "compile"])
def test_a_correct_change_written_differently_passes(alternatives, slug):
    assert alternatives[slug].ok, alternatives[slug].message


@pytest.fixture(scope="module")
def mistakes(series_history, tmp_path_factory) -> dict[str, checks.Result]:
    # the preset applied after parsing: it overrides the flags instead of giving them defaults
    # (a tree of its own: the other checks' runs shrink the preset by flags, which this
    # mistake would ignore)
    tree = edited(series_history, "vocab", tmp_path_factory.mktemp("mistake"))
    edit(
        tree,
        (
            "    args, _ = p.parse_known_args(argv)\n"
            "    if args.preset:\n"
            "        p.set_defaults(**PRESETS[args.preset])\n"
            "    return p.parse_args(argv)",
            "    args = p.parse_args(argv)\n"
            "    if args.preset:\n"
            "        vars(args).update(PRESETS[args.preset])\n"
            "    return args",
        ),
    )
    found = results(tree, ["preset"])
    # the model's positions cut to the batch's length (T): "it never sees more", but GPT-2's
    # model has 1,024
    tree = edited(
        series_history,
        "vocab",
        tmp_path_factory.mktemp("preset-block"),
        (
            "vocab_size=args.vocab_size, n_layer=args.n_layer",
            "block_size=args.seq_len, vocab_size=args.vocab_size, n_layer=args.n_layer",
        ),
    )
    found["preset-block"] = results(tree, ["preset"])["preset"]

    tree = edited(series_history, "vocab", tmp_path_factory.mktemp("mistakes"))
    # the model itself cast to bfloat16 for a bf16 run, instead of autocast alone
    edit(
        tree,
        (
            "else GPT(config)).to(device)",
            "else GPT(config)).to("
            'device, torch.bfloat16 if dtype == "bfloat16" else torch.float32)',
        ),
    )
    # the compiled model dropped: the eager one is trained
    edit(tree, ("model = torch.compile(model)", "torch.compile(model)"))
    # causality forgotten: every position sees the whole sequence
    edit(tree, ("is_causal=True", "is_causal=False"))
    # only the output layer padded, after the model is built: the embedding keeps 50,257 rows, and
    # the tie is gone
    edit(
        tree,
        ("vocab_size=args.vocab_size, n_layer=args.n_layer", "n_layer=args.n_layer"),
        (
            "    optimizer = torch.optim.AdamW(",
            "    if not args.pretrained:\n"
            "        model.lm_head = "
            "nn.Linear(args.n_embd, args.vocab_size, bias=False).to(device)\n"
            "    optimizer = torch.optim.AdamW(",
        ),
    )
    found |= results(tree, ["bf16", "compile", "flash", "vocab"])

    # the loss taken outside autocast, from the bf16 logits: a bfloat16 loss; then the same, cast
    # up to float32
    loss = "            loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))"
    outside = "            with torch.autocast(idx.device.type, enabled=False):\n    " + loss
    for name, new in (("bf16-loss", outside), ("bf16-loss-cast", outside + ".float()")):
        tree = edited(series_history, "vocab", tmp_path_factory.mktemp(name), (loss, new))
        found[name] = results(tree, ["bf16"])["bf16"]
    return found


@pytest.mark.parametrize(
    "slug, words",
    [
        (
            "preset",
            "parse_args(['--preset', 'cpu', '--max-steps', '3', '-T', '32']).max_steps: "
            "expected 3, found 20",
        ),
        ("preset-block", "the model's parameters: expected 7,357,312"),
        ("bf16", "the model's weights: expected float32, found transformer."),
        ("compile", "what torch.compile returned: expected called in training, found never called"),
        ("flash", "against causal attention by hand: expected equal values"),
        (
            "vocab",
            "transformer.wte.weight and lm_head.weight: "
            "expected one tied matrix (the embedding padded too), "
            "found two tensors, of shapes (50257, 32) and (50304, 32)",
        ),
        (
            "bf16-loss",
            "'s loss (autocast computes cross_entropy in float32, from the bf16 logits): expected "
            "torch.float32, found torch.bfloat16",
        ),
        (
            "bf16-loss-cast",
            "the first loss under bf16 autocast (against float32's: rounding noise only): expected",
        ),
    ],
)
def test_a_plausible_mistake_fails_with_one_readable_line(mistakes, slug, words):
    result = mistakes[slug]
    assert not result.ok
    assert words in result.message, result.message
    assert "\n" not in result.message
