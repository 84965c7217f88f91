"""The release wheel: its tags and versions, download, shape, provenance and install; the package index's versions."""
