"""Batch shapes: length buckets, packing rows, and the bucket cost model."""
