"""The release way: the pin's release wheel (provider.py: install; checks.py: prediction and auto's hint)."""
