"""VizWiz converter with upstream's flags; the work is done by ``llava.eval.convert.vizwiz_main``."""

from llava.eval.convert import vizwiz_main
from llava.utils import cli_main

if __name__ == "__main__":
    raise SystemExit(cli_main(vizwiz_main))
