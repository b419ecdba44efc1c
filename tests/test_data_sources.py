"""Sources: a TFDS dataset prepared offline in a temp dir, shards split between hosts."""
import collections

import numpy as np
import pytest

from bert_jax.data.sources import registry as source_registry
from bert_jax.data.stream import pretrain_data
from configs import pretrain as pretrain_config

tfds = pytest.importorskip("tensorflow_datasets")

_WORDS = "the cat sat on a mat and dog ran far away with big red ball under tree".split()
_VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", ".", "!"] + _WORDS


def _docs(n=23, seed=0):
  rng = np.random.default_rng(seed)
  docs = []
  for _ in range(n):
    sentences = [" ".join(rng.choice(_WORDS, rng.integers(3, 10))).capitalize() + "."
                 for _ in range(rng.integers(1, 6))]
    docs.append(" ".join(sentences[:2]) + ("\n" + " ".join(sentences[2:]) if sentences[2:] else ""))
  return docs


_DOCS = _docs()


class BertJaxTinyText(tfds.core.GeneratorBasedBuilder):
  """Documents written by the test; nothing to download."""
  VERSION = tfds.core.Version("1.0.0")

  def _info(self):
    return tfds.core.DatasetInfo(builder=self, features=tfds.features.FeaturesDict(
        {"text": tfds.features.Text(), "title": tfds.features.Text()}))

  def _split_generators(self, dl_manager):
    del dl_manager
    return {"train": self._generate_examples()}

  def _generate_examples(self):
    for i, doc in enumerate(_DOCS):
      yield i, {"text": doc, "title": f"doc {i}"}


@pytest.fixture(scope="module")
def tfds_dir(tmp_path_factory):
  path = tmp_path_factory.mktemp("tfds")
  BertJaxTinyText(data_dir=str(path)).download_and_prepare()
  return str(path)


def _config(tmp_path, tfds_dir, **overrides):
  vocab = tmp_path / "vocab.txt"
  vocab.write_text("\n".join(_VOCAB) + "\n", encoding="utf-8")
  c = pretrain_config.get_config("tiny").data
  c.source, c.tfds_name, c.tfds_data_dir = "tfds", "bert_jax_tiny_text", tfds_dir
  c.vocab_file, c.eval_every_nth_document = str(vocab), 0
  c.tfds_docs_per_shard = 5
  c.mode = "full_sentences"
  for k, v in overrides.items():
    c[k] = v
  return c


def test_tfds_shards_and_sentences(tmp_path, tfds_dir):
  c = _config(tmp_path, tfds_dir)
  shards = source_registry.list_shards(source_registry.get(c.source), c)
  assert [s.size for s in shards] == [5, 5, 5, 5, 3]
  raws = [source_registry.read_documents(s, c) for s in shards]
  assert [r.num_docs for r in raws] == [5, 5, 5, 5, 3]
  # Sentences split at ". " before a capital and at newlines (TFDS stores the
  # examples in its own order, so compare totals and contents).
  expected = sorted(s.strip() for d in _DOCS for s in d.replace(".", ".|").replace("\n", " ")
                    .split("|") if s.strip())
  got = sorted(x.decode() for r in raws for x in r.sentences.numpy())
  assert got == expected


@pytest.mark.slow
def test_tfds_two_hosts_cover_every_document(tmp_path, tfds_dir):
  seen = []
  for host in range(2):
    data = pretrain_data.PretrainData(_config(tmp_path, tfds_dir), seq_len=32,
                                      global_batch_size=2, seed=0, process_index=host,
                                      process_count=2)
    rows = data.epoch_rows(0)
    it = data.train_iterator()
    ids = []
    for _ in range(rows):
      b = next(it)
      x = b["input_ids"].copy()
      r, k = np.nonzero(b["masked_lm_weights"] > 0)
      x[r, b["masked_lm_positions"][r, k]] = b["masked_lm_ids"][r, k]
      ids.append(x[x > 4])  # drop specials
    seen.append(collections.Counter(np.concatenate(ids).tolist()))
  tok = data.tokenizer
  expected = collections.Counter(
      i for ids in tok.tokenize_to_ids([d.replace("\n", " ") for d in _DOCS]) for i in ids)
  assert seen[0] + seen[1] == expected and seen[0] and seen[1]


def test_tfds_errors_name_the_key(tmp_path, tfds_dir):
  tfds = source_registry.get("tfds")
  with pytest.raises(ValueError, match="tfds_split='validation'"):
    source_registry.list_shards(tfds, _config(tmp_path, tfds_dir, tfds_split="validation"))
  with pytest.raises(ValueError, match="tfds_text_key='body'"):
    source_registry.list_shards(tfds, _config(tmp_path, tfds_dir, tfds_text_key="body"))
  with pytest.raises(ValueError, match=r"bert_jax_tiny_text is not prepared in config.data."
                                       r"tfds_data_dir='.*empty'; nothing is downloaded at run "
                                       r"time: prepare it once where the network is reachable") as e:
    source_registry.list_shards(tfds, _config(tmp_path, str(tmp_path / "empty")))
  assert "download=True" not in str(e.value)
