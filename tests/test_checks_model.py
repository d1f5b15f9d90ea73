"""The model steps' checks on a learner's tree: a correct change written differently from ours passes, and plausible
mistakes fail with one readable line. Each scenario checks out a step of the built series, edits train_gpt2.py the
way a learner might, and runs the check as `walkthrough exercise N --check` does (a process in the tree)."""

import pytest

from check_tags import edited
from walkthrough import checks

TIED_OTHER_WAY = (
    "self.transformer.wte.weight = self.lm_head.weight",
    "self.lm_head.weight = self.transformer.wte.weight",
)
INIT_BY_NAME = (
    "        self.apply(self._init_weights)\n",
    """        for name, p in self.named_parameters():  # the same rules, by parameter name instead of module type
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

# (the step it changes, by Step-Id; the checks to run; the edit; None if it must pass, else words its failure says)
SCENARIOS = {
    "tying written the other way round": ("init", ["tying", "init"], TIED_OTHER_WAY, None),
    "tying the other way round before the init step": (
        "tying",
        ["tying"],
        TIED_OTHER_WAY,
        "a new tied model's loss (is the tensor kept lm_head's, nn.Linear's small init, or wte's N(0, 1)?)",
    ),
    "init written by parameter name": ("init", ["init"], INIT_BY_NAME, None),
    "residual scaling on every Linear": (
        "init",
        ["init"],
        SCALE_EVERY_LINEAR,
        "attn.c_attn.weight's std: expected 0.02",
    ),
    "loader's tokens shifted the wrong way": ("loader", ["loader"], SHIFT_WRONG_WAY, "shifted the wrong way"),
    "sampling from every token, not the top k": ("sampling", ["sampling"], NO_TOP_K, "5 most likely"),
    "the exact GELU": ("forward", ["forward"], EXACT_GELU, "against transformers' GPT-2: expected equal values"),
    "the loss summed, not averaged": ("first-loss", ["first-loss"], SUMMED_LOSS, "against F.cross_entropy"),
}


@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_a_learners_change(series_history, tmp_path, scenario):
    step, slugs, change, fails_with = SCENARIOS[scenario]
    results = checks.run(edited(series_history, step, tmp_path / "tree", change), slugs)
    if fails_with is None:
        assert [(r.slug, r.message) for r in results if not r.ok] == []
    else:
        (result,) = results
        assert not result.ok, f"{scenario}: the {result.slug} check passed"
        assert fails_with in result.message and "\n" not in result.message, result.message
