"""Pretraining input at pod scale: 1, 16 and 256 hosts simulated by process_index /
process_count in one process, on a corpus of many small files and on one of fewer files than
hosts.

A host's share is defined by what its training stream holds: every document starts with a
marker sentence `mark F F F D D D` (its file and its index in the file), whole in one row
(7 tokens, rows of 32), so the markers in one epoch of a host's stream, read back from the
unmasked rows, are the documents it draws from. The hosts' shares must be disjoint, each
document once, and together every training document of the corpus.

What a host reads is counted by wrapping tf.io.gfile.GFile (every read of a text shard, and
of the listing's checks, goes through it): a host must open no file outside its own shards,
at start-up or later, so the bytes a host reads do not grow with the corpus it does not take.
Streams run on the 'python' loader here, whose threads are joined when the iterator closes
(the counts belong to one host); it gives the tf.data stream's batches (the resume test runs
tf.data itself).
"""
import collections
import glob
import os
import pathlib
import random
import sys
import threading

import numpy as np
import pytest

from bert_jax.data.stream import pretrain_data
from bert_jax.runtime.cpu_tensorflow import tf
from configs import pretrain as pretrain_config

_WORDS = ("the cat sat on a mat and dog ran far away with big red ball under tree while sun "
          "was high in sky over green hill near old town").split()
_DIGITS = "zero one two three four five six seven eight nine".split()
_MARK = "mark"
_VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "."] + _WORDS + _DIGITS + [_MARK]
_EVERY_NTH_EVAL = 3
_SEQ_LEN = 32

# Corpora: many small files (2 per host at 256 hosts), and 3 files, fewer than 16 or 256 hosts
# (every host of 256 still gets training and held-out documents).
MANY_FILES = dict(num_files=512, docs_per_file=6)
FEW_FILES = dict(num_files=3, docs_per_file=300)


def _marker(f: int, d: int) -> str:
  return " ".join([_MARK] + [_DIGITS[int(c)] for c in f"{f:03d}{d:03d}"]) + " ."


def _write_corpus(folder, num_files, docs_per_file, seed=0):
  """Google-layout files; returns the training documents {(file, doc)} (the held-out ones are
  every _EVERY_NTH_EVAL-th of each file)."""
  rng = random.Random(seed)
  folder.mkdir()
  train = set()
  for f in range(num_files):
    docs = []
    for d in range(docs_per_file):
      sentences = [_marker(f, d)] + [
          " ".join(rng.choice(_WORDS) for _ in range(rng.randint(3, 12))) + " ."
          for _ in range(rng.randint(1, 4))]
      docs.append("\n".join(sentences))
      if d % _EVERY_NTH_EVAL != _EVERY_NTH_EVAL - 1:
        train.add((f, d))
    (folder / f"part-{f:04d}.txt").write_text("\n\n".join(docs) + "\n", encoding="utf-8")
  return train


@pytest.fixture(scope="module")
def corpora(tmp_path_factory):
  root = tmp_path_factory.mktemp("pod_input")
  vocab = root / "vocab.txt"
  vocab.write_text("\n".join(_VOCAB) + "\n", encoding="utf-8")
  out = {}
  for name, shape in (("many", MANY_FILES), ("few", FEW_FILES)):
    train = _write_corpus(root / name, **shape)
    out[name] = (str(root / name / "*.txt"), str(vocab), train)
  return out


def _config(files, vocab, **overrides):
  c = pretrain_config.get_config("tiny")
  c.data.source = "files"
  c.data.files = files
  c.data.vocab_file = vocab
  c.data.mode = "full_sentences"
  c.data.eval_every_nth_document = _EVERY_NTH_EVAL
  c.data.max_predictions_per_seq = 5
  c.data.loader = "python"
  for k, v in overrides.items():
    c.data[k] = v
  return c.data


def _host(cfg, host, hosts, rows_per_host=1):
  return pretrain_data.PretrainData(cfg, seq_len=_SEQ_LEN, global_batch_size=rows_per_host * hosts,
                                    seed=0, process_index=host, process_count=hosts)


def _unmasked(batch):
  ids = batch["input_ids"].copy()
  r, k = np.nonzero(batch["masked_lm_weights"] > 0)
  ids[r, batch["masked_lm_positions"][r, k]] = batch["masked_lm_ids"][r, k]
  return ids


def _documents(data, batches):
  """The (file, doc) of each marker in the batches' rows, in order (a list: repeats show)."""
  vocab = data.tokenizer.vocab
  mark, digit = vocab[_MARK], {vocab[w]: i for i, w in enumerate(_DIGITS)}
  found = []
  for b in batches:
    for row in _unmasked(b):
      for at in np.flatnonzero(row == mark):
        n = "".join(str(digit[t]) for t in row[at + 1:at + 7])
        assert len(n) == 6, row  # the marker sentence is whole in its row
        found.append((int(n[:3]), int(n[3:])))
  return found


def _epoch_documents(data):
  """The documents of one epoch (epoch 0) of a host's stream (1 row per batch)."""
  rows = data.epoch_rows(0)
  it = data.train_iterator()
  try:
    return _documents(data, [next(it) for _ in range(rows)])
  finally:
    it.close()


def _check_partition(shares, train):
  every = [d for share in shares for d in share]
  assert len(every) == len(set(every)), "a document in two hosts' shares, or twice in one"
  assert set(every) == train
  assert all(shares), "a host without documents"


def _held_out_documents(cfg, host, hosts):
  """The held-out documents a host's eval batches draw from: the eval stream cycles through
  them, so enough rows for one pass (at most 4 a document) give the set."""
  held_out = FEW_FILES["num_files"] * FEW_FILES["docs_per_file"] // _EVERY_NTH_EVAL
  data = _host(cfg, host, hosts, rows_per_host=16)
  return set(_documents(data, data.eval_iterator((4 * held_out // hosts + 40) // 16 + 1)))


# The fast tier takes 16 hosts on the few files (1.4 s); the rest take 6-60 s each here.
@pytest.mark.parametrize("corpus,hosts", [
    ("few", 16), pytest.param("many", 1, marks=pytest.mark.slow),
    pytest.param("many", 16, marks=pytest.mark.slow),
    pytest.param("many", 256, marks=pytest.mark.slow),
    pytest.param("few", 256, marks=pytest.mark.slow)])
def test_hosts_draw_on_disjoint_documents_that_cover_the_corpus(corpora, corpus, hosts):
  files, vocab, train = corpora[corpus]
  cfg = _config(files, vocab)
  _check_partition([_epoch_documents(_host(cfg, h, hosts)) for h in range(hosts)], train)
  if corpus == "few" and hosts == 16:  # the held-out documents are shared out the same way
    held = [_held_out_documents(cfg, h, hosts) for h in range(hosts)]
    assert sum(map(len, held)) == len(set().union(*held))
    assert set().union(*held) == {(f, d) for f in range(FEW_FILES["num_files"])
                                  for d in range(FEW_FILES["docs_per_file"])} - train


class _Reads:
  """Files opened and bytes read through tf.io.gfile.GFile, by path."""

  def __init__(self):
    self.opened, self.bytes = collections.Counter(), collections.Counter()
    self._lock = threading.Lock()

  def clear(self):
    self.opened.clear()
    self.bytes.clear()

  def file_class(self, base):
    reads = self

    class CountingGFile(base):

      def __init__(self, name, mode="r"):
        super().__init__(name, mode)
        with reads._lock:
          reads.opened[name] += 1

      def read(self, n=-1):
        data = super().read(n)
        with reads._lock:
          reads.bytes[self.name] += len(data)
        return data

    return CountingGFile


@pytest.fixture
def reads(monkeypatch):
  r = _Reads()
  monkeypatch.setattr(tf.io.gfile, "GFile", r.file_class(tf.io.gfile.GFile))
  return r


def _own_files(pattern, host, hosts):
  """The files a host may open (each file is one shard here): files h, h + P, ... of the
  sorted list, or file h mod S of S < P."""
  files = sorted(glob.glob(pattern))
  return set(files[host::hosts] if len(files) >= hosts else [files[host % len(files)]])


def _start_up(cfg, host, hosts, reads):
  """(files opened, bytes read) of one host's start-up: PretrainData and the first batch (and
  what the stream read ahead before it was closed)."""
  reads.clear()
  it = _host(cfg, host, hosts).train_iterator()
  next(it)
  it.close()  # joins the stream's threads: nothing of this host reads after this
  return set(reads.opened), sum(reads.bytes.values())


# Hosts whose start-up is counted at 256 (every host's would take a minute here; the slow test
# above checks every host's share): the first, two in the middle, the last.
_SAMPLE_256 = (0, 1, 130, 255)


@pytest.mark.parametrize("corpus", ["many", "few"])
def test_a_host_opens_only_its_own_files_at_start_up_and_reads_its_share(corpora, corpus,
                                                                         reads):
  files, vocab, _ = corpora[corpus]
  # A pool per shard: the first batch needs one shard tokenized, not the whole pool of 4 MB
  # (the count is the same kind; the test is 4x faster).
  cfg = _config(files, vocab, shuffle_mb=0)
  whole_opened, whole_bytes = _start_up(cfg, 0, 1, reads)
  corpus_bytes = sum(os.path.getsize(f) for f in glob.glob(files))
  # One host opens and reads every file: its listing checks them all.
  assert len(whole_opened) == len(glob.glob(files)) and whole_bytes >= corpus_bytes
  for hosts, sample in ((16, range(16)), (256, _SAMPLE_256)):
    owners = collections.defaultdict(set)
    for host in sample:
      opened, nbytes = _start_up(cfg, host, hosts, reads)
      own = _own_files(files, host, hosts)
      assert opened and opened <= own, (hosts, host, sorted(opened - own)[:3])
      assert len(own) == (512 // hosts if corpus == "many" else 1)
      # Its files checked once, and read once per pool the stream reached: a pool per file
      # here, and the python stream reads at most 5 pools ahead of the first batch.
      sizes = [os.path.getsize(f) for f in own]
      assert nbytes <= sum(sizes) + 5 * max(sizes), (hosts, host)
      for f in own:
        owners[f].add(host)
    if corpus == "many":  # no file is any other host's
      assert all(len(hs) == 1 for hs in owners.values())


def test_a_host_that_holds_only_whitespace_files_has_no_rows_and_says_so(tmp_path, corpora):
  # A whitespace-only file is a shard without documents where hosts read shares (knowing it
  # would need every file read on every host); a host whose shards are all such says so.
  _, vocab, _ = corpora["many"]
  for i in range(4):
    (tmp_path / f"part-{i}.txt").write_text("\n \n" if i % 2 else "the cat sat .\n\nthe dog .\n")
  cfg = _config(str(tmp_path / "*.txt"), vocab, eval_every_nth_document=0)
  assert next(_host(cfg, 0, 2).train_iterator())["input_ids"].shape == (1, _SEQ_LEN)
  with pytest.raises(ValueError, match=r"no training examples for host 1/2"):
    next(_host(cfg, 1, 2).train_iterator())


@pytest.mark.parametrize("corpus,host,hosts", [
    pytest.param("many", 5, 16, marks=pytest.mark.slow), ("few", 5, 16), ("many", 200, 256),
    ("few", 200, 256)])
def test_a_resumed_host_continues_its_own_stream(corpora, corpus, host, hosts):
  files, vocab, _ = corpora[corpus]
  cfg = _config(files, vocab, loader="tf_data")
  data = _host(cfg, host, hosts, rows_per_host=2)
  rows = data.epoch_rows(0)
  n = rows // 2 + 4  # past the end of the first epoch
  it = data.train_iterator()
  stream = [next(it) for _ in range(n)]
  it.close()
  mine = set(_documents(data, stream))
  for position in (1, rows // 2 - 1, rows // 2 + 1):
    resumed = _host(cfg, host, hosts, rows_per_host=2).train_iterator(start_position=position)
    for want in stream[position:]:
      got = next(resumed)
      assert got.keys() == want.keys()
      for k in want:
        np.testing.assert_array_equal(got[k], want[k], err_msg=(position, k))
    resumed.close()
  # ... and it is this host's stream: host 0's holds none of its documents.
  other = _host(cfg, 0, hosts, rows_per_host=2)
  it = other.train_iterator()
  assert not mine & set(_documents(other, [next(it) for _ in range(n)]))
  it.close()


def test_the_benchmark_prints_a_row_per_corpus_and_host_count(capsys):
  sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "benchmarks"))
  import pod_input  # pylint: disable=g-import-not-at-top
  gfile = tf.io.gfile.GFile
  pod_input.main(["--hosts", "1,4", "--sample", "2", "--files", "8", "--docs", "3",
                  "--few_files", "2", "--few_docs", "12"])
  assert tf.io.gfile.GFile is gfile  # its counting is undone
  rows = [line.split("|")[1:-1] for line in capsys.readouterr().out.splitlines()[2:]]
  assert [(r[0].strip(), r[1].strip()) for r in rows] == [
      ("many files (8)", "1"), ("many files (8)", "4"), ("few files (2)", "1"),
      ("few files (2)", "4")]
  assert [int(r[3]) for r in rows] == [8, 2, 2, 1]  # files opened by the busiest host
