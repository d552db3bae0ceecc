"""Answer a JSONL question file, one video per question (LLaVA-NeXT-style video QA).

Usage (``model_vqa``'s flags, plus the frame sampling)::

    python -m llava.eval.model_vqa_video --model-path checkpoints/llava-onevision-qwen2-0.5b-ov \
        --question-file ./playground/data/eval/video/questions.jsonl \
        --video-folder ./playground/data/eval/video/videos \
        --answers-file ./playground/data/eval/video/answers/ov.jsonl \
        --conv-mode qwen_1_5 --temperature 0 --frames-upbound 16 [--force-sample] [--batch-size 4] [--skip-missing]

Question line: ``{"question_id", "video" (relative to --video-folder), "text", ...}`` (a line that also names an
``"image"`` is refused before the model loads, as training refuses it). The video is decoded with
PyAV (the ``video`` extra) and its frames sampled by LLaVA-NeXT's rule (:func:`llava.video.sample_frame_indices`:
one frame per second, at most ``--frames-upbound``; ``--force-sample`` always takes ``--frames-upbound`` evenly
spread frames); the prompt carries one ``<image>`` marker for the whole video, as NeXT trains it. The answer
lines are ``model_vqa``'s (``question_id, prompt, text, answer_id, model_id, metadata``; ``prompt`` is the question
text). Chunking, batching, resuming, ``--skip-missing`` (missing or undecodable videos) and the answers file are
:mod:`llava.eval.core`'s.
"""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass
from typing import Any, ClassVar, Sequence

from llava.constants import IMAGE_TOKEN_INDEX
from llava.eval.core import EvalItem, LoaderSpec, RunResult, args_with_defaults, get_chunk, run_loader, run_parsed, split_list
from llava.eval.files import QUESTION_ID
from llava.utils import UserError, cli_main
from llava.video import SampledVideo, VideoPlan, check_frame_flags, import_av, probe_video

#: Default of ``--frames-upbound`` (NeXT's video demo uses 4 to 32; lmms-eval's ``llava_onevision`` 32).
DEFAULT_FRAMES = 16


@dataclass(frozen=True)
class VideoRef:
    """A question's video file and how to sample it (the core calls ``exists``, ``describe`` and ``load``)."""

    path: str
    frames_upbound: int = DEFAULT_FRAMES
    force_sample: bool = False
    video_fps: float = 1.0
    #: What the core's messages call it ("video file ... does not exist").
    kind: str = "video"
    #: :meth:`load_for` tokenizes the prompt, so the core does not load videos in its prefetch thread.
    reads_model: ClassVar[bool] = True

    def describe(self) -> str:
        return repr(self.path)

    def exists(self) -> bool:
        return os.path.isfile(self.path)

    def probe(self) -> VideoPlan:
        """The video checked from its header, with the frames the rule takes (nothing decoded).

        Raises:
            ValueError: If the file is missing, not a video, or its frames are over the pixel bound.
        """
        return probe_video(self.path, frames_upbound=self.frames_upbound, force_sample=self.force_sample, video_fps=self.video_fps)

    def load(self) -> SampledVideo:
        """The sampled frames.

        Raises:
            ValueError: If the file is missing or cannot be decoded (the core skips or stops, naming the question).
        """
        return self.probe().decode()

    def load_for(self, generator: Any, question: str) -> SampledVideo:
        """The sampled frames, decoded only once the question's prompt is known to fit the model with them.

        Raises:
            PromptTooLong: Naming the length, the limit and the ``--frames-upbound`` that fits (the core names the
                question and stops: it is a setting to change, not a video to skip).
            ValueError: As :meth:`load`.
        """
        from llava.mm_utils import tokenizer_image_token
        from llava.model.context_length import check_video_prompt, text_token_count

        plan = self.probe()
        ids = tokenizer_image_token(generator.build_prompt(question, 1), generator.tokenizer, IMAGE_TOKEN_INDEX, return_tensors="pt")
        check_video_prompt(generator.model, text_token_count(ids), plan.frame_count)
        return plan.decode()


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--video-folder", "--video_folder", dest="video_folder", type=str, default="",
                        help="folder the questions' 'video' paths are relative to")
    parser.add_argument("--frames-upbound", "--frames_upbound", "--for_get_frames_num", dest="frames_upbound", type=int,
                        default=DEFAULT_FRAMES, help="at most this many frames per video, evenly spread (0: one per second, no cap)")
    parser.add_argument("--force-sample", "--force_sample", dest="force_sample", action="store_true",
                        help="always take --frames-upbound evenly spread frames (NeXT's force_sample)")
    parser.add_argument("--video-fps", "--video_fps", dest="video_fps", type=float, default=1.0,
                        help="frames per second kept before the --frames-upbound cap (NeXT's video_fps)")


#: The fields of a question line, checked (with the core's rule of one image or one video) before the model loads.
FIELDS = {"question_id": QUESTION_ID, "video": object, "text": str}


def build_items(record: dict[str, Any], args: argparse.Namespace) -> list[EvalItem]:
    """One item: the question text with its one video (the record's :data:`FIELDS` are already checked)."""
    if not isinstance(record["video"], str) or not record["video"]:
        raise UserError(
            f"question {record['question_id']!r}: 'video' must be one video file's path (relative to --video-folder), "
            f"got {record['video']!r}"
        )
    video = VideoRef(
        os.path.join(args.video_folder, record["video"]), frames_upbound=args.frames_upbound,
        force_sample=args.force_sample, video_fps=args.video_fps,
    )
    return [EvalItem(record["question_id"], record["text"], record["text"], (video,))]  # type: ignore[arg-type]


def check_arguments(args: argparse.Namespace) -> None:
    """The frame flags (:func:`llava.video.check_frame_flags`) and the decoder, before any question or model is read.

    Raises:
        UserError: For a ``--frames-upbound`` out of range, ``--force-sample`` without a positive one, a
            ``--video-fps`` that is not a finite number in range, or PyAV missing.
    """
    check_frame_flags(args.frames_upbound, args.force_sample, args.video_fps)
    import_av()


SPEC = LoaderSpec(
    name="model_vqa_video", description=__doc__.split("\n\n")[0], build_items=build_items, fields=FIELDS, max_new_tokens=1024,
    add_arguments=add_arguments,
)


def main(argv: Sequence[str] | None = None, **kwargs: Any) -> RunResult:
    from llava.eval.core import build_parser

    args = build_parser(SPEC).parse_args(argv)
    check_arguments(args)
    return run_parsed(SPEC, args, **kwargs)


def eval_model(args: Any) -> RunResult:
    """Run on an args object (a Namespace, or any object with the flags' attribute names); attributes it lacks take
    the command line's defaults."""
    completed = args_with_defaults(SPEC, args)
    check_arguments(completed)
    return run_parsed(SPEC, completed)


__all__ = ["SPEC", "VideoRef", "eval_model", "get_chunk", "main", "run_loader", "split_list"]


if __name__ == "__main__":
    raise SystemExit(cli_main(main))
