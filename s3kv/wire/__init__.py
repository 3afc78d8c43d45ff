"""The S3 wire on the ground floor: signing and verifying (SigV4, SigV2), fast HTTP paths.

Imported by the signer (warp, the S3 backend) and the verifier (the gateway) alike; imports
nothing of s3kv but its ground-floor modules (errors, sizes).
"""
