"""Tests of the producers: lifecycle emails and birthday emails."""
