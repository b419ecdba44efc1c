r"""DeBERTa-v2/v3 parity on real text: a random transformers DebertaV2ForMaskedLM (PyTorch;
transformers has no Flax DeBERTa) with the real deberta-v3-base SentencePiece model, via
`python -m bert_jax.convert --from hf` and `python -m bert_jax.embed`, vs transformers.

  python benchmarks/deberta_parity.py [--data_dir ../shared/data] [--type_vocab_size 0]

The model: DeBERTa-v3's attention (relative_attention, share_att_key, pos_att_type p2c|c2p,
norm_rel_ebd layer_norm, no absolute positions when type_vocab_size is 0), 2 layers, hidden 64,
vocab 128,001 (the tokenizer's), 64 position buckets up to 512 (so distances beyond 32 take
log buckets within the 128-token inputs; deberta-v3-base's 256 buckets are linear up to 128),
every tensor perturbed. Saved with save_pretrained (safetensors) beside spm.model.

Texts: the 408 sentence pairs of GLUE MRPC dev ([CLS] A [SEP] B [SEP], segments 0 / 1) and
the first --num_lines non-empty lines of WikiText-2 raw test, max_length 128 (longest-first
truncation for pairs, as DebertaV2TokenizerFast's). Compared, max abs diff over all of them:

  ids        bert_jax's ids and segment ids vs DebertaV2TokenizerFast (mismatched rows)
  hidden_i   every position of hidden state i (embeddings, layers) of batches padded to 128,
             bert_jax.model vs transformers fed the same arrays
  mlm        MLM logits at 15% of the real positions (set to [MASK])
  embed_*    `python -m bert_jax.embed --pooling cls|mean --layers 0,1,2 --combine concat`
             (a subprocess on the converted bundle) vs the same poolings of transformers'
             hidden states

Expected: every diff <= 1e-4 and 0 mismatched rows; the last line is a JSON summary.
Runtime: a few minutes on 2 loaded CPUs.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def read_texts(data_dir: str, num_lines: int) -> dict:
  """{'mrpc_pairs': [(a, b)], 'wikitext': [str]} from the shared data folder."""
  pairs = []
  with open(os.path.join(data_dir, "glue", "MRPC", "dev.tsv"), encoding="utf-8-sig") as f:
    header = f.readline().rstrip("\n").split("\t")
    a, b = header.index("#1 String"), header.index("#2 String")
    for line in f:
      fields = line.rstrip("\n").split("\t")
      pairs.append((fields[a], fields[b]))
  lines = []
  with open(os.path.join(data_dir, "corpus", "wikitext-2-raw", "wiki.test.raw"),
            encoding="utf-8") as f:
    for line in f:
      if line.strip() and "\t" not in line:
        lines.append(line.rstrip("\n"))
      if len(lines) == num_lines:
        break
  return {"mrpc_pairs": pairs, "wikitext": lines}


def build_reference(spm_model: str, type_vocab_size: int, src: str):
  """The random DebertaV2ForMaskedLM saved in `src` with the tokenizer; (model, fast)."""
  import torch  # pylint: disable=g-import-not-at-top
  import transformers  # pylint: disable=g-import-not-at-top
  fast = transformers.DebertaV2TokenizerFast(vocab_file=spm_model)
  config = transformers.DebertaV2Config(
      vocab_size=len(fast), hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
      intermediate_size=128, max_position_embeddings=512, type_vocab_size=type_vocab_size,
      relative_attention=True, position_buckets=64, max_relative_positions=-1,
      pos_att_type="p2c|c2p", share_att_key=True, norm_rel_ebd="layer_norm",
      position_biased_input=type_vocab_size > 0, layer_norm_eps=1e-7)
  torch.manual_seed(0)
  model = transformers.DebertaV2ForMaskedLM(config).eval()
  with torch.no_grad():
    for p in model.parameters():
      p.add_(torch.randn_like(p) * 0.05)
  model.save_pretrained(src, safe_serialization=True)
  shutil.copy(spm_model, src)
  return model, fast


def _pad(rows, segs, pad_id, length):
  """Rows padded to `length` (one compilation for every batch)."""
  n = len(rows)
  ids = np.full((n, length), pad_id, np.int32)
  seg, mask = np.zeros_like(ids), np.zeros_like(ids)
  for i, (r, s) in enumerate(zip(rows, segs)):
    ids[i, :len(r)], seg[i, :len(r)], mask[i, :len(r)] = r, s, 1
  return ids, seg, mask


def main() -> int:
  p = argparse.ArgumentParser(description=__doc__,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
  p.add_argument("--data_dir", default=os.path.join(ROOT, "..", "shared", "data"))
  p.add_argument("--num_lines", type=int, default=400)
  p.add_argument("--type_vocab_size", type=int, default=0)
  p.add_argument("--max_length", type=int, default=128)
  p.add_argument("--batch_size", type=int, default=32)
  p.add_argument("--workdir", default="")
  args = p.parse_args()
  import jax  # pylint: disable=g-import-not-at-top
  import torch  # pylint: disable=g-import-not-at-top
  from bert_jax import checkpoint as ckpt_lib  # pylint: disable=g-import-not-at-top
  from bert_jax import embed  # pylint: disable=g-import-not-at-top
  from bert_jax import model as model_lib  # pylint: disable=g-import-not-at-top
  from bert_jax.data import tokenizer as tokenizer_lib  # pylint: disable=g-import-not-at-top

  spm_model = os.path.join(args.data_dir, "tokenizers", "deberta-v3-base", "spm.model")
  if not os.path.isfile(spm_model):
    sys.exit(f"no {spm_model}: --data_dir must be the shared data folder")
  work = args.workdir or tempfile.mkdtemp(prefix="deberta_parity_")
  src, dst = os.path.join(work, "hf"), os.path.join(work, "bundle")
  model, fast = build_reference(spm_model, args.type_vocab_size, src)
  env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
  subprocess.run([sys.executable, "-m", "bert_jax.convert", "--from", "hf", "--src", src,
                  "--dst", dst, "--overwrite"], check=True, env=env)
  pretrained = ckpt_lib.load_pretrained(dst)
  config, params = pretrained.config, pretrained.params
  tok = tokenizer_lib.for_checkpoint(pretrained)
  bert_fn = jax.jit(lambda p, i, m, s: model_lib.BertModel(config, add_pooler=False).apply(
      {"params": p}, i, m, s, output_hidden_states=True)["hidden_states"])
  mlm_fn = jax.jit(lambda p, i, m, s, pos: model_lib.BertForPreTraining(
      config, with_nsp=False).apply({"params": p}, i, m, s, pos)["mlm_logits"])
  diffs, counts = {}, {}
  rng = np.random.default_rng(0)

  def note(key, ours, theirs):
    d = float(np.max(np.abs(np.asarray(ours, np.float32) - np.asarray(theirs, np.float32))))
    diffs[key] = max(diffs.get(key, 0.0), d)

  for name, texts in read_texts(args.data_dir, args.num_lines).items():
    pairs = isinstance(texts[0], tuple)
    ids, segs, truncated = embed.encode(tok, texts, args.max_length)
    if pairs:
      ref = fast([a for a, _ in texts], [b for _, b in texts], truncation="longest_first",
                 max_length=args.max_length, return_token_type_ids=True)
    else:
      ref = fast(texts, truncation=True, max_length=args.max_length, return_token_type_ids=True)
    counts[f"{name}_rows"], counts[f"{name}_truncated"] = len(texts), truncated
    counts[f"{name}_id_mismatches"] = sum(
        (list(a), list(s)) != (list(b), list(t))
        for a, s, b, t in zip(ids, segs, ref["input_ids"], ref["token_type_ids"]))
    hidden_all = []  # transformers' hidden states per batch, for the pooled embeddings
    for start in range(0, len(ids), args.batch_size):
      i, s, m = _pad(ids[start:start + args.batch_size], segs[start:start + args.batch_size],
                     tok.pad_id, args.max_length)
      with torch.no_grad():
        out = model(torch.tensor(i, dtype=torch.long), attention_mask=torch.tensor(m),
                    token_type_ids=torch.tensor(s, dtype=torch.long), output_hidden_states=True)
      ours = bert_fn(params["bert"], i, m, s)
      for k, (a, b) in enumerate(zip(ours, out.hidden_states)):
        note(f"hidden_{k}", a, b.numpy())
      hidden_all.append((m, [h.numpy() for h in out.hidden_states]))
      # MLM logits at 15% of the real positions, set to [MASK] in both.
      num = max(1, int(0.15 * m.sum(1).min()))
      pos = np.stack([rng.choice(np.arange(1, int(r.sum()) - 1), num, replace=False)
                      for r in m]).astype(np.int32)
      masked = i.copy()
      np.put_along_axis(masked, pos, tok.mask_id, axis=1)
      with torch.no_grad():  # the head on the masked rows only (all rows: 2 GB of logits)
        h = model.deberta(torch.tensor(masked, dtype=torch.long), attention_mask=torch.tensor(m),
                          token_type_ids=torch.tensor(s, dtype=torch.long)).last_hidden_state
        logits = model.cls(h[torch.arange(len(pos))[:, None], torch.tensor(pos, dtype=torch.long)])
      note("mlm", mlm_fn(params, masked, m, s, pos), logits.numpy())
    # bert_jax.embed on the text file, as a user runs it.
    text_file = os.path.join(work, f"{name}.txt")
    with open(text_file, "w", encoding="utf-8") as f:
      f.write("\n".join("\t".join(t) if pairs else t for t in texts) + "\n")
    for pooling in ("cls", "mean"):
      out_file = os.path.join(work, f"{name}_{pooling}.npy")
      subprocess.run([sys.executable, "-m", "bert_jax.embed", "--checkpoint", dst, "--input",
                      text_file, "--output", out_file, "--pooling", pooling, "--layers",
                      "0,1,2", "--combine", "concat", "--max_length", str(args.max_length)]
                     + (["--pairs"] if pairs else []), check=True, env=env,
                     stdout=subprocess.DEVNULL)
      want = []
      for m, hs in hidden_all:
        mm = m[..., None].astype(np.float32)
        want.append(np.concatenate([h[:, 0] if pooling == "cls" else (h * mm).sum(1) / mm.sum(1)
                                    for h in hs], axis=-1))
      note(f"embed_{pooling}", np.load(out_file), np.concatenate(want))
  for k, v in diffs.items():
    print(f"{k:<12} max abs diff {v:.3e}")
  for k, v in counts.items():
    print(f"{k:<26} {v}")
  ok = all(v <= 1e-4 for v in diffs.values()) and not any(
      v for k, v in counts.items() if k.endswith("mismatches"))
  print(json.dumps({"type_vocab_size": args.type_vocab_size, "diffs": diffs, "counts": counts,
                    "ok": ok}))
  return 0 if ok else 1


if __name__ == "__main__":
  sys.exit(main())
