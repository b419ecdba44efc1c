r"""Family parity on real text: a random transformers model of each member with the member's
real tokenizer files, via `python -m bert_jax.convert --from hf` and `python -m bert_jax.embed`,
vs transformers.

  python benchmarks/family_parity.py --model_type roberta|albert|distilbert|electra|deberta-v2
      --data_dir $DATA_DIR [--head mlm|discriminator] [--type_vocab_size N]

--data_dir is a folder laid out as benchmarks/README.md's "Data" section describes (GLUE,
SQuAD, CoNLL-2003, BEIR SciFact, WikiText-2 and public-domain books, the vocabularies and the
family's tokenizer files, each from its public source).

The references: transformers' Flax MaskedLM classes (FlaxRobertaForMaskedLM,
FlaxAlbertForMaskedLM, FlaxDistilBertForMaskedLM, FlaxElectraForMaskedLM: ELECTRA's generator;
`--head discriminator`: FlaxElectraForPreTraining) with explicit random params, every tensor
perturbed (tests/hf_reference.py); DeBERTa-v2 in PyTorch (DebertaV2ForMaskedLM; transformers
has no Flax DeBERTa), with DeBERTa-v3's attention (relative_attention, share_att_key,
pos_att_type p2c|c2p, norm_rel_ebd layer_norm, no absolute positions when type_vocab_size is 0)
and 64 position buckets up to 512 (distances beyond 32 take log buckets within the 128-token
inputs). 2 layers (ALBERT: 3 computations of its one layer), hidden 64, the tokenizer's vocab:
roberta-base's vocab.json + merges.txt, albert-base-v2's spiece.model, deberta-v3-base's
spm.model, bert-base-uncased's vocab.txt (DistilBERT, ELECTRA). Saved with save_pretrained
(safetensors) beside the tokenizer files.

Texts: the 408 sentence pairs of GLUE MRPC dev (the member's pair layout: RoBERTa
`<s> A </s></s> B </s>`, the others [CLS] A [SEP] B [SEP] with segments 0 / 1 where the model
has token types) and the first --num_lines non-empty lines of WikiText-2 raw test, max_length
128 (longest-first truncation for pairs, as the fast tokenizers'). Compared, max abs diff over
all of them:

  ids        bert_jax's ids and segment ids vs the fast tokenizer (mismatched rows)
  hidden_i   every position of hidden state i (embeddings, layers) of batches padded to 128,
             bert_jax.modeling.model vs transformers fed the same arrays
  mlm        MLM logits at 15% of the real positions (set to the mask token); with
             --head discriminator the replaced-token logits at every real position instead
  embed_*    `python -m bert_jax.embed --pooling cls|mean --layers 0,..,L --combine concat`
             (a subprocess on the converted bundle) vs the same poolings of transformers'
             hidden states

Expected: every diff <= 1e-4 and 0 mismatched rows; the last line is a JSON summary.
Runtime: a few minutes a member on 2 loaded CPUs.
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
  """{'mrpc_pairs': [(a, b)], 'wikitext': [str]} from the data folder."""
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


VOCAB = {"bpe": ("roberta-base", ("vocab.json", "merges.txt")),
         "albert": ("albert-base-v2", ("spiece.model",)),
         "deberta": ("deberta-v3-base", ("spm.model",))}
SIZES = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
             max_position_embeddings=512)


def _tokenizer_files(model_type: str, data_dir: str) -> list:
  """The real tokenizer files of the member, from the data folder."""
  if model_type in ("distilbert", "electra"):
    return [os.path.join(data_dir, "vocab", "bert-base-uncased", "vocab.txt")]
  name, files = VOCAB[{"roberta": "bpe", "albert": "albert", "deberta-v2": "deberta"}[model_type]]
  return [os.path.join(data_dir, "tokenizers", name, f) for f in files]


def build_reference(model_type: str, head: str, files: list, type_vocab_size: int, src: str):
  """The random reference saved in `src` with the tokenizer files.

  Returns:
    (fast tokenizer, forward(ids, mask, seg) -> (hidden states [L + 1] as numpy, head output
    [batch, len(, vocab)] as numpy), type_vocab_size of the reference).
  """
  import transformers  # pylint: disable=g-import-not-at-top
  for f in files:
    shutil.copy(f, src)
  if model_type == "deberta-v2":
    return _deberta_reference(files[0], type_vocab_size, src)
  from tests.hf_reference import Reference  # pylint: disable=g-import-not-at-top
  if model_type == "roberta":
    fast = transformers.RobertaTokenizerFast(vocab_file=files[0], merges_file=files[1])
    config = transformers.RobertaConfig(vocab_size=len(fast), type_vocab_size=1, pad_token_id=1,
                                        layer_norm_eps=1e-5, **dict(SIZES,
                                                                    max_position_embeddings=514))
    cls = transformers.FlaxRobertaForMaskedLM
  elif model_type == "albert":
    fast = transformers.AlbertTokenizerFast(vocab_file=files[0])
    config = transformers.AlbertConfig(vocab_size=len(fast), embedding_size=32,
                                       **dict(SIZES, num_hidden_layers=3))
    cls = transformers.FlaxAlbertForMaskedLM
  elif model_type == "distilbert":
    fast = transformers.BertTokenizerFast(vocab_file=files[0])
    config = transformers.DistilBertConfig(vocab_size=len(fast), dim=64, n_layers=2, n_heads=4,
                                           hidden_dim=128, max_position_embeddings=512)
    cls = transformers.FlaxDistilBertForMaskedLM
  else:
    fast = transformers.BertTokenizerFast(vocab_file=files[0])
    config = transformers.ElectraConfig(vocab_size=len(fast), embedding_size=32, type_vocab_size=2,
                                        **SIZES)
    cls = (transformers.FlaxElectraForPreTraining if head == "discriminator"
           else transformers.FlaxElectraForMaskedLM)
  ref = Reference(cls, config, seed=0)
  ref.model.save_pretrained(src, params=ref.params, safe_serialization=True)

  def forward(ids, mask, seg):
    out = ref(ids, mask, None if model_type == "distilbert" else seg, output_hidden_states=True)
    return [np.asarray(h) for h in out.hidden_states], np.asarray(out.logits)
  return fast, forward, getattr(config, "type_vocab_size", 0)


def _deberta_reference(spm_model: str, type_vocab_size: int, src: str):
  """The random DebertaV2ForMaskedLM (PyTorch), as build_reference returns it."""
  import torch  # pylint: disable=g-import-not-at-top
  import transformers  # pylint: disable=g-import-not-at-top
  fast = transformers.DebertaV2TokenizerFast(vocab_file=spm_model)
  config = transformers.DebertaV2Config(
      vocab_size=len(fast), type_vocab_size=type_vocab_size, relative_attention=True,
      position_buckets=64, max_relative_positions=-1, pos_att_type="p2c|c2p", share_att_key=True,
      norm_rel_ebd="layer_norm", position_biased_input=type_vocab_size > 0, layer_norm_eps=1e-7,
      **SIZES)
  torch.manual_seed(0)
  model = transformers.DebertaV2ForMaskedLM(config).eval()
  with torch.no_grad():
    for p in model.parameters():
      p.add_(torch.randn_like(p) * 0.05)
  model.save_pretrained(src, safe_serialization=True)

  @torch.no_grad()
  def head(last, pos):
    return model.cls(last[torch.arange(len(pos))[:, None], torch.tensor(pos, dtype=torch.long)])

  def forward(ids, mask, seg):
    with torch.no_grad():
      out = model.deberta(torch.tensor(ids, dtype=torch.long), attention_mask=torch.tensor(mask),
                          token_type_ids=torch.tensor(seg, dtype=torch.long),
                          output_hidden_states=True)
    # The head on every row is 2 GB of logits at 128k tokens: the caller gathers first.
    return [h.numpy() for h in out.hidden_states], (
        lambda pos: head(out.last_hidden_state, pos).numpy())
  return fast, forward, type_vocab_size


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
  p.add_argument("--model_type", default="deberta-v2",
                 choices=["roberta", "albert", "distilbert", "electra", "deberta-v2"])
  p.add_argument("--head", default="mlm", choices=["mlm", "discriminator"])
  p.add_argument("--data_dir", required=True,
                 help="the data folder (benchmarks/README.md, \"Data\")")
  p.add_argument("--num_lines", type=int, default=400)
  p.add_argument("--type_vocab_size", type=int, default=0, help="deberta-v2 only")
  p.add_argument("--max_length", type=int, default=128)
  p.add_argument("--batch_size", type=int, default=16)
  p.add_argument("--workdir", default="")
  args = p.parse_args()
  if args.head == "discriminator" and args.model_type != "electra":
    sys.exit("--head discriminator is ELECTRA's")
  import jax  # pylint: disable=g-import-not-at-top
  from bert_jax.checkpoints import loading  # pylint: disable=g-import-not-at-top
  from bert_jax.data.tokenizers import tokenizer as tokenizer_lib  # pylint: disable=g-import-not-at-top
  from bert_jax.inference import embedding  # pylint: disable=g-import-not-at-top
  from bert_jax.modeling import model as model_lib  # pylint: disable=g-import-not-at-top

  files = _tokenizer_files(args.model_type, args.data_dir)
  missing = [f for f in files if not os.path.isfile(f)]
  if missing:
    sys.exit(f"no {missing[0]}: --data_dir must be laid out as benchmarks/README.md's "
             "\"Data\" section says")
  work = args.workdir or tempfile.mkdtemp(prefix="family_parity_")
  src, dst = os.path.join(work, "hf"), os.path.join(work, "bundle")
  os.makedirs(src, exist_ok=True)
  fast, forward, _ = build_reference(args.model_type, args.head, files, args.type_vocab_size, src)
  env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
  subprocess.run([sys.executable, "-m", "bert_jax.convert", "--from", "hf", "--src", src,
                  "--dst", dst, "--overwrite"], check=True, env=env)
  pretrained = loading.load_pretrained(dst)
  config, params = pretrained.config, pretrained.params
  tok = tokenizer_lib.for_checkpoint(pretrained)
  bert_fn = jax.jit(lambda p, i, m, s: model_lib.BertModel(config, add_pooler=False).apply(
      {"params": p}, i, m, s, output_hidden_states=True)["hidden_states"])
  mlm_fn = jax.jit(lambda p, i, m, s, pos: model_lib.BertForPreTraining(
      config, with_nsp=False).apply({"params": p}, i, m, s, pos)["mlm_logits"])
  disc_fn = jax.jit(lambda p, i, m, s: model_lib.ElectraDiscriminator(config).apply(
      {"params": p}, i, m, s))
  diffs, counts = {}, {}
  rng = np.random.default_rng(0)

  def note(key, ours, theirs, where=None):
    d = np.abs(np.asarray(ours, np.float32) - np.asarray(theirs, np.float32))
    d = d[where] if where is not None else d
    diffs[key] = max(diffs.get(key, 0.0), float(np.max(d)))

  for name, texts in read_texts(args.data_dir, args.num_lines).items():
    pairs = isinstance(texts[0], tuple)
    ids, segs, truncated = embedding.encode(tok, texts, args.max_length)
    if pairs:
      ref = fast([a for a, _ in texts], [b for _, b in texts], truncation="longest_first",
                 max_length=args.max_length, return_token_type_ids=True)
    else:
      ref = fast(texts, truncation=True, max_length=args.max_length, return_token_type_ids=True)
    counts[f"{name}_rows"], counts[f"{name}_truncated"] = len(texts), truncated
    ref_segs = ref.get("token_type_ids") or [[0] * len(r) for r in ref["input_ids"]]
    counts[f"{name}_id_mismatches"] = sum(
        (list(a), list(s)) != (list(b), list(t))
        for a, s, b, t in zip(ids, segs, ref["input_ids"], ref_segs))
    hidden_all = []  # transformers' hidden states per batch, for the pooled embeddings
    for start in range(0, len(ids), args.batch_size):
      i, s, m = _pad(ids[start:start + args.batch_size], segs[start:start + args.batch_size],
                     tok.pad_id, args.max_length)
      hidden, head = forward(i, m, s)
      ours = bert_fn(params["bert"], i, m, s)
      assert len(ours) == len(hidden), (len(ours), len(hidden))
      for k, (a, b) in enumerate(zip(ours, hidden)):
        note(f"hidden_{k}", a, b)
      hidden_all.append((m, hidden))
      if args.head == "discriminator":  # every real position
        note("discriminator", disc_fn(params, i, m, s), head, where=m > 0)
        continue
      # MLM logits at 15% of the real positions, set to the mask token in both.
      num = max(1, int(0.15 * m.sum(1).min()))
      pos = np.stack([rng.choice(np.arange(1, int(r.sum()) - 1), num, replace=False)
                      for r in m]).astype(np.int32)
      masked = i.copy()
      np.put_along_axis(masked, pos, tok.mask_id, axis=1)
      _, logits = forward(masked, m, s)
      want = (logits(pos) if callable(logits)
              else np.take_along_axis(logits, pos[..., None], axis=1))
      note("mlm", mlm_fn(params, masked, m, s, pos), want)
    # bert_jax.embed on the text file, as a user runs it.
    text_file = os.path.join(work, f"{name}.txt")
    with open(text_file, "w", encoding="utf-8") as f:
      f.write("\n".join("\t".join(t) if pairs else t for t in texts) + "\n")
    layers = ",".join(str(k) for k in range(len(hidden_all[0][1])))
    for pooling in ("cls", "mean"):
      out_file = os.path.join(work, f"{name}_{pooling}.npy")
      subprocess.run([sys.executable, "-m", "bert_jax.embed", "--checkpoint", dst, "--input",
                      text_file, "--output", out_file, "--pooling", pooling, "--layers",
                      layers, "--combine", "concat", "--max_length", str(args.max_length)]
                     + (["--pairs"] if pairs else []), check=True, env=env,
                     stdout=subprocess.DEVNULL)
      want = []
      for m, hs in hidden_all:
        mm = m[..., None].astype(np.float32)
        want.append(np.concatenate([h[:, 0] if pooling == "cls" else (h * mm).sum(1) / mm.sum(1)
                                    for h in hs], axis=-1))
      note(f"embed_{pooling}", np.load(out_file), np.concatenate(want))
  for k, v in diffs.items():
    print(f"{k:<14} max abs diff {v:.3e}")
  for k, v in counts.items():
    print(f"{k:<26} {v}")
  ok = all(v <= 1e-4 for v in diffs.values()) and not any(
      v for k, v in counts.items() if k.endswith("mismatches"))
  print(json.dumps({"model_type": args.model_type, "head": args.head,
                    "type_vocab_size": config.type_vocab_size, "diffs": diffs, "counts": counts,
                    "ok": ok}))
  return 0 if ok else 1


if __name__ == "__main__":
  sys.exit(main())
