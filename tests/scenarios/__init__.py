"""The tool end to end: real git repositories, processes, locks, kills."""
