"""The command line: cli/main.py parses and dispatches; a module per command with code of its own."""
