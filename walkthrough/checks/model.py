"""Checks for the steps that build the model: from the skeleton to GPT-2's initialisation."""

from .core import check, expect


def gpt2_parameters(n_layer, n_embd, vocab_size, block_size, tied):
    """GPT-2's parameter count, counted from its shapes: embeddings, per block two LayerNorms, attention (c_attn,
    c_proj) and the MLP (c_fc, c_proj) with their biases, the final LayerNorm, and lm_head unless it is tied."""
    C = n_embd
    block = 2 * 2 * C + (C * 3 * C + 3 * C) + (C * C + C) + (C * 4 * C + 4 * C) + (4 * C * C + C)
    embeddings = vocab_size * C + block_size * C
    return embeddings + n_layer * block + 2 * C + (0 if tied else vocab_size * C)


@check("tying", "train_gpt2.GPTConfig", "train_gpt2.GPT", "GPT.transformer.wte", "GPT.lm_head")
def tying(tree):
    """The token embedding `wte` and the output layer `lm_head` are one tensor, so the model has exactly
    vocab_size × n_embd fewer parameters than the untied GPT-2: one matrix both reads and writes tokens."""
    config = dict(n_layer=2, n_head=2, n_embd=32, block_size=64, vocab_size=50257)
    model = tree.name("train_gpt2", "GPT")(tree.name("train_gpt2", "GPTConfig")(**config))
    wte, lm_head = model.transformer.wte.weight, model.lm_head.weight
    expect(wte is lm_head, "GPT.transformer.wte.weight and GPT.lm_head.weight", "the same tensor", "two tensors")
    found = sum(p.numel() for p in model.parameters())
    expected = gpt2_parameters(config["n_layer"], config["n_embd"], config["vocab_size"], config["block_size"], True)
    expect(found == expected, "parameters of a 2-layer, 32-channel GPT", f"{expected:,}", f"{found:,}")
