"""The command line: one module per command; the command table in cli/commands.py (read by the parser, the help,
the completion scripts and the dispatch), each command's handler in cli/handlers.py.

Importing the package imports nothing: the warm call loads the ``ensure`` command's code alone.
"""
