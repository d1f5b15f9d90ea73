"""Part 0: backpropagation worked by hand, before the GPT-2 series leaves it to PyTorch."""
