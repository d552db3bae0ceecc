"""MM-Vet converter with upstream's flags; the work is done by ``llava.eval.convert.mmvet_main``."""

from llava.eval.convert import mmvet_main

if __name__ == "__main__":
    mmvet_main()
