"""Engine plugins on the native client: ``s3kv.integrations.lmcache`` (LMCache's remote storage
plugin framework; needs the ``s3kv[lmcache]`` extra). Nothing here is imported by the gateway."""
