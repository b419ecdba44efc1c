r"""Token-id parity of bert_jax's tokenizers with transformers' fast tokenizers.

  python benchmarks/tokenizer_parity.py --data_dir $DATA_DIR [--unicode]
      [--only wordpiece|family] [--backend tf-text|tokenizers]

--data_dir is a folder laid out as benchmarks/README.md's "Data" section describes (GLUE,
SQuAD, CoNLL-2003, BEIR SciFact, WikiText-2 and public-domain books, the vocabularies and the
family's tokenizer files, each from its public source).

WordPiece: every line of the real text in --data_dir goes through
`python -m bert_jax.tokenize` (a subprocess, exactly as a user runs it) and
through BertTokenizerFast (add_special_tokens=False), with the
bert-base-uncased and bert-base-cased vocabs. `--backend tokenizers` runs the
CLI as on a host without TensorFlow (tests/without_tensorflow.py), where
WordPiece runs on `tokenizers` (bert_jax/data/tokenizers/wordpiece_rust.py).

The family: the tokenizer directories in tokenizers/ (roberta-base byte-level
BPE, albert-base-v2 and deberta-v3-base SentencePiece), each loaded by kind
from its files (`tokenizer.tokenizer_from_path`), against RobertaTokenizerFast,
AlbertTokenizerFast and DebertaV2TokenizerFast built from the same local files
(nothing downloads). Three comparisons per source: `ids` (no special tokens),
`single` (`build_inputs(a)` vs the reference with its special tokens) and
`pair` (`build_inputs(a, b)` for each line and the next one: ids and segment
ids vs the reference's input_ids and token_type_ids).

The table gives lines and mismatches per source:

  corpus     every line of corpus/**/*.txt and wikitext-2-raw/wiki.test.raw
  glue       every tab-separated field of every GLUE .tsv line (headers included)
  squad      every context, question and answer text of the SQuAD JSON files
             (split at newlines, as the CLI reads lines)
  ner        every line of the CoNLL files, and every sentence as its words
             joined by spaces
  retrieval  every title, abstract and query of the BEIR .jsonl files

--unicode adds an exhaustive check: every code point (surrogates excluded),
alone and inside a word, with a vocab holding every character and its `##`
form, so that each difference in cleaning, normalisation or splitting shows.
Differences there come from the Unicode versions of the character tables
(the Rust crates behind `tokenizers` vs ICU / RE2 in TensorFlow): characters
assigned or re-categorised in recent Unicode versions.

Expected: 0 mismatches on every source; the last line is
`mismatched lines: 0 of N (100.0000 % identical)`.
"""
import argparse
import glob
import json
import os
import subprocess
import sys
import tempfile
import time

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _corpus_lines(data_dir):
  files = sorted(glob.glob(os.path.join(data_dir, "corpus", "**", "*.txt"), recursive=True))
  files += sorted(glob.glob(os.path.join(data_dir, "corpus", "**", "*.raw"), recursive=True))
  lines = []
  for path in files:
    with open(path, "rb") as f:
      lines += f.read().decode("utf-8", "replace").split("\n")
  return lines, len(files)


def _glue_lines(data_dir):
  files = sorted(glob.glob(os.path.join(data_dir, "glue", "**", "*.tsv"), recursive=True))
  lines = []
  for path in files:
    with open(path, "rb") as f:
      for line in f.read().decode("utf-8", "replace").split("\n"):
        lines += line.split("\t")
  return lines, len(files)


def _squad_lines(data_dir):
  files = sorted(glob.glob(os.path.join(data_dir, "squad", "*.json")))
  texts = []
  for path in files:
    with open(path, encoding="utf-8") as f:
      data = json.load(f)["data"]
    for article in data:
      for para in article["paragraphs"]:
        texts.append(para["context"])
        for qa in para["qas"]:
          texts.append(qa["question"])
          texts += [a["text"] for a in qa.get("answers", [])]
  return [line for t in texts for line in t.split("\n")], len(files)


def _ner_lines(data_dir):
  """Every sentence of the CoNLL files, its words joined by spaces, and every raw line."""
  files = sorted(glob.glob(os.path.join(data_dir, "ner", "**", "*.txt"), recursive=True))
  lines = []
  for path in files:
    with open(path, "rb") as f:
      raw = f.read().decode("utf-8", "replace").split("\n")
    lines += raw
    words = []
    for line in raw + [""]:
      if line.strip() and not line.startswith("-DOCSTART-"):
        words.append(line.split(" ")[0])
      elif words:
        lines.append(" ".join(words))
        words = []
  return lines, len(files)


def _retrieval_lines(data_dir):
  """Every title, text and query of the BEIR .jsonl files (split at newlines)."""
  files = sorted(glob.glob(os.path.join(data_dir, "retrieval", "**", "*.jsonl"), recursive=True))
  texts = []
  for path in files:
    with open(path, encoding="utf-8") as f:
      for line in f:
        record = json.loads(line)
        texts += [record[k] for k in ("title", "text") if record.get(k)]
  return [line for t in texts for line in t.split("\n")], len(files)


def _sources(data_dir):
  return {"corpus": _corpus_lines(data_dir), "glue": _glue_lines(data_dir),
          "squad": _squad_lines(data_dir), "ner": _ner_lines(data_dir),
          "retrieval": _retrieval_lines(data_dir)}


def _cli_ids(lines, vocab, cased, backend):
  """Ids from `python -m bert_jax.tokenize` in a subprocess (for tokenizers: without TensorFlow)."""
  run = (["tests/without_tensorflow.py", "bert_jax.tokenize"] if backend == "tokenizers"
         else ["-m", "bert_jax.tokenize"])
  cmd = [sys.executable, *run, "--vocab", vocab] + (["--cased"] if cased else [])
  env = dict(os.environ, PYTHONPATH=_ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""),
             TF_CPP_MIN_LOG_LEVEL="3", CUDA_VISIBLE_DEVICES="")
  data = ("\n".join(lines) + "\n").encode("utf-8", "surrogatepass")
  out = subprocess.run(cmd, input=data, stdout=subprocess.PIPE, check=True, cwd=_ROOT, env=env)
  rows = out.stdout.decode("utf-8").split("\n")[:-1]
  assert len(rows) == len(lines), (len(rows), len(lines))
  return [[int(x) for x in r.split()] for r in rows]


def _unicode_check(cased, backend):
  """Every code point alone and inside a word, with a vocab of all characters."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  import transformers  # pylint: disable=g-import-not-at-top
  sys.path.insert(0, _ROOT)
  from bert_jax.data.tokenizers import tokenizer as tokenizer_lib  # pylint: disable=g-import-not-at-top
  del tf
  cps = [c for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF]
  bad = []
  with tempfile.TemporaryDirectory() as tmp:
    for start in range(0, len(cps), 65536):
      chunk = cps[start:start + 65536]
      texts = [f"a{chr(c)}b {chr(c)}" for c in chunk]
      base = transformers.BertTokenizerFast(
          vocab_file=os.path.join(os.path.dirname(tokenizer_lib.default_vocab_file()),
                                  "bert-base-uncased-vocab.txt"), do_lower_case=not cased)
      norm = base.backend_tokenizer.normalizer
      chars = set("ab")
      for t in texts:
        chars.update(norm.normalize_str(t))
      chars.update(chr(c) for c in chunk)
      chars = sorted(ch for ch in chars if ch.strip() and ch.isprintable() and ch not in "\r\n")
      vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + chars + ["##" + ch for ch in chars]
      path = os.path.join(tmp, f"v{start}.txt")
      with open(path, "w", encoding="utf-8", newline="\n") as f:
        f.write("\n".join(vocab) + "\n")
      ref = transformers.BertTokenizerFast(vocab_file=path, do_lower_case=not cased)
      expected = ref(texts, add_special_tokens=False)["input_ids"]
      inv = {i: t for t, i in ref.get_vocab().items()}
      ours = tokenizer_lib.WordPieceTokenizer(path, lowercase=not cased, backend=backend)
      got = ours.tokenize_to_ids(texts)
      for c, e, g in zip(chunk, expected, got):
        if [inv[i] for i in e] != ours.convert_ids_to_tokens(g):
          bad.append(c)
  return len(cps), bad


# Directory in tokenizers/ -> the transformers class that is the reference.
_FAMILY = {"roberta-base": "RobertaTokenizerFast", "albert-base-v2": "AlbertTokenizerFast",
           "deberta-v3-base": "DebertaV2TokenizerFast"}


def _reference(name, directory):
  """The transformers fast tokenizer of a family directory, from its local files."""
  import transformers  # pylint: disable=g-import-not-at-top
  cls = getattr(transformers, _FAMILY[name])
  if name.startswith("roberta"):
    return cls(vocab_file=os.path.join(directory, "vocab.json"),
               merges_file=os.path.join(directory, "merges.txt"))
  model = [f for f in os.listdir(directory) if f.endswith(".model")][0]
  return cls(vocab_file=os.path.join(directory, model))


def _family_rows(name, directory, sources):
  """Yields (source, comparison, files, lines, bad indices, ours s, hf s) for one tokenizer."""
  sys.path.insert(0, _ROOT)
  from bert_jax.data.tokenizers import tokenizer as tokenizer_lib  # pylint: disable=g-import-not-at-top
  ref = _reference(name, directory)
  ours = tokenizer_lib.tokenizer_from_path(directory)
  for source, (lines, files) in sources.items():
    t = time.time()
    got = ours.tokenize_to_ids(lines)
    t_ours = time.time() - t
    t = time.time()
    expected = ref(lines, add_special_tokens=False)["input_ids"]
    t_hf = time.time() - t
    yield source, "ids", files, len(lines), _bad(got, expected), t_ours, t_hf
    t = time.time()
    singles = [ours.build_inputs(ids)[0] for ids in got]
    t_ours = time.time() - t
    t = time.time()
    expected = ref(lines)["input_ids"]
    t_hf = time.time() - t
    yield source, "single", files, len(lines), _bad(singles, expected), t_ours, t_hf
    t = time.time()
    pairs = [ours.build_inputs(a, b) for a, b in zip(got, got[1:] + got[:1])]
    t_ours = time.time() - t
    t = time.time()
    ref_pairs = ref(lines, lines[1:] + lines[:1], return_token_type_ids=True)
    t_hf = time.time() - t
    expected = list(zip(ref_pairs["input_ids"], ref_pairs["token_type_ids"]))
    yield source, "pair", files, len(lines), _bad([(i, s) for i, s in pairs], expected), \
        t_ours, t_hf


def _bad(got, expected):
  assert len(got) == len(expected), (len(got), len(expected))
  return [i for i, (a, b) in enumerate(zip(got, expected)) if list(a) != list(b)]


def main():
  p = argparse.ArgumentParser(description=__doc__,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
  p.add_argument("--data_dir", required=True,
                 help="the data folder (benchmarks/README.md, \"Data\")")
  p.add_argument("--unicode", action="store_true", help="also check every code point")
  p.add_argument("--only", choices=["wordpiece", "family"], help="one part of the check")
  p.add_argument("--backend", choices=["tf-text", "tokenizers"], default="tf-text",
                 help="WordPiece's backend (bert_jax.data.tokenizers.wordpiece)")
  args = p.parse_args()
  sources = _sources(args.data_dir)
  total = bad_total = 0
  if args.only != "family":
    t, b = _wordpiece(args, sources)
    total, bad_total = total + t, bad_total + b
  if args.only != "wordpiece":
    print(f"{'tokenizer':<18} {'source':<9} {'compare':<7} {'files':>5} {'lines':>9} "
          f"{'mismatched':>10} {'ours s':>7} {'hf s':>7}")
    for name in _FAMILY:
      directory = os.path.join(args.data_dir, "tokenizers", name)
      for source, what, files, n, bad, t_ours, t_hf in _family_rows(name, directory, sources):
        total += n
        bad_total += len(bad)
        print(f"{name:<18} {source:<9} {what:<7} {files:>5} {n:>9} {len(bad):>10} "
              f"{t_ours:>7.1f} {t_hf:>7.1f}", flush=True)
        for i in bad[:3]:
          print(f"    line {i}: {sources[source][0][i][:100]!r}")
  print(f"mismatched lines: {bad_total} of {total} "
        f"({100.0 * (total - bad_total) / max(total, 1):.4f} % identical)")


def _wordpiece(args, sources):
  """The WordPiece rows (and --unicode); returns (lines, mismatched lines)."""
  import transformers  # pylint: disable=g-import-not-at-top
  total = bad_total = 0
  print(f"{'vocab':<18} {'source':<9} {'files':>5} {'lines':>9} {'mismatched':>10} "
        f"{'cli s':>7} {'hf s':>7}")
  for name in ("bert-base-uncased", "bert-base-cased"):
    vocab = os.path.join(args.data_dir, "vocab", name, "vocab.txt")
    cased = name.endswith("-cased")
    ref = transformers.BertTokenizerFast(vocab, do_lower_case=not cased)
    for source, (lines, files) in sources.items():
      t = time.time()
      ours = _cli_ids(lines, vocab, cased, args.backend)
      t_cli = time.time() - t
      t = time.time()
      expected = ref(lines, add_special_tokens=False)["input_ids"]
      t_hf = time.time() - t
      bad = [i for i, (a, b) in enumerate(zip(ours, expected)) if a != b]
      total += len(lines)
      bad_total += len(bad)
      print(f"{name:<18} {source:<9} {files:>5} {len(lines):>9} {len(bad):>10} {t_cli:>7.1f} "
            f"{t_hf:>7.1f}", flush=True)
      for i in bad[:3]:
        print(f"    {lines[i][:100]!r}\n      ours {ref.convert_ids_to_tokens(ours[i])[:20]}\n"
              f"      hf   {ref.convert_ids_to_tokens(expected[i])[:20]}")
  if args.unicode:
    for cased in (False, True):
      n, bad = _unicode_check(cased, args.backend)
      print(f"unicode {'cased' if cased else 'uncased'}: {len(bad)} of {n} code points differ"
            + (": " + " ".join(f"U+{c:04X}" for c in bad[:40]) + (" ..." if len(bad) > 40
                                                                  else "") if bad else ""))
  return total, bad_total


if __name__ == "__main__":
  main()
