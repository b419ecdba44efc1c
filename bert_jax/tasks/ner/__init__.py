"""Token classification on CoNLL files, scored by conlleval."""
