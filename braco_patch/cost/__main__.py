"""``python -m braco_patch.cost`` = ``braco cost``."""

from .cli import main

if __name__ == "__main__":
    main()
