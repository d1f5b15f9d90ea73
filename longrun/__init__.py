"""The modules a long run needs, kept out of train_gpt2.py so that it reads as one program."""
