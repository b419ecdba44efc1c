"""GLUE registry, TSV / TFDS readers, encoding and submission files, on tiny fixtures."""
import logging
import os

import numpy as np
import pytest

from bert_jax.data.tokenizers import tokenizer_base
from bert_jax.runtime import cpu_tensorflow
from bert_jax.tasks.glue import data as glue

# A word list small enough to write expected ids by hand: id = position.
_VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "cat", "sat", "on", "mat",
          ".", "a", "dog", "ran", "##s", "big", "!", "\""]
_ID = {w: i for i, w in enumerate(_VOCAB)}


class _TestTokenizer(tokenizer_base.Tokenizer):
  """The tokenizer protocol over the `tokenizers` library's BERT WordPiece (not bert_jax's)."""
  kind = "wordpiece"

  def __init__(self, vocab_file, lowercase=True):
    import tokenizers  # pylint: disable=g-import-not-at-top
    self._tok = tokenizers.BertWordPieceTokenizer(tokenizers.models.WordPiece.read_file(
        vocab_file), lowercase=lowercase)
    self.vocab = self._tok.get_vocab()
    self.inv_vocab = [None] * len(self.vocab)
    for token, i in self.vocab.items():
      self.inv_vocab[i] = token
    self.vocab_size = len(self.vocab)
    self.pad_id, self.unk_id, self.cls_id, self.sep_id, self.mask_id = (
        self.vocab[t] for t in ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"))

  def tokenize(self, text):
    return self._tok.encode(text, add_special_tokens=False).tokens

  def tokenize_to_ids(self, texts):
    return [self.convert_tokens_to_ids(self.tokenize(t)) for t in texts]

  def convert_tokens_to_ids(self, tokens):
    return [self.vocab.get(t, self.unk_id) for t in tokens]


@pytest.fixture
def tokenizer(tmp_path):
  path = tmp_path / "vocab.txt"
  path.write_text("\n".join(_VOCAB) + "\n", encoding="utf-8")
  return _TestTokenizer(str(path))


def _write(path, lines, bom=False):
  path.parent.mkdir(parents=True, exist_ok=True)
  text = "".join(line + "\n" for line in lines)
  path.write_bytes((b"\xef\xbb\xbf" if bom else b"") + text.encode("utf-8"))


# ---------------------------------------------------------------- registry


def test_registry_has_every_glue_task():
  assert sorted(glue.TASKS) == sorted(
      ["cola", "sst2", "mrpc", "stsb", "qqp", "mnli", "qnli", "rte", "wnli", "ax"])
  assert glue.get_task("MRPC").name == "mrpc"
  assert glue.get_task("STS-B").is_regression
  assert glue.get_task("sst-2").name == "sst2"
  mnli = glue.get_task("mnli")
  assert mnli.dev_splits == ("dev_matched", "dev_mismatched")
  assert mnli.test_splits == ("test_matched", "test_mismatched")
  assert mnli.num_labels == 3
  ax = glue.get_task("ax")
  assert ax.train_split is None and ax.dev_splits == () and ax.test_splits == ("test",)
  assert ax.model_task == "mnli" and ax.labels == mnli.labels
  assert glue.get_task("cola").metrics == ("matthews_corrcoef",)
  assert set(glue.get_task("mrpc").metrics) == {"accuracy", "f1", "accuracy_and_f1"}
  assert set(glue.get_task("stsb").metrics) == {"pearson", "spearman", "pearson_and_spearman"}


def test_unknown_task_lists_known_ones():
  with pytest.raises(ValueError, match="unknown GLUE task 'mrcp'.*'cola'.*'wnli'"):
    glue.get_task("mrcp")


def test_result_names():
  mnli, mrpc = glue.get_task("mnli"), glue.get_task("mrpc")
  assert mnli.result_name("accuracy", "dev_matched") == "accuracy_matched"
  assert mnli.result_name("accuracy", "dev_mismatched") == "accuracy_mismatched"
  assert mrpc.result_name("f1", "dev") == "f1"


# ---------------------------------------------------------------- TSV layout


@pytest.fixture
def glue_dir(tmp_path):
  """A miniature GLUE download with each task's real column layout."""
  d = tmp_path / "glue"
  _write(d / "CoLA" / "train.tsv", ["gj04\t1\t\tThe cat sat.", "gj04\t0\t*\tCat the sat."])
  _write(d / "CoLA" / "dev.tsv", ["cl_4\t0\t*\tSat cat."])
  _write(d / "CoLA" / "test.tsv", ["index\tsentence", "0\tA dog ran.", "1\tThe dogs ran."])
  _write(d / "SST-2" / "train.tsv", ["sentence\tlabel", "a big dog \t1", "the mat \t0"])
  _write(d / "SST-2" / "test.tsv", ["index\tsentence", "0\tthe cat ."])
  header = "Quality\t#1 ID\t#2 ID\t#1 String\t#2 String"
  _write(d / "MRPC" / "train.tsv",
         [header, "1\t11\t12\tThe cat sat.\t\"The cat\" sat on a mat.",
          "0\t13\t14\tA dog ran.\tThe dog sat."], bom=True)
  _write(d / "MRPC" / "test.tsv",
         ["index\t#1 ID\t#2 ID\t#1 String\t#2 String", "0\t21\t22\tA cat.\tA dog."])
  _write(d / "STS-B" / "dev.tsv",
         ["index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\tsentence2"
          "\tscore",
          "0\tmain-captions\tMSRvid\t2012test\t0000\tnone\tnone\tA cat.\tThe cat.\t4.750"])
  _write(d / "QQP" / "dev.tsv",
         ["id\tqid1\tqid2\tquestion1\tquestion2\tis_duplicate",
          "7\t1\t2\tcat?\tdog?\t0",
          "8\t3\t4\tbroken row with no second question",
          "9\t5\t6\tmat?\tmats?\t1"])
  _write(d / "QQP" / "test.tsv", ["id\tquestion1\tquestion2", "0\tcat?\tdog?"])
  mnli_dev = ("index\tpromptID\tpairID\tgenre\tsentence1_binary_parse\tsentence2_binary_parse"
              "\tsentence1_parse\tsentence2_parse\tsentence1\tsentence2\tlabel1\tlabel2\tlabel3"
              "\tlabel4\tlabel5\tgold_label")
  row = "0\t1\t1n\tfiction\t( ( x ) )\t( y )\t(ROOT x)\t(ROOT y)\tThe cat sat.\tA cat sat."
  _write(d / "MNLI" / "dev_matched.tsv",
         [mnli_dev, row + "\tneutral\tentailment\tentailment\tentailment\tentailment"
          "\tentailment"])
  _write(d / "MNLI" / "test_mismatched.tsv",
         ["index\tpromptID\tpairID\tgenre\tsentence1_binary_parse\tsentence2_binary_parse"
          "\tsentence1_parse\tsentence2_parse\tsentence1\tsentence2",
          "5\t1\t1n\tletters\t( x )\t( y )\t(ROOT x)\t(ROOT y)\tA dog.\tThe dog."])
  _write(d / "QNLI" / "train.tsv",
         ["index\tquestion\tsentence\tlabel", "0\tWho sat?\tThe cat sat.\tentailment",
          "1\tWho ran?\tThe cat sat.\tnot_entailment"])
  _write(d / "RTE" / "dev.tsv",
         ["index\tsentence1\tsentence2\tlabel", "0\tA dog ran.\tA dog moved.\tentailment"])
  _write(d / "WNLI" / "train.tsv",
         ["index\tsentence1\tsentence2\tlabel", "0\tThe cat sat.\tIt sat.\t1"])
  _write(d / "diagnostic" / "diagnostic.tsv",
         ["index\tsentence1\tsentence2", "0\tThe cat sat.\tThe cat did not sit."])
  return str(d)


def test_cola_headerless_train_and_headered_test(glue_dir):
  cola = glue.get_task("cola")
  train = glue.read_tsv(cola, glue_dir, "train")
  assert [(e.text_a, e.text_b, e.label, e.index) for e in train] == [
      ("The cat sat.", None, 1, 0), ("Cat the sat.", None, 0, 1)]
  assert train[1].guid.endswith(os.path.join("CoLA", "train.tsv") + ":2")
  test = glue.read_tsv(cola, glue_dir, "test")
  assert [(e.text_a, e.label, e.index) for e in test] == [
      ("A dog ran.", None, 0), ("The dogs ran.", None, 1)]


def test_mrpc_bom_header_and_bare_quotes(glue_dir):
  mrpc = glue.get_task("mrpc")
  train = glue.read_tsv(mrpc, glue_dir, "train")
  assert [(e.text_a, e.text_b, e.label) for e in train] == [
      ("The cat sat.", "\"The cat\" sat on a mat.", 1), ("A dog ran.", "The dog sat.", 0)]
  test = glue.read_tsv(mrpc, glue_dir, "test")
  assert (test[0].text_a, test[0].text_b, test[0].label) == ("A cat.", "A dog.", None)


def test_other_layouts(glue_dir):
  sst2 = glue.read_tsv(glue.get_task("sst2"), glue_dir, "train")
  assert [(e.text_a, e.label) for e in sst2] == [("a big dog ", 1), ("the mat ", 0)]
  stsb = glue.read_tsv(glue.get_task("stsb"), glue_dir, "dev")
  assert (stsb[0].text_a, stsb[0].text_b, stsb[0].label) == ("A cat.", "The cat.", 4.75)
  mnli = glue.get_task("mnli")
  dev = glue.read_tsv(mnli, glue_dir, "dev_matched")
  assert (dev[0].text_a, dev[0].text_b) == ("The cat sat.", "A cat sat.")
  assert mnli.labels[dev[0].label] == "entailment"  # gold_label, not label1.
  test = glue.read_tsv(mnli, glue_dir, "test_mismatched")
  assert (test[0].text_a, test[0].label, test[0].index) == ("A dog.", None, 5)
  qnli = glue.read_tsv(glue.get_task("qnli"), glue_dir, "train")
  assert [(e.text_a, e.text_b, e.label) for e in qnli] == [
      ("Who sat?", "The cat sat.", 0), ("Who ran?", "The cat sat.", 1)]
  rte = glue.read_tsv(glue.get_task("rte"), glue_dir, "dev")
  assert (rte[0].text_b, rte[0].label) == ("A dog moved.", 0)
  wnli = glue.read_tsv(glue.get_task("wnli"), glue_dir, "train")
  assert (wnli[0].text_b, wnli[0].label) == ("It sat.", 1)
  ax = glue.read_tsv(glue.get_task("ax"), glue_dir, "test")
  assert (ax[0].text_a, ax[0].text_b, ax[0].label) == ("The cat sat.", "The cat did not sit.",
                                                       None)
  qqp_test = glue.read_tsv(glue.get_task("qqp"), glue_dir, "test")
  assert (qqp_test[0].text_a, qqp_test[0].text_b) == ("cat?", "dog?")


def test_qqp_malformed_rows_are_skipped_and_reported(glue_dir, caplog):
  qqp = glue.get_task("qqp")
  with caplog.at_level(logging.WARNING):
    dev = glue.read_tsv(qqp, glue_dir, "dev")
  assert [(e.text_a, e.label, e.index) for e in dev] == [("cat?", 0, 7), ("mat?", 1, 9)]
  assert "skipped 1 malformed rows" in caplog.text and "lines 3" in caplog.text
  with pytest.raises(glue.GlueFormatError, match=r"QQP.dev\.tsv:3: expected 6"):
    glue.read_tsv(qqp, glue_dir, "dev", skip_malformed=False)


def test_malformed_row_names_file_and_line(tmp_path):
  d = tmp_path / "glue"
  _write(d / "RTE" / "train.tsv",
         ["index\tsentence1\tsentence2\tlabel", "0\ta\tb\tentailment", "1\ta\tb"])
  with pytest.raises(glue.GlueFormatError, match=r"RTE.train\.tsv:3: expected 4 .*found 3"):
    glue.read_tsv(glue.get_task("rte"), str(d), "train")


def test_bad_labels_name_file_and_line(tmp_path):
  d = tmp_path / "glue"
  _write(d / "RTE" / "train.tsv",
         ["index\tsentence1\tsentence2\tlabel", "0\ta\tb\tentailment", "1\ta\tb\tneutral"])
  with pytest.raises(glue.GlueFormatError, match=r"train\.tsv:3: label 'neutral'"):
    glue.read_tsv(glue.get_task("rte"), str(d), "train")
  _write(d / "CoLA" / "train.tsv", ["gj04\t1\t\tok", "gj04\tyes\t\tbad"])
  with pytest.raises(glue.GlueFormatError, match=r"train\.tsv:2: label 'yes'"):
    glue.read_tsv(glue.get_task("cola"), str(d), "train")
  _write(d / "STS-B" / "train.tsv",
         ["index\tsentence1\tsentence2\tscore", "0\ta\tb\t1.5", "1\ta\tb\tn/a"])
  with pytest.raises(glue.GlueFormatError, match=r"train\.tsv:3: label 'n/a' is not"):
    glue.read_tsv(glue.get_task("stsb"), str(d), "train")


def test_missing_column_file_and_split(tmp_path, glue_dir):
  d = tmp_path / "glue"
  _write(d / "RTE" / "train.tsv", ["index\tpremise\thypothesis\tlabel", "0\ta\tb\tentailment"])
  with pytest.raises(glue.GlueFormatError, match=r"RTE.train\.tsv: header lacks columns"):
    glue.read_tsv(glue.get_task("rte"), str(d), "train")
  with pytest.raises(FileNotFoundError, match=r"RTE.test\.tsv"):
    glue.read_tsv(glue.get_task("rte"), str(d), "test")
  with pytest.raises(ValueError, match="no split 'dev'.*dev_matched"):
    glue.read_tsv(glue.get_task("mnli"), glue_dir, "dev")


def test_read_split_dispatch(glue_dir):
  rte = glue.get_task("rte")
  assert len(glue.read_split(rte, "dev", source="tsv", data_dir=glue_dir)) == 1
  with pytest.raises(ValueError, match="unknown GLUE data source 'csv'"):
    glue.read_split(rte, "dev", source="csv", data_dir=glue_dir)


# ---------------------------------------------------------------- TFDS


def test_tfds_field_and_label_mapping():
  mnli = glue.get_task("mnli")
  for tfds_id, name in enumerate(("entailment", "neutral", "contradiction")):
    ex = glue.example_from_tfds(mnli, "dev_matched", {
        "premise": b"P", "hypothesis": b"H", "label": np.int64(tfds_id), "idx": np.int32(4)})
    assert (ex.text_a, ex.text_b, ex.index) == ("P", "H", 4)
    assert mnli.labels[ex.label] == name
  cola = glue.get_task("cola")
  for tfds_id in (0, 1):  # unacceptable=0 / acceptable=1 are the TSV's "0" / "1".
    ex = glue.example_from_tfds(cola, "train", {"sentence": "S", "label": tfds_id, "idx": 0})
    assert cola.labels[ex.label] == str(tfds_id) and ex.text_b is None
  wnli = glue.get_task("wnli")
  ex = glue.example_from_tfds(wnli, "train", {"sentence1": b"a", "sentence2": b"b",
                                              "label": 1, "idx": 0})
  assert wnli.labels[ex.label] == "1"  # TFDS 'entailment' is the TSV's 1.
  stsb = glue.get_task("stsb")
  ex = glue.example_from_tfds(stsb, "dev", {"sentence1": b"a", "sentence2": b"b",
                                            "label": np.float32(3.2), "idx": 0})
  assert ex.label == pytest.approx(3.2)
  ex = glue.example_from_tfds(stsb, "test", {"sentence1": b"a", "sentence2": b"b",
                                             "label": np.float32(-1), "idx": 0})
  assert ex.label is None
  qnli = glue.get_task("qnli")
  ex = glue.example_from_tfds(qnli, "train", {"question": b"q", "sentence": b"s",
                                              "label": 1, "idx": 0})
  assert (ex.text_a, ex.text_b, qnli.labels[ex.label]) == ("q", "s", "not_entailment")


def test_read_tfds_through_tfds_load(tmp_path):
  """tfds.load on glue/rte, with the stored examples mocked (no prepared files needed)."""
  tfds = cpu_tensorflow.import_tfds()
  from bert_jax.runtime.cpu_tensorflow import tf  # pylint: disable=g-import-not-at-top
  seen = {}

  def as_dataset(self, split, **kwargs):
    del kwargs
    seen["split"] = str(split)
    seen["name"] = self.name + "/" + self.builder_config.name
    # Stored out of order, as TFDS shuffles at preparation.
    return tf.data.Dataset.from_tensor_slices({
        "sentence1": [b"second premise", "first premis\u00e9".encode("utf-8")],
        "sentence2": [b"h2", b"h1"],
        "label": np.array([1, 0], np.int64),
        "idx": np.array([1, 0], np.int32),
    })

  with tfds.testing.mock_data(as_dataset_fn=as_dataset, data_dir=str(tmp_path)):
    examples = glue.read_split(glue.get_task("rte"), "dev", source="tfds",
                               tfds_data_dir=str(tmp_path))
  assert seen == {"split": "validation", "name": "glue/rte"}
  # Not prepared there: one line saying how to prepare it, not tfds' download=True.
  with pytest.raises(FileNotFoundError, match=r"TFDS glue/rte \(split 'validation'\) is not "
                                              r"prepared in tfds_data_dir=.*nothing is downloaded "
                                              r"at run time: prepare it once") as e:
    glue.read_split(glue.get_task("rte"), "dev", source="tfds",
                    tfds_data_dir=str(tmp_path / "empty"))
  assert "download=True" not in str(e.value)
  assert [(e.index, e.text_a, e.text_b, e.label) for e in examples] == [
      (0, "first premis\u00e9", "h1", 0), (1, "second premise", "h2", 1)]


# ---------------------------------------------------------------- encoding


def _google_truncate_seq_pair(tokens_a, tokens_b, max_length):
  """Google run_classifier's _truncate_seq_pair, verbatim."""
  while True:
    total_length = len(tokens_a) + len(tokens_b)
    if total_length <= max_length:
      break
    if len(tokens_a) > len(tokens_b):
      tokens_a.pop()
    else:
      tokens_b.pop()


def test_encode_single_and_pair_by_hand(tokenizer):
  c, s = _ID["[CLS]"], _ID["[SEP]"]
  examples = [
      glue.GlueExample("x:1", "The cat sat.", None, 1, 0),
      glue.GlueExample("x:2", "the DOGS ran", "a mat!", 0, 1),
      glue.GlueExample("x:3", "the big cat sat on the mat", "a dog ran", None, 2),
  ]
  f = glue.encode_examples(tokenizer, examples, max_seq_length=10)
  assert f["input_ids"].dtype == np.int32 and f["input_ids"].shape == (3, 10)
  the, cat, sat, dot = _ID["the"], _ID["cat"], _ID["sat"], _ID["."]
  assert f["input_ids"][0].tolist() == [c, the, cat, sat, dot, s, 0, 0, 0, 0]
  assert f["input_mask"][0].tolist() == [1] * 6 + [0] * 4
  assert f["segment_ids"][0].tolist() == [0] * 10
  dog, ss, ran, a, mat, bang = _ID["dog"], _ID["##s"], _ID["ran"], _ID["a"], _ID["mat"], _ID["!"]
  assert f["input_ids"][1].tolist() == [c, the, dog, ss, ran, s, a, mat, bang, s]
  assert f["segment_ids"][1].tolist() == [0] * 6 + [1] * 4
  # 7 + 3 pieces into 10 - 3 = 7: Google pops the longer a down to 4, keeps b.
  big = _ID["big"]
  assert f["input_ids"][2].tolist() == [c, the, big, cat, sat, s, a, dog, ran, s]
  assert f["truncated"].tolist() == [False, False, True]
  assert f["label_ids"].tolist() == [1, 0, 0] and f["label_ids"].dtype == np.int32
  assert f["weights"].tolist() == [1.0, 1.0, 1.0]
  assert f["example_index"].tolist() == [0, 1, 2]


def test_encode_single_truncation_and_regression(tokenizer):
  examples = [glue.GlueExample("x", "the cat sat on the mat", None, 2.5, 0)]
  f = glue.encode_examples(tokenizer, examples, max_seq_length=5, is_regression=True)
  assert f["input_ids"][0].tolist() == [_ID["[CLS]"], _ID["the"], _ID["cat"], _ID["sat"],
                                        _ID["[SEP]"]]
  assert f["truncated"].tolist() == [True]
  assert "label_ids" not in f and f["labels"].dtype == np.float32
  assert f["labels"].tolist() == [2.5]


def test_encode_pair_truncation_matches_google_loop(tokenizer):
  rng = np.random.default_rng(0)
  words = ["the", "cat", "sat", "on", "mat", "a", "dog", "ran"]
  examples, expected = [], []
  for i in range(200):
    la, lb = rng.integers(0, 20, 2)
    a = [words[j] for j in rng.integers(0, len(words), la)]
    b = [words[j] for j in rng.integers(0, len(words), lb)]
    examples.append(glue.GlueExample(str(i), " ".join(a), " ".join(b), 0, i))
    ta, tb = list(a), list(b)
    _google_truncate_seq_pair(ta, tb, 16 - 3)
    expected.append(["[CLS]"] + ta + ["[SEP]"] + tb + ["[SEP]"])
  f = glue.encode_examples(tokenizer, examples, max_seq_length=16)
  for i, tokens in enumerate(expected):
    row = f["input_ids"][i]
    assert row.tolist() == [_ID[t] for t in tokens] + [0] * (16 - len(tokens))
    first_sep = tokens.index("[SEP]")
    assert f["segment_ids"][i].tolist() == (
        [0] * (first_sep + 1) + [1] * (len(tokens) - first_sep - 1) + [0] * (16 - len(tokens)))
  assert f["truncated"].sum() == sum(
      len(ex.text_a.split()) + len(ex.text_b.split()) > 13 for ex in examples)


# ---------------------------------------------------------------- submissions


def test_submission_files(tmp_path, glue_dir):
  mnli = glue.get_task("mnli")
  test = glue.read_tsv(mnli, glue_dir, "test_mismatched")
  path = glue.write_submission(mnli, "test_mismatched", test, [mnli.labels.index("neutral")],
                               str(tmp_path / "out"))
  assert os.path.basename(path) == "MNLI-mm.tsv"
  assert open(path).read() == "index\tprediction\n5\tneutral\n"
  assert mnli.submission_files["test_matched"] == "MNLI-m.tsv"

  mrpc = glue.get_task("mrpc")
  examples = [glue.GlueExample(str(i), "a", "b", None, i) for i in range(3)]
  path = glue.write_submission(mrpc, "test", examples, np.array([1, 0, 1]), str(tmp_path))
  assert os.path.basename(path) == "MRPC.tsv"
  assert open(path).read().splitlines() == ["index\tprediction", "0\t1", "1\t0", "2\t1"]

  stsb = glue.get_task("stsb")
  path = glue.write_submission(stsb, "test", examples, [5.7, -0.2, 3.14159], str(tmp_path))
  assert os.path.basename(path) == "STS-B.tsv"
  assert open(path).read().splitlines()[1:] == ["0\t5.000", "1\t0.000", "2\t3.142"]

  ax = glue.get_task("ax")
  path = glue.write_submission(ax, "test", examples[:1], [mnli.labels.index("contradiction")],
                               str(tmp_path))
  assert os.path.basename(path) == "AX.tsv"
  assert open(path).read().splitlines()[1] == "0\tcontradiction"
  expected_names = {"cola": "CoLA.tsv", "sst2": "SST-2.tsv", "qqp": "QQP.tsv",
                    "qnli": "QNLI.tsv", "rte": "RTE.tsv", "wnli": "WNLI.tsv"}
  for name, file_name in expected_names.items():
    assert glue.get_task(name).submission_files == {"test": file_name}
  with pytest.raises(ValueError, match="not a test split"):
    glue.write_submission(mrpc, "dev", examples, [0, 0, 0], str(tmp_path))
  with pytest.raises(ValueError, match="3 examples but 2 predictions"):
    glue.write_submission(mrpc, "test", examples, [0, 0], str(tmp_path))


def test_header_only_file_and_sts_b_scores_outside_0_to_5_name_file_and_line(tmp_path):
  """A header-only dev file and STS-B scores of 7.5 and -3 are refused when the files are read,
  before training (not "cannot reshape array of size 0" after it, nor trained on as targets)."""
  d = tmp_path / "glue"
  _write(d / "RTE" / "dev.tsv", ["index\tsentence1\tsentence2\tlabel"])
  with pytest.raises(glue.GlueFormatError, match=r"RTE.dev\.tsv: no rows after the header"):
    glue.read_tsv(glue.get_task("rte"), str(d), "dev")
  for score, line in (("7.5", 3), ("-3", 3)):
    _write(d / "STS-B" / "train.tsv",
           ["index\tsentence1\tsentence2\tscore", "0\ta\tb\t5.0", f"1\ta\tb\t{score}"])
    with pytest.raises(glue.GlueFormatError,
                       match=rf"train\.tsv:{line}: STS-B score '{score}' is outside 0\.\.5"):
      glue.read_tsv(glue.get_task("stsb"), str(d), "train")
