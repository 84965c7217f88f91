"""The pin's source: git, what a build of it needs, the root's ownership and step stamps."""
