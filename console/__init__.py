"""The operators' Textual console: screens, widgets and their data source."""
