"""The task functions lmms-eval calls for the local test task (``llava_local_check.yaml``)."""

from __future__ import annotations

from PIL import Image


def doc_to_visual(doc: dict) -> list[Image.Image]:
    return [Image.open(doc["image"]).convert("RGB")]


def doc_to_text(doc: dict, lmms_eval_specific_kwargs: dict | None = None) -> str:
    return doc["question"] + "\nAnswer the question using a single word or phrase."


def process_results(doc: dict, results: list[str]) -> dict[str, float]:
    answer = results[0].strip().lower().rstrip(".")
    return {"exact_match": float(answer == doc["answer"].lower())}


def doc_to_visual_video(doc: dict) -> list[str]:
    """A video task's visual: the video file's path (lmms-eval's video models decode it themselves)."""
    return [doc["video"]]
