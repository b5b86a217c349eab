"""Integrations with application frameworks, each imported only by an application that uses it.

`mailroom.contrib.django`: a Django email backend that enqueues in Django's own transaction.
"""
