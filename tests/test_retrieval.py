"""Retrieval evaluation: BEIR's metrics (trec_eval definitions) and the retrieval_eval program."""
import json

import numpy as np
import pytest

from bert_jax.checkpoints import bundle
from bert_jax import retrieval_eval
from bert_jax.tasks.retrieval import beir as retrieval
from bert_jax.tasks.retrieval import metrics as retrieval_metrics
from tests.fixtures.tiny_encoder import CONFIG
from tests.fixtures.tiny_encoder import VOCAB
from tests.fixtures.tiny_encoder import random_params


def test_metrics_by_hand():
  # Relevant: d1 (2), d3 (1); d2 judged 0; the ranking d2 d1 x d3.
  m = retrieval_metrics.query_metrics(["d2", "d1", "x", "d3"], {"d1": 2, "d2": 0, "d3": 1},
                                      ks=(1, 3, 10))
  assert m["ndcg@1"] == 0.0 and m["mrr@1"] == 0.0 and m["p@1"] == 0.0
  dcg = 2 / np.log2(3) + 1 / np.log2(5)
  assert m["ndcg@10"] == pytest.approx(dcg / (2 + 1 / np.log2(3)))
  assert m["ndcg@3"] == pytest.approx((2 / np.log2(3)) / (2 + 1 / np.log2(3)))
  assert m["map@10"] == pytest.approx((1 / 2 + 2 / 4) / 2) and m["map@3"] == pytest.approx(0.25)
  assert m["recall@3"] == 0.5 and m["recall@10"] == 1.0 and m["mrr@10"] == 0.5
  assert m["p@3"] == pytest.approx(1 / 3)
  # Ties broken by document id, descending (trec_eval).
  assert retrieval_metrics.rank({"a": 1.0, "c": 1.0, "b": 2.0}) == ["b", "c", "a"]
  # Queries without results score 0 and count in the mean.
  assert retrieval_metrics.evaluate({"q1": {"d1": 1.0}}, {"q1": {"d1": 1}, "q2": {"d1": 1}},
                                    ks=(10,))["ndcg@10"] == 0.5


def test_metrics_equal_scikit_learn_on_random_rankings():
  metrics = pytest.importorskip("sklearn.metrics", reason="needs scikit-learn (the test extra)")
  rng = np.random.default_rng(0)
  for _ in range(20):
    rel = rng.integers(0, 3, 40) * (rng.random(40) < 0.3)
    if not rel.any():
      continue
    scores = rng.random(40)
    judged = {f"d{i:02d}": int(r) for i, r in enumerate(rel)}
    ranking = retrieval_metrics.rank({f"d{i:02d}": float(s) for i, s in enumerate(scores)})
    ours = retrieval_metrics.query_metrics(ranking, judged, ks=(1, 5, 10, 100))
    for k in (1, 5, 10):
      assert ours[f"ndcg@{k}"] == pytest.approx(metrics.ndcg_score([rel], [scores], k=k))
    assert ours["map@100"] == pytest.approx(metrics.average_precision_score(rel > 0, scores))


def _beir(tmp_path, texts, qrels_lines, queries=None):
  (tmp_path / "qrels").mkdir()
  with open(tmp_path / "corpus.jsonl", "w") as f:
    for i, t in enumerate(texts):
      f.write(json.dumps({"_id": f"d{i}", "title": "", "text": t}) + "\n")
  queries = queries or {f"q{i}": t for i, t in enumerate(texts)}
  with open(tmp_path / "queries.jsonl", "w") as f:
    for q, t in queries.items():
      f.write(json.dumps({"_id": q, "text": t}) + "\n")
  (tmp_path / "qrels" / "test.tsv").write_text(
      "query-id\tcorpus-id\tscore\n" + "".join(l + "\n" for l in qrels_lines))
  return str(tmp_path)


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
  d = tmp_path_factory.mktemp("retrieval")
  path = str(d / "bundle")
  bundle.save_bundle(path, random_params(CONFIG), CONFIG, VOCAB, lowercase=True)
  return path


@pytest.mark.parametrize("index", retrieval.INDEXES)
def test_a_query_equal_to_its_document_is_found_first(ckpt, tmp_path, capsys, index):
  if index == "hnsw":
    pytest.importorskip("faiss", reason="needs faiss-cpu (bert_jax[test] / [ann] installs it)")
  texts = ["the cat sat on the mat .", "hello world", "a big red dog ran far", "the dog sat",
           "red mat", "a cat ran"]
  # Each query is a document's text: identical embeddings, cosine 1, ranked first. Document
  # d0 also has the id of query "d0", whose results must not hold it (ignore_identical_ids),
  # so that query, judged to want d0, finds nothing relevant.
  queries = {f"q{i}": t for i, t in enumerate(texts)} | {"d0": texts[0]}
  beir = _beir(tmp_path, texts, [f"q{i}\td{i}\t1" for i in range(6)] + ["d0\td0\t1"], queries)
  out = tmp_path / "metrics.json"
  assert retrieval_eval.main(["--checkpoint", ckpt, "--beir_dir", beir, "--split", "test",
                              "--max_length", "16", "--top_k", "5", "--output", str(out),
                              "--index", index]) == 0
  metrics = json.loads(out.read_text())
  assert metrics["queries"] == 7 and metrics["documents"] == 6
  # Six queries find their document first; query "d0" cannot return d0 itself.
  assert metrics["ndcg@1"] == pytest.approx(6 / 7) and metrics["mrr@10"] == pytest.approx(6 / 7)
  assert capsys.readouterr().out.rstrip().splitlines()[-1] == f"ndcg@10: {metrics['ndcg@10']:.4f}"


def test_bad_beir_inputs_are_named(tmp_path):
  beir = _beir(tmp_path, ["hello world"], ["q0\td0\tone"])
  with pytest.raises(ValueError, match=r"qrels/test.tsv:2: expected query-id<TAB>corpus-id"):
    retrieval.read_beir(beir, "test")
  (tmp_path / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq9\td0\t1\n")
  with pytest.raises(ValueError, match=r"judges 1 query id\(s\) not in queries.jsonl"):
    retrieval.read_beir(beir, "test")
  (tmp_path / "corpus.jsonl").write_text('{"_id": "d0", "text": "x"}\n{"_id": "d1"\n')
  with pytest.raises(ValueError, match=r"corpus.jsonl:2: not a JSON line"):
    retrieval.read_beir(beir, "test")
  with pytest.raises(FileNotFoundError, match=r"qrels/dev.tsv does not exist"):
    retrieval.read_beir(beir, "dev")
  # Files saved with a byte-order mark (Windows editors) read as without one.
  for name in ("corpus.jsonl", "queries.jsonl"):
    (tmp_path / name).write_text('\ufeff{"_id": "%s", "text": "hello"}\n' % (
        "d0" if name.startswith("corpus") else "q0"), encoding="utf-8")
  (tmp_path / "qrels" / "test.tsv").write_text("\ufeffquery-id\tcorpus-id\tscore\nq0\td0\t1\n",
                                               encoding="utf-8")
  corpus, queries, qrels = retrieval.read_beir(beir, "test")
  assert list(corpus) == ["d0"] and list(queries) == ["q0"] and qrels == {"q0": {"d0": 1}}


def test_metrics_equal_pytrec_eval_on_random_runs():
  pytrec_eval = pytest.importorskip(
      "pytrec_eval", reason="needs pytrec-eval-terrier (the test extra): trec_eval's C code")
  rng = np.random.default_rng(1)
  qrels, results = {}, {}
  for q in range(30):
    docs = [f"d{i:03d}" for i in rng.choice(300, 150, replace=False)]
    qrels[f"q{q}"] = {d: int(rng.integers(0, 3)) for d in docs[:int(rng.integers(1, 6))]}
    results[f"q{q}"] = {d: float(rng.random()) for d in docs[int(rng.integers(0, 3)):]}
  trec = pytrec_eval.RelevanceEvaluator(
      qrels, {"ndcg_cut.1,5,10,100", "map_cut.10,100", "recall.10,100", "P.10"}).evaluate(results)
  ours = retrieval_metrics.evaluate(results, qrels, ks=(1, 5, 10, 100))
  for name, trec_name in [("ndcg@1", "ndcg_cut_1"), ("ndcg@5", "ndcg_cut_5"),
                          ("ndcg@10", "ndcg_cut_10"), ("ndcg@100", "ndcg_cut_100"),
                          ("map@10", "map_cut_10"), ("map@100", "map_cut_100"),
                          ("recall@10", "recall_10"), ("recall@100", "recall_100"),
                          ("p@10", "P_10")]:
    want = np.mean([trec[q][trec_name] for q in qrels])
    assert ours[name] == pytest.approx(want, abs=1e-9), name


def test_hnsw_recall_against_exact_search():
  pytest.importorskip("faiss", reason="needs faiss-cpu (bert_jax[test] / [ann] installs it)")
  rng = np.random.default_rng(0)
  docs = rng.normal(size=(2000, 32)).astype(np.float32)
  docs /= np.linalg.norm(docs, axis=1, keepdims=True)
  queries = docs[rng.choice(2000, 200, replace=False)] + 0.5 * rng.normal(
      size=(200, 32)).astype(np.float32)
  exact_scores, exact = retrieval.search(queries, docs, 10)
  # Exact search is the brute-force ranking.
  np.testing.assert_array_equal(exact, np.argsort(-(queries @ docs.T), axis=1, kind="stable")[:, :10])
  scores, found = retrieval.search_hnsw(queries, docs, 10, ef_search=128)
  recall = np.mean([len(set(a) & set(b)) / 10 for a, b in zip(found, exact)])
  assert recall >= 0.95, recall
  assert np.all(np.diff(scores, axis=1) <= 1e-6)  # best first
  np.testing.assert_allclose(scores, np.take_along_axis(queries @ docs.T, found, 1), rtol=1e-5)
  # A tiny candidate list is faster and misses more: the option reaches the graph.
  _, rough = retrieval.search_hnsw(queries, docs, 10, m=4, ef_search=10, ef_construction=10)
  assert np.mean([len(set(a) & set(b)) / 10 for a, b in zip(rough, exact)]) < recall


def test_hnsw_without_faiss_is_one_line_before_embedding(ckpt, tmp_path, monkeypatch):
  monkeypatch.setitem(__import__("sys").modules, "faiss", None)  # import faiss -> ImportError
  beir = _beir(tmp_path, ["hello world"], ["q0\td0\t1"])
  with pytest.raises(ValueError, match=r"^--index hnsw needs faiss, which is not installed"):
    retrieval_eval.main(["--checkpoint", ckpt, "--beir_dir", beir, "--index", "hnsw"])


def test_a_query_with_empty_judgements_is_dropped_as_pytrec_eval_drops_it():
  pytrec_eval = pytest.importorskip(
      "pytrec_eval", reason="needs pytrec-eval-terrier (the test extra): trec_eval's C code")
  # q2's judgements are empty: dropped from every mean, as pytrec_eval drops it (counting it as
  # 0 would give ndcg 0.5).
  # q3 is judged with nothing relevant: pytrec_eval (and BEIR, which averages its output)
  # keeps it, scoring 0.
  results = {"q1": {"d1": 1.0, "d2": 0.5}, "q2": {"d1": 1.0}, "q3": {"d1": 1.0},
             "q4": {"d2": 1.0, "d3": 0.5}}
  for qrels in ({"q1": {"d1": 1}, "q2": {}},
                {"q1": {"d1": 1}, "q2": {}, "q3": {"d1": 0, "d2": 0}, "q4": {"d3": 2}}):
    trec = pytrec_eval.RelevanceEvaluator(
        qrels, {"ndcg_cut.1,10", "map_cut.10", "recall.10", "P.10", "recip_rank"}).evaluate(results)
    ours = retrieval_metrics.evaluate(results, qrels, ks=(1, 10))
    assert "q2" not in trec
    for name, trec_name in [("ndcg@1", "ndcg_cut_1"), ("ndcg@10", "ndcg_cut_10"),
                            ("map@10", "map_cut_10"), ("recall@10", "recall_10"),
                            ("p@10", "P_10"), ("mrr@10", "recip_rank")]:
      assert ours[name] == pytest.approx(np.mean([m[trec_name] for m in trec.values()])), name
  issue_case = {"q1": {"d1": 1}, "q2": {}}
  assert retrieval_metrics.evaluate(results, issue_case, ks=(10,))["ndcg@10"] == 1.0
  with pytest.raises(ValueError, match="no judged queries"):
    retrieval_metrics.evaluate(results, {"q2": {}})


def test_qrels_header_coverage_and_duplicate_ids(tmp_path, capsys):
  """qrels without a header keep their first judgement; a corpus holding none of the judged
  documents is an error (not a score of 0.0000 with exit 0); a duplicated _id is an error naming
  both lines (not a silent replacement of the earlier document)."""
  beir = _beir(tmp_path, ["hello world", "red mat"], ["q0\td0\t1", "q1\td1\t1"])
  (tmp_path / "qrels" / "test.tsv").write_text("q0\td0\t1\nq1\td1\t2\n")  # no header
  _, _, qrels = retrieval.read_beir(beir, "test")
  assert qrels == {"q0": {"d0": 1}, "q1": {"d1": 2}}
  (tmp_path / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq0\td0\t1\n")
  assert retrieval.read_beir(beir, "test")[2] == {"q0": {"d0": 1}}
  (tmp_path / "qrels" / "test.tsv").write_text("q0\tx7\t1\nq1\tx8\t1\n")
  with pytest.raises(ValueError, match=r"corpus.jsonl holds none of the 2 documents "
                     r"qrels/test.tsv judges \(e.g. \['x7', 'x8'\]\)"):
    retrieval.read_beir(beir, "test")
  (tmp_path / "qrels" / "test.tsv").write_text("q0\td0\t1\nq1\tx8\t1\n")
  retrieval.read_beir(beir, "test")
  assert "1 of the 2 judged documents are not in corpus.jsonl" in capsys.readouterr().err
  with open(tmp_path / "corpus.jsonl", "a") as f:
    f.write(json.dumps({"_id": "d0", "text": "another text"}) + "\n")
  with pytest.raises(ValueError, match=r"corpus.jsonl:3: _id 'd0' again \(first on line 1\)"):
    retrieval.read_beir(beir, "test")


def test_each_side_takes_its_prompt_as_sentence_transformers_does(monkeypatch):
  """Queries take the checkpoint's 'query' prompt, documents its 'document', 'passage' or
  'corpus' prompt (the first it has), as encode_query and encode_document choose; a name given
  wins; with none of them (None) embedding falls back to the checkpoint's default prompt."""
  prompts = {}
  monkeypatch.setattr(retrieval.embedding, "bundle_defaults", lambda _: {"prompts": prompts})
  assert retrieval.prompt_names(None) == {"query": None, "document": None}
  prompts.update({"query": "q: ", "passage": "p: ", "corpus": "c: "})
  assert retrieval.prompt_names(None) == {"query": "query", "document": "passage"}
  assert retrieval.prompt_names(None, query="", document="corpus") == {"query": "",
                                                                       "document": "corpus"}
