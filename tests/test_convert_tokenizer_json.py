"""A BERT-family folder whose tokenizer is saved whole as tokenizer.json, with no vocab.txt (as
transformers 5 saves one), converts: the vocab and casing come from that file, the weights are
unchanged, and the converted bundle tokenizes as the file does, with either backend. A
tokenizer.json that is not BERT's WordPiece pipeline is refused in one line naming the part.
"""
import json
import os

from flax import traverse_util
import numpy as np
import pytest
import tokenizers

from bert_jax.checkpoints import bundle
from bert_jax.checkpoints import loading
from bert_jax.conversion import hf
from bert_jax.data.tokenizers import wordpiece
from bert_jax.data.tokenizers import wordpiece_rust
from tests.fixtures import tiny_encoder

VOCAB = wordpiece.read_vocab(wordpiece.default_vocab_file())
CONFIG = tiny_encoder.CONFIG.replace(vocab_size=len(VOCAB))
TEXTS = ["Héllo WORLD, the cat's mat.", "naïve café [MASK] dogs[SEP]", "中文 and ＡＢＣ résumé",
         "unaffable tokenization!!", "a\tb\nc  d\u00a0e", "x" * 120]


def _saved_whole(lowercase: bool) -> dict:
  """BERT's pipeline over VOCAB as a tokenizer.json, laid out as transformers 5 saves it."""
  tok = wordpiece_rust.RustWordPiece(VOCAB, lowercase, wordpiece.SPECIAL_TOKENS)._tok
  cls, sep = VOCAB.index("[CLS]"), VOCAB.index("[SEP]")
  tok.post_processor = tokenizers.processors.TemplateProcessing(
      single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
      special_tokens=[("[CLS]", cls), ("[SEP]", sep)])
  tok.decoder = tokenizers.decoders.WordPiece()
  saved = json.loads(tok.to_str())
  saved["normalizer"]["strip_accents"] = None  # transformers' default: as lowercase says
  return saved


def _folder(root, saved: dict, name="hf"):
  """An HF folder of random weights whose tokenizer is `saved` alone; returns (path, params)."""
  src = tiny_encoder.random_params(CONFIG, seed=3)
  export = root / name
  bundle.save_bundle(str(root / f"{name}_bundle"), src, CONFIG, VOCAB, True)
  hf.bundle_to_hf(str(root / f"{name}_bundle"), str(export))
  os.remove(export / "vocab.txt")
  (export / "tokenizer.json").write_text(json.dumps(saved))
  # transformers 5's tokenizer_config.json: the casing lives in tokenizer.json's normalizer.
  (export / "tokenizer_config.json").write_text(json.dumps(
      {"backend": "tokenizers", "tokenizer_class": "BertTokenizer", "model_max_length": 32}))
  return export, src


@pytest.mark.parametrize("lowercase", [True, False], ids=["uncased", "cased"])
def test_a_folder_with_tokenizer_json_alone_converts_and_tokenizes_as_the_file(tmp_path,
                                                                             lowercase):
  saved = _saved_whole(lowercase)
  src, params = _folder(tmp_path, saved)
  out = hf.hf_to_bundle(str(src), str(tmp_path / "bundle"))
  assert out["lowercase"] is lowercase
  assert out["lowercase_reason"] == "lowercase in tokenizer.json's normalizer"
  b = loading.load_pretrained(str(tmp_path / "bundle"))
  assert list(b.vocab) == VOCAB and b.lowercase is lowercase and b.tokenizer_file is None
  got = traverse_util.flatten_dict(b.params, sep="/")
  for k, v in traverse_util.flatten_dict(params, sep="/").items():
    np.testing.assert_array_equal(got[k], v, err_msg=k)
  reference = tokenizers.Tokenizer.from_str(json.dumps(saved))
  expected = [e.ids for e in reference.encode_batch(TEXTS, add_special_tokens=False)]
  assert any(VOCAB.index("[UNK]") in ids for ids in expected)  # the texts reach every branch
  for backend in wordpiece.BACKENDS:
    ours = wordpiece.WordPieceTokenizer(list(b.vocab), b.lowercase, backend=backend)
    assert ours.tokenize_to_ids(TEXTS) == expected, backend


def test_the_casing_given_on_the_command_line_wins(tmp_path):
  src, _ = _folder(tmp_path, _saved_whole(True))
  out = hf.hf_to_bundle(str(src), str(tmp_path / "bundle"), lowercase=False)
  assert out["lowercase"] is False and out["lowercase_reason"] == "given on the command line"


def _edited(edit) -> dict:
  saved = _saved_whole(True)
  edit(saved)
  return saved


def _set(path, value):
  def edit(saved):
    *parents, last = path
    node = saved
    for p in parents:
      node = node[p]
    node[last] = value
  return edit


def _add_token(saved):
  saved["added_tokens"].append({"id": len(VOCAB), "content": "<extra>", "single_word": False,
                                "lstrip": False, "rstrip": False, "normalized": False,
                                "special": True})


@pytest.mark.parametrize("edit, words", [
    (_set(("normalizer", "strip_accents"), False), "the normalizer is"),
    (_set(("normalizer",), {"type": "Lowercase"}), "the normalizer is"),
    (_set(("pre_tokenizer",), {"type": "Whitespace"}), "the pre-tokenizer is"),
    (_set(("model", "max_input_chars_per_word"), 200), "the WordPiece model is"),
    (_set(("model", "type"), "BPE"), "is a BPE tokenizer"),
    (_add_token, "adds the token(s) ['<extra>']"),
], ids=["accents", "normalizer", "pre_tokenizer", "word_length", "bpe", "added_token"])
def test_a_tokenizer_json_other_than_berts_pipeline_is_refused_in_one_line(tmp_path, edit,
                                                                           words):
  src, _ = _folder(tmp_path, _edited(edit))
  with pytest.raises(ValueError) as e:
    hf.hf_to_bundle(str(src), str(tmp_path / "bundle"))
  message = str(e.value)
  assert words in message and "tokenizer.json" in message and "\n" not in message
  assert not (tmp_path / "bundle").exists()


def test_a_folder_with_neither_tokenizer_file_is_refused_naming_both(tmp_path):
  src, _ = _folder(tmp_path, _saved_whole(True))
  os.remove(src / "tokenizer.json")
  with pytest.raises(FileNotFoundError, match="has neither vocab.txt nor tokenizer.json"):
    hf.hf_to_bundle(str(src), str(tmp_path / "bundle"))


def test_vocab_txt_is_read_before_a_tokenizer_json_beside_it(tmp_path):
  src, _ = _folder(tmp_path, _edited(_set(("model", "type"), "BPE")))
  (src / "vocab.txt").write_text("".join(t + "\n" for t in VOCAB))
  out = hf.hf_to_bundle(str(src), str(tmp_path / "bundle"))
  assert out["vocab_file"] == str(src / "vocab.txt")


def test_a_sentencepiece_model_with_tokenizer_json_alone_is_refused_naming_the_file_it_needs(
    tmp_path):
  src = tmp_path / "albert"
  src.mkdir()
  (src / "config.json").write_text(json.dumps(
      {"model_type": "albert", "vocab_size": 3, "hidden_size": 16, "embedding_size": 8,
       "num_hidden_layers": 1, "num_attention_heads": 2, "intermediate_size": 32,
       "max_position_embeddings": 32}))
  unigram = tokenizers.Tokenizer(tokenizers.models.Unigram(
      [("<unk>", 0.0), ("\u2581a", -1.0), ("b", -2.0)], unk_id=0))
  unigram.save(str(src / "tokenizer.json"))
  with pytest.raises(ValueError) as e:
    hf.hf_to_bundle(str(src), str(tmp_path / "bundle"))
  assert "needs a SentencePiece tokenizer (spiece.model)" in str(e.value)
  assert "only a tokenizer.json" in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize("architecture, member", [
    ("DistilBertForMaskedLM", "distilbert"), ("DistilBertModel", "distilbert"),
    ("BertForPreTraining", "bert"), (None, "bert")])
def test_a_config_without_model_type_is_read_as_the_member_its_architectures_name(architecture,
                                                                                 member):
  """transformers' 2019 layout (distilbert-base-uncased's first config.json) has no model_type:
  `architectures` names the member; neither (a Google bert_config.json) is BERT."""
  from bert_jax.modeling import model_config  # pylint: disable=g-import-not-at-top
  distilbert = {"activation": "gelu", "attention_dropout": 0.1, "dim": 768, "dropout": 0.1,
                "hidden_dim": 3072, "initializer_range": 0.02, "max_position_embeddings": 512,
                "n_heads": 12, "n_layers": 6, "sinusoidal_pos_embds": False, "vocab_size": 30522}
  bert = {"hidden_size": 768, "num_hidden_layers": 12, "num_attention_heads": 12,
          "intermediate_size": 3072, "vocab_size": 30522, "max_position_embeddings": 512,
          "type_vocab_size": 2, "hidden_act": "gelu"}
  d = dict(distilbert if member == "distilbert" else bert)
  if architecture:
    d["architectures"] = [architecture]
  config = model_config.from_hf_dict(d)
  assert config.model_type == member
  assert (config.num_layers, config.hidden_size) == ((6, 768) if member == "distilbert" else
                                                     (12, 768))
