"""The tool's version: its own module, so that modules low in the layers can name it without importing the API."""

__version__ = "0.1.0"
