"""lightning_docmt: a PyTorch Lightning experiment suite for document-level NMT."""

__version__ = "0.1.0"
