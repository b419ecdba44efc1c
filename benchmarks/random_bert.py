"""A randomly initialised BERT encoder in both formats, and synthetic texts, for speed runs.

  python benchmarks/random_bert.py --dst DIR [--layers 6 --hidden 384 --heads 12 \
      --intermediate 1536] [--texts 10000]

Writes DIR/hf (transformers' BertModel: config.json, model.safetensors, the bundled
bert-base-uncased vocab and tokenizer files), DIR/bundle (the same weights converted by
`bert_jax.convert --from hf`) and, with --texts N, DIR/texts.txt: N sentences of 5 to 40
whole words drawn from the vocab (seeded). The default shape is all-MiniLM-L6-v2's; speed
does not depend on the weights, so a GPU machine that cannot download the real model (90 MB)
measures embedding speed on this one. Needs torch and transformers,
not TensorFlow.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VOCAB = os.path.join(ROOT, "bert_jax", "assets", "bert-base-uncased-vocab.txt")


def synthetic_texts(num: int, seed: int = 0) -> list[str]:
  with open(VOCAB, encoding="utf-8") as f:
    words = [w.strip() for w in f if w.strip().isalpha() and w.strip().isascii()]
  rng = np.random.default_rng(seed)
  texts = []
  for n in rng.integers(5, 41, num):
    text = " ".join(rng.choice(words, n))
    texts.append(text[0].upper() + text[1:] + ".")
  return texts


def save_tokenizer(hf_dir: str) -> None:
  """vocab.txt (bert_jax.convert reads it) and transformers' tokenizer files built from it.

  The tokenizer is loaded from the directory, not built with `BertTokenizerFast(vocab_file=)`:
  transformers 5 ignores that keyword and saves a tokenizer with an empty vocabulary, which
  maps every word to [UNK], and an embedding comparison against such a tokenizer differs by
  as much as the embeddings themselves.
  """
  import transformers  # pylint: disable=g-import-not-at-top
  shutil.copyfile(VOCAB, os.path.join(hf_dir, "vocab.txt"))
  with open(os.path.join(hf_dir, "tokenizer_config.json"), "w", encoding="utf-8") as f:
    json.dump({"tokenizer_class": "BertTokenizer", "do_lower_case": True}, f)
  tok = transformers.AutoTokenizer.from_pretrained(hf_dir)
  ids = tok("Hello world")["input_ids"]
  if ids != [101, 7592, 2088, 102]:
    sys.exit(f"transformers {transformers.__version__} tokenized 'Hello world' as {ids}, "
             "not [101, 7592, 2088, 102]: the tokenizer did not read vocab.txt")
  tok.save_pretrained(hf_dir)


def main(argv=None) -> int:
  p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  p.add_argument("--dst", required=True)
  p.add_argument("--layers", type=int, default=6)
  p.add_argument("--hidden", type=int, default=384)
  p.add_argument("--heads", type=int, default=12)
  p.add_argument("--intermediate", type=int, default=1536)
  p.add_argument("--texts", type=int, default=0, help="also write this many synthetic texts")
  args = p.parse_args(argv)
  if os.path.exists(os.path.join(args.dst, "hf")) or os.path.exists(os.path.join(args.dst, "bundle")):
    sys.exit(f"{args.dst} already holds hf/ or bundle/; give a new --dst")
  os.environ.setdefault("USE_TF", "0")
  import torch  # pylint: disable=g-import-not-at-top
  import transformers  # pylint: disable=g-import-not-at-top
  hf_dir, bundle_dir = os.path.join(args.dst, "hf"), os.path.join(args.dst, "bundle")
  torch.manual_seed(0)
  cfg = transformers.BertConfig(vocab_size=30522, hidden_size=args.hidden,
                                num_hidden_layers=args.layers, num_attention_heads=args.heads,
                                intermediate_size=args.intermediate)
  transformers.BertModel(cfg).save_pretrained(hf_dir, safe_serialization=True)
  save_tokenizer(hf_dir)
  subprocess.run([sys.executable, "-m", "bert_jax.convert", "--from", "hf", "--src", hf_dir,
                  "--dst", bundle_dir, "--uncased"], check=True,
                 env=dict(os.environ, PYTHONPATH=os.pathsep.join(
                     [ROOT] + [x for x in os.environ.get("PYTHONPATH", "").split(os.pathsep) if x])))
  if args.texts:
    with open(os.path.join(args.dst, "texts.txt"), "w", encoding="utf-8") as f:
      f.write("\n".join(synthetic_texts(args.texts)) + "\n")
  print(f"wrote {hf_dir} and {bundle_dir}")
  return 0


if __name__ == "__main__":
  sys.exit(main())
