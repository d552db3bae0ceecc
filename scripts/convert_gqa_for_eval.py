"""GQA converter with upstream's flags; the work is done by ``llava.eval.convert.gqa_main``."""

from llava.eval.convert import gqa_main
from llava.utils import cli_main

if __name__ == "__main__":
    raise SystemExit(cli_main(gqa_main))
