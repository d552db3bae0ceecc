"""The demo page's clickable examples (issue 14): two small images of our own with questions, shipped with
the package and shown as gradio examples that fill the image box and the question."""

from __future__ import annotations

from pathlib import Path

from PIL import Image

from llava.serve.chat_ui import UiOptions, build_demo
from llava.serve.demo_examples import EXAMPLES_DIR, demo_examples
from llava.serve.images import open_image_file

REPO = Path(__file__).resolve().parents[3]


class _NoModels:
    def list_models(self) -> list[str]:
        return []


def test_examples_are_small_readable_images_with_questions() -> None:
    examples = demo_examples()
    assert len(examples) == 2
    for path, question in examples:
        assert Path(path).parent == EXAMPLES_DIR and Path(path).stat().st_size < 16 * 1024
        image = open_image_file(path)  # passes the upload checks the page applies
        assert image.mode == "RGB" and min(image.size) >= 64
        assert question.endswith("?") or question.endswith(".")
    # the scenes are not blank: several colours
    colours = Image.open(examples[1][0]).convert("RGB").getcolors(maxcolors=1 << 16)
    assert len(colours) >= 4


def test_page_shows_them_as_examples_bound_to_image_and_question() -> None:
    demo = build_demo(_NoModels(), UiOptions(), ["m"])
    datasets = [c for c in demo.config["components"] if c.get("type") == "dataset"]
    [dataset] = [c for c in datasets if c["props"].get("elem_id") == "examples"]
    samples = dataset["props"]["samples"]
    assert [sample[0]["orig_name"] for sample in samples] == [Path(p).name for p, _ in demo_examples()]
    assert [sample[1] for sample in samples] == [q for _, q in demo_examples()]
    ids = {c["id"]: c["props"].get("elem_id") for c in demo.config["components"]}
    assert [ids[i] for i in dataset["props"]["component_ids"]] == ["imagebox", "textbox"]


def test_examples_ship_as_package_data() -> None:
    setup = (REPO / "setup.py").read_text()
    assert '"llava.serve": ["examples/*.png"' in setup and '"examples/*.json"' in setup
