"""Ranking metrics of BEIR's evaluation (trec_eval's definitions, as pytrec_eval computes them).

  nDCG@k    gains are the judged relevance (linear, trec_eval's ndcg_cut), discount
            log2(rank + 1); the ideal ranking is every judged document of the query
            sorted by relevance
  MAP@k     sum of precision@rank at each relevant document ranked <= k, over the
            number of relevant documents of the query (trec_eval's map_cut)
  Recall@k  relevant documents ranked <= k over the query's relevant documents
  P@k       relevant documents ranked <= k over k
  MRR@k     1 / rank of the first relevant document ranked <= k (BEIR's mrr)

A document is relevant when its judged score is > 0. Rankings break score ties by
document id, descending, as trec_eval does. Each metric is the mean over the
queries that have judgements: a query whose judgements are empty is dropped from every mean,
as pytrec_eval and BEIR drop it; a query judged with every document at relevance 0 counts,
scoring 0, as in pytrec_eval. A judged query missing from `results` counts as 0 (trec_eval's
`-c`; pytrec_eval and BEIR would drop it, but `retrieval_eval` gives every query a ranking).
"""
import math
from typing import Mapping, Sequence

KS = (1, 3, 5, 10, 100)


def rank(scores: Mapping[str, float]) -> list[str]:
  """Document ids best first; ties by id, descending (trec_eval's order)."""
  return [d for d, _ in sorted(scores.items(), key=lambda x: (x[1], x[0]), reverse=True)]


def query_metrics(ranking: Sequence[str], judged: Mapping[str, int],
                  ks: Sequence[int] = KS) -> dict[str, float]:
  """Every metric at every k for one query.

  Args:
    ranking: retrieved document ids, best first.
    judged: document id -> relevance of this query's judgements.
    ks: the cut-offs.

  Returns:
    {'ndcg@10': ..., 'map@10': ..., 'recall@10': ..., 'p@10': ..., 'mrr@10': ...} for each k.
  """
  relevant = {d for d, r in judged.items() if r > 0}
  ideal = sorted((r for r in judged.values() if r > 0), reverse=True)
  out = {}
  for k in ks:
    top = ranking[:k]
    dcg = sum(judged.get(d, 0) / math.log2(i + 2) for i, d in enumerate(top) if judged.get(d, 0) > 0)
    idcg = sum(r / math.log2(i + 2) for i, r in enumerate(ideal[:k]))
    hits, ap, first = 0, 0.0, 0.0
    for i, d in enumerate(top):
      if d in relevant:
        hits += 1
        ap += hits / (i + 1)
        first = first or 1.0 / (i + 1)
    out[f"ndcg@{k}"] = dcg / idcg if idcg else 0.0
    out[f"map@{k}"] = ap / len(relevant) if relevant else 0.0
    out[f"recall@{k}"] = hits / len(relevant) if relevant else 0.0
    out[f"p@{k}"] = hits / k
    out[f"mrr@{k}"] = first
  return out


def evaluate(results: Mapping[str, Mapping[str, float]],
             qrels: Mapping[str, Mapping[str, int]], ks: Sequence[int] = KS) -> dict[str, float]:
  """Mean metrics over the judged queries.

  Args:
    results: query id -> {document id: score} of the retrieved documents.
    qrels: query id -> {document id: relevance}.
    ks: the cut-offs.

  Returns:
    Metric name -> mean over the queries of `qrels` with judgements (one with empty
    judgements is dropped, as in pytrec_eval; one with no results scores 0).
  """
  judged_queries = {q: judged for q, judged in qrels.items() if judged}
  if not judged_queries:
    raise ValueError("no judged queries to evaluate")
  totals: dict[str, float] = {}
  for q, judged in judged_queries.items():
    for name, value in query_metrics(rank(results.get(q, {})), judged, ks).items():
      totals[name] = totals.get(name, 0.0) + value
  return {name: total / len(judged_queries) for name, total in totals.items()}
