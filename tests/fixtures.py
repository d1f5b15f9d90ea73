"""Synthetic data that tests and benchmarks share: one generator, so both score the same
kind of examples."""

import random

WORDS = (
    "the a man woman dog ball water roof he she then slowly quickly runs jumps sits into over and"
).split()


def synthetic_examples(n, seed=0, words=WORDS, context=(3, 40), ending=(1, 20)):
    """HellaSwag-format examples: a context and 4 endings of random words (their counts drawn from
    the ranges given), a random label."""
    rng = random.Random(seed)

    def text(lo, hi):
        return " ".join(rng.choice(words) for _ in range(rng.randint(lo, hi)))

    return [
        {
            "ind": i,
            "ctx": text(*context),
            "endings": [text(*ending) for _ in range(4)],
            "label": rng.randrange(4),
        }
        for i in range(n)
    ]


def failing_compilers(folder, says=""):
    """A C and C++ toolchain that is there but fails (broken, or the wrong one), to put first on
    PATH: `folder`, holding gcc, g++, cc, c++, clang and clang++, each printing `says` (if anything)
    and exiting with status 1."""
    folder.mkdir(exist_ok=True)
    for name in ("gcc", "g++", "cc", "c++", "clang", "clang++"):
        (folder / name).write_text(
            "#!/bin/sh\n" + (f"echo '{says}' >&2\n" if says else "") + "exit 1\n"
        )
        (folder / name).chmod(0o755)
    return folder
