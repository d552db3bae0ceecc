"""The example images and questions shown under the demo page's image box (clickable, as upstream's page).

Two small synthetic scenes drawn by the quickstart's scene generator ship in ``llava/serve/examples/``
(``examples.json`` lists ``{"image", "question"}``), so the page has something to try without an upload.
"""

from __future__ import annotations

import json
from pathlib import Path

EXAMPLES_DIR = Path(__file__).with_name("examples")


def demo_examples() -> list[list[str]]:
    """``[[image path, question], ...]`` for ``gr.Examples(inputs=[imagebox, textbox])``; files that are
    missing (a trimmed install) are left out."""
    listing = EXAMPLES_DIR / "examples.json"
    if not listing.is_file():
        return []
    entries = json.loads(listing.read_text(encoding="utf-8"))
    return [[str(EXAMPLES_DIR / entry["image"]), entry["question"]] for entry in entries if (EXAMPLES_DIR / entry["image"]).is_file()]


__all__ = ["EXAMPLES_DIR", "demo_examples"]
