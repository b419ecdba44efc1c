"""The family's tokenizers: byte-level BPE (RoBERTa) and SentencePiece (ALBERT, DeBERTa-v2/v3).

Core tests train tiny tokenizers into tmp_path (a BPE with the `tokenizers`
library, unigram models with `sentencepiece`) and compare ids, single and pair
inputs with transformers' fast tokenizers built from the same files; the
pipeline tests pretrain-batch with them. The real roberta-base, albert-base-v2
and deberta-v3-base files of the optional real-data folder (tests/conftest.py) are
compared on a sample of the real text at the end (skipped without that folder); every line is
`python benchmarks/tokenizer_parity.py --only family`.
"""
import io
import json
import random

import numpy as np
import pytest

from bert_jax.data.stream import pretrain_data
from bert_jax.data.tokenizers import tokenizer as tokenizer_lib
from bert_jax.data.tokenizers import tokenizer_files
from bert_jax import tokenize as tokenize_cli
from configs import pretrain as pretrain_config

from tests.tokenizer_fixtures import _TRICKY, _WORDS, _corpus, _train_spm
from tests.tokenizer_fixtures import reference_tokenizer


def _assert_parity(ours, ref, lines):
  """ids without specials, single inputs, and pairs (ids and segment ids) equal the reference's."""
  got = ours.tokenize_to_ids(lines)
  expected = ref(lines, add_special_tokens=False)["input_ids"]
  for line, g, e in zip(lines, got, expected):
    assert g == e, (line, ours.convert_ids_to_tokens(g), ref.convert_ids_to_tokens(e))
  for line, g, e in zip(lines, got, ref(lines)["input_ids"]):
    assert ours.build_inputs(g)[0] == e, line
  second = lines[1:] + lines[:1]
  pairs = ref(lines, second, return_token_type_ids=True)
  for i, (a, b) in enumerate(zip(got, got[1:] + got[:1])):
    ids, segments = ours.build_inputs(a, b)
    assert (ids, segments) == (pairs["input_ids"][i], pairs["token_type_ids"][i]), lines[i]


@pytest.mark.parametrize("kind", ["roberta", "albert", "deberta"])
def test_tiny_tokenizers_match_transformers_fast(kind, bpe_dir, albert_dir, deberta_dir):
  directory = {"roberta": bpe_dir, "albert": albert_dir, "deberta": deberta_dir}[kind]
  ours = tokenizer_lib.tokenizer_from_path(str(directory))
  ref = reference_tokenizer(kind, directory)
  assert ours.kind == ("bpe" if kind == "roberta" else "sentencepiece")
  assert ours.vocab_size == len(ref)
  assert [ours.pad_id, ours.unk_id, ours.cls_id, ours.sep_id, ours.mask_id] == [
      ref.pad_token_id, ref.unk_token_id, ref.cls_token_id, ref.sep_token_id, ref.mask_token_id]
  _assert_parity(ours, ref, _TRICKY + _corpus(60, seed=1))
  # id -> token (fill-mask) is the reference's.
  ids = ours.tokenize_to_ids(["The quick brown fox jumps."])[0]
  assert ours.convert_ids_to_tokens(ids) == ref.convert_ids_to_tokens(ids)


def test_deberta_lower_cased_keeps_unk_typed_in_text_atomic_as_transformers_fast(deberta_dir):
  """DebertaV2TokenizerFast(do_lower_case=True) matches its [UNK] (a normalized added token) in
  the normalised text in its own normalised form, '[unk]': one id, not split."""
  transformers = pytest.importorskip("transformers")
  ours = tokenizer_lib.tokenizer_from_path(str(deberta_dir), lowercase=True)
  ref = transformers.DebertaV2TokenizerFast(vocab_file=str(deberta_dir / "spm.model"),
                                            do_lower_case=True)
  lines = ["the [UNK] sat", "the[UNK]sat", "[UNK]", " [UNK] x", "a [unk] b", "A [UnK] [UNK]",
           "x\t[UNK]\ty", "[UNK][UNK]", "The [MASK] [CLS] [SEP] [PAD] x"]
  assert ours.lowercase and ours.tokenize("[UNK]") == ["[UNK]"]
  _assert_parity(ours, ref, lines + _TRICKY + _corpus(30, seed=2))


def test_family_conventions(bpe_dir, albert_dir, deberta_dir):
  roberta = tokenizer_lib.tokenizer_from_path(str(bpe_dir))
  albert = tokenizer_lib.tokenizer_from_path(str(albert_dir / "spiece.model"))
  deberta = tokenizer_lib.tokenizer_from_path(str(deberta_dir))
  # Pairs: RoBERTa <s> A </s></s> B </s> with one segment id; the others [CLS] A [SEP] B [SEP].
  assert roberta.build_inputs([7], [8]) == ([0, 7, 2, 2, 8, 2], [0] * 6)
  assert roberta.num_special_tokens(pair=True) == 4
  assert albert.build_inputs([7], [8]) == ([2, 7, 3, 8, 3], [0, 0, 0, 1, 1])
  assert deberta.build_inputs([7]) == ([1, 7, 2], [0, 0, 0])
  # DeBERTa-v3's [MASK] is not a piece of the model: it comes after them.
  assert deberta.mask_id == deberta.vocab_size - 1 == deberta._sp.GetPieceSize()  # pylint: disable=protected-access
  # Casing: ALBERT lower-cases and strips accents, DeBERTa and RoBERTa keep them.
  assert albert.lowercase and not deberta.lowercase and not roberta.lowercase
  assert albert.basic_tokenize("Café  NAÏVE ``x''") == ["cafe", "naive", '"x"']
  with pytest.raises(ValueError, match="cased"):
    tokenizer_lib.cached_tokenizer("bpe", str(bpe_dir / "vocab.json"), lowercase=True)
  # Word starts for whole-word masking: 'Ġ' (BPE) and '▁' (SentencePiece) pieces.
  for tok, mark in ((roberta, "\u0120"), (albert, "\u2581"), (deberta, "\u2581")):
    pieces = tok.tokenize("jumpingwizards quietlyhumming animals")
    starts = [not tok.is_continuation[i] for i in tok.convert_tokens_to_ids(pieces)]
    assert starts == [p.startswith(mark) for p in pieces], pieces
    assert sum(starts) >= 2 and not all(starts), pieces
    assert not set(tok.special_ids.tolist()) & set(tok.regular_ids.tolist())


def test_kind_from_the_files_and_one_line_errors(tmp_path, bpe_dir, albert_dir):
  assert tokenizer_files.detect(str(bpe_dir)).kind == "bpe"
  assert tokenizer_files.detect(str(albert_dir)).kind == "sentencepiece"
  vocab = tmp_path / "bert" / "vocab.txt"
  vocab.parent.mkdir()
  vocab.write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nhello\n", encoding="utf-8")
  assert tokenizer_files.detect(str(vocab.parent)) == tokenizer_files.TokenizerFiles(
      "wordpiece", str(vocab))
  # config.data.tokenizer as a path: a WordPiece vocab keeps config.data.lowercase.
  data = pretrain_config.get_config("tiny").data
  data.tokenizer, data.lowercase = str(vocab.parent), False
  wp = tokenizer_lib.load_tokenizer(data)
  assert (wp.kind, wp.vocab_file, wp.lowercase) == ("wordpiece", str(vocab), False)
  data.tokenizer = str(bpe_dir)
  assert tokenizer_lib.load_tokenizer(data).kind == "bpe"
  empty = tmp_path / "empty"
  empty.mkdir()
  (empty / "README.md").write_text("no tokenizer here")
  with pytest.raises(ValueError, match=r"'.*empty' holds no tokenizer files: expected vocab.txt"):
    tokenizer_files.detect(str(empty))
  with pytest.raises(FileNotFoundError, match="nowhere"):
    tokenizer_files.detect(str(tmp_path / "nowhere"))
  lone = tmp_path / "lone"
  lone.mkdir()
  (lone / "vocab.json").write_text(json.dumps({"a": 0}))
  with pytest.raises(FileNotFoundError, match="needs merges.txt beside it"):
    tokenizer_files.detect(str(lone / "vocab.json"))
  (vocab.parent / "spiece.model").write_bytes((albert_dir / "spiece.model").read_bytes())
  with pytest.raises(ValueError, match=r"several tokenizers \(vocab.txt, spiece.model\)"):
    tokenizer_files.detect(str(vocab.parent))
  # Files of the wrong kind or content.
  bad = tmp_path / "bad.model"
  bad.write_bytes(b"not a model")
  with pytest.raises(ValueError, match="bad.model' is not a SentencePiece"):
    tokenizer_lib.SentencePieceTokenizer(str(bad))
  merges = lone / "merges.txt"
  merges.write_text("#version: 0.2\na b c\n", encoding="utf-8")
  with pytest.raises(ValueError, match=r"vocab.json' lacks the special token\(s\)"):
    tokenizer_lib.ByteLevelBPETokenizer(str(lone / "vocab.json"), str(merges))
  no_mask = tmp_path / "m" / "spiece.model"
  no_mask.parent.mkdir()
  _train_spm(no_mask, pad_id=0, pad_piece="<pad>", unk_id=1, unk_piece="<unk>", bos_id=-1,
             eos_id=-1)
  with pytest.raises(ValueError, match=r"lacks the special piece\(s\) \['\[CLS\]'.*albert"):
    tokenizer_lib.SentencePieceTokenizer(str(no_mask))


def test_tokenize_cli_takes_a_tokenizer_directory(bpe_dir, albert_dir):
  lines = ["Café NAÏVE x", "", "the <unk> cat "]
  for directory in (bpe_dir, albert_dir):
    out = io.StringIO()
    assert tokenize_cli.run(["--tokenizer", str(directory)],
                            io.BytesIO(("\n".join(lines) + "\n").encode("utf-8")), out) == 3
    tok = tokenizer_lib.tokenizer_from_path(str(directory))
    assert out.getvalue().split("\n")[:-1] == [" ".join(map(str, ids))
                                               for ids in tok.tokenize_to_ids(lines)]
  out = io.StringIO()  # --cased keeps ALBERT's case (an unknown 'C' here, for instance)
  tokenize_cli.run(["--tokenizer", str(albert_dir), "--cased", "--tokens"],
                   io.BytesIO("Café".encode("utf-8")), out)
  cased = tokenizer_lib.tokenizer_from_path(str(albert_dir), lowercase=False)
  assert out.getvalue() == " ".join(cased.tokenize("Café")) + "\n"
  assert cased.tokenize("Café") != tokenizer_lib.tokenizer_from_path(str(albert_dir)).tokenize(
      "Café")


# -- The pretraining pipeline -------------------------------------------------------


def _write_corpus(tmp_path) -> list[str]:
  rng = random.Random(0)
  docs = ["\n".join(" ".join(rng.choice(_WORDS) for _ in range(rng.randint(3, 10))) + "."
                    for _ in range(rng.randint(1, 6))) for _ in range(24)]
  (tmp_path / "part-0.txt").write_text("\n\n".join(docs) + "\n", encoding="utf-8")
  return docs


def _pipeline(tmp_path, tokenizer, **overrides):
  docs = _write_corpus(tmp_path)
  c = pretrain_config.get_config("tiny").data
  c.source, c.files, c.tokenizer = "files", str(tmp_path / "*.txt"), tokenizer
  c.mode, c.max_predictions_per_seq = "full_sentences", 6
  for k, v in overrides.items():
    c[k] = v
  return pretrain_data.PretrainData(c, seq_len=32, global_batch_size=4, seed=0), docs


@pytest.mark.parametrize("kind", ["roberta", "albert"])
def test_pretraining_batches_with_a_family_tokenizer(tmp_path, kind, bpe_dir, albert_dir):
  directory = str(bpe_dir if kind == "roberta" else albert_dir)
  data, docs = _pipeline(tmp_path, directory, masking="whole_word")
  tok = data.tokenizer
  assert tok.kind == ("bpe" if kind == "roberta" else "sentencepiece")
  assert data.vocab_size == tok.vocab_size
  batch = next(data.train_iterator())
  ids = batch["input_ids"].copy()
  pos, weights = batch["masked_lm_positions"], batch["masked_lm_weights"] > 0
  np.put_along_axis(ids, pos, np.where(weights, batch["masked_lm_ids"],
                                       np.take_along_axis(ids, pos, axis=1)), axis=1)
  assert np.all(ids[:, 0] == tok.cls_id)
  real = batch["input_mask"] > 0
  assert np.all(ids[~real] == tok.pad_id) and np.all(batch["segment_ids"] == 0)
  # Each row is cls, consecutive corpus sentences in the tokenizer's ids (a sep
  # after each document), sep.
  stream = []
  for doc in docs:
    stream += [i for ids_ in tok.tokenize_to_ids(doc.split("\n")) for i in ids_] + [tok.sep_id]
  stream = " " + " ".join(map(str, stream)) + " "
  for row, mask in zip(ids, real):
    row = row[mask]
    assert row[-1] == tok.sep_id and len(row) > 4
    assert " " + " ".join(map(str, row[1:-1])) + " " in stream
  # Masked positions are never specials, and whole words are masked together:
  # a masked continuation piece follows a masked piece of its word.
  masked = np.zeros_like(real)
  np.put_along_axis(masked, pos, weights, axis=1)
  assert not np.isin(ids[masked], tok.special_ids).any() and masked.any()
  # (A continuation right after a special token starts a word.)
  after_special = np.isin(np.roll(ids, 1, axis=1), tok.special_ids)
  cont = tok.is_continuation[ids] & masked & ~after_special
  cont[:, 0] = False
  assert np.all(masked[:, :-1][cont[:, 1:]]), "a word's continuation masked without its start"
  with pytest.raises(ValueError, match="config.data.tokenizer='/nowhere'"):
    _pipeline(tmp_path, "/nowhere")


def test_nsp_mode_is_refused_for_roberta_pairs(tmp_path, bpe_dir):
  # The recipe that trains it is named, so that one change ends the refusals.
  with pytest.raises(ValueError, match=r"mode='nsp'.*</s></s>.*RoBERTa's recipe \(configs/"
                                       r"pretrain.py:VARIANT,recipe=roberta: objective 'mlm', "
                                       r"mode='full_sentences'\)"):
    _pipeline(tmp_path, str(bpe_dir), mode="nsp")


# -- The real tokenizer files (the optional real-data folder) ---------------------------


def _real_lines(data_dir):
  lines = []
  for path in sorted((data_dir / "corpus").rglob("*.txt")):
    lines += path.read_text(encoding="utf-8", errors="replace").split("\n")[::400]
  for path in sorted((data_dir / "glue").rglob("dev.tsv")):
    for line in path.read_text(encoding="utf-8", errors="replace").split("\n")[::8]:
      lines += line.split("\t")
  for path in sorted((data_dir / "squad").glob("*.json")):
    article = json.loads(path.read_text(encoding="utf-8"))["data"][0]
    for para in article["paragraphs"][:10]:
      lines.append(para["context"])
      lines += [qa["question"] for qa in para["qas"]]
  return lines


@pytest.mark.slow
@pytest.mark.parametrize("name,kind", [("roberta-base", "roberta"), ("albert-base-v2", "albert"),
                                       ("deberta-v3-base", "deberta")])
def test_real_tokenizers_match_transformers_fast(shared_data, name, kind):
  directory = shared_data / "tokenizers" / name
  if not directory.is_dir():
    pytest.skip(f"needs the tokenizer files in {directory}")
  ours = tokenizer_lib.tokenizer_from_path(str(directory))
  ref = reference_tokenizer(kind, directory)
  lines = _real_lines(shared_data) + _TRICKY
  assert len(lines) > 1_500
  assert ours.vocab_size == len(ref)
  _assert_parity(ours, ref, lines)


@pytest.mark.parametrize("kind", ["roberta", "albert"])
def test_glue_and_embed_inputs_are_the_family_layout(kind, bpe_dir, albert_dir):
  """GLUE rows and embed inputs of pairs and single texts equal transformers' fast tokenizer
  with longest-first truncation (RoBERTa: `<s> a </s></s> b </s>`, one segment)."""
  from bert_jax.inference import embedding  # pylint: disable=g-import-not-at-top
  from bert_jax.tasks.glue import data as glue  # pylint: disable=g-import-not-at-top
  directory = bpe_dir if kind == "roberta" else albert_dir
  ours = tokenizer_lib.tokenizer_from_path(str(directory))
  fast = reference_tokenizer(kind, directory)
  pairs = [("the quick brown fox jumps over lazy dogs.", "seven wizards hum."),
           ("a", "jumping " * 30), ("Café naïve towns 1,000 and 9, 12", None)]
  examples = [glue.GlueExample(f"t:{i}", a, b, 0, i) for i, (a, b) in enumerate(pairs)]
  rows = glue.encode_examples(ours, examples, 24)
  emb_ids, emb_seg, _ = embedding.encode(ours, [p for p in pairs if p[1] is not None], 24)
  for i, (a, b) in enumerate(pairs):
    want = fast(a, b, truncation="longest_first", max_length=24)
    n = len(want["input_ids"])
    assert rows["input_ids"][i, :n].tolist() == want["input_ids"], (kind, i)
    assert rows["input_mask"][i].sum() == n and (rows["input_ids"][i, n:] == ours.pad_id).all()
    if "token_type_ids" in want:
      assert rows["segment_ids"][i, :n].tolist() == want["token_type_ids"]
    else:
      assert not rows["segment_ids"][i].any()
    if b is not None:
      assert emb_ids[i] == want["input_ids"] and emb_seg[i] == rows["segment_ids"][i, :n].tolist()


@pytest.mark.slow
def test_pretraining_with_bpe_exports_a_bundle_that_carries_it(tmp_path, bpe_dir):
  """A run with RoBERTa's tokenizer records its file in every checkpoint and copies it into
  export/tokenizer/; the fill-mask demo and load_pretrained then use it."""
  from bert_jax.checkpoints import loading  # pylint: disable=g-import-not-at-top
  from bert_jax import pretrain  # pylint: disable=g-import-not-at-top
  _write_corpus(tmp_path)
  c = pretrain_config.get_config("tiny")
  c.data.source, c.data.files, c.data.tokenizer = "files", str(tmp_path / "*.txt"), str(bpe_dir)
  c.objective, c.data.mode, c.data.max_predictions_per_seq = "mlm", "full_sentences", 5
  c.seq_len, c.batch_size, c.total_steps, c.log_every, c.checkpoint_every = 32, 8, 2, 1, 2
  c.fill_mask_example = "the quick brown [MASK] jumps."
  workdir = str(tmp_path / "run")
  summary = pretrain.train(c, workdir)
  assert loading.load_pretrained(workdir + "/checkpoints").tokenizer_file == str(
      bpe_dir / "vocab.json")
  pretrain.export_and_demo(summary, c, workdir)
  exported = loading.load_pretrained(workdir)
  assert exported.tokenizer_file == str(tmp_path / "run" / "export" / "tokenizer" / "vocab.json")
  tok = tokenizer_lib.for_checkpoint(exported)
  assert tok.kind == "bpe" and tok.inv_vocab == tokenizer_lib.tokenizer_from_path(
      str(bpe_dir)).inv_vocab



def test_fill_mask_takes_the_tokenizers_own_mask_token_as_well_as_the_bracketed_one(bpe_dir):
  """RoBERTa's users write `<mask>`: it marks the same position as `[MASK]`."""
  from bert_jax.inference import mask_filling  # pylint: disable=g-import-not-at-top
  tok = tokenizer_lib.tokenizer_from_path(str(bpe_dir))
  assert tok.inv_vocab[tok.mask_id] == "<mask>"
  ours = mask_filling.encode(tok, ["the quick <mask> fox [MASK]."], 64)
  bracketed = mask_filling.encode(tok, ["the quick [MASK] fox [MASK]."], 64)
  assert ours == bracketed and len(ours[1][0]) == 2
  with pytest.raises(ValueError, match=r"has no \[MASK\] \(nor <mask>\)"):
    mask_filling.encode(tok, ["no mask here"], 64)
