"""Checkpoint conversion to and from self-describing bert_jax checkpoints (bundles).

  python -m bert_jax.convert --from hf  --src HF_DIR     --dst BUNDLE [--cased|--uncased]
  python -m bert_jax.convert --from tf1 --src GOOGLE_DIR --dst BUNDLE [--cased|--uncased]
  python -m bert_jax.convert --to hf    --src CHECKPOINT --dst HF_DIR

`--from hf` reads config.json + model.safetensors (BertModel, BertForPreTraining
or BertForMaskedLM layouts, with or without the `bert.` prefix; a fine-tuned
BertForSequenceClassification or BertForTokenClassification, or ModernBERT's,
with its head and id2label, which `Encoder.classify` / `Encoder.tag` use; model_type
roberta, distilbert, electra, albert, deberta-v2 and modernbert likewise, by
config.json's model_type, with their tokenizer files beside the weights, or BERT's
vocab.txt); pickle
checkpoints (pytorch_model.bin) are refused with instructions. A
sentence-transformers folder (modules.json) also brings its modules: Pooling
(cls, mean, max, mean_sqrt_len, weightedmean or lasttoken), Dense layers (their
weights and activation), Normalize, sentence_bert_config.json's max_seq_length
and any prompts are recorded in the bundle, and `embed`, `retrieval_eval`,
`Encoder.embed` and sentence-embedding fine-tuning use them by default; a module
or pooling mode bert_jax cannot compute is refused in one line naming it. `--from tf1`
reads original Google BERT checkpoints (bert_model.ckpt.* + bert_config.json +
vocab.txt). Casing defaults to tokenizer_config.json's do_lower_case, else a
guess from the vocab (printed). A WordPiece folder saved by transformers 5 has a
tokenizer.json and no vocab.txt: its vocab and casing (the normalizer's lowercase)
are read from that file, which must be BERT's pipeline. `--to hf` reads anything
a run starts from (a bundle such as a workdir's export/, a pretraining workdir, its
checkpoints/) and writes safetensors + config.json + vocab.txt that transformers
loads as the architecture in config.json (BertForPreTraining, DistilBertForMaskedLM,
ElectraForPreTraining, DebertaV2ForMaskedLM, ...; a fine-tuned BERT's GLUE 'cls' head as
BertForSequenceClassification and NER head as BertForTokenClassification, with the
task's labels; another task head is refused unless --drop_unexpected leaves it
out). A bundle that records how it embeds (a
sentence-embedding fine-tuning export, a converted sentence-transformers model)
is also written as a sentence-transformers folder: modules.json, 1_Pooling/,
its Dense layers (2_Dense/, ...), Normalize and sentence_bert_config.json, which
sentence-transformers loads and encodes with as bert_jax embeds.

--dst is replaced whole: the new folder is written beside it and exchanged with
the earlier one in one step, so that a kill or a full disk leaves the complete
earlier folder (or none), never a mix of two models; a disk that refuses a
write is one line naming the file. --overwrite replaces only a bundle that is
not a training run's export/ (--from) or a folder holding only the files an
export writes (--to hf): anything else in it (a tokenizer.json of another
model, notes) is named and nothing is touched.

A conversion that takes longer than 10 s prints a line every 10 s until it is
done (--quiet: only the result; a mistake is one line).
"""
import json
import os
import sys
from typing import Optional, Sequence

# Conversion is host work: leave GPUs alone. Before JAX is imported (by flax), which reads
# the variable then.
if __name__ == "__main__":
  os.environ.setdefault("JAX_PLATFORMS", "cpu")

from absl import flags  # noqa: E402  pylint: disable=g-import-not-at-top
from flax import traverse_util  # noqa: E402  pylint: disable=g-import-not-at-top

from bert_jax.checkpoints import bundle  # noqa: E402  pylint: disable=g-import-not-at-top
from bert_jax import cli  # noqa: E402  pylint: disable=g-import-not-at-top
from bert_jax.conversion import hf  # noqa: E402  pylint: disable=g-import-not-at-top
from bert_jax.conversion import tf1  # noqa: E402  pylint: disable=g-import-not-at-top
from bert_jax.runtime import console  # noqa: E402  pylint: disable=g-import-not-at-top
from bert_jax.runtime import write_errors  # noqa: E402  pylint: disable=g-import-not-at-top


def parse_args(argv: Optional[Sequence[str]] = None) -> flags.FlagValues:
  """The command line's flags (defined on use, on a FlagValues of their own), parsed."""
  fv = flags.FlagValues()
  flags.DEFINE_enum("from", None, ("hf", "tf1"),
                    "convert a foreign checkpoint into a bert_jax bundle", flag_values=fv)
  flags.DEFINE_enum("to", None, ("hf",), "export a bert_jax checkpoint (a bundle, a "
                    "pretraining workdir or its checkpoints/)", flag_values=fv)
  flags.mark_flags_as_mutual_exclusive(["from", "to"], required=True, flag_values=fv)
  flags.DEFINE_string("src", None, "source directory (or TF1 checkpoint prefix)", flag_values=fv,
                      required=True)
  flags.DEFINE_string("dst", None, "output directory", flag_values=fv, required=True)
  flags.DEFINE_boolean("cased", None, "the tokenizer keeps case (cased model)", flag_values=fv)
  flags.DEFINE_boolean("uncased", None, "the tokenizer lowercases (uncased model)",
                       flag_values=fv)
  flags.mark_bool_flags_as_mutual_exclusive(["cased", "uncased"], flag_values=fv)
  flags.DEFINE_boolean("overwrite", False, "replace a non-empty --dst that holds an earlier "
                       "conversion", flag_values=fv)
  flags.DEFINE_boolean("drop_unexpected", False,
                       "leave out tensors outside the BERT name map (e.g. a fine-tuned "
                       "classifier) instead of failing: --from, of the foreign checkpoint; "
                       "--to, of the export (the encoder and pooler are written)",
                       flag_values=fv)
  flags.DEFINE_boolean("quiet", False, "no progress lines, only the result", flag_values=fv)
  cli.parse(fv, argv, "bert_jax.convert", __doc__, paths=("src", "dst"))
  return fv


def main(argv: Optional[Sequence[str]] = None) -> int:
  args = parse_args(argv)
  try:
    return _convert(args)
  except write_errors.OutputWriteError as e:  # a full disk: one line naming the file
    raise SystemExit(f"bert_jax.convert: {e}") from None


def _convert(args: flags.FlagValues) -> int:
  lowercase = False if args.cased else True if args.uncased else None
  working = console.Heartbeat(f"bert_jax.convert: converting {args.src} to {args.dst}",
                              enabled=not args.quiet, at_start=False)
  if args.to:
    if lowercase is not None:
      print("note: --cased/--uncased are ignored with --to (the bundle records its casing)",
            file=sys.stderr)
    with working:
      out = hf.bundle_to_hf(args.src, args.dst, overwrite=args.overwrite,
                            drop_unexpected=args.drop_unexpected)
    print(f"wrote {args.dst}: {out['architecture']} ({bundle.describe_arch(out['config'])}, "
          f"heads {list(out['heads'])}, {out['num_tensors']} tensors)"
          + (f"; a sentence-transformers folder: {' -> '.join(out['modules'])}"
             if out.get("modules") else ""))
    emd = [p for p in out["dropped"] if p.startswith("emd/")]
    others = [p for p in out["dropped"] if not p.startswith("emd/")]
    if emd:
      print(f"left out {emd}: DeBERTa's enhanced mask decoder (pretraining only; "
            "transformers has none)")
    if others:
      print(f"left out {len(others)} tensors outside the name map (--drop_unexpected): {others}")
    return 0
  convert = hf.hf_to_bundle if args["from"].value == "hf" else tf1.tf1_to_bundle
  with working:
    out = convert(args.src, args.dst, lowercase=lowercase, overwrite=args.overwrite,
                  drop_unexpected=args.drop_unexpected)
  c = out["config"]
  n = sum(x.size for x in traverse_util.flatten_dict(out["params"], sep="/").values())
  arch = bundle.describe_arch(c, ("num_layers", "hidden_size", "num_heads", "vocab_size"))
  print(f"wrote bundle {args.dst}: {arch}, {n:,} params, heads {list(out['heads'])}, "
        f"{'uncased' if out['lowercase'] else 'cased'} ({out['lowercase_reason']})")
  if out["dropped"]:
    print(f"dropped {len(out['dropped'])} tensors outside the name map: {out['dropped']}")
  labels = out.get("info", {}).get("labels")
  if labels is not None:
    print("its task head: " + (f"labels {labels}" if labels else "a regression (one score)")
          + " from config.json's id2label; Encoder."
          + ("tag" if out["info"].get("task") == "ner" else "classify") + " answers with them")
  if out.get("info", {}).get("embedding"):
    record = out["info"]["embedding"]
    print(f"embeds as recorded from its {record['source']}: pooling {record['pooling']}"
          + (", normalised" if record["normalize"] else "")
          + (f", max_seq_length {record['max_seq_length']}" if "max_seq_length" in record else "")
          + (f", prompts {sorted(record['prompts'])} (default "
             f"{json.dumps(record.get('default_prompt_name'))}; prepended as encode does)"
             if record.get("prompts") else ""))
  return 0


if __name__ == "__main__":
  cli.run_tool(main, "bert_jax.convert")
