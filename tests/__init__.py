"""The test suite: unit/ (pure functions), scenarios/ (the CLI end to end), helpers/."""
