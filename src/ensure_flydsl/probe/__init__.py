"""Running the target interpreter: what it is, what it imports, and whether that is one good tree."""
