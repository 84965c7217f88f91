"""The GEAK drop-in: ``ensure-flydsl skill DIR`` writes a folder that replaces GEAK's
``perf_knowledge/expert_skills/skills/ensure_flydsl/`` (``folder.py``), with this tool and the libraries it
needs vendored for a bare ``python3`` (``vendor.py``), and the commit it was made from (``provenance.py``)."""
