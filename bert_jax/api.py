"""The Python API: one loaded checkpoint, the jobs users call it for.

  from bert_jax import Encoder
  enc = Encoder.load("/tmp/minilm")                     # any checkpoint fine-tuning takes
  vectors = enc.embed(["a sentence", "another"], pooling="mean", normalize=True)
  enc.fill_mask("the capital of france is [MASK] .")    # needs the MLM head
  clf = Encoder.load("runs/mrpc/export")                # a GLUE fine-tuning export
  clf.classify([("a sentence", "its paraphrase")])      # [("1", 0.93)]: label, probability
  Encoder.load("runs/ner/export").tag(["John lives in Paris"])  # e.g. [["B-PER", "O", "O", "B-LOC"]]
  Encoder.load("runs/squad/export").answer(["Where does John live?"],
                                           ["John lives in Paris."])  # e.g. ["Paris."]

Each method is the library function its command-line program runs
(`bert_jax.inference.embedding.embed`, `bert_jax.inference.mask_filling.fill_mask`), or the
encoding and decoding its fine-tuning task scores with (bert_jax.tasks: glue, ner, squad), on
the checkpoint loaded once, with the checkpoint's own tokenizer; a fine-tuning
export's bundle.json gives the task and what decoding needs (head, labels,
window options). Each method takes a list of texts (fill_mask also one text) and refuses,
with a ValueError naming it, one string where a list is due, an empty list, a batch size
under 1 and a max_length the model's positions do not hold.
"""
import functools
from typing import Optional, Sequence, Union

from etils import epath
import jax
import numpy as np

from bert_jax.batching import bucket_cost
from bert_jax.batching import length_buckets
from bert_jax.checkpoints import bundle as bundle_lib
from bert_jax.checkpoints import loading
from bert_jax.data.tokenizers import tokenizer as tokenizer_lib
from bert_jax.inference import embedding
from bert_jax.inference import mask_filling
from bert_jax.modeling import model as model_lib
from bert_jax.runtime.text_files import read_json

Text = Union[str, tuple[str, str]]


class Encoder:
  """A loaded checkpoint (params on the host) and its tokenizer.

  Attributes:
    pretrained: the `loading.Pretrained` (params, model config, vocab, source).
    tokenizer: the checkpoint's tokenizer.
    heads: the param groups beside the encoder ('pooler', 'mlm', 'classifier', ...).
    task: the fine-tuned task recorded in a fine-tuning export's bundle.json, or None.
    info: that bundle.json ({} for checkpoints that have none).
  """

  def __init__(self, pretrained: loading.Pretrained):
    self.pretrained = pretrained
    self.tokenizer = tokenizer_lib.for_checkpoint(pretrained)
    self.heads = bundle_lib.heads_of(pretrained.params)
    info = epath.Path(pretrained.source) / bundle_lib.INFO_FILE
    self.info = read_json(info, missing=f"{info} is missing") if info.exists() else {}
    self.task = self.info.get("task")

  @classmethod
  def load(cls, path: str) -> "Encoder":
    """Loads a bundle, a pretraining workdir or its checkpoints/ (see load_pretrained)."""
    return cls(loading.load_pretrained(path))

  @property
  def config(self):
    return self.pretrained.config

  def embed(self, texts: Sequence[Text], *, pooling: Optional[str] = None,
            normalize: Optional[bool] = None, layers: Sequence[int] = (-1,), combine: str = "mean",
            max_length: Optional[int] = None, batch_size: int = 32,
            prompt_name: Optional[str] = None, prompt: Optional[str] = None) -> np.ndarray:
    """float32 [len(texts), dim] embeddings of texts or (a, b) pairs (see bert_jax.embed).

    pooling, normalize and max_length default to what the checkpoint records (a
    sentence-embedding fine-tuning export, a converted sentence-transformers model, whose
    Dense layers are applied too), else mean pooling, not normalised, 128 tokens; a checkpoint
    that names a default prompt has it prepended unless prompt_name or prompt say otherwise
    (prompt_name='' for none), as sentence-transformers' encode does; `embed_settings` says
    which and where each came from."""
    texts = self._texts("embed", texts, batch_size, pairs=True)
    emb, _ = embedding.embed(self.pretrained, texts, pooling=pooling, layers=layers,
                             combine=combine, normalize=normalize, max_length=max_length,
                             batch_size=batch_size, tokenizer=self.tokenizer,
                             prompt_name=prompt_name, prompt=prompt)
    return emb

  def embed_settings(self, *, pooling: Optional[str] = None, normalize: Optional[bool] = None,
                     max_length: Optional[int] = None, prompt_name: Optional[str] = None,
                     prompt: Optional[str] = None) -> embedding.Settings:
    """What `embed` with these arguments uses, and where each came from (`.describe()`:
    'pooling mean (from the checkpoint), L2-normalised (from the checkpoint), ...')."""
    return embedding.settings(self.pretrained, pooling=pooling, normalize=normalize,
                              max_length=max_length, prompt_name=prompt_name, prompt=prompt,
                              flag="")

  def fill_mask(self, texts: Union[str, Sequence[str]],
                top_k: int = 5) -> list:
    """Top-k (token, probability) per `[MASK]`: for one text a list per mask, for a list of
    texts a list of those."""
    one = isinstance(texts, str)
    texts = [texts] if one else self._texts("fill_mask", texts)
    vocab = len(self.pretrained.vocab)
    if not 1 <= top_k <= vocab:
      raise ValueError(f"fill_mask: top_k {top_k} must be in [1, {vocab}] (the vocabulary)")
    result = mask_filling.fill_mask(self.pretrained, texts, top_k=top_k,
                                    tokenizer=self.tokenizer)
    return result[0] if one else result

  def classify(self, texts: Sequence[Text], *, max_length: Optional[int] = None,
               batch_size: int = 32) -> list[tuple[Union[str, float], float]]:
    """Labels of texts or (a, b) pairs with a GLUE fine-tuning export's classifier, or a
    BertForSequenceClassification converted with `convert --from hf` (its id2label).

    Args:
      texts: texts, or (a, b) pairs.
      max_length: tokens per text, longer ones truncated (default 128, or the model's
        positions when it has fewer).
      batch_size: texts per forward pass.

    Returns:
      (label, probability) per text for classification tasks; (score, 1.0) for
      regression (STS-B, problem_type 'regression').

    Raises:
      ValueError: the checkpoint has no classifier, or neither a GLUE task nor labels
        recorded.
    """
    from bert_jax.tasks.glue import data as glue  # pylint: disable=g-import-not-at-top
    if "classifier" not in self.heads:
      raise ValueError(f"{self.pretrained.source} has no classifier of a GLUE task (heads: "
                       f"{list(self.heads)}); load a fine-tuning run's export/")
    if self.task is not None:
      task = glue.get_task(self.task)
      labels, regression = task.labels, task.is_regression
    elif isinstance(self.info.get("labels"), list):  # a converted transformers classifier
      labels, regression = self.info["labels"], not self.info["labels"]
    else:
      raise ValueError(f"{self.pretrained.source} has a classifier but no GLUE task recorded "
                       "(a run's checkpoint, not its bundle): load the run's export/, which "
                       "records its task")
    if max_length is None:  # (a model of fewer positions: all of them)
      max_length = min(128, self.config.max_position_embeddings)
    texts = self._texts("classify", texts, batch_size, max_length, pairs=True)
    examples = [glue.GlueExample(f"text:{i}", *(t if isinstance(t, tuple) else (t, None)), None, i)
                for i, t in enumerate(texts)]
    arrays = glue.encode_examples(self.tokenizer, examples, max_length)
    # Exports from before heads were recorded are cls.
    forward = _classifier_fn(self.config, 1 if regression else len(labels),
                             self.info.get("head", "cls"), self.info.get("head_layers", 4))
    logits = self._outputs(forward, arrays, batch_size, bucketed=True)
    if regression:
      return [(float(x[0]), 1.0) for x in logits]
    probs = np.asarray(jax.nn.softmax(logits.astype(np.float64), -1))
    return [(labels[int(np.argmax(p))], float(np.max(p))) for p in probs]

  def tag(self, texts: Sequence[Union[str, Sequence[str]]], *, scheme: str = "IOB2",
          max_length: Optional[int] = None, batch_size: int = 32) -> list[list[str]]:
    """Per-word tags with an NER fine-tuning export (configs/ner.py's export/).

    Args:
      texts: sentences, each a string (split on whitespace into words) or a list of words.
      scheme: 'IOB2' (every entity starts with B-TYPE) or 'IOB1' (entities start with
        I-TYPE, B-TYPE only right after an entity of the same type, as CoNLL-2003).
      max_length: word pieces per window (default: the fine-tuning run's max_seq_length,
        else 128 or the model's positions when it has fewer);
        longer sentences are split into windows at word boundaries, as in fine-tuning.
      batch_size: windows per forward pass.

    Returns:
      One tag per word of each text (O, or B-/I- of an entity type of the training
      file) in `scheme`, decoded as fine-tuning's evaluation does
      (bert_jax.tasks.ner.data.predicted_tags, then ner.convert).

    Raises:
      ValueError: the checkpoint is not an NER export with its labels, or an
        unknown scheme.
    """
    from bert_jax.tasks.ner import data as ner  # pylint: disable=g-import-not-at-top
    if scheme not in ner.SCHEMES:
      raise ValueError(f"scheme {scheme!r} not in {list(ner.SCHEMES)}")
    labels = self.info.get("labels")
    if "token_classifier" not in self.heads or self.task != "ner" or not labels:
      raise ValueError(f"{self.pretrained.source} is not an NER fine-tuning export with its "
                       f"labels in {bundle_lib.INFO_FILE} (task {self.task!r}, heads "
                       f"{list(self.heads)}); load the export/ of a configs/ner.py run")
    if max_length is None:
      max_length = self.info.get("max_seq_length",
                                 min(128, self.config.max_position_embeddings))
    texts = self._texts("tag", texts, batch_size, max_length)
    sentences = [ner.Sentence(t.split() if isinstance(t, str) else list(t), None, [])
                 for t in texts]
    arrays = ner.encode(self.tokenizer, sentences, labels, max_length)
    logits = self._outputs(_token_classifier_fn(self.config, len(labels)), arrays, batch_size,
                           bucketed=False)
    # Outputs are in the scheme the model learned (info['scheme']; the training file's in
    # older exports): converting reads either scheme, or a mix, alike.
    return [ner.convert(tags, scheme)
            for tags in ner.predicted_tags(logits, arrays, sentences, labels)]

  def answer(self, questions: Sequence[str], contexts: Sequence[str], *,
             batch_size: int = 32) -> list[str]:
    """Answer spans with a SQuAD fine-tuning export (configs/squad.py's export/).

    Args:
      questions: the questions.
      contexts: one context paragraph per question.
      batch_size: windows per forward pass.

    Returns:
      Per question, the answer text from its context, as fine-tuning's evaluation
      decodes it (bert_jax.tasks.squad.predictions.postprocess_predictions, with the run's
      windowing and n-best options); '' when a SQuAD 2.0 model predicts no answer, and
      'empty' (BERT's reference's text) when no span of the context is a valid answer.

    Raises:
      ValueError: the checkpoint is not a SQuAD export, or the counts differ.
    """
    from bert_jax.tasks.squad import data as squad_data  # pylint: disable=g-import-not-at-top
    from bert_jax.tasks.squad import offsets as squad_offsets  # pylint: disable=g-import-not-at-top
    # pylint: disable-next=g-import-not-at-top
    from bert_jax.tasks.squad import predictions as squad_predictions
    if "qa_outputs" not in self.heads or "version" not in self.info:
      raise ValueError(f"{self.pretrained.source} is not a SQuAD fine-tuning export (task "
                       f"{self.task!r}, heads {list(self.heads)}); load the export/ of a "
                       "configs/squad.py run")
    info = self.info
    questions = self._texts("answer", questions, batch_size)
    contexts = self._texts("answer", contexts)
    empty = [i for i, c in enumerate(contexts) if not c.strip()]
    if empty:
      raise ValueError(f"answer: context {empty[0]} is empty (nothing to answer from)")
    examples = squad_data.examples_from_texts(questions, contexts)
    arrays, features = squad_offsets.converter(self.tokenizer)(
        self.tokenizer, examples, info["max_seq_length"], info["doc_stride"],
        info["max_query_length"], is_training=False)
    start, end = self._outputs(_span_fn(self.config), arrays, batch_size, bucketed=False)
    predictions, _, _ = squad_predictions.postprocess_predictions(
        examples, features, start, end, tokenizer=self.tokenizer,
        n_best_size=info["n_best_size"], max_answer_length=info["max_answer_length"],
        version_2_with_negative=info["version"] == "2.0",
        null_score_diff_threshold=info["null_score_diff_threshold"])
    return [predictions[e.qas_id] for e in examples]

  def _texts(self, method: str, texts, batch_size: int = 1,
             max_length: Optional[int] = None, pairs: bool = False) -> list:
    """`texts` as a list, after the checks every method makes (ValueError naming `method`):
    a list, not one string (which would be read as one text per character); not empty; with
    `pairs`, a pair as a tuple (a list would be read as one text); a batch size of at least
    1; a length the model's positions hold."""
    if isinstance(texts, str):
      raise ValueError(f"{method}: texts is one string; give a list of texts ([text])")
    texts = list(texts)
    if not texts:
      raise ValueError(f"{method}: no texts")
    if pairs:
      bad = [i for i, t in enumerate(texts) if not isinstance(t, str) and not (
          isinstance(t, tuple) and len(t) == 2 and all(isinstance(x, str) for x in t))]
      if bad:
        raise ValueError(f"{method}: text {bad[0]} is a {type(texts[bad[0]]).__name__}; give "
                         "each text as a string, or a pair as a tuple (a, b)")
    if batch_size < 1:
      raise ValueError(f"{method}: batch_size {batch_size} must be >= 1")
    longest = self.config.max_position_embeddings
    if max_length is not None and not 2 <= max_length <= longest:
      raise ValueError(f"{method}: max_length {max_length} must be in [2, {longest}] (the "
                       "model's max positions)")
    return texts

  def _outputs(self, forward, arrays: dict, batch_size: int, bucketed: bool):
    """forward(params, input_ids, input_mask, segment_ids) over every row of `arrays`, in
    row order; bucketed: rows sorted by length into buckets chosen as fine-tuning's
    (bucket_cost.auto_buckets; per-example outputs only), else batches at full length."""
    n, seq_len = arrays["input_ids"].shape
    if bucketed:
      lengths = length_buckets.row_lengths(arrays["input_mask"])
      batches = length_buckets.eval_batches(
          lengths, batch_size,
          bucket_cost.auto_buckets(self.config, [(lengths, 1.0 / 3.0)], seq_len))
    else:
      batches = length_buckets.sequential_batches(np.arange(n), batch_size, seq_len,
                                                  pad_last=True)
    params = model_lib.match_scan_layout(self.pretrained.params, self.config)
    with jax.default_matmul_precision("float32"):
      chunks = [jax.tree.map(np.asarray, forward(params, *length_buckets.cut(
          arrays, batch, ("input_ids", "input_mask", "segment_ids")).values()))
                for batch in batches]
    return length_buckets.scatter_outputs(chunks, batches, n)


def _jit_apply(module):
  return jax.jit(lambda params, ids, mask, seg: module.apply({"params": params}, ids, mask, seg))


@functools.lru_cache(maxsize=8)
def _classifier_fn(config, num_labels: int, head: str, head_layers: int):
  from bert_jax.tasks.glue import task as glue_task  # pylint: disable=g-import-not-at-top
  return _jit_apply(glue_task.sequence_model(config, num_labels, head, head_layers))


@functools.lru_cache(maxsize=8)
def _token_classifier_fn(config, num_labels: int):
  return _jit_apply(model_lib.BertForTokenClassification(config, num_labels=num_labels))


@functools.lru_cache(maxsize=8)
def _span_fn(config):
  return _jit_apply(model_lib.BertForQuestionAnswering(config))
