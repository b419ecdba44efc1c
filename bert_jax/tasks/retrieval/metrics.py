"""Ranking metrics of BEIR's evaluation (trec_eval's definitions, as pytrec_eval computes them).

nDCG (linear gains, trec_eval's ndcg_cut), MAP (map_cut), Recall, P and MRR at k. A document
is relevant when its score is > 0; score ties rank by document id, descending, as trec_eval.
Means are over queries with judgements (empty ones dropped, as pytrec_eval); a judged query
missing from `results` scores 0 (trec_eval's `-c`), since retrieval_eval ranks every query.
"""
import math
from typing import Mapping, Sequence

KS = (1, 3, 5, 10, 100)


def rank(scores: Mapping[str, float]) -> list[str]:
  """Document ids best first; ties by id, descending (trec_eval's order)."""
  return [d for d, _ in sorted(scores.items(), key=lambda x: (x[1], x[0]), reverse=True)]


def query_metrics(ranking: Sequence[str], judged: Mapping[str, int],
                  ks: Sequence[int] = KS) -> dict[str, float]:
  """{'ndcg@10', 'map@10', 'recall@10', 'p@10', 'mrr@10', ...} for each k of one query."""
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
  """Metric name -> mean over the judged queries of `qrels` (results: query id -> {doc: score})."""
  judged_queries = {q: judged for q, judged in qrels.items() if judged}
  if not judged_queries:
    raise ValueError("no judged queries to evaluate")
  totals: dict[str, float] = {}
  for q, judged in judged_queries.items():
    for name, value in query_metrics(rank(results.get(q, {})), judged, ks).items():
      totals[name] = totals.get(name, 0.0) + value
  return {name: total / len(judged_queries) for name, total in totals.items()}
