"""Each family member's tiny config pretrains 50 steps with its tokenizer, then fine-tunes GLUE.

configs/pretrain.py's recipes build the member (model_type) with the variant's sizes:
RoBERTa on a byte-level BPE, ALBERT and DeBERTa-v3 on SentencePiece, BERT, DistilBERT and
ELECTRA on WordPiece (the fixtures of tests/tokenizer_fixtures.py, trained on its corpus).
The run's workdir then fine-tunes MRPC-layout pairs end to end, and the export is the member.
"""
import json
import math
import pathlib

import jax
import numpy as np
import pytest

from bert_jax.checkpoints import bundle
from bert_jax.checkpoints import loading
from bert_jax import config_help
from bert_jax.data.tokenizers import wordpiece
from bert_jax import finetune
from bert_jax.modeling import model as model_lib
from bert_jax.modeling import model_config
from bert_jax import pretrain
from tests import tokenizer_fixtures

ROOT = pathlib.Path(__file__).resolve().parents[1]
MRPC_HEADER = "Quality\t#1 ID\t#2 ID\t#1 String\t#2 String"
# member: (recipe, overrides, tokenizer fixture or None for WordPiece, the main loss metric)
MEMBERS = {
    "bert": ("bert", {}, None),
    "roberta": ("roberta", {}, "bpe_dir"),
    "albert": ("albert", {}, "albert_dir"),
    "distilbert": ("bert", {"model_type": "distilbert", "objective": "mlm",
                            "data.mode": "full_sentences"}, None),
    "electra": ("electra", {}, None),
    "deberta-v2": ("deberta", {}, "deberta_dir"),
}


def _texts():
  """The fixtures' corpus, one line each (its tricky texts with tabs and line breaks left out)."""
  return [t for t in tokenizer_fixtures._corpus(300)  # pylint: disable=protected-access
          if t.strip() and not any(c in t for c in "\t\r\n\u3000")]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
  """Google layout: a sentence a line, a blank line after every 5."""
  lines = []
  for i, text in enumerate(_texts()):
    lines += [text] + ([""] if i % 5 == 4 else [])
  path = tmp_path_factory.mktemp("family_corpus") / "corpus.txt"
  path.write_text("\n".join(lines), encoding="utf-8")
  return str(path)


@pytest.fixture(scope="module")
def vocab_file(tmp_path_factory):
  """A small uncased WordPiece vocab of the corpus's words and single characters."""
  words = sorted({w for t in _texts() for w in t.lower().split() if w.isalpha() and w.isascii()})
  chars = [chr(c) for c in range(ord("a"), ord("z") + 1)] + list("0123456789.,()-'\"")
  tokens = list(wordpiece.SPECIAL_TOKENS) + words + [c for c in chars if c not in words]
  tokens += ["##" + c for c in chars]
  path = tmp_path_factory.mktemp("family_vocab") / "vocab.txt"
  path.write_text("\n".join(tokens) + "\n", encoding="utf-8")
  return str(path)


@pytest.fixture(scope="module")
def glue_dir(tmp_path_factory):
  """MRPC layout: 32 train and 12 dev pairs of corpus sentences (label: the same first word)."""
  texts = _texts()
  rng = np.random.default_rng(0)
  root = tmp_path_factory.mktemp("family_glue")
  (root / "MRPC").mkdir()
  for split, n in (("train", 32), ("dev", 12)):
    rows = [MRPC_HEADER]
    for i in range(n):
      a, b = rng.choice(len(texts), 2)
      label = int(texts[a].split()[0] == texts[b].split()[0])
      rows.append(f"{label}\t{i}\t{i}\t{texts[a]}\t{texts[b]}")
    (root / "MRPC" / f"{split}.tsv").write_text("\n".join(rows) + "\n", encoding="utf-8")
  return str(root)


def _pretrain_config(recipe, overrides, corpus, tokenizer):
  c = config_help.load_module(ROOT / "configs" / "pretrain.py").get_config(f"tiny,recipe={recipe}")
  c.seq_len, c.batch_size, c.total_steps, c.warmup_steps = 32, 8, 50, 5
  c.log_every, c.checkpoint_every = 10, 50
  c.data.source, c.data.files, c.data.max_predictions_per_seq = "files", corpus, 5
  c.data.tokenizer = tokenizer
  c.fill_mask_example = ""
  c.update_from_flattened_dict(overrides)
  return c


@pytest.mark.slow
@pytest.mark.parametrize("member", list(MEMBERS))
def test_member_pretrains_50_steps_and_finetunes_glue(member, corpus, vocab_file, glue_dir,
                                                      tmp_path, request):
  recipe, overrides, fixture = MEMBERS[member]
  if fixture:
    tokenizer = str(request.getfixturevalue(fixture))
  else:
    tokenizer, overrides = "wordpiece", {**overrides, "data.vocab_file": vocab_file}
  workdir = str(tmp_path / "pretrain")
  config = _pretrain_config(recipe, overrides, corpus, tokenizer)
  summary = pretrain.train(config, workdir)
  # Fine-tuning reads the latest checkpoint of an unfinished run, the export of a finished one.
  from_checkpoint = loading.load_pretrained(workdir)
  pretrain.export_and_demo(summary, config, workdir)
  exported = loading.load_pretrained(workdir)
  assert exported.source != from_checkpoint.source and exported.config == from_checkpoint.config
  jax.tree.map(np.testing.assert_array_equal, exported.params, from_checkpoint.params)
  assert summary["step"] == 50
  with open(pathlib.Path(workdir) / "metrics.jsonl") as f:
    losses = [r["loss"] for r in map(json.loads, f) if "loss" in r]
  # Each is the mean over its 10 steps.
  assert len(losses) == 5 and all(math.isfinite(l) for l in losses)
  assert losses[-1] < 0.9 * losses[0], (member, losses)  # it learns
  assert loading.read_model_config(workdir).model_type == member

  c = config_help.load_module(ROOT / "configs" / "glue.py").get_config("task=mrpc")
  c.data_dir, c.init_checkpoint = glue_dir, workdir
  c.max_seq_length, c.batch_size, c.eval_batch_size = 48, 8, 16
  c.num_epochs, c.log_every, c.learning_rate = 1.0, 1, 1e-4
  results = finetune.finetune(c, str(tmp_path / "mrpc"))
  assert 0.0 <= results["accuracy"] <= 1.0
  assert abs(results["accuracy"] * 12 - round(results["accuracy"] * 12)) < 1e-6  # all 12 scored
  with open(tmp_path / "mrpc" / "metrics.jsonl") as f:
    train_losses = [r["seed0_train_loss"] for r in map(json.loads, f) if "seed0_train_loss" in r]
  assert len(train_losses) == 4 and all(math.isfinite(l) for l in train_losses)
  tuned = bundle.load_bundle(str(tmp_path / "mrpc" / "export"))
  assert tuned.config.model_type == member
  assert "classifier" in tuned.heads


# The released base checkpoints' config.json (the keys that differ from transformers' defaults).
_BASE_COMMON = {"hidden_size": 768, "num_hidden_layers": 12, "num_attention_heads": 12,
                "intermediate_size": 3072, "max_position_embeddings": 512}
RELEASED_BASE = {
    "roberta": ("roberta-base", 1, {**_BASE_COMMON, "model_type": "roberta", "vocab_size": 50265,
                                    "max_position_embeddings": 514, "type_vocab_size": 1,
                                    "layer_norm_eps": 1e-5, "pad_token_id": 1}),
    "albert": ("albert-base-v2", 0, {**_BASE_COMMON, "model_type": "albert", "vocab_size": 30000,
                                     "embedding_size": 128, "hidden_act": "gelu_new",
                                     "num_hidden_groups": 1, "inner_group_num": 1,
                                     "type_vocab_size": 2}),
    "electra": ("electra-base-discriminator", 0, {**_BASE_COMMON, "model_type": "electra",
                                                  "vocab_size": 30522, "embedding_size": 768,
                                                  "type_vocab_size": 2}),
    # DistilBERT's 6 layers are the student's (objective 'distill'); its base is 12 here.
    "distilbert": ("distilbert-base-uncased", 0, {
        "model_type": "distilbert", "vocab_size": 30522, "dim": 768, "n_layers": 12,
        "n_heads": 12, "hidden_dim": 3072, "max_position_embeddings": 512,
        "activation": "gelu"}),
    "deberta-v2": ("deberta-v3-base", 0, {
        **_BASE_COMMON, "model_type": "deberta-v2", "vocab_size": 128100, "type_vocab_size": 0,
        "layer_norm_eps": 1e-7, "relative_attention": True, "max_relative_positions": -1,
        "position_buckets": 256, "norm_rel_ebd": "layer_norm", "share_att_key": True,
        "pos_att_type": "p2c|c2p", "position_biased_input": False, "pad_token_id": 0}),
}


@pytest.mark.parametrize("member", list(RELEASED_BASE))
def test_base_variant_as_each_member_is_the_released_architecture(member):
  name, pad_id, config_json = RELEASED_BASE[member]
  released = model_config.from_hf_dict(config_json, source=name)
  built = model_config.for_pretraining(
      model_config.variant("base", released.vocab_size), member, pad_id)
  fields = [f for f in model_config.ARCH_FIELDS if f != "embedding_size"]  # 0 means hidden
  for field in fields + list(model_config.FAMILY_FIELDS) + [
      "embed_dim", "hidden_act", "layer_norm_eps", "pad_token_id"]:
    assert getattr(built, field) == getattr(released, field), (name, field)


@pytest.mark.slow
def test_roberta_packed_rows_read_positions_from_the_pad_id_on():
  """The pipeline's packed rows restart positions at 0; RoBERTa reads them from pad_id + 1
  (model.batch_position_ids), so two packed examples give the MLM logits each gives alone."""
  cfg = model_config.for_pretraining(
      model_config.BertConfig(vocab_size=40, hidden_size=16, num_layers=2, num_heads=2,
                              intermediate_size=32, max_position_embeddings=32),
      "roberta", pad_id=1)
  model = model_lib.BertForPreTraining(cfg, with_nsp=False)
  params = model_lib.init_params(model, jax.random.PRNGKey(0), seq_len=16)
  rng = np.random.default_rng(0)
  a, b = rng.integers(5, 40, 6), rng.integers(5, 40, 7)

  def logits(batch, positions):
    return np.asarray(model.apply({"params": params}, batch["input_ids"], batch["input_mask"],
                                  np.zeros_like(batch["input_ids"]), positions,
                                  model_lib.batch_position_ids(batch, cfg))["mlm_logits"])

  alone = []
  for ids in (a, b):  # one example a row, padded with pad_id: the model's default positions
    row = np.full((1, 16), 1, np.int32)
    row[0, :len(ids)] = ids
    alone.append(logits({"input_ids": row, "input_mask": (row != 1).astype(np.int32)},
                        np.array([[1, len(ids) - 1]])))
  packed = np.full((1, 16), 1, np.int32)
  packed[0, :6], packed[0, 6:13] = a, b
  mask = np.zeros((1, 16), np.int32)
  mask[0, :6], mask[0, 6:13] = 1, 2
  position_ids = np.zeros((1, 16), np.int32)
  position_ids[0, :6], position_ids[0, 6:13] = np.arange(6), np.arange(7)
  both = logits({"input_ids": packed, "input_mask": mask, "position_ids": position_ids},
                np.array([[1, 5, 7, 12]]))
  np.testing.assert_allclose(both[0, :2], alone[0][0], atol=1e-5)
  np.testing.assert_allclose(both[0, 2:], alone[1][0], atol=1e-5)
  # Read as given (from 0), the positions would be those of another model.
  wrong = np.asarray(model.apply({"params": params}, packed, mask, np.zeros_like(packed),
                                 np.array([[1, 5, 7, 12]]), position_ids)["mlm_logits"])
  assert np.max(np.abs(wrong[0, :2] - alone[0][0])) > 1e-3
