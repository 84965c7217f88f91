"""The binary cache: a store (folder or fsspec URL), the archive format, entries and keys."""
