"""Every ``scripts/v1_5/eval/*.sh`` end to end on a tiny checkpoint: loader → answers → converter → scorer, on each
benchmark's files in upstream's real format (``benchmarks.py``). Where a score follows from the answers by a rule
simple enough to restate, the test recomputes it here from the answers file and the fixture's ground truth."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from . import benchmarks

SCRIPTS = Path(__file__).resolve().parents[3] / "scripts"
CKPT = "tiny"


@pytest.fixture(scope="module")
def checkpoint(tiny_llava_checkpoint) -> Path:
    return tiny_llava_checkpoint("mlp2x_gelu")


def run_script(root: Path, script: str, checkpoint: Path, *args: str) -> subprocess.CompletedProcess:
    env = {key: value for key, value in os.environ.items() if key not in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "CUDA_VISIBLE_DEVICES")}
    env.update(MODEL_PATH=str(checkpoint), CKPT=CKPT, LOADER_ARGS="--device cpu --max_new_tokens 3",
               PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    done = subprocess.run(["bash", f"scripts/v1_5/eval/{script}", *args], cwd=root, env=env, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return done


def lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def score(root: Path, name: str) -> dict[str, Any]:
    return json.loads((root / "playground/data/eval/results" / CKPT / f"{name}.json").read_text())


def recorded(prompt: dict[str, Any]) -> dict[str, Any]:
    """The protocol a score file must record for answers made by common.sh's settings (greedy, 3 new tokens)."""
    return {"prompt": {"conv_mode": "vicuna_v1", **prompt},
            "decoding": {"temperature": 0.0, "top_p": None, "num_beams": 1, "max_new_tokens": 3},
            "method": {"projector_type": None, "projector_settings": {}, "reducer": None}}


@pytest.fixture
def playground(tmp_path: Path, request: pytest.FixtureRequest):
    def make(script: str) -> tuple[Path, dict[str, Any]]:
        return tmp_path, benchmarks.build(tmp_path, script, SCRIPTS)

    return make


def test_mme(playground, checkpoint: Path) -> None:
    root, data = playground("mme.sh")
    run_script(root, "mme.sh", checkpoint)
    answers = lines(root / "playground/data/eval/MME/answers" / f"{CKPT}.jsonl")
    # two answers per image under one id, told apart by their prompt
    assert [(a["question_id"], a["prompt"]) for a in answers] == [(q["question_id"], q["text"]) for q in data["questions"]]
    # MME's rule, restated: "yes"/"no" if exactly that, else whether the first 4 characters hold "yes", then "no"
    def parse(text: str) -> str:
        text = text.lower()
        return text if text in ("yes", "no") else "yes" if "yes" in text[:4] else "no" if "no" in text[:4] else "other"

    by_image: dict[str, list[bool]] = {}
    for answer, (key, truth) in zip(answers, data["truth"].items()):
        by_image.setdefault(key[0], []).append(parse(answer["text"]) == truth.lower())
    tasks = {qid.split("/")[0]: 100 * (sum(hits) / 2 + all(hits)) for qid, hits in by_image.items()}
    result = score(root, "mme")
    assert result["tasks"] == pytest.approx(tasks)
    assert result["score"] == pytest.approx(sum(tasks.values()))
    # the split the comparison states: artwork is a perception task, code_reasoning a cognition one
    assert (result["perception"], result["cognition"]) == pytest.approx((tasks["artwork"], tasks["code_reasoning"]))
    assert result["protocol"] == recorded({})
    tool = root / "playground/data/eval/MME/eval_tool/answers" / CKPT
    assert sorted(p.name for p in tool.glob("*.txt")) == ["artwork.txt", "code_reasoning.txt"]
    assert (tool / "artwork.txt").read_text().splitlines()[0].split("\t")[:3] == [
        "14777.txt", "Does this artwork belong to the type of religious?  Please answer yes or no.", "Yes"]


@pytest.mark.parametrize("script", ["mmbench.sh", "mmbench_cn.sh"])
def test_mmbench(playground, checkpoint: Path, script: str) -> None:
    import pandas as pd

    root, data = playground(script)
    run_script(root, script, checkpoint)
    folder = root / "playground/data/eval" / data["folder"]
    answers = lines(folder / "answers" / data["split"] / f"{CKPT}.jsonl")
    assert [a["question_id"] for a in answers] == [row[0] for row in data["rows"]]
    assert answers[1]["options"] == ["yes", "no"] and answers[1]["prompt"].startswith("Look closely.\n")
    upload = pd.read_excel(folder / "answers_upload" / data["split"] / f"{CKPT}.xlsx")
    assert list(upload.columns[:7]) == ["index", "question", "A", "B", "C", "D", "prediction"]
    assert list(upload["prediction"].fillna("")) == [a["text"] for a in answers]
    result = score(root, "mmbench_cn" if "cn" in script else "mmbench")
    assert result["questions"] == 3 and result["missing"] == [] and 0 <= result["score"] <= 100
    lang = "cn" if "cn" in script else "en"
    assert result["protocol"] == recorded({"single_pred_prompt": True, "all_rounds": False, "lang": lang})


def test_seed(playground, checkpoint: Path) -> None:
    root, data = playground("seed.sh")
    run_script(root, "seed.sh", checkpoint)
    folder = root / "playground/data/eval/seed_bench"
    merged = lines(folder / "answers" / CKPT / "merge.jsonl")
    assert merged == lines(folder / "answers" / CKPT / "1_0.jsonl")
    upload = lines(folder / "answers_upload" / f"{CKPT}.jsonl")
    assert upload == [{"question_id": q["question_id"], "prediction": a["text"]} for q, a in zip(data["annotation"]["questions"], merged)]
    right = {q["data_type"]: 100.0 * (a["text"] == q["answer"]) for q, a in zip(data["annotation"]["questions"], merged)}
    assert score(root, "seed")["score"] == right["image"] and score(root, "seed")["video"] == right["video"]


def test_gqa(playground, checkpoint: Path) -> None:
    root, data = playground("gqa.sh")
    run_script(root, "gqa.sh", checkpoint)
    folder = root / "playground/data/eval/gqa"
    merged = lines(folder / "answers/llava_gqa_testdev_balanced" / CKPT / "merge.jsonl")
    predictions = json.loads((folder / "data/testdev_balanced_predictions.json").read_text())
    assert predictions == [{"questionId": a["question_id"], "prediction": a["text"].rstrip(".").lower()} for a in merged]
    hits = [p["prediction"] == data["truth"][p["questionId"]][0] for p in predictions]
    assert score(root, "gqa")["score"] == pytest.approx(100 * sum(hits) / 3)
    # merge.jsonl gets the chunks' common record, which the scorer copies into gqa.json
    chunk = json.loads((folder / "answers/llava_gqa_testdev_balanced" / CKPT / "1_0.jsonl.meta.json").read_text())["producer"]
    merged = json.loads((folder / "answers/llava_gqa_testdev_balanced" / CKPT / "merge.jsonl.meta.json").read_text())["producer"]
    assert merged == {**chunk, "questions": [chunk["questions"]]}
    assert score(root, "gqa")["protocol"] == recorded({})


def test_pope(playground, checkpoint: Path) -> None:
    root, data = playground("pope.sh")
    run_script(root, "pope.sh", checkpoint)
    answers = lines(root / "playground/data/eval/pope/answers" / f"{CKPT}.jsonl")
    assert [a["question_id"] for a in answers] == [q["question_id"] for q in data["questions"]]

    def parse(text: str) -> str:  # upstream: the first sentence, commas dropped, a negative word makes it "no"
        return "no" if {"No", "no", "not"} & set(text.split(".")[0].replace(",", "").split(" ")) else "yes"

    f1 = []
    for split, labels in data["labels"].items():
        predicted = [parse(a["text"]) for a, q in zip(answers, data["questions"]) if q["category"] == split]
        tp = sum(p == l == "yes" for p, l in zip(predicted, labels))
        fp = sum(p == "yes" and l == "no" for p, l in zip(predicted, labels))
        fn = sum(p == "no" and l == "yes" for p, l in zip(predicted, labels))
        precision, recall = (tp / (tp + fp) if tp + fp else 0.0), (tp / (tp + fn) if tp + fn else 0.0)
        f1.append(2 * precision * recall / (precision + recall) if precision + recall else 0.0)
    result = score(root, "pope")
    assert result["score"] == pytest.approx(100 * sum(f1) / 3) and result["missing"] == []


def test_textvqa(playground, checkpoint: Path) -> None:
    root, data = playground("textvqa.sh")
    run_script(root, "textvqa.sh", checkpoint)
    answers = lines(root / "playground/data/eval/textvqa/answers" / f"{CKPT}.jsonl")
    # two questions of one image, one id: both answered once
    assert [a["question_id"] for a in answers] == ["003a8ae2ef43b901", "003a8ae2ef43b901", "b9dc400eb20bad64"]
    result = score(root, "textvqa")
    assert result["samples"] == 3 and result["missing"] == 0 and 0 <= result["score"] <= 100


def test_vizwiz(playground, checkpoint: Path) -> None:
    root, data = playground("vizwiz.sh")
    run_script(root, "vizwiz.sh", checkpoint)
    upload = json.loads((root / "playground/data/eval/vizwiz/answers_upload" / f"{CKPT}.json").read_text())
    assert [entry["image"] for entry in upload] == [q["image"] for q in data["questions"]]
    assert all(isinstance(entry["answer"], str) and entry["answer"] == entry["answer"].lower() for entry in upload)


def test_vqav2(playground, checkpoint: Path) -> None:
    root, data = playground("vqav2.sh")
    run_script(root, "vqav2.sh", checkpoint)
    upload = json.loads((root / "playground/data/eval/vqav2/answers_upload/llava_vqav2_mscoco_test-dev2015" / f"{CKPT}.json").read_text())
    assert [entry["question_id"] for entry in upload] == [q["question_id"] for q in data["full"]]
    assert upload[-1]["answer"] == ""  # not in test-dev: submitted empty, as upstream


def test_sqa(playground, checkpoint: Path) -> None:
    root, data = playground("sqa.sh")
    run_script(root, "sqa.sh", checkpoint)
    folder = root / "playground/data/eval/scienceqa/answers"
    answers = {a["question_id"]: a for a in lines(folder / f"{CKPT}.jsonl")}
    assert list(answers) == data["test"] and not answers["4"]["prompt"].startswith("<image>")
    assert answers["5"]["prompt"].startswith("<image>\n")

    def letter(text: str, choices: int) -> int:  # upstream's parse: the letter, "X. ...", or one "The answer is X."
        options = list("ABCDE")[:choices]
        if text in list("ABCDE"):
            found = text
        elif len(text) >= 3 and text[0] in "ABCDE" and text[1:3] == ". ":
            found = text[0]
        else:
            import re
            matches = re.findall(r"The answer is ([A-Z]).", text)
            found = matches[0] if len(matches) == 1 else ""
        return options.index(found) if found and found in options else -1

    right = {pid: letter(answers[pid]["text"], len(p["choices"])) == p["answer"] for pid, p in data["problems"].items() if pid in answers}
    result = score(root, "sqa")
    assert result["score"] == pytest.approx(100 * (right["5"] + right["7"]) / 2)
    assert result["protocol"] == recorded({"single_pred_prompt": True})
    assert result["accuracy"] == pytest.approx(100 * sum(right.values()) / 3)
    assert json.loads((folder / f"{CKPT}_result.json").read_text())["count"] == 3


def test_mmvet(playground, checkpoint: Path) -> None:
    root, data = playground("mmvet.sh")
    done = run_script(root, "mmvet.sh", checkpoint)
    folder = root / "playground/data/eval/mm-vet"
    answers = lines(folder / "answers" / f"{CKPT}.jsonl")
    assert json.loads((folder / "results" / f"{CKPT}.json").read_text()) == {f"v1_{a['question_id']}": a["text"] for a in answers}
    assert "Set OPENAI_API_KEY" in done.stdout  # graded only with a judge key


def test_llavabench(playground, checkpoint: Path) -> None:
    root, data = playground("llavabench.sh")
    done = run_script(root, "llavabench.sh", checkpoint)
    answers = lines(root / "playground/data/eval/llava-bench-in-the-wild/answers" / f"{CKPT}.jsonl")
    assert [a["question_id"] for a in answers] == [0, 1] and "Set OPENAI_API_KEY" in done.stdout


@pytest.mark.parametrize("script", ["qbench.sh", "qbench_zh.sh"])
def test_qbench(playground, checkpoint: Path, script: str) -> None:
    from llava.eval.eval_qbench import chosen_option

    root, data = playground(script)
    run_script(root, script, checkpoint, "dev")
    zh = "zh" in script
    answers = lines(root / "playground/data/eval/qbench/answers" / CKPT / f"llvisionqa_{'zh_' if zh else ''}dev_answers.jsonl")
    assert [a["question_id"] for a in answers] == [0, 1]
    assert ("在下列选项中选择一个" in answers[0]["prompt"]) == zh
    result = score(root, "qbench_zh" if zh else "qbench")
    right = [chosen_option(a["response"], a["candidates"]) == a["candidates"].index(a["correct_ans"]) for a in answers]
    assert result["score"] == round(100 * sum(right) / 2, 2) and result["missing"] == 0
    sidecar = json.loads(Path(str(root / "playground/data/eval/qbench/answers" / CKPT / f"llvisionqa_{'zh_' if zh else ''}dev_answers.jsonl") + ".meta.json").read_text())
    assert sidecar["producer"]["conv_mode"] == "llava_v1" and sidecar["producer"]["temperature"] == 0.0  # upstream's qbench.sh


def test_every_script_has_an_end_to_end_test() -> None:
    covered = set(benchmarks.BUILDERS)
    scripts = {p.name for p in (SCRIPTS / "v1_5" / "eval").glob("*.sh")} - {"common.sh"}
    assert scripts == covered
