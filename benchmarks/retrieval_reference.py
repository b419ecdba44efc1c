r"""bert_jax.retrieval_eval vs a transformers + pytrec_eval reference pipeline on a BEIR split.

  python benchmarks/retrieval_reference.py --model_dir HF_DIR --bundle BUNDLE \
      --beir_dir $BEIR_DIR/scifact --split train [--max_length 256]

$BEIR_DIR/scifact is BEIR's SciFact (corpus.jsonl, queries.jsonl, qrels/; BEIR's download,
https://github.com/beir-cellar/beir).

HF_DIR is a Hugging Face BERT directory (e.g. all-MiniLM-L6-v2's `model/`), BUNDLE
the same model converted with `python -m bert_jax.convert`. The reference embeds
the same texts ("title text" documents, BEIR's SentenceBERT input; the judged
queries) with transformers' BertTokenizerFast + FlaxBertModel, mean pooling over
the attention mask and L2 normalisation (sentence-transformers' recipe for
MiniLM), searches exactly with numpy, drops a query's own id, and scores with
pytrec_eval (trec_eval's C code, as BEIR does). Prints both metric sets, their
differences and, as a check of the metric code alone, bert_jax.tasks.retrieval.metrics
on the reference's own results.
"""
import argparse
import json
import os
import time

import numpy as np

from bert_jax.checkpoints import loading
from bert_jax.tasks.retrieval import beir as retrieval
from bert_jax.tasks.retrieval import metrics as retrieval_metrics


def reference_embed(model_dir, texts, max_length, batch_size):
  """transformers Flax BERT, mean pooling, L2-normalised; batches sorted by length."""
  import jax  # pylint: disable=g-import-not-at-top
  import transformers  # pylint: disable=g-import-not-at-top
  tok = transformers.BertTokenizerFast.from_pretrained(model_dir)
  model = transformers.FlaxBertModel.from_pretrained(model_dir)
  enc = tok(list(texts), truncation=True, max_length=max_length)
  lengths = np.array([len(x) for x in enc["input_ids"]])
  order = np.argsort(-lengths, kind="stable")

  @jax.jit
  def forward(ids, mask):
    hidden = model(ids, attention_mask=mask,
                   token_type_ids=jax.numpy.zeros_like(ids)).last_hidden_state
    m = mask[..., None].astype(hidden.dtype)
    pooled = (hidden * m).sum(1) / jax.numpy.maximum(m.sum(1), 1e-9)
    return pooled / jax.numpy.linalg.norm(pooled, axis=-1, keepdims=True)

  out = np.zeros((len(texts), model.config.hidden_size), np.float32)
  with jax.default_matmul_precision("float32"):
    for i in range(0, len(texts), batch_size):
      rows = order[i:i + batch_size]
      width = -(-int(lengths[rows].max()) // 16) * 16  # few shapes: multiples of 16
      ids = np.zeros((batch_size, width), np.int32)
      mask = np.zeros((batch_size, width), np.int32)
      for r, j in enumerate(rows):
        x = enc["input_ids"][j]
        ids[r, :len(x)], mask[r, :len(x)] = x, 1
      mask[len(rows):, 0] = 1
      out[rows] = np.asarray(forward(ids, mask))[:len(rows)]
  return out


def main():
  p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  p.add_argument("--model_dir", required=True)
  p.add_argument("--bundle", required=True)
  p.add_argument("--beir_dir", required=True)
  p.add_argument("--split", default="train")
  p.add_argument("--max_length", type=int, default=256)
  p.add_argument("--batch_size", type=int, default=32)
  p.add_argument("--top_k", type=int, default=100)
  p.add_argument("--results", default="",
                 help="a JSON file keeping bert_jax's metrics: reused when present, so a rerun "
                      "only runs the reference")
  args = p.parse_args()
  import pytrec_eval  # pylint: disable=g-import-not-at-top

  data = retrieval.read_beir(args.beir_dir, args.split)
  corpus, queries, qrels = data
  start = time.time()
  if args.results and os.path.exists(args.results):
    with open(args.results) as f:
      ours = json.load(f)
  else:
    ours = retrieval.evaluate(loading.load_pretrained(args.bundle), data,
                              max_length=args.max_length, batch_size=args.batch_size,
                              top_k=args.top_k)
    if args.results:
      with open(args.results, "w") as f:
        json.dump(ours, f)
  ours_s = time.time() - start

  doc_ids, query_ids = list(corpus), list(qrels)
  start = time.time()
  doc_emb = reference_embed(args.model_dir,
                            [retrieval.document_text(corpus[d]) for d in doc_ids],
                            args.max_length, args.batch_size)
  query_emb = reference_embed(args.model_dir, [queries[q]["text"] for q in query_ids],
                              args.max_length, args.batch_size)
  ref_s = time.time() - start
  scores = query_emb @ doc_emb.T
  results = {}
  for qi, q in enumerate(query_ids):
    top = np.argsort(-scores[qi], kind="stable")[:args.top_k + 1]
    hits = [(doc_ids[j], float(scores[qi, j])) for j in top if doc_ids[j] != q]
    results[q] = dict(hits[:args.top_k])
  measures = {"ndcg_cut.1,3,5,10,100", "map_cut.10", "recall.10,100", "P.10"}
  per_query = pytrec_eval.RelevanceEvaluator(qrels, measures).evaluate(results)
  names = {"ndcg@1": "ndcg_cut_1", "ndcg@3": "ndcg_cut_3", "ndcg@5": "ndcg_cut_5",
           "ndcg@10": "ndcg_cut_10", "ndcg@100": "ndcg_cut_100", "map@10": "map_cut_10",
           "recall@10": "recall_10", "recall@100": "recall_100", "p@10": "P_10"}
  ref = {ours_name: float(np.mean([m[trec] for m in per_query.values()]))
         for ours_name, trec in names.items()}
  ours_on_ref = retrieval_metrics.evaluate(results, qrels)

  print(f"{args.split}: {len(query_ids)} judged queries, {len(doc_ids)} documents, "
        f"max_length {args.max_length}")
  print(f"{'metric':<12}{'bert_jax':>10}{'reference':>11}{'diff':>9}   "
        f"{'our metrics on the reference results':>38}")
  for name in names:
    print(f"{name:<12}{ours[name]:>10.4f}{ref[name]:>11.4f}{ours[name] - ref[name]:>+9.4f}   "
          f"{ours_on_ref[name]:>38.4f}")
  print(f"embedding seconds: bert_jax {ours['seconds']:.0f} (whole evaluate {ours_s:.0f}), "
        f"reference {ref_s:.0f}")
  print(json.dumps({"bert_jax": ours, "reference": ref}, sort_keys=True))
  print(f"ndcg@10 difference: {ours['ndcg@10'] - ref['ndcg@10']:+.4f}")


if __name__ == "__main__":
  main()
