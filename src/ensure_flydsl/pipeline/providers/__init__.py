"""The ways to provision a tree (release wheel, binary cache, source build), behind one interface."""
