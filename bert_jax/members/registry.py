"""Which member module serves a model_type: BertConfig.model_type -> its Member.

The built-in members are listed below; a member module from outside the package
registers its MEMBER with `register`, and nothing else changes for it; a member with a
`recipe_name` is also a pretraining recipe, `configs/pretrain.py:VARIANT,recipe=NAME`. The member modules
import bert_jax.members.base, never this module.
"""
from bert_jax.members import albert
from bert_jax.members import base
from bert_jax.members import bert
from bert_jax.members import deberta
from bert_jax.members import distilbert
from bert_jax.members import electra
from bert_jax.members import modernbert
from bert_jax.members import roberta

# model_type -> the Member serving it.
MEMBERS: dict[str, base.Member] = {}


def register(member: base.Member) -> None:
  """Serves `member.model_type` (and its recipe_name, if any) with `member`."""
  if MEMBERS.get(member.model_type, member) is not member:
    raise ValueError(f"model_type {member.model_type!r} is already registered")
  if member.recipe_name and recipes().get(member.recipe_name, member) is not member:
    raise ValueError(f"recipe {member.recipe_name!r} is already registered")
  MEMBERS[member.model_type] = member


def recipes() -> dict[str, base.Member]:
  """{recipe name: the Member whose pretraining it is} (configs/pretrain.py's recipe=NAME)."""
  return {m.recipe_name: m for m in MEMBERS.values() if m.recipe_name}


# Registered so that recipes() keeps the order configs/pretrain.py has always listed them in
# (bert, roberta, albert, electra, deberta, modernbert).
for _module in (bert, roberta, distilbert, albert, electra, deberta, modernbert):
  register(_module.MEMBER)


def names() -> tuple[str, ...]:
  """Every registered model_type."""
  return tuple(MEMBERS)


def get(model_type: str) -> base.Member:
  """The Member serving `model_type` (ValueError naming the known ones when none does)."""
  if model_type not in MEMBERS:
    raise ValueError(f"model_type {model_type!r} not in {list(MEMBERS)}")
  return MEMBERS[model_type]

