"""Events back to the application: webhook endpoints, their addresses' checks, Standard Webhooks
signatures, and the dispatcher the worker runs to POST every event."""
