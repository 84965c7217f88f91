"""The host store: every tree the tool installs on this host, kept once, content-addressed, and linked into
each root that uses it (reflink, else hardlink, else copy).  See docs/store.md."""
