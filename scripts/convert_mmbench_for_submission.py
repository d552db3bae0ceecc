"""MMBench converter with upstream's flags; the work is done by ``llava.eval.convert.mmbench_main``."""

from llava.eval.convert import mmbench_main

if __name__ == "__main__":
    mmbench_main()
