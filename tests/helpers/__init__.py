"""What the tests share: the workspace, fixture repositories and trees, processes."""
