"""One module per command that is more than a call into the pipeline."""
