from llava.utils import cli_main

from .run import main

raise SystemExit(cli_main(main))
