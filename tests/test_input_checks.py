"""Bad input is one line naming the file, the line and what to do, before any long work."""
import os
import subprocess
import sys

import pytest

from bert_jax.configuration import sections as config_sections
from bert_jax.data.tokenizers import wordpiece
from bert_jax.tasks.glue import data as glue
from bert_jax.tasks.ner import data as ner
from tests.fixtures import tiny_encoder
from tests.fixtures.repo import ROOT
from tests.fixtures.repo import load_config

_VOCAB = ROOT / "bert_jax" / "assets" / "bert-base-uncased-vocab.txt"


def test_a_vocab_that_starts_with_a_byte_order_mark_is_named_as_such(tmp_path):
  vocab = tmp_path / "vocab.txt"
  vocab.write_bytes(b"\xef\xbb\xbf" + _VOCAB.read_bytes())
  with pytest.raises(ValueError, match=r"vocab.txt' starts with a UTF-8 byte-order mark, which "
                                       r"would be part of its first token \(line 1\)"):
    wordpiece.read_vocab(str(vocab))
  assert len(wordpiece.read_vocab(str(_VOCAB))) == 30522


@pytest.mark.parametrize("bom", [b"", b"\xef\xbb\xbf"])
def test_a_latin1_byte_in_a_glue_file_names_the_file_line_and_column(tmp_path, bom):
  """The bad byte itself, on its line, at the column an editor shows: the same whether the file
  starts with a byte-order mark (as GLUE's MRPC train file does) or not."""
  (tmp_path / "MRPC").mkdir()
  rows = ["Quality\t#1 ID\t#2 ID\t#1 String\t#2 String", "1\t1\t2\ta cafe\tanother",
          "0\t3\t4\tthe caf\xe9\tanother"]
  (tmp_path / "MRPC" / "train.tsv").write_bytes(bom + "\n".join(rows).encode("latin-1"))
  with pytest.raises(ValueError, match=r"MRPC/train.tsv:3: byte 0xe9 at column 14 is not UTF-8 "
                                       r"\(GLUE files are read as UTF-8"):
    glue.read_tsv(glue.get_task("mrpc"), str(tmp_path), "train")
  # Characters before it that take several bytes count once each; on line 1, the mark not at all.
  (tmp_path / "MRPC" / "train.tsv").write_bytes(
      bom + "Quality\u00e9\u20ac".encode("utf-8") + b"\xe9\n")
  with pytest.raises(ValueError, match=r"MRPC/train.tsv:1: byte 0xe9 at column 10 is not UTF-8"):
    glue.read_tsv(glue.get_task("mrpc"), str(tmp_path), "train")


def test_conll_lines_are_the_files_lines_and_a_folder_is_named(tmp_path):
  path = tmp_path / "train.txt"
  path.write_text("EU B-ORG\nrejects\u2028it O\n\nPeter B-PER\n", encoding="utf-8")
  # U+2028 (which str.splitlines ends a line at) is the file's line 2, not a line 3.
  with pytest.raises(ValueError, match=r"train.txt:2: 3 columns, but the file's first word line "
                                       r"has 2"):
    ner.read_conll(str(path))
  (tmp_path / "folder.txt").mkdir()
  with pytest.raises(ValueError, match=r"CoNLL file .*folder.txt is a directory, not a file"):
    ner.read_conll(str(tmp_path / "folder.txt"))


@pytest.mark.parametrize("name, arg, key", [("glue", "task=mrpc", "num_epochs"),
                                            ("glue", "task=mrpc", "layerwise_lr_decay"),
                                            ("pretrain", "tiny", "optimizer.b1")])
def test_a_number_that_is_not_finite_is_refused_naming_the_key(name, arg, key):
  config = load_config(name, arg)
  for value in (float("nan"), float("inf")):
    config.update_from_flattened_dict({key: value})
    with pytest.raises(ValueError, match=rf"bad config: {key} must be a finite number, got "
                                         rf"{value}"):
      config_sections.check_minimums(config, config_sections.MINIMUMS)


def _run(args, **kw):
  env = dict(os.environ, PYTHONPATH=str(ROOT))
  return subprocess.run([sys.executable, "-m"] + args, cwd=ROOT, env=env, capture_output=True,
                        text=True, timeout=300, **kw)


@pytest.mark.parametrize("program", ["pretrain", "embed", "fill_mask", "convert"])
def test_a_platform_jax_cannot_use_is_one_line(tmp_path, program):
  """The training programs and the tools that read a model say it the same way."""
  model = tiny_encoder.save_random_bundle(tmp_path / "bundle")
  texts = tmp_path / "texts.txt"
  texts.write_text("the cat sat\n", encoding="utf-8")
  args = {
      "pretrain": ["--config", str(ROOT / "configs" / "pretrain.py") + ":tiny", "--workdir",
                   str(tmp_path / "run")],
      "embed": ["--checkpoint", model, "--input", str(texts), "--output",
                str(tmp_path / "x.npy")],
      "fill_mask": ["--checkpoint", model, "the [MASK] sat"],
      "convert": ["--to", "hf", "--src", model, "--dst", str(tmp_path / "hf")],
  }[program]
  env = dict(os.environ, PYTHONPATH=str(ROOT), JAX_PLATFORMS="cuda")
  done = subprocess.run([sys.executable, "-m", f"bert_jax.{program}"] + args, cwd=ROOT, env=env,
                        capture_output=True, text=True, timeout=300)
  assert done.returncode == 1, done.stderr
  assert done.stderr.strip().splitlines()[-1].startswith(
      "bert_jax: JAX_PLATFORMS=cuda: JAX cannot use that platform on this machine")
  assert "Traceback" not in done.stderr


def test_tokenize_into_a_closed_pipe_or_from_a_closed_stdin_ends_without_a_traceback():
  reader = subprocess.Popen([sys.executable, "-m", "bert_jax.tokenize", "--vocab", str(_VOCAB)],
                            cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
  reader.stdin.write(b"hello world\n" * 50000)
  reader.stdin.close()
  assert reader.stdout.readline() == b"7592 2088\n"
  reader.stdout.close()  # `| head -1`
  assert reader.wait(timeout=300) == 141
  assert b"Traceback" not in reader.stderr.read()
  done = _run(["bert_jax.tokenize", "--vocab", str(_VOCAB)], stdin=subprocess.DEVNULL)
  assert done.returncode == 0 and done.stdout == ""
  closed = subprocess.run(f"{sys.executable} -m bert_jax.tokenize --vocab {_VOCAB} <&-",
                          shell=True, cwd=ROOT, capture_output=True, text=True, timeout=300)
  assert closed.returncode == 1
  assert closed.stderr.strip() == ("bert_jax.tokenize: error: standard input is closed: pipe or redirect the texts "
                                   "in, one a line")


@pytest.mark.parametrize("args, line", [
    (["bert_jax.pretrain", "--config", "configs/pretrain.py:tiny", "--bogus=1"],
     "bert_jax.pretrain: Unknown command line flag 'bogus' (usage: python -m bert_jax.pretrain "
     "[flags]; --help lists the flags)"),
    (["bert_jax.finetune", "--config", "configs/glue.py:task=mrpc"],
     "bert_jax.finetune: --config and --workdir are required (--help lists the flags)"),
    (["bert_jax.prepare_data", "--config", "configs/pretrain.py:tiny"],
     "bert_jax.prepare_data: --config and --out are required (--help lists the flags)"),
])
def test_usage_mistakes_exit_2_in_one_line(args, line):
  done = subprocess.run([sys.executable, "-m", *args], cwd=ROOT, capture_output=True, text=True,
                        timeout=300, env=dict(os.environ, PYTHONPATH=str(ROOT)))
  assert (done.returncode, done.stderr.strip().splitlines()) == (2, [line]), done.stderr
