"""Tokenizers (WordPiece, SentencePiece, byte-level BPE), their files, and vocabulary building."""
