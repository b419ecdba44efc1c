r"""Dense retrieval on a BEIR dataset: embed corpus and queries, top-k, BEIR's metrics.

  python -m bert_jax.retrieval_eval --checkpoint CKPT --beir_dir DIR --split test \
      [--max_length N] [--pooling MODE] [--[no]normalize] [--top_k 100] [--output metrics.json] \
      [--index exact|hnsw] [--hnsw_ef_search 128]

DIR is BEIR's layout: corpus.jsonl ({"_id", "title", "text"}), queries.jsonl
({"_id", "text"}) and qrels/SPLIT.tsv (`query-id corpus-id score`, a header
line). Documents are embedded as "title text" (BEIR's SentenceBERT joins them
with a space), the judged queries of the split as their text, both with
bert_jax.embed (length-sorted batches when embed sorts), with the pooling,
normalisation, Dense layers and longest input the checkpoint records (a
sentence-embedding fine-tuning export, a converted sentence-transformers model)
unless --pooling, --[no]normalize or --max_length say otherwise; a checkpoint that
records none is embedded as BEIR evaluates sentence-transformers models: mean
pooling, normalised, 256 tokens. The header says which each is and where it came
from. Scores are the dot product of the embeddings (cosine when normalised, as
BEIR's `cos_sim`), searched exactly by matmul top-k in blocks of queries (`--index exact`,
the default) or approximately with a faiss HNSW graph (`--index hnsw`: search time
grows about logarithmically with the corpus instead of linearly; the vectors
stay in memory; needs faiss-cpu, `pip install -e '.[ann]'`); a document
whose id equals the query's is dropped from its results (BEIR's
ignore_identical_ids). Metrics are `retrieval_metrics` (trec_eval's
definitions): nDCG@1/3/5/10/100, MAP@10, Recall@10/100, P@10 and MRR@10,
written as JSON; the last line printed is `ndcg@10: X`.
"""
import json
import sys
from typing import Optional, Sequence

from absl import flags

from bert_jax.checkpoints import bundle
from bert_jax.checkpoints import loading
from bert_jax import cli
from bert_jax.inference import embedding
from bert_jax.runtime import atomic_files
from bert_jax.runtime import console
from bert_jax.tasks.retrieval import beir as retrieval


def parse_args(argv: Optional[Sequence[str]] = None) -> flags.FlagValues:
  """The command line's flags (on a FlagValues of their own), parsed."""
  fv = flags.FlagValues()
  flags.DEFINE_string("checkpoint", None, "a bert_jax checkpoint (a bundle, a pretraining "
                      "workdir or its checkpoints/)", flag_values=fv, required=True)
  flags.DEFINE_string("beir_dir", None, "BEIR dataset directory (corpus.jsonl, queries.jsonl, "
                      "qrels/)", flag_values=fv, required=True)
  flags.DEFINE_string("split", "test", "the split to evaluate: its judgements are read from "
                      "qrels/SPLIT.tsv", flag_values=fv)
  flags.DEFINE_integer("max_length", None, "longest input, special tokens included (default: "
                       "the checkpoint's, else 256)", flag_values=fv)
  flags.DEFINE_enum("pooling", None, embedding.POOLINGS, "how token vectors become one "
                    "(default: the checkpoint's, else mean)", flag_values=fv)
  flags.DEFINE_boolean("normalize", None, "cosine scores (L2-normalised embeddings); "
                       "--nonormalize for dot product (default: the checkpoint's, else "
                       "normalised)", flag_values=fv)
  flags.DEFINE_integer("batch_size", 32, "texts per forward pass", flag_values=fv)
  flags.DEFINE_string("query_prompt_name", None, "the checkpoint's prompt prepended to each "
                      "query ('' none; default: its 'query' prompt, else its default prompt, as "
                      "sentence-transformers' encode_query)", flag_values=fv)
  flags.DEFINE_string("document_prompt_name", None, "the checkpoint's prompt prepended to each "
                      "document ('' none; default: its 'document', 'passage' or 'corpus' "
                      "prompt, else its default prompt, as sentence-transformers' "
                      "encode_document)", flag_values=fv)
  flags.DEFINE_integer("top_k", 100, "results kept per query", flag_values=fv)
  flags.DEFINE_enum("index", "exact", retrieval.INDEXES, "exact matmul top-k, or an approximate "
                    "faiss HNSW graph (needs faiss-cpu)", flag_values=fv)
  flags.DEFINE_integer("hnsw_ef_search", 128, "HNSW candidate list length while searching "
                       "(higher: slower, closer to exact)", flag_values=fv)
  flags.DEFINE_string("output", None, "write the metrics as JSON here", flag_values=fv)
  flags.DEFINE_boolean("quiet", False, "no header or progress lines on stderr", flag_values=fv)
  cli.parse(fv, argv, "bert_jax.retrieval_eval", __doc__,
            paths=("checkpoint", "beir_dir", "output"))
  return fv


def main(argv: Optional[Sequence[str]] = None) -> int:
  args = parse_args(argv)
  if args.top_k < 1:
    raise ValueError(f"--top_k {args.top_k} must be >= 1")
  if args.index == "hnsw":
    retrieval._faiss()  # a missing library fails before the long embedding
  with console.Heartbeat("bert_jax.retrieval_eval", at_start=False,
                         first=console.LOADING_SECONDS, status=f"loading {args.checkpoint}"):
    pretrained = loading.load_pretrained(args.checkpoint)
  prompts = retrieval.prompt_names(pretrained, args.query_prompt_name,
                                   args.document_prompt_name)
  chosen = retrieval.settings(pretrained, pooling=args.pooling, normalize=args.normalize,
                              max_length=args.max_length, prompt_name=prompts["query"],
                              given_by="--query_prompt_name" if args.query_prompt_name is not None
                              else "")
  # The documents' prompt, checked before the long embedding (an unknown name is one line).
  documents = retrieval.settings(pretrained, prompt_name=prompts["document"],
                                 given_by="--document_prompt_name"
                                 if args.document_prompt_name is not None else "")
  embedding.check_options(pretrained, chosen.pooling, (-1,), "mean", chosen.max_length,
                          args.batch_size, pairs=False)
  if args.output:
    cli.check_output_file(args.output)
  data = retrieval.read_beir(args.beir_dir, args.split)  # bad data fails before the long embedding
  if not args.quiet:
    corpus, _, qrels = data
    console.print_header("bert_jax.retrieval_eval", f"retrieval on {args.beir_dir}", [
        ("model", f"{bundle.describe_arch(pretrained.config)}, from {pretrained.source}"),
        ("data", f"{len(corpus):,} documents, {len(qrels):,} judged queries of split "
                 f"{args.split}, batch {args.batch_size}"),
        ("steps", f"encode the corpus and the queries ({chosen.describe()}; documents: "
                  f"{documents.describe_prompt()}), then find each "
                  f"query's {args.top_k} best documents "
                  + ("exactly (every document scored)" if args.index == "exact" else
                     "approximately (a faiss HNSW graph)")),
        ("output", args.output or "stdout")], file=sys.stderr)
  metrics = retrieval.evaluate(pretrained, data, max_length=chosen.max_length,
                               pooling=chosen.pooling, normalize=chosen.normalize,
                               batch_size=args.batch_size, prompts=prompts, top_k=args.top_k,
                               index=args.index,
                               hnsw_ef_search=args.hnsw_ef_search, quiet=args.quiet)
  if args.output:
    atomic_files.write_text(args.output, json.dumps(metrics, indent=2, sort_keys=True) + "\n")
  print(f"{metrics['queries']} queries, {metrics['documents']} documents "
        f"({metrics['truncated_documents']} truncated to {chosen.max_length} tokens), "
        f"{metrics['seconds']:.0f} s embedding")
  for name in retrieval.REPORTED:
    if name != "ndcg@10":
      print(f"{name}: {metrics[name]:.4f}")
  print(f"ndcg@10: {metrics['ndcg@10']:.4f}")
  return 0


if __name__ == "__main__":
  cli.run_tool(main, "bert_jax.retrieval_eval")
