"""Optional: token ids vs BertTokenizerFast on a sample of the real shared text.

Needs the optional real-data folder (tests/conftest.py; skips without it). The full check of
every line is `python benchmarks/tokenizer_parity.py`.
"""
import json

import pytest

from bert_jax.data.tokenizers import tokenizer as tokenizer_lib


def _sample_lines(data_dir):
  lines = []
  for path in sorted((data_dir / "corpus").rglob("*.txt")):
    lines += path.read_text(encoding="utf-8", errors="replace").split("\n")[::200]
  for path in sorted((data_dir / "glue").rglob("dev.tsv")):
    for line in path.read_text(encoding="utf-8", errors="replace").split("\n")[::4]:
      lines += line.split("\t")
  for path in sorted((data_dir / "squad").glob("*.json")):
    article = json.loads(path.read_text(encoding="utf-8"))["data"][0]
    for para in article["paragraphs"]:
      lines.append(para["context"])
      lines += [qa["question"] for qa in para["qas"]]
  return lines


@pytest.mark.parametrize("name", ["bert-base-uncased", "bert-base-cased"])
def test_ids_match_bert_tokenizer_fast_on_real_text(shared_data, name):
  transformers = pytest.importorskip("transformers")
  vocab = str(shared_data / "vocab" / name / "vocab.txt")
  lowercase = name.endswith("-uncased")
  lines = _sample_lines(shared_data)
  assert len(lines) > 3_000
  expected = transformers.BertTokenizerFast(vocab, do_lower_case=lowercase)(
      lines, add_special_tokens=False)["input_ids"]
  got = tokenizer_lib.WordPieceTokenizer(vocab, lowercase=lowercase).tokenize_to_ids(lines)
  bad = [line for line, e, g in zip(lines, expected, got) if e != g]
  assert not bad, bad[:5]
