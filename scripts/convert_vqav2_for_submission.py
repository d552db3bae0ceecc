"""VQAv2 converter with upstream's flags; the work is done by ``llava.eval.convert.vqav2_main``."""

from llava.eval.convert import vqav2_main
from llava.utils import cli_main

if __name__ == "__main__":
    raise SystemExit(cli_main(vqav2_main))
