"""Dense retrieval on a BEIR dataset: reading its files, exact and HNSW search, and the
evaluation of a checkpoint (the library of bert_jax.retrieval_eval)."""
import dataclasses
import json
import sys
from typing import Optional, Sequence

from etils import epath
import numpy as np

from bert_jax.checkpoints import loading
from bert_jax.inference import embedding
from bert_jax.tasks.retrieval import metrics as retrieval_metrics


# Nearest-neighbour search: exact matmul top-k, or faiss's HNSW graph (approximate).
INDEXES = ("exact", "hnsw")


# A checkpoint that records no embedding settings is evaluated as BEIR evaluates
# sentence-transformers models: cosine scores (normalised vectors) over 256 tokens.
DEFAULT_NORMALIZE = True
DEFAULT_MAX_LENGTH = 256


# The checkpoint's prompts each side takes, first found first, as sentence-transformers'
# encode_query and encode_document choose them; with none of them, its default prompt.
SIDE_PROMPTS = {"query": ("query",), "document": ("document", "passage", "corpus")}


def prompt_names(pretrained: loading.Pretrained, query: Optional[str] = None,
                 document: Optional[str] = None) -> dict[str, Optional[str]]:
  """{'query', 'document'} -> the prompt name each side is embedded with (as given, else the
  first of SIDE_PROMPTS the checkpoint records, else None: its default prompt)."""
  recorded = embedding.bundle_defaults(pretrained)["prompts"]
  given = {"query": query, "document": document}
  return {side: given[side] if given[side] is not None
          else next((n for n in names if n in recorded), None)
          for side, names in SIDE_PROMPTS.items()}


def settings(pretrained: loading.Pretrained, *, pooling: Optional[str] = None,
             normalize: Optional[bool] = None, max_length: Optional[int] = None,
             prompt_name: Optional[str] = None, given_by: str = "") -> embedding.Settings:
  """The options as given, else the checkpoint's, else BEIR's (embedding.settings); the prompt
  name as the flag `given_by` gave it, else the one its side takes (SIDE_PROMPTS)."""
  chosen = embedding.settings(pretrained, pooling=pooling, normalize=normalize,
                              max_length=max_length, prompt_name=prompt_name,
                              default_normalize=DEFAULT_NORMALIZE,
                              default_max_length=DEFAULT_MAX_LENGTH)
  if prompt_name is not None:
    said = (f"{prompt_name!r} from {given_by}" if given_by
            else f"the checkpoint's {prompt_name!r} prompt")
    chosen = dataclasses.replace(chosen, origin=dict(chosen.origin, prompt=said))
  return chosen


REPORTED = ("ndcg@1", "ndcg@3", "ndcg@5", "ndcg@10", "ndcg@100", "map@10", "recall@10",
            "recall@100", "p@10", "mrr@10")


def _read_jsonl(path: epath.Path, keys: Sequence[str]) -> dict[str, dict]:
  if not path.exists():
    raise FileNotFoundError(f"{path} does not exist (BEIR layout: corpus.jsonl, queries.jsonl, "
                            "qrels/SPLIT.tsv)")
  rows, first_line = {}, {}
  with path.open("r", encoding="utf-8") as f:
    for n, line in enumerate(f, 1):
      if n == 1:  # a byte-order mark (Windows editors), as embed's input takes it
        line = line.removeprefix("\ufeff")
      if not line.strip():
        continue
      try:
        row = json.loads(line)
      except json.JSONDecodeError as e:
        raise ValueError(f"{path}:{n}: not a JSON line ({e.msg})") from None
      missing = [k for k in keys if not isinstance(row.get(k), str)]
      if missing:
        raise ValueError(f"{path}:{n}: missing string field(s) {missing}")
      if row["_id"] in rows:  # was: the later row silently replaced the earlier one
        raise ValueError(f"{path}:{n}: _id {row['_id']!r} again (first on line "
                         f"{first_line[row['_id']]})")
      rows[row["_id"]], first_line[row["_id"]] = row, n
  if not rows:
    raise ValueError(f"{path} holds no rows")
  return rows


def read_qrels(path: epath.Path) -> dict[str, dict[str, int]]:
  """qrels/SPLIT.tsv -> {query id: {document id: relevance}}; a first line whose score is an
  integer is a judgement, not BEIR's header, and is kept."""
  if not path.exists():
    raise FileNotFoundError(f"{path} does not exist (the split's judgements)")
  qrels: dict[str, dict[str, int]] = {}
  lines = path.read_text(encoding="utf-8").removeprefix("\ufeff").splitlines()
  first = lines[0].split("\t") if lines else []
  has_header = len(first) < 3 or not first[2].strip().lstrip("-").isdigit()
  for n, line in enumerate(lines[1:] if has_header else lines, 2 if has_header else 1):
    if not line.strip():
      continue
    parts = line.split("\t")
    try:
      query, doc, score = parts[0], parts[1], int(parts[2])
    except (IndexError, ValueError):
      raise ValueError(f"{path}:{n}: expected query-id<TAB>corpus-id<TAB>integer score, got "
                       f"{line[:80]!r}") from None
    qrels.setdefault(query, {})[doc] = score
  if not qrels:
    raise ValueError(f"{path} holds no judgements")
  return qrels


def read_beir(beir_dir: str, split: str):
  """(corpus, queries, qrels) of a BEIR directory; qrels name only known ids."""
  root = epath.Path(beir_dir)
  qrels = read_qrels(root / "qrels" / f"{split}.tsv")
  corpus = _read_jsonl(root / "corpus.jsonl", ("_id", "text"))
  queries = _read_jsonl(root / "queries.jsonl", ("_id", "text"))
  unknown = sorted(q for q in qrels if q not in queries)
  if unknown:
    raise ValueError(f"qrels/{split}.tsv judges {len(unknown)} query id(s) not in queries.jsonl, "
                     f"e.g. {unknown[:3]}")
  judged = {d for docs in qrels.values() for d in docs}
  absent = sorted(judged - set(corpus))
  if len(absent) == len(judged):  # was: scored 0.0000 with exit status 0
    raise ValueError(f"corpus.jsonl holds none of the {len(judged)} documents qrels/{split}.tsv "
                     f"judges (e.g. {absent[:3]}): another dataset's corpus?")
  if absent:
    print(f"warning: {len(absent)} of the {len(judged)} judged documents are not in corpus.jsonl "
          f"(e.g. {absent[:3]}); they count as not retrieved", file=sys.stderr)
  return corpus, queries, qrels


def document_text(doc: dict) -> str:
  """BEIR's SentenceBERT input: title and text joined by a space."""
  return (doc.get("title", "") + " " + doc["text"]).strip()


def search(query_emb: np.ndarray, doc_emb: np.ndarray, top_k: int,
           block: int = 256) -> tuple[np.ndarray, np.ndarray]:
  """Exact top-k by dot product in blocks of queries: (scores [queries, k], document indices),
  best first."""
  k = min(top_k, len(doc_emb))
  scores, index = [], []
  for i in range(0, len(query_emb), block):
    s = query_emb[i:i + block] @ doc_emb.T  # [block, docs]
    top = np.argpartition(-s, k - 1, axis=1)[:, :k]
    top_s = np.take_along_axis(s, top, 1)
    order = np.argsort(-top_s, axis=1, kind="stable")
    scores.append(np.take_along_axis(top_s, order, 1))
    index.append(np.take_along_axis(top, order, 1))
  return np.concatenate(scores), np.concatenate(index)


def _faiss():
  """The faiss module (optional); a one-line ValueError says how to install it."""
  try:
    import faiss  # pylint: disable=g-import-not-at-top
  except ImportError:
    raise ValueError("--index hnsw needs faiss, which is not installed: pip install faiss-cpu "
                     "(from a clone: pip install -e '.[ann]')") from None
  return faiss


def search_hnsw(query_emb: np.ndarray, doc_emb: np.ndarray, top_k: int, *, m: int = 32,
                ef_construction: int = 200, ef_search: int = 128) -> tuple[np.ndarray, np.ndarray]:
  """Approximate top-k by dot product with faiss's IndexHNSWFlat, as `search`.

  m, ef_construction, ef_search are HNSW's (ef_search at least top_k; higher is slower and
  closer to exact). An index of -1 (score -inf) where the graph found fewer than k documents.
  """
  faiss = _faiss()
  k = min(top_k, len(doc_emb))
  index = faiss.IndexHNSWFlat(doc_emb.shape[1], m, faiss.METRIC_INNER_PRODUCT)
  index.hnsw.efConstruction = ef_construction
  index.add(np.ascontiguousarray(doc_emb, np.float32))
  index.hnsw.efSearch = max(ef_search, k)
  scores, found = index.search(np.ascontiguousarray(query_emb, np.float32), k)
  return np.where(found >= 0, scores, -np.inf).astype(np.float32), found


def evaluate(pretrained: loading.Pretrained, data: tuple, *, max_length: Optional[int] = None,
             pooling: Optional[str] = None, normalize: Optional[bool] = None,
             batch_size: int = 32, prompts: Optional[dict] = None,
             top_k: int = 100, index: str = "exact", hnsw_ef_search: int = 128,
             quiet: bool = True) -> dict:
  """Embeds, searches ('exact' or 'hnsw') and scores one BEIR split: REPORTED metrics plus
  queries, documents, truncated_documents and seconds. Options None: the checkpoint's, else
  256 tokens, mean pooling, normalised. prompts: {'query', 'document'} -> prompt name
  (`prompt_names`; None: `prompt_names` of the checkpoint)."""
  corpus, queries, qrels = data
  prompts = prompts or prompt_names(pretrained)
  doc_ids = list(corpus)
  query_ids = list(qrels)
  chosen = settings(pretrained, pooling=pooling, normalize=normalize, max_length=max_length)
  options = dict(pooling=chosen.pooling, normalize=chosen.normalize, batch_size=batch_size,
                 max_length=min(chosen.max_length, pretrained.config.max_position_embeddings))
  doc_emb, doc_stats = embedding.embed(pretrained, [document_text(corpus[d]) for d in doc_ids],
                                       progress="" if quiet else "encoding the corpus",
                                       prompt_name=prompts["document"], **options)
  query_emb, query_stats = embedding.embed(pretrained, [queries[q]["text"] for q in query_ids],
                                           progress="" if quiet else "encoding the queries",
                                           prompt_name=prompts["query"], **options)
  if not quiet:
    print(f"searching: {len(query_ids):,} queries over {len(doc_ids):,} documents ({index})",
          file=sys.stderr, flush=True)
  # One more than asked, so that dropping a query's own id still leaves top_k.
  if index == "hnsw":
    scores, found = search_hnsw(query_emb, doc_emb, top_k + 1, ef_search=hnsw_ef_search)
  else:
    scores, found = search(query_emb, doc_emb, top_k + 1)
  results = {}
  for qi, q in enumerate(query_ids):
    hits = {doc_ids[j]: float(s) for s, j in zip(scores[qi], found[qi])
            if j >= 0 and doc_ids[j] != q}
    results[q] = dict(list(hits.items())[:top_k])
  metrics = retrieval_metrics.evaluate(results, qrels)
  out = {name: metrics[name] for name in REPORTED}
  out.update(queries=len(query_ids), documents=len(doc_ids),
             truncated_documents=doc_stats.truncated,
             seconds=doc_stats.seconds + query_stats.seconds)
  return out
