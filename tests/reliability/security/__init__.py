"""Security: signatures, presigned URLs, namespace isolation, path tricks, oversized input."""
