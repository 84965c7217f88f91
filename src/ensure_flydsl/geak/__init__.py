"""The GEAK drop-in: ``ensure-flydsl skill DIR`` writes a folder that replaces GEAK's ``ensure_flydsl`` skill."""
