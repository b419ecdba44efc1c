"""A pretraining run: its setup, its loop and the ahead-of-time pod compile."""
