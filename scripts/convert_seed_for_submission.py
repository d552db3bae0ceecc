"""SEED-Bench converter with upstream's flags; the work is done by ``llava.eval.convert.seed_main``."""

from llava.eval.convert import seed_main

if __name__ == "__main__":
    seed_main()
