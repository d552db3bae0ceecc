"""MM-Vet converter with upstream's flags; the work is done by ``llava.eval.convert.mmvet_main``."""

from llava.eval.convert import mmvet_main
from llava.utils import cli_main

if __name__ == "__main__":
    raise SystemExit(cli_main(mmvet_main))
