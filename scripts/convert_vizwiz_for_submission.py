"""VizWiz converter with upstream's flags; the work is done by ``llava.eval.convert.vizwiz_main``."""

from llava.eval.convert import vizwiz_main

if __name__ == "__main__":
    vizwiz_main()
