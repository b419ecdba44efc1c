"""PretrainData end to end on tiny corpora: determinism, resume, hosts, eval, bad input."""
import collections
import gzip
import itertools
import logging
import random
import re

import numpy as np
import pytest

from bert_jax.data.sources import builtin_corpus
from bert_jax.data.sources import raw_docs
from bert_jax.data.sources import registry as source_registry
from bert_jax.data.stream import pretrain_data
from bert_jax import prepare_data
from bert_jax.runtime.cpu_tensorflow import tf
from configs import pretrain as pretrain_config

_WORDS = ("the cat sat on a mat and dog ran far away with big red ball under tree while sun "
          "was high in sky over green hill near old town").split()
# Held-out documents (every 3rd) carry this word and no other document does.
_EVAL_WORD = "zebra"
_VOCAB_FILE = None  # Set for each test by the _shared_vocab fixture.
_VOCAB = (["[PAD]", "[unused0]", "[unused1]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", ".", ","]
          + _WORDS + [_EVAL_WORD] + ["un", "##do", "##ing", "##s"])


def _vocab(tmp_path, tokens=_VOCAB):
  (tmp_path / "vocab").mkdir(exist_ok=True)
  path = tmp_path / "vocab" / "vocab.txt"
  path.write_text("\n".join(tokens) + "\n", encoding="utf-8")
  return str(path)


@pytest.fixture(scope="module")
def vocab_file(tmp_path_factory):
  """One vocab file for the module: its tokenizer (and traced graph) is shared."""
  return _vocab(tmp_path_factory.mktemp("shared"))


@pytest.fixture(autouse=True)
def _shared_vocab(vocab_file, monkeypatch):
  monkeypatch.setattr(__import__(__name__), "_VOCAB_FILE", vocab_file, raising=False)


def _sentence(rng, eval_doc=False):
  words = [rng.choice(_WORDS) for _ in range(rng.randint(3, 14))]
  if rng.random() < 0.3:
    words.insert(rng.randint(0, len(words)), rng.choice(["undoing", "undo", "cats", "dogs"]))
  if eval_doc:
    words.insert(rng.randint(0, len(words)), _EVAL_WORD)
  return " ".join(words) + "."


def _write_corpus(tmp_path, num_files=1, docs_per_file=12, seed=0, every_nth_eval=3):
  """Google-layout files; document i of a file is held out when i % every_nth_eval == -1."""
  rng = random.Random(seed)
  paths = []
  for f in range(num_files):
    docs = []
    for d in range(docs_per_file):
      held_out = every_nth_eval and d % every_nth_eval == every_nth_eval - 1
      docs.append("\n".join(_sentence(rng, held_out) for _ in range(rng.randint(1, 9))))
    path = tmp_path / f"part-{f:02d}.txt"
    path.write_text("\n\n".join(docs) + "\n", encoding="utf-8")
    paths.append(path)
  return paths


def _config(tmp_path, files, **overrides):
  c = pretrain_config.get_config("tiny")
  c.data.source = "files"
  c.data.files = files
  c.data.vocab_file = _VOCAB_FILE
  c.data.eval_every_nth_document = 3
  c.data.max_predictions_per_seq = 6
  for k, v in overrides.items():
    c.data[k] = v
  return c.data


def _data(data_config, seq_len=32, batch=4, seed=0, **kw):
  return pretrain_data.PretrainData(data_config, seq_len=seq_len, global_batch_size=batch,
                                    seed=seed, **kw)


def _take(it, n):
  return [next(it) for _ in range(n)]


def _assert_same(batches_a, batches_b):
  assert len(batches_a) == len(batches_b)
  for a, b in zip(batches_a, batches_b):
    assert a.keys() == b.keys()
    for k in a:
      np.testing.assert_array_equal(a[k], b[k], err_msg=k)


def _unmasked(batch):
  ids = batch["input_ids"].copy()
  r, k = np.nonzero(batch["masked_lm_weights"] > 0)
  ids[r, batch["masked_lm_positions"][r, k]] = batch["masked_lm_ids"][r, k]
  return ids


def _epoch_rows(data, epoch=0):
  return data.epoch_rows(epoch)


MODES = [dict(mode="nsp"), dict(mode="full_sentences"),
         dict(mode="full_sentences", packing=True, masking="whole_word"),
         dict(mode="sop", masking="ngram")]
MODE_IDS = ["nsp", "full", "packed_wwm", "sop_ngram"]


@pytest.mark.parametrize("mode", MODES, ids=MODE_IDS)
def test_batches_have_bert_features_and_layout(tmp_path, mode):
  _write_corpus(tmp_path, num_files=2)
  data = _data(_config(tmp_path, str(tmp_path / "*.txt"), **mode))
  batch = next(data.train_iterator())
  b, length, p = 4, 32, 6
  shapes = {"input_ids": (b, length), "input_mask": (b, length), "segment_ids": (b, length),
            "masked_lm_positions": (b, p), "masked_lm_ids": (b, p), "masked_lm_weights": (b, p),
            "next_sentence_labels": (b,)}
  if mode.get("packing"):
    shapes["position_ids"] = (b, length)
  assert {k: v.shape for k, v in batch.items()} == shapes
  for k, v in batch.items():
    assert v.dtype == (np.float32 if k == "masked_lm_weights" else np.int32), k
  tok = data.tokenizer
  ids = _unmasked(batch)
  assert np.all(ids[:, 0] == tok.cls_id)
  real = batch["input_mask"] > 0
  assert np.all(ids[~real] == tok.pad_id) and np.all(ids[real] != tok.pad_id)
  assert data.has_pairs == (mode["mode"] in ("nsp", "sop"))
  if data.has_pairs:
    for r in range(b):
      n = real[r].sum()
      seps = np.flatnonzero(ids[r, :n] == tok.sep_id)
      assert len(seps) == 2 and seps[1] == n - 1
      np.testing.assert_array_equal(batch["segment_ids"][r, :n], np.arange(n) > seps[0])
  else:
    assert np.all(batch["segment_ids"] == 0) and np.all(batch["next_sentence_labels"] == 0)
  if mode.get("packing"):
    for r in range(b):
      num = batch["input_mask"][r]
      starts = np.flatnonzero(np.diff(np.append(0, num)) != 0)
      starts = starts[num[starts] > 0]
      np.testing.assert_array_equal(num[starts], np.arange(1, len(starts) + 1))
      np.testing.assert_array_equal(ids[r, starts], tok.cls_id)
      np.testing.assert_array_equal(batch["position_ids"][r, starts], 0)


@pytest.mark.parametrize("mode", MODES, ids=MODE_IDS)
def test_determinism_and_resume_across_epochs(tmp_path, mode):
  _write_corpus(tmp_path, num_files=3, docs_per_file=5)
  cfg = _config(tmp_path, str(tmp_path / "*.txt"), **mode)
  data = _data(cfg)
  rows = _epoch_rows(data)
  n = 3 * rows // 4 + 3  # batches of 4 rows: about three epochs
  stream = _take(data.train_iterator(), n)
  _assert_same(stream, _take(_data(cfg).train_iterator(), n))
  for k in (1, rows // 4, rows // 4 + 1, n - 2):
    _assert_same(stream[k:], _take(_data(cfg).train_iterator(start_position=k), n - k))
  other_seed = _take(_data(cfg, seed=1).train_iterator(), 3)
  assert not np.array_equal(other_seed[0]["input_ids"], stream[0]["input_ids"])


def test_epochs_reshuffle_and_remask_the_same_examples(tmp_path):
  _write_corpus(tmp_path, num_files=2, docs_per_file=8, every_nth_eval=0)
  cfg = _config(tmp_path, str(tmp_path / "*.txt"), mode="full_sentences",
                eval_every_nth_document=0)
  data = _data(cfg, batch=1)
  rows = _epoch_rows(data)
  stream = _take(data.train_iterator(), 2 * rows)
  first, second = stream[:rows], stream[rows:]
  key = lambda b: tuple(_unmasked(b)[0])  # noqa: E731
  assert sorted(map(key, first)) == sorted(map(key, second))  # Same full-sentence rows ...
  assert [key(b) for b in first] != [key(b) for b in second]  # ... in another order ...
  by_row = {key(b): b["masked_lm_positions"][0] for b in first}
  same_mask = sum(np.array_equal(by_row[key(b)], b["masked_lm_positions"][0]) for b in second)
  assert same_mask < rows / 2  # ... with new masks.


def _corpus_token_counts(data, paths, held_out_every=0):
  """Counter of every token of the training documents (tokenized independently)."""
  counts = collections.Counter()
  for path in paths:
    docs = path.read_text(encoding="utf-8").strip("\n").split("\n\n")
    for i, doc in enumerate(docs):
      if held_out_every and i % held_out_every == held_out_every - 1:
        continue
      for ids in data.tokenizer.tokenize_to_ids(doc.split("\n")):
        counts.update(ids)
  return counts


def test_a_host_invariant_stream_gives_each_host_its_rows_of_the_one_host_batches(tmp_path):
  _write_corpus(tmp_path, num_files=2)
  cfg = _config(tmp_path, str(tmp_path / "*.txt"), host_invariant_stream=True)
  one = _data(cfg, batch=4)
  train, held_out = _take(one.train_iterator(), 3), list(one.eval_iterator(2))
  for host in range(2):
    data = _data(cfg, batch=4, process_index=host, process_count=2)
    assert data.per_host_batch_size == 2
    rows = slice(2 * host, 2 * host + 2)
    for got, whole in zip(_take(data.train_iterator(start_position=1), 2) + list(
        data.eval_iterator(2)), train[1:] + held_out):
      assert got.keys() == whole.keys()
      for k in got:
        np.testing.assert_array_equal(got[k], whole[k][rows])


@pytest.mark.parametrize("num_files", [4, 1], ids=["files_by_host", "documents_by_host"])
def test_two_hosts_see_disjoint_data_that_covers_the_input(tmp_path, num_files):
  paths = _write_corpus(tmp_path, num_files=num_files, docs_per_file=10)
  cfg = _config(tmp_path, str(tmp_path / "*.txt"), mode="full_sentences")
  seen = []
  for host in range(2):
    data = _data(cfg, batch=2, process_index=host, process_count=2)
    assert data.per_host_batch_size == 1
    rows = _epoch_rows(data)
    ids = np.concatenate([_unmasked(b) for b in _take(data.train_iterator(), rows)])
    tok = data.tokenizer
    ids = ids[~np.isin(ids, [tok.cls_id, tok.sep_id, tok.pad_id])]
    seen.append(collections.Counter(ids.tolist()))
  expected = _corpus_token_counts(data, paths, held_out_every=3)
  assert seen[0] + seen[1] == expected
  assert seen[0] and seen[1] and seen[0] != seen[1]
  assert _EVAL_WORD not in str(expected) and data.tokenizer.vocab[_EVAL_WORD] not in expected


def test_eval_iterator_uses_only_held_out_documents_and_is_deterministic(tmp_path):
  _write_corpus(tmp_path, num_files=2, docs_per_file=9)
  data = _data(_config(tmp_path, str(tmp_path / "*.txt"), mode="nsp"))
  eval_id = data.tokenizer.vocab[_EVAL_WORD]
  first = list(data.eval_iterator(5))
  assert len(first) == 5
  _assert_same(first, list(data.eval_iterator(5)))
  _assert_same(first, list(_data(_config(tmp_path, str(tmp_path / "*.txt"),
                                         mode="nsp")).eval_iterator(5)))
  for b in first:
    ids = _unmasked(b)
    # Every example comes from a held-out document (NSP's random B as well).
    assert np.all(np.any(ids == eval_id, axis=1))
  for b in _take(data.train_iterator(), 20):
    assert not np.any(_unmasked(b) == eval_id)


def test_no_held_out_documents_is_a_clear_error(tmp_path):
  _write_corpus(tmp_path, docs_per_file=2)
  data = _data(_config(tmp_path, str(tmp_path / "*.txt"), eval_every_nth_document=5))
  with pytest.raises(ValueError, match="no held-out examples"):
    list(data.eval_iterator(1))
  data = _data(_config(tmp_path, str(tmp_path / "*.txt"), eval_every_nth_document=0))
  with pytest.raises(ValueError, match="eval_every_nth_document"):
    data.eval_iterator(1)


def test_the_stream_is_a_tf_data_dataset(tmp_path):
  _write_corpus(tmp_path, num_files=2)
  data = _data(_config(tmp_path, str(tmp_path / "*.txt"), mode="nsp"))
  ds = data.dataset(3)
  assert isinstance(ds, tf.data.Dataset)
  assert ds.element_spec["input_ids"].shape == (4, 32)
  assert ds.element_spec["masked_lm_weights"].dtype == tf.float32
  _assert_same(list(ds.take(4).as_numpy_iterator()), _take(data.train_iterator(3), 4))
  # Iterated again, past the end of the first epoch: the same stream from batch 3 again.
  n = data.epoch_rows(0) // 4 + 2
  _assert_same(list(ds.take(n).as_numpy_iterator()), _take(data.train_iterator(3), n))


def _corpus_lines(tmp_path, num_docs, seed=0):
  rng = random.Random(seed)
  return "\n\n".join("\n".join(_sentence(rng, d % 3 == 2) for _ in range(rng.randint(1, 6)))
                     for d in range(num_docs)) + "\n"


@pytest.mark.parametrize("fmt", ["sentence_per_line", "document_per_line"])
def test_a_file_read_in_blocks_gives_every_document_once(tmp_path, fmt):
  text = _corpus_lines(tmp_path, 60)
  if fmt == "document_per_line":
    text = text.replace("\n\n", "\0").replace("\n", " ").replace("\0", "\n")
  path = tmp_path / "big.txt"
  path.write_text(text, encoding="utf-8")
  whole = _config(tmp_path, str(path), format=fmt, eval_every_nth_document=0)
  blocks = _config(tmp_path, str(path), format=fmt, eval_every_nth_document=0,
                   block_mb=700 / (1 << 20))  # ~700-byte blocks
  files = source_registry.get("files")
  assert len(source_registry.list_shards(files, blocks)) == -(-len(text.encode()) // 700) > 5
  def docs(c):
    out = []
    for shard in source_registry.list_shards(files, c):
      raw = source_registry.read_documents(shard, c)
      s = [x.decode() for x in raw.sentences.numpy()]
      out += [s[a:b] for a, b in zip(raw.doc_splits[:-1], raw.doc_splits[1:])]
    return out
  assert docs(blocks) == docs(whole)
  data = _data(blocks, batch=2)
  rows = data.epoch_rows(0)
  stream = _take(data.train_iterator(), rows)  # two epochs of batches of 2
  _assert_same(stream[rows // 2 + 1:], _take(_data(blocks, batch=2).train_iterator(
      rows // 2 + 1), rows - rows // 2 - 1))


def test_prepared_parts_give_the_text_stream(tmp_path, capsys):
  _write_corpus(tmp_path, num_files=3, docs_per_file=6)
  (tmp_path / "part-01.txt").write_text(_corpus_lines(tmp_path, 30, seed=1), encoding="utf-8")
  text = _config(tmp_path, str(tmp_path / "*.txt"), block_mb=900 / (1 << 20), mode="nsp")
  out = str(tmp_path / "prepared")
  info = prepare_data.prepare(text, out, quiet=False)
  assert len(info["parts"]) > 3  # part-01.txt in blocks
  shown = capsys.readouterr().out  # a header, progress from the start, the parts
  # The first line comes before TensorFlow's import, which takes seconds.
  assert shown.startswith("bert_jax.prepare_data: loading TensorFlow and the tokenizer ...\n")
  assert "\nbert_jax.prepare_data: tokenize a corpus into numpy parts\n" in shown
  assert "preparing: 0/" in shown and re.search(r"preparing: [\d,]+ KiB in 0:", shown)
  assert f"  out      {out} (a part per shard" in shown
  prepared = _config(tmp_path, "", source="prepared", prepared_dir=out, mode="nsp")
  a, b = _data(text), _data(prepared)
  n = a.epoch_rows(0) // 4 + 2  # into the second epoch
  assert b.epoch_rows(0) == a.epoch_rows(0)
  _assert_same(_take(a.train_iterator(), n), _take(b.train_iterator(), n))
  _assert_same(list(a.eval_iterator(2)), list(b.eval_iterator(2)))
  _assert_same(_take(a.train_iterator(n - 2), 2), _take(b.train_iterator(n - 2), 2))
  with pytest.raises(ValueError, match="already holds a prepared corpus"):
    prepare_data.prepare(text, out)
  other = _config(tmp_path, "", source="prepared", prepared_dir=out, lowercase=False)
  with pytest.raises(ValueError, match="tokenized with another tokenizer.*lowercase: True vs False"):
    _data(other)
  with pytest.raises(FileNotFoundError, match="holds no prepared.json"):
    _data(_config(tmp_path, "", source="prepared", prepared_dir=str(tmp_path)))


# -- Bad input ----------------------------------------------------------------------------


def test_bad_config_and_input_are_refused_up_front(tmp_path):
  _write_corpus(tmp_path)
  glob = str(tmp_path / "*.txt")
  cases = [
      (dict(files=str(tmp_path / "nothing-*.txt")), FileNotFoundError, "matches no file"),
      (dict(files=str(tmp_path / "missing.txt")), FileNotFoundError, "does not exist"),
      (dict(mode="mlm"), ValueError, "config.data.mode"),
      (dict(mode="nsp", packing=True), ValueError, "packing"),
      (dict(max_predictions_per_seq=33), ValueError, "max_predictions_per_seq"),
      (dict(format="xml"), ValueError, "config.data.format"),
      (dict(source="web"), ValueError, "config.data.source"),
      (dict(eval_every_nth_document=1), ValueError, "eval_every_nth_document"),
      (dict(mask_prob=0.0), ValueError, "mask_prob"),
      (dict(tokenizer="bpe"), ValueError, "config.data.tokenizer"),
      (dict(vocab_file=str(tmp_path / "nope.txt")), FileNotFoundError, "nope.txt"),
  ]
  for overrides, error, match in cases:
    with pytest.raises(error, match=match):
      files = overrides.pop("files", glob)
      _data(_config(tmp_path, files, **overrides))
  with pytest.raises(ValueError, match="multiple of the process count 3"):
    _data(_config(tmp_path, glob), batch=4, process_count=3)


def test_binary_and_truncated_shards_are_refused_before_any_is_read(tmp_path):
  paths = _write_corpus(tmp_path, num_files=3)
  glob = str(tmp_path / "part-*")
  # A truncated .gz that is not the first shard: refused up front, not a crash when its turn
  # comes (on every restart).
  gz = gzip.compress(paths[2].read_bytes())
  paths[2].unlink()
  (tmp_path / "part-02.txt.gz").write_bytes(gz[:len(gz) // 2])
  with pytest.raises(ValueError, match=r"cannot read .*part-02\.txt\.gz"):
    _data(_config(tmp_path, glob))
  (tmp_path / "part-02.txt.gz").write_bytes(gz)
  assert next(_data(_config(tmp_path, glob)).train_iterator())["input_ids"].shape == (4, 32)
  # A binary file among the text: refused, not warned about and then trained on.
  (tmp_path / "part-03.bin").write_bytes(np.random.default_rng(0).bytes(5000))
  with pytest.raises(ValueError, match=r"part-03\.bin is not a text file \(NUL bytes"):
    _data(_config(tmp_path, glob))
  (tmp_path / "part-03.bin").write_bytes(bytes(range(128, 256)) * 40)  # Latin-1, no NUL
  with pytest.raises(ValueError, match=r"part-03\.bin is not UTF-8 text"):
    _data(_config(tmp_path, glob))


def test_vocab_casing_must_match_lowercase(tmp_path):
  _write_corpus(tmp_path)
  cfg = _config(tmp_path, str(tmp_path / "*.txt"))
  capitals = [w.capitalize() for w in _WORDS]
  cfg.vocab_file = _vocab(tmp_path, _VOCAB + capitals)
  with pytest.raises(ValueError, match=r"is a cased vocab \(\d+ of its \d+ tokens have capitals"
                                       r".*set config.data.lowercase=False"):
    _data(cfg)
  cfg.lowercase = False
  assert next(_data(cfg).train_iterator())["input_ids"].shape == (4, 32)
  # An uncased vocab (large enough to judge) read with capitals kept.
  words = [w for w in map("".join, itertools.product("abcdefghij", repeat=3)) if w not in _VOCAB]
  (tmp_path / "uncased").mkdir()
  cfg.vocab_file = _vocab(tmp_path / "uncased", _VOCAB + words)
  with pytest.raises(ValueError, match="is an uncased vocab.*set config.data.lowercase=True"):
    _data(cfg)


def test_a_vocab_that_does_not_fit_the_corpus_is_refused(tmp_path):
  _write_corpus(tmp_path)
  cfg = _config(tmp_path, str(tmp_path / "*.txt"))
  cfg.vocab_file = _vocab(tmp_path, _VOCAB[:9] + _WORDS[:2])  # specials, '.', ',', 2 words
  with pytest.raises(ValueError, match=r"part-00.txt.*: \d+% of its \d+ tokens are \[UNK\]"
                                       r" with the 11-token vocab"):
    next(_data(cfg).train_iterator())


@pytest.mark.parametrize("missing", ["[CLS]", "[SEP]", "[MASK]", "[UNK]"])
def test_vocab_without_a_special_token_is_refused(tmp_path, missing):
  _write_corpus(tmp_path)
  cfg = _config(tmp_path, str(tmp_path / "*.txt"))
  cfg.vocab_file = _vocab(tmp_path, [t for t in _VOCAB if t != missing])
  with pytest.raises(ValueError, match=r"vocab.txt.*lacks the special token.*" + missing[1:-1]):
    _data(cfg)


def test_empty_files_skipped_and_all_empty_refused(tmp_path, caplog):
  (tmp_path / "empty.txt").write_bytes(b"")
  with pytest.raises(ValueError, match="every matched file is empty"):
    _data(_config(tmp_path, str(tmp_path / "*.txt")))
  _write_corpus(tmp_path)
  with caplog.at_level(logging.WARNING):
    data = _data(_config(tmp_path, str(tmp_path / "*.txt")))
  assert "skipping empty file" in caplog.text and "empty.txt" in caplog.text
  assert next(data.train_iterator())["input_ids"].shape == (4, 32)


def test_invalid_utf8_replaced_and_counted_empty_documents_skipped(tmp_path, caplog):
  path = tmp_path / "bad.txt"
  good = "the cat sat on a mat.\nthe dog ran far away.\n"
  # Two invalid sequences; a document of blank-looking lines (control characters
  # and spaces only); runs of blank lines.
  path.write_bytes(good.encode() + b"a big \xff red ball \xc3.\n\n\n\n\x01\x02\n \t \n\n"
                   + good.encode())
  cfg = _config(tmp_path, str(path), mode="full_sentences", eval_every_nth_document=0)
  data = _data(cfg)
  with caplog.at_level(logging.WARNING):
    batch = next(data.train_iterator())
  assert data.stats["invalid_utf8"] == 2
  assert "bad.txt: 2 invalid UTF-8" in caplog.text
  assert data.stats["empty_documents"] == 1
  caplog.clear()  # a later read of the same shard (the next epoch) replaces, but says nothing
  assert raw_docs.decode(path.read_bytes(), str(path))[1] == 2
  assert "invalid UTF-8" not in caplog.text
  ids = _unmasked(batch)
  tok = data.tokenizer
  text = [t for t in tok.convert_ids_to_tokens(ids[ids > 0]) if not t.startswith("[")]
  assert "big" in text and "red" in text and "ball" in text


def test_a_line_longer_than_seq_len_is_split_not_dropped(tmp_path):
  rng = random.Random(0)
  long_line = " ".join(rng.choice(_WORDS) for _ in range(300))
  path = tmp_path / "long.txt"
  path.write_text(long_line + "\n", encoding="utf-8")
  for mode in ("full_sentences", "nsp"):
    data = _data(_config(tmp_path, str(path), mode=mode, eval_every_nth_document=0,
                         shuffle_mb=0), batch=1)
    rows = _epoch_rows(data)
    ids = np.concatenate([_unmasked(b) for b in _take(data.train_iterator(), rows)])
    assert np.all((ids > 0).sum(axis=1) <= 32)
    tok = data.tokenizer
    content = ids[~np.isin(ids, [tok.cls_id, tok.sep_id, tok.pad_id])]
    if mode == "full_sentences":  # Every token, in order (shuffle_mb=0).
      np.testing.assert_array_equal(content, tok.tokenize_to_ids([long_line])[0])
    else:  # Pieces fill pairs; truncation may cut the ends of pairs only.
      assert rows >= 300 // 32 and len(content) > 0.8 * 300


def test_document_per_line_and_gzip(tmp_path):
  text = ("The cat sat on a mat. The dog ran far away! A big red ball? under tree.\n"
          "\n"
          "Old town was near green hill. The sun was high in sky.\n")
  with gzip.open(tmp_path / "docs.txt.gz", "wt", encoding="utf-8") as f:
    f.write(text)
  cfg = _config(tmp_path, str(tmp_path / "*.gz"), format="document_per_line", mode="nsp",
                eval_every_nth_document=0)
  data = _data(cfg, batch=1)
  shard = data._tokenized(data._shards[0], "train")  # pylint: disable=protected-access
  assert shard.num_docs == 2
  # Sentences split at ". " / "! " / "? " before a capital: 3 + 2 ("? under" stays).
  assert shard.num_sentences == 5
  assert next(data.train_iterator())["input_ids"].shape == (1, 32)


def test_builtin_corpus_cleaning():
  doc = """Return the thing.  It does   stuff!

    >>> thing()
    42

  Indented literal block
  that is code.

Heading
=======

Ends here. A second sentence follows, e.g. this one."""
  assert builtin_corpus.clean_document(doc) == [
      "Return the thing.", "It does stuff!", "Ends here.",
      "A second sentence follows, e.g. this one."]


def test_builtin_source_gives_batches(tmp_path):
  c = pretrain_config.get_config("tiny")
  data = pretrain_data.PretrainData(c.data, seq_len=64, global_batch_size=8, seed=0)
  assert data.vocab_size == 30522 and data.lowercase and data.has_pairs
  assert data.vocab_file.endswith("bert-base-uncased-vocab.txt")
  batch = next(data.train_iterator())
  assert batch["input_ids"].shape == (8, 64)
  tokens = data.tokenizer.convert_ids_to_tokens(_unmasked(batch).ravel())
  assert sum(t in ("the", "a", "of", "is") for t in tokens) > 8  # English prose


_EXIT_SCRIPT = """
import random, sys
from bert_jax.data.stream import pretrain_data
from configs import pretrain as pretrain_config
d, vocab = sys.argv[1], sys.argv[2]
words = [w for w in open(vocab).read().split()[9:] if w.isalpha()]
rng = random.Random(0)
for f in range(4):  # 4 files of ~1 MB: each pool keeps its stage busy for a while
  with open(f"{d}/part-{f}.txt", "w") as out:
    for _ in range(2000):
      out.write("\\n".join(" ".join(rng.choices(words, k=12)) + "." for _ in range(8)) + "\\n\\n")
c = pretrain_config.get_config("tiny").data
c.source, c.files, c.vocab_file = "files", d + "/*.txt", vocab
c.shuffle_mb = c.block_mb = 1.0
data = pretrain_data.PretrainData(c, seq_len=32, global_batch_size=4, seed=0)
it = iter(data.dataset())  # the tf.data iterator itself, never closed by the program
for _ in range(3):
  next(it)
print("exiting", flush=True)
"""


@pytest.mark.slow
def test_a_program_exits_while_a_dataset_iterator_is_still_running(tmp_path):
  """Finalization deletes an open tf.data iterator, which waits for its numpy functions in
  flight; those can no longer take the GIL then, so the exit would hang. The atexit hook refuses
  new calls and lets running ones finish first."""
  import pathlib  # pylint: disable=g-import-not-at-top
  import subprocess  # pylint: disable=g-import-not-at-top
  import sys  # pylint: disable=g-import-not-at-top
  root = pathlib.Path(__file__).resolve().parents[1]
  proc = subprocess.run([sys.executable, "-c", _EXIT_SCRIPT, str(tmp_path), _VOCAB_FILE],
                        cwd=root, capture_output=True, text=True, timeout=120, check=False)
  assert proc.returncode == 0, proc.stderr[-2000:]
  assert proc.stdout == "exiting\n"


def test_whitespace_only_files_skipped_and_a_whitespace_corpus_refused(tmp_path, caplog):
  """40 KB of spaces, tabs and blank lines: one line before the pipeline starts (not a
  TensorFlow traceback from inside it)."""
  (tmp_path / "blank.txt").write_text(" \t\n" * 13_000 + "\n\n", encoding="utf-8")
  with pytest.raises(ValueError, match=r"every matched file is empty or only whitespace"):
    _data(_config(tmp_path, str(tmp_path / "*.txt")))
  _write_corpus(tmp_path)
  with caplog.at_level(logging.WARNING):
    data = _data(_config(tmp_path, str(tmp_path / "*.txt")))
  assert "blank.txt: only whitespace" in caplog.text
  assert next(data.train_iterator())["input_ids"].shape == (4, 32)
