"""The gateway: the S3-compatible front, the native /v1 API and operations endpoints."""
