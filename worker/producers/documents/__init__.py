"""Signed document acknowledgements: documents and expected signers, the signature chain, reminders."""
