"""The model steps' checks on a learner's tree: a correct change written differently from ours
passes, and plausible mistakes fail with one readable line. Each scenario checks out a step of the
built series, edits train_gpt2.py the way a learner might, and runs the check as `walkthrough
exercise N --check` does (a process in the tree)."""

import pytest

from check_tags import edited
from walkthrough import checks

TIED_OTHER_WAY = (
    "self.transformer.wte.weight = self.lm_head.weight",
    "self.lm_head.weight = self.transformer.wte.weight",
)
INIT_BY_NAME = (
    "        self.apply(self._init_weights)\n",
    """        # the same rules, by parameter name instead of module type
        for name, p in self.named_parameters():
            if name.endswith(".bias"):
                torch.nn.init.zeros_(p)
            elif name.endswith("c_proj.weight"):
                torch.nn.init.normal_(p, std=0.02 / math.sqrt(2 * config.n_layer))
            elif ".ln_" not in name:
                torch.nn.init.normal_(p, std=0.02)
""",
)
SCALE_EVERY_LINEAR = ('if hasattr(module, "RESIDUAL_PROJECTION"):', "if True:")
SHIFT_WRONG_WAY = (
    "x = buf[:-1].view(B, T)  # inputs\n        y = buf[1:].view(B, T)",
    "x = buf[1:].view(B, T)  # inputs\n        y = buf[:-1].view(B, T)",
)
NO_TOP_K = (
    "topk_probs, topk_indices = torch.topk(probs, top_k, dim=-1)",
    "topk_probs, topk_indices = probs, torch.arange(probs.size(-1)).expand_as(probs)",
)
EXACT_GELU = ('nn.GELU(approximate="tanh")', "nn.GELU()")
SUMMED_LOSS = ("targets.view(-1))", 'targets.view(-1), reduction="sum")')
# the lecture's way with the causal mask: a persistent buffer, skipped by name when loading
LECTURE_MASK_SKIPPED = (
    "            hf_value = sd_hf[key]\n",
    """            if key.endswith(".attn.bias"):
                continue  # the mask, not a weight
            hf_value = sd_hf[key]
""",
)
LECTURE_MASK_EARLY = (
    "        self.c_proj = nn.Linear(config.n_embd, config.n_embd)\n",
    """        self.c_proj = nn.Linear(config.n_embd, config.n_embd)
        mask = torch.tril(torch.ones(config.block_size, config.block_size))
        self.register_buffer("bias", mask.view(1, 1, config.block_size, config.block_size))
""",
)
LECTURE_MASK = (
    "mask.view(1, 1, config.block_size, config.block_size), persistent=False",
    "mask.view(1, 1, config.block_size, config.block_size)",
)
TIED_EARLY = (
    "        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)\n",
    """        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        self.transformer.wte.weight = self.lm_head.weight
""",
)
NEW_TOKENS_AS_LENGTH = (
    "model.generate(idx, args.max_length - idx.size(1),",
    "model.generate(idx, args.max_length,",
)
BLOCK_AS_LENGTH = ("GPT(GPTConfig())", "GPT(GPTConfig(block_size=args.max_length))")
NO_N_LAYER = (
    "GPTConfig(n_layer=args.n_layer, n_head=args.n_head,",
    "GPTConfig(n_head=args.n_head,",
)
ADAM = (
    "torch.optim.AdamW(model.parameters(), lr=args.lr)",
    "torch.optim.Adam(model.parameters(), lr=args.lr)",
)
LR_FIXED = (
    "torch.optim.AdamW(model.parameters(), lr=args.lr)",
    "torch.optim.AdamW(model.parameters(), lr=3e-4)",
)
LR_DEFAULT_TRY_IT = ('"--lr", type=float, default=3e-4', '"--lr", type=float, default=3e-3')
BATCH_BEFORE_LOOP = [
    ("        x, y = train_loader.next_batch()\n        x, y = x.to(device), y.to(device)\n", ""),
    (
        "    train_loader = DataLoaderLite(args.data, B, T)\n",
        """    train_loader = DataLoaderLite(args.data, B, T)
    x, y = train_loader.next_batch()
    x, y = x.to(device), y.to(device)
""",
    ),
]
BATCHES_OF_BT_PLUS_ONE = (
    "{len(self.tokens) // (B * T)} batches",
    "{len(self.tokens) // (B * T + 1)} batches",
)
BATCHES_AS_SERVED = (
    "{len(self.tokens) // (B * T)} batches",
    "{(len(self.tokens) - 1) // (B * T)} batches",
)

# (the step it changes, by Step-Id; the checks to run; the edit, or a list of them; None if it must
# pass, else words its failure says)
SCENARIOS = {
    "tying written the other way round": ("init", ["tying", "init"], TIED_OTHER_WAY, None),
    "tying the other way round before the init step": (
        "tying",
        ["tying"],
        TIED_OTHER_WAY,
        "a new tied model's loss "
        "(is the tensor kept lm_head's, nn.Linear's small init, or wte's N(0, 1)?)",
    ),
    "init written by parameter name": ("init", ["init"], INIT_BY_NAME, None),
    "residual scaling on every Linear": (
        "init",
        ["init"],
        SCALE_EVERY_LINEAR,
        "attn.c_attn.weight's std: expected 0.02",
    ),
    "loader's tokens shifted the wrong way": (
        "loader",
        ["loader"],
        SHIFT_WRONG_WAY,
        "shifted the wrong way",
    ),
    "sampling from every token, not the top k": (
        "sampling",
        ["sampling"],
        NO_TOP_K,
        "5 most likely",
    ),
    "the exact GELU": (
        "forward",
        ["forward"],
        EXACT_GELU,
        "against transformers' GPT-2: expected equal values",
    ),
    "the loss summed, not averaged": (
        "first-loss",
        ["first-loss"],
        SUMMED_LOSS,
        "against F.cross_entropy",
    ),
    "a persistent mask in the skeleton, skipped when loading": (
        "skeleton",
        ["skeleton"],
        [LECTURE_MASK_EARLY, LECTURE_MASK_SKIPPED],
        "found also transformer.h.0.attn.bias, transformer.h.1.attn.bias "
        "(a buffer: persistent=False",
    ),
    "weights tied already in the skeleton": (
        "skeleton",
        ["skeleton"],
        TIED_EARLY,
        "expected 163,037,184",
    ),
    "a persistent mask, skipped when loading": (
        "forward",
        ["forward"],
        [LECTURE_MASK, LECTURE_MASK_SKIPPED],
        "GPT's state_dict: expected only the checkpoint's 29 names",
    ),
    "--max-length read as the number of new tokens": (
        "device",
        ["device"],
        NEW_TOKENS_AS_LENGTH,
        "the longest input the GPT read: expected 9 tokens",
    ),
    "the random model's block size from --max-length": (
        "device",
        ["device"],
        BLOCK_AS_LENGTH,
        "the random model's parameters: expected GPT-2 124M's 163,037,184",
    ),
    "--n-layer ignored": (
        "overfit",
        ["overfit"],
        NO_N_LAYER,
        "the model's parameters: expected 3,274,688",
    ),
    "Adam, not AdamW": (
        "overfit",
        ["overfit"],
        ADAM,
        "optimizer: expected torch.optim.AdamW, found Adam",
    ),
    "--lr ignored": ("overfit", ["overfit"], LR_FIXED, "AdamW's learning rate: expected 0.02"),
    "--lr's default the Try-it's 3e-3": (
        "overfit",
        ["overfit"],
        LR_DEFAULT_TRY_IT,
        "expected 0.0003, found 0.003",
    ),
    "one batch, taken before the loop": (
        "loader",
        ["loader"],
        BATCH_BEFORE_LOOP,
        "step 1's inputs: expected exact.txt's tokens 16..31 (a fresh batch every step), "
        "found tokens 0..15",
    ),
    "batches per epoch of B*T + 1 tokens": (
        "loader",
        ["loader"],
        BATCHES_OF_BT_PLUS_ONE,
        "batches per epoch'",
    ),
    "batches per epoch counted as the loader serves them": (
        "loader",
        ["loader"],
        BATCHES_AS_SERVED,
        None,
    ),
}


@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_a_learners_change(series_history, tmp_path, scenario):
    step, slugs, change, fails_with = SCENARIOS[scenario]
    edits = change if isinstance(change, list) else [change]
    results = checks.run(edited(series_history, step, tmp_path / "tree", *edits), slugs)
    if fails_with is None:
        assert [(r.slug, r.message) for r in results if not r.ok] == []
    else:
        (result,) = results
        assert not result.ok, f"{scenario}: the {result.slug} check passed"
        assert fails_with in result.message and "\n" not in result.message, result.message
